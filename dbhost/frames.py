"""RPC frames: parse a client's CBOR request, build error replies, and move the `session` key.

The host gives every client connection its own engine session. Requests gain a `session`
key on the way in and replies lose it (or get the client's own id back) on the way out. Both
are done on the encoded bytes when the frame has the usual shape, because decoding and
re-encoding large results costs more than the engine call itself; anything unusual takes the
slow, decode-and-encode path, which is always correct.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from cbor2 import CBORTag

from dbclient.cbor import decode, decode_whole, decode_whole_shallow, encode

# JSON-RPC style error codes, as SurrealDB uses them.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
LIVE_ERROR = -32000

KNOWN_METHODS = frozenset({
    "ping", "info", "use", "signup", "signin", "authenticate", "invalidate", "reset", "kill",
    "live", "let", "unset", "select", "insert", "insert_relation", "create", "upsert", "update",
    "merge", "patch", "delete", "version", "query", "relate", "run", "graphql", "attach",
    "detach", "begin", "commit", "cancel", "sessions",
})

# Methods that can change data: after them the LIVE tailers are woken at once.
WRITE_METHODS = frozenset({
    "query", "insert", "insert_relation", "create", "upsert", "update", "merge", "patch",
    "delete", "relate", "run", "commit", "graphql",
})


class RpcError(Exception):
    """A request the host answers with an RPC error instead of passing it to the engine."""

    def __init__(self, code: int, message: str, req_id: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.req_id = req_id


@dataclass
class Request:
    """One client request; `raw` is the original frame.

    The frame is decoded shallowly first (``shallow``: SurrealDB's tags left as
    ``cbor2.CBORTag``): most requests go to the engine as bytes, which decodes the
    parameters itself, and building them in Python as well was most of the host's own time
    under edge publication (64% of its event loop: 1,000 edge rows are 5,000-25,000 CBOR
    items). ``params`` and ``fields``, the request with every SurrealDB value built, are
    decoded on first use (LIVE, KILL, a re-addressed session)."""

    id: Any
    method: str
    session: Any  # the client's own session id, or None for the connection's session
    shallow: dict[str, Any]
    raw: bytes
    _fields: dict[str, Any] | None = None

    @property
    def fields(self) -> dict[str, Any]:
        """The whole request decoded (SDK values built)."""
        if self._fields is None:
            self._fields = decode_strict(self.raw)
        return self._fields

    @property
    def params(self) -> Any:
        """The request's parameters, decoded."""
        return self.fields.get("params")

    def query_text(self) -> str | None:
        """A `query` request's text (its first parameter), without decoding the variables."""
        p = self.shallow.get("params")
        if isinstance(p, list) and p and isinstance(p[0], str):
            return p[0]
        return None


def error_frame(req_id: Any, code: int, message: str) -> bytes:
    """An RPC error reply in SurrealDB's shape."""
    return encode({"id": req_id, "error": {"code": code, "message": message}})


def result_frame(req_id: Any, result: Any) -> bytes:
    """An RPC success reply."""
    return encode({"id": req_id, "result": result})


