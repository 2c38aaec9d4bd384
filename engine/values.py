"""SurrealDB value semantics, reproduced exactly for the incremental engine.

Every rule here was discovered empirically against SurrealDB core 3.2.4 (the embedded engine
from ``surrealdb-embedded``) and is pinned by differential tests in ``tests/unit/test_values*.py``
that ask SurrealDB for the answer and compare. Values are what the official SDK returns for a
row: ``None`` is NULL, the :data:`NONE` sentinel (or an absent key) is NONE, ``surrealdb.RecordID``
is a record link, ``datetime`` (tz-aware), ``Decimal``, ``surrealdb.Duration``, ``uuid.UUID``,
``bytes``, int, float, str, bool, lists and dicts.

Facts (3.2.4) this module encodes:

* Total order used by ``ORDER BY`` and by ``< <= > >=`` across kinds, by kind rank::

      NONE < NULL < bool < number < string < duration < datetime < uuid < array < object
           < bytes < record id

  Numbers compare by value whatever their storage (``1 = 1.0f = 1dec``). Strings compare by
  code point (== UTF-8 byte order; ``'B' < 'a'``). Arrays compare element-wise, a prefix first.
  Objects compare as their sorted ``(key, value)`` sequences. Record ids compare by table, then
  key (number < string < uuid < array < object).
* ``ORDER BY ... LIMIT n START s`` with ``s + n <= 1000`` breaks ties in scan order (record-id
  key order, :func:`sort_key` of the id) in both ASC and DESC; DESC is therefore *not* the
  exact reverse of ASC for ties. Without LIMIT, or when ``s + n > 1000``, SurrealDB sorts with
  an unstable sort and the order of ties (so membership at a tied LIMIT cut) is unspecified.
* Numbers: int/int, int/float, int/decimal compare exactly; float/decimal goes through
  SurrealDB's own fraction walk (:func:`_float_vs_decimal`), so ``0.1f = 0.1dec`` but
  ``1.1f > 1.1dec``. NaN equals NaN and sorts above +inf. ``-0.0 = 0``.
* ``=``/``==`` is equality in that order (``'1' != 1``, ``NULL != NONE``, a record id never
  equals its text). ``<`` etc. compare across kinds by rank (``NONE < 1``).
* ``CONTAINS``: array membership by ``=``; string substring (string operand only); object has
  the key; uuid text substring. ``CONTAINSALL/ANY/NONE`` with an array operand test each
  element against arrays (membership) and strings (substring, and a string only answers an
  array of strings), nothing else; with a string operand they are substring tests on a string.
  ``CONTAINSALL []`` is true for anything, ``CONTAINSANY []`` false. ``INSIDE``/``IN`` and the
  ``*INSIDE`` forms are the mirrored operators.
* Truthiness (``WHERE v``): NONE, NULL, false, 0 (any number type), '' , [], {} and a zero
  duration are false; NaN, datetimes, uuids, bytes (non-empty) and record ids are true.
* Field paths: a missing field or a field of a non-object is NONE; a field of an array maps over
  its elements (``tags.name`` gives ``['a', NONE]``).
* ``<string> id`` prints escaped record-id parts with backticks in 3.x (``user:`a-b` ``), not
  the ``⟨⟩`` of 2.x; :func:`parse_record_id` accepts both. A string key is escaped when it is
  empty, has a character outside ``[A-Za-z0-9_]``, is only digits/underscores, or is ``NaN`` /
  ``Infinity``. Values print as SurrealQL (``1.5f``, ``1.5dec``, ``d'...'``, ``u'...'``,
  ``b"HEX"``, objects with sorted keys).

Known limits: the SDK decodes datetimes to microseconds, so two datetimes that differ only in
their nanoseconds compare equal here. Geometry and range values are ordered after every other
kind but their internal order is not verified.
"""

from __future__ import annotations

import decimal
import math
import re
import struct
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Self

import msgpack
from surrealdb import Duration, RecordID

