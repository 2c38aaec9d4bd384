"""The gateway <-> hub contract: request and reply messages, and the body validation both share.

The SSP's HTTP gateway (`gateway/ssp_app.py`, one per gunicorn worker) authenticates, checks
the JSON syntax and the SHAPE of every POST body, then forwards each request to the hub over
`ipc.rpc` (DEALER -> ROUTER, msgpack). State and every decision beyond the shape of a body
(readiness, publication slots, allowlist, `auth_mismatch`, the engine's `rejected`...) live in
the hub, which answers with the HTTP status and body the gateway sends back unchanged.

Request (gateway -> hub), built by `request()`::

    {"route": "POST /ingest",            # "<METHOD> <route template>", one of ROUTES
     "body": {...} | None,                # the validated, NORMALISED body (see below); None
                                          # for GET routes and for POST /reset, /admin/reload
     "query": {"backfill": "10"},         # query string, str -> str (last value wins)
     "params": {"view_id": "query:abc"},  # path parameters of the route template
     "deadline_ms": 1763782800123}        # unix ms after which the gateway stops waiting

`deadline_ms`: the gateway has answered 503 `SSP_NOT_READY` by then, so a hub that only gets
to a request after its deadline should not apply its side effects (`request_expired()`); this
keeps a late ingest from being applied after the caller was told it was not (the scheduler
redelivers it). The per-route waits are `ROUTE_TIMEOUT_SECS`.

Reply (hub -> gateway), built by `reply()` / `error_reply()` / `not_ready()`::

    {"status": 200,                       # HTTP status sent to the client as is
     "body": <JSON-able> | None,          # sent as application/json; None: empty body
     "text": "...",                       # optional: a text/plain body instead of `body`
     "headers": {"Retry-After": "1"}}     # optional: extra response headers

Error bodies are `{"error": <code>, "message": <human text>}` everywhere (`ErrorCode`).

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

`GET /logs` (server-sent events): log lines are numbered 1, 2, 3... by the hub. The gateway polls

    {"route": "GET /logs", "query": {"backfill": "<N>"}}      first poll: the last N lines
    {"route": "GET /logs", "query": {"cursor": "<n>"}}        then: lines numbered > n

and the hub answers `{"status": 200, "body": {"lines": [...], "cursor": m, "gap": bool}}`:
`lines` in order (each a string or a JSON object), `cursor` the number of the last line
returned (n unchanged when none; 0 when nothing was ever logged), `gap` true when lines after
n were already dropped from the hub's buffer (the viewer fell behind). A cursor beyond the
hub's last line (the hub restarted and numbers from 1 again) gets the buffer from its start with
`gap` true. The first poll's reply carries the whole backfill (at most 10,000 lines); later
replies may be capped, and the gateway polls again at once when it got any lines.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

# ---------------------------------------------------------------------------- routes

ROUTES: Final = (
    "POST /ingest",
    "POST /view/register",
    "POST /view/unregister",
    "POST /reset",
    "POST /admin/reload",
    "POST /log",
    "GET /health",
    "GET /version",
    "GET /info",
    "GET /info/text",
    "GET /debug/view/{view_id}",
    "GET /debug/deps",
    "GET /debug/memory",
    "GET /debug/catchup-rows/{table}",
    "GET /debug/heartbeat",
    "GET /logs",
    "POST /job/kill",
    "POST /job/retry",
    "POST /job/recover",
    "PUT /backends",
    "POST /backup/create",
    "GET /backup/status",
    "GET /backup/status/{backup_id}",
    "POST /backup/restore",
    "GET /backup/restore/status/{restore_id}",
    "POST /impersonate/mint",
    "POST /impersonate/users",
    "POST /crdt/apply",
)

#: Routes served without the bearer token (spec, Authentication 1).
PUBLIC_ROUTES: Final = frozenset({"GET /health", "GET /version", "GET /info", "GET /info/text"})

#: How long the gateway waits for the hub per route before answering 503 `SSP_NOT_READY`.
#: Registration may run a large initial materialisation, reload rebuilds from the database.
DEFAULT_TIMEOUT_SECS: Final = 10.0
ROUTE_TIMEOUT_SECS: Final[dict[str, float]] = {
    "GET /health": 5.0,
    "GET /version": 5.0,
    "POST /log": 5.0,
    "GET /logs": 5.0,
    "POST /ingest": 10.0,
    "POST /view/register": 60.0,
    "POST /view/unregister": 30.0,
    "POST /reset": 60.0,
    "POST /admin/reload": 600.0,
    # a storage status asks the object store, which may be slow to refuse (3 attempts)
    "GET /backup/status": 30.0,
    "POST /backup/restore": 30.0,
}


def route_timeout(route: str) -> float:
    """Seconds the gateway waits for the hub's reply to `route`."""
    return ROUTE_TIMEOUT_SECS.get(route, DEFAULT_TIMEOUT_SECS)


