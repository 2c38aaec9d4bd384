"""Error answers of our HTTP listeners (the SSP gateway, the scheduler): one exception type,
one `{error, message}` body shape.

Every error a listener decides itself (401, 400, 404, 405, 413, 503 when the hub does not
answer, 500 for its own bugs) goes out through `serialize_error`, so clients always get
`{"error": <code>, "message": <text>}` and never a framework page or a stack trace.
"""

from __future__ import annotations

from typing import Any

import falcon
import falcon.asgi

from ipc.messages import ErrorCode

_CODES: dict[int, str] = {
    400: ErrorCode.INVALID,
    401: ErrorCode.UNAUTHORIZED,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.PAYLOAD_TOO_LARGE,
    500: ErrorCode.INTERNAL,
    503: ErrorCode.NOT_READY,
}

_DEFAULT_MESSAGES: dict[int, str] = {
    404: "no such route",
    405: "this route does not accept that method",
    500: "internal error in the gateway (logged)",
}


class HttpError(falcon.HTTPError):
    """An error answered by the gateway with `{error: code, message}` and `status`."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(status, title=code, description=message, headers=headers)
        self.error = code  # not `code`: falcon.HTTPError uses that name for an int
        self.message = message


def bad_request(message: str) -> HttpError:
    """400 `invalid` with a message saying what is wrong."""
    return HttpError(400, ErrorCode.INVALID, message)


def error_body_for(exc: falcon.HTTPError) -> dict[str, Any]:
    """The `{error, message}` body for any HTTPError (ours or one Falcon raised)."""
    if isinstance(exc, HttpError):
        return {"error": exc.error, "message": exc.message}
    status = exc.status_code
    code = _CODES.get(status, f"http_{status}")
    message = exc.description or _DEFAULT_MESSAGES.get(status) or str(exc.title or code)
    return {"error": code, "message": message}


def serialize_error(req: falcon.Request, resp: falcon.Response, exc: falcon.HTTPError) -> None:
    """Falcon error serializer: JSON `{error, message}` whatever the client accepts."""
    resp.media = error_body_for(exc)
    resp.content_type = falcon.MEDIA_JSON
