"""Typed failures of the database layer, one per thing a caller can act on.

Messages carry the engine's own text and the statement index; they never carry bound
parameter values or credentials (a value could be a secret or a user's private data).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class DbError(Exception):
    """Base class: any failure talking to the database."""


class DbConnectionError(DbError):
    """The database could not be reached, or the connection died during a call."""


class DbAuthError(DbError):
    """Sign-in (or `use` of the namespace/database) was refused."""


class DbTimeout(DbError):
    """A call did not finish within the per-call timeout (`SVC_SSP_DB_TIMEOUT_SECS`)."""

    def __init__(self, what: str, timeout_secs: float) -> None:
        super().__init__(f"database call {what!r} timed out after {timeout_secs:g}s")
        self.what = what
        self.timeout_secs = timeout_secs


# The failures that say "down or slow", not "refused": every HTTP surface answers them with 503
# and the one code below, whatever it was reading (the admin API, pools, impersonation).
UNREACHABLE_CODE = "db_unreachable"


def unreachable_message(what: str = "the database") -> str:
    """The one sentence for a database that did not answer (no engine text: it may name a
    host or carry a value)."""
    return f"{what} is unreachable; try again"


class DbQueryError(DbError):
    """The engine rejected a query, or one of its statements returned status ERR.

    `statement_index` is the 0-based index of the failing statement in what the caller sent
    (for `transaction`, the index into its list of statements), or None when the whole request
    was refused (for example a parse error).
    """

    def __init__(self, message: str, statement_index: int | None = None,
                 kind: str | None = None) -> None:
        where = "query" if statement_index is None else f"statement {statement_index}"
        super().__init__(f"{where} failed: {message}")
        self.engine_message = message
        self.statement_index = statement_index
        self.kind = kind


def retryable(e: DbQueryError) -> bool:
    """A write conflict: the engine says so, or only knock-on errors came back (the
    transaction failed as a whole, no statement of it was refused)."""
    m = e.engine_message
    return "can be retried" in m or m.startswith(
        ("The query was not executed due to a failed transaction",
         "The query was not executed due to a cancelled transaction", "Cannot COMMIT")) \
        or "COMMIT failed" in str(e)



async def retry_conflicts(call: Callable[[], Awaitable[T]], attempts: int = 6,
                          first_delay: float = 0.05) -> T:
    """Await ``call()`` again while it loses a write conflict (`retryable`), at most
    ``attempts`` times, with a growing, jittered pause: the losing transaction committed
    nothing, so running it again is safe. Any other failure, and the last conflict, raise."""
    delay = first_delay
    for attempt in range(attempts):
        try:
            return await call()
        except DbQueryError as e:
            if not retryable(e) or attempt + 1 == attempts:
                raise
        await asyncio.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 1.0)
    raise AssertionError("unreachable: the last attempt returns or raises")

UNREACHABLE = (DbConnectionError, DbTimeout)
