"""Decoded rows for evaluation: rows per table, equality indexes, rows changed since the last
arena write.

The row bytes live in the engine's arena (:class:`engine.arena.RowStore`); this is the decoded
copy every operator reads (decoding bytes per read would cost more than the whole incremental
update). ``TableStore.changed`` collects the ids written or deleted since the engine last wrote
row bytes, so a row rewritten many times between two arena writes is encoded once and the hot
ingest path never serialises a row.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any

from surrealdb import Duration, RecordID

from engine.columns import Columns
from engine.rowcache import RowCache, RowCaches
from engine.values import NONE, NoneType, eq_key, record_id_text

_PLAIN_KEY_TYPES = frozenset(
    {str, int, float, Decimal, bool, type(None), NoneType, datetime, uuid.UUID, bytes}
)

_RID_TEXT: dict[tuple[str, Any], str] = {}


def rid_text(rid: RecordID) -> str:
    """Canonical text of a record id, cached for the common int/str keys."""
    k = rid.id
    t = type(k)
    if t is int or t is str:
        key = (rid.table_name, k)
        text = _RID_TEXT.get(key)
        if text is None:
            if len(_RID_TEXT) > 2_000_000:
                _RID_TEXT.clear()
            text = record_id_text(rid)
            _RID_TEXT[key] = text
        return text
    return record_id_text(rid)


_EXACT = 2**53


def ikey(v: Any) -> Any:
    """A hashable key such that SurrealDB-equal values get equal keys (collisions are allowed).

    Used by equality indexes as a pre-filter: the full predicate is always evaluated afterwards,
    so only the "equal implies same key" direction matters (1, 1.0 and 1dec share the int key;
    non-integral floats and decimals share SurrealDB's equality key).
    """
    t = type(v)
    if t is str:
        return v
    if t is int:
        # Exact ints share keys with equal floats/decimals only in the range where both are exact.
        return v if -_EXACT < v < _EXACT else ("\0n", eq_key(v))
    if t is float or t is Decimal:
        # Python keeps 0.1 and Decimal('0.1') apart (different hash, not ==) while SurrealDB
        # calls them equal: floats and decimals take SurrealDB's own equality key, except
        # integral values in the exact range, which meet the int key (1 = 1.0 = 1dec).
        if v != v:  # noqa: PLR0124 - NaN never equals itself; SurrealDB NaN = NaN holds
            return "\0nan"
        if v.is_integer() if t is float else v == v.to_integral_value():
            if -_EXACT < v < _EXACT:
                return int(v)
        return ("\0n", eq_key(v))
    if t in _PLAIN_KEY_TYPES:
        return v
    if t is RecordID:
        k = v.id
        tk = type(k)
        if tk is str or (tk is int and -_EXACT < k < _EXACT):
            return ("\0r", v.table_name, k)  # ikey(k) is k itself
        return ("\0r", v.table_name, ikey(k))
    if t is list or t is tuple:
        return ("\0a", tuple(ikey(x) for x in v))
    if t is dict:
        return ("\0o", tuple(sorted((k, ikey(x)) for k, x in v.items())))
    if t is Duration:
        return ("\0d", v.elapsed)
    return ("\0x", type(v).__name__, repr(v))


class ElementIndex:
    """The rows of one table by the elements of one field's arrays (``ikey`` of each
    element), and apart the rows whose field holds no array (missing, a string, an
    object...). A superset of the rows a membership conjunct (``field CONTAINSANY $list``,
    ``field CONTAINS $v``, ``field CONTAINSALL $list``) can pass: an array passes only through
    an element equal to a constant, and equal values share an ``ikey``; anything else is in
    ``other`` (a string can pass by substring, an object by key)."""

    __slots__ = ("by", "other")

    def __init__(self) -> None:
        self.by: dict[Any, set[str]] = {}
        self.other: set[str] = set()

    def add(self, rid: str, v: Any) -> None:
        t = type(v)
        if t is list or t is tuple:
            by = self.by
            for x in v:
                k = ikey(x)
                s = by.get(k)
                if s is None:
                    by[k] = {rid}
                else:
                    s.add(rid)
        else:
            self.other.add(rid)

    def remove(self, rid: str, v: Any) -> None:
        t = type(v)
        if t is list or t is tuple:
            by = self.by
            for x in v:
                k = ikey(x)
                s = by.get(k)
                if s is not None:
                    s.discard(rid)
                    if not s:
                        del by[k]
        else:
            self.other.discard(rid)


class TableStore:
    """The rows of one table keyed by record-id text, with on-demand equality indexes."""

    __slots__ = ("caches", "changed", "cols", "elements", "hops", "indexes", "links", "name",
                 "ranges", "rows", "walks", "writes")

    def __init__(self, name: str) -> None:
        self.name = name
        self.rows: dict[str, dict[str, Any]] = {}
        # ids put or deleted since their bytes were last written to the arena
        self.changed: set[str] = set()
        self.indexes: dict[str, dict[Any, set[str]]] = {}
        # field -> its rows by array element, built when a new view's membership conjunct
        # first asks (engine.membership), then maintained like the equality indexes
        self.elements: dict[str, ElementIndex] = {}
        # row caches, held weakly: a cache lives as long as the plan that fills it
        self.caches = RowCaches()
        # numpy columns of chosen fields (engine.columns), kept once some shape asked for one
        self.cols: Columns | None = None
        # puts and deletes so far: what is derived from all rows at once is valid while
        # this stays the same (engine.linkscan)
        self.writes = 0
        # link field -> (writes then, the tables its plain links name, its other index keys)
        # (and link field + "\0dangling" -> (its version, [], the rows whose link names no
        # record))
        self.links: dict[str, tuple[Any, list[str], list[Any]]] = {}
        # field -> (writes then, its index's int keys in order, the rows before each, its
        # other keys): range conjuncts of new views (engine.rangescan)
        self.ranges: dict[str, tuple[int, list[int], list[int], list[Any]]] = {}
        # an edge table's graph hops by its `in` or `out` field -> key -> (the record the hop
        # left from, (edge id, other end) of its edges in edge id order), dropped for the
        # keys of each edge written (engine.compile.traverse)
        self.hops: dict[str, dict[Any, tuple[Any, list[tuple[Any, Any]]]]] = {}
        # (field, kind) -> (writes then, its index's keys of that kind in order, its other
        # keys): the sort key a new window walks (engine.rangescan.walk_keys)
        self.walks: dict[tuple[str, int], tuple[int, list[Any], list[Any]]] = {}

    def cache(self) -> RowCache:
        """A new row cache over this table (kept while the caller holds it)."""
        return self.caches.new()

    def put(self, rid: str, row: dict[str, Any]) -> dict[str, Any] | None:
        """Store ``row`` under ``rid``; returns the previous row (or None)."""
        old = self.rows.get(rid)
        self.rows[rid] = row
        self.writes += 1
        self.changed.add(rid)
        if self.caches.refs:
            self.caches.forget(rid)
        if self.cols is not None:
            self.cols.note(rid, len(self.rows))
        for field, idx in self.indexes.items():
            if old is not None:
                ok = ikey(old.get(field, NONE))
                nk = ikey(row.get(field, NONE))
                if ok == nk:
                    continue
                s = idx.get(ok)
                if s is not None:
                    s.discard(rid)
                    if not s:
                        del idx[ok]
            else:
                nk = ikey(row.get(field, NONE))
            idx.setdefault(nk, set()).add(rid)
        for field, ex in self.elements.items():
            if old is not None:
                ex.remove(rid, old.get(field, NONE))
            ex.add(rid, row.get(field, NONE))
        if self.hops:
            for field, memo in self.hops.items():
                if old is not None:
                    memo.pop(ikey(old.get(field, NONE)), None)
                memo.pop(ikey(row.get(field, NONE)), None)
        return old

    def delete(self, rid: str) -> dict[str, Any] | None:
        """Remove ``rid``; returns the removed row (or None when absent)."""
        old = self.rows.pop(rid, None)
        if old is None:
            return None
        self.writes += 1
        self.changed.add(rid)
        if self.caches.refs:
            self.caches.forget(rid)
        cols = self.cols
        if cols is not None:
            cols.note(rid, len(self.rows))
            cols.in_order = False  # the table's order no longer follows the slots
        for field, idx in self.indexes.items():
            ok = ikey(old.get(field, NONE))
            s = idx.get(ok)
            if s is not None:
                s.discard(rid)
                if not s:
                    del idx[ok]
        for field, ex in self.elements.items():
            ex.remove(rid, old.get(field, NONE))
        if self.hops:
            for field, memo in self.hops.items():
                memo.pop(ikey(old.get(field, NONE)), None)
        return old

    def element_index(self, field: str) -> ElementIndex:
        """The rows by the elements of ``field``'s arrays (built on first use, then
        maintained by put/delete)."""
        ex = self.elements.get(field)
        if ex is None:
            ex = ElementIndex()
            add = ex.add
            for rid, row in self.rows.items():
                add(rid, row.get(field, NONE))
            self.elements[field] = ex
        return ex

    def index(self, field: str) -> dict[Any, set[str]]:
        """The equality index of ``field`` (built on first use, then maintained by put/delete)."""
        idx = self.indexes.get(field)
        if idx is None and self.cols is not None and field in self.cols.tags:
            idx = self._index_from_columns(field, self.cols)
        if idx is None:
            idx = {}
            bucket = idx.get
            for rid, row in self.rows.items():
                v = row.get(field, NONE)
                k: Any
                tv = type(v)
                if tv is str:
                    k = v  # ikey of a string, inline (status, category: the usual field)
                elif tv is RecordID and type(v.id) is int and -_EXACT < v.id < _EXACT:
                    k = ("\0r", v.table_name, v.id)  # ikey of a link, inline (the usual key)
                else:
                    k = ikey(v)
                s = bucket(k)
                if s is None:
                    idx[k] = {rid}
                else:
                    s.add(rid)
            self.indexes[field] = idx
        return idx

    def _index_from_columns(self, field: str, cols: Columns) -> dict[Any, set[str]] | None:
        """The equality index of a field kept in columns (a link field since the load):
        links grouped by sorting the columns, the other values read row by row (None: the
        columns are too stale to refresh, the caller reads every row)."""
        if not cols.refresh(self.rows):
            return None
        groups, rest = cols.link_groups(field)
        idx: dict[Any, set[str]] = dict(groups)
        rows = self.rows
        for rid in rest:
            # a link to `product:3.0` meets `product:3`'s group here: same key
            k = ikey(rows[rid].get(field, NONE))
            s = idx.get(k)
            if s is None:
                idx[k] = {rid}
            else:
                s.add(rid)
        self.indexes[field] = idx
        return idx

    def columns(self, fields: list[str]) -> Columns:
        """The columns of ``fields``, up to date (each built on first use, then refreshed
        from the rows written since the last use)."""
        cols = self.cols
        if cols is not None and not cols.refresh(self.rows):
            # most rows were written since (a reload): encoding the columns again in bulk
            # is cheaper than row by row
            fields = list(dict.fromkeys([*cols.tags, *fields]))
            cols = None
        if cols is None:
            cols = self.cols = Columns(self.rows)
        cols.add(fields, self.rows)
        return cols

    def keep_links(self) -> None:
        """After a load (`ViewEngine.load`): keep the columns of the fields holding record links (those of
        the table's first row, each only if all its values encode in bulk), or extend the
        columns kept. A correlated subquery over this table (``WHERE link = $parent.id``)
        then finds them ready: its first view's registration does not read every row. The
        load pays about 0.12 us per row and link field; a shard's bootstrap from the
        database costs about 94 us a row (engine/README, ninth pass)."""
        if self.cols is not None:
            self.columns([])  # refreshed, or built again in bulk with the fields it kept
            return
        first = next(iter(self.rows.values()), None)
        if first is None:
            return
        fields = [k for k, v in first.items() if type(v) is RecordID and k != "id"]
        if fields:
            cols = Columns(self.rows)
            cols.add(fields, self.rows, bulk_only=True)
            if cols.tags:
                self.cols = cols

    def count(self) -> int:
        """Number of rows."""
        return len(self.rows)


class Store:
    """All tables, and the join states over them (engine.join) by inner table."""

    def __init__(self) -> None:
        self.tables: dict[str, TableStore] = {}
        # table -> the subquery join states holding groups of its rows (an ordered set)
        self.joins: dict[str, dict[Any, None]] = {}
        # record id text -> the join states whose linked filter read it (engine.join)
        self.jlinks: dict[str, dict[Any, None]] = {}
        # the engine's dependency indexes (engine.deps.Deps, set by the engine): a join
        # window whose rows read other records registers them there as its own reader
        self.deps: Any = None
        # id of a subquery row holding nested rows, or of a list of rows inside one ->
        # (that object, its members): engine.delta.rows_members, bounded there
        self.rmembers: dict[int, tuple[Any, dict[str, Any]]] = {}

    def table(self, name: str) -> TableStore:
        """The table ``name`` (created empty on first use)."""
        t = self.tables.get(name)
        if t is None:
            t = self.tables[name] = TableStore(name)
        return t

    def get(self, table: str, rid: str) -> dict[str, Any] | None:
        """The row ``rid`` of ``table`` or None."""
        t = self.tables.get(table)
        if t is None:
            return None
        return t.rows.get(rid)
