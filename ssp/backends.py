"""The hub's `PUT /backends` route over the backend health list (`maintenance.backends`,
shared with the scheduler)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ipc.messages import ErrorCode, error_reply, reply
from maintenance.backends import BackendListError, BackendMonitor, parse_backends

__all__ = ["backend_routes"]


def backend_routes(monitor_of: Callable[[Any], BackendMonitor]
                   ) -> dict[str, Callable[[Any, dict[str, Any]], Awaitable[dict[str, Any]]]]:
    """The hub's handler for `PUT /backends` (400 naming the bad element; the reply shows the
    new list masked)."""

    async def put(hub: Any, req: dict[str, Any]) -> dict[str, Any]:
        try:
            backends = parse_backends(req.get("body"))
        except BackendListError as e:
            return error_reply(400, ErrorCode.INVALID, str(e))
        monitor = monitor_of(hub)
        monitor.replace(backends)
        return reply(200, {"count": len(backends),
                           "backends": [monitor.entry(b) for b in backends]})

    return {"PUT /backends": put}
