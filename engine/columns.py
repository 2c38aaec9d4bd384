"""Columns: chosen fields of a table's rows as numpy arrays, one slot per row.

A shape whose projection runs a correlated subquery per row (``(SELECT id, n FROM comment
WHERE thread = $parent.id ORDER BY n DESC LIMIT 5)``) needs, to show a new view's rows, the
top rows of every parent at once. Read row by row that is one scattered dict read per child
(about 1 us each on a 2-core VM: 50 ms for 50,000 comments); over columns it is a sort of
arrays (:func:`top_per_parent`). The table keeps the columns of its record-link fields from
its bulk loads on (:meth:`engine.store.TableStore.keep_links`, like an index on a foreign
key: the link column is the costly one to build, a read of every row and of two attributes
of each link) and those of the fields some shape asked for from that shape's first
registration on. A write notes the row, and the next use of the columns encodes the rows
noted since (:meth:`Columns.refresh`); rows loaded at the end of the table are appended in
bulk (:meth:`Columns.extend`).

Each value is kept as a tag and a 64-bit number:

- ``INT`` (1): an int in the exactly representable range (``num`` = the value);
- ``k`` (:func:`table_code`, even, >= 2): a record link of table ``k`` with such an int key
  (``num`` = the key); ``k + 1``: a link of that table with a string key (``num`` = the
  string's code in :attr:`Columns.strs`, codes are per table and never reused);
- ``OTHER`` (0): any other value (NONE, NULL, strings, floats, bools...);
- ``UNSURE`` (-1): a link whose key is neither an int nor a string. Its equality key may
  meet an int key (``thread:1.0`` and ``thread:1`` are one record to SurrealDB), so a column
  holding one cannot decide a join on its own;
- ``CONTAINER`` (-2): an object or an array, which may hold members of its own (a lazy
  row's children show plain values only, :mod:`engine.lazy`);
- ``DATETIME`` (-3): a datetime (``num`` = microseconds since the epoch, UTC; a naive value
  is read as UTC, as SurrealDB's order does): datetimes order as their numbers, so a sort
  on a datetime field (``ORDER BY created_at``) is decided on the columns too.

Freed slots hold ``OTHER`` in every column.
"""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import islice
from typing import Any

import numpy as np
from surrealdb import RecordID

from engine.values import NONE

OTHER = 0
INT = 1
UNSURE = -1
CONTAINER = -2
DATETIME = -3
_EXACT = 2**53

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = _EPOCH - datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
_TABLES: dict[str, int] = {}
_LINK = "\0r"  # the first item of engine.store.ikey's key of a record link
_NO_ROW: dict[str, Any] = {}  # a freed slot's row: every field NONE


def table_code(table: str) -> int:
    """The tag of a link to ``table`` with an int key (+1: a string key); stable for the
    life of the process."""
    code = _TABLES.get(table)
    if code is None:
        code = _TABLES[table] = 2 + 2 * len(_TABLES)
    return code


