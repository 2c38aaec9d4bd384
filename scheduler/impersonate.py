"""The scheduler ingest listener's `POST /impersonate/mint` and `POST /impersonate/users`
(spec, Authentication 2): the one exception to the listener being unauthenticated.

Order of checks: 404 unless `SVC_IMPERSONATION=on` and `SVC_AUTH_SECRET` is non-empty (so a
disabled listener reveals nothing), then the shared bearer in constant time (`ipc.bearer`,
401), then the body (400 `invalid`). The rules are `maintenance.impersonation`'s, the same as
the SSP's; the user search reads the live database.
"""

from __future__ import annotations

from typing import Any

import falcon
import falcon.asgi

from dbclient import DbError, DbQueryError
from dbclient.errors import UNREACHABLE_CODE, unreachable_message
from engine.jsonvalues import to_json
from ipc.bearer import BearerAuth
from ipc.body import DEFAULT_MAX_BODY_BYTES, check_content_type, parse_json, read_bytes
from ipc.httperrors import HttpError, bad_request
from ipc.messages import ErrorCode
from maintenance.impersonation import Impersonation, Invalid, UserSearch, shape_users

__all__ = ["add_impersonation_routes"]

_DISABLED = ("impersonation is disabled (SVC_IMPERSONATION=on and a non-empty "
             "SVC_AUTH_SECRET enable it)")


class _Route:
    def __init__(self, s: Any, imp: Impersonation, auth: BearerAuth) -> None:
        self.s = s
        self.imp = imp
        self.auth = auth

    async def body(self, req: falcon.asgi.Request) -> Any:
        if not self.imp.enabled:
            raise HttpError(404, ErrorCode.NOT_FOUND, _DISABLED)
        self.auth.check(req.get_header("Authorization"))
        check_content_type(req.content_type)
        return parse_json(await read_bytes(req, DEFAULT_MAX_BODY_BYTES))


class Mint(_Route):
    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await self.body(req)
        try:
            resp.media = self.imp.mint(body).body()
        except Invalid as e:
            raise bad_request(str(e)) from None


class Users(_Route):
    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await self.body(req)
        try:
            search = UserSearch.from_body(body)
        except Invalid as e:
            raise bad_request(str(e)) from None
        text, variables = search.query()
        try:
            result = await self.s.db.query(text, variables, idempotent=True)
        except DbQueryError as e:
            raise bad_request(f"user search failed: {e.engine_message}") from None
        except DbError:
            raise HttpError(503, UNREACHABLE_CODE, unreachable_message()) from None
        resp.media = shape_users(to_json(result[-1] or []), to_json(result[-2]), search.fields)


def add_impersonation_routes(app: falcon.asgi.App[Any, Any], s: Any) -> None:
    """Mount both routes on the ingest listener of scheduler `s`."""
    cfg = s.cfg
    imp = Impersonation(cfg.impersonation, cfg.auth_secret, cfg.db.namespace, cfg.db.database)
    auth = BearerAuth(cfg.auth_secret)
    app.add_route("/impersonate/mint", Mint(s, imp, auth))
    app.add_route("/impersonate/users", Users(s, imp, auth))