class ErrorCode:
    """The `error` codes of `{error, message}` bodies that the gateway or the hub send."""

    INVALID = "invalid"  # 400: malformed JSON, wrong content type, wrong body shape
    REJECTED = "rejected"  # 400: the engine refused the query (hub)
    UNAUTHORIZED = "unauthorized"  # 401
    NOT_ALLOWLISTED = "not_allowlisted"  # 403 (hub)
    NOT_FOUND = "not_found"  # 404
    METHOD_NOT_ALLOWED = "method_not_allowed"  # 405
    AUTH_MISMATCH = "auth_mismatch"  # 409 (hub)
    PAYLOAD_TOO_LARGE = "payload_too_large"  # 413
    INTERNAL = "internal"  # 500
    RELOAD_FAILED = "reload_failed"  # 500 (hub; spec names it `code`, see the hub)
    NOT_READY = "SSP_NOT_READY"  # 503


# ---------------------------------------------------------------------------- builders


def request(
    route: str,
    body: Any = None,
    *,
    query: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
    timeout_secs: float | None = None,
) -> dict[str, Any]:
    """A gateway -> hub request for `route` (one of ROUTES), with its deadline stamped."""
    wait = route_timeout(route) if timeout_secs is None else timeout_secs
    return {
        "route": route,
        "body": body,
        "query": query or {},
        "params": params or {},
        "deadline_ms": int((time.time() + wait) * 1000),
    }


def request_expired(req: dict[str, Any], now_ms: int | None = None) -> bool:
    """True when the gateway has stopped waiting for `req` (hub side: skip side effects)."""
    deadline = req.get("deadline_ms")
    if not isinstance(deadline, int):
        return False
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return now > deadline


def reply(
    status: int, body: Any = None, *, text: str | None = None, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """A hub -> gateway reply: HTTP `status` with a JSON `body` or a text/plain `text`."""
    out: dict[str, Any] = {"status": status, "body": body}
    if text is not None:
        out["text"] = text
    if headers:
        out["headers"] = headers
    return out


def error_body(error: str, message: str) -> dict[str, str]:
    """The `{error, message}` body of every error answer."""
    return {"error": error, "message": message}


def error_reply(status: int, error: str, message: str) -> dict[str, Any]:
    """A reply carrying `{error, message}` with `status`."""
    return reply(status, error_body(error, message))


def not_ready(message: str) -> dict[str, Any]:
    """503 `SSP_NOT_READY` (not bootstrapped, restoring, slots full, database stalled...)."""
    return error_reply(503, ErrorCode.NOT_READY, message)


def check_reply(msg: Any) -> str | None:
    """None when `msg` is a well-formed reply, else what is wrong with it (gateway side)."""
    if not isinstance(msg, dict):
        return f"reply is a {type(msg).__name__}, not a map"
    status = msg.get("status")
    if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
        return f"reply status {status!r} is not an HTTP status"
    text = msg.get("text")
    if text is not None and not isinstance(text, str):
        return "reply text is not a string"
    headers = msg.get("headers")
    if headers is not None and not (
        isinstance(headers, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
    ):
        return "reply headers are not a map of strings"
    return None


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


_DURATION_PART = re.compile(r"(\d+)(ns|us|µs|ms|s|m|h|d|w|y)")
_DURATION_NS: Final[dict[str, int]] = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3_600 * 1_000_000_000,
    "d": 86_400 * 1_000_000_000,
    "w": 7 * 86_400 * 1_000_000_000,
    "y": 365 * 86_400 * 1_000_000_000,
}
#: Longest accepted ttl: 10 years (a bigger one is a mistake, and overflows datetimes later).
MAX_DURATION_MS: Final = 10 * 365 * 86_400 * 1000


def parse_duration_ns(text: str) -> int:
    """Duration text as SurrealDB writes it (`30s`, `10m`, `1h30m`, `500ms`) -> nanoseconds:
    the one duration parser (ttl, changefeed retention, settings).

    Units: ns, us/µs, ms, s, m, h, d, w, y; parts may repeat in any order and add up. The
    total must be positive. ValueError says what is wrong.
    """
    stripped = text.strip()
    if not stripped:
        raise ValueError("must be duration text such as 30s, 10m or 1h30m, got an empty string")
    pos = 0
    total_ns = 0
    for m in _DURATION_PART.finditer(stripped):
        if m.start() != pos:
            break
        if len(m.group(1)) > 20:
            raise ValueError(f"duration {text!r} is too large")
        total_ns += int(m.group(1)) * _DURATION_NS[m.group(2)]
        pos = m.end()
    if pos != len(stripped) or pos == 0:
        raise ValueError(f"must be duration text such as 30s, 10m or 1h30m, got {text!r}")
    if total_ns <= 0:
        raise ValueError(f"must be a positive duration, got {text!r}")
    return total_ns


def parse_duration_ms(text: str) -> int:
    """`parse_duration_ns` in milliseconds (at least 1), at most 10 years (a ttl)."""
    total_ms = parse_duration_ns(text) // 1_000_000
    if total_ms > MAX_DURATION_MS:
        raise ValueError(f"must be at most 10 years, got {text!r}")
    return max(total_ms, 1)


_ISO = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}(:?\d{2})?)?"
)


