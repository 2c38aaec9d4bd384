"""Columns: chosen fields of a table's rows as numpy arrays, one slot per row.

A shape whose projection runs a correlated subquery per row (``(SELECT id, n FROM comment
WHERE thread = $parent.id ORDER BY n DESC LIMIT 5)``) needs, to show a new view's rows, the
top rows of every parent at once. Read row by row that is one scattered dict read per child
(about 1 us each on a 2-core VM: 50 ms for 50,000 comments); over columns it is a sort of
arrays (:func:`top_per_parent`). The table keeps the columns of the fields some shape asked
for, from that shape's first registration on (like an equality index): a write notes the
row, and the next use of the columns encodes the rows noted since (:meth:`Columns.refresh`).

Each value is kept as a tag and a 64-bit number:

- ``INT`` (1): an int in the exactly representable range (``num`` = the value);
- ``k`` (:func:`table_code`, even, >= 2): a record link of table ``k`` with such an int key
  (``num`` = the key); ``k + 1``: a link of that table with a string key (``num`` = the
  string's code in :attr:`Columns.strs`, codes are per table and never reused);
- ``OTHER`` (0): any other value (NONE, NULL, strings, floats, bools...);
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
    """The tag of a link to ``table`` with an int key (+1: a string key); stable for the
    life of the process."""
    code = _TABLES.get(table)
    if code is None:
        code = _TABLES[table] = 2 + 2 * len(_TABLES)
    return code


class Columns:
    """The columns of one table (see the module docstring)."""

    __slots__ = ("cap", "dirty", "free", "in_order", "nums", "rid_of", "slot", "strs",
                 "strs_of", "tags")

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
        # string record keys met in link and id columns -> their code, and back
        self.strs: dict[str, int] = {}
        self.strs_of: list[str] = []
        # rows written or deleted since the last refresh
        self.dirty: set[str] = set()

    def code(self, s: str) -> int:
        """The code of a string record key (a new one the first time)."""
        c = self.strs.get(s)
        if c is None:
            c = self.strs[s] = len(self.strs_of)
            self.strs_of.append(s)
        return c

    def encode(self, v: Any) -> tuple[int, int]:
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
                return table_code(v.table_name) + 1, self.code(k)
            return UNSURE, 0
        return OTHER, 0

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
        if not self._bulk(vals, tags, nums, field == "id"):
            encode = self.encode
            for i, v in enumerate(vals):
                tag, num = encode(v)
                if tag:
                    tags[i] = tag
                    nums[i] = num
        self.tags[field] = tags
        self.nums[field] = nums

    def _bulk(self, vals: list[Any], tags: np.ndarray, nums: np.ndarray, own: bool) -> bool:
        """Encode a column of one common kind at once (all exact ints; all links of one
        table with exact int keys, or all with string keys; ``own``: the rows' own ids, of
        the table's own table); False to encode value by value."""
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
            kinds = set(map(type, vals))
            if kinds == {str}:
                code = self.code
                nums[:n] = np.fromiter(map(code, vals), dtype=np.int64, count=n)
                tags[:n] = table_code(name) + 1
                return True
            if kinds != {int}:
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

    def refresh(self, rows: dict[str, dict[str, Any]]) -> None:
        """Bring the columns up to ``rows`` for the rows written or deleted since the last
        refresh (``dirty``, noted by the table store: a write costs a set insertion, not an
        encoding, and a row written many times in between is encoded once)."""
        dirty = self.dirty
        if not dirty:
            return
        self.dirty = set()
        for rid in dirty:
            row = rows.get(rid)
            if row is None:
                self.delete(rid)
            else:
                self.put(rid, row)

    def put(self, rid: str, row: dict[str, Any]) -> None:
        """Encode a row's current values (see :meth:`refresh`)."""
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
            self.in_order = False  # refreshed rows come in no particular order
        encode = self.encode
        for field, tags in self.tags.items():
            tag, num = encode(row.get(field, NONE))
            tags[s] = tag
            self.nums[field][s] = num

    def delete(self, rid: str) -> None:
        """Free a deleted row's slot (see :meth:`refresh`)."""
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


def group_firsts(keys: np.ndarray) -> np.ndarray:
    """True where a sorted, non-empty ``keys`` starts a run of equal keys."""
    first = np.empty(len(keys), dtype=bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    return first


def _member(keys: np.ndarray, parents: np.ndarray, size: int) -> np.ndarray:
    """Which ``keys`` are among ``parents`` (both int64)."""
    if not len(parents):
        return np.zeros(len(keys), dtype=bool)
    lo_p = int(parents.min())
    hi_p = int(parents.max())
    if lo_p >= 0 and hi_p < 4 * (size + len(parents)) + 1024:
        # small non-negative keys (the usual): a lookup table
        lut = np.zeros(hi_p + 2, dtype=bool)
        lut[parents] = True
        return lut[np.clip(keys, -1, hi_p + 1)]  # -1 and hi_p + 1: False
    ps = np.sort(parents)
    pos = np.searchsorted(ps, keys)
    pos[pos >= len(ps)] = 0
    return ps[pos] == keys


def _own_rank(cols: Columns, cand: np.ndarray, own_code: int,
              tied: np.ndarray | None) -> list[np.ndarray] | None:
    """Sort keys (least significant first) ordering ``cand`` by their own record key as
    the engine does: int keys, then string keys in code-point order. Only the rows in
    ``tied`` (None: all) need a true rank: the others are ordered by the keys before it.
    None when a row's own key is neither (or a string holds a NUL, which numpy's strings
    drop)."""
    tags = cols.tags["id"][cand]
    nums = cols.nums["id"][cand]
    is_str = tags == own_code + 1
    if not is_str.any():
        return [nums] if (tags == own_code).all() else None
    if not ((tags == own_code) | is_str).all():
        return None
    ranked = is_str if tied is None else is_str & tied
    strs_of = cols.strs_of
    texts = [strs_of[c] for c in nums[ranked].tolist()]
    if any("\0" in t for t in texts):
        return None
    rank = np.zeros(len(cand), dtype=np.int64)
    if texts:
        order = np.argsort(np.array(texts), kind="stable")
        ranks = np.empty(len(texts), dtype=np.int64)
        ranks[order] = np.arange(len(texts))
        rank[ranked] = ranks
    rank[~is_str] = nums[~is_str]
    return [rank, is_str.astype(np.int64)]


def _tied(sort_keys: list[np.ndarray]) -> np.ndarray:
    """Rows equal to another row in every one of ``sort_keys``."""
    idx = np.lexsort(sort_keys)
    n = len(idx)
    eq = np.ones(n - 1, dtype=bool)
    for k in sort_keys:
        s = k[idx]
        eq &= s[1:] == s[:-1]
    tied = np.zeros(n, dtype=bool)
    tied[idx[1:][eq]] = True
    tied[idx[:-1][eq]] = True
    return tied


def top_per_parent(cols: Columns, link: str, parent_code: int, parents: np.ndarray,
                   parent_strs: list[str], order: list[tuple[str, bool]], own_code: int,
                   lo: int, hi: int | None) -> tuple[np.ndarray, np.ndarray] | None:
    """The rows ranked ``lo``..``hi`` per parent by ``order`` (fields, descending?) then by
    their own record key, among the rows whose ``link`` is a link of table ``parent_code``
    to one of ``parents`` (int keys) or ``parent_strs`` (string keys). Returns (group keys,
    row slots), grouped by parent in rank order; a parent's group key is ``2 * key`` for an
    int key and ``2 * code + 1`` for a string key (:meth:`Columns.code`). None when the
    columns cannot decide it exactly (a link with an unsure key, a sort value that is not an
    int, an own key that is neither an int nor a string): the caller then runs the subquery
    row by row."""
    ltags = cols.tags[link]
    if (ltags == UNSURE).any():
        return None
    n = len(cols.rid_of)
    ltags = ltags[:n]
    lnums = cols.nums[link][:n]
    cand_i = np.flatnonzero(ltags == parent_code)
    cand_i = cand_i[_member(lnums[cand_i], parents, n)]
    keys = lnums[cand_i] * 2
    if parent_strs:
        codes = [c for c in map(cols.strs.get, parent_strs) if c is not None]
        cand_s = np.flatnonzero(ltags == parent_code + 1)
        cand_s = cand_s[_member(lnums[cand_s], np.array(codes, dtype=np.int64), n)]
        keys = np.concatenate([keys, lnums[cand_s] * 2 + 1])
        cand = np.concatenate([cand_i, cand_s])
    else:
        cand = cand_i
    if not len(cand):
        return keys, cand
    by: list[np.ndarray] = []
    for field, desc in reversed(order):
        if (cols.tags[field][cand] != INT).any():
            return None
        v = cols.nums[field][cand]
        by.append(-v if desc else v)
    by.append(keys)
    # string keys are ranked (a sort of texts) only where the sort values tie
    own = _own_rank(cols, cand, own_code,
                    _tied(by) if (cols.tags["id"][cand] != own_code).any() else None)
    if own is None:
        return None
    idx = np.lexsort(own + by)
    keys = keys[idx]
    cand = cand[idx]
    starts = np.flatnonzero(group_firsts(keys))
    counts = np.diff(np.append(starts, len(keys)))
    rank = np.arange(len(keys)) - np.repeat(starts, counts)
    keep = rank >= lo
    if hi is not None:
        keep &= rank < hi
    return keys[keep], cand[keep]