__all__ = [
    "NONE",
    "Duration",
    "NoneType",
    "RecordID",
    "ValueSyntaxError",
    "all_inside",
    "any_inside",
    "canonical_bytes",
    "compare",
    "contains",
    "contains_all",
    "contains_any",
    "contains_none",
    "contains_not",
    "eq_key",
    "equals",
    "ext_value",
    "format_value",
    "get_path",
    "greater",
    "greater_equal",
    "inside",
    "kind_rank",
    "less",
    "less_equal",
    "make_record_id",
    "none_inside",
    "not_equals",
    "not_inside",
    "pack_value",
    "pack_wire",
    "parse_record_id",
    "parse_value",
    "record_id_text",
    "sort_key",
    "truthy",
    "unpack_value",
]


class NoneType:
    """The type of :data:`NONE`, SurrealDB's "no value" (an absent field), distinct from NULL."""

    _instance: NoneType | None = None

    def __new__(cls) -> Self:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance  # type: ignore[return-value]

    def __repr__(self) -> str:
        return "NONE"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        # Pickling (multiprocessing) must give back the singleton, so identity checks hold.
        return "NONE"


NONE: Any = NoneType()
"""SurrealDB NONE (absent field). Python ``None`` is NULL."""


class ValueSyntaxError(ValueError):
    """A SurrealQL value literal (e.g. a record id text) could not be parsed."""


_new_object = object.__new__


def make_record_id(table: str, key: Any) -> RecordID:
    """Build a ``surrealdb.RecordID`` without its constructor's per-call import (5x faster)."""
    rid = _new_object(RecordID)
    rid.table_name = table
    rid.id = key
    return rid  # type: ignore[no-any-return]


# --------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------
# Operators
# --------------------------------------------------------------------------------------------


def equals(a: Any, b: Any) -> bool:
    """SurrealDB ``=`` / ``==``: numbers by value across int/float/decimal, otherwise kind+value."""
    ta = type(a)
    if ta is type(b) and ta in _SIMPLE_EQ:
        return bool(a == b)
    return sort_key(a) == sort_key(b)


_SIMPLE_EQ = frozenset({str, int, NoneType, type(None), bool})


def not_equals(a: Any, b: Any) -> bool:
    """SurrealDB ``!=``."""
    return not equals(a, b)


# Same-kind pairs whose Python order is SurrealDB's order (floats only when neither is NaN).
_FAST_ORDER = frozenset({int, str})


def _fast(a: Any, b: Any) -> bool:
    ta = type(a)
    if ta is not type(b):
        return False
    if ta in _FAST_ORDER:
        return True
    return ta is float and a == a and b == b  # noqa: PLR0124 (NaN test without a call)


def less(a: Any, b: Any) -> bool:
    """SurrealDB ``<`` (values of different kinds compare by kind rank)."""
    if _fast(a, b):
        return bool(a < b)
    return bool(sort_key(a) < sort_key(b))


def less_equal(a: Any, b: Any) -> bool:
    """SurrealDB ``<=``."""
    if _fast(a, b):
        return bool(a <= b)
    return bool(sort_key(a) <= sort_key(b))


def greater(a: Any, b: Any) -> bool:
    """SurrealDB ``>``."""
    if _fast(a, b):
        return bool(a > b)
    return bool(sort_key(a) > sort_key(b))


def greater_equal(a: Any, b: Any) -> bool:
    """SurrealDB ``>=``."""
    if _fast(a, b):
        return bool(a >= b)
    return bool(sort_key(a) >= sort_key(b))


def contains(a: Any, b: Any) -> bool:
    """SurrealDB ``a CONTAINS b``.

    Array: some element :func:`equals` ``b``. String: ``b`` is a string and a substring. UUID:
    ``b`` is a string and a substring of the UUID's text. Object: ``b`` is a string naming a
    top-level key. Anything else contains nothing.
    """
    ta = type(a)
    if ta is list or ta is tuple:
        return any(equals(x, b) for x in a)
    if ta is str:
        return type(b) is str and b in a
    if ta is dict:
        return type(b) is str and b in a
    if ta is uuid.UUID:
        return type(b) is str and b in str(a)
    return False


def _member(a: Any, x: Any) -> bool:
    # The per-element test of CONTAINSALL/ANY/NONE: unlike CONTAINS it knows only arrays and
    # strings (``{a:1} CONTAINSALL ['a']`` is false although ``{a:1} CONTAINS 'a'`` is true).
    ta = type(a)
    if ta is list or ta is tuple:
        return any(equals(e, x) for e in a)
    if ta is str:
        return type(x) is str and x in a
    return False


def contains_not(a: Any, b: Any) -> bool:
    """SurrealDB ``a CONTAINSNOT b``."""
    return not contains(a, b)


