"""SurrealDB's operators and pure functions over values: arithmetic, ``??``/``?:``, indexing,
and the ``string::``, ``array::``, ``math::`` and ``type::`` functions a view may call.

Every function returns what SurrealDB 3.x returns for the same arguments, or raises
:class:`EvalError` exactly where SurrealDB answers an error (a wrong argument type, an integer
overflow, a remainder by zero). ``tests/engine/test_functions_differential.py`` calls each one
with arguments of every kind and compares with the embedded SurrealDB (``RETURN fn(...)``);
the table of what is supported is in ``engine/README.md``.

Rules learnt from SurrealDB that shape the code:

- Numbers are int (64-bit, checked: overflow raises, ``/`` answers NaN), float and decimal
  (28 digits). Mixed int and float compute in float; anything with a decimal in decimal.
  ``/`` of two ints truncates toward zero; a failed division (by zero, overflow) is NaN.
- A typed argument is strict: ``string::len(5)`` raises, NONE and NULL are never strings.
  An integer argument takes an int, an integral float or an integral decimal.
- A function that is not in :data:`FUNCTIONS` is refused when the view registers
  (:func:`check_call`), with the list of the supported ones in the message.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Context, Decimal, InvalidOperation
from typing import Any

from surrealdb import Duration, RecordID

from engine.errors import QueryRejected
from engine.value_order import sort_key
from engine.value_text import format_value
from engine.value_types import NONE, NoneType
from engine.values import equals, truthy

__all__ = ["FUNCTIONS", "EvalError", "arith", "call", "check_call", "index", "kind_name",
           "negate", "raw_string"]


class EvalError(Exception):
    """SurrealDB answers an error for this evaluation (wrong type, overflow...)."""


_MISSING: Any = object()  # an optional argument not given (NONE given is a value)
_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1
_NAN = float("nan")
# rust_decimal: a 96-bit mantissa and at most 28 fractional digits
_DEC_MANTISSA = 2**96
_DEC_MAX_SCALE = 28
_WIDE = Context(prec=80)
_NUMBERS = (int, float, Decimal)


def kind_name(v: Any) -> str:
    """SurrealDB's name for the kind of a value (as its error messages say it)."""
    t = type(v)
    if v is NONE:
        return "none"
    if v is None:
        return "null"
    if t is bool:
        return "bool"
    if t is int:
        return "int"
    if t is float:
        return "float"
    if t is Decimal:
        return "decimal"
    if t is str:
        return "string"
    if t is list or t is tuple:
        return "array"
    if t is dict:
        return "object"
    if t is Duration:
        return "duration"
    if isinstance(v, datetime):
        return "datetime"
    if t is uuid.UUID:
        return "uuid"
    if t is bytes:
        return "bytes"
    if t is RecordID:
        return "record"
    return t.__name__


def _is_num(v: Any) -> bool:
    t = type(v)
    return t is int or t is float or t is Decimal


def raw_string(v: Any) -> str:
    """SurrealDB's raw text of a value (``string::concat``, ``array::join``): strings as they
    are, uuids and datetimes without their prefix, everything else as SurrealQL text."""
    t = type(v)
    if t is str:
        return str(v)
    if t is uuid.UUID:
        return str(v)
    if isinstance(v, datetime):
        return format_value(v)[2:-1]
    return format_value(v)


# --------------------------------------------------------------------------------------------
# Numbers


def _i64(v: int, what: str, a: Any, b: Any) -> int:
    if _I64_MIN <= v <= _I64_MAX:
        return v
    raise EvalError(f"Cannot perform {what} with '{raw_string(a)}' and '{raw_string(b)}'")


def _to_decimal(v: Any) -> Decimal:
    """Rust's ``Number::to_decimal``: a float that no decimal holds (too large, NaN, inf)
    becomes 0."""
    t = type(v)
    if t is Decimal:
        return v
    if t is int:
        return Decimal(v)
    if not math.isfinite(v) or abs(v) >= 7.9e28:
        return Decimal(0)
    try:
        return _dec(Decimal(repr(v)))
    except EvalError:
        return Decimal(0)


def _dec(d: Decimal) -> Decimal:
    """``d`` as rust_decimal holds it: rounded to the largest scale (<= 28) whose mantissa
    fits 96 bits; raises when even the integer part does not fit."""
    if not d.is_finite():
        raise EvalError("decimal overflow")
    exp = d.as_tuple().exponent
    assert isinstance(exp, int)
    scale = min(_DEC_MAX_SCALE, max(0, -exp))
    while True:
        q = d.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_EVEN, context=_WIDE)
        if abs(q.scaleb(scale, context=_WIDE)) < _DEC_MANTISSA:
            return q
        if scale == 0:
            raise EvalError("decimal overflow")
        scale -= 1


