"""SurrealDB operators (``=``, ``<``, ``CONTAINS``, ``INSIDE``...), truthiness and field paths.

Part of :mod:`engine.values` (import from there; the facts are in its docstring).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from surrealdb import Duration, RecordID

from engine.value_order import sort_key
from engine.value_types import NONE, NoneType

# --------------------------------------------------------------------------------------------
# Operators
# --------------------------------------------------------------------------------------------


def equals(a: Any, b: Any) -> bool:
    """SurrealDB ``=`` / ``==``: numbers by value across int/float/decimal, otherwise kind+value."""
    ta = type(a)
    if ta is type(b):
        if ta in _SIMPLE_EQ:
            return bool(a == b)
        if ta is RecordID:
            # links with int or string keys (the common case) compare without sort keys
            ia = a.id
            ib = b.id
            ti = type(ia)
            if ti is type(ib) and (ti is int or ti is str):
                return bool(ia == ib and a.table_name == b.table_name)
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
    (``resolve(rid)`` returns the linked row or NONE/None when it does not exist), else NONE;
    a field named in the id's object key is read from the key, as SurrealDB does.
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
        elif t is RecordID:
            key = cur.id
            if type(key) is dict and seg in key:
                # SurrealDB answers a field named in an object key from the id itself,
                # without fetching the record (``a:{a:0}.a`` is 0 even when the row says 7).
                cur = key[seg]
                continue
            if resolve is None:
                return NONE
            target = resolve(cur)
            if type(target) is not dict:
                return NONE
            cur = target.get(seg, NONE)
        else:
            return NONE
    return cur
