"""Bearer authentication for our HTTP listeners (spec, Authentication 1 and 2): the SSP
gateway's and the scheduler's.

Every route except the public ones (`GET /health`, `/version`, `/info`, `/info/text`) needs
`Authorization: Bearer <token>`; tokens are compared in constant time. The token is the shared
secret `SVC_AUTH_SECRET` (what the spec's clients send), or one of the narrower credentials
derived from it (`ipc.peerauth`) where a route accepts that kind:

- a resource's `peer_kinds` (a tuple of `ipc.peerauth` kinds) lists the derived credentials it
  takes; the default, `DEFAULT_PEER_KINDS`, is what the SSP gateway gives every route (its
  scheduler's credential for this SSP); `ingest_route = True` adds the ingest credential (the
  database's events); `master_only = True` takes the shared secret alone (impersonation);
- a scheduler credential must name this SSP (`own_id`), so a credential one SSP received
  opens no other.

With the secret unset the middleware accepts any bearer token (development only) but still
needs a well-formed `Bearer <token>` header: a request with no credentials at all is 401
either way, so a forgotten header shows up in development rather than in production. A 401
never echoes what the client sent.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from typing import Any

import falcon.asgi

from ipc import peerauth
from ipc.httperrors import HttpError
from ipc.messages import ErrorCode

_CHALLENGE = {"WWW-Authenticate": "Bearer"}

#: the derived credentials an SSP route takes unless it says otherwise
DEFAULT_PEER_KINDS: tuple[str, ...] = (peerauth.SCHEDULER,)


def unauthorized(message: str) -> HttpError:
    """The one 401 of our listeners (with the Bearer challenge)."""
    return HttpError(401, ErrorCode.UNAUTHORIZED, message, headers=_CHALLENGE)


_unauthorized = unauthorized


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, None when absent or malformed."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def _sent_bytes(token: str) -> bytes:
    # Falcon decodes header values as latin-1: re-encoding as latin-1 compares the bytes the
    # client actually sent.
    try:
        return token.encode("latin-1")
    except UnicodeEncodeError:
        return token.encode("utf-8", "surrogateescape")


class BearerAuth:
    """Falcon ASGI middleware: resources with `public = True` skip the check.

    It runs after routing (`process_resource`), so an unknown path is a 404 and a public
    route with a wrong method is a 405 whatever the credentials.
    """

    def __init__(self, secret: str | None, *, own_id: str | None = None) -> None:
        self._secret = secret.encode("utf-8") if secret else None
        self._keys = peerauth.PeerKeys(secret) if secret else None
        self._own_id = own_id

    @property
    def enforcing(self) -> bool:
        """False in development (no secret: any bearer passes)."""
        return self._secret is not None

    def is_master(self, token: str) -> bool:
        """`token` is the shared secret itself."""
        return self._secret is not None and hmac.compare_digest(_sent_bytes(token), self._secret)

    def peer(self, token: str, kind: str) -> str | None:
        """The peer a valid derived credential of `kind` names (None: not one)."""
        return None if self._keys is None else self._keys.peer_of(token, kind)

    def token(self, header: str | None) -> str:
        """The bearer token of `header`; a 401 HttpError when there is none."""
        token = bearer_token(header)
        if token is None:
            raise _unauthorized("missing or malformed Authorization header (want: Bearer <token>)")
        return token

    def check(self, header: str | None, kinds: Iterable[str] = ()) -> None:
        """Raise a 401 HttpError unless `header` carries the shared secret or a derived
        credential of one of `kinds` (a scheduler credential only for this SSP's id)."""
        token = self.token(header)
        if self._secret is None or self.is_master(token):
            return
        for kind in kinds:
            peer = self.peer(token, kind)
            if peer is None:
                continue
            if kind == peerauth.SCHEDULER and peer != self._own_id:
                continue
            return
        raise _unauthorized("invalid bearer token")

    async def process_resource(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        """Falcon hook: authenticate every request routed to a non-public resource."""
        if resource is None or getattr(resource, "public", False):
            return
        kinds: tuple[str, ...] = ()
        if not getattr(resource, "master_only", False):
            kinds = tuple(getattr(resource, "peer_kinds", DEFAULT_PEER_KINDS))
            if getattr(resource, "ingest_route", False):
                kinds += (peerauth.INGEST,)
        self.check(req.get_header("Authorization"), kinds)
