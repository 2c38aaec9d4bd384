"""The admin listener's errors: one exception type per failure a caller can act on, one body.

Every error answer of the admin listener has the shape ``{error, code?, message?}``:

* ``error``: the status's generic name (``invalid``, ``unauthorized``, ``forbidden``,
  ``not_found``, ``method_not_allowed``, ``conflict``, ``payload_too_large``, ``unsupported``,
  ``internal``, ``not_implemented``, ``bad_gateway``, ``unavailable``);
* ``code``: the specific reason when a caller can act on it (``read_only``, ``not_linked``,
  ``roll_running``, ``reclone_running``, ``cloning``, ``not_supervised``, ``sampler_off``,
  ``db_unreachable``, an SSP's relayed verdict such as ``not_terminal``...);
* ``message``: one sentence for a human.

The mapping from exception to status and body lives here and only here
(:func:`serialize_error`, :func:`error_body`); Falcon's own errors (404 unknown route, 405,
a body Falcon cannot read) go through the same serializer.
"""

from __future__ import annotations

from typing import Any

import falcon

from dbclient.errors import UNREACHABLE, UNREACHABLE_CODE, unreachable_message

__all__ = [
    "AdminError", "BadGateway", "Conflict", "Forbidden", "Invalid", "NotFound",
    "NotImplementedYet", "PayloadTooLarge", "ReadOnly", "Unauthorized", "Unavailable",
    "UnsupportedMediaType", "error_body", "serialize_error",
]

_GENERIC: dict[int, str] = {
    400: "invalid", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 409: "conflict", 413: "payload_too_large",
    415: "unsupported", 500: "internal", 501: "not_implemented", 502: "bad_gateway",
    503: "unavailable",
}
_DEFAULT_MESSAGE: dict[int, str] = {
    404: "no such route",
    405: "this route does not accept that method",
    500: "internal error in the admin listener (logged)",
}


class AdminError(falcon.HTTPError):
    """An error answer: ``status`` with ``{error: generic name, code, message}``."""

    status_code_default = 500

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None,
                 headers: dict[str, str] | None = None) -> None:
        st = status or self.status_code_default
        super().__init__(st, title=_GENERIC.get(st, f"http_{st}"), description=message,
                         headers=headers)
        self.error_code = code  # not `code`: falcon.HTTPError uses that name for an int
        self.message = message


class Invalid(AdminError):
    """400: a body, path parameter or query value of the wrong shape (message names it)."""

    status_code_default = 400


class Unauthorized(AdminError):
    """401: no bearer, or one that is unknown, expired or revoked; also every failed sign-in."""

    status_code_default = 401

    def __init__(self, message: str = "missing, invalid, expired or revoked bearer token",
                 *, code: str | None = None) -> None:
        super().__init__(message, code=code, headers={"WWW-Authenticate": "Bearer"})


class ReadOnly(AdminError):
    """403: a read-scope token used with a method other than GET."""

    status_code_default = 403

    def __init__(self) -> None:
        super().__init__("this token is read-only: it may only make GET requests",
                         code="read_only")


class Forbidden(AdminError):
    """403: the session may not do this (an MCP-minted or read-only token minting tokens)."""

    status_code_default = 403


class NotFound(AdminError):
    """404: no such SSP, view, backend, job, incident or operation."""

    status_code_default = 404


class Conflict(AdminError):
    """409: not now (a roll or a reclone runs, not linked, not supervised, SSP verdicts)."""

    status_code_default = 409


class PayloadTooLarge(AdminError):
    """413: the body is over the listener's limit."""

    status_code_default = 413


class UnsupportedMediaType(AdminError):
    """415: a body that is not JSON."""

    status_code_default = 415


class NotImplementedYet(AdminError):
    """501: a stream whose sampler is switched off, a route this build does not serve."""

    status_code_default = 501


class BadGateway(AdminError):
    """502: an upstream (an SSP, the platform) answered something unusable."""

    status_code_default = 502


class Unavailable(AdminError):
    """503: cloning or restoring, no SSP, the tenant database unreachable."""

    status_code_default = 503


# The database errors that say "down or slow", not "refused" (dbclient's one definition).
DB_UNREACHABLE = UNREACHABLE


def db_unreachable(what: str = "the database") -> Unavailable:
    """The one 503 for a database that did not answer (raise it ``from`` the cause)."""
    return Unavailable(unreachable_message(what), code=UNREACHABLE_CODE)


def error_body(exc: falcon.HTTPError) -> dict[str, Any]:
    """``{error, code?, message?}`` for any HTTPError (ours or one Falcon raised)."""
    status = exc.status_code
    body: dict[str, Any] = {"error": _GENERIC.get(status, f"http_{status}")}
    if isinstance(exc, AdminError):
        if exc.error_code:
            body["code"] = exc.error_code
        body["message"] = exc.message
        return body
    body["message"] = exc.description or _DEFAULT_MESSAGE.get(status) or str(exc.title)
    return body


def serialize_error(req: falcon.Request, resp: falcon.Response, exc: falcon.HTTPError) -> None:
    """Falcon error serializer: JSON ``{error, code?, message?}`` whatever the client accepts."""
    resp.media = error_body(exc)
    resp.content_type = falcon.MEDIA_JSON
