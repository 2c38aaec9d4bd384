"""Bearer authentication of the admin API (spec, Authentication 3 and 6).

Falcon middleware, run after routing (an unknown path stays a 404):

* resources outside ``/admin/api`` (the dashboard, ``GET /``) and those marked
  ``public = True`` (``GET /admin/api/config``, ``POST /admin/api/session``) need nothing;
* every other resource needs ``Authorization: Bearer <token>`` naming a live token whose
  subject still stands (401 ``unauthorized`` otherwise: missing, malformed, unknown, expired,
  revoked, or its subject left the roster or the break-glass password changed:
  :meth:`TokenAuthority.check`);
* a token of scope ``read`` may only ``GET`` (and ``HEAD``): any other method is 403
  ``read_only`` with a message saying so, checked before the route runs, so a refused request
  changes nothing. A resource marked ``mcp_exempt = True`` skips this method check, and so
  does one marked ``any_scope = True`` (a logout: a read-only token may end itself). (The MCP
  endpoint is not a Falcon resource: :mod:`scheduler.admin.mcp` checks its bearer before the
  SDK and enforces scope per tool.)

The principal is left in ``req.context.principal`` and the raw token in ``req.context.token``.
"""

from __future__ import annotations

from typing import Any

import falcon.asgi

from ipc.bearer import bearer_token
from scheduler.admin.errors import ReadOnly, Unauthorized
from scheduler.admin.tokens import TokenAuthority

__all__ = ["AdminAuth", "bearer_token"]

_READ_METHODS = frozenset({"GET", "HEAD"})


class AdminAuth:
    """See the module docstring."""

    def __init__(self, tokens: TokenAuthority) -> None:
        self.tokens = tokens

    async def process_resource(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                               resource: Any, params: dict[str, Any]) -> None:
        req.context.principal = None
        req.context.token = None
        if resource is None or getattr(resource, "public", False) \
                or not req.path.startswith("/admin/api"):
            return
        token = bearer_token(req.get_header("Authorization"))
        if token is None:
            raise Unauthorized("missing or malformed Authorization header (want: Bearer <token>)")
        principal = await self.tokens.check(token)
        if principal.scope != "full" and req.method not in _READ_METHODS \
                and not getattr(resource, "mcp_exempt", False) \
                and not getattr(resource, "any_scope", False):
            raise ReadOnly()
        req.context.principal = principal
        req.context.token = token
