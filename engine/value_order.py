"""SurrealDB's cross-kind total order: kind ranks, sort keys, equality keys.

Part of :mod:`engine.values` (import from there; the facts are in its docstring).
"""

from __future__ import annotations

import decimal
import math
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from surrealdb import Duration, RecordID

from engine.value_types import NoneType

# Kind ranks (the cross-kind total order) and sort keys
# --------------------------------------------------------------------------------------------

R_NONE = 0
R_NULL = 1
R_BOOL = 2
R_NUMBER = 3
R_STRING = 4
R_DURATION = 5
R_DATETIME = 6
R_UUID = 7
R_ARRAY = 8
R_OBJECT = 9
R_BYTES = 10
R_RECORD = 11
R_OTHER = 12

# Record-id key kinds, in key order.
_RID_NUMBER = 0
_RID_STRING = 1
_RID_UUID = 2
_RID_ARRAY = 3
_RID_OBJECT = 4

_WIDE = decimal.Context(prec=200)
_RUST_DEC = decimal.Context(prec=28, rounding=decimal.ROUND_HALF_EVEN)
_EXACT_FLOAT_INTS = 2**53
_SAFE_MULTIPLIER = 9_007_199_254_740_000
_I128_MAX = 2**127 - 1
_I128_MIN = -(2**127)
_I64_MAX = 2**63 - 1
_I64_MIN = -(2**63)


def _float_vs_decimal(f: float, d: Decimal) -> int:
    """SurrealDB 3.2.4's comparison of a float with a decimal, step by step (-1, 0, 1).

    It compares the integer parts, then walks the fractions by repeatedly multiplying both by
    9_007_199_254_740_000 (in f64 for the float, in decimal for the decimal) and comparing the
    integer parts. The f64 products round, so ``0.1f = 0.1dec`` but ``1.1f > 1.1dec``.
    """
    if not math.isfinite(f):
        return 1 if math.copysign(1.0, f) > 0 else -1
    li = max(_I128_MIN, min(_I128_MAX, int(f)))
    ri = int(d)
    if li != ri:
        return -1 if li < ri else 1
    lf = math.fmod(f, 1.0)
    rf = d - ri
    mult = float(_SAFE_MULTIPLIER)
    dmult = Decimal(_SAFE_MULTIPLIER)
    for _ in range(12):
        lf *= mult
        rf = _RUST_DEC.multiply(rf, dmult)
        lw = max(_I64_MIN, min(_I64_MAX, int(lf)))
        rw = int(rf)
        if lw != rw:
            return -1 if lw < rw else 1
        lf = math.fmod(lf, 1.0)
        rf = rf - rw
        lz = lf == 0.0
        rz = rf == 0
        if lz and rz:
            return 0
        if lz:
            return -1 if rf > 0 else 1
        if rz:
            return 1 if lf > 0 else -1
    return 0


def _anchor(f: float) -> Decimal:
    # The decimal a float "is" inside its group of equal primaries: its shortest text, or the
    # exact integer for integral floats (exact where SurrealDB compares integers exactly).
    if f.is_integer():
        return Decimal(int(f))
    return Decimal(repr(f))


def _float_key(v: float) -> tuple[Any, ...]:
    # NaN cannot sit inside a Python tuple comparison (every comparison is False), so it gets
    # its own slot above +inf, which is where SurrealDB sorts it.
    if math.isnan(v):
        return (R_NUMBER, 1, 0, 0, 0)
    return (R_NUMBER, 0, v, 0, 0)


_DEC_KEYS: dict[Decimal, tuple[Any, ...]] = {}


def _decimal_key(v: Decimal) -> tuple[Any, ...]:
    # Numbers of different storage compare by value, except float against decimal, which
    # SurrealDB compares with the approximate walk of _float_vs_decimal. The key is the nearest
    # float, then how SurrealDB orders the decimal against that float, then the exact distance
    # to the float's anchor (which keeps decimals exactly ordered among themselves).
    if not v.is_finite():
        if v.is_nan():
            return (R_NUMBER, 1, 0, 0, 0)
        return (R_NUMBER, 0, math.inf if v > 0 else -math.inf, 0, 0)
    # Decimal equality ignores trailing zeros and so does the key: cache by value.
    key = _DEC_KEYS.get(v)
    if key is None:
        f = float(v)
        side = -_float_vs_decimal(f, v)
        key = (R_NUMBER, 0, f, side, _WIDE.subtract(v, _anchor(f)))
        if len(_DEC_KEYS) >= 100_000:
            _DEC_KEYS.clear()
        _DEC_KEYS[v] = key
    return key


