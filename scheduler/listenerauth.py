"""Who may call which route of the scheduler's ingest listener (spec, Authentication 2).

The listener sits on a private network and the spec leaves its data plane open: `/ingest`,
`/view/register`, `/view/unregister`, the health and metrics reads. Everything that makes the
scheduler talk to an address, hand out the replica, act on jobs or change the cluster needs a
credential once `SVC_AUTH_SECRET` is set (the spec asks it of `/proxy/*`; the rest is our safe
default, SECURITY.md):

| policy | routes | accepted bearer |
|---|---|---|
| `SSP` | `/proxy/*`, `/job/*` | the secret, or any SSP's credential (`ipc.peerauth`) |
| `SSP_SELF` | `/ssp/register`, `/ssp/heartbeat`, `/ssp/catchup` | the secret, or the credential of the SSP the body names |
| `OPTIONAL` | `/ssp/bootstrap-progress` | none needed (the spec says 200 always); kept only when authenticated |
| `MASTER` | `/admin/resync`, `/backup/*`, `PUT /backends` | the secret |

`/impersonate/*` take the secret too, checked by the routes themselves after their 404 while
impersonation is off (`scheduler.impersonate`, spec).

Without the secret every route stays open, as before (development). The verdict is left in
`req.context.peer`: `"*"` for the secret (everyone without a secret), an SSP id for an SSP
credential, None when no valid credential came (OPTIONAL and OPEN routes only).
"""

from __future__ import annotations

from typing import Any

import falcon.asgi

from ipc import peerauth
from ipc.bearer import BearerAuth, bearer_token, unauthorized

__all__ = ["MASTER", "OPEN", "OPTIONAL", "SSP", "SSP_SELF", "ListenerAuth", "policy_of"]

OPEN = "open"
SSP = "ssp"
SSP_SELF = "ssp-self"
OPTIONAL = "optional"
MASTER = "master"

_BY_TEMPLATE = {
    "/proxy/query": SSP, "/proxy/signin": SSP, "/proxy/use": SSP,
    "/ssp/register": SSP_SELF, "/ssp/heartbeat": SSP_SELF, "/ssp/catchup": SSP_SELF,
    "/ssp/bootstrap-progress": OPTIONAL,
    "/job/dispatch": SSP, "/job/result": SSP, "/job/kill": SSP, "/job/retry": SSP,
    "/job/recover": SSP,
    "/admin/resync": MASTER, "/backends": MASTER,
    # `/impersonate/*` check the secret themselves, after their 404 while disabled (spec)
}


def policy_of(template: str | None) -> str:
    """The policy of a route (its URI template as Falcon routed it)."""
    if not template:
        return OPEN
    if template.startswith("/backup/"):
        return MASTER
    return _BY_TEMPLATE.get(template, OPEN)


class ListenerAuth:
    """Falcon ASGI middleware applying :func:`policy_of` after routing."""

    def __init__(self, secret: str | None) -> None:
        self.bearer = BearerAuth(secret)

    def peer(self, header: str | None) -> str | None:
        """`"*"` for the secret, an SSP id for a valid SSP credential, else None."""
        token = bearer_token(header)
        if token is None:
            return None
        if self.bearer.is_master(token):
            return "*"
        return self.bearer.peer(token, peerauth.SSP)

    async def process_resource(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                               resource: Any, params: dict[str, Any]) -> None:
        policy = policy_of(req.uri_template) if resource is not None else OPEN
        req.context.peer = None
        if not self.bearer.enforcing:
            req.context.peer = "*"  # development: the listener is open, as the spec has it
            return
        if policy == OPEN:
            return
        header = req.get_header("Authorization")
        peer = self.peer(header)
        req.context.peer = peer
        if policy == OPTIONAL:
            return
        if peer is None:
            self.bearer.token(header)  # a missing header gets its own message
            raise unauthorized("invalid bearer token")
        if policy == MASTER and peer != "*":
            raise unauthorized("this route needs the shared secret (SVC_AUTH_SECRET)")


def require_peer(req: falcon.asgi.Request, ssp_id: str) -> None:
    """A SSP_SELF route: the credential must name the SSP the body is about (401 otherwise)."""
    peer = getattr(req.context, "peer", None)
    if peer != "*" and peer != ssp_id:
        raise unauthorized("the credential does not name this SSP")


def peer_names(req: falcon.asgi.Request, ssp_id: Any) -> bool:
    """An OPTIONAL route: the request was authenticated for `ssp_id` (or by the secret)."""
    peer = getattr(req.context, "peer", None)
    return peer == "*" or (isinstance(ssp_id, str) and peer == ssp_id)
