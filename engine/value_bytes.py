"""Canonical bytes of rows and values: the stored row bytes and the input of the table hash.

Part of :mod:`engine.values` (import from there; the facts are in its docstring).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import msgpack
from surrealdb import Duration, RecordID

from engine.value_types import NONE, make_record_id

# --------------------------------------------------------------------------------------------
# Canonical bytes (stored row bytes and the input of the table hash)
# --------------------------------------------------------------------------------------------

EXT_NONE = 1
EXT_RECORD_ID = 2
EXT_DATETIME = 3
EXT_DECIMAL = 4
EXT_DURATION = 5
EXT_UUID = 6

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DT_STRUCT = struct.Struct(">qI")
_NATIVE = frozenset({str, int, float, bool, type(None), bytes})


_RID_EXT_CACHE: dict[tuple[str, int | str], msgpack.ExtType] = {}
_RID_EXT_CACHE_MAX = 500_000
_ExtType = msgpack.ExtType
_new_tuple = tuple.__new__


def _ext(code: int, data: bytes) -> msgpack.ExtType:
    # ExtType's validating constructor costs more than the packing itself; our codes and
    # payloads are always valid, so build the named tuple directly.
    return _new_tuple(_ExtType, (code, data))


def _ext_default(v: Any) -> msgpack.ExtType:
    # Called by the msgpack packer for every value it cannot encode natively.
    t = type(v)
    if t is RecordID:
        k = v.id
        tk = type(k)
        if tk is int or tk is str:
            # Links repeat (every thread's author): cache the encoded id of simple keys.
            ck = (v.table_name, k)
            ext = _RID_EXT_CACHE.get(ck)
            if ext is None:
                if len(_RID_EXT_CACHE) >= _RID_EXT_CACHE_MAX:
                    _RID_EXT_CACHE.clear()
                ext = _RID_EXT_CACHE[ck] = _ext(EXT_RECORD_ID, _packb([v.table_name, k]))
            return ext
        return _ext(EXT_RECORD_ID, _packb([v.table_name, _canon(k)]))
    if v is NONE:
        return _ext(EXT_NONE, b"")
    if isinstance(v, datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=UTC)
        us = v.microsecond
        # timestamp() is exact to well under a microsecond for any realistic year, so removing
        # the microseconds and rounding gives the exact whole seconds.
        return _ext(EXT_DATETIME, _DT_STRUCT.pack(round(v.timestamp() - us * 1e-6), us * 1000))
    if t is Decimal:
        return _ext(EXT_DECIMAL, str(v).encode("ascii"))
    if t is Duration:
        return _ext(EXT_DURATION, _packb(v.elapsed))
    if t is uuid.UUID:
        return _ext(EXT_UUID, v.bytes)
    if t is int:
        raise TypeError(f"integer out of 64-bit range in a row: {v}")
    raise TypeError(f"cannot encode a value of type {t.__name__} in a row: {v!r:.80}")


# Packers are reused (building one per call costs more than packing a row); the default hook
# packs nested payloads (a record id's key) while the outer packer is busy, so each call takes
# a packer from this pool and gives it back. list.pop/append are atomic, so threads are safe.
_PACKERS: list[msgpack.Packer] = []


def _packb(obj: Any) -> bytes:
    try:
        packer = _PACKERS.pop()
    except IndexError:
        packer = msgpack.Packer(default=_ext_default, use_bin_type=True, autoreset=True)
    try:
        return packer.pack(obj)
    except BaseException:
        packer.reset()
        raise
    finally:
        _PACKERS.append(packer)


def _canon(v: Any) -> Any:
    # Rebuild containers so every object's keys are sorted (msgpack keeps insertion order);
    # leave scalars and ext-typed values for the packer and its default hook.
    t = type(v)
    if t is dict:
        return {k: _canon(v[k]) for k in sorted(v) if v[k] is not NONE}
    if t is list or t is tuple:
        return [_canon(x) for x in v]
    return v


def canonical_bytes(row: Mapping[str, Any]) -> bytes:
    """Deterministic, type-preserving bytes of a row (the stored form and the hash input).

    Format (also what the scheduler computes over its replica): MessagePack (``use_bin_type``)
    of the row where every object's keys are sorted by code point and keys whose value is NONE
    are dropped (NONE is an absent field); NULL is ``nil``; bool, int (64-bit), float (always
    float64), str, bytes (bin) are native; arrays are arrays. Other values are ext types:

    ====  ==========  ========================================================
    code  type        payload
    ====  ==========  ========================================================
    1     NONE        empty (only inside arrays)
    2     RecordID    canonical msgpack of ``[table, key]``
    3     datetime    ``>qI``: unix seconds (UTC), nanoseconds
    4     Decimal     ASCII ``str(d)`` (so ``1.0dec`` and ``1dec`` differ)
    5     Duration    msgpack int: nanoseconds
    6     UUID        16 bytes
    ====  ==========  ========================================================

    Values SurrealDB treats as equal but stores differently (``1`` vs ``1.0f`` vs ``1dec``)
    give different bytes on purpose: the hash detects any difference in stored content.
    Raises ``TypeError`` (a clear message) for values outside SurrealDB's row types.
    """
    try:
        out = {}
        for k in sorted(row):
            v = row[k]
            t = type(v)
            if t is dict or t is list or t is tuple:
                out[k] = _canon(v)
            elif v is not NONE:
                out[k] = v
        return _packb(out)
    except OverflowError as e:
        raise TypeError(f"integer out of 64-bit range in row: {e}") from None


def _ext_hook(code: int, data: bytes) -> Any:
    if code == EXT_NONE:
        return NONE
    if code == EXT_RECORD_ID:
        table, key = unpack_value(data)
        return make_record_id(table, key)
    if code == EXT_DATETIME:
        sec, ns = _DT_STRUCT.unpack(data)
        return _EPOCH + timedelta(0, sec, ns // 1000)
    if code == EXT_DECIMAL:
        return Decimal(data.decode("ascii"))
    if code == EXT_DURATION:
        return Duration(unpack_value(data))
    if code == EXT_UUID:
        return uuid.UUID(bytes=data)
    return msgpack.ExtType(code, data)


def unpack_value(data: bytes) -> Any:
    """Decode bytes produced by :func:`canonical_bytes` (or a packed value) back to values."""
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=True)


def pack_value(v: Any) -> bytes:
    """Encode a single value in the canonical format (objects sorted, NONE keys dropped)."""
    return _packb(_canon(v))


_EXT_CODES = frozenset({EXT_NONE, EXT_RECORD_ID, EXT_DATETIME, EXT_DECIMAL, EXT_DURATION,
                        EXT_UUID})


def pack_wire(v: Any) -> bytes:
    """Encode ``v`` with the ext types of :func:`canonical_bytes` but as it is: object keys
    keep their order and NONE values stay (ext 1). For messages between processes, where no
    hash is taken and sorting would only cost; :func:`unpack_value` reads it back.
    Raises ``TypeError`` for values outside SurrealDB's row types."""
    try:
        return _packb(v)
    except OverflowError as e:
        raise TypeError(f"integer out of 64-bit range: {e}") from None


def ext_value(code: int, data: bytes) -> Any:
    """The value of one ext type of :func:`canonical_bytes` (a msgpack ``ext_hook``).

    Unlike :func:`unpack_value`, an unknown code or a malformed payload raises ``ValueError``
    (input from another process is checked, never stored as an opaque ext)."""
    if code not in _EXT_CODES:
        raise ValueError(f"unknown msgpack ext type {code}")
    try:
        v = _ext_hook(code, data)
    except (ValueError, TypeError, ArithmeticError, struct.error, UnicodeDecodeError,
            msgpack.UnpackException) as e:
        raise ValueError(f"malformed msgpack ext type {code}: {e}") from None
    if code == EXT_RECORD_ID and not isinstance(v.table_name, str):
        raise ValueError("malformed record id: its table is not a string")
    return v