def parse_timestamp(text: str) -> datetime:
    """ISO 8601 date-time (`2025-01-31T12:00:00Z`, fractions up to ns, offsets) -> aware UTC.

    A time without an offset is taken as UTC. ValueError says what is wrong.
    """
    stripped = text.strip()
    if not _ISO.fullmatch(stripped):
        raise ValueError(f"must be an ISO 8601 date-time such as 2025-01-31T12:00:00Z, got {text!r}")
    norm = stripped
    if norm[-1] in "Zz":
        norm = norm[:-1] + "+00:00"
    try:
        value = datetime.fromisoformat(norm)
    except ValueError:
        raise ValueError(f"is not a valid date-time: {text!r}") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


#: A `_00_query` row's ttl when it has none (or an unreadable one): the client default, 10m.
DEFAULT_TTL_MS: Final = 600_000


def ttl_ms(value: Any) -> int:
    """A `_00_query.ttl` (a SurrealDB duration or its text) in ms; DEFAULT_TTL_MS otherwise."""
    elapsed = getattr(value, "elapsed", None)  # surrealdb's Duration (ns), without importing it
    if isinstance(elapsed, int) and not isinstance(value, (str, bytes)):
        return max(1, elapsed // 1_000_000)
    if isinstance(value, str):
        try:
            return parse_duration_ms(value)
        except ValueError:
            return DEFAULT_TTL_MS
    return DEFAULT_TTL_MS


def epoch_ms(value: Any) -> int | None:
    """A datetime (or ISO 8601 text) as epoch milliseconds; None when it is neither."""
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, str):
        try:
            return int(parse_timestamp(value).timestamp() * 1000)
        except ValueError:
            return None
    return None


#: how far in the future a `lastActiveAt` may lie (clock skew between a client and us)
ACTIVITY_SKEW_MS = 60_000


def activity_ms(value: Any, now: int) -> int | None:
    """A `lastActiveAt` as epoch milliseconds, None when unreadable or later than `now` plus
    the skew: a record user may write its own rows' `lastActiveAt`, and a date in the far
    future would otherwise keep a view alive for ever."""
    ms = epoch_ms(value)
    return None if ms is None or ms > now + ACTIVITY_SKEW_MS else ms


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


def logs_poll(
    *, cursor: int | None = None, backfill: int | None = None, timeout_secs: float | None = None
) -> dict[str, Any]:
    """A `GET /logs` poll: the first one with `backfill`, the following with `cursor`."""
    query: dict[str, str] = {}
    if cursor is not None:
        query["cursor"] = str(cursor)
    if backfill is not None:
        query["backfill"] = str(backfill)
    return request("GET /logs", query=query, timeout_secs=timeout_secs)


def logs_reply(lines: list[Any], cursor: int, gap: bool) -> dict[str, Any]:
    """The hub's answer to a `GET /logs` poll."""
    return reply(200, {"lines": lines, "cursor": cursor, "gap": gap})


def finite_float(text: str) -> float:
    """`json.loads(parse_float=...)`: refuse numbers that overflow to infinity."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value
