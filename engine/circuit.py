"""Shapes (circuits) and their materialisations.

A :class:`Circuit` is one normalised query (views differing only in constants share it) with
its compiled :class:`~engine.plan.Plan`, the index of its materialisations by their constants
(:mod:`engine.matindex`) and its projection groups (:mod:`engine.proj`).

A materialisation is one set of slot values; identical views share it. There are two kinds:

- :class:`Mat` (**implicit**): unordered views whose predicate reads only the row. Membership
  *is* the predicate: a row is shown exactly when ``pred(row, S)`` holds, so the
  materialisation stores no rows at all. A change is classified once per shape through the
  index (held before and after, left, entered), and the shared projection gives the trees.
- :class:`WMat` (**explicit**): views with ORDER BY + LIMIT/START (a window over the ordered
  qualifying set) or a predicate that follows record links (membership moves when a linked
  record changes). They keep their qualifying entries, window and visible row ids.
"""

from __future__ import annotations

import uuid
from typing import Any

from engine.aggregate import AggSpec, AggState
from engine.matindex import FLIP, RANGE_OPS, RangeIndex, bound, exact_key, position, xkey
from engine.parser import Query
from engine.plan import _field_paths, expr_fields, grouped_plan
from engine.proj import NOLINKS, Proj
from engine.shape import order_key
from engine.syntax import collect_slots, conjuncts, query_slots
from engine.values import NONE

_START = object()  # marker: the row did not change in this flush


# the kinds of value `CONTAINS` can be true of (engine.value_ops.contains); of any other
# value it is false, whatever the right-hand side
_CONTAINERS = frozenset({list, tuple, str, dict, uuid.UUID})


class Mat:
    """An implicit materialisation: slot values, the views sharing them, nothing per row."""

    __slots__ = ("S", "__weakref__", "agg", "bkey", "circuit", "cnt", "hi_pos", "key",
                 "lo_pos",
                 "mcache", "pred", "proj", "views", "vt")
    proj: Proj  # set by Circuit.add

    def __init__(self, circuit: Circuit, S: tuple[Any, ...], key: Any) -> None:
        self.circuit = circuit
        self.pred = circuit.plan.pred
        self.S = S
        self.key = key
        self.views: set[str] = set()
        # the views as a dict (view id -> None): deltas go to every view of a materialisation
        # with `dict.fromkeys(vt, d)`, which reads the stored hashes instead of each id string
        self.vt: dict[str, None] = {}
        self.mcache: tuple[int, frozenset[str]] | None = None  # (engine flush count, members)
        self.bkey: Any = ()
        # per nested member, the shown rows whose tree holds it (engine.delta.counted_delta);
        # None until the view needs them
        self.cnt: dict[str, int] | None = None
        self.lo_pos: Any = None
        self.hi_pos: Any = None
        # the groups of a grouped shape (engine.aggregate), filled by the engine's _build
        self.agg: AggState | None = None

    def holds(self, row: dict[str, Any] | None) -> bool:
        """Whether the view shows ``row`` (None: an absent row)."""
        return row is not None and bool(self.pred(row, self.S, NONE, NOLINKS))

    def holds_now(self, rid: str) -> bool:
        """Whether the view shows ``rid`` now."""
        return self.holds(self.circuit.rows.get(rid))

    def holds_start(self, rid: str) -> bool:
        """Whether the view showed ``rid`` when the flush began."""
        row = self.circuit.changed.get(rid, _START)
        if row is _START:
            row = self.circuit.rows.get(rid)
        return self.holds(row)