def _float_div(a: float, b: float) -> float:
    if b == 0:
        if a == 0 or a != a:  # noqa: PLR0124 - NaN test
            return _NAN
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _num_op(op: str, a: Any, b: Any) -> Any:
    ta = type(a)
    tb = type(b)
    if ta is int and tb is int:
        if op == "+":
            return _i64(a + b, "addition", a, b)
        if op == "-":
            return _i64(a - b, "subtraction", a, b)
        if op == "*":
            return _i64(a * b, "multiplication", a, b)
        if op == "/":
            if b == 0 or (a == _I64_MIN and b == -1):
                return _NAN
            q = abs(a) // abs(b)
            return q if (a >= 0) == (b >= 0) else -q
        # %: the sign of the dividend, as Rust's checked_rem
        if b == 0 or (a == _I64_MIN and b == -1):
            raise EvalError(f"Cannot perform remainder with '{a}' and '{b}'")
        r = abs(a) % abs(b)
        return r if a >= 0 else -r
    if ta is not Decimal and tb is not Decimal:
        x = float(a)
        y = float(b)
        if op == "+":
            return x + y
        if op == "-":
            return x - y
        if op == "*":
            return x * y
        if op == "/":
            return _float_div(x, y)
        if y == 0 or math.isinf(x) or x != x or y != y:  # noqa: PLR0124
            return _NAN
        return math.fmod(x, y)
    dx = _to_decimal(a)
    dy = _to_decimal(b)
    try:
        if op == "+":
            return _dec(_WIDE.add(dx, dy))
        if op == "-":
            return _dec(_WIDE.subtract(dx, dy))
        if op == "*":
            return _dec(_WIDE.multiply(dx, dy))
        if op == "/":
            if dy == 0:
                return _NAN
            return _dec(_WIDE.divide(dx, dy))
        if dy == 0:
            raise EvalError(f"Cannot perform remainder with '{raw_string(a)}' and "
                            f"'{raw_string(b)}'")
        return _dec(_WIDE.remainder(dx, dy))
    except EvalError:
        if op == "/":
            return _NAN
        raise
    except (InvalidOperation, ArithmeticError) as exc:
        if op == "/":
            return _NAN
        raise EvalError(str(exc)) from exc


def _pow(a: Any, b: Any) -> Any:
    ta = type(a)
    tb = type(b)
    if ta is int and tb is int:
        if a == 0:
            if b < 0:
                raise EvalError(f"Cannot raise the value '{a}' with '{b}'")
            return 1 if b == 0 else 0
        if a == 1:
            return 1
        if a == -1:
            return 1 if b % 2 == 0 else -1
        if b < 0 or b > 2**32 - 1:
            raise EvalError(f"Cannot raise the value '{a}' with '{b}'")
        # |a| >= 2 overflows 64 bits past exponent 63: no need to build the huge number
        if b > 64:
            raise EvalError(f"Cannot raise the value '{a}' with '{b}'")
        r = a**b
        if not _I64_MIN <= r <= _I64_MAX:
            raise EvalError(f"Cannot raise the value '{a}' with '{b}'")
        return r
    if ta is Decimal:
        return _dec_pow(a, b)
    x = float(a)
    y = float(b)
    if x == 0 and y < 0:
        odd = y.is_integer() and abs(y) < 2**53 and int(y) % 2 == 1
        return math.copysign(math.inf, x) if odd else math.inf
    try:
        return math.pow(x, y)
    except ValueError:
        return _NAN
    except OverflowError:
        odd = y.is_integer() and int(y) % 2 == 1
        return -math.inf if x < 0 and odd else math.inf


def _dec_pow(a: Decimal, b: Any) -> Decimal:
    """rust_decimal's checked powers: exact for integral exponents (an overflow raises);
    otherwise exp(b * ln|a|), with the sign of ``a``. rust_decimal rounds its intermediate
    products, so its last digits (of 28) can differ from these exact ones."""
    fail = EvalError(f"Cannot raise the value '{_plain(a)}' with '{_plain(b)}'")
    if type(b) is float and (not math.isfinite(b) or abs(b) >= 7.9e28):
        raise fail  # the exponent is no decimal
    if a == 0 and type(b) is not int:
        return Decimal(1) if b == 0 else Decimal(0)
    if type(b) is int or (type(b) is Decimal and b == b.to_integral_value()) or (
            type(b) is float and math.isfinite(b) and b.is_integer()):
        n = int(b)
        if type(b) is float and not _I64_MIN <= n <= _I64_MAX:
            raise fail
        if n == 0:
            return Decimal(1)
        try:
            if n > 0:
                return _dec(_WIDE.power(a, n))
            p = _dec(_WIDE.power(a, -n))
            if p == 0:
                raise fail
            return _dec(_WIDE.divide(Decimal(1), p))
        except (InvalidOperation, ArithmeticError) as exc:
            raise fail from exc
    y = _to_decimal(b)
    if a == 0:
        return Decimal(0)
    try:
        r = _WIDE.exp(_WIDE.multiply(y, _WIDE.ln(abs(a))))
    except (InvalidOperation, ArithmeticError) as exc:
        raise fail from exc
    return _dec(-r if a < 0 else r)


def _plain(v: Any) -> str:
    return str(v) if type(v) is Decimal else raw_string(v)


_OP_WORDS = {"+": "addition", "-": "subtraction", "*": "multiplication", "/": "division",
             "%": "remainder"}


def _mismatch(op: str, a: Any, b: Any) -> EvalError:
    if op == "**":
        return EvalError(f"Cannot raise the value '{raw_string(a)}' with '{raw_string(b)}'")
    return EvalError(f"Cannot perform {_OP_WORDS[op]} with '{kind_name(a)}' and "
                     f"'{kind_name(b)}'")


