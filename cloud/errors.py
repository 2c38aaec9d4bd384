"""The control plane's errors: one type per failure a caller can act on, each with the
status and code it answers with, mapped to a body in one place (:func:`error_body`), the same
for REST and for MCP tool errors.

Messages say what is wrong with the request (a field, a name, a limit) and never carry a
value the caller sent for an environment variable or a secret: validation messages name the
field and the rule, not the input.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BadRequest", "CloudError", "Conflict", "Forbidden", "NotFound", "TooLarge",
           "TooMany", "Unauthorized", "Unavailable", "error_body"]


class CloudError(Exception):
    """An answer other than success: ``status``, a machine-readable ``code`` and a message.

    ``details``: extra fields of the body (for instance the tenants a token may use)."""

    status = 500
    code = "internal"

    def __init__(self, message: str, *, code: str | None = None,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details or {}


class BadRequest(CloudError):
    status = 400
    code = "invalid"


class Unauthorized(CloudError):
    status = 401
    code = "unauthorized"


class Forbidden(CloudError):
    status = 403
    code = "forbidden"


class NotFound(CloudError):
    status = 404
    code = "not_found"


class Conflict(CloudError):
    status = 409
    code = "conflict"


class TooLarge(CloudError):
    status = 413
    code = "payload_too_large"


class TooMany(CloudError):
    status = 429
    code = "too_many"


class Unavailable(CloudError):
    status = 503
    code = "unavailable"


def error_body(e: CloudError) -> dict[str, Any]:
    """``{error, message, ...details}``: the body of every error answer."""
    return {"error": e.code, "message": e.message, **e.details}