class Order:
    """The qualifying rows of the explicit materialisations of one shape whose slot values
    differ only in LIMIT/START (pages of one filter share it): their sort entries by row,
    the first of them in order (``head``, see engine.window), and the linked records each
    row's predicate read."""

    __slots__ = ("S", "built", "built_head", "circuit", "cut", "entries", "full", "head", "key",
                 "born", "mats", "need", "only", "qdeps", "tcut", "walk")

    def __init__(self, circuit: Circuit, S: tuple[Any, ...], key: Any) -> None:
        self.circuit = circuit
        self.S = S  # a representative: the filter's slots are every materialisation's
        self.key = key
        self.entries: dict[str, Any] = {}
        # the smallest entries in order: all of them (`full`), or at least one more than
        # the windows reach (`need`), every other entry following the last
        self.head: list[Any] = []
        self.full = True
        self.need: int | None = 0  # the end of the furthest window (None: no end)
        self.qdeps: dict[str, set[str]] = {}
        self.mats: list[WMat] = []
        self.built = False
        self.built_head = False
        # rows not evaluated yet (engine.window, "walk"): (field, kind, desc) of the first
        # ORDER BY key while the rows whose key in that field's index lies after ``cut``
        # (in the window's direction) have not all been evaluated; None: every row was
        self.walk: tuple[str, int, bool] | None = None
        self.cut: Any = None
        # the key at ``cut`` walked part way, in entry order: the last entry evaluated there
        # (every entry of that key up to it was; None: the whole key was)
        self.tcut: Any = None
        # the table's writes when the walk began: a walk list made since holds every row
        # the order has not evaluated (engine.rangescan.walk_keys)
        self.born = 0
        # while walked: the rows an index gave as candidates at registration (None: every
        # row); a row outside them qualifies only after a write reached it, which
        # evaluated it (engine.window.requalify)
        self.only: set[str] | None = None


class WMat(Mat):
    """An explicit materialisation: its window over the shared qualifying set (`Order`),
    the visible rows."""

    __slots__ = ("hi", "lo", "order", "vis0", "visible")
    order: Order  # set by Circuit.new_mat

    def __init__(self, circuit: Circuit, S: tuple[Any, ...], key: Any) -> None:
        super().__init__(circuit, S, key)
        self.lo, self.hi = circuit.plan.window(S)
        self.visible: set[str] = set()
        # rows whose visibility changed in this flush -> visible when it began
        self.vis0: dict[str, bool] = {}

    def holds_now(self, rid: str) -> bool:
        """Whether the view shows ``rid`` now."""
        return rid in self.visible

    def holds_start(self, rid: str) -> bool:
        """Whether the view showed ``rid`` when the flush began."""
        was = self.vis0.get(rid)
        return rid in self.visible if was is None else was