def contains_any(a: Any, b: Any) -> bool:
    """SurrealDB ``a CONTAINSANY b``: ``b`` an array with some element in ``a``, or substring."""
    tb = type(b)
    if tb is list or tb is tuple:
        if type(a) is str and not all(type(x) is str for x in b):
            # A string only answers an array of strings; one non-string makes it false.
            return False
        return any(_member(a, x) for x in b)
    if tb is str:
        return type(a) is str and b in a
    return False


def contains_all(a: Any, b: Any) -> bool:
    """SurrealDB ``a CONTAINSALL b``: ``b`` an array all in ``a`` (true when empty), or substring."""
    tb = type(b)
    if tb is list or tb is tuple:
        return all(_member(a, x) for x in b)
    if tb is str:
        return type(a) is str and b in a
    return False


def contains_none(a: Any, b: Any) -> bool:
    """SurrealDB ``a CONTAINSNONE b`` (the negation of CONTAINSANY)."""
    return not contains_any(a, b)


def inside(a: Any, b: Any) -> bool:
    """SurrealDB ``a INSIDE b`` / ``a IN b`` (``b CONTAINS a``)."""
    return contains(b, a)


def not_inside(a: Any, b: Any) -> bool:
    """SurrealDB ``a NOT IN b`` / ``a NOTINSIDE b``."""
    return not inside(a, b)


def all_inside(a: Any, b: Any) -> bool:
    """SurrealDB ``a ALLINSIDE b``."""
    return contains_all(b, a)


def any_inside(a: Any, b: Any) -> bool:
    """SurrealDB ``a ANYINSIDE b``."""
    return contains_any(b, a)


def none_inside(a: Any, b: Any) -> bool:
    """SurrealDB ``a NONEINSIDE b``."""
    return contains_none(b, a)


def truthy(v: Any) -> bool:
    """SurrealDB truthiness (what ``WHERE v`` keeps)."""
    t = type(v)
    if t is bool:
        return v
    if v is None or v is NONE:
        return False
    if t is int or t is float or t is Decimal:
        return bool(v != 0)  # NaN is truthy (it is not zero)
    if t is str or t is list or t is tuple or t is dict or t is bytes:
        return len(v) > 0
    if t is Duration:
        return v.elapsed != 0
    return True


# --------------------------------------------------------------------------------------------
# Field paths
# --------------------------------------------------------------------------------------------


def get_path(
    doc: Any,
    path: tuple[str, ...],
    resolve: Callable[[RecordID], Any] | None = None,
) -> Any:
    """Look up a field path in a document; NONE when missing.

    A field of an array maps over its elements (``tags.name`` on ``[{name:'a'},{}]`` gives
    ``['a', NONE]``). A field of a record id follows the link when ``resolve`` is given
    (``resolve(rid)`` returns the linked row or NONE/None when it does not exist), else NONE.
    """
    cur = doc
    n = len(path)
    for i in range(n):
        seg = path[i]
        t = type(cur)
        if t is dict:
            cur = cur.get(seg, NONE)
        elif t is list or t is tuple:
            rest = path[i:]
            return [get_path(x, rest, resolve) for x in cur]
        elif t is RecordID and resolve is not None:
            target = resolve(cur)
            if type(target) is not dict:
                return NONE
            cur = target.get(seg, NONE)
        else:
            return NONE
    return cur


# --------------------------------------------------------------------------------------------
# SurrealQL text: record ids and value literals
# --------------------------------------------------------------------------------------------

_PLAIN_IDENT = re.compile(r"[A-Za-z0-9_]+\Z")
_DIGITS_UNDERSCORE = re.compile(r"[0-9_]+\Z")
# Words 3.2.4 escapes even though they are made of plain characters, because its parser would
# read them as numbers.
_NUMBERLIKE_WORDS = frozenset({"NaN", "Infinity"})


_CTRL_ESCAPES = {"\r": "\\r", "\0": "\\0", "\b": "\\u{8}", "\f": "\\f", "\t": "\\t", "\n": "\\n"}
_NEEDS_ESCAPE = re.compile("[\\\\\r\0\b\f\t\n]")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _escape_body(s: str, quote: str) -> str:
    # 3.2.4 escapes backslash, the quote character and six control characters; every other
    # character (other controls, unicode) is printed as is.
    if _NEEDS_ESCAPE.search(s):
        s = s.replace("\\", "\\\\")
        for raw, esc in _CTRL_ESCAPES.items():
            s = s.replace(raw, esc)
    return s.replace(quote, "\\" + quote)


