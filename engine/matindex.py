"""Indexes of a shape's materialisations by their constants.

A row change must reach only the materialisations whose membership it can change. Two kinds of
top-level conjuncts are indexed across the materialisations of one shape:

- **equality** ``field = $slot``: materialisations are bucketed by an exact key of the slot
  value (:func:`xkey`: equal keys exactly when SurrealDB's ``=`` holds, types included);
- **range** ``field < <= > >= $slot`` on one field (one lower and/or one upper bound): inside a
  bucket, an interval index over SurrealDB's total value order (:func:`engine.values.sort_key`),
  so the materialisations whose interval contains a row's value are found by bisection.

When every top-level conjunct of a shape is covered by the index, the index *is* the filter:
a lookup answers exactly the materialisations whose predicate holds, without evaluating it.

Positions: a row value ``v`` sits at ``(sort_key(v), 1)``; an interval is half-open
``[start, end)`` over positions, with ``>= c`` starting at ``(sort_key(c), 1)``, ``> c`` at
``(sort_key(c), 2)``, ``< c`` ending at ``(sort_key(c), 1)`` and ``<= c`` at
``(sort_key(c), 2)``. Comparisons of positions are plain tuple comparisons.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any

from engine.values import Duration, RecordID, sort_key

RANGE_OPS = frozenset({"<", "<=", ">", ">="})
# operator as seen from the field: `$c < score` is `score > $c`
FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
# A bounded interval covering more elementary segments than this goes to the `wide` list
# (checked one by one) instead of being copied into every segment it covers.
WIDE_SEGMENTS = 32


def exact_key(v: Any) -> Any:
    """A hashable key that distinguishes every value (types included): identical params."""
    t = type(v)
    if t is list or t is tuple:
        return ("a", tuple(exact_key(x) for x in v))
    if t is dict:
        return ("o", tuple(sorted((k, exact_key(x)) for k, x in v.items())))
    if t is RecordID:
        return ("r", v.table_name, exact_key(v.id))
    if t is Duration:
        return ("d", v.elapsed)
    try:
        hash(v)
    except TypeError:
        return ("x", t.__name__, repr(v))
    return (t.__name__, v)


def xkey(v: Any) -> Any:
    """Exact equality key: ``xkey(a) == xkey(b)`` exactly when SurrealDB says ``a = b``."""
    t = type(v)
    if t is str:
        return v
    if t is RecordID:
        k = v.id
        tk = type(k)
        if tk is int or tk is str:
            # links with int/str keys (the common case): cheap to build and to hash; sort
            # keys start with an int rank, so neither they nor strings collide with these
            return (_LINK, v.table_name, k)
    return sort_key(v)


_LINK = "\0r"


def position(v: Any) -> tuple[Any, int]:
    """Where a row value sits among interval bounds."""
    return (sort_key(v), 1)


def bound(op: str, c: Any) -> tuple[str, tuple[Any, int]]:
    """``("lo", start)`` or ``("hi", end)`` for the conjunct ``field <op> c``."""
    k = sort_key(c)
    if op == ">=":
        return "lo", (k, 1)
    if op == ">":
        return "lo", (k, 2)
    if op == "<":
        return "hi", (k, 1)
    return "hi", (k, 2)


class _Sorted:
    """Materialisations sorted by one bound: a plain key list and a parallel list of mats, so
    a prefix or suffix is one C-level slice."""

    __slots__ = ("keys", "mats")

    def __init__(self) -> None:
        self.keys: list[Any] = []
        self.mats: list[Any] = []

    def add(self, key: Any, mat: Any) -> None:
        i = bisect_right(self.keys, key)
        self.keys.insert(i, key)
        self.mats.insert(i, mat)

    def remove(self, key: Any, mat: Any) -> None:
        i = bisect_left(self.keys, key)
        j = bisect_right(self.keys, key)
        for n in range(i, j):
            if self.mats[n] is mat:
                del self.keys[n]
                del self.mats[n]
                return

    def __len__(self) -> int:
        return len(self.mats)


class RangeIndex:
    """Materialisations of one bucket by interval ``[start, end)`` over value positions.

    Intervals open on one side live in sorted lists (a stabbing query is a prefix or a
    suffix); bounded intervals live in a segment map (the sorted distinct bounds cut the
    order into elementary segments, each listing the intervals covering it), or, when they
    cover too many segments, in a list sorted by start whose ends are checked one by one.
    """

    __slots__ = ("bkeys", "brefs", "empty", "lower", "segs", "upper", "wide")

    def __init__(self) -> None:
        self.lower = _Sorted()  # [start, +inf), sorted by start
        self.upper = _Sorted()  # (-inf, end), sorted by end
        self.bkeys: list[Any] = []  # segment map: sorted distinct bounds
        self.brefs: list[int] = []  # intervals starting or ending at each bound
        self.segs: list[list[Any]] = []  # segs[i] covers [bkeys[i], bkeys[i + 1])
        self.wide = _Sorted()  # bounded intervals too wide for the segment map
        self.empty: list[Any] = []  # start >= end: nothing ever falls inside

    def _seg_mats(self) -> set[Any]:
        out: set[Any] = set()
        for s in self.segs:
            out.update(s)
        return out

    def all(self) -> list[Any]:
        """Every materialisation in the index."""
        return (self.lower.mats + self.upper.mats + self.wide.mats + self.empty
                + list(self._seg_mats()))

    # -- registration ----------------------------------------------------------------
    def add(self, mat: Any, start: Any, end: Any) -> None:
        """Index ``mat`` over ``[start, end)`` (None: unbounded on that side)."""
        if end is None:
            self.lower.add(start, mat)
        elif start is None:
            self.upper.add(end, mat)
        elif not start < end:
            self.empty.append(mat)
        elif self._covered(start, end) > WIDE_SEGMENTS:
            self.wide.add(start, mat)
        else:
            i = self._boundary(start)
            j = self._boundary(end)
            for n in range(i, j):
                self.segs[n].append(mat)

    def remove(self, mat: Any, start: Any, end: Any) -> None:
        """Forget ``mat`` (same bounds as given to :meth:`add`)."""
        if end is None:
            self.lower.remove(start, mat)
        elif start is None:
            self.upper.remove(end, mat)
        elif not start < end:
            self.empty = [m for m in self.empty if m is not mat]
        elif any(m is mat for m in self.wide.mats):
            self.wide.remove(start, mat)
        else:
            i = bisect_left(self.bkeys, start)
            j = bisect_left(self.bkeys, end)
            for n in range(i, j):
                seg = self.segs[n]
                for x in range(len(seg)):
                    if seg[x] is mat:
                        del seg[x]
                        break
            self._unref(j)
            self._unref(i)

    def _covered(self, start: Any, end: Any) -> int:
        return bisect_left(self.bkeys, end) - bisect_right(self.bkeys, start) + 2

    def _boundary(self, key: Any) -> int:
        """Index of bound ``key`` in the segment map, splitting the segment it falls into."""
        keys = self.bkeys
        i = bisect_left(keys, key)
        if i < len(keys) and keys[i] == key:
            self.brefs[i] += 1
            return i
        # the new segment [key, next) is covered by what covered [prev, next)
        inherit = list(self.segs[i - 1]) if i > 0 else []
        keys.insert(i, key)
        self.brefs.insert(i, 1)
        self.segs.insert(i, inherit)
        return i

    def _unref(self, i: int) -> None:
        self.brefs[i] -= 1
        if self.brefs[i] == 0:
            # no interval starts or ends here: segments i-1 and i list the same intervals
            del self.bkeys[i]
            del self.brefs[i]
            del self.segs[i]

    # -- lookups ---------------------------------------------------------------------
    def stab(self, p: Any) -> list[Any]:
        """Materialisations whose interval contains position ``p``."""
        out = self.lower.mats[: bisect_right(self.lower.keys, p)]
        if self.upper.mats:
            out += self.upper.mats[bisect_right(self.upper.keys, p):]
        if self.segs:
            i = bisect_right(self.bkeys, p) - 1
            if i >= 0:
                out += self.segs[i]
        if self.wide.mats:
            w = self.wide
            out += [m for m in w.mats[: bisect_right(w.keys, p)] if p < m.hi_pos]
        return out

    def classify(self, p0: Any, p1: Any) -> tuple[list[Any], list[Any], list[Any]]:
        """(holding both, only ``p0``, only ``p1``) for a value moving from ``p0`` to ``p1``."""
        if p0 == p1:
            return self.stab(p0), [], []
        stays: list[Any] = []
        left: list[Any] = []
        entered: list[Any] = []
        lo = self.lower
        if lo.mats:
            i0 = bisect_right(lo.keys, p0)
            i1 = bisect_right(lo.keys, p1)
            if i0 < i1:
                stays = lo.mats[:i0]
                entered = lo.mats[i0:i1]
            else:
                stays = lo.mats[:i1]
                left = lo.mats[i1:i0]
        up = self.upper
        if up.mats:
            i0 = bisect_right(up.keys, p0)
            i1 = bisect_right(up.keys, p1)
            if i0 < i1:
                stays = stays + up.mats[i1:]
                left = left + up.mats[i0:i1]
            else:
                stays = stays + up.mats[i0:]
                entered = entered + up.mats[i1:i0]
        if self.segs or self.wide.mats:
            a = self._bounded(p0)
            b = self._bounded(p1)
            if a or b:
                sb = set(b)
                sa = set(a)
                stays = stays + [m for m in a if m in sb]
                left = left + [m for m in a if m not in sb]
                entered = entered + [m for m in b if m not in sa]
        return stays, left, entered

    def _bounded(self, p: Any) -> list[Any]:
        out: list[Any] = []
        if self.segs:
            i = bisect_right(self.bkeys, p) - 1
            if i >= 0:
                out = self.segs[i]
        if self.wide.mats:
            w = self.wide
            out = out + [m for m in w.mats[: bisect_right(w.keys, p)] if p < m.hi_pos]
        return out
