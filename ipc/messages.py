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

The shape of each route's body and its normalised form: `ipc.routebodies`.

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

import time
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
