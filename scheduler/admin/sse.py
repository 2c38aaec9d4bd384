"""Server-sent events for the admin listener: snapshot channels and the log ring.

* :class:`Channel`: the latest value of something that changes as a whole (the operation list,
  the job sampler's snapshot) with a version number. A viewer is sent the latest value on
  each change; a viewer that fell behind (it was not reading while two or more versions went
  by) first gets an explicit ``event: gap`` message saying how many it missed.
* :class:`LogRing`: numbered log lines, the newest ``capacity`` kept, read by cursor; a viewer
  whose cursor fell out of the ring gets ``event: gap`` before the next lines.

Falcon drives the streams (``resp.sse``) and notices a viewer that went away when a message is
written, hence a keep-alive comment every ``KEEPALIVE_SECS`` of silence.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from falcon.asgi import SSEvent

from ipc.sse import RawEvent, frame

__all__ = ["Channel", "LogRing", "RawEvent", "channel_stream", "frame", "log_stream"]

KEEPALIVE_SECS = 15.0
POLL_SECS = 0.2
BATCH_LINES = 500


def _json(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), default=str)


class Channel:
    """The latest value and its version; waiters are woken on each publish."""

    def __init__(self) -> None:
        self.version = 0
        self.latest: Any = None
        self.viewers = 0
        self._changed = asyncio.Event()

    def publish(self, value: Any) -> None:
        self.version += 1
        self.latest = value
        ev, self._changed = self._changed, asyncio.Event()
        ev.set()

    async def wait(self, timeout: float) -> bool:
        """True when something was published within ``timeout``."""
        ev = self._changed
        try:
            await asyncio.wait_for(ev.wait(), timeout)
            return True
        except TimeoutError:
            return False


async def channel_stream(channel: Channel, event: str,
                         keepalive: float = KEEPALIVE_SECS) -> AsyncIterator[SSEvent]:
    """The SSE messages of one viewer of ``channel`` (see :class:`Channel`)."""
    channel.viewers += 1
    try:
        yield RawEvent(b"retry: 2000\n\n")
        sent = channel.version
        if channel.latest is not None:
            yield RawEvent(frame(_json(channel.latest), event=event, event_id=str(sent)))
        while True:
            if channel.version == sent and not await channel.wait(keepalive):
                yield RawEvent(b": keepalive\n\n")
                continue
            version = channel.version
            if version > sent + 1:
                yield RawEvent(frame(_json({"missed": version - sent - 1,
                                            "message": "updates were skipped while this viewer "
                                                       "was not reading; the next one is the "
                                                       "whole current state"}), event="gap"))
            yield RawEvent(frame(_json(channel.latest), event=event, event_id=str(version)))
            sent = version
    finally:
        channel.viewers -= 1


class LogRing(logging.Handler):
    """A logging handler keeping the newest ``capacity`` lines, numbered from 1."""

    def __init__(self, capacity: int = 5000) -> None:
        super().__init__(level=logging.INFO)
        self.lines: deque[dict[str, Any]] = deque(maxlen=capacity)
        self.last = 0  # number of the newest line
        self._lock = threading.Lock()  # records arrive from worker threads too

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string must not break logging
            msg = str(record.msg)
        line = {"at": int(record.created * 1000), "level": record.levelname.lower(),
                "logger": record.name, "message": msg[:4000]}
        with self._lock:
            self.last += 1
            line["n"] = self.last
            self.lines.append(line)

    def since(self, cursor: int,
              limit: int = BATCH_LINES) -> tuple[list[dict[str, Any]], int, bool]:
        """Lines after ``cursor`` (at most ``limit``), the new cursor, and whether lines
        between the cursor and the oldest kept one were lost."""
        with self._lock:
            if not self.lines or cursor >= self.last:
                return [], max(cursor, 0) if cursor <= self.last else self.last, False
            first = self.lines[0]["n"]
            gap = cursor + 1 < first
            start = max(cursor + 1, first)
            skip = start - first
            out = [self.lines[i] for i in range(skip, min(len(self.lines), skip + limit))]
        return out, out[-1]["n"] if out else cursor, gap

    def tail_cursor(self, backfill: int) -> int:
        """The cursor that makes the next read return the last ``backfill`` lines."""
        with self._lock:
            first = self.lines[0]["n"] if self.lines else self.last + 1
            return max(self.last - backfill, first - 1)


async def log_stream(ring: LogRing, *, backfill: int, tail: bool, after: int | None = None,
                     keepalive: float = KEEPALIVE_SECS) -> AsyncIterator[SSEvent]:
    """The scheduler's own log lines as SSE (event id = line number).

    ``after`` (a reconnecting viewer's ``Last-Event-ID``) resumes after that line: ``event:
    gap`` first when lines after it are gone from the ring, or when it is beyond the newest
    line (this process numbered from 1 again: a restart), then the backfill."""
    yield RawEvent(b"retry: 2000\n\n")
    if after is not None and after > ring.last:
        yield RawEvent(frame(_json({"message": "the scheduler restarted: lines logged before "
                                               "it are not available"}), event="gap"))
        after = None
    cursor = ring.tail_cursor(backfill) if after is None else after
    quiet_since = time.monotonic()
    while True:
        lines, cursor_after, gap = ring.since(cursor)
        if gap:
            yield RawEvent(frame(_json({"message": "log lines were dropped before this viewer "
                                                   "read them"}), event="gap"))
        if lines:
            yield RawEvent(b"".join(frame(_json(ln), event_id=str(ln["n"])) for ln in lines))
            quiet_since = time.monotonic()
        cursor = cursor_after
        if not tail and len(lines) < BATCH_LINES:
            return
        if lines and len(lines) == BATCH_LINES:
            continue  # a backlog: drain it at once
        if time.monotonic() - quiet_since >= keepalive:
            yield RawEvent(b": keepalive\n\n")
            quiet_since = time.monotonic()
        await asyncio.sleep(POLL_SECS)
