"""Small helpers shared by the admin modules: SDK values as JSON, times and durations, and
the parsing of query strings and bodies into typed values (400 ``invalid`` naming the field)."""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

import falcon.asgi
from surrealdb import Duration

from engine.jsonvalues import to_json as jsonable
from scheduler.admin.errors import Invalid, PayloadTooLarge, UnsupportedMediaType
from timetext.durations import parse_duration_ms
from timetext.timestamps import parse_timestamp

__all__ = ["MAX_BODY", "epoch_ms", "jsonable", "q_bool", "q_int", "q_str", "read_json", "ttl_ms"]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
DEFAULT_TTL_MS = 600_000
MAX_BODY = 64 * 1024  # an admin request body


def epoch_ms(v: Any) -> int | None:
    """A datetime (or ISO text) as epoch milliseconds; None when it is neither."""
    if isinstance(v, datetime):
        return int(v.timestamp() * 1000)
    if isinstance(v, str):
        try:
            return int(parse_timestamp(v).timestamp() * 1000)
        except ValueError:
            return None
    return None


def ttl_ms(v: Any) -> int:
    """A `_00_query.ttl` (duration or its text) in ms; the client default (10m) otherwise."""
    if isinstance(v, Duration):
        return max(1, int(v.elapsed) // 1_000_000)
    if isinstance(v, str):
        try:
            return parse_duration_ms(v)
        except ValueError:
            return DEFAULT_TTL_MS
    return DEFAULT_TTL_MS


def q_str(req: falcon.asgi.Request, name: str, *, max_len: int = 500) -> str | None:
    raw = req.get_param(name)
    if raw is None or raw == "":
        return None
    if len(raw) > max_len:
        raise Invalid(f"query {name}: at most {max_len} characters")
    return raw


def q_int(req: falcon.asgi.Request, name: str, *, default: int | None = None,
          minimum: int | None = None, maximum: int | None = None, clamp: bool = False
          ) -> int | None:
    """An integer query value; out of range is clamped when ``clamp``, else 400."""
    raw = req.get_param(name)
    if raw is None or raw == "":
        return default
    text = raw.strip()
    if not text.lstrip("-").isdigit() or len(text) > 18:
        raise Invalid(f"query {name}: must be an integer, got {raw[:40]!r}")
    v = int(text)
    if minimum is not None and v < minimum:
        if not clamp:
            raise Invalid(f"query {name}: must be at least {minimum}, got {v}")
        v = minimum
    if maximum is not None and v > maximum:
        if not clamp:
            raise Invalid(f"query {name}: must be at most {maximum}, got {v}")
        v = maximum
    return v


def q_bool(req: falcon.asgi.Request, name: str, default: bool = False) -> bool:
    raw = req.get_param(name)
    if raw is None or raw == "":
        return default
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise Invalid(f"query {name}: must be true or false, got {raw[:40]!r}")


def q_enum(req: falcon.asgi.Request, name: str, choices: tuple[str, ...],
           default: str | None = None) -> str | None:
    raw = req.get_param(name)
    if raw is None or raw == "":
        return default
    if raw not in choices:
        raise Invalid(f"query {name}: must be one of {', '.join(choices)}, got {raw[:40]!r}")
    return raw


async def read_json(req: falcon.asgi.Request) -> Any:
    """The body as JSON (None when empty); 415, 413, 400 as the module docstring says."""
    length = req.content_length
    if length is not None and length > MAX_BODY:
        raise PayloadTooLarge(f"the body is over {MAX_BODY} bytes")
    data = b""
    async for chunk in req.stream:
        data += chunk
        if len(data) > MAX_BODY:
            raise PayloadTooLarge(f"the body is over {MAX_BODY} bytes")
    if not data.strip():
        return None
    ctype = (req.content_type or "").split(";", 1)[0].strip().lower()
    if ctype and ctype != "application/json" and not ctype.endswith("+json"):
        raise UnsupportedMediaType("the body must be JSON (Content-Type: application/json)")
    try:
        return json.loads(data, parse_constant=lambda c: math.nan)
    except (ValueError, UnicodeDecodeError) as e:
        raise Invalid(f"the body is not valid JSON ({type(e).__name__})") from None
    except RecursionError:  # json's decoder gives up on deep nesting: still the body's fault
        raise Invalid("the body is nested too deeply") from None