class Circuit:
    """One shape: plan, materialisations indexed by their constants, projection groups."""

    def __init__(self, shape: Query, store: Any, deps: Any) -> None:
        self.shape = shape
        # a grouped shape runs its row-level query; its materialisations keep the groups
        self.plan = grouped_plan(shape)
        self.agg: AggSpec | None = self.plan.agg
        self.table = self.plan.table
        self.store = store
        self.deps = deps
        self.rows: dict[str, dict[str, Any]] = store.table(self.table).rows
        self.mats: dict[Any, Mat] = {}
        eqs, member, rfield, lo, hi, exact = analyse(shape.where)
        self.eq_fields: tuple[str, ...] = tuple(f for f, _ in eqs)
        self.eq_slots: tuple[int, ...] = tuple(i for _, i in eqs)
        # `field CONTAINS $slot`: bucketed by the slot value like an equality, looked up
        # once per distinct element of an array row value (any other value: every bucket)
        # a membership conjunct (see `analyse`): `field CONTAINS $slot` buckets a
        # materialisation by the slot value and a row is looked up once per distinct element
        # of its array; `field IN $list` buckets it under each element of its list (a row is
        # looked up by its value); `field CONTAINSANY $list` both; `field CONTAINSALL $list`
        # under its list's first element (the predicate then decides)
        self.mfield = member[0] if member is not None else None
        self.mslot = member[1] if member is not None else None
        self.mkind: str | None = member[2] if member is not None else None
        # materialisations whose membership constant cannot be bucketed (not a list): every
        # lookup returns them, the predicate decides
        self.loose: list[Mat] = []
        self.keyed = bool(eqs) or member is not None
        self.rfield = rfield
        self.lo = lo
        self.hi = hi
        self.explicit = self.plan.ordered or self.plan.qlinks
        # the index answers the predicate exactly: no evaluation per materialisation
        self.exact = exact and not self.plan.qlinks
        self.buckets: dict[Any, Any] = {}
        # explicit shapes: the qualifying sets shared by materialisations differing only in
        # their window (`Order`), by their slot values without LIMIT/START
        self.orders: dict[Any, Order] = {}
        # materialisations holding member counts (engine.delta.counted_delta)
        self.counted = 0
        self.wslots = frozenset(i for i in (self.plan.limit_slot, self.plan.start_slot)
                                if i is not None)
        # Top-level fields the whole view reads (None: all, e.g. SELECT *); an UPDATE that
        # changes none of them cannot change the view.
        self.fields: frozenset[str] | None = read_fields(shape)
        self.pslots = projection_slots(shape)
        self.projs: dict[Any, Proj] = {}
        # flush state of implicit circuits: row -> its row when the flush began (None: absent)
        self.changed: dict[str, Any] = {}
        # ... and whether some materialisation shows it now (from the classification)
        self.held_now: dict[str, bool] = {}
        # ... and the materialisations showing a row re-examined for its projection only
        self.matched: dict[str, list[Mat]] = {}
        # sort entries by row (they depend on the row only): shared by the windows, dropped
        # by the table when the row changes
        # (only windows read entries: an implicit shape registers no cache the table would
        # clear on every write)
        self.entry_cache = store.table(self.table).cache() if self.plan.ordered else {}
        # a walked index key's rows in entry order, kept across writes as every walk list
        # is (engine.rangescan.stale; engine.window._key_order): the windows of the shape
        # stop part way through a key that holds many rows (`ORDER BY qty LIMIT 10` over
        # 50k orders of 5 quantities)
        self.key_orders: dict[Any, tuple[int, list[Any]]] = {}
        # read record -> the dependencies of a projection item that read that record alone
        # (`thread.status`): one object for every row and projection group of the shape
        # reading it (engine.proj._item_deps), not a set and two lists a row and view
        self.rdeps: dict[str, tuple[set[str], list[Any]]] = {}
        # the fields of the linked records a one-hop WHERE / ORDER BY reads (`category` of
        # `thread.category IN $list`): a write to a linked record that changes none of them
        # qualifies no row again (engine.write); None when not all are known
        self.hop_reads: frozenset[str] | None = (
            hop_reads(self.plan.q, self.plan.qhop) if self.plan.qhop else None)

    # -- materialisations -----------------------------------------------------------------
    def new_mat(self, S: tuple[Any, ...], key: Any) -> Mat:
        """Create, index and attach (to its projection group) a materialisation."""
        mat: Mat
        if self.explicit:
            wmat = WMat(self, S, key)
            # pages of one filter (slot values equal but for LIMIT/START) share one order
            fkey = exact_key(tuple(None if i in self.wslots else v for i, v in enumerate(S)))
            order = self.orders.get(fkey)
            if order is None:
                order = self.orders[fkey] = Order(self, S, fkey)
            order.mats.append(wmat)
            wmat.order = order
            mat = wmat
        else:
            mat = Mat(self, S, key)
        pkey = tuple(exact_key(S[i]) for i in self.pslots)
        proj = self.projs.get(pkey)
        if proj is None:
            proj = self.projs[pkey] = Proj(self, S, pkey, self.store, self.deps)
        proj.nmats += 1
        mat.proj = proj
        self.mats[key] = mat
        mat.bkey = self._bkey_of_slots(S)
        if self.rfield is not None:
            if self.lo is not None:
                mat.lo_pos = bound(self.lo[1], S[self.lo[0]])[1]
            if self.hi is not None:
                mat.hi_pos = bound(self.hi[1], S[self.hi[0]])[1]
        if mat.bkey is None:
            self.loose.append(mat)
        elif self.mkind is None or self.mkind == "contains":
            self._bucket(mat.bkey, mat)
        else:
            for k in mat.bkey:
                self._bucket(k, mat)
        return mat

    def _bucket(self, key: Any, mat: Mat) -> None:
        if self.rfield is not None:
            b = self.buckets.get(key)
            if b is None:
                b = self.buckets[key] = RangeIndex()
            b.add(mat, mat.lo_pos, mat.hi_pos)
        else:
            self.buckets.setdefault(key, []).append(mat)

    def _unbucket(self, key: Any, mat: Mat) -> None:
        b = self.buckets.get(key)
        if b is None:
            return
        if self.rfield is not None:
            b.remove(mat, mat.lo_pos, mat.hi_pos)
            if not b.all():
                del self.buckets[key]
        else:
            b.remove(mat)
            if not b:
                del self.buckets[key]

    def drop_mat(self, mat: Mat) -> None:
        """Unindex a materialisation (its projection group keeps its rows; see the engine)."""
        self.mats.pop(mat.key, None)
        if mat.cnt is not None:
            self.counted -= 1
        if isinstance(mat, WMat):
            order = mat.order
            order.mats = [m for m in order.mats if m is not mat]
            if not order.mats:
                self.orders.pop(order.key, None)
        if mat.bkey is None:
            self.loose = [m for m in self.loose if m is not mat]
        elif self.mkind is None or self.mkind == "contains":
            self._unbucket(mat.bkey, mat)
        else:
            for k in mat.bkey:
                self._unbucket(k, mat)
        proj = mat.proj
        proj.nmats -= 1
        if proj.nmats == 0:
            proj.drop_all()
            del self.projs[proj.key]

    def _bkey_of_slots(self, S: tuple[Any, ...]) -> Any:
        """A materialisation's bucket key; with an `IN`/`CONTAINSANY`/`CONTAINSALL` list, the
        list of its bucket keys (None: its constant is not a list, see `loose`)."""
        key = self._join([xkey(S[i]) for i in self.eq_slots])
        kind = self.mkind
        if kind is None:
            return key
        assert self.mslot is not None
        v = S[self.mslot]
        if kind == "contains":
            return (key, xkey(v))
        if type(v) is not list:
            return None
        elems = list(dict.fromkeys([xkey(x) for x in v]))
        if kind == "containsall":
            # every row holding all of them holds the first: the predicate decides the rest
            # (an empty list holds for any array: not bucketed)
            return [(key, elems[0])] if elems else None
        return [(key, x) for x in elems]

    @staticmethod
    def _join(parts: list[Any]) -> Any:
        # one equality field (the common case) keys by the value itself: no tuple to hash
        return parts[0] if len(parts) == 1 else tuple(parts)

    def bkey(self, row: dict[str, Any]) -> Any:
        """The equality bucket a row's values fall into (no membership conjunct)."""
        fields = self.eq_fields
        if len(fields) == 1:
            return xkey(row.get(fields[0], NONE))
        return tuple([xkey(row.get(f, NONE)) for f in fields])

    # -- lookups --------------------------------------------------------------------------
    def candidates(self, row: dict[str, Any]) -> list[Mat]:
        """Materialisations whose indexed conjuncts may hold for ``row``: exactly those whose
        predicate holds when :meth:`lookup` says so."""
        return self.lookup(row)[0]

    def lookup(self, row: dict[str, Any]) -> tuple[list[Mat], bool]:
        """(candidates, whether they are exactly the materialisations whose predicate
        holds)."""
        if self.mfield is not None:
            c, exact = self._member_lookup(row)
            if self.loose:
                return c + self.loose, False
            return c, exact
        b = self.buckets.get(self.bkey(row) if self.eq_fields else ())
        if b is None:
            return [], self.exact
        if self.rfield is None:
            return b, self.exact
        return b.stab(position(row.get(self.rfield, NONE))), self.exact

    def _member_lookup(self, row: dict[str, Any]) -> tuple[list[Mat], bool]:
        v: Any = row.get(self.mfield, NONE)  # type: ignore[arg-type]
        tv = type(v)
        kind = self.mkind
        if kind == "inside":
            # `field IN $list`: the row's value is one key (whatever its kind)
            b = self.buckets.get((self.bkey(row), xkey(v)))
            if b is None:
                return [], self.exact
            if self.rfield is not None:
                return b.stab(position(row.get(self.rfield, NONE))), self.exact
            return b, self.exact
        if tv is not list:
            if tv not in _CONTAINERS:
                # NONE, NULL, numbers, links...: `v CONTAINS x` is false for every x
                return [], self.exact
            # CONTAINS on a string, an object...: not an element test, every bucket
            return list(self.mats.values()), False
        prefix = self.bkey(row)
        out: list[Mat] = []
        buckets = self.buckets
        rfield = self.rfield
        p = position(row.get(rfield, NONE)) if rfield is not None else None
        for k in {xkey(e) for e in v}:
            b = buckets.get((prefix, k))
            if b is not None:
                out += b if rfield is None else b.stab(p)
        if kind != "contains" and len(out) > 1:
            # a materialisation is in the bucket of each of its list's elements
            out = list(dict.fromkeys(out))
        return out, self.exact and kind != "containsall"

    def matching(self, row: dict[str, Any] | None) -> list[Mat]:
        """Implicit circuits: the materialisations showing ``row``."""
        if row is None:
            return []
        c, exact = self.lookup(row)
        if exact:
            return c
        pred = self.plan.pred
        return [m for m in c if pred(row, m.S, NONE, NOLINKS)]

    def classify(self, r0: dict[str, Any] | None,
                 r1: dict[str, Any] | None) -> tuple[list[Mat], list[Mat], list[Mat]]:
        """Implicit circuits: (shown before and after, only before, only after) for a row
        that went from ``r0`` to ``r1`` (None: absent)."""
        if r0 is None or r1 is None:
            return [], self.matching(r0), self.matching(r1)
        if self.mfield is not None or self.loose:
            before = self.matching(r0)
            after = self.matching(r1)
            sa = set(before)
            sb = set(after)
            return ([m for m in before if m in sb], [m for m in before if m not in sb],
                    [m for m in after if m not in sa])
        if self.eq_fields:
            k0 = self.bkey(r0)
            k1 = self.bkey(r1)
            if k0 != k1:
                return [], self.matching(r0), self.matching(r1)
        else:
            k0 = ()
        b: Any = self.buckets.get(k0)
        if b is None:
            return [], [], []
        if self.rfield is None:
            if self.exact:
                return b, [], []
            cands = b
        else:
            f = self.rfield
            p0 = position(r0.get(f, NONE))
            p1 = position(r1.get(f, NONE))
            stays, left, entered = b.classify(p0, p1)
            if self.exact:
                return stays, left, entered
            cands = stays + left + entered
        pred = self.plan.pred
        stays, left, entered = [], [], []
        for m in cands:
            was = pred(r0, m.S, NONE, NOLINKS)
            now = pred(r1, m.S, NONE, NOLINKS)
            if was:
                (stays if now else left).append(m)
            elif now:
                entered.append(m)
        return stays, left, entered

    def held(self, proj: Proj, rid: str, row: dict[str, Any]) -> bool:
        """Whether some materialisation of ``proj`` shows ``row`` now."""
        if self.explicit:
            return rid in proj.refs
        if len(self.projs) == 1:
            known = self.held_now.get(rid)
            if known is not None:
                return known  # classified at this flush
        ms = self.matched.get(rid)
        if ms is None:
            # once per row and flush: every group of the shape asks (a view per group)
            ms = self.matching(row)
            self.matched[rid] = ms  # the flush's row events reuse it
        if len(self.projs) == 1:
            return bool(ms)
        return any(m.proj is proj for m in ms)

    def entry(self, rid: str, row: dict[str, Any]) -> Any:
        """The row's sort entry (shared by the windows of this shape; link-free only)."""
        e = self.entry_cache.get(rid)
        if e is None:
            e = self.entry_cache[rid] = self.plan.entry(row, rid, NOLINKS)
        return e


