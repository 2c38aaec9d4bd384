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

from engine.aggregate import AggSpec, AggState, _values, row_query
from engine.compile import compile_expr, compile_predicate, compile_value, walk
from engine.cx import Cx
from engine.join import Join, JoinSpec, join_spec
from engine.matindex import exact_key
from engine.parser import Expr, Item, Query
from engine.semijoin import SemiSpec
from engine.shape import order_key
from engine.store import Store, ikey, rid_text
from engine.syntax import conjoin, conjuncts
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

    def __le__(self, other: Desc) -> bool:
        return bool(other.k <= self.k)

    def __ge__(self, other: Desc) -> bool:
        return bool(other.k >= self.k)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Desc) and bool(self.k == other.k)

    def __hash__(self) -> int:  # pragma: no cover - entries are never hashed
        return 0


_R_NUMBER = sort_key(0)[0]
_NEG_NUMBER = -_R_NUMBER
_R_STRING = sort_key("")[0]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_R_DATETIME = sort_key(_EPOCH)[0]
_NEG_DATETIME = -_R_DATETIME
_R_RECORD = sort_key(RecordID("t", 0))[0]
_MICRO = timedelta(microseconds=1)
_EXACT = 2**53
_EXACT_KEYS = (int, str)


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
    if r == _R_RECORD:
        # (ORDER BY id DESC, a link DESC) plain tuples too, compared in C: the table's name
        # reversed once per name, then the key's kind, then an int key negated (other keys,
        # compared only with keys of their own kind, wrapped)
        idk = k[2]
        if type(idk[1]) is int:
            return (-r, _desc_name(k[1]), -idk[0], -idk[1])
        return (-r, _desc_name(k[1]), -idk[0], Desc(idk[1:]))
    if len(k) == 1:
        return (-r,)
    return (-r, Desc(k[1:]))


_DESC_NAMES: dict[str, tuple[int, ...]] = {}


def _desc_name(name: str) -> tuple[int, ...]:
    """A table name's place in descending order as a tuple of ints (kept per name): its code
    points negated, then 1, which is above them all, so a name comes after the longer names
    it begins (``b`` > ``ab`` > ``a``, descending: ``b``, ``ab``, ``a``)."""
    t = _DESC_NAMES.get(name)
    if t is None:
        if len(_DESC_NAMES) >= 10_000:
            _DESC_NAMES.clear()
        t = _DESC_NAMES[name] = (*[-ord(c) for c in name], 1)
    return t


def _eq_candidate(where: Expr | None) -> tuple[str, Expr] | None:
    """Pick a top-level conjunct ``field = constant-or-$parent`` usable as an index lookup."""
    found = _eq_conjunct(where)
    return None if found is None else found[0]


def _eq_conjunct(where: Expr | None) -> tuple[tuple[str, Expr], Expr | None] | None:
    """(the index lookup of :func:`_eq_candidate`, the rest of the WHERE clause)."""
    best: tuple[str, Expr] | None = None
    best_c: Expr | None = None
    parts = conjuncts(where)
    for c in parts:
        if c[0] != "cmp" or c[1] != "=":
            continue
        a, b = c[2], c[3]
        for f, other in ((a, b), (b, a)):
            if (f[0] == "field" and len(f[1]) == 1 and other[0] in ("slot", "parent")
                    and (best is None or f[1][0] == "id")):
                best = (f[1][0], other)
                best_c = c
    if best is None:
        return None
    return best, conjoin([c for c in parts if c is not best_c])


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


def _linkall_getter(path: tuple[str, ...]) -> Callable[[dict[str, Any], Any], Any]:
    """The value a ``path.*`` item shows for a row: the path walked, then :func:`link_all`.
    Where the walk maps over an array, ``.*`` applies to each element: an element that is
    no record, object or array is NONE there (SurrealDB: ``[thread:1, thread:2].author.*``
    with one author a duration), while an array the path ends on keeps such elements."""
    return lambda row, cx: walk(row, path, cx, link_all)


def _first_of(pair: tuple[Any, Any]) -> Any:
    return pair[0]


def _path_value(doc: Any, path: tuple[str, ...]) -> Any:
    """The value at a path of nested objects (NONE when absent; no links are followed)."""
    for seg in path:
        if type(doc) is not dict:
            return NONE
        doc = doc.get(seg, NONE)
    return doc


def _with_path(doc: dict[str, Any], path: tuple[str, ...], v: Any) -> dict[str, Any]:
    """A copy of ``doc`` with ``v`` at ``path`` (the objects on the way copied)."""
    out = dict(doc)
    if len(path) == 1:
        out[path[0]] = v
    else:
        inner = out.get(path[0])
        out[path[0]] = _with_path(inner if type(inner) is dict else {}, path[1:], v)
    return out


