"""Bearer authentication for our HTTP listeners (spec, Authentication 1): the SSP gateway's
and the scheduler's.

Every route except the public ones (`GET /health`, `/version`, `/info`, `/info/text`) needs
`Authorization: Bearer <SVC_AUTH_SECRET>`; the token is compared in constant time. With the
secret unset the middleware accepts any bearer token (development only) but still needs a
well-formed `Bearer <token>` header: a request with no credentials at all is 401 either way,
so a forgotten header shows up in development rather than in production. A 401 never echoes
what the client sent.
"""

from __future__ import annotations

import hmac
from typing import Any

import falcon.asgi

from ipc.httperrors import HttpError
from ipc.messages import ErrorCode

_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def _unauthorized(message: str) -> HttpError:
    return HttpError(401, ErrorCode.UNAUTHORIZED, message, headers=_CHALLENGE)


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, None when absent or malformed."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


class BearerAuth:
    """Falcon ASGI middleware: resources with `public = True` skip the check.

    It runs after routing (`process_resource`), so an unknown path is a 404 and a public
    route with a wrong method is a 405 whatever the credentials.
    """

    def __init__(self, secret: str | None) -> None:
        # Falcon decodes header values as latin-1: comparing against the secret's UTF-8 bytes
        # after re-encoding the header as latin-1 compares the bytes the client actually sent.
        self._secret = secret.encode("utf-8") if secret else None

    def check(self, header: str | None) -> None:
        """Raise a 401 HttpError unless `header` carries an acceptable bearer token."""
        token = bearer_token(header)
        if token is None:
            raise _unauthorized("missing or malformed Authorization header (want: Bearer <token>)")
        if self._secret is None:
            return
        try:
            sent = token.encode("latin-1")
        except UnicodeEncodeError:
            sent = token.encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(sent, self._secret):
            raise _unauthorized("invalid bearer token")

    async def process_resource(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        """Falcon hook: authenticate every request routed to a non-public resource."""
        if resource is None or getattr(resource, "public", False):
            return
        self.check(req.get_header("Authorization"))
