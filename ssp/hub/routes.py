"""The gateway <-> hub contract's route table (`ipc.messages`) and its dispatcher: every
route names the component method that answers it; a failure that escapes a route is answered
by the one mapping of `ssp.hub.errors`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ipc.messages import ErrorCode, error_reply
from ssp.hub.errors import failure_reply

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

#: Every route of the contract, and the component (attribute of the `Hub`) and method that
#: answers it. Jobs and backends add their own (`ssp.jobs.job_routes`,
#: `ssp.backends.backend_routes`).
ROUTES: Mapping[str, tuple[str, str]] = {
    "GET /health": ("introspection", "health"),
    "GET /version": ("introspection", "version_route"),
    "GET /info": ("introspection", "info"),
    "GET /info/text": ("introspection", "info_text"),
    "POST /ingest": ("admission", "ingest"),
    "POST /view/register": ("registry", "register"),
    "POST /view/unregister": ("lifecycle", "unregister_route"),
    "POST /reset": ("loading", "reset_route"),
    "POST /admin/reload": ("loading", "reload_route"),
    "POST /log": ("introspection", "log"),
    "GET /logs": ("introspection", "logs"),
    "GET /debug/view/{view_id}": ("introspection", "debug_view"),
    "GET /debug/deps": ("introspection", "debug_deps"),
    "GET /debug/memory": ("introspection", "debug_memory"),
    "GET /debug/catchup-rows/{table}": ("introspection", "debug_catchup"),
    "GET /debug/heartbeat": ("introspection", "debug_heartbeat"),
    # the standalone maintenance plane (`ssp.hub.backups`)
    "POST /backup/create": ("backups", "create"),
    "GET /backup/status": ("backups", "status"),
    "GET /backup/status/{backup_id}": ("backups", "one_backup"),
    "POST /backup/restore": ("backups", "restore"),
    "GET /backup/restore/status/{restore_id}": ("backups", "one_restore"),
}


def bind(owner: Any, extra: Mapping[str, Handler] = {}) -> dict[str, Handler]:
    """The handlers of `ROUTES` on `owner`'s components, plus `extra`."""
    out: dict[str, Handler] = {route: getattr(getattr(owner, component), method)
                               for route, (component, method) in ROUTES.items()}
    out.update(extra)
    return out


async def dispatch(handlers: Mapping[str, Handler], req: Any) -> dict[str, Any]:
    """Answer one gateway request: 400 when it is not a request, 404 for an unknown route,
    the handler's reply, or the reply `failure_reply` maps an escaped failure to."""
    if not isinstance(req, dict) or not isinstance(req.get("route"), str):
        return error_reply(400, ErrorCode.INVALID, "malformed hub request")
    route = req["route"]
    handler = handlers.get(route)
    if handler is None:
        return error_reply(404, ErrorCode.NOT_FOUND, f"no route {route}")
    try:
        return await handler(req)
    except Exception as e:
        answer = failure_reply(route, e)
        if answer is None:
            raise
        return answer
