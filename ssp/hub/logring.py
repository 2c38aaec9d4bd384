"""The SSP's own log lines, numbered, for `GET /logs` (`LogRing`)."""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from ipc.messages import logs_reply

LOG_RING = 10_000


class LogRing(logging.Handler):
    """The SSP's own log lines, numbered 1, 2, 3..., for `GET /logs`."""

    def __init__(self, size: int = LOG_RING) -> None:
        super().__init__(logging.INFO)
        self.lines: deque[tuple[int, Any]] = deque(maxlen=size)
        self.count = 0
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.add(self.format(record))
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)

    def add(self, line: Any) -> None:
        """Append one line (a string or a JSON object)."""
        self.count += 1
        self.lines.append((self.count, line))

    def poll(self, cursor: int | None, backfill: int | None, cap: int = 500) -> dict[str, Any]:
        """Lines after `cursor` (or the last `backfill`), per the `/logs` contract.

        The first poll (no cursor) returns the whole backfill asked for: the gateway has
        already bounded it (0..10,000, the ring's size). A follow-up poll returns at most
        `cap` lines. `gap` is true when lines the viewer never saw are gone: the cursor fell
        behind the ring, or it is ahead of the last line (the SSP restarted and numbering began
        again), in which case the viewer gets everything still held.
        """
        if cursor is None:
            n = max(0, min(backfill or 0, len(self.lines)))
            picked = list(self.lines)[len(self.lines) - n:] if n else []
            return logs_reply([ln for _, ln in picked], picked[-1][0] if picked else self.count,
                              False)
        if cursor > self.count:
            picked = list(self.lines)[-cap:]
            return logs_reply([ln for _, ln in picked], self.count, True)
        first = self.lines[0][0] if self.lines else self.count + 1
        gap = cursor + 1 < first and cursor < self.count
        picked = [(i, ln) for i, ln in self.lines if i > cursor][:cap]
        return logs_reply([ln for _, ln in picked], picked[-1][0] if picked else cursor, gap)