def _escape_part(s: str) -> str:
    if not s or not _PLAIN_IDENT.match(s) or _DIGITS_UNDERSCORE.match(s) or s in _NUMBERLIKE_WORDS:
        return "`" + _escape_body(s, "`") + "`"
    return s


def _escape_table(s: str) -> str:
    if not s or not _PLAIN_IDENT.match(s):
        return "`" + _escape_body(s, "`") + "`"
    return s


def _escape_key(s: str) -> str:
    # Object keys print bare when they are identifiers (not starting with a digit), else in
    # double quotes.
    if _IDENT.match(s):
        return s
    return '"' + _escape_body(s, '"') + '"'


def _quote_str(s: str) -> str:
    if "'" in s:
        return '"' + _escape_body(s, '"') + '"'
    return "'" + _escape_body(s, "'") + "'"


def _plain_decimal_text(d: Decimal) -> str:
    # Positional notation, no exponent, no trailing fractional zeros (Rust's Display).
    text = format(d, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _format_float(f: float) -> str:
    if math.isnan(f):
        return "NaN"
    if f == math.inf:
        return "Infinity"
    if f == -math.inf:
        return "-Infinity"
    # The shortest round-tripping digits (repr), written out without an exponent.
    text = _plain_decimal_text(Decimal(repr(f)))
    if text == "0" and math.copysign(1.0, f) < 0:
        text = "-0"
    return text + "f"


def _format_decimal(d: Decimal) -> str:
    if not d.is_finite():
        return {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity"}.get(str(d), str(d))
    text = _plain_decimal_text(d)
    if text == "-0":
        text = "0"
    return text + "dec"


def _format_duration(ns: int) -> str:
    if ns == 0:
        return "0ns"
    units = (
        ("y", 365 * 86400 * 10**9),
        ("w", 7 * 86400 * 10**9),
        ("d", 86400 * 10**9),
        ("h", 3600 * 10**9),
        ("m", 60 * 10**9),
        ("s", 10**9),
        ("ms", 10**6),
        ("µs", 10**3),
        ("ns", 1),
    )
    out = []
    for name, size in units:
        q, ns = divmod(ns, size)
        if q:
            out.append(f"{q}{name}")
    return "".join(out)


def _format_datetime(d: datetime) -> str:
    if d.tzinfo is None:
        d = d.replace(tzinfo=UTC)
    d = d.astimezone(UTC)
    base = f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}"
    if d.microsecond:
        # chrono prints 3, 6 or 9 fractional digits, whichever is the shortest exact one.
        us = d.microsecond
        base += f".{us // 1000:03d}" if us % 1000 == 0 else f".{us:06d}"
    return base + "Z"


def format_value(v: Any) -> str:
    """Format a value as SurrealQL text, the way SurrealDB prints it inside ``<string>`` casts."""
    t = type(v)
    if v is NONE:
        return "NONE"
    if v is None:
        return "NULL"
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return str(v)
    if t is float:
        return _format_float(v)
    if t is Decimal:
        return _format_decimal(v)
    if t is str:
        return _quote_str(v)
    if t is Duration:
        return _format_duration(v.elapsed)
    if isinstance(v, datetime):
        return "d'" + _format_datetime(v) + "'"
    if t is uuid.UUID:
        return f"u'{v}'"
    if t is list or t is tuple:
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    if t is dict:
        if not v:
            return "{  }"
        return "{ " + ", ".join(f"{_escape_key(k)}: {format_value(v[k])}" for k in sorted(v)) + " }"
    if t is bytes:
        return 'b"' + v.hex().upper() + '"'
    if t is RecordID:
        return record_id_text(v)
    return str(v)


def record_id_text(rid: RecordID) -> str:
    """Canonical ``<string> id`` text of a record id, exactly as SurrealDB 3.2.4 prints it.

    ``user:1``, ``user:abc``, ``user:`a-b` ``, ``user:`123` `` (a string of digits),
    ``user:u'0190...'``, ``user:[1, 'a']``, ``user:{ a: 1 }``.
    """
    table = _escape_table(rid.table_name)
    k: Any = rid.id
    t = type(k)
    if t is str:
        return f"{table}:{_escape_part(k)}"
    if t is int:
        return f"{table}:{k}"
    return f"{table}:{format_value(k)}"


_UNESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "f": "\f", "b": "\b"}


