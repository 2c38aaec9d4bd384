"""The hub's `POST /impersonate/mint` and `POST /impersonate/users` (spec, SSP endpoints):
the shared rules of `maintenance.impersonation` over the hub's database connection.

The gateway has already checked the bearer (constant time, `ipc.bearer`); here: 404 unless
`SVC_IMPERSONATION=on` and `SVC_AUTH_SECRET` is non-empty, 400 `invalid` for a bad body (and
for a user search on a table the database does not have), 200 otherwise.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from dbclient import DbQueryError, DbTimeout
from engine.jsonvalues import to_json
from ipc.messages import ErrorCode, error_reply, reply
from maintenance.impersonation import Impersonation, Invalid, UserSearch, shape_users

__all__ = ["impersonation_routes"]

Route = Callable[[Any, dict[str, Any]], Awaitable[dict[str, Any]]]

_DISABLED = ("impersonation is disabled (SVC_IMPERSONATION=on and a non-empty "
             "SVC_AUTH_SECRET enable it)")


def of_config(cfg: Any) -> Impersonation:
    """The impersonation settings of an SSP configuration (`ssp.config.SspConfig`)."""
    return Impersonation(cfg.impersonation, cfg.auth_secret, cfg.db.namespace, cfg.db.database)


def impersonation_routes(imp: Impersonation) -> dict[str, Route]:
    """The two routes' handlers (called with the hub and the gateway request)."""

    async def mint(hub: Any, req: dict[str, Any]) -> dict[str, Any]:
        if not imp.enabled:
            return error_reply(404, ErrorCode.NOT_FOUND, _DISABLED)
        try:
            return reply(200, imp.mint(req.get("body")).body())
        except Invalid as e:
            return error_reply(400, ErrorCode.INVALID, str(e))

    async def users(hub: Any, req: dict[str, Any]) -> dict[str, Any]:
        if not imp.enabled:
            return error_reply(404, ErrorCode.NOT_FOUND, _DISABLED)
        try:
            search = UserSearch.from_body(req.get("body"))
        except Invalid as e:
            return error_reply(400, ErrorCode.INVALID, str(e))
        text, variables = search.query()
        try:
            result = await hub.db.query(text, variables, idempotent=True)
        except DbTimeout:
            raise  # 503 by the hub's one failure mapping
        except DbQueryError as e:
            return error_reply(400, ErrorCode.INVALID, f"user search failed: {e.engine_message}")
        roster, rows = result[-2], result[-1]
        return reply(200, shape_users(to_json(rows or []), to_json(roster), search.fields))

    return {"POST /impersonate/mint": mint, "POST /impersonate/users": users}
