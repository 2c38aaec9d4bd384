"""Reading a POST body (the SSP gateway's and the scheduler's listeners): size limit, content
type, JSON syntax, values the hub can receive.

The shape of each route's body is checked by `ipc.routebodies.normalize_body`; this module gets
the bytes to a parsed JSON value or a precise 400/413. `POST /ingest` also takes the typed
encoding of `ipc.typed` (the scheduler's deliveries): `parse_typed` decodes it with its ext
values left opaque, enough to check the shape; the hub decodes the values themselves.
"""

from __future__ import annotations

import json
import math
from typing import Any

import falcon.asgi
import msgpack

from ipc import typed
from ipc.httperrors import HttpError, bad_request
from ipc.messages import ErrorCode

#: Default body limit; an ingest event or a registration is a few KiB.
DEFAULT_MAX_BODY_BYTES = 1024 * 1024

_JSON_TYPES = ("application/json",)
_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1


def too_large(limit: int) -> HttpError:
    return HttpError(413, ErrorCode.PAYLOAD_TOO_LARGE, f"request body exceeds {limit} bytes")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def finite_float(text: str) -> float:
    """`json.loads(parse_float=...)`: refuse numbers that overflow to infinity."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


# Built once: json.loads with options builds a decoder per call, a visible cost per request.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=finite_float)


def _text(data: bytes) -> str:
    """Decode a JSON body: UTF-8 (the norm), or UTF-16/32 when json detects them (RFC 4627)."""
    encoding = json.detect_encoding(data)
    if encoding == "utf-8-sig" or encoding == "utf-8":
        return data.decode(encoding)
    return data.decode(encoding, "surrogatepass")


def check_content_type(content_type: str | None, *, typed_ok: bool = False) -> bool:
    """Accept no Content-Type, `application/json` or any `application/*+json` (False: a JSON
    body) and, where `typed_ok`, `ipc.typed.CONTENT_TYPE` (True: a typed body); else 400."""
    if content_type is None:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    if not media or media in _JSON_TYPES or (media.startswith("application/") and media.endswith("+json")):
        return False
    if typed_ok and media == typed.CONTENT_TYPE:
        return True
    accepted = f"application/json or {typed.CONTENT_TYPE}" if typed_ok else "application/json"
    raise bad_request(f"Content-Type must be {accepted}, got {media[:80]!r}")


async def read_bytes(req: falcon.asgi.Request, limit: int) -> bytes:
    """The whole body, or 413 as soon as it is known to exceed `limit` bytes."""
    length = req.content_length
    if length is not None and length > limit:
        raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in req.stream:
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(data: bytes) -> Any:
    """Parse JSON text (UTF-8/16/32); None for an empty body; 400 naming the syntax error."""
    if not data.strip():
        return None
    try:
        value = _DECODER.decode(_text(data))
    except UnicodeDecodeError:
        raise bad_request("request body is not valid UTF-8 JSON") from None
    except json.JSONDecodeError as e:
        raise bad_request(f"request body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise bad_request("request body is nested too deeply") from None
    except ValueError as e:  # NaN/Infinity, numbers out of range, too many digits
        raise bad_request(f"request body is not valid JSON: {e}") from None
    check_forwardable(value)
    return value


def parse_typed(data: bytes) -> Any:
    """Parse a typed body (`ipc.typed`) with its ext values opaque; None for an empty body;
    400 naming what is wrong with the MessagePack. Its values are checked by the hub."""
    if not data:
        return None
    try:
        return typed.decode_shape(data)
    except ValueError as e:
        raise bad_request(f"request body is not valid {typed.CONTENT_TYPE}: {e}") from None


def check_forwardable(value: Any) -> None:
    """400 when a parsed value cannot travel to the hub (msgpack limits), naming where."""
    try:
        msgpack.packb(value, use_bin_type=True)
        return
    except (ValueError, OverflowError, TypeError):
        pass
    path, why = _find_unforwardable(value, "body", 0)
    raise bad_request(f"{path}: {why}")


def _find_unforwardable(value: Any, path: str, depth: int) -> tuple[str, str]:
    if depth > 100:
        return path, "nested too deeply (more than 100 levels)"
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return "", ""
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            return path, "integer out of the 64-bit range"
        return "", ""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path, "string contains an unpaired surrogate (\\ud800-\\udfff)"
        return "", ""
    items: list[tuple[str, Any]]
    if isinstance(value, dict):
        for key in value:
            found = _find_unforwardable(key, f"{path} key", depth + 1)
            if found[0]:
                return found
        items = [(f"{path}.{k}", v) for k, v in value.items()]
    elif isinstance(value, list):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
    else:
        return path, f"unsupported value of type {type(value).__name__}"
    for sub_path, sub in items:
        found = _find_unforwardable(sub, sub_path, depth + 1)
        if found[0]:
            return found
    return "", ""