def _cut(v: Any, path: tuple[str, ...]) -> Any:
    """``v`` without the field at ``path`` (OMIT): objects are copied where they change, an
    array has the field cut from each element."""
    t = type(v)
    if t is dict:
        head = path[0]
        if head not in v:
            return v
        out = dict(v)
        if len(path) == 1:
            del out[head]
        else:
            out[head] = _cut(v[head], path[1:])
        return out
    if t is list:
        return [_cut(x, path) for x in v]
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


def _compile_order(q: Query) -> tuple[list[tuple[Callable[[dict[str, Any], Any], Any], bool]],
                                      list[tuple[tuple[str, ...] | None, bool]], bool]:
    """ORDER BY compiled: each key's value function and direction, each key's source path
    (None: an expression), and whether any key follows a link."""
    order: list[tuple[Callable[[dict[str, Any], Any], Any], bool]] = []
    order_links = False
    sources: list[tuple[tuple[str, ...] | None, bool]] = []
    for path, desc in q.order:
        key = order_key(q, path)
        if key[0] == "field":
            src = tuple(key[1])
            if len(src) > 1:
                order_links = True
            order.append((compile_value(src), desc))
            sources.append((src, desc))
        else:
            fn, links = compile_expr(key)
            order_links = order_links or links
            order.append((_row_value(fn), desc))
            sources.append((None, desc))
    return order, sources, order_links


def _compile_items(q: Query) -> tuple[list[tuple[Any, ...]], bool, bool]:
    """The projection's items compiled, whether it is `*` alone, and whether it reads
    nothing beyond the row (one-segment fields and `*` only)."""
    items: list[tuple[Any, ...]] = []
    star_only = True
    simple = True
    for it in q.items:
        if it.kind == "all":
            items.append(("all",))
            continue
        star_only = False
        if it.kind == "field":
            items.append(("field", compile_value(it.path), it.out))
            if len(it.path) > 1:
                simple = False
        elif it.kind == "expr":
            assert it.expr is not None
            items.append(("expr", compile_expr(it.expr)[0], it.out))
            simple = False
        elif it.kind == "linkall":
            items.append(("linkall", _linkall_getter(it.path), it.out))
            simple = False
        else:
            assert it.sub is not None
            items.append(("sub", grouped_plan(it.sub), it.index, it.out))
            simple = False
    return items, star_only, simple


def _may_share(q: Query) -> bool:
    """Whether a member of the output may be held by several rows (FETCH, `link.*`, a
    subquery of rows that other parents can show too)."""
    return bool(q.fetch) or any(
        it.kind == "linkall" or (it.kind == "sub" and it.sub is not None
                                 and not _own_children(it.sub, q.table))
        for it in q.items)


def _item_fields(it: Item) -> frozenset[str] | None:
    """The row fields one item reads (None: the whole row)."""
    acc: set[str] = set()
    if it.kind == "all":
        return None
    if it.kind in ("field", "linkall"):
        return frozenset(it.path[:1])
    if it.kind == "expr":
        whole = not expr_fields(it.expr, acc, False)
        return None if whole else frozenset(acc)
    assert it.sub is not None
    whole = it.sub.where is not None and not expr_fields(it.sub.where, acc, True)
    return None if whole else frozenset(acc)


