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
from datetime import datetime
from typing import Any

from surrealdb import RecordID

from engine.matindex import FLIP, RANGE_OPS
from engine.store import TableStore
from engine.syntax import conjuncts

# a range giving more than this share of the table's rows is not worth a set: the caller
# scans in the table's order instead
MAX_SHARE = 0.5


def _sorted(ts: TableStore, field: str) -> tuple[list[int], list[int], list[Any]] | None:
    """(the int keys of ``field``'s index in order, the rows under the keys before each
    position, the other keys; the last of ``before`` counts the rows under an int key).
    None when the field holds mostly other values (prices with cents): no index is
    built for it."""
    kept = ts.ranges.get(field)
    if kept is not None and kept[0] == ts.writes:
        return kept[1], kept[2], kept[3]
    if field not in ts.indexes and not _mostly_ints(ts, field):
        return None  # an index of such a field would narrow little and cost a set a row
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


def _mostly_ints(ts: TableStore, field: str) -> bool:
    """Whether most of the first 64 rows hold an int in ``field``."""
    n = ints = 0
    for row in ts.rows.values():
        n += 1
        if type(row.get(field)) is int:
            ints += 1
        if n == 64:
            break
    return ints * 2 > n


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
    found = _sorted(ts, field)
    if found is None:
        return None
    ints, before, others = found
    lo_i, hi_i = 0, len(ints)
    for op, c in bounds:
        i, j = _span(ints, op, c)
        lo_i, hi_i = max(lo_i, i), min(hi_i, j)
    idx = ts.index(field)
    n = len(ts.rows) - before[-1] + (before[hi_i] - before[lo_i] if hi_i > lo_i else 0)
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

#: a range condition on one field of the row: (operator seen from the field, constant,
#: factor: ``field * factor <op> constant``, None for the field itself)
Cond = tuple[str, Any, Any]


def number(c: Any) -> bool:
    """Whether ``c`` is a number the conditions can use (exact ints, finite floats)."""
    tc = type(c)
    return (tc is int or tc is float) and -_EXACT < c < _EXACT  # NaN fails the test too


def own_conditions(where: Any, S: tuple[Any, ...]) -> dict[str, list[Cond]]:
    """The top-level conjuncts ``field <op> $c`` and ``field * $k <op> $c`` (either side,
    ``$k * field`` too) of a WHERE clause with numbers for constants and positive factors,
    by field (the generator's and apps' ``total * 2 > $x`` among them)."""
    out: dict[str, list[Cond]] = {}
    for c in conjuncts(where):
        if c[0] != "cmp" or c[1] not in RANGE_OPS:
            continue
        op0: str = c[1]
        for side, other, op in ((c[2], c[3], op0), (c[3], c[2], FLIP[op0])):
            if other[0] != "slot" or not number(S[other[1]]):
                continue
            field, k = _operand(side, S)
            if field is not None:
                out.setdefault(field, []).append((op, S[other[1]], k))
                break
    return out


def _operand(e: Any, S: tuple[Any, ...]) -> tuple[str | None, Any]:
    """(the field ``e`` reads, its factor or None) for ``field``, ``field * $k``, ``$k *
    field`` with ``$k`` a positive number; (None, None) for anything else."""
    if e[0] == "field" and len(e[1]) == 1:
        return e[1][0], None
    if e[0] == "arith" and e[1] == "*":
        for f, k in ((e[2], e[3]), (e[3], e[2])):
            if (f[0] == "field" and len(f[1]) == 1 and k[0] == "slot" and number(S[k[1]])
                    and S[k[1]] > 0):
                return f[1][0], S[k[1]]
    return None, None


def index_bounds(conds: list[Cond]) -> list[tuple[str, Any]]:
    """Bounds on the field itself implied by ``conds`` (a factor's quotient widened by one
    either way: float division may round)."""
    out: list[tuple[str, Any]] = []
    for op, c, k in conds:
        if k is None:
            out.append((op, c))
        elif op == ">" or op == ">=":
            out.append((">=", math.floor(c / k) - 1))
        else:
            out.append(("<=", math.ceil(c / k) + 1))
    return out


def range_filter(rows: dict[str, dict[str, Any]], rids: Any, field: str,
                 conds: list[Cond]) -> Any:
    """The ids of ``rids`` whose row's ``field`` may pass every condition: each value
    tested when it is an exact int (and its product too; any other value stays: a
    superset). For candidates already few (an index gave them), where building the
    range's set would cost more than testing them (``FILTERED`` keeps the most one call
    tested: a test holds it to that bound)."""
    keep = []
    n = 0
    for rid in rids:
        n += 1
        v = rows[rid].get(field)
        if type(v) is int and -_EXACT < v < _EXACT:
            for op, c, k in conds:
                x = v if k is None else v * k
                if not -_EXACT < x < _EXACT:
                    continue  # SurrealDB and Python may round the product apart
                if not (x < c if op == "<" else x <= c if op == "<=" else x > c if op == ">"
                        else x >= c):
                    break
            else:
                keep.append(rid)
        else:
            keep.append(rid)
    if n > FILTERED[0]:
        FILTERED[0] = n
    return keep


