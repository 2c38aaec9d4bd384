"""The bodies of the gateway <-> hub routes (`ipc.messages`): the shape the gateway checks and
the normalised form the hub receives.

The gateway checks the SHAPE of every POST body with `normalize_body` and forwards the
normalised body; the hub turns it into a typed object again with `*.from_body`.

Normalised bodies (what the hub receives; `*.from_body` turns them into typed objects again,
which never raises on a body the gateway forwarded):

- `POST /ingest` (`RowChange`): `{table, op, id, record}`. `op` is accepted in any letter case
  and forwarded UPPER-case (SurrealDB's `$event` is upper-case; other producers differ).
  `table` is an identifier (`[A-Za-z_][A-Za-z0-9_]*`); `id` a non-empty string (the database
  events send `<string> $after.id`, e.g. `user:abc`); `record` an object.
  Batched form (the scheduler's deliveries): a JSON array of 1 to 1000 such events, each with
  an optional integer `seq` (the scheduler's WAL sequence); forwarded as the list of
  normalised events. An error names the index (`[3].op: ...`).
  Typed form (`Content-Type: ipc.typed.CONTENT_TYPE`, the scheduler's deliveries): the same
  shapes in MessagePack with SurrealDB's types kept; the gateway checks the shape (ext values
  opaque) and forwards `body` as the request's BYTES, unchanged (`op` not upper-cased); the
  hub decodes them with `ipc.typed.decode` and `engine.wire.ext_hook` (a malformed value is
  its 400).
- `POST /view/register` (`ViewRegistration`): `{id, surql, clientId, ttl, params,
  lastActiveAt, format}` with `params` and `format` present (None when absent), `ttl` as sent
  (duration text; `parse_duration_ms` gives milliseconds) and `lastActiveAt` as sent or None.
- `POST /view/unregister` (`ViewUnregistration`): `{id}` always of the form `query:<id>`:
  the database's `_00_dbsp_cleanup` event sends `record::id($before.id)`, the bare key, so a
  bare `abc` and a `_00_query:abc` both become `query:abc` (`normalize_view_id`).
- `POST /log` (`LogEntry`): `{message, level, data}`, `level` defaulted to `info`, lower-case;
  `data` an object or None.
- `POST /reset`, `POST /admin/reload`: body None (an empty body, or a JSON object, is accepted
  and not forwarded).

Unknown extra fields of a body are accepted and forwarded untouched (forward compatibility).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from timetext.durations import parse_duration_ms
from timetext.timestamps import parse_timestamp

# ---------------------------------------------------------------------------- validation


class BodyError(ValueError):
    """A request body does not have the shape its route needs; the message names the field."""

    def __init__(self, field: str | None, expectation: str) -> None:
        self.field = field
        self.expectation = expectation
        super().__init__(f"{field}: {expectation}" if field else expectation)


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_NAME = 256
_MAX_VIEW_ID = 1024
OPS: Final = ("CREATE", "UPDATE", "DELETE")
LOG_LEVELS: Final = ("error", "warn", "info", "debug", "trace")


def is_identifier(text: str) -> bool:
    """True for a plain table/field name (`[A-Za-z_][A-Za-z0-9_]*`, at most 256 chars)."""
    return len(text) <= _MAX_NAME and _IDENT.fullmatch(text) is not None


def _obj(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        kind = "null" if body is None else _json_type(body)
        raise BodyError(None, f"the body must be a JSON object, got {kind}")
    return body


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, slice):  # `ipc.typed.decode_shape`'s stand-in for an ext value
        return "a typed value"
    return type(value).__name__


def _required_str(body: dict[str, Any], key: str, *, non_empty: bool = True) -> str:
    if key not in body:
        raise BodyError(key, "is required (a string)")
    value = body[key]
    if not isinstance(value, str):
        raise BodyError(key, f"must be a string, got {_json_type(value)}")
    if non_empty and not value.strip():
        raise BodyError(key, "must not be empty")
    return value


def _optional(body: dict[str, Any], key: str, want: type, what: str) -> Any:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, want):
        raise BodyError(key, f"must be {what} or null, got {_json_type(value)}")
    return value


def normalize_view_id(text: str) -> str:
    """`query:abc`, `_00_query:abc` and a bare `abc` all name the view `query:abc`."""
    value = text.strip()
    if value.startswith("query:"):
        return value
    if value.startswith("_00_query:"):
        return "query:" + value[len("_00_query:"):]
    return "query:" + value


def _view_id(body: dict[str, Any], *, bare_ok: bool) -> str:
    value = _required_str(body, "id")
    if len(value) > _MAX_VIEW_ID:
        raise BodyError("id", f"must be at most {_MAX_VIEW_ID} characters")
    if any(ord(c) < 32 for c in value):
        raise BodyError("id", "must not contain control characters")
    if bare_ok:
        value = normalize_view_id(value)
    elif not value.startswith("query:"):
        raise BodyError("id", f"must have the form query:<id>, got {value[:80]!r}")
    if not value[len("query:"):].strip():
        raise BodyError("id", "must have the form query:<id> with a non-empty <id>")
    return value


@dataclass(frozen=True, slots=True)
class RowChange:
    """A row-change event (`POST /ingest`)."""

    table: str
    op: str
    id: str
    record: dict[str, Any]

    @classmethod
    def from_body(cls, body: Any) -> RowChange:
        """Validate an ingest body; BodyError names the first bad field."""
        obj = _obj(body)
        table = _required_str(obj, "table")
        if not is_identifier(table):
            raise BodyError("table", f"must be a table name ([A-Za-z_][A-Za-z0-9_]*), got {table[:80]!r}")
        op = _required_str(obj, "op")
        op_upper = op.upper()
        if op_upper not in OPS:
            raise BodyError("op", f"must be one of CREATE, UPDATE, DELETE, got {op[:40]!r}")
        rid = _required_str(obj, "id")
        if "record" not in obj:
            raise BodyError("record", "is required (an object)")
        record = obj["record"]
        if not isinstance(record, dict):
            raise BodyError("record", f"must be an object, got {_json_type(record)}")
        return cls(table, op_upper, rid, record)

    def to_body(self, original: dict[str, Any]) -> dict[str, Any]:
        """The normalised body forwarded to the hub (extra fields of `original` kept)."""
        if original.get("op") == self.op:
            return original
        out = dict(original)
        out["op"] = self.op
        return out


@dataclass(frozen=True, slots=True)
class ViewRegistration:
    """A view registration (`POST /view/register`)."""

    id: str
    surql: str
    client_id: str
    ttl: str
    ttl_ms: int
    params: dict[str, Any] | None
    last_active_at: datetime | None
    format: str | None

    @classmethod
    def from_body(cls, body: Any) -> ViewRegistration:
        """Validate a registration body; BodyError names the first bad field."""
        obj = _obj(body)
        view_id = _view_id(obj, bare_ok=False)
        surql = _required_str(obj, "surql")
        client_id = _required_str(obj, "clientId", non_empty=False)
        ttl = _required_str(obj, "ttl")
        try:
            ttl_ms = parse_duration_ms(ttl)
        except ValueError as e:
            raise BodyError("ttl", str(e)) from None
        params = _optional(obj, "params", dict, "an object")
        last_raw = _optional(obj, "lastActiveAt", str, "an ISO 8601 date-time string")
        last = None
        if last_raw is not None:
            try:
                last = parse_timestamp(last_raw)
            except ValueError as e:
                raise BodyError("lastActiveAt", str(e)) from None
        fmt = _optional(obj, "format", str, "a string")
        return cls(view_id, surql, client_id, ttl, ttl_ms, params, last, fmt)

    def to_body(self, original: dict[str, Any]) -> dict[str, Any]:
        """The normalised body forwarded to the hub (`params`, `format`, `lastActiveAt` set)."""
        out = dict(original)
        out.setdefault("params", None)
        out.setdefault("format", None)
        out.setdefault("lastActiveAt", None)
        return out


@dataclass(frozen=True, slots=True)
class ViewUnregistration:
    """An unregistration (`POST /view/unregister`); `id` normalised to `query:<id>`."""

    id: str

    @classmethod
    def from_body(cls, body: Any) -> ViewUnregistration:
        """Validate an unregister body; BodyError names the first bad field."""
        return cls(_view_id(_obj(body), bare_ok=True))

    def to_body(self, original: dict[str, Any]) -> dict[str, Any]:
        """The normalised body forwarded to the hub."""
        out = dict(original)
        out["id"] = self.id
        return out


@dataclass(frozen=True, slots=True)
class LogEntry:
    """A client log line (`POST /log`)."""

    message: str
    level: str
    data: dict[str, Any] | None

    @classmethod
    def from_body(cls, body: Any) -> LogEntry:
        """Validate a log body; BodyError names the first bad field."""
        obj = _obj(body)
        message = _required_str(obj, "message", non_empty=False)
        level_raw = obj.get("level")
        if level_raw is None:
            level = "info"
        elif not isinstance(level_raw, str) or level_raw.lower() not in LOG_LEVELS:
            shown = level_raw[:40] if isinstance(level_raw, str) else _json_type(level_raw)
            raise BodyError("level", f"must be one of {', '.join(LOG_LEVELS)}, got {shown!r}")
        else:
            level = level_raw.lower()
        data = _optional(obj, "data", dict, "an object")
        return cls(message, level, data)

    def to_body(self, original: dict[str, Any]) -> dict[str, Any]:
        """The normalised body forwarded to the hub."""
        out = dict(original)
        out["level"] = self.level
        out["data"] = self.data
        return out


def _no_body(body: Any) -> None:
    """Routes without a request body accept nothing, or a JSON object (ignored)."""
    if body is not None and not isinstance(body, dict):
        raise BodyError(None, f"this route takes no body (or an empty JSON object), got {_json_type(body)}")


#: Events in one batched `POST /ingest` (a JSON array body, sent by the scheduler).
INGEST_BATCH_MAX: Final = 1000


def _ingest_seq(obj: dict[str, Any], where: str) -> None:
    seq = obj.get("seq")
    if seq is None:
        return
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        raise BodyError(f"{where}seq", f"must be a non-negative integer, got {_json_type(seq)}")


def normalize_ingest_batch(body: list[Any]) -> list[dict[str, Any]]:
    """Validate a batched ingest body: 1 to INGEST_BATCH_MAX events, each like a single
    event plus an optional integer `seq`; BodyError names the index and the field
    (`[3].op: ...`)."""
    if not body:
        raise BodyError(None, "an array body must hold at least one event")
    if len(body) > INGEST_BATCH_MAX:
        raise BodyError(None, f"an array body holds at most {INGEST_BATCH_MAX} events, "
                              f"got {len(body)}")
    out = []
    for i, ev in enumerate(body):
        if not isinstance(ev, dict):
            raise BodyError(f"[{i}]", "each event of an array body must be a JSON object, "
                                      f"got {_json_type(ev)}")
        try:
            normalized = RowChange.from_body(ev).to_body(ev)
            _ingest_seq(ev, "")
        except BodyError as e:
            raise BodyError(f"[{i}].{e.field}" if e.field else f"[{i}]", e.expectation) from None
        out.append(normalized)
    return out


def normalize_body(route: str, body: Any) -> Any:
    """Validate the parsed JSON `body` of a POST `route` and return what the hub receives.

    `body` is None when the request had no body. BodyError names what is wrong.
    `POST /ingest` also takes a JSON array of events (see `normalize_ingest_batch`); the hub
    then receives the list.
    """
    if route == "POST /ingest":
        if isinstance(body, list):
            return normalize_ingest_batch(body)
        return RowChange.from_body(body).to_body(body)
    if route == "POST /view/register":
        return ViewRegistration.from_body(body).to_body(body)
    if route == "POST /view/unregister":
        return ViewUnregistration.from_body(body).to_body(body)
    if route == "POST /log":
        return LogEntry.from_body(body).to_body(body)
    if route in ("POST /reset", "POST /admin/reload"):
        return _no_body(body)
    if route in ("POST /job/kill", "POST /job/retry"):
        return JobRef.from_body(body).to_body(body)
    if route == "POST /job/recover":
        return _recover_body(body)
    if route == "PUT /backends":
        return _backend_list(body)
    if route in ("POST /backup/create", "POST /backup/restore"):
        return _backup_body(body)
    if route in OBJECT_ROUTES:
        return _obj(body)  # the hub checks the fields (`maintenance.impersonation`, `ssp.crdt`)
    raise KeyError(route)


@dataclass(frozen=True, slots=True)
class JobRef:
    """`POST /job/kill`, `POST /job/retry`: `{id}`, the job row's record id (`<table>:<key>`)."""

    id: str

    @classmethod
    def from_body(cls, body: Any) -> JobRef:
        """Validate a job reference body; BodyError names the first bad field."""
        value = _required_str(_obj(body), "id")
        table, sep, key = value.partition(":")
        if not sep or not is_identifier(table) or not key or len(value) > _MAX_VIEW_ID:
            raise BodyError("id", f"must be a job record id <table>:<key>, got {value[:80]!r}")
        return cls(value)

    def to_body(self, original: dict[str, Any]) -> dict[str, Any]:
        """The normalised body forwarded to the hub."""
        return {**original, "id": self.id}