# membership conjuncts the index buckets: (op, left kind, right kind) -> kind of bucketing
_MEMBER_OPS = {
    ("contains", "field", "slot"): "contains",  # field CONTAINS $v
    ("inside", "slot", "field"): "contains",  # $v IN field
    ("inside", "field", "slot"): "inside",  # field IN $list
    ("contains", "slot", "field"): "inside",  # $list CONTAINS field
    ("containsany", "field", "slot"): "containsany",  # field CONTAINSANY $list
    ("containsall", "field", "slot"): "containsall",  # field CONTAINSALL $list
}


def analyse(where: Any) -> tuple[list[tuple[str, int]], tuple[str, int, str] | None,
                                 str | None, Any, Any, bool]:
    """Index plan of a WHERE clause: equality conjuncts ``field = $slot`` (one per field), a
    membership conjunct (``field CONTAINS $slot`` or ``$slot IN field``; ``field IN $list``;
    ``field CONTAINSANY $list``; ``field CONTAINSALL $list``) as ``(field, slot, kind)``,
    the range field with its first lower and upper bound ``(slot, op)``, and whether these
    cover every conjunct (then the index is the filter, for CONTAINS and CONTAINSANY when
    the row holds an array; CONTAINSALL always leaves the rest to the predicate)."""
    parts = conjuncts(where)
    eqs: list[tuple[str, int]] = []
    ranges: list[tuple[str, str, int]] = []
    member: tuple[str, int, str] | None = None
    used = 0
    for c in parts:
        if c[0] != "cmp":
            continue
        op, a, b = c[1], c[2], c[3]
        kind = _MEMBER_OPS.get((op, a[0], b[0])) if member is None else None
        if kind is not None:
            f, slot = (a, b) if a[0] == "field" else (b, a)
            if len(f[1]) == 1:
                member = (f[1][0], slot[1], kind)
                if kind != "containsall":
                    used += 1
                continue
        pair = None
        if a[0] == "field" and len(a[1]) == 1 and b[0] == "slot":
            pair = (a[1][0], op, b[1])
        elif b[0] == "field" and len(b[1]) == 1 and a[0] == "slot":
            pair = (b[1][0], FLIP.get(op, op), a[1])
        if pair is None:
            continue
        if op == "=":
            if all(f != pair[0] for f, _ in eqs):
                eqs.append((pair[0], pair[2]))
                used += 1
        elif op in RANGE_OPS:
            ranges.append(pair)
    rfield = ranges[0][0] if ranges else None
    lo = hi = None
    for f, op, slot in ranges:
        if f != rfield:
            continue
        if op in (">", ">=") and lo is None:
            lo = (slot, op)
            used += 1
        elif op in ("<", "<=") and hi is None:
            hi = (slot, op)
            used += 1
    return eqs, member, rfield, lo, hi, used == len(parts)