_MICRO_NS = 1000


def _dt_plus(d: datetime, ns: int, sign: int) -> datetime:
    try:
        return d + sign * timedelta(microseconds=ns // _MICRO_NS)
    except OverflowError as exc:
        raise EvalError("datetime overflow") from exc


def arith(op: str, a: Any, b: Any) -> Any:
    """SurrealDB's ``a <op> b`` for ``+ - * / % **``."""
    ta = type(a)
    tb = type(b)
    if ta is int and tb is int and (op == "*" or op == "+" or op == "-"):
        # the usual case (`total * 2 > $x` over every row of a new view), without the calls
        # below; an overflow goes on to raise there
        r = a * b if op == "*" else a + b if op == "+" else a - b
        if _I64_MIN <= r <= _I64_MAX:
            return r
    elif ((ta is float and (tb is float or tb is int)) or (ta is int and tb is float)) and (
            op == "*" or op == "+" or op == "-"):
        x = float(a)
        y = float(b)
        return x * y if op == "*" else x + y if op == "+" else x - y
    if _is_num(a) and _is_num(b):
        if op == "**":
            return _pow(a, b)
        return _num_op(op, a, b)
    if op == "/":
        try:
            return _other_op(op, a, b)
        except EvalError:
            return _NAN  # SurrealDB answers NaN for every division it cannot do
    return _other_op(op, a, b)


def _other_op(op: str, a: Any, b: Any) -> Any:
    ta = type(a)
    tb = type(b)
    if op == "+":
        if ta is str and tb is str:
            return a + b
        if (ta is list or ta is tuple) and (tb is list or tb is tuple):
            return [*a, *b]
        if ta is dict and tb is dict:
            out = dict(a)
            out.update(b)
            return out
        if ta is Duration and tb is Duration:
            return Duration(a.elapsed + b.elapsed)
        if isinstance(a, datetime) and tb is Duration:
            return _dt_plus(a, b.elapsed, 1)
        if ta is Duration and isinstance(b, datetime):
            return _dt_plus(b, a.elapsed, 1)
    elif op == "-":
        if (ta is list or ta is tuple) and (tb is list or tb is tuple):
            return [x for x in a if not any(equals(x, y) for y in b)]
        if ta is Duration and tb is Duration:
            if b.elapsed > a.elapsed:
                raise EvalError("Cannot perform subtraction with a larger duration")
            return Duration(a.elapsed - b.elapsed)
        if isinstance(a, datetime) and tb is Duration:
            return _dt_plus(a, b.elapsed, -1)
        if isinstance(a, datetime) and isinstance(b, datetime):
            if b > a:
                raise EvalError("Cannot perform subtraction with a later datetime")
            delta = a - b
            return Duration((delta.days * 86400 + delta.seconds) * 10**9
                            + delta.microseconds * 1000)
        if ta is Duration and isinstance(b, datetime):
            return _dt_plus(b, a.elapsed, -1)
    elif op == "*" and ta is Duration and _is_num(b):
        return _duration_scaled(a, b, True)
    elif op == "/" and ta is Duration and _is_num(b):
        return _duration_scaled(a, b, False)
    raise _mismatch(op, a, b)


_U64 = 2**64


def _duration_scaled(d: Duration, k: Any, mul: bool) -> Duration:
    """A duration times or divided by a number (SurrealDB refuses negative factors and a
    divisor that is not positive)."""
    ns = d.elapsed
    t = type(k)
    if t is int:
        if k < 0 or (not mul and k == 0) or k > 2**32 - 1:
            raise EvalError("Cannot scale a duration by a negative, zero or too large number")
        out = ns * k if mul else ns // k
    elif t is float:
        if not math.isfinite(k) or k < 0 or (not mul and k == 0):
            raise EvalError("Cannot scale a duration by a non-finite or negative number")
        secs = ns / 1e9 * k if mul else ns / 1e9 / k
        if not math.isfinite(secs) or secs >= 2**64:
            raise EvalError("duration overflow")
        out = round(secs * 1e9)
    else:
        if k < 0 or (not mul and k == 0):
            raise EvalError("Cannot scale a duration by a negative number")
        q = _WIDE.multiply(Decimal(ns), k) if mul else _WIDE.divide(Decimal(ns), k)
        out = int(q)
    if out >= _U64 * 10**9:
        raise EvalError("duration overflow")
    return Duration(out)


def negate(a: Any) -> Any:
    """SurrealDB's unary ``-a``."""
    t = type(a)
    if t is int:
        if a == _I64_MIN:
            raise EvalError(f"Cannot negate the value '{a}'")
        return -a
    if t is float or t is Decimal:
        return -a
    raise EvalError(f"Cannot negate the value '{kind_name(a)}'")


def index(v: Any, i: Any) -> Any:
    """``v[i]``: an element of an array (NONE out of range or for a negative index), a field
    of an object by a string, the last element with ``[$]`` (i is ``...``)."""
    t = type(v)
    if i is ...:
        if t is list or t is tuple:
            return v[-1] if v else NONE
        return v
    ti = type(i)
    if ti is str:
        if t is dict:
            return v.get(i, NONE)
        return NONE
    if ti is int:
        if (t is list or t is tuple) and 0 <= i < len(v):
            return v[i]
        return NONE
    return NONE


# --------------------------------------------------------------------------------------------
# Arguments


def _arg_error(name: str, n: int, want: str, v: Any) -> EvalError:
    return EvalError(f"Incorrect arguments for function {name}(). Argument {n} was the wrong "
                     f"type. Expected `{want}` but found `{format_value(v)}`")


def _str(name: str, n: int, v: Any) -> str:
    if type(v) is str:
        return v
    raise _arg_error(name, n, "string", v)


def _arr(name: str, n: int, v: Any) -> list[Any]:
    t = type(v)
    if t is list:
        return v
    if t is tuple:
        return list(v)
    raise _arg_error(name, n, "array", v)


def _int(name: str, n: int, v: Any) -> int:
    t = type(v)
    if t is int:
        return v
    if t is float and math.isfinite(v) and v == int(v):
        return min(max(int(v), _I64_MIN), _I64_MAX)  # Rust's saturating `as i64`
    if t is Decimal and v.is_finite() and v == v.to_integral_value():
        r = int(v)
        if _I64_MIN <= r <= _I64_MAX:
            return r
    raise _arg_error(name, n, "int", v)


def _num(name: str, n: int, v: Any) -> Any:
    if _is_num(v):
        return v
    raise _arg_error(name, n, "number", v)


def _nums(name: str, n: int, v: Any) -> list[Any]:
    arr = _arr(name, n, v)
    for x in arr:
        if not _is_num(x):
            raise _arg_error(name, n, "array<number>", v)
    return arr


# --------------------------------------------------------------------------------------------
# Helpers over SurrealDB equality


def _key(v: Any) -> Any:
    return sort_key(v)


def _uniq(values: list[Any]) -> list[Any]:
    seen: set[Any] = set()
    out = []
    for v in values:
        k = _key(v)
        if k not in seen:
            seen.add(k)
            out.append(v)
    return out


def _index_of(values: list[Any], v: Any) -> int:
    for i, w in enumerate(values):
        if equals(v, w):
            return i
    return -1


def _flatten(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if type(v) is list or type(v) is tuple:
            out.extend(v)
        else:
            out.append(v)
    return out


def _slice_bounds(n: int, start: int, end: int | None) -> tuple[int, int]:
    """Rust's range rules of ``array::slice``/``string::slice``: negative bounds count from
    the end; an empty result when the range is empty."""
    s = max(n + start, 0) if start < 0 else start
    if end is None:
        e = n
    elif end < 0:
        e = n + end
    else:
        e = end
    return s, max(e, s)


# --------------------------------------------------------------------------------------------
# string::


def _s_concat(*args: Any) -> Any:
    return "".join(raw_string(a) for a in args)


def _s_join(*args: Any) -> Any:
    if not args:
        raise EvalError("Incorrect arguments for function string::join(). Expected at least "
                        "one argument")
    sep = raw_string(args[0])
    return sep.join(raw_string(a) for a in args[1:])


def _s_len(s: Any) -> Any:
    return len(_str("string::len", 1, s))


def _s_lowercase(s: Any) -> Any:
    return _str("string::lowercase", 1, s).lower()


def _s_uppercase(s: Any) -> Any:
    return _str("string::uppercase", 1, s).upper()


def _s_contains(s: Any, x: Any) -> Any:
    return _str("string::contains", 2, x) in _str("string::contains", 1, s)


def _s_starts_with(s: Any, x: Any) -> Any:
    a = _str("string::starts_with", 1, s)
    return a.startswith(_str("string::starts_with", 2, x))


def _s_ends_with(s: Any, x: Any) -> Any:
    a = _str("string::ends_with", 1, s)
    return a.endswith(_str("string::ends_with", 2, x))


def _s_trim(s: Any) -> Any:
    return _str("string::trim", 1, s).strip()


def _s_reverse(s: Any) -> Any:
    return _str("string::reverse", 1, s)[::-1]


def _s_repeat(s: Any, n: Any) -> Any:
    a = _str("string::repeat", 1, s)
    k = _int("string::repeat", 2, n)
    if k < 0:
        raise EvalError(f'Failed to compute: "string::repeat({k})", as the operation results '
                        "in a negative value.")
    if len(a) * k > 1_000_000:
        raise EvalError("string::repeat: output too long")
    return a * k


def _s_replace(s: Any, old: Any, new: Any) -> Any:
    a = _str("string::replace", 1, s)
    if type(old) is not str:
        raise _arg_error("string::replace", 2, "string", old)
    return a.replace(old, _str("string::replace", 3, new))


def _s_split(s: Any, sep: Any) -> Any:
    a = _str("string::split", 1, s)
    b = _str("string::split", 2, sep)
    if b == "":
        # Rust's split on "" yields an empty string at both ends and each char between
        return ["", *a, ""]
    return a.split(b)


def _s_words(s: Any) -> Any:
    return _str("string::words", 1, s).split()


def _s_slice(s: Any, start: Any = _MISSING, end: Any = _MISSING) -> Any:
    a = _str("string::slice", 1, s)
    if start is _MISSING:
        return a
    b = _int("string::slice", 2, start)
    e = None if end is _MISSING else _int("string::slice", 3, end)
    lo, hi = _slice_bounds(len(a), b, e)
    return a[lo:hi]


def _s_capitalize(s: Any) -> Any:
    a = _str("string::capitalize", 1, s)
    out = []
    prev_ws = True
    for c in a:
        out.append(c.upper() if prev_ws and c.islower() else c)
        prev_ws = c.isspace()
    return "".join(out)


def _s_is_alpha(s: Any) -> Any:
    a = _str("string::is_alpha", 1, s)
    return bool(a) and a.isalpha()


def _s_is_alphanum(s: Any) -> Any:
    a = _str("string::is_alphanum", 1, s)
    return bool(a) and all(c.isalpha() or c.isnumeric() for c in a)


def _s_is_ascii(s: Any) -> Any:
    a = _str("string::is_ascii", 1, s)
    return bool(a) and a.isascii()


def _s_is_numeric(s: Any) -> Any:
    a = _str("string::is_numeric", 1, s)
    return bool(a) and a.isascii() and a.isdigit()


# --------------------------------------------------------------------------------------------
# array::


def _a_len(a: Any) -> Any:
    return len(_arr("array::len", 1, a))


def _a_first(a: Any) -> Any:
    v = _arr("array::first", 1, a)
    return v[0] if v else NONE


def _a_last(a: Any) -> Any:
    v = _arr("array::last", 1, a)
    return v[-1] if v else NONE


def _a_at(a: Any, i: Any) -> Any:
    v = _arr("array::at", 1, a)
    k = _int("array::at", 2, i)
    if k < 0:
        k += len(v)
    return v[k] if 0 <= k < len(v) else NONE


def _a_is_empty(a: Any) -> Any:
    return not _arr("array::is_empty", 1, a)


def _a_distinct(a: Any) -> Any:
    return _uniq(_arr("array::distinct", 1, a))


def _a_flatten(a: Any) -> Any:
    return _flatten(_arr("array::flatten", 1, a))


def _a_group(a: Any) -> Any:
    return _uniq(_flatten(_arr("array::group", 1, a)))


def _a_reverse(a: Any) -> Any:
    return _arr("array::reverse", 1, a)[::-1]


def _a_append(a: Any, v: Any) -> Any:
    return [*_arr("array::append", 1, a), v]


def _a_push(a: Any, v: Any) -> Any:
    return [*_arr("array::push", 1, a), v]


def _a_prepend(a: Any, v: Any) -> Any:
    return [v, *_arr("array::prepend", 1, a)]


def _a_pop(a: Any) -> Any:
    v = _arr("array::pop", 1, a)
    return v[-1] if v else NONE


def _a_add(a: Any, v: Any) -> Any:
    out = list(_arr("array::add", 1, a))
    for x in (v if type(v) is list or type(v) is tuple else [v]):
        if _index_of(out, x) < 0:
            out.append(x)
    return out


def _a_concat(*arrays: Any) -> Any:
    out: list[Any] = []
    for n, a in enumerate(arrays, 1):
        out.extend(_arr("array::concat", n, a))
    return out


def _a_union(a: Any, b: Any) -> Any:
    return _uniq([*_arr("array::union", 1, a), *_arr("array::union", 2, b)])


def _a_intersect(a: Any, b: Any) -> Any:
    x = _arr("array::intersect", 1, a)
    rest = list(_arr("array::intersect", 2, b))
    out = []
    for v in x:
        i = _index_of(rest, v)
        if i >= 0:
            del rest[i]
            out.append(v)
    return out


def _a_difference(a: Any, b: Any) -> Any:
    x = _arr("array::difference", 1, a)
    rest = list(_arr("array::difference", 2, b))
    out = []
    for v in x:
        i = _index_of(rest, v)
        if i >= 0:
            del rest[i]
        else:
            out.append(v)
    return out + rest


def _a_complement(a: Any, b: Any) -> Any:
    x = _arr("array::complement", 1, a)
    other = {_key(v) for v in _arr("array::complement", 2, b)}
    return [v for v in x if _key(v) not in other]


def _a_join(a: Any, sep: Any) -> Any:
    v = _arr("array::join", 1, a)
    return _str("array::join", 2, sep).join(raw_string(x) for x in v)


def _a_max(a: Any) -> Any:
    v = _arr("array::max", 1, a)
    if not v:
        return NONE
    best = v[0]
    kb = _key(best)
    for x in v[1:]:
        k = _key(x)
        if k >= kb:  # Rust's max keeps the last of equal elements
            best, kb = x, k
    return best


def _a_min(a: Any) -> Any:
    v = _arr("array::min", 1, a)
    if not v:
        return NONE
    best = v[0]
    kb = _key(best)
    for x in v[1:]:
        k = _key(x)
        if k < kb:  # ... and min the first
            best, kb = x, k
    return best


def _a_matches(a: Any, v: Any) -> Any:
    return [equals(x, v) for x in _arr("array::matches", 1, a)]


def _a_remove(a: Any, i: Any) -> Any:
    v = list(_arr("array::remove", 1, a))
    k = _int("array::remove", 2, i)
    if k < 0:
        k += len(v)
    if 0 <= k < len(v):
        del v[k]
    return v


def _a_insert(a: Any, x: Any, i: Any = _MISSING) -> Any:
    v = list(_arr("array::insert", 1, a))
    if i is _MISSING:
        v.append(x)
        return v
    k = _int("array::insert", 3, i)
    if k < 0:
        k += len(v)
    if 0 <= k <= len(v):
        v.insert(k, x)
    return v


def _a_slice(a: Any, start: Any = _MISSING, end: Any = _MISSING) -> Any:
    v = _arr("array::slice", 1, a)
    if start is _MISSING:
        return list(v)
    b = _int("array::slice", 2, start)
    e = None if end is _MISSING else _int("array::slice", 3, end)
    lo, hi = _slice_bounds(len(v), b, e)
    return list(v[lo:hi])


def _sorted(name: str, a: Any, desc: bool) -> Any:
    v = _arr(name, 1, a)
    # equal elements of different storage (1, 1.0) come back in any order from SurrealDB's
    # unstable sort; here in their original order
    return sorted(v, key=_key, reverse=desc)


def _a_sort(a: Any, order: Any = _MISSING) -> Any:
    desc = order is False or order == "desc" if type(order) in (bool, str) else False
    return _sorted("array::sort", a, desc)


def _a_sort_asc(a: Any) -> Any:
    return _sorted("array::sort::asc", a, False)


def _a_sort_desc(a: Any) -> Any:
    return _sorted("array::sort::desc", a, True)


def _a_repeat(v: Any, n: Any) -> Any:
    k = _int("array::repeat", 2, n)
    if k < 0:
        raise EvalError("Incorrect arguments for function array::repeat(). Expected argument 2 "
                        "to be a positive number")
    if k > 1_000_000:
        raise EvalError("array::repeat: output too long")
    return [v] * k


def _a_windows(a: Any, n: Any) -> Any:
    v = _arr("array::windows", 1, a)
    k = _int("array::windows", 2, n)
    if k <= 0:
        raise EvalError("Incorrect arguments for function array::windows(). The second "
                        "argument must be an integer greater than 0")
    return [list(v[i:i + k]) for i in range(len(v) - k + 1)]


def _a_clump(a: Any, n: Any) -> Any:
    v = _arr("array::clump", 1, a)
    k = _int("array::clump", 2, n)
    if k <= 0:
        raise EvalError("Incorrect arguments for function array::clump(). The second "
                        "argument must be an integer greater than 0")
    return [list(v[i:i + k]) for i in range(0, len(v), k)]


def _a_combine(a: Any, b: Any) -> Any:
    x = _arr("array::combine", 1, a)
    y = _arr("array::combine", 2, b)
    return [[p, q] for p in x for q in y]


# --------------------------------------------------------------------------------------------
# math::


def _m_abs(x: Any) -> Any:
    v = _num("math::abs", 1, x)
    if type(v) is int and v == _I64_MIN:
        raise EvalError(f"math::abs({v}) overflows")
    return abs(v)


def _m_ceil(x: Any) -> Any:
    v = _num("math::ceil", 1, x)
    t = type(v)
    if t is int:
        return v
    if t is float:
        return math.copysign(float(math.ceil(v)), v) if math.isfinite(v) else v
    return v.to_integral_value(rounding=ROUND_CEILING)


def _m_floor(x: Any) -> Any:
    v = _num("math::floor", 1, x)
    t = type(v)
    if t is int:
        return v
    if t is float:
        return math.copysign(float(math.floor(v)), v) if math.isfinite(v) else v
    return v.to_integral_value(rounding=ROUND_FLOOR)


def _m_round(x: Any) -> Any:
    v = _num("math::round", 1, x)
    t = type(v)
    if t is int:
        return v
    if t is float:
        if not math.isfinite(v):
            return v
        # Rust rounds half away from zero
        r = math.floor(abs(v) + 0.5)
        if r - abs(v) > 0.5:  # abs(v) + 0.5 rounded up past the half
            r -= 1
        return math.copysign(float(r), v)
    return v.to_integral_value(rounding=ROUND_HALF_EVEN)


def _m_sign(x: Any) -> Any:
    v = _num("math::sign", 1, x)
    t = type(v)
    if t is int:
        return (v > 0) - (v < 0)
    if t is float:
        if v != v:  # noqa: PLR0124
            return v
        return math.copysign(1.0, v)
    if v == 0:
        return Decimal(0)
    return Decimal(1) if v > 0 else Decimal(-1)


def _m_sqrt(x: Any) -> Any:
    v = _num("math::sqrt", 1, x)
    if v < 0:
        return _NAN
    if type(v) is Decimal:
        return _dec(v.sqrt(context=_WIDE))
    return math.sqrt(float(v))


def _m_pow(x: Any, y: Any) -> Any:
    return _pow(_num("math::pow", 1, x), _num("math::pow", 2, y))


def _m_max(a: Any) -> Any:
    v = _nums("math::max", 1, a)
    if not v:
        return -math.inf
    best = v[0]
    kb = _key(best)
    for x in v[1:]:
        k = _key(x)
        if k >= kb:
            best, kb = x, k
    return best


def _m_min(a: Any) -> Any:
    v = _nums("math::min", 1, a)
    if not v:
        return math.inf
    best = v[0]
    kb = _key(best)
    for x in v[1:]:
        k = _key(x)
        if k < kb:
            best, kb = x, k
    return best


def sum_numbers(values: list[Any]) -> Any:
    """SurrealDB's unchecked sum (ints wrap around 64 bits) from 0, left to right."""
    acc: Any = 0
    for x in values:
        ta = type(acc)
        tx = type(x)
        if ta is int and tx is int:
            acc = _wrap(acc + x)
        elif ta is Decimal or tx is Decimal:
            acc = _dec(_WIDE.add(_to_decimal(acc), _to_decimal(x)))
        else:
            acc = float(acc) + float(x)
    return acc


def _wrap(v: int) -> int:
    return (v + 2**63) % 2**64 - 2**63


def _m_sum(a: Any) -> Any:
    return sum_numbers(_nums("math::sum", 1, a))


def _m_mean(a: Any) -> Any:
    v = _nums("math::mean", 1, a)
    if not v:
        return _NAN
    acc: Any = 0.0
    for x in v:
        acc = _num_op("+", acc, x)
    if type(acc) is Decimal:
        return _dec(_WIDE.divide(acc, Decimal(len(v))))
    return float(acc) / len(v)


def _m_product(a: Any) -> Any:
    acc: Any = 1
    for x in _nums("math::product", 1, a):
        ta = type(acc)
        tx = type(x)
        if ta is int and tx is int:
            acc = _wrap(acc * x)
        elif ta is Decimal or tx is Decimal:
            acc = _dec(_WIDE.multiply(_to_decimal(acc), _to_decimal(x)))
        else:
            acc = float(acc) * float(x)
    return acc


def _m_clamp(x: Any, lo: Any, hi: Any) -> Any:
    v = _num("math::clamp", 1, x)
    a = _num("math::clamp", 2, lo)
    b = _num("math::clamp", 3, hi)
    if _key(a) > _key(b):
        raise EvalError("Incorrect arguments for function math::clamp(). Lowerbound for clamp "
                        "must be smaller than the upperbound")
    t = type(v)
    if t is int and type(a) is int and type(b) is int:
        return min(max(v, a), b)
    if t is Decimal:
        lo_d, hi_d = _to_decimal(a), _to_decimal(b)
        return min(max(v, lo_d), hi_d)
    # a float, or an int with a float or decimal bound: clamped as floats
    x = float(v)
    lo_f, hi_f = _as_float(a), _as_float(b)
    if x != x:  # noqa: PLR0124
        return x
    return min(max(x, lo_f), hi_f)


def _as_float(v: Any) -> float:
    if type(v) is Decimal:
        try:
            return float(v)
        except (OverflowError, ValueError):
            return 0.0
    return float(v)


# --------------------------------------------------------------------------------------------
# type:: and the rest


def _is(kind: str) -> Callable[[Any], bool]:
    def test(v: Any) -> bool:
        return kind_name(v) == kind
    return test


def _t_is_number(v: Any) -> Any:
    return _is_num(v)


def _t_is_record(v: Any, table: Any = _MISSING) -> Any:
    if table is _MISSING:
        return type(v) is RecordID
    name = _str("type::is_record", 2, table)
    return type(v) is RecordID and bool(v.table_name == name)


def _count(v: Any = ...) -> Any:
    if v is ...:
        return 1
    t = type(v)
    if t is list or t is tuple:
        return sum(1 for x in v if truthy(x))
    return 1 if truthy(v) else 0


def _not(v: Any) -> Any:
    return not truthy(v)


#: name -> (function, fewest arguments, most arguments or None for any number)
FUNCTIONS: dict[str, tuple[Callable[..., Any], int, int | None]] = {
    "string::capitalize": (_s_capitalize, 1, 1),
    "string::concat": (_s_concat, 0, None),
    "string::contains": (_s_contains, 2, 2),
    "string::ends_with": (_s_ends_with, 2, 2),
    "string::is_alpha": (_s_is_alpha, 1, 1),
    "string::is_alphanum": (_s_is_alphanum, 1, 1),
    "string::is_ascii": (_s_is_ascii, 1, 1),
    "string::is_numeric": (_s_is_numeric, 1, 1),
    "string::join": (_s_join, 1, None),
    "string::len": (_s_len, 1, 1),
    "string::lowercase": (_s_lowercase, 1, 1),
    "string::repeat": (_s_repeat, 2, 2),
    "string::replace": (_s_replace, 3, 3),
    "string::reverse": (_s_reverse, 1, 1),
    "string::slice": (_s_slice, 1, 3),
    "string::split": (_s_split, 2, 2),
    "string::starts_with": (_s_starts_with, 2, 2),
    "string::trim": (_s_trim, 1, 1),
    "string::uppercase": (_s_uppercase, 1, 1),
    "string::words": (_s_words, 1, 1),
    "array::add": (_a_add, 2, 2),
    "array::append": (_a_append, 2, 2),
    "array::at": (_a_at, 2, 2),
    "array::clump": (_a_clump, 2, 2),
    "array::combine": (_a_combine, 2, 2),
    "array::complement": (_a_complement, 2, 2),
    "array::concat": (_a_concat, 0, None),
    "array::difference": (_a_difference, 2, 2),
    "array::distinct": (_a_distinct, 1, 1),
    "array::first": (_a_first, 1, 1),
    "array::flatten": (_a_flatten, 1, 1),
    "array::group": (_a_group, 1, 1),
    "array::insert": (_a_insert, 2, 3),
    "array::intersect": (_a_intersect, 2, 2),
    "array::is_empty": (_a_is_empty, 1, 1),
    "array::join": (_a_join, 2, 2),
    "array::last": (_a_last, 1, 1),
    "array::len": (_a_len, 1, 1),
    "array::matches": (_a_matches, 2, 2),
    "array::max": (_a_max, 1, 1),
    "array::min": (_a_min, 1, 1),
    "array::pop": (_a_pop, 1, 1),
    "array::prepend": (_a_prepend, 2, 2),
    "array::push": (_a_push, 2, 2),
    "array::remove": (_a_remove, 2, 2),
    "array::repeat": (_a_repeat, 2, 2),
    "array::reverse": (_a_reverse, 1, 1),
    "array::slice": (_a_slice, 1, 3),
    "array::sort": (_a_sort, 1, 2),
    "array::sort::asc": (_a_sort_asc, 1, 1),
    "array::sort::desc": (_a_sort_desc, 1, 1),
    "array::union": (_a_union, 2, 2),
    "array::windows": (_a_windows, 2, 2),
    "math::abs": (_m_abs, 1, 1),
    "math::ceil": (_m_ceil, 1, 1),
    "math::clamp": (_m_clamp, 3, 3),
    "math::floor": (_m_floor, 1, 1),
    "math::max": (_m_max, 1, 1),
    "math::mean": (_m_mean, 1, 1),
    "math::min": (_m_min, 1, 1),
    "math::pow": (_m_pow, 2, 2),
    "math::product": (_m_product, 1, 1),
    "math::round": (_m_round, 1, 1),
    "math::sign": (_m_sign, 1, 1),
    "math::sqrt": (_m_sqrt, 1, 1),
    "math::sum": (_m_sum, 1, 1),
    "type::is_array": (_is("array"), 1, 1),
    "type::is_bool": (_is("bool"), 1, 1),
    "type::is_bytes": (_is("bytes"), 1, 1),
    "type::is_datetime": (_is("datetime"), 1, 1),
    "type::is_decimal": (_is("decimal"), 1, 1),
    "type::is_duration": (_is("duration"), 1, 1),
    "type::is_float": (_is("float"), 1, 1),
    "type::is_int": (_is("int"), 1, 1),
    "type::is_none": (_is("none"), 1, 1),
    "type::is_null": (_is("null"), 1, 1),
    "type::is_number": (_t_is_number, 1, 1),
    "type::is_object": (_is("object"), 1, 1),
    "type::is_record": (_t_is_record, 1, 2),
    "type::is_string": (_is("string"), 1, 1),
    "type::is_uuid": (_is("uuid"), 1, 1),
    "count": (_count, 0, 1),
    "not": (_not, 1, 1),
}

# functions whose value changes without a write: a view cannot be kept by deltas
_CLOCK = ("time::now", "rand", "rand::", "array::shuffle", "uuid", "ulid")
_FAMILIES = ("string::", "array::", "math::", "type::is_")


def check_call(name: str, nargs: int) -> None:
    """Refuse (QueryRejected) a call the engine cannot evaluate: unknown functions, functions
    whose value changes without a write (``time::now()``), a wrong number of arguments."""
    if name == "time::now":
        raise QueryRejected(
            "time::now() is not supported: its value changes without a write, so no write "
            "would ever move a row in or out of the view. Pass the time as a parameter "
            "(`created_at > $since`) and register the view again when it should move")
    if name.startswith(_CLOCK) or name in ("rand", "uuid", "ulid"):
        raise QueryRejected(f"function {name}() is not supported: it answers something new on "
                            "every call, so the view would have no stable result")
    spec = FUNCTIONS.get(name)
    if spec is None:
        family = next((f for f in _FAMILIES if name.startswith(f)), None)
        if family is not None:
            known = ", ".join(sorted(n for n in FUNCTIONS if n.startswith(family)))
            raise QueryRejected(f"function {name}() is not supported; of its family the engine "
                                f"evaluates {known}")
        raise QueryRejected(f"function {name}() is not supported (the engine evaluates the "
                            "string::, array::, math:: and type::is_* functions listed in "
                            "engine/README.md, count() and not())")
    lo, hi = spec[1], spec[2]
    if nargs < lo or (hi is not None and nargs > hi):
        want = f"{lo}" if lo == hi else (f"{lo} to {hi}" if hi is not None else f"{lo} or more")
        raise QueryRejected(f"function {name}() takes {want} argument(s), got {nargs}")


def call(name: str, *args: Any) -> Any:
    """Evaluate a supported function (raises EvalError where SurrealDB answers an error)."""
    return FUNCTIONS[name][0](*args)


def is_none_or_null(v: Any) -> bool:
    """What ``??`` skips."""
    return v is None or type(v) is NoneType
