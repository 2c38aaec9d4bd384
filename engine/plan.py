"""Compiled query plans: one per query level (the view itself and each projection subquery).

A :class:`Plan` is shared by every materialisation of a shape; it evaluates the WHERE
predicate, builds the ORDER BY sort entry of a row, runs a correlated subquery for one parent
row (a lateral join through an equality index on the correlation key) and projects a row into
SurrealDB's output shape (fields, ``link.field``, ``link.*``, subqueries, FETCH).

Everything a projection or predicate reads beyond the row itself is recorded in the
evaluation context :class:`Cx`: linked records read (``reads``) and subquery scans
(``subs``: ``(table, field, key)``, ``field`` None meaning the whole table). The engine turns
these into dependency indexes, so a change to a linked record or to a subquery's table reaches
exactly the rows that read it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from surrealdb import RecordID

from engine.compile import compile_predicate, compile_value, walk
from engine.parser import Expr, Query
from engine.shape import order_source
from engine.store import Store, ikey, rid_text
from engine.values import NONE, sort_key


class Desc:
    """Sort-key wrapper reversing the order (ORDER BY ... DESC) while ties stay by record id."""

    __slots__ = ("k",)

    def __init__(self, k: Any) -> None:
        self.k = k

    def __lt__(self, other: Desc) -> bool:
        return bool(other.k < self.k)

    def __gt__(self, other: Desc) -> bool:
        return bool(other.k > self.k)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Desc) and bool(self.k == other.k)

    def __hash__(self) -> int:  # pragma: no cover - entries are never hashed
        return 0


_R_NUMBER = sort_key(0)[0]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_R_DATETIME = sort_key(_EPOCH)[0]
_MICRO = timedelta(microseconds=1)


def desc_key(k: tuple[Any, ...]) -> tuple[Any, ...]:
    """Reverse a :func:`sort_key` for ORDER BY ... DESC.

    Numbers (the common case) are negated so entries stay plain tuples (fast comparisons);
    other kinds wrap their payload in :class:`Desc`. Ranks are negated so the cross-kind order
    reverses too; a rank never mixes numeric and wrapped payloads.
    """
    r = k[0]
    if r == _R_NUMBER:
        return (-r, -k[1], -k[2]) if k[1] == 0 else (-r, -1, 0)
    if r == _R_DATETIME:
        # Exact: whole microseconds since the epoch, negated.
        return (-r, -((k[1] - _EPOCH) // _MICRO))
    if len(k) == 1:
        return (-r,)
    return (-r, Desc(k[1:]))


class Cx:
    """Evaluation context: follows record links through the store and records what it read."""

    __slots__ = ("reads", "store", "subs")

    def __init__(self, store: Store) -> None:
        self.store = store
        self.reads: set[str] = set()
        self.subs: list[tuple[str, str | None, Any]] = []

    def fetch(self, rid: RecordID) -> dict[str, Any] | None:
        """The linked row (None when it does not exist); the read is recorded."""
        text = rid_text(rid)
        self.reads.add(text)
        t = self.store.tables.get(rid.table_name)
        if t is None:
            return None
        return t.rows.get(text)


def _conjuncts(e: Expr | None) -> list[Expr]:
    if e is None:
        return []
    if e[0] == "and":
        return _conjuncts(e[1]) + _conjuncts(e[2])
    return [e]


def _eq_candidate(where: Expr | None) -> tuple[str, Expr] | None:
    """Pick a top-level conjunct ``field = constant-or-$parent`` usable as an index lookup."""
    best: tuple[str, Expr] | None = None
    for c in _conjuncts(where):
        if c[0] != "cmp" or c[1] != "=":
            continue
        a, b = c[2], c[3]
        for f, other in ((a, b), (b, a)):
            if (f[0] == "field" and len(f[1]) == 1 and other[0] in ("slot", "parent")
                    and (best is None or f[1][0] == "id")):
                best = (f[1][0], other)
    return best


def deref(v: Any, cx: Cx) -> Any:
    """FETCH of a value: a record id becomes its row (NONE when missing); others unchanged."""
    t = type(v)
    if t is RecordID:
        row = cx.fetch(v)
        return NONE if row is None else row
    if t is list:
        return [deref(x, cx) for x in v]
    return v


def link_all(v: Any, cx: Cx) -> Any:
    """``path.*``: a record id becomes its row, an object stays, anything else is NONE."""
    t = type(v)
    if t is RecordID:
        row = cx.fetch(v)
        return NONE if row is None else row
    if t is list:
        # Inside an array only record ids are followed; other elements stay as they are.
        return [deref(x, cx) for x in v]
    if t is dict:
        return v
    return NONE


def _fetch_at(v: Any, path: tuple[str, ...], cx: Cx) -> Any:
    if not path:
        return deref(v, cx)
    t = type(v)
    if t is dict:
        if path[0] not in v:
            return v
        nv = dict(v)
        nv[path[0]] = _fetch_at(v[path[0]], path[1:], cx)
        return nv
    if t is list:
        return [_fetch_at(x, path, cx) for x in v]
    return v


def _set_path(out: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    cur = out
    for seg in path[:-1]:
        nxt = cur.get(seg)
        if type(nxt) is not dict:
            nxt = {}
        else:
            nxt = dict(nxt)
        cur[seg] = nxt
        cur = nxt
    cur[path[-1]] = value


class Plan:
    """The compiled form of one query level."""

    def __init__(self, q: Query) -> None:
        self.q = q
        self.table = q.table
        self.pred, pred_links = compile_predicate(q.where)
        self.order: list[tuple[Callable[[dict[str, Any], Any], Any], bool]] = []
        order_links = False
        for path, desc in q.order:
            src = order_source(q, path)
            if len(src) > 1:
                order_links = True
            self.order.append((compile_value(src), desc))
        # Rows can move in or out of the qualifying set (or move in the order) when a linked
        # record changes only if the predicate or a sort key follows a link.
        self.qlinks = pred_links or order_links
        self.limit_slot = q.limit[1] if q.limit is not None else None
        self.start_slot = q.start[1] if q.start is not None else None
        self.bounded = self.limit_slot is not None or self.start_slot is not None
        self.ordered = self.bounded  # only a window needs the qualifying set kept in order
        self.eq = _eq_candidate(q.where)
        self.fetch = q.fetch
        self.items: list[tuple[Any, ...]] = []
        star_only = True
        simple = True
        for it in q.items:
            if it.kind == "all":
                self.items.append(("all",))
                continue
            star_only = False
            if it.kind == "field":
                self.items.append(("field", compile_value(it.path), it.out))
                if len(it.path) > 1:
                    simple = False
            elif it.kind == "linkall":
                self.items.append(("linkall", compile_value(it.path), it.out))
                simple = False
            else:
                assert it.sub is not None
                self.items.append(("sub", Plan(it.sub), it.index, it.out))
                simple = False
        self.star_only = star_only and not self.fetch
        # A simple projection reads nothing beyond the row: no link, subquery or FETCH.
        self.simple = simple and not self.fetch
        self.fast_filter = not self.ordered and not self.qlinks

    # -- rows ---------------------------------------------------------------------------
    def window(self, S: tuple[Any, ...]) -> tuple[int, int | None]:
        """(start, end) of the visible slice of the ordered qualifying set."""
        lo = S[self.start_slot] if self.start_slot is not None else 0
        if self.limit_slot is None:
            return lo, None
        return lo, lo + S[self.limit_slot]

    def entry(self, row: dict[str, Any], rid: str, cx: Any) -> tuple[Any, ...]:
        """The sort entry of a row: ORDER BY keys, then the record id (scan order)."""
        keys = []
        for getter, desc in self.order:
            k = sort_key(getter(row, cx))
            keys.append(desc_key(k) if desc else k)
        keys.append(sort_key(row.get("id", NONE)))
        keys.append(rid)
        return tuple(keys)

    def eq_key(self, S: tuple[Any, ...], par: Any, cx: Cx) -> Any:
        """The value the equality conjunct compares with (slot or ``$parent`` path)."""
        assert self.eq is not None
        other = self.eq[1]
        if other[0] == "slot":
            return S[other[1]]
        path = other[1]
        return walk(par, path, cx) if path else par

    def candidates(self, store: Store, S: tuple[Any, ...], par: Any, cx: Cx) -> Any:
        """Record ids that may qualify (equality index lookup or a scan); records the scan."""
        t = store.table(self.table)
        if self.eq is None:
            cx.subs.append((self.table, None, None))
            return t.rows.keys()
        field = self.eq[0]
        val = self.eq_key(S, par, cx)
        key = ikey(val)
        cx.subs.append((self.table, field, key))
        if field == "id":
            if type(val) is RecordID and val.table_name == self.table:
                text = rid_text(val)
                return (text,) if text in t.rows else ()
            return ()
        return t.index(field).get(key, ())

    def run(self, store: Store, S: tuple[Any, ...], par: Any, cx: Cx) -> list[Any]:
        """Evaluate this (sub)query for one parent row: filter, order, window, project."""
        rows = store.table(self.table).rows
        pred = self.pred
        hits = []
        for rid in list(self.candidates(store, S, par, cx)):
            row = rows.get(rid)
            if row is not None and pred(row, S, par, cx):
                hits.append((self.entry(row, rid, cx), row))
        hits.sort(key=lambda h: h[0])
        lo, hi = self.window(S)
        if lo or hi is not None:
            hits = hits[lo:hi]
        return [self.project(store, S, row, cx) for _, row in hits]

    def project(self, store: Store, S: tuple[Any, ...], row: dict[str, Any], cx: Cx) -> Any:
        """The output document of ``row`` (SurrealDB's shape for this projection)."""
        if self.star_only:
            return row
        out: dict[str, Any] = {}
        for item in self.items:
            kind = item[0]
            if kind == "all":
                out.update(row)
            elif kind == "field":
                out_path = item[2]
                v = item[1](row, cx)
                if len(out_path) == 1:
                    out[out_path[0]] = v
                else:
                    _set_path(out, out_path, v)
            elif kind == "linkall":
                v = link_all(item[1](row, cx), cx)
                _set_path(out, item[2], v)
            else:
                sub: Plan = item[1]
                res: Any = sub.run(store, S, row, cx)
                if item[2] is not None:
                    res = res[item[2]] if item[2] < len(res) else NONE
                _set_path(out, item[3], res)
        for path in self.fetch:
            out = _fetch_at(out, path, cx)
        return out


    def item_value(
        self, item: tuple[Any, ...], store: Store, S: tuple[Any, ...], row: dict[str, Any],
        cx: Cx,
    ) -> Any:
        """The value one projection item (not ``*``) puts into the output of ``row``."""
        kind = item[0]
        if kind == "field":
            return item[1](row, cx)
        if kind == "linkall":
            return link_all(item[1](row, cx), cx)
        sub: Plan = item[1]
        res: Any = sub.run(store, S, row, cx)
        if item[2] is not None:
            res = res[item[2]] if item[2] < len(res) else NONE
        return res

    def assemble(self, row: dict[str, Any], values: list[Any]) -> dict[str, Any]:
        """Build the output from per-item values (``*`` items take the row; no FETCH)."""
        out: dict[str, Any] = {}
        for item, v in zip(self.items, values):
            if item[0] == "all":
                out.update(row)
            else:
                out_path = item[-1]
                if len(out_path) == 1:
                    out[out_path[0]] = v
                else:
                    _set_path(out, out_path, v)
        return out


def tree_members(out: Any, acc: dict[str, Any]) -> None:
    """Every dict with a record-id ``id`` in an output tree: id text -> that dict."""
    t = type(out)
    if t is dict:
        rid = out.get("id")
        if type(rid) is RecordID:
            acc[rid_text(rid)] = out
        for v in out.values():
            tv = type(v)
            if tv is dict or tv is list:
                tree_members(v, acc)
    elif t is list:
        for v in out:
            tv = type(v)
            if tv is dict or tv is list:
                tree_members(v, acc)