#: the most candidates one call of :func:`range_filter` tested (tests reset and read it)
FILTERED = [0]


# Kinds of sort values a new window can walk in order from the field's equality index
# (engine.window, "walk"): within one kind the index keys order as the window's entries do
# (numbers by value, strings by code point, datetimes with a zone by instant), and every row
# under a key holds a value equal to it.
WALK_NUMBER = 0
WALK_STR = 1
WALK_DATETIME = 2


def walk_kind(v: Any) -> int:
    """The walk kind of a value, -1 for any other: huge ints, NaN, infinities, decimals,
    datetimes without a zone, NONE, ..."""
    t = type(v)
    if t is int:
        return WALK_NUMBER if -_EXACT < v < _EXACT else -1
    if t is float:
        return WALK_NUMBER if math.isfinite(v) else -1
    if t is str:
        return WALK_STR
    if t is datetime:
        return WALK_DATETIME if v.tzinfo is not None else -1
    return -1


def walk_value(k: Any, kind: int) -> Any:
    """The value an index key of walk kind ``kind`` orders by (None: the key is of another
    kind). A float with a fraction is keyed by its sort key (engine.store.ikey), exact
    when it ends in zeros (a decimal equal to no float does not)."""
    t = type(k)
    if kind == WALK_NUMBER:
        if t is int:
            return k
        if (t is tuple and len(k) == 2 and k[0] == "\0n" and type(k[1]) is tuple
                and len(k[1]) == 5 and k[1][1] == 0 and type(k[1][2]) is float
                and math.isfinite(k[1][2]) and k[1][3] == 0 and k[1][4] == 0):
            return k[1][2]
        return None
    if kind == WALK_STR:
        # ikey gives NaN this string key: its rows are evaluated with the other kinds
        return k if t is str and k != "\0nan" else None
    return k if t is datetime and k.tzinfo is not None else None


def walk_keys(ts: TableStore, field: str, kind: int, born: int
              ) -> tuple[list[tuple[Any, Any]], list[Any]]:
    """((value, key) of ``field``'s equality index keys of walk kind ``kind``, ascending by
    value; its other keys) for an order made when the table had seen ``born`` writes.

    Kept across writes (views registered one after the other share them, and a window
    refilled after writes does not sort them again): a list made at or after ``born`` holds
    every key the order has not seen written. A key added since holds only rows written
    since, which the order evaluated (engine.window.requalify); a key emptied since finds
    no rows. Made again for an older order, or once the table has seen more writes since
    than the list has keys (:func:`stale`)."""
    kept = ts.walks.get((field, kind))
    if kept is not None and not stale(ts, kept[0], len(kept[1]) + len(kept[2]), born):
        return kept[1], kept[2]
    keys: list[tuple[Any, Any]] = []
    others: list[Any] = []
    for k in ts.index(field):
        v = walk_value(k, kind)
        if v is None:
            others.append(k)
        else:
            keys.append((v, k))
    keys.sort(key=_first)  # values are distinct: equal numbers share one key
    ts.walks[(field, kind)] = (ts.writes, keys, others)
    return keys, others


def walk_ids(ts: TableStore, kind: int, born: int) -> tuple[list[tuple[Any, Any]], list[Any]]:
    """As :func:`walk_keys` for the record ids (ORDER BY id): (the walk value of the id's
    key, the row's id text) for the rows whose key is of walk kind ``kind``, ascending by
    key (keys are distinct: one row each); the other rows' id texts. Record ids of one
    table order by their keys: numbers as numbers, strings as strings (engine.value_order).
    Kept as :func:`walk_keys` keeps its lists: a row created since was evaluated, a row
    deleted since is no longer in the table (100k comments sorted again on each refill of
    a `ORDER BY id DESC LIMIT 10` window cost 50-100 ms a write)."""
    kept = ts.walks.get(("id", kind))
    if kept is not None and not stale(ts, kept[0], len(kept[1]) + len(kept[2]), born):
        return kept[1], kept[2]
    keys: list[tuple[Any, Any]] = []
    others: list[Any] = []
    for rid, row in ts.rows.items():
        r = row.get("id")
        v = walk_value(r.id, kind) if type(r) is RecordID else None
        if v is None:
            others.append(rid)
        else:
            keys.append((v, rid))
    keys.sort(key=_first)
    ts.walks[("id", kind)] = (ts.writes, keys, others)
    return keys, others


def stale(ts: TableStore, made: int, size: int, born: int) -> bool:
    """Whether a walk list of ``size`` entries made when the table had seen ``made`` writes
    is too old for an order born at ``born`` writes: made before the order (it may miss
    rows written in between, which that order never evaluated), or the table has seen more
    writes since than the list has entries (made again, amortised). The rule of every
    list a walk reads (:func:`walk_keys`, :func:`walk_ids`, engine.window._key_order)."""
    return made < born or ts.writes - made > max(_STALE_MIN, size)


_STALE_MIN = 64  # writes a walk list outlives at least


def _first(pair: tuple[Any, Any]) -> Any:
    return pair[0]