def peek_id(data: bytes) -> Any:
    """The `id` of a frame without decoding it, when it is the map's first key (the SDK's way).

    Used for frames too large to decode, so the client can still match the error to its call.
    """
    if len(data) < 4 or not 0xA1 <= data[0] <= 0xB7:
        return None
    if data[1:4] != b"\x62id":
        return None
    pos = 4
    head = data[pos]
    major, info = head >> 5, head & 0x1F
    pos += 1
    if info < 24:
        length = info
    elif info == 24 and len(data) > pos:
        length = data[pos]
        pos += 1
    elif info == 25 and len(data) > pos + 1:
        length = int.from_bytes(data[pos:pos + 2], "big")
        pos += 2
    elif info == 26 and len(data) > pos + 3:
        length = int.from_bytes(data[pos:pos + 4], "big")
        pos += 4
    else:
        return None
    if major == 0:
        return length
    if major == 3 and length <= 256 and len(data) >= pos + length:
        try:
            return data[pos:pos + length].decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def parse_request(data: bytes | str, max_bytes: int) -> Request:
    """Decode and validate a client frame; raises RpcError with the right code."""
    if isinstance(data, str):
        raise RpcError(PARSE_ERROR, "text frames are not supported: send CBOR in binary frames")
    if len(data) > max_bytes:
        raise RpcError(INVALID_REQUEST,
                       f"frame of {len(data)} bytes exceeds the limit of {max_bytes} bytes",
                       peek_id(data))
    msg = decode_strict(data, shallow=True)
    if not isinstance(msg, dict):
        raise RpcError(INVALID_REQUEST,
                       f"a request must be a CBOR map, got {type(msg).__name__}")
    full = None
    if isinstance(msg.get("id"), CBORTag) or isinstance(msg.get("session"), CBORTag):
        # an id or session in one of SurrealDB's own types (unusual): take it as the SDK
        # builds it, so replies and session keys are what the full decode always gave
        full = msg = decode_strict(data)
        if not isinstance(msg, dict):
            raise RpcError(INVALID_REQUEST, "a request must be a CBOR map")
    req_id = msg.get("id")
    method = msg.get("method")
    if not isinstance(method, str) or not method:
        raise RpcError(INVALID_REQUEST, "request has no method", req_id)
    method = method.lower()
    if method not in KNOWN_METHODS:
        raise RpcError(METHOD_NOT_FOUND, f"method not found: {method[:64]}", req_id)
    return Request(req_id, method, msg.get("session"), msg, bytes(data), full)


def decode_strict(data: bytes, *, shallow: bool = False) -> Any:
    """Decode exactly one CBOR item filling the whole frame; raises RpcError(PARSE_ERROR).
    ``shallow``: SurrealDB's tags stay ``CBORTag`` (see :class:`Request`)."""
    try:
        msg, used = decode_whole_shallow(data) if shallow else decode_whole(data)
    except Exception as exc:  # noqa: BLE001 - the CBOR decoder raises many types on garbage
        # (a stray break byte included: the C decoder refuses it where an item is expected)
        raise RpcError(PARSE_ERROR, f"malformed CBOR frame: {type(exc).__name__}") from None
    if used != len(data):
        raise RpcError(PARSE_ERROR, f"malformed CBOR frame: {len(data) - used} trailing bytes")
    return msg


def _text_head(n: int) -> bytes:
    return bytes([0x60 | n]) if n < 24 else bytes([0x78, n])


SESSION_KEY = _text_head(7) + b"session"


def with_session(req: Request, engine_session: str) -> bytes:
    """The request bytes addressed to `engine_session` (the client's own key replaced)."""
    data = req.raw
    if req.session is None and "session" not in req.shallow and 0xA0 <= data[0] <= 0xB6:
        # Fast path: bump the small map's count and append one text key/value pair.
        sid = engine_session.encode()
        return bytes([data[0] + 1]) + data[1:] + SESSION_KEY + _text_head(len(sid)) + sid
    fields = dict(req.fields)
    fields["session"] = engine_session
    return encode(fields)


def _uuid_tail(sid: str) -> bytes:
    return SESSION_KEY + b"\xd8\x25\x50" + uuid.UUID(sid).bytes


def restore_session(reply: bytes, engine_session: str, client_session: Any) -> bytes:
    """The engine's reply with its `session` key removed, or set back to the client's id."""
    tail = _uuid_tail(engine_session)
    if client_session is None and reply.endswith(tail) and 0xA1 <= reply[0] <= 0xB7:
        return bytes([reply[0] - 1]) + reply[1:-len(tail)]
    msg = decode(reply)
    if isinstance(msg, dict):
        if client_session is None:
            msg.pop("session", None)
        else:
            msg["session"] = client_session
    return encode(msg)
