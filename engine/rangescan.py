"""Rows of one table whose field may pass a range conjunct, from its equality index.

A new view of ``... WHERE votes >= $lo AND votes < $hi`` (or, through a link,
``thread.score <= $max``: engine.linkscan) evaluated its WHERE clause on every row of the
table, 1-2 us a row (issue 33: 100 ms a view over 100k comments, whatever it shows).
The equality index of the field (:meth:`engine.store.TableStore.index`) already groups the
rows by value; its keys that are exact ints, sorted once, answer ``field <op> c`` for a
number ``c`` by bisection.

The answer is a superset of the rows that pass, which is all a caller needs (the whole
WHERE clause is still evaluated on every candidate): the rows under an int key that
compares as asked, plus every row under any other key (a float with a fraction, a huge
int, a string, NONE, NULL, an array...), since SurrealDB orders values of other types
against numbers by kind and this does not try to follow that order.

The sorted keys are kept per table and field until the table's next write (views
registered one after the other share them), with the running count of rows below each key,
so a caller can see what a range would give before building the set.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from typing import Any

from engine.store import TableStore

# a range giving more than this share of the table's rows is not worth a set: the caller
# scans in the table's order instead
MAX_SHARE = 0.5


def _sorted(ts: TableStore, field: str) -> tuple[list[int], list[int], list[Any]]:
    """(the int keys of ``field``'s index in order, the rows under the keys before each
    position, the other keys)."""
    kept = ts.ranges.get(field)
    if kept is not None and kept[0] == ts.writes:
        return kept[1], kept[2], kept[3]
    idx = ts.index(field)
    ints: list[int] = []
    others: list[Any] = []
    for k in idx:
        if type(k) is int:
            ints.append(k)
        else:
            others.append(k)
    ints.sort()
    before = [0] * (len(ints) + 1)
    n = 0
    for i, k in enumerate(ints):
        n += len(idx[k])
        before[i + 1] = n
    ts.ranges[field] = (ts.writes, ints, before, others)
    return ints, before, others


def _span(ints: list[int], op: str, c: int | float) -> tuple[int, int]:
    """The positions [i, j) of the int keys ``k`` with ``k <op> c``."""
    if op == "<":
        return 0, bisect_left(ints, c)
    if op == "<=":
        return 0, bisect_right(ints, c)
    if op == ">":
        return bisect_right(ints, c), len(ints)
    return bisect_left(ints, c), len(ints)  # ">="


def range_rows(ts: TableStore, field: str, bounds: list[tuple[str, Any]],
               most: int | None = None) -> set[str] | None:
    """A superset of the rows of ``ts`` whose ``field`` passes every ``(op, constant)`` of
    ``bounds`` (None: a constant is no finite number, or the set would hold more than
    ``most`` rows, or more than half the table)."""
    for _, c in bounds:
        tc = type(c)
        if (tc is not int and tc is not float) or (tc is float and not math.isfinite(c)):
            return None
    ints, before, others = _sorted(ts, field)
    lo_i, hi_i = 0, len(ints)
    for op, c in bounds:
        i, j = _span(ints, op, c)
        lo_i, hi_i = max(lo_i, i), min(hi_i, j)
    idx = ts.index(field)
    n_other = sum(len(idx[k]) for k in others)
    n = n_other + (before[hi_i] - before[lo_i] if hi_i > lo_i else 0)
    cap = len(ts.rows) * MAX_SHARE
    if most is not None:
        cap = min(cap, most)
    if n > cap:
        return None
    out: set[str] = set()
    for k in others:
        out |= idx[k]
    for p in range(lo_i, hi_i):
        out |= idx[ints[p]]
    return out


_EXACT = 2**53


def range_filter(rows: dict[str, dict[str, Any]], rids: Any, field: str,
                 bounds: list[tuple[str, Any]]) -> Any:
    """The ids of ``rids`` whose row's ``field`` may pass every ``(op, constant)`` of
    ``bounds``: each value tested, when both are exact ints or the constant a float (any
    other value stays: a superset); ``rids`` itself when a constant is no finite number.
    For candidates already few (an index gave them), where building the range's set would
    cost more than testing them."""
    for _, c in bounds:
        tc = type(c)
        if (tc is not int and tc is not float) or not -_EXACT < c < _EXACT:
            return rids  # NaN fails the test too
    keep = []
    for rid in rids:
        v = rows[rid].get(field)
        if type(v) is int and -_EXACT < v < _EXACT:
            for op, c in bounds:
                if not (v < c if op == "<" else v <= c if op == "<=" else v > c if op == ">"
                        else v >= c):
                    break
            else:
                keep.append(rid)
        else:
            keep.append(rid)
    return keep