def _recover_body(body: Any) -> dict[str, Any]:
    """`POST /job/recover`: no body, or `{table?, id?}` narrowing it to one job table."""
    _no_body(body)
    obj = body or {}
    table = _optional(obj, "table", str, "a string")
    if table is not None and not is_identifier(table):
        raise BodyError("table", f"must be a table name, got {table[:80]!r}")
    if obj.get("id") is not None:
        JobRef.from_body(obj)
    return obj


def _backend_list(body: Any) -> list[Any]:
    """`PUT /backends`: a JSON array of objects (the hub checks each element's fields)."""
    if not isinstance(body, list) or not all(isinstance(b, dict) for b in body):
        raise BodyError(None, f"the body must be a JSON array of backend objects, got "
                        f"{_json_type(body)}")
    return body


def _backup_body(body: Any) -> dict[str, Any]:
    """`POST /backup/create`, `/backup/restore`: a JSON object (its fields are checked by the
    hub, `backup.requests`, the same rules as on the scheduler's listener)."""
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise BodyError(None, f"the body must be a JSON object, got {_json_type(body)}")
    return body

#: POST routes whose body is a JSON object the hub validates field by field.
OBJECT_ROUTES: Final = frozenset({"POST /impersonate/mint", "POST /impersonate/users",
                                  "POST /crdt/apply"})

#: POST routes whose body is required (a missing body is a 400 naming the shape).
BODY_ROUTES: Final = frozenset({"POST /ingest", "POST /view/register", "POST /view/unregister", "POST /log",
                                "POST /job/kill", "POST /job/retry", "PUT /backends",
                                *OBJECT_ROUTES})