class Columns:
    """The columns of one table (see the module docstring)."""

    __slots__ = ("_slot", "cap", "dirty", "free", "in_order", "nums", "rid_of", "stale",
                 "strs", "strs_of", "tags")

    def __init__(self, rows: dict[str, dict[str, Any]]) -> None:
        n = len(rows)
        self.cap = max(1024, 1 << (n + n // 4).bit_length())
        self.rid_of: list[str | None] = list(rows)
        # row id -> slot, made when a write first needs it (a registration only reads
        # `rid_of`: building the map for 100,000 rows would cost it 13 ms)
        self._slot: dict[str, int] | None = None
        self.free: list[int] = []
        self.in_order = True  # slot i holds the i-th row of the table's dict (no delete yet)
        self.tags: dict[str, np.ndarray] = {}
        self.nums: dict[str, np.ndarray] = {}
        # string record keys met in link and id columns -> their code, and back
        self.strs: dict[str, int] = {}
        self.strs_of: list[str] = []
        # rows written or deleted since the last refresh
        self.dirty: set[str] = set()
        # more rows were written since than a refresh would encode one by one: `dirty` no
        # longer grows (see `note`) and the next use builds the columns again
        self.stale = False

    @property
    def slot(self) -> dict[str, int]:
        """Row id -> slot."""
        m = self._slot
        if m is None:
            rid_of = self.rid_of
            m = self._slot = {r: i for i, r in enumerate(rid_of) if r is not None}
        return m

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
        if t is dict or t is list or t is tuple:
            return CONTAINER, 0
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
        if t is datetime:
            if v.tzinfo is None:
                v = v.replace(tzinfo=UTC)
            return DATETIME, (v - _EPOCH) // _MICROSECOND
        return OTHER, 0

    def add(self, fields: list[str], rows: dict[str, dict[str, Any]],
            bulk_only: bool = False) -> None:
        """Keep ``fields`` (their values read from ``rows``, in slot order) from now on;
        ``bulk_only``: only those whose values all encode in bulk (:meth:`_bulk`)."""
        new = [f for f in dict.fromkeys(fields) if f not in self.tags]
        if not new:
            return
        # a typed list: the compiled loops below index it and read its dicts directly
        src: list[dict[str, Any]]
        if self.in_order:
            src = list(rows.values())
        else:
            src = [rows[r] if r is not None else _NO_ROW for r in self.rid_of]
        for f in new:
            tags = np.zeros(self.cap, dtype=np.int16)
            nums = np.zeros(self.cap, dtype=np.int64)
            if not self._bulk(src, f, tags, nums):
                if bulk_only:
                    continue
                self._encode_each(src, f, tags, nums)
            self.tags[f] = tags
            self.nums[f] = nums

    def extend(self, new: list[str], rows: dict[str, dict[str, Any]]) -> None:
        """Append the rows ``new`` (ids not held yet, the table's last rows in its order)
        to every column, encoded in bulk: a load adds its rows at the cost of encoding them,
        not of a rebuild, and a load in pages costs what one load costs."""
        n0 = len(self.rid_of)
        k = len(new)
        self.rid_of.extend(new)
        if self._slot is not None:
            self._slot.update(zip(new, range(n0, n0 + k)))
        while n0 + k > self.cap:
            self._grow()
        src = [rows[r] for r in new]
        for f, tags in self.tags.items():
            tv = tags[n0:n0 + k]
            nv = self.nums[f][n0:n0 + k]
            if not self._bulk(src, f, tv, nv):
                self._encode_each(src, f, tv, nv)

    def _encode_each(self, src: list[dict[str, Any]], f: str, tags: np.ndarray,
                     nums: np.ndarray) -> None:
        """Encode field ``f`` of ``src`` value by value (the values are of mixed kinds)."""
        encode = self.encode
        for i, r in enumerate(src):
            tag, num = encode(r.get(f, NONE))
            if tag:
                tags[i] = tag
                nums[i] = num

    def _bulk(self, src: list[dict[str, Any]], f: str, tags: np.ndarray, nums: np.ndarray,
              ) -> bool:
        """Encode field ``f`` of the rows ``src`` at once when all its values are of one
        common kind (exact ints; links of one table with exact int keys, or all with string
        keys; strings); False to encode value by value. One pass reads each row once (a read is a
        cache miss per row: reading the values first and checking them after costs more)."""
        if not src:
            return True
        keys: list[Any] = []
        v0 = src[0].get(f, NONE)
        k0 = type(v0)
        if k0 is int:
            for r in src:
                v = r.get(f, NONE)
                if type(v) is not int:
                    return False
                keys.append(v)
            tag = INT
        elif k0 is str:
            # text (a comment's body): OTHER everywhere, as the arrays start
            for r in src:
                if type(r.get(f, NONE)) is not str:
                    return False
            return True
        elif k0 is RecordID:
            name = v0.table_name
            kind = type(v0.id)
            if kind is not int and kind is not str:
                return False
            for r in src:
                v = r.get(f, NONE)
                if type(v) is not RecordID:
                    return False
                t = v.table_name
                if t is not name and t != name:
                    return False
                k = v.id
                if type(k) is not kind:
                    return False
                keys.append(k)
            n = len(keys)
            if kind is str:
                code = self.code
                nums[:n] = np.fromiter(map(code, keys), dtype=np.int64, count=n)
                tags[:n] = table_code(name) + 1
                return True
            tag = table_code(name)
        else:
            return False
        n = len(keys)
        try:
            arr = np.fromiter(keys, dtype=np.int64, count=n)
        except OverflowError:
            return False
        if not ((arr > -_EXACT) & (arr < _EXACT)).all():
            return False
        nums[:n] = arr
        tags[:n] = tag
        return True

    def note(self, rid: str, size: int) -> None:
        """Note that row ``rid`` was written or deleted (``size``: the table's rows). Past
        a quarter of the table (and 4,096 rows) the columns turn stale instead: building
        them again costs less than encoding those rows one by one, and columns nobody
        reads do not keep a set of every row written."""
        if self.stale:
            return
        d = self.dirty
        d.add(rid)
        if len(d) > 4096 and len(d) * 4 > size:
            self.stale = True
            self.dirty = set()

    def refresh(self, rows: dict[str, dict[str, Any]]) -> bool:
        """Bring the columns up to ``rows`` for the rows written or deleted since the last
        refresh (``dirty``, noted by the table store: a write costs a set insertion, not an
        encoding, and a row written many times in between is encoded once). Rows added at
        the end of the table since, none deleted (a load), are appended in bulk. False, and
        nothing done, when more than a quarter of the rows would be encoded one by one
        (or the columns are stale): building the columns again in bulk is cheaper then."""
        if self.stale:
            return False
        dirty = self.dirty
        if not dirty:
            return True
        n0 = len(self.rid_of)
        new: list[str] = []
        if self.in_order and len(rows) > n0:
            # no row left the table since the columns last matched it (a delete clears
            # `in_order`): its first n0 rows are still the slots' rows, the rest are new
            # (read from the end: a load in pages must not walk the rows it loaded before)
            new = list(islice(reversed(rows), len(rows) - n0))
            new.reverse()
        if (len(dirty) - len(new)) * 4 > len(rows):
            return False
        self.dirty = set()
        if new:
            self.extend(new, rows)
            dirty.difference_update(new)
        for rid in dirty:
            row = rows.get(rid)
            if row is None:
                self.delete(rid)
            else:
                self.put(rid, row)
        return True

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

    def link_groups(self, field: str) -> tuple[list[tuple[Any, set[str]]], list[str]]:
        """The rows whose ``field`` is a record link with an int or string key, grouped by
        the record, each group keyed as :func:`engine.store.ikey` keys that link; and the
        other rows (any other value: the caller reads their rows). Sorting two arrays
        costs a few ms where reading every row's link costs 0.6-1 us a row (scattered
        dicts, a link object and its attributes per row): an equality index on a link
        field builds from here (:meth:`engine.store.TableStore.index`)."""
        rid_of = self.rid_of
        n = len(rid_of)
        tags = self.tags[field][:n]
        nums = self.nums[field][:n]
        linked = np.flatnonzero(tags >= 2)
        lt = tags[linked]
        ln = nums[linked]
        order = np.lexsort((ln, lt))
        st = lt[order]
        sn = ln[order]
        m = len(order)
        starts = np.empty(m, dtype=bool)
        if m:
            starts[0] = True
            starts[1:] = (st[1:] != st[:-1]) | (sn[1:] != sn[:-1])
        # each linked slot's group number, in slot order: the rows are then read in the
        # order they were stored (neighbours in memory), not scattered by the sort
        gid = np.empty(m, dtype=np.int64)
        gid[order] = np.cumsum(starts) - 1
        first = np.flatnonzero(starts)
        tl: list[int] = st[first].tolist()
        nl: list[int] = sn[first].tolist()
        names = {c: t for t, c in _TABLES.items()}
        strs_of = self.strs_of
        sets: list[set[str]] = [set() for _ in tl]
        for i, g in zip(linked.tolist(), gid.tolist()):
            r = rid_of[i]
            if r is not None:  # linked slots are never free
                sets[g].add(r)
        groups: list[tuple[Any, set[str]]] = []
        for j, tag in enumerate(tl):
            key: tuple[str, str, Any]
            if tag & 1:
                key = (_LINK, names[tag - 1], strs_of[nl[j]])
            else:
                key = (_LINK, names[tag], nl[j])
            groups.append((key, sets[j]))
        rest: list[str] = []
        for i in np.flatnonzero(tags < 2).tolist():
            r = rid_of[i]
            if r is not None:
                rest.append(r)
        return groups, rest

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


def _break_ties(cand: np.ndarray, eq: np.ndarray, cuts: np.ndarray,
                rid_of: list[str | None], rows: dict[str, dict[str, Any]]) -> bool:
    """Order by the rows' own record keys, in place, the runs of ``cand`` that the window
    cuts: ``eq[p]`` says rows ``p`` and ``p + 1`` tie on every sort key, ``cuts`` are the
    ``p`` where a window boundary falls between two tied rows. The engine's sort entries
    order ints by value, then strings in code-point order; only the rows of cut runs are
    read. False when one of them has a key that is neither (the caller then declines)."""
    n = len(cand)
    starts = np.ones(n, dtype=bool)
    starts[1:] = ~eq
    run = np.maximum.accumulate(np.where(starts, np.arange(n), 0))  # each row's run start
    cut_run = np.zeros(n, dtype=bool)
    cut_run[run[cuts]] = True
    pos = np.flatnonzero(cut_run[run])
    ents: list[tuple[int, int, Any, int]] = []  # (run, int 0 / string 1, key, slot)
    add = ents.append
    for r, slot in zip(run[pos].tolist(), cand[pos].tolist()):
        rid = rid_of[slot]
        i = rows[rid].get("id") if rid is not None else None
        if type(i) is not RecordID:
            return False
        key = i.id
        tk = type(key)
        if tk is int:
            add((r, 0, key, slot))
        elif tk is str:
            add((r, 1, key, slot))
        else:
            return False
    ents.sort()  # never compares an int key with a string key: the kind comes first
    # runs are contiguous and in position order: the sorted entries fill them in turn
    cand[pos] = np.array([e[3] for e in ents], dtype=cand.dtype)
    return True


def _sort_groups(parts: list[np.ndarray], cand: np.ndarray,
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort ``cand`` by ``parts`` (int64 keys, most significant first, the first being the
    group key). Returns the sorted group keys and rows, and ``same[p]``: rows ``p`` and
    ``p + 1`` tie on every part. Rows tying on every part come in no particular order.

    When the parts' ranges multiply to less than 2**62 they make one key (mixed radix), so
    one sort replaces a lexicographic one (2-3x faster at 50,000 rows); when the rows'
    positions fit beside it too, the positions ride in its low digits and a plain sort of
    values replaces the argsort."""
    n = len(cand)
    lows: list[int] = []
    span = 1
    spans: list[int] = []
    for p in parts:
        low = int(p.min())
        s = int(p.max()) - low + 1
        lows.append(low)
        spans.append(s)
        span *= s
    if span >= 1 << 62:
        idx = np.lexsort(parts[::-1])
        sorted_parts = [p[idx] for p in parts]
        same = np.ones(n - 1, dtype=bool)
        for sp in sorted_parts:
            same &= sp[1:] == sp[:-1]
        return sorted_parts[0], cand[idx], same
    comb = np.zeros(n, dtype=np.int64)
    for p, low, s in zip(parts, lows, spans):
        comb *= s
        comb += p
        comb -= low
    if span * n < 1 << 62:
        comb *= n
        comb += np.arange(n, dtype=np.int64)
        comb.sort()
        idx = comb % n
        comb //= n
    else:
        idx = np.argsort(comb)
        comb = comb[idx]
    same = comb[1:] == comb[:-1]
    return comb // (span // spans[0]) + lows[0], cand[idx], same


def top_per_parent(cols: Columns, link: str, parent_code: int, parents: np.ndarray,
                   parent_strs: list[str], order: list[tuple[str, bool]],
                   rows: dict[str, dict[str, Any]], lo: int, hi: int | None,
                   ) -> tuple[np.ndarray, np.ndarray] | None:
    """The rows ranked ``lo``..``hi`` per parent by ``order`` (fields, descending?) then by
    their own record key (read from ``rows``, the table's rows, where a window boundary
    falls between rows with the same sort values), among the rows whose ``link`` is a link
    of table ``parent_code`` to one of ``parents`` (int keys) or ``parent_strs`` (string
    keys). Returns (group keys, row slots), grouped by parent, each group in the order of
    the sort values (rows tying on all of them in no particular order); a parent's group
    key is ``2 * key`` for an int key and ``2 * code + 1`` for a string key
    (:meth:`Columns.code`). None when the columns cannot decide it exactly (a link with an
    unsure key, a sort value that is not an int, an own key at a cut tie that is neither an
    int nor a string): the caller then runs the subquery row by row."""
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
    parts = [keys]  # most significant first: the parent, then each sort value
    for field, desc in order:
        ft = cols.tags[field][cand]
        # ints, or datetimes (SurrealDB orders numbers before datetimes: a mix is not decided)
        if (ft != ft[0]).any() or (ft[0] != INT and ft[0] != DATETIME):
            return None
        v = cols.nums[field][cand]
        parts.append(-v if desc else v)
    keys, cand, same = _sort_groups(parts, cand)
    n = len(keys)
    starts = np.flatnonzero(group_firsts(keys))
    counts = np.diff(np.append(starts, n))
    rank = np.arange(n) - np.repeat(starts, counts)
    if n > 1 and (lo > 0 or hi is not None):
        # rows tying on every sort key are ordered by their own record key; that order
        # decides membership only where a window boundary falls inside such a run (the
        # order inside a group is the caller's: Proj.force sorts a row's children)
        cut = np.zeros(n - 1, dtype=bool)
        if lo > 0:
            cut |= rank[1:] == lo
        if hi is not None:
            cut |= rank[1:] == hi
        cut &= same
        if cut.any() and not _break_ties(cand, same, np.flatnonzero(cut), cols.rid_of, rows):
            return None
    keep = rank >= lo
    if hi is not None:
        keep &= rank < hi
    return keys[keep], cand[keep]