class Plan:
    """The compiled form of one query level."""

    def __init__(self, q: Query) -> None:
        # Kept whole: it declares every attribute of a plan, each beside why it exists (the
        # compiling is done by the _compile_* functions it calls).
        self.q = q
        self.table = q.table
        # semi-joins of the condition (`x IN (SELECT VALUE ...)`: engine.semijoin)
        self.semis: list[Any] = []
        self.pred, pred_links = compile_predicate(q.where, self.semis, SemiSpec)
        self.order, sources, order_links = _compile_order(q)
        # the same entries as the generic method, built by one generated function
        self.entry: Callable[[dict[str, Any], str, Any], tuple[Any, ...]] = _compile_entry(
            sources, self.order)
        # Rows can move in or out of the qualifying set (or move in the order) when a linked
        # record changes only if the predicate or a sort key follows a link.
        self.qlinks = pred_links or order_links
        # the one field of the row WHERE reads, when it reads nothing else: rows holding the
        # same string there qualify alike, so a new view evaluates WHERE once per string
        # (engine.window.passing; `string::uppercase(status) = $p0` over 50k orders)
        self.one_field = None if pred_links or self.semis else _one_field(q.where)
        # the row fields through which WHERE / ORDER BY follow links, when every such path is
        # one hop (`author.name`): the records a row's predicate reads are then the links it
        # holds in those fields, found from the table's equality index on each field
        # (engine.core, "_hops") instead of being registered row by row
        self.qhop: tuple[str, ...] | None = _one_hop(q) if self.qlinks else None
        self.limit_slot = q.limit[1] if q.limit is not None else None
        self.start_slot = q.start[1] if q.start is not None else None
        self.bounded = self.limit_slot is not None or self.start_slot is not None
        self.ordered = self.bounded  # only a window needs the qualifying set kept in order
        found = _eq_conjunct(q.where)
        self.eq = None if found is None else found[0]
        # With an exact index key (a record link), candidates already satisfy the equality:
        # only the rest of the WHERE clause is evaluated (None: nothing else).
        self.residual = None if found is None or found[1] is None else compile_predicate(
            found[1], self.semis, SemiSpec)[0]
        # Every read beyond the row is a semi-join's set tested with a field of the row
        # (`seller IN (SELECT VALUE ...)`) and ORDER BY reads the row alone: a set's key
        # entering or leaving requalifies the rows holding it in that field (the table's
        # equality index), so rows register no reads of their own (engine.window, "qkeyed")
        # (links followed one hop, `seller.age`, are found from the index too: "qhop")
        self.qkeyed = (self.qlinks and not order_links and bool(self.semis)
                       and q.where is not None and _semi_keyed(q.where))
        if self.qkeyed:
            if _field_paths(q.where, [], True):
                self.qhop = _one_hop(q, True)  # None: no path is two segments long
            else:
                self.qkeyed = False
        # top-level conjuncts `field IN (SELECT VALUE ...)` of a qkeyed WHERE, with their
        # semi-join: a new view's candidates are the rows holding the set's keys there (its
        # table's equality index) when they are few (engine.membership.semi_candidates)
        self.semi_in: list[tuple[str, Any]] = _semi_in(q.where, self.semis) \
            if self.qkeyed else []
        self.fetch = q.fetch
        self.items, star_only, simple = _compile_items(q)
        # SELECT VALUE: a row's output is its one item's value (its members: the row itself
        # and every record inside the value; engine/README, "Members")
        self.value = q.value
        self.omit = q.omit
        # SPLIT: each row is projected once per element of the arrays at these source paths
        # (its output is the list of those outputs; engine.core.result flattens it)
        self.split = q.split
        # the row is a member of its own output (VALUE rows; the contribution rows of a
        # grouped shape, engine.aggregate), and items whose members do not count (the
        # aggregate arguments of a grouped shape)
        self.self_member = q.value
        self.quiet = [False] * len(q.items)
        self.agg: AggSpec | None = None  # set by grouped_plan
        if self.value or self.omit or self.split:
            simple = star_only = False
        self.star_only = star_only and not self.fetch
        # A simple projection reads nothing beyond the row: no link, subquery or FETCH.
        self.simple = simple and not self.fetch
        # items that read only the row itself (re-projected only when the row changes)
        self.row_only = [it.kind == "all" or (it.kind == "field" and len(it.path) == 1)
                         for it in q.items]
        # the row fields each item reads (None: the whole row): an item whose fields did not
        # change keeps its value when the row changes (links and scans are tracked apart)
        self.item_fields: list[frozenset[str] | None] = [_item_fields(it) for it in q.items]
        self.flat = _compile_flat(q) if self.simple and not self.star_only else None
        # the row fields a simple projection without `*` reads: a change to other fields
        # leaves its output as it is (None: unknown or the whole row)
        self.out_fields: frozenset[str] | None = frozenset(it.path[0] for it in q.items) \
            if self.simple and all(it.kind == "field" for it in q.items) else None
        self.item_keys = _item_keys(q)
        # whether a member of the output may be held by several rows of the shape (a linked
        # record, a subquery's row that other parents can show too): its views then count
        # their members from registration on (engine.delta.counted_delta)
        self.may_share = _may_share(q)
        # items whose value can carry members that are no dict in it (VALUE subqueries)
        self.item_extra = [it.sub is not None and _has_value(it.sub) for it in q.items]
        # subquery items that never read the parent row (uncorrelated, at any depth): their
        # value is the same for every row of the shape, so a flush computes it once for all
        # the rows it re-projects (engine.proj)
        self.row_free = [it.kind == "sub" and it.sub is not None and not _reads_parent(it.sub)
                         for it in q.items]
        # entries read the row alone unless ORDER BY follows a link
        self.row_entries = not order_links
        # the first ORDER BY key's field when it is one segment (a join's bounds, engine.join)
        first = sources[0][0] if sources else None
        self.first_source = first[0] if first is not None and len(first) == 1 else None
        # a subquery's join states (engine.join), by the values of the slots it reads
        self.jspec: JoinSpec | None = None
        self._jdone = False
        self._joins: dict[Any, Join] = {}
        self._jS: Any = None
        self._jlast: Join | None = None
        self._ecache: Any = None
        self._fcache: Any = None
        self._ctable: Any = None

    def all_semis(self) -> list[Any]:
        """The semi-joins of this level and of its projection subqueries (their live sets
        are opened for each materialisation: engine.core)."""
        out = list(self.semis)
        for item in self.items:
            if item[0] == "sub":
                out += item[1].all_semis()
        return out

    # -- rows ---------------------------------------------------------------------------
    def window(self, S: tuple[Any, ...]) -> tuple[int, int | None]:
        """(start, end) of the visible slice of the ordered qualifying set."""
        lo = S[self.start_slot] if self.start_slot is not None else 0
        if self.limit_slot is None:
            return lo, None
        return lo, lo + S[self.limit_slot]

    def generic_entry(self, row: dict[str, Any], rid: str, cx: Any) -> tuple[Any, ...]:
        """The sort entry of a row: ORDER BY keys, then the record id (scan order).

        Equal to ``(desc_key(sort_key(v)) or sort_key(v), ..., sort_key(id), rid)``, with the
        common kinds (exact ints, strings, datetimes, int/str record keys) built inline."""
        keys: list[Any] = []
        for getter, desc in self.order:
            v = getter(row, cx)
            t = type(v)
            if t is int and -_EXACT <= v <= _EXACT:
                keys.append((_NEG_NUMBER, 0, -v) if desc else (_R_NUMBER, 0, v, 0, 0))
            elif t is str and not desc:
                keys.append((_R_STRING, v))
            elif t is datetime and v.tzinfo is not None:
                keys.append((_NEG_DATETIME, -((v - _EPOCH) // _MICRO)) if desc
                            else (_R_DATETIME, v))
            else:
                k = sort_key(v)
                keys.append(desc_key(k) if desc else k)
        i = row.get("id", NONE)
        if type(i) is RecordID and type(i.id) is int:
            keys.append((_R_RECORD, i.table_name, (0, i.id)))
        elif type(i) is RecordID and type(i.id) is str:
            keys.append((_R_RECORD, i.table_name, (1, i.id)))
        else:
            keys.append(sort_key(i))
        keys.append(rid)
        return tuple(keys)

    def eq_key(self, S: tuple[Any, ...], par: Any, cx: Cx) -> Any:
        """The value the equality conjunct compares with (slot or ``$parent`` path)."""
        assert self.eq is not None
        other = self.eq[1]
        if other[0] == "slot":
            return S[other[1]]
        path = other[1]
        if not path:
            return par
        if len(path) == 1 and type(par) is dict:
            return par.get(path[0], NONE)  # the usual `$parent.field`, without the walk
        return walk(par, path, cx)

    def eq_lookup(self, t: Any, S: tuple[Any, ...], par: Any, cx: Cx) -> tuple[Any, Any]:
        """(the ids of table store ``t`` whose equality field holds the value, the value),
        through the equality index (by id: the row itself); records the lookup."""
        assert self.eq is not None
        field = self.eq[0]
        val = self.eq_key(S, par, cx)
        key = ikey(val)
        cx.subs.append((self.table, field, key))
        if field != "id":
            return t.index(field).get(key, ()), val
        if type(val) is RecordID and val.table_name == self.table:
            text = rid_text(val)
            if text in t.rows:
                return (text,), val
        return (), val

    def candidates(self, store: Store, S: tuple[Any, ...], par: Any, cx: Cx) -> Any:
        """Record ids that may qualify (equality index lookup or a scan); records the scan."""
        t = store.table(self.table)
        if self.eq is None:
            cx.subs.append((self.table, None, None))
            return t.rows.keys()
        return self.eq_lookup(t, S, par, cx)[0]

    def join(self, store: Store, S: tuple[Any, ...]) -> Join | None:
        """This subquery's join state for slot values ``S`` (None: it runs per parent)."""
        if not self._jdone:
            self.jspec = join_spec(self)
            self._jdone = True
        spec = self.jspec
        if spec is None:
            return None
        last = self._jlast
        if S is self._jS and last is not None and last.store is store:
            return last
        key = exact_key(tuple([S[i] for i in spec.slots])) if spec.slots else ()
        j = self._joins.get(key)
        if j is None or j.store is not store:
            j = self._joins[key] = Join(self, spec, S, store)
        self._jS = S
        self._jlast = j
        return j

    def forget_join(self, j: Join) -> None:
        """``j`` holds no group any more (engine.join)."""
        for k, v in list(self._joins.items()):
            if v is j:
                del self._joins[k]
        if self._jlast is j:
            self._jlast = None
            self._jS = None

    def run(self, store: Store, S: tuple[Any, ...], par: Any, cx: Cx) -> list[Any]:
        """Evaluate this (sub)query for one parent row: filter, order, window, project
        (through its join state, engine.join, when it has one)."""
        j = self.join(store, S)
        if j is not None:
            return j.run(S, par, cx)
        t = store.table(self.table)
        rows = t.rows
        test: Any = self.pred
        if self.eq is None:
            cx.subs.append((self.table, None, None))
            cands: Any = rows
        else:
            cands, val = self.eq_lookup(t, S, par, cx)
            if type(val) is RecordID and type(val.id) in _EXACT_KEYS:
                # the index key of a link with an int/str key is exact: no equality test
                test = self.residual
        if self.agg is not None:
            return self._run_grouped(store, S, par, cx, rows, cands, test)
        if self.split:
            return self._run_split(store, S, par, cx, rows, cands, test)
        # sort entries (and flat outputs) depend on the row alone: kept per row until it
        # changes, so a re-run after one sibling changed recomputes that sibling only
        ecache = self._caches(t) if self.row_entries else None
        if ecache is not None:
            return self._run_cached(store, S, par, cx, rows, cands, test, ecache)
        return self._run_uncached(store, S, par, cx, rows, cands, test)

    def _run_cached(self, store: Store, S: tuple[Any, ...], par: Any, cx: Cx, rows: Any,
                    cands: Any, test: Any, ecache: Any) -> list[Any]:
        """`run` with the sort entries (and flat outputs) kept per row."""
        entry = self.entry
        hits = []
        get = ecache.get
        for rid in cands:
            e = get(rid)
            if e is None:
                row = rows.get(rid)
                if row is None or (test is not None and not test(row, S, par, cx)):
                    continue
                e = ecache[rid] = entry(row, rid, cx)
            elif test is not None and not test(rows[rid], S, par, cx):
                continue
            hits.append(e)
        if len(hits) > 1:
            hits.sort()
        lo, hi = self.window(S)
        if lo or hi is not None:
            hits = hits[lo:hi]
        flat = self.flat
        if flat is not None:
            fcache = self._fcache
            assert fcache is not None
            out = []
            for e in hits:
                rid = e[-1]
                o = fcache.get(rid)
                if o is None:
                    o = fcache[rid] = flat(rows[rid])
                out.append(o)
            return out
        if self.value:
            pairs = [(e[-1], self.project(store, S, rows[e[-1]], cx)) for e in hits]
            cx.last = [[p] for p in pairs]
            return [v for _, v in pairs]
        return [self.project(store, S, rows[e[-1]], cx) for e in hits]

    def _run_uncached(self, store: Store, S: tuple[Any, ...], par: Any, cx: Cx, rows: Any,
                      cands: Any, test: Any) -> list[Any]:
        """`run` when the sort entries follow links (computed afresh each run)."""
        entry = self.entry
        pairs = []
        for rid in cands:
            row = rows.get(rid)
            if row is not None and (test is None or test(row, S, par, cx)):
                pairs.append((entry(row, rid, cx), row))
        if len(pairs) > 1:
            pairs.sort()  # entries are unique (they end with the id): rows are never compared
        lo, hi = self.window(S)
        if lo or hi is not None:
            pairs = pairs[lo:hi]
        flat = self.flat
        if flat is not None:
            return [flat(row) for _, row in pairs]
        if self.value:
            done = [(e[-1], self.project(store, S, row, cx)) for e, row in pairs]
            cx.last = [[p] for p in done]
            return [v for _, v in done]
        return [self.project(store, S, row, cx) for _, row in pairs]

    def row_caches(self, t: Any) -> tuple[Any, Any]:
        """(sort entries, flat outputs) this plan keeps per row of table store ``t``."""
        return self._caches(t), self._fcache

    def _caches(self, t: Any) -> Any:
        ecache = self._ecache
        if ecache is None or self._ctable is not t:
            ecache = self._ecache = t.cache()
            self._fcache = t.cache() if self.flat is not None else None
            self._ctable = t
        return ecache

    def split_docs(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        """SPLIT: the row once per combination of the elements of its arrays at the split
        paths (a value that is no array, or an empty array, stays as it is)."""
        docs = [row]
        for path in self.split:
            out = []
            for doc in docs:
                v = _path_value(doc, path)
                if type(v) is list and v:
                    out += [_with_path(doc, path, x) for x in v]
                else:
                    out.append(doc)
            docs = out
        return docs

    def project(self, store: Store, S: tuple[Any, ...], row: dict[str, Any], cx: Cx) -> Any:
        """The output document of ``row`` (SurrealDB's shape for this projection); with
        SPLIT, the list of the outputs of its split documents."""
        if self.split:
            return [self._project(store, S, doc, cx) for doc in self.split_docs(row)]
        return self._project(store, S, row, cx)

    def _project(self, store: Store, S: tuple[Any, ...], row: dict[str, Any], cx: Cx) -> Any:
        if self.star_only:
            return row
        if self.flat is not None:
            return self.flat(row)
        if self.value:
            return self.item_value(self.items[0], store, S, row, cx)
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
                v = item[1](row, cx)
                _set_path(out, item[2], v)
            elif kind == "expr":
                v = item[1](row, S, NONE, cx)
                if len(item[2]) == 1:
                    out[item[2][0]] = v
                else:
                    _set_path(out, item[2], v)
            else:
                _set_path(out, item[3], self.item_value(item, store, S, row, cx))
        for path in self.fetch:
            out = _fetch_at(out, path, cx)
        for path in self.omit:
            out = _cut(out, path)
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
            return item[1](row, cx)
        if kind == "expr":
            return item[1](row, S, NONE, cx)
        sub: Plan = item[1]
        res: Any = sub.run(store, S, row, cx)
        if not sub.self_member:
            if item[2] is not None:
                res = res[item[2]] if item[2] < len(res) else NONE
            return res
        # the rows of a VALUE or grouped subquery are members of the result (those its
        # output rows stand for): one list of (row, what it shows) per output row
        shown = cx.last
        cx.last = []
        if item[2] is not None:
            i = item[2]
            res = res[i] if i < len(res) else NONE
            shown = shown[i:i + 1]
        extra = cx.extra
        for rows in shown:
            for rid, v in rows:
                if rid not in extra:
                    extra[rid] = v
        return res

    def _run_split(self, store: Store, S: tuple[Any, ...], par: Any, cx: Cx,
                   rows: dict[str, Any], cands: Any, test: Any) -> list[Any]:
        """A SPLIT subquery for one parent row: its split documents in order."""
        docs = []
        for rid in cands:
            row = rows.get(rid)
            if row is not None and (test is None or test(row, S, par, cx)):
                for i, doc in enumerate(self.split_docs(row)):
                    docs.append((self.entry(doc, rid, cx) + (i,), doc))
        docs.sort(key=_first_of)
        return [self._project(store, S, doc, cx) for _, doc in docs]

    def _run_grouped(self, store: Store, S: tuple[Any, ...], par: Any, cx: Cx,
                     rows: dict[str, Any], cands: Any, test: Any) -> list[Any]:
        """A grouped subquery for one parent row: its groups computed from the rows that
        qualify (a run costs the rows of its correlation key, as any subquery run)."""
        spec = self.agg
        assert spec is not None
        contribs: list[tuple[str, Any]] = []
        for rid in cands:
            row = rows.get(rid)
            if row is not None and (test is None or test(row, S, par, cx)):
                contribs.append((rid, self.project(store, S, row, cx)))
        state = AggState(spec, lambda: [(rid, _values(c, spec)) for rid, c in contribs])
        for rid, c in contribs:
            state.move(rid, None, c)
        out = spec.rows_grouped(state, S)
        members: dict[Any, list[tuple[str, Any]]] = {}
        for rid, c in contribs:
            members.setdefault(spec.group_of(c), []).append((rid, c))
        cx.last = [members.get(gk, []) for gk, _ in out]
        return [o for _, o in out]

    def assemble(self, row: dict[str, Any], values: list[Any]) -> Any:
        """Build the output from per-item values (``*`` items take the row; no FETCH)."""
        if self.value:
            return values[0]
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
        for path in self.omit:
            out = _cut(out, path)
        return out


def expr_fields(e: Any, acc: set[str], parent: bool) -> bool:
    """Collect first segments of field paths (or of ``$parent`` paths when ``parent``) into
    ``acc``; False when the whole row is read."""
    k = e[0]
    if k == "field" and not parent:
        acc.add(e[1][0])
    elif k == "parent" and parent:
        if not e[1]:
            return False
        acc.add(e[1][0])
    elif k in ("and", "or"):
        return expr_fields(e[1], acc, parent) and expr_fields(e[2], acc, parent)
    elif k == "not":
        return expr_fields(e[1], acc, parent)
    elif k == "cmp":
        return expr_fields(e[2], acc, parent) and expr_fields(e[3], acc, parent)
    elif k == "array":
        return all(expr_fields(x, acc, parent) for x in e[1])
    elif k in ("object", "call"):
        return all(expr_fields(x, acc, parent) for x in e[2])
    elif k in ("arith", "nullish"):
        return expr_fields(e[2], acc, parent) and expr_fields(e[3], acc, parent)
    elif k in ("neg", "get", "deref"):
        return expr_fields(e[1], acc, parent)
    elif k == "graph" and not parent:
        acc.add("id")  # a traversal starts at the row's id
    elif k == "index":
        return expr_fields(e[1], acc, parent) and expr_fields(e[2], acc, parent)
    return True



def _has_value(q: Query) -> bool:
    """Whether ``q`` or a subquery of its projection is a SELECT VALUE or grouped."""
    return q.value or q.group is not None or any(
        it.sub is not None and _has_value(it.sub) for it in q.items)


def grouped_plan(q: Query) -> Plan:
    """The plan of a query level: a grouped query runs its row-level query (each row's
    group key and aggregate arguments, engine.aggregate) and keeps the spec of its groups."""
    if q.group is None:
        return Plan(q)
    spec = AggSpec(q)
    plan = Plan(row_query(q))
    plan.agg = spec
    plan.self_member = True
    # a row is a member of its own output (its contribution): never the simple projection
    # (no tree) nor its flat form, even when every key and argument is a field of the row
    plan.simple = False
    plan.flat = None
    plan.out_fields = None
    plan.quiet = [it.out[0].startswith("a") for it in plan.q.items]
    if plan.item_keys is not None:
        # an argument that is a field of the row carries no members either (as a quiet
        # expression item): _tree_of skips an item keyed with no tree
        for i, it in enumerate(plan.q.items):
            if plan.quiet[i] and plan.row_only[i]:
                plan.item_keys[it.out[0]] = i
    return plan


def _row_value(fn: Callable[..., Any]) -> Callable[[dict[str, Any], Any], Any]:
    """An ORDER BY expression as a getter of the row (it reads no slot: engine.shape)."""
    return lambda row, cx: fn(row, (), NONE, cx)


def _compile_entry(sources: list[tuple[tuple[str, ...] | None, bool]],
                   order: list[tuple[Callable[..., Any], bool]]) -> Callable[..., Any]:
    """``entry(row, rid, cx)`` as one generated function: :meth:`Plan.generic_entry` unrolled over
    the ORDER BY keys, one-segment paths read inline (a window or subquery computes an entry
    per qualifying row)."""
    lines = ["def _entry(row, rid, cx):"]
    names = []
    for n, (src, desc) in enumerate(sources):
        v = f"v{n}"
        k = f"k{n}"
        names.append(k)
        get = (f"row.get({src[0]!r}, NONE)" if src is not None and len(src) == 1
               else f"G[{n}](row, cx)")
        lines += [
            f"    {v} = {get}",
            f"    t = type({v})",
            f"    if t is int and -EXACT <= {v} <= EXACT:",
            f"        {k} = (NEG_NUMBER, 0, -{v})" if desc else
            f"        {k} = (R_NUMBER, 0, {v}, 0, 0)",
        ]
        if not desc:
            lines += ["    elif t is str:", f"        {k} = (R_STRING, {v})"]
        lines += [
            f"    elif t is datetime and {v}.tzinfo is not None:",
            f"        {k} = (NEG_DATETIME, -(({v} - EPOCH) // MICRO))" if desc else
            f"        {k} = (R_DATETIME, {v})",
            "    else:",
            f"        {k} = desc_key(sort_key({v}))" if desc else f"        {k} = sort_key({v})",
        ]
    lines += [
        "    i = row.get('id', NONE)",
        "    if type(i) is RecordID:",
        "        x = i.id",
        "        if type(x) is int:",
        "            ki = (R_RECORD, i.table_name, (0, x))",
        "        elif type(x) is str:",
        "            ki = (R_RECORD, i.table_name, (1, x))",
        "        else:",
        "            ki = sort_key(i)",
        "    else:",
        "        ki = sort_key(i)",
        f"    return ({''.join(k + ', ' for k in names)}ki, rid)",
    ]
    env: dict[str, Any] = {
        "NONE": NONE, "EXACT": _EXACT, "NEG_NUMBER": _NEG_NUMBER, "R_NUMBER": _R_NUMBER,
        "R_STRING": _R_STRING, "NEG_DATETIME": _NEG_DATETIME, "R_DATETIME": _R_DATETIME,
        "EPOCH": _EPOCH, "MICRO": _MICRO, "R_RECORD": _R_RECORD, "RecordID": RecordID,
        "datetime": datetime, "sort_key": sort_key, "desc_key": desc_key,
        "G": [g for g, _ in order],
    }
    # Generated from our own AST (field names go through repr), never from raw query text.
    exec(compile("\n".join(lines) + "\n", "<view-entry>", "exec"), env)  # noqa: S102
    return env["_entry"]


def _field_paths(e: Any, acc: list[tuple[str, ...]], semis: bool = False) -> bool:
    """Collect the field paths an expression reads; False when it holds a part this walk
    does not know (a nested query; with ``semis``, a semi-join's set is known: what it is
    tested with is walked as a sibling, and its rows are watched by the set)."""
    if type(e) is not tuple or not e:
        return False
    k = e[0]
    if semis and k == "subquery":
        return True
    if k == "field":
        acc.append(tuple(e[1]))
        return True
    if k in ("lit", "slot", "param", "parent", "last"):
        return True
    if k == "object" or k == "call":
        return all(_field_paths(x, acc, semis) for x in e[2])
    if k == "get":
        return _field_paths(e[1], acc, semis)
    if k == "array":
        return all(_field_paths(x, acc, semis) for x in e[1])
    for x in e[1:]:
        if type(x) is tuple and x and type(x[0]) is str:
            if not _field_paths(x, acc, semis):
                return False
        elif type(x) is not str:
            return False
    return True


def _semi_in(where: Any, semis: list[Any]) -> list[tuple[str, Any]]:
    """(field, its semi-join) of each top-level conjunct ``field IN (SELECT VALUE ...)``
    (the row's own field, not negated)."""
    out: list[tuple[str, Any]] = []
    for c in conjuncts(where):
        if (c[0] == "cmp" and c[1] == "inside" and c[2][0] == "field" and len(c[2][1]) == 1
                and c[3][0] == "subquery"):
            for spec in semis:
                if spec.q is c[3][1] and spec.outer == c[2]:
                    out.append((c[2][1][0], spec))
                    break
    return out


def _one_field(where: Any) -> str | None:
    """The one top-level field (not ``id``) a condition reads, when it reads nothing else:
    no link, ``$parent``, graph step, subquery nor a second field."""
    paths: list[tuple[str, ...]] = []
    if where is None or not _field_paths(where, paths) or _reads_parent(where):
        return None
    names = set(paths)
    if len(names) != 1:
        return None
    path = names.pop()
    return path[0] if len(path) == 1 and path[0] != "id" else None


def _semi_keyed(e: Any) -> bool:
    """Whether a condition reads nothing beyond its row but semi-join sets, each tested
    with one field of the row (``f IN (SELECT VALUE ...)``, ``(SELECT VALUE ...) CONTAINS
    f``): no link, ``$parent``, graph step nor a semi-join of an expression."""
    if type(e) is not tuple or not e:
        return True
    k = e[0]
    if type(k) is not str:
        return all(_semi_keyed(x) for x in e)
    if k in ("lit", "slot", "param"):
        return True
    if k == "field":
        return len(e[1]) <= 2  # the row's own field, or one hop (Plan.qhop)
    if k in ("parent", "get", "deref", "graph", "subquery"):
        return False
    if k == "cmp":
        if e[3][0] == "subquery" and e[1] in ("inside", "notinside"):
            return e[2][0] == "field" and len(e[2][1]) == 1
        if e[2][0] == "subquery" and e[1] in ("contains", "containsnot"):
            return e[3][0] == "field" and len(e[3][1]) == 1
    return all(_semi_keyed(x) for x in e[1:] if type(x) is tuple)


def _one_hop(q: Query, semis: bool = False) -> tuple[str, ...] | None:
    """The fields WHERE and ORDER BY follow links through, when every path through one is
    one hop long (``f.x``); None otherwise (``semis``: semi-join sets allowed)."""
    paths: list[tuple[str, ...]] = []
    if q.where is not None and not _field_paths(q.where, paths, semis):
        return None
    for path, _desc in q.order:
        key = order_key(q, path)
        if not _field_paths(key, paths):
            return None
    hops: dict[str, None] = {}
    for p in paths:
        if len(p) > 2:
            return None
        if len(p) == 2:
            hops[p[0]] = None
    return tuple(hops) or None


def _own_children(sub: Query, table: str) -> bool:
    """Whether each row a subquery shows belongs to one parent: rows of another table
    correlated by ``field = $parent.id``, projected to plain fields."""
    if sub.table == table or sub.fetch:
        return False
    if any(it.kind not in ("field", "all") or len(it.path) > 1 for it in sub.items):
        return False
    for c in conjuncts(sub.where):
        if c[0] == "cmp" and c[1] == "=":
            for f, other in ((c[2], c[3]), (c[3], c[2])):
                if f[0] == "field" and len(f[1]) == 1 and other == ("parent", ("id",)):
                    return True
    return False


def _reads_parent(node: Any) -> bool:
    """Whether any ``$parent`` appears in a query (or expression) tree, at any depth: a
    conservative test (a nested subquery's ``$parent`` names its own parent, still counted)."""
    if type(node) is tuple:
        if node and node[0] == "parent":
            return True
        return any(_reads_parent(x) for x in node)
    if isinstance(node, (Query, Item)):
        return any(_reads_parent(getattr(node, f)) for f in node.__dataclass_fields__)
    return False


def _item_keys(q: Query) -> dict[str, int] | None:
    """Output key -> index of each item that does not read the row alone, when an output's
    members can be assembled from per-item members (``engine.proj._tree_of``): one-segment
    distinct output keys, ``*`` (if any) first, no FETCH, OMIT of whole top-level keys only
    (``_tree_of`` walks the output after OMIT: a key it took is not visited; an OMIT inside
    an item's value would leave members in the item's tree). None otherwise."""
    if q.fetch or q.value or q.split or any(len(p) != 1 for p in q.omit):
        return None
    keys: dict[str, int] = {}
    seen: set[str] = set()
    for i, it in enumerate(q.items):
        if it.kind == "all":
            if i != 0:
                return None  # a later `*` overwrites earlier items
            continue
        if len(it.out) != 1 or it.out[0] in seen:
            return None
        seen.add(it.out[0])
        if not (it.kind == "field" and len(it.path) == 1):
            keys[it.out[0]] = i
    return keys


def _compile_flat(q: Query) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """``row -> output`` for a projection of ``*`` and one-segment fields with one-segment
    aliases (one dict display, items in order as :meth:`Plan.project` applies them)."""
    parts: list[str] = []
    for it in q.items:
        if it.kind == "all":
            parts.append("**row")
        elif it.kind == "field" and len(it.path) == 1 and len(it.out) == 1:
            parts.append(f"{it.out[0]!r}: row.get({it.path[0]!r}, NONE)")
        else:
            return None
    env: dict[str, Any] = {"NONE": NONE}
    # Generated from our own AST (names go through repr), never from raw query text.
    src = f"def _flat(row):\n    return {{{', '.join(parts)}}}\n"
    exec(compile(src, "<view-projection>", "exec"), env)  # noqa: S102
    return env["_flat"]