class _Parser:
    """A small recursive-descent parser for SurrealQL value literals (record ids and values)."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def error(self, what: str) -> ValueSyntaxError:
        return ValueSyntaxError(f"{what} at offset {self.i} in {self.s!r}")

    def ws(self) -> None:
        s = self.s
        while self.i < len(s) and s[self.i].isspace():
            self.i += 1

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def expect(self, ch: str) -> None:
        self.ws()
        if not self.s.startswith(ch, self.i):
            raise self.error(f"expected {ch!r}")
        self.i += len(ch)

    def escaped(self, close: str) -> str:
        # After an opening ` or ⟨: read until the matching close, honouring backslash escapes.
        out = []
        s = self.s
        while True:
            if self.i >= len(s):
                raise self.error("unterminated escaped identifier")
            c = s[self.i]
            if c == "\\" and self.i + 1 < len(s):
                e = s[self.i + 1]
                if e == "u" and s.startswith("{", self.i + 2):
                    end = s.find("}", self.i + 3)
                    if end < 0:
                        raise self.error("unterminated \\u{...} escape")
                    out.append(chr(int(s[self.i + 3 : end], 16)))
                    self.i = end + 1
                    continue
                out.append(_UNESCAPES.get(e, e))
                self.i += 2
                continue
            if c == close:
                self.i += 1
                return "".join(out)
            out.append(c)
            self.i += 1

    def ident(self) -> str:
        s = self.s
        c = self.peek()
        if c == "`":
            self.i += 1
            return self.escaped("`")
        if c == "⟨":
            self.i += 1
            return self.escaped("⟩")
        start = self.i
        while self.i < len(s) and (s[self.i].isalnum() or s[self.i] == "_") and s[self.i].isascii():
            self.i += 1
        if start == self.i:
            raise self.error("expected an identifier")
        return s[start : self.i]

    def string(self) -> str:
        q = self.s[self.i]
        self.i += 1
        out = []
        s = self.s
        while True:
            if self.i >= len(s):
                raise self.error("unterminated string")
            c = s[self.i]
            if c == "\\" and self.i + 1 < len(s):
                e = s[self.i + 1]
                if e == "u" and s.startswith("{", self.i + 2):
                    close = s.find("}", self.i + 3)
                    if close < 0:
                        raise self.error("unterminated \\u{...} escape")
                    out.append(chr(int(s[self.i + 3 : close], 16)))
                    self.i = close + 1
                    continue
                out.append(_UNESCAPES.get(e, e))
                self.i += 2
                continue
            if c == q:
                self.i += 1
                return "".join(out)
            out.append(c)
            self.i += 1

    def rid_key(self) -> Any:
        self.ws()
        c = self.peek()
        if c == "[":
            return self.array()
        if c == "{":
            return self.object()
        if c in "`⟨":
            return self.ident()
        if c == "u" and self.s[self.i + 1 : self.i + 2] in ("'", '"'):
            self.i += 1
            return uuid.UUID(self.string())
        m = re.compile(r"[+-]?[0-9]+(?![A-Za-z0-9_])").match(self.s, self.i)
        if m:
            self.i = m.end()
            return int(m.group(0))
        return self.ident()

    def record(self) -> RecordID:
        self.ws()
        table = self.ident()
        self.expect(":")
        return make_record_id(table, self.rid_key())

    def array(self) -> list[Any]:
        self.expect("[")
        out: list[Any] = []
        self.ws()
        if self.peek() == "]":
            self.i += 1
            return out
        while True:
            out.append(self.value())
            self.ws()
            if self.peek() == ",":
                self.i += 1
                self.ws()
                if self.peek() == "]":
                    self.i += 1
                    return out
                continue
            self.expect("]")
            return out

    def object(self) -> dict[str, Any]:
        self.expect("{")
        out: dict[str, Any] = {}
        self.ws()
        if self.peek() == "}":
            self.i += 1
            return out
        while True:
            self.ws()
            c = self.peek()
            key = self.string() if c in "'\"" else self.ident()
            self.expect(":")
            out[key] = self.value()
            self.ws()
            if self.peek() == ",":
                self.i += 1
                self.ws()
                if self.peek() == "}":
                    self.i += 1
                    return out
                continue
            self.expect("}")
            return out

    _NUM = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)(dec|f)?(?![A-Za-z0-9_])")
    _DUR = re.compile(r"(?:[0-9]+(?:ns|us|µs|ms|s|m|h|d|w|y))+(?![A-Za-z0-9_])")

    def value(self) -> Any:
        self.ws()
        c = self.peek()
        s = self.s
        if c == "[":
            return self.array()
        if c == "{":
            return self.object()
        if c in "'\"":
            return self.string()
        if c in "sdurb" and s[self.i + 1 : self.i + 2] in ("'", '"'):
            self.i += 1
            body = self.string()
            if c == "s":
                return body
            if c == "b":
                return bytes.fromhex(body)
            if c == "d":
                return _parse_datetime(body)
            if c == "u":
                return uuid.UUID(body)
            return _Parser(body).record_whole()
        m = self._DUR.match(s, self.i)
        if m:
            self.i = m.end()
            return Duration.parse(m.group(0).replace("µs", "us"))
        m = self._NUM.match(s, self.i)
        if m:
            self.i = m.end()
            text = m.group(0)
            suffix = m.group(1)
            if suffix == "dec":
                return Decimal(text[:-3])
            if suffix == "f":
                return float(text[:-1])
            if "." in text or "e" in text or "E" in text:
                return float(text)
            return int(text)
        for word, val in (
            ("NONE", NONE),
            ("NULL", None),
            ("true", True),
            ("false", False),
            ("NaN", math.nan),
            ("-Infinity", -math.inf),
            ("Infinity", math.inf),
        ):
            if s.startswith(word, self.i) and not (
                s[self.i + len(word) : self.i + len(word) + 1].isalnum()
            ):
                lookahead = s[self.i + len(word) : self.i + len(word) + 1]
                if lookahead != ":":
                    self.i += len(word)
                    return val
        # A record id (table:key).
        return self.record()

    def record_whole(self) -> RecordID:
        r = self.record()
        self.ws()
        if self.i != len(self.s):
            raise self.error("unexpected trailing text")
        return r

    def value_whole(self) -> Any:
        v = self.value()
        self.ws()
        if self.i != len(self.s):
            raise self.error("unexpected trailing text")
        return v


def _parse_datetime(text: str) -> datetime:
    t = text.strip()
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    # Python keeps microseconds only; SurrealDB's extra nanosecond digits are truncated, as the
    # SDK does when it decodes a datetime.
    m = re.match(r"^(.*T\d\d:\d\d:\d\d)\.(\d+)(.*)$", t)
    if m:
        t = f"{m.group(1)}.{m.group(2)[:6].ljust(6, '0')}{m.group(3)}"
    try:
        d = datetime.fromisoformat(t)
    except ValueError as e:
        raise ValueSyntaxError(f"invalid datetime {text!r}: {e}") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=UTC)
    return d.astimezone(UTC)


def parse_record_id(text: str) -> RecordID:
    """Parse record-id text (``user:1``, ``user:`a-b` ``, ``user:⟨a-b⟩``, ``user:[1,'a']``...).

    The inverse of :func:`record_id_text`. Raises :class:`ValueSyntaxError` on malformed text.
    """
    if type(text) is not str:
        raise ValueSyntaxError(f"record id text must be a string, got {type(text).__name__}")
    try:
        return _Parser(text).record_whole()
    except (IndexError, ValueError, InvalidOperation) as e:
        if isinstance(e, ValueSyntaxError):
            raise
        raise ValueSyntaxError(f"invalid record id {text!r}: {e}") from None


def parse_value(text: str) -> Any:
    """Parse a SurrealQL value literal (numbers, strings, NONE/NULL, arrays, objects, ids...)."""
    try:
        return _Parser(text).value_whole()
    except (IndexError, ValueError, InvalidOperation) as e:
        if isinstance(e, ValueSyntaxError):
            raise
        raise ValueSyntaxError(f"invalid value {text!r}: {e}") from None


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
    return _new_tuple(_ExtType, (code, data))  # type: ignore[no-any-return]


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
        return packer.pack(obj)  # type: ignore[no-any-return]
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
