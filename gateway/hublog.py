"""The gateway's own warnings and errors, copied to the hub's log so `GET /logs` shows them.

Each gunicorn worker's stderr reaches the hub's stderr only; the SSP's log stream is the hub's
buffer. This handler sends each record of level WARNING and above as a `POST /log` request
with `data: {source: "gateway", pid}`, fire-and-forget: a hub that does not answer loses the
copy (the stderr line remains), and nothing here ever logs, so it cannot loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any

from ipc.messages import request

from .hub import HubLink, HubUnavailable

_LEVELS = {logging.CRITICAL: "error", logging.ERROR: "error", logging.WARNING: "warn",
           logging.INFO: "info", logging.DEBUG: "debug"}
_MAX_IN_FLIGHT = 64  # a burst of errors must not pile up tasks


class HubLogHandler(logging.Handler):
    """logging.Handler that forwards records to the hub's log buffer."""

    def __init__(self, hub: HubLink, level: int = logging.WARNING, timeout: float = 2.0) -> None:
        super().__init__(level)
        self._hub = hub
        self._timeout = timeout
        self._tasks: set[asyncio.Task[None]] = set()
        self.setFormatter(logging.Formatter("%(name)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        """Schedule the copy on the running loop (records outside a loop stay on stderr)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if len(self._tasks) >= _MAX_IN_FLIGHT:
            return
        try:
            message = self.format(record)
        except Exception:  # noqa: BLE001 - a bad format string must not break the request
            return
        level = _LEVELS.get(record.levelno, "warn" if record.levelno < logging.ERROR else "error")
        body = {"message": message, "level": level, "data": {"source": "gateway", "pid": os.getpid()}}
        task = loop.create_task(self._send(body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, body: dict[str, Any]) -> None:
        with contextlib.suppress(HubUnavailable, OSError, ValueError, TypeError):
            await self._hub.call(request("POST /log", body, timeout_secs=self._timeout), self._timeout)
