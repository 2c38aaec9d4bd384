"""Columns: chosen fields of a table's rows as numpy arrays, one slot per row.

A shape whose projection runs a correlated subquery per row (``(SELECT id, n FROM comment
WHERE thread = $parent.id ORDER BY n DESC LIMIT 5)``) needs, to show a new view's rows, the
top rows of every parent at once. Read row by row that is one scattered dict read per child
(about 1 us each on a 2-core VM: 50 ms for 50,000 comments); over columns it is a sort of
arrays (:func:`top_per_parent`). The table keeps the columns of the fields some shape asked
for, from that shape's first registration on, as rows are written and deleted (like an
equality index).

Each value is kept as a tag and a 64-bit number:

- ``INT`` (1): an int in the exactly representable range (``num`` = the value);
- ``2 + k``: a record link of table ``k`` (:func:`table_code`) with such an int key
  (``num`` = the key);
- ``OTHER`` (0): any other value (NONE, NULL, strings, floats, links with string keys...);
- ``UNSURE`` (-1): a link whose key is neither an int nor a string. Its equality key may
  meet an int key (``thread:1.0`` and ``thread:1`` are one record to SurrealDB), so a column
  holding one cannot decide a join on its own.

Freed slots hold ``OTHER`` in every column.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import numpy as np
from surrealdb import RecordID

from engine.values import NONE

OTHER = 0
INT = 1
UNSURE = -1
_EXACT = 2**53

_TABLES: dict[str, int] = {}
_TABLE_NAME = attrgetter("table_name")
_KEY = attrgetter("id")


def table_code(table: str) -> int:
    """The tag of a link to ``table`` (stable for the life of the process)."""
    code = _TABLES.get(table)
    if code is None:
        code = _TABLES[table] = 2 + len(_TABLES)
    return code


def encode(v: Any) -> tuple[int, int]:
    """(tag, number) of one value."""
    t = type(v)
    if t is int:
        return (INT, v) if -_EXACT < v < _EXACT else (OTHER, 0)
    if t is RecordID:
        k = v.id
        tk = type(k)
        if tk is int:
            if -_EXACT < k < _EXACT:
                return table_code(v.table_name), k
            return UNSURE, 0
        if tk is str:
            return OTHER, 0
        return UNSURE, 0
    return OTHER, 0


def _bulk(vals: list[Any], tags: np.ndarray, nums: np.ndarray, own: bool) -> bool:
    """Encode a column of one common kind at once (all exact ints, or all links of one table
    with exact int keys; ``own``: the rows' own ids, all of the table's own table); False to
    encode value by value."""
    n = len(vals)
    if not n:
        return True
    kinds = set(map(type, vals))
    if len(kinds) != 1:
        return False
    kind = next(iter(kinds))
    if kind is int:
        tag = INT
    elif kind is RecordID:
        name = vals[0].table_name
        if not own and set(map(_TABLE_NAME, vals)) != {name}:
            return False
        vals = list(map(_KEY, vals))
        if set(map(type, vals)) != {int}:
            return False
        tag = table_code(name)
    else:
        return False
    try:
        arr = np.fromiter(vals, dtype=np.int64, count=n)
    except OverflowError:
        return False
    if not ((arr > -_EXACT) & (arr < _EXACT)).all():
        return False
    nums[:n] = arr
    tags[:n] = tag
    return True


class Columns:
    """The columns of one table (see the module docstring)."""

    __slots__ = ("cap", "free", "in_order", "nums", "rid_of", "slot", "tags")

    def __init__(self, rows: dict[str, dict[str, Any]]) -> None:
        n = len(rows)
        self.cap = max(1024, 1 << (n + n // 4).bit_length())
        ids = list(rows)
        self.slot: dict[str, int] = dict(zip(ids, range(n)))
        self.rid_of: list[str | None] = ids  # type: ignore[assignment]
        self.free: list[int] = []
        self.in_order = True  # slot i holds the i-th row of the table's dict (no delete yet)
        self.tags: dict[str, np.ndarray] = {}
        self.nums: dict[str, np.ndarray] = {}

    def add(self, field: str, rows: dict[str, dict[str, Any]]) -> None:
        """Keep ``field`` (its values read from ``rows``, in slot order) from now on."""
        if field in self.tags:
            return
        tags = np.zeros(self.cap, dtype=np.int16)
        nums = np.zeros(self.cap, dtype=np.int64)
        if self.in_order:
            vals = [r.get(field, NONE) for r in rows.values()]
        else:
            vals = [rows[r].get(field, NONE) if r is not None else NONE for r in self.rid_of]
        if _bulk(vals, tags, nums, field == "id"):
            self.tags[field] = tags
            self.nums[field] = nums
            return
        for i, v in enumerate(vals):
            tag, num = encode(v)
            if tag:
                tags[i] = tag
                nums[i] = num
        self.tags[field] = tags
        self.nums[field] = nums

    def put(self, rid: str, row: dict[str, Any]) -> None:
        """A row was written."""
        s = self.slot.get(rid)
        if s is None:
            if self.free:
                s = self.free.pop()
                self.rid_of[s] = rid
            else:
                s = len(self.rid_of)
                self.rid_of.append(rid)
                if s >= self.cap:
                    self._grow()
            self.slot[rid] = s
        for field, tags in self.tags.items():
            tag, num = encode(row.get(field, NONE))
            tags[s] = tag
            self.nums[field][s] = num

    def delete(self, rid: str) -> None:
        """A row was deleted."""
        s = self.slot.pop(rid, None)
        if s is None:
            return
        self.rid_of[s] = None
        self.free.append(s)
        self.in_order = False
        for tags in self.tags.values():
            tags[s] = OTHER

    def _grow(self) -> None:
        cap = self.cap * 2
        for field in list(self.tags):
            t = np.zeros(cap, dtype=np.int16)
            t[:self.cap] = self.tags[field]
            self.tags[field] = t
            a = np.zeros(cap, dtype=np.int64)
            a[:self.cap] = self.nums[field]
            self.nums[field] = a
        self.cap = cap


def top_per_parent(cols: Columns, link: str, parent_code: int, parents: np.ndarray,
                   order: list[tuple[str, bool]], own_code: int, lo: int,
                   hi: int | None) -> tuple[np.ndarray, np.ndarray] | None:
    """The rows ranked ``lo``..``hi`` per parent by ``order`` (fields, descending?) then by
    their own int key, among the rows whose ``link`` is a link of table ``parent_code`` to
    one of ``parents`` (int keys). Returns (parent keys, row slots), grouped by parent in
    rank order; None when the columns cannot decide it exactly (a link with an unsure key, a
    non-int sort value or row key among the candidates): the caller then runs the subquery
    row by row."""
    ltags = cols.tags[link]
    if (ltags == UNSURE).any():
        return None
    n = len(cols.rid_of)
    ltags = ltags[:n]
    cand = np.flatnonzero(ltags == parent_code)
    keys = cols.nums[link][cand]
    if not len(parents):
        hit = np.zeros(len(keys), dtype=bool)
    else:
        lo_p = int(parents.min())
        hi_p = int(parents.max())
        if lo_p >= 0 and hi_p < 4 * (len(cols.rid_of) + len(parents)) + 1024:
            # small non-negative keys (the usual): a lookup table
            lut = np.zeros(hi_p + 2, dtype=bool)
            lut[parents] = True
            hit = lut[np.clip(keys, -1, hi_p + 1)]  # -1 and hi_p + 1: False
        else:
            ps = np.sort(parents)
            pos = np.searchsorted(ps, keys)
            pos[pos >= len(ps)] = 0
            hit = ps[pos] == keys
    cand = cand[hit]
    keys = keys[hit]
    if not len(cand):
        return keys, cand
    if (cols.tags["id"][cand] != own_code).any():
        return None
    sort_keys = [cols.nums["id"][cand]]
    for field, desc in reversed(order):
        if (cols.tags[field][cand] != INT).any():
            return None
        v = cols.nums[field][cand]
        sort_keys.append(-v if desc else v)
    sort_keys.append(keys)
    idx = np.lexsort(sort_keys)
    keys = keys[idx]
    cand = cand[idx]
    first = np.empty(len(keys), dtype=bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    counts = np.diff(np.append(starts, len(keys)))
    rank = np.arange(len(keys)) - np.repeat(starts, counts)
    keep = rank >= lo
    if hi is not None:
        keep &= rank < hi
    return keys[keep], cand[keep]