def _int_key(v: int) -> tuple[Any, ...]:
    if -_EXACT_FLOAT_INTS <= v <= _EXACT_FLOAT_INTS:
        return (R_NUMBER, 0, v, 0, 0)
    # Beyond 2**53 an int and its nearest float differ: SurrealDB compares ints with floats and
    # decimals exactly, so order it against its nearest (integral) float exactly.
    f = float(v)
    fi = int(f)
    return (R_NUMBER, 0, f, (v > fi) - (v < fi), Decimal(v - fi))


def _rid_key_key(k: Any) -> tuple[Any, ...]:
    t = type(k)
    if t is int:
        return (_RID_NUMBER, k)
    if t is str:
        return (_RID_STRING, k)
    if t is uuid.UUID:
        return (_RID_UUID, k.bytes)
    if t is list or t is tuple:
        return (_RID_ARRAY, tuple(sort_key(x) for x in k))
    if t is dict:
        return (_RID_OBJECT, _object_key(k))
    # Anything else (ranges, floats) is not a storable key; order it after everything.
    return (9, repr(k))


def _object_key(d: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple([(k, sort_key(d[k])) for k in sorted(d)])


def _record_key(v: RecordID) -> tuple[Any, ...]:
    k = v.id
    t = type(k)
    if t is int:
        return (R_RECORD, v.table_name, (_RID_NUMBER, k))
    if t is str:
        return (R_RECORD, v.table_name, (_RID_STRING, k))
    return (R_RECORD, v.table_name, _rid_key_key(k))


def _dt_key(v: datetime) -> tuple[Any, ...]:
    if v.tzinfo is None:
        # SurrealDB datetimes are UTC; a naive value is read as UTC rather than crashing.
        v = v.replace(tzinfo=UTC)
    return (R_DATETIME, v)


_SORT_DISPATCH: dict[type, Callable[[Any], Any]] = {
    NoneType: lambda v: (R_NONE,),
    type(None): lambda v: (R_NULL,),
    bool: lambda v: (R_BOOL, v),
    int: _int_key,
    float: _float_key,
    Decimal: _decimal_key,
    str: lambda v: (R_STRING, v),
    Duration: lambda v: (R_DURATION, v.elapsed),
    datetime: _dt_key,
    uuid.UUID: lambda v: (R_UUID, v.bytes),
    list: lambda v: (R_ARRAY, tuple([sort_key(x) for x in v])),
    tuple: lambda v: (R_ARRAY, tuple([sort_key(x) for x in v])),
    dict: lambda v: (R_OBJECT, _object_key(v)),
    bytes: lambda v: (R_BYTES, v),
    RecordID: _record_key,
}


def _sort_key_slow(v: Any) -> Any:
    # Subclasses of the known types (rare): find the first matching base.
    for t, f in _SORT_DISPATCH.items():
        if isinstance(v, t) and t is not bool:
            return f(v)
    if isinstance(v, bool):
        return (R_BOOL, v)
    return (R_OTHER, type(v).__name__, repr(v))


def sort_key(v: Any) -> Any:
    """Return a key with ``sorted(values, key=sort_key)`` == SurrealDB's ``ORDER BY v ASC``.

    Keys are tuples ``(kind_rank, payload...)`` and are comparable across every kind. Ties
    between equal values (e.g. ``1`` and ``1.0``) give equal keys; break them by the record id's
    key (:func:`sort_key` of the id) to reproduce SurrealDB's ``ORDER BY ... LIMIT`` order.
    """
    f = _SORT_DISPATCH.get(type(v))
    if f is None:
        return _sort_key_slow(v)
    return f(v)


def eq_key(v: Any) -> Any:
    """A hashable key with ``eq_key(a) == eq_key(b)`` exactly when SurrealDB says ``a = b``.

    For equality indexes: ``0.1f``, ``0.1dec`` share a key (SurrealDB calls them equal) while
    Python's own ``hash``/``==`` keep them apart. It is :func:`sort_key` (tuples all the way).
    """
    f = _SORT_DISPATCH.get(type(v))
    if f is None:
        return _sort_key_slow(v)
    return f(v)


def kind_rank(v: Any) -> int:
    """The rank of ``v``'s kind in SurrealDB's cross-kind order (NONE=0 ... record id=11)."""
    k = sort_key(v)
    return int(k[0])


def compare(a: Any, b: Any) -> int:
    """Compare two values in SurrealDB's total order; returns -1, 0 or 1."""
    ka = sort_key(a)
    kb = sort_key(b)
    if ka < kb:
        return -1
    if ka > kb:
        return 1
    return 0
