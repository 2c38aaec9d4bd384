"""A small CBOR decoder for SurrealDB answers that keeps NONE apart from NULL.

The SDK decodes both as ``None``; comparing the engine's result rows with SurrealDB's needs the
difference, so NONE (tag 6) decodes here as a marker object given by the caller.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import cbor2
from surrealdb import Duration, RecordID, Table

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class _Reader:
    def __init__(self, data: bytes, none: Any) -> None:
        self.data = data
        self.pos = 0
        self.none = none

    def take(self, n: int) -> bytes:
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def length(self, info: int) -> int:
        if info < 24:
            return info
        size = {24: 1, 25: 2, 26: 4, 27: 8}[info]
        return int.from_bytes(self.take(size), "big")

    def item(self) -> Any:
        head = self.take(1)[0]
        major, info = head >> 5, head & 31
        if major == 0:
            return self.length(info)
        if major == 1:
            return -1 - self.length(info)
        if major == 2:
            return self.take(self.length(info))
        if major == 3:
            return self.take(self.length(info)).decode("utf-8")
        if major == 4:
            return [self.item() for _ in range(self.length(info))]
        if major == 5:
            out: dict[Any, Any] = {}
            for _ in range(self.length(info)):
                key = self.item()
                out[key] = self.item()
            return out
        if major == 6:
            return self.tagged(self.length(info))
        return self.simple(info)

    def simple(self, info: int) -> Any:
        if info == 20:
            return False
        if info == 21:
            return True
        if info in (22, 23):
            return None
        if info == 25:
            return struct.unpack(">e", self.take(2))[0]
        if info == 26:
            return struct.unpack(">f", self.take(4))[0]
        if info == 27:
            return struct.unpack(">d", self.take(8))[0]
        raise ValueError(f"unsupported CBOR simple value {info}")

    def tagged(self, tag: int) -> Any:
        value = self.item()
        if tag == 6:
            return self.none
        if tag == 7:
            return Table(value)
        if tag == 8:
            return RecordID(value[0], value[1])
        if tag == 9:
            return uuid.UUID(value)
        if tag == 37:
            return uuid.UUID(bytes=value)
        if tag == 10:
            return Decimal(value)
        if tag == 0:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        if tag == 12:
            secs, nanos = (value + [0, 0])[:2]
            return _EPOCH + timedelta(seconds=secs, microseconds=nanos // 1000)
        if tag == 13:
            return Duration.parse(value)
        if tag == 14:
            secs, nanos = (value + [0, 0])[:2]
            return Duration(secs * 1_000_000_000 + nanos)
        raise ValueError(f"unsupported CBOR tag {tag}")


def decode_keeping_none_reference(data: bytes, none: Any) -> Any:
    """:func:`decode_keeping_none` read byte by byte in Python (the reference the C decoder
    is checked against: tests/unit/test_cbor_none.py)."""
    return _Reader(data, none).item()


# cbor2 hands a tag's content over frozen (tuples, its frozen dict) so it could be a map key
_FROZEN_DICT = type(cbor2.loads(cbor2.dumps(cbor2.CBORTag(99, {"k": 1})),
                                tag_hook=lambda t, _i: t.value))


def _thaw(v: Any) -> Any:
    t = type(v)
    if t is tuple or t is list:
        return [_thaw(x) for x in v]
    if t is _FROZEN_DICT or t is dict:
        return {k: _thaw(x) for k, x in v.items()}
    return v


def _hook(none: Any) -> Callable[[Any, Any], Any]:
    def hook(tag: Any, _immutable: Any) -> Any:
        n = tag.tag
        value = tag.value
        if n == 6:
            return none
        if n == 8:
            return RecordID(value[0], _thaw(value[1]))
        if n == 10:
            return Decimal(value)
        if n == 12:
            secs, nanos = (list(value) + [0, 0])[:2]
            return _EPOCH + timedelta(seconds=secs, microseconds=nanos // 1000)
        if n == 14:
            secs, nanos = (list(value) + [0, 0])[:2]
            return Duration(secs * 1_000_000_000 + nanos)
        if n == 7:
            return Table(value)
        if n == 9:
            return uuid.UUID(value)
        if n == 13:
            return Duration.parse(value)
        raise ValueError(f"unsupported CBOR tag {n}")
    return hook


_HOOKS: dict[int, Callable[[Any, Any], Any]] = {}


def decode_keeping_none(data: bytes, none: Any) -> Any:
    """Decode one CBOR item; NONE becomes ``none`` (cbor2's C decoder: the Python reader was
    a fifth of a long differential case's time)."""
    hook = _HOOKS.get(id(none))
    if hook is None:
        hook = _HOOKS[id(none)] = _hook(none)
    return cbor2.loads(data, tag_hook=hook)
