"""Bounded per-app logs: a ring of the last N lines of each app, with the time, the stream
and a level guessed from the text, and the filtered read the platform's log routes need
(level, text, time window, a `seq` cursor, `limit`, `truncated`)."""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Iterable

from apps.model import LogLine, Stream

__all__ = ["LEVELS", "LogBook", "MAX_LINE", "guess_level"]

#: severity order; a filter `level=warn` keeps warn and error
LEVELS = ("debug", "info", "warn", "error")
#: longer lines are cut (a runaway line must not hold the ring's memory)
MAX_LINE = 8192

_LEVEL_WORDS = re.compile(
    r"(?<![A-Za-z])(?P<w>fatal|panic|critical|crit|error|err|exception|traceback|warning|warn|"
    r"info|debug|trace)(?![A-Za-z])", re.IGNORECASE)
_WORD_LEVEL = {"fatal": "error", "panic": "error", "critical": "error", "crit": "error",
               "error": "error", "err": "error", "exception": "error", "traceback": "error",
               "warning": "warn", "warn": "warn", "info": "info", "debug": "debug",
               "trace": "debug"}


def guess_level(text: str, stream: Stream) -> str:
    """The level a line most likely has: the first level word in its first 80 characters
    (`ERROR`, `level=warn`, `"level":"info"`, `Traceback`), else `info`. The stream alone
    says little: many servers log everything to stderr."""
    m = _LEVEL_WORDS.search(text[:80])
    if m is not None:
        return _WORD_LEVEL[m.group("w").lower()]
    return "info"


class LogBook:
    """The rings of every app of one supervisor and the sequence they share."""

    def __init__(self, lines_per_app: int, sink: Callable[[LogLine], None] | None = None
                 ) -> None:
        if lines_per_app < 1:
            raise ValueError("lines_per_app must be 1 or more")
        self.lines_per_app = lines_per_app
        self._sink = sink
        self._rings: dict[str, deque[LogLine]] = {}
        self._dropped: dict[str, int] = {}
        self._seq = 0

    def add(self, app: str, stream: Stream, text: str, level: str | None = None) -> LogLine:
        text = text.rstrip("\r\n")
        if len(text) > MAX_LINE:
            text = text[:MAX_LINE] + f" [... {len(text) - MAX_LINE} characters cut]"
        self._seq += 1
        line = LogLine(self._seq, time.time(), app, stream,
                       level or guess_level(text, stream), text)
        ring = self._rings.setdefault(app, deque())
        if len(ring) == self.lines_per_app:
            ring.popleft()
            self._dropped[app] = self._dropped.get(app, 0) + 1
        ring.append(line)
        if self._sink is not None:
            try:
                self._sink(line)
            except Exception as e:
                # a sink that fails (a closed terminal) must not stop the reading: an app
                # whose pipe is not drained blocks on its next write
                self._sink = None
                self.add(app, "supervisor", f"the log sink failed ({type(e).__name__}); "
                         "lines are kept in the ring only", "warn")
        return line

    def tail(self, app: str, n: int) -> list[LogLine]:
        ring = self._rings.get(app, deque())
        return list(ring)[-n:] if n > 0 else []

    def read(self, app: str | None = None, *, limit: int = 200, level: str | None = None,
             text: str | None = None, since: float | None = None, after: int | None = None
             ) -> tuple[list[LogLine], bool]:
        """The newest `limit` lines matching every filter, oldest first, and whether more
        lines matched than are returned or may have been dropped from a ring (`truncated`).
        `app` None: every app. `level`: at least this severity. `text`: a case-insensitive
        substring. `since`: epoch seconds. `after`: a `seq` cursor (lines after it)."""
        if limit < 1:
            raise ValueError("limit must be 1 or more")
        if level is not None and level not in LEVELS:
            raise ValueError(f"level must be one of {', '.join(LEVELS)}")
        floor = LEVELS.index(level) if level is not None else 0
        needle = text.lower() if text else None
        names = [app] if app is not None else list(self._rings)
        source: Iterable[LogLine] = (
            sorted((ln for n in names for ln in self._rings.get(n, ())), key=lambda ln: ln.seq)
            if app is None else self._rings.get(app, ()))
        found = [ln for ln in source
                 if LEVELS.index(ln.level) >= floor
                 and (needle is None or needle in ln.text.lower())
                 and (since is None or ln.at >= since)
                 and (after is None or ln.seq > after)]
        truncated = len(found) > limit
        if not truncated:
            # lines the window asks for may have left a ring already
            for n in names:
                ring = self._rings.get(n)
                if not self._dropped.get(n) or not ring:
                    continue
                oldest = ring[0]
                if ((since is None or since < oldest.at)
                        and (after is None or after < oldest.seq - 1)):
                    truncated = True
        return found[-limit:], truncated
