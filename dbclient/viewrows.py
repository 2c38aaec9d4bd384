"""Registration from a `_00_query` row a record user created, so that an app in a browser
registers its views without the service's bearer.

The client signs in as a record user and CREATEs its row (`surql`, `params`, `clientId`,
`ttl`, `lastActiveAt`); the schema pins `auth_id` to that user (`svccli.schema`). The service
reads the creation from the `_00_query` changefeed (the standalone SSP's feed tail, or the
scheduler's) and registers the view exactly as `POST /view/register` would, with the row's
`auth_id` as the identity. A refusal is written back onto the row as `error: {error, message,
status}` (our addition to the spec's row), which the client reads and raises.

Which rows are requests: a row the service writes always carries `state`, a refusal carries
`error`, and record users can write neither, so a row with `surql` and without both is a
client's request. The service's own upserts and its refusal write-backs therefore never read
back as registrations, and a repeated read of the feed finds the row handled already (the
current row is read again before registering).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from surrealdb import RecordID

from engine.value_text import record_id_text
from timetext.timestamps import epoch_ms

# The field of a `_00_query` row holding the service's refusal (not in the spec's row).
REFUSAL_FIELD = "error"


def is_request(row: Any) -> bool:
    """Whether a `_00_query` row asks for a registration (see the module docstring)."""
    return (isinstance(row, Mapping) and isinstance(row.get("surql"), str)
            and row.get("state") is None and row.get(REFUSAL_FIELD) is None)


# How long a row posted by a database event (transport http) is waited on to be committed;
# past it (the posting write failed and rolled back) the row is taken as it is then.
POSTED_COMMIT_SECS = 5.0


async def committed_row(read: Callable[[], Awaitable[Any]], posted: Any) -> Any:
    """The `_00_query` row as `read()` returns it, once it reflects `posted`.

    Transport http: the database's event posts the row from inside the writing transaction,
    before it commits. Read at once, a CREATE's row is not there yet (the request would be
    dropped), and an answer (`state`, `error`) written onto a row whose UPDATE has not
    committed makes that UPDATE fail as a write conflict. So the row is read until it is
    there with the posted `lastActiveAt` or a later one (or no longer a request), for at most
    POSTED_COMMIT_SECS. `posted` None (the changefeed, read after the commit): one read."""
    row = await read()
    if posted is None:
        return row
    want = epoch_ms(posted.get("lastActiveAt")) if isinstance(posted, Mapping) else None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + POSTED_COMMIT_SECS
    pause = 0.002
    while loop.time() < deadline:
        if row is not None and (not is_request(row) or want is None or (
                (got := epoch_ms(row.get("lastActiveAt"))) is not None and got >= want)):
            break
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.1)
        row = await read()
    return row


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, datetime):
        at = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return at.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return str(value)


def registration_body(view_id: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """The `/view/register` body a request row stands for. `params.auth_id` is the row's
    `auth_id` (set by the schema, never by the client); params that are not an object are
    passed on as they are, for the registration to refuse them."""
    params = row.get("params")
    auth = row.get("auth_id")
    if params is None or isinstance(params, Mapping):
        params = {k: v for k, v in (params or {}).items() if k not in ("auth_id", "auth")}
        if isinstance(auth, RecordID):
            params["auth_id"] = record_id_text(auth)
    return {"id": view_id, "surql": row.get("surql"), "clientId": _text(row.get("clientId")) or "",
            "ttl": _text(row.get("ttl")) or "10m", "params": params,
            "lastActiveAt": _text(row.get("lastActiveAt")), "format": None}


def identity_of(body: Mapping[str, Any]) -> str | None:
    """The identity text a registration body names (`params.auth_id`), None without one."""
    params = body.get("params")
    auth = params.get("auth_id") if isinstance(params, Mapping) else None
    if isinstance(auth, RecordID):
        return record_id_text(auth)
    return auth if isinstance(auth, str) else None


def too_many(limit: int) -> dict[str, Any]:
    """The refusal of a row over the per-identity limit (`SVC_ROW_VIEWS_PER_USER`)."""
    return {"error": "too_many_views", "status": 429,
            "message": f"this user already holds {limit} views registered by their rows "
                       "(SVC_ROW_VIEWS_PER_USER); close some first"}


class Placing:
    """Row registrations under way, by identity. They count as held: a client that saw its
    first view registered (its row written by the SSP) may create its next row before the
    service that placed the first has recorded it, and the limit must still see both."""

    def __init__(self) -> None:
        self._by: dict[str, set[str]] = {}

    def others(self, who: str | None, view_id: str) -> int:
        """How many registrations `who` has under way besides `view_id`."""
        return 0 if who is None else len(self._by.get(who, set()) - {view_id})

    def start(self, who: str | None, view_id: str) -> None:
        if who is not None:
            self._by.setdefault(who, set()).add(view_id)

    def done(self, who: str | None, view_id: str) -> None:
        if who is None or (held := self._by.get(who)) is None:
            return
        held.discard(view_id)
        if not held:
            del self._by[who]


def refusal(status: int, body: Any) -> dict[str, Any]:
    """The `error` value written onto a refused row: the service's `{error, message}` and the
    status `/view/register` would have answered with."""
    if isinstance(body, Mapping):
        code, message = body.get("error"), body.get("message")
    else:
        code, message = None, body
    return {"error": str(code or "refused"), "message": str(message or f"status {status}"),
            "status": int(status)}


# Written as a system user: only while the row is still a request (a registration that won a
# race, or a client that deleted its row meanwhile, is left alone).
REFUSAL_SQL = ("UPDATE $q SET error = $e WHERE state = NONE AND error = NONE AND surql != NONE "
               "RETURN NONE")