def projection_slots(q: Query) -> tuple[int, ...]:
    """Slots the projection reads (its subqueries' and expressions'): the projection group
    key."""
    acc: set[int] = set()
    for it in q.items:
        if it.sub is not None:
            query_slots(it.sub, acc)
        collect_slots(it.expr, acc, into_queries=True)
    return tuple(sorted(acc))


def read_fields(q: Query) -> frozenset[str] | None:
    """The top-level fields of a row that a view reads (None when it reads the whole row)."""
    acc: set[str] = {"id"}
    for it in q.items:
        if it.kind == "all":
            return None
        if it.kind in ("field", "linkall"):
            acc.add(it.path[0])
        elif it.kind == "expr":
            if not expr_fields(it.expr, acc, False):
                return None
        elif it.kind == "sub":
            sub = it.sub
            assert sub is not None
            if sub.where is not None and not _sub_fields(sub, acc):
                return None
    if q.where is not None and not expr_fields(q.where, acc, False):
        return None
    for path, _desc in q.order:
        acc.add(path[0])
        if not expr_fields(order_key(q, path), acc, False):
            return None
    for path in q.fetch:
        acc.add(path[0])
    for path in q.split:
        acc.add(path[0])
    return frozenset(acc)


def _sub_fields(sub: Query, acc: set[str]) -> bool:
    # $parent paths anywhere in a subquery (its nested subqueries read their own parent)
    return sub.where is None or expr_fields(sub.where, acc, True)


def hop_reads(q: Query, hop: tuple[str, ...]) -> frozenset[str] | None:
    """The fields of the records linked through ``hop`` that ``q``'s WHERE and ORDER BY read
    (the second segment of each ``link.field`` path); None when the walk meets a part it does
    not know (a subquery) or a segment that is no plain field name."""
    paths: list[tuple[str, ...]] = []
    if q.where is not None and not _field_paths(q.where, paths):
        return None
    for path, _desc in q.order:
        if not _field_paths(order_key(q, path), paths):
            return None
    out: set[str] = set()
    for p in paths:
        if len(p) > 2:
            return None
        if len(p) == 2 and p[0] in hop:
            f = p[1]
            if type(f) is not str or not f.isidentifier():
                return None
            out.add(f)
    return frozenset(out)
