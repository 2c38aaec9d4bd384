"""Explicit materialisations: ORDER BY + LIMIT/START windows and link-following predicates.

- **Top-k.** Entries ``(keys..., id sort key, id)`` of the whole qualifying set by row
  (entries depend on the row only, so windows of one shape share them), and the smallest of
  them in order (:attr:`~engine.circuit.Order.head`, a plain list): at least one more than
  the furthest window reaches, at most twice that plus 32, every other entry following its
  last. A write whose entry falls after the head, before and after, costs a dict
  operation; one inside it an insertion or removal in a short list; the head is filled
  again from the other entries (one pass, ``heapq.nsmallest``) when removals leave it no
  longer than the windows, so at most once per ``max(windows' end, 32)`` removals. A
  change re-slices a window only when its position is inside ``[0, start + limit)``, so a
  removal refills from below. Ties break by record id ascending in both directions, as
  SurrealDB's scan order does.
- **Walks.** A new order over most of a large table (at least four times what its head
  keeps), ordered first by a field of the row, whose filter reads the row alone, links
  one hop away, or semi-join sets tested with fields of the row, is not evaluated row by
  row: its rows are walked in the order of that field's equality index keys (:func:`engine.rangescan.walk_keys`: numbers, strings or
  datetimes with a zone, as the table's first row holds), a whole key at a time, until the
  head is full; rows under keys of another kind are evaluated at once. ``ORDER BY id``
  (the latest rows) walks the keys of the record ids, one row each
  (:func:`engine.rangescan.walk_ids`: a table's ids order by their keys, numbers as numbers,
  strings as strings). Every row after the
  walk's ``cut`` that no write reached is left unevaluated: its entry, were it to qualify,
  is after the head. Removals that empty the head walk on; a write evaluates its row as
  before. ``order.entries`` then holds the qualifying rows evaluated so far, not all.
- **Pages.** Materialisations whose slot values differ only in LIMIT/START (pages of one
  list) share one :class:`~engine.circuit.Order`: the qualifying set is kept and re-sorted
  once per change, then each page checks its own window: a page ending before the first
  position the change touched, or (for a move) starting after the last, is left alone; a
  page starting at 0 moves at most one row at its end; any other page re-slices itself.
- **Record-link predicates.** When WHERE or ORDER BY follows a link (``author.name = 'x'``),
  the records read while qualifying each row are registered in ``Deps.quals``; a change to
  ``user:1`` re-qualifies exactly the rows that read it.

Visibility changes go through :func:`show`/:func:`hide`, which remember the visibility at the
start of the flush (``WMat.vis0``) and count the views showing each row in the projection
group (``Proj.refs``).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from typing import Any

from surrealdb import RecordID

from engine.circuit import Order, WMat
from engine.cx import NOLINKS, Cx
from engine.rangescan import stale, walk_ids, walk_keys, walk_kind
from engine.values import NONE


def show(mat: WMat, rid: str) -> None:
    """``rid`` entered the window."""
    if rid not in mat.vis0:
        mat.vis0[rid] = False
    mat.visible.add(rid)
    mat.proj.ref(rid, 1)


def hide(mat: WMat, rid: str) -> None:
    """``rid`` left the window."""
    if rid not in mat.vis0:
        mat.vis0[rid] = True
    mat.visible.discard(rid)
    mat.proj.ref(rid, -1)


def build(mat: WMat, cands: Iterable[str], rows: dict[str, Any], store: Any, deps: Any,
          wide: bool = False, every: bool = True) -> None:
    """Fill a new explicit materialisation from the stored rows (registration): its order's
    qualifying set unless another page of the same filter built it, then its window.
    ``wide``: the candidates are most of the table (the order may be walked instead);
    ``every``: they are every row (no index narrowed them)."""
    order = mat.order
    circuit = mat.circuit
    plan = circuit.plan
    if not order.built:
        order.built = True
        S = order.S
        pred = plan.pred
        entries = order.entries
        walk = _walk_spec(order, wide)
        if walk is not None:
            # the rows the walk would not reach in key order now, the others as far as the
            # windows reach (`fill`): entries only for the rows walked
            order.walk = walk
            order.born = store.table(plan.table).writes
            if plan.qkeyed:
                watch_sets(order, store)  # before any row is evaluated: no read per row
            if not every:
                order.only = cands if isinstance(cands, set) else set(cands)
            _walk_start(order, store, deps)
        elif plan.qkeyed:
            # reads only semi-join sets keyed by fields of the row and links one hop away:
            # the order is told by the sets and the hop fields' index (no read registered
            # per row unless a hop field holds an array), entries are the shape's shared ones
            watch_sets(order, store)
            hop = plan.qhop
            entry = circuit.entry
            ordered = plan.ordered
            cx = Cx(store)
            for rid in cands:
                row = rows[rid]
                if pred(row, S, NONE, cx):
                    entries[rid] = entry(rid, row) if ordered else 1
                if hop is not None and cx.reads and not covered(row, hop):
                    set_qdeps(order, rid, cx.reads, deps)
                    cx.reads = set()
        elif plan.qlinks:
            hop = plan.qhop
            cx = Cx(store)
            for rid in cands:
                row = rows[rid]
                if pred(row, S, NONE, cx):
                    entries[rid] = plan.entry(row, rid, cx) if plan.ordered else 1
                if cx.reads:
                    if hop is None or not covered(row, hop):
                        set_qdeps(order, rid, cx.reads, deps)
                    cx.reads = set()
        else:
            entry = circuit.entry
            for rid in passing(plan, cands, rows, S, store.table(plan.table)):
                entries[rid] = entry(rid, rows[rid])
    if plan.ordered:
        need = _need(order)
        if not order.built_head or (not order.full and (
                need is None or (order.need is not None and need > order.need))):
            order.need = need
            fill(order)
        order.need = need
        mat.visible = {e[-1] for e in order.head[mat.lo:mat.hi]}
    else:
        mat.visible = set(order.entries)
    ref = mat.proj.ref
    for rid in mat.visible:
        ref(rid, 1)


def requalify(order: Order, rid: str, row: dict[str, Any] | None, store: Any, deps: Any,
              pending: set[WMat], known: bool = False) -> None:
    """Re-evaluate one top-level row of the explicit materialisations sharing ``order``
    (filter, order, each one's window); ``known``: the caller's exact index lookup says the
    (non-None) row qualifies."""
    entries = order.entries
    old_e = entries.get(rid)
    new_e = _entry_now(order, rid, row, store, deps, known)
    if old_e is None and new_e is None:
        return
    if not order.circuit.plan.ordered:
        _requalify_unordered(order, rid, old_e, new_e, pending)
        return
    if old_e == new_e:
        return
    q, p = _move_in_head(order, rid, old_e, new_e)
    if q < 0 and p < 0:
        return  # nothing moved inside the head: no window changed
    _tell_windows(order, rid, q, p, pending)


def _entry_now(order: Order, rid: str, row: dict[str, Any] | None, store: Any, deps: Any,
               known: bool) -> Any:
    """The row's entry now (None: it does not qualify); the links its predicate read are
    registered (``order``'s query dependencies)."""
    circuit = order.circuit
    plan = circuit.plan
    if row is None:
        if plan.qlinks and (not plan.qkeyed or rid in order.qdeps):
            set_qdeps(order, rid, set(), deps)
        return None
    if plan.qkeyed:
        cx = Cx(store)
        new_e = None
        if plan.pred(row, order.S, NONE, cx):
            new_e = circuit.entry(rid, row) if plan.ordered else 1
        hop = plan.qhop
        if hop is not None and not covered(row, hop):
            set_qdeps(order, rid, cx.reads, deps)
        elif rid in order.qdeps:
            set_qdeps(order, rid, set(), deps)
        return new_e
    if plan.qlinks:
        cx = Cx(store)
        new_e = None
        if plan.pred(row, order.S, NONE, cx):
            new_e = plan.entry(row, rid, cx) if plan.ordered else 1
        hop = plan.qhop
        set_qdeps(order, rid, cx.reads if hop is None or not covered(row, hop) else set(),
                  deps)
        return new_e
    if known or plan.pred(row, order.S, NONE, NOLINKS):
        return circuit.entry(rid, row)
    return None


def _requalify_unordered(order: Order, rid: str, old_e: Any, new_e: Any,
                         pending: set[WMat]) -> None:
    """Without ORDER BY or a window: the row comes or goes in every materialisation."""
    if new_e is None:
        del order.entries[rid]
        for m in order.mats:
            pending.add(m)
            hide(m, rid)
    elif old_e is None:
        order.entries[rid] = new_e
        for m in order.mats:
            pending.add(m)
            show(m, rid)


def _move_in_head(order: Order, rid: str, old_e: Any, new_e: Any) -> tuple[int, int]:
    """Move the row's entry from ``old_e`` to ``new_e`` (None: absent) in the order; where
    it was and is in the head (-1: absent or after the head, which is after every
    window)."""
    entries = order.entries
    head = order.head
    full = order.full
    # BEYOND: after the head (after every window)
    q = p = -1
    if old_e is not None:
        del entries[rid]
        if full or old_e <= head[-1]:
            q = bisect_left(head, old_e)
            del head[q]
        else:
            q = BEYOND
    if new_e is not None:
        entries[rid] = new_e
        if full or (head and new_e < head[-1]):
            p = bisect_left(head, new_e)
            head.insert(p, new_e)
            need = order.need
            if need is not None and len(head) > 2 * _cap(need):
                # the rest stays in `entries`, after the head
                del head[_cap(need):]
                order.full = False
        else:
            p = BEYOND
    if not order.full and (order.need is None or len(head) <= order.need):
        fill(order)  # removals left the head no longer than the windows: fill it again
    # an entry after the head is after every window: as absent as a missing one there
    return (-1 if q == BEYOND else q), (-1 if p == BEYOND else p)


def _tell_windows(order: Order, rid: str, q: int, p: int, pending: set[WMat]) -> None:
    """The windows a move in the head from position ``q`` to ``p`` (-1: absent) changes:
    pending, and their rows shown or hidden."""
    head = order.head
    first = q if p < 0 or (0 <= q < p) else p
    last = max(q, p)
    moved = q >= 0 and p >= 0
    for m in order.mats:
        hi = m.hi
        if hi is not None and first >= hi:
            continue  # the change is after the window
        lo = m.lo
        if moved and lo > last:
            continue  # rows before the window moved among themselves
        pending.add(m)
        if lo == 0 and hi is not None:
            # the window is the first `hi` entries: the row itself comes or goes, and at
            # most one other row at the window's end makes room or fills in (the head
            # holds more than `hi` entries unless it holds them all)
            was = rid in m.visible
            now = 0 <= p < hi
            if was and not now:
                hide(m, rid)
                if len(head) >= hi:
                    show(m, head[hi - 1][-1])
            elif now and not was:
                show(m, rid)
                if len(head) > hi:
                    hide(m, head[hi][-1])
            continue
        rewindow(m)


#: a position after the head (and after every window)
BEYOND = 1 << 62


def passing(plan: Any, cands: Iterable[str], rows: dict[str, Any], S: tuple[Any, ...],
            ts: Any) -> list[str]:
    """The candidates whose row passes a WHERE that reads the row alone, in their order.
    When it reads one field (``Plan.one_field``), it is evaluated once per string held
    there: a string is the only value its index key stands for, so its rows answer alike
    (other values are evaluated row by row: ``1`` and ``1.0`` share a key, not a type).
    With the field's index kept and few keys, the rows are not read at all: the passing
    keys' buckets make a set the candidates are looked up in (reading 50k scattered rows
    was most of 66490 S11's registrations); a first view over many rows whose field held
    few strings keeps that index for the next ones."""
    if plan.q.where is None:
        return list(cands)  # every row passes (a GROUP ALL over a whole table)
    pred = plan.pred
    field = plan.one_field
    if field is None:
        return [rid for rid in cands if pred(rows[rid], S, NONE, NOLINKS)]
    idx = ts.indexes.get(field)
    if idx is not None and len(idx) <= _FEW_KEYS:
        keep: set[str] = set()
        for k, rids in idx.items():
            if not rids:
                continue
            if type(k) is str:
                if pred(rows[next(iter(rids))], S, NONE, NOLINKS):
                    keep |= rids
            else:
                for rid in rids:
                    if pred(rows[rid], S, NONE, NOLINKS):
                        keep.add(rid)
        return [rid for rid in cands if rid in keep]
    memo: dict[str, bool] = {}
    out: list[str] = []
    n = 0
    for rid in cands:
        n += 1
        row = rows[rid]
        v = row.get(field)
        if type(v) is str:
            ok = memo.get(v)
            if ok is None:
                ok = memo[v] = bool(pred(row, S, NONE, NOLINKS))
        else:
            ok = bool(pred(row, S, NONE, NOLINKS))
        if ok:
            out.append(rid)
    if idx is None and n >= _MANY_ROWS and len(memo) <= _FEW_KEYS // 2:
        ts.index(field)
    return out


_FEW_KEYS = 64  # index keys of a one-field WHERE worth one evaluation each
_MANY_ROWS = 4096  # candidates of a first view worth keeping its field's index for


def _cap(need: int) -> int:
    """How many entries a head keeps for windows ending at ``need``."""
    return need + max(need, 32)


def _need(order: Order) -> int | None:
    """Where the furthest window of ``order`` ends (None: one has no end)."""
    need = 0
    for m in order.mats:
        if m.hi is None:
            return None
        if m.hi > need:
            need = m.hi
    return need


def fill(order: Order) -> None:
    """Build the head from every entry: all of them in order when they are few or a window
    has no end, else the smallest ``_cap(need)`` (walking the order first as far as they
    reach, while it has rows not evaluated)."""
    entries = order.entries
    need = order.need
    if order.walk is not None:
        _walk(order, None if need is None else _cap(need))
    if need is not None and (order.walk is not None or len(entries) > _cap(need)):
        order.head = heapq.nsmallest(_cap(need), entries.values())
        order.full = False
    else:
        order.head = sorted(entries.values())
        order.full = True
    order.built_head = True


def _walk_spec(order: Order, wide: bool) -> tuple[str, int, bool] | None:
    """How a new order can be walked (None: every candidate is evaluated): by its first
    ORDER BY key, a field of the row, when its windows end, the table is large against
    them, the filter reads the row alone (or one-hop links, or semi-join sets keyed by
    fields of the row) and most rows are candidates (a narrow index lookup is cheaper),
    and the table's first row holds a value of a walk kind there."""
    plan = order.circuit.plan
    field = plan.first_source
    if not wide or field is None:
        return None
    if plan.qkeyed:
        # semi-join sets tested with fields of the row (`user IN (SELECT VALUE ...)`): a
        # key entering or leaving a set requalifies the rows holding it from the index,
        # evaluated yet or not (engine.write, "_requalify_keyed"), as a write does its row
        if plan.qhop is not None:
            return None
    elif plan.semis:
        return None  # a set tested otherwise registers its reads row by row
    elif plan.qlinks and (plan.qhop is None or not plan.row_entries):
        # a WHERE through links longer than one hop registers each row's reads while it
        # is evaluated: no row may be left for later (one hop: a write to the linked
        # record requalifies the rows holding its link, from the index, engine.write)
        return None
    need = _need(order)
    rows = order.circuit.rows
    if need is None or len(rows) < 4 * _cap(need):
        return None
    for row in rows.values():
        v = row.get(field, NONE)
        if field == "id":
            # ORDER BY id ("the latest"): walked by the keys of the record ids
            v = v.id if type(v) is RecordID else NONE
        kind = walk_kind(v)
        if kind < 0:
            return None
        return field, kind, bool(plan.q.order[0][1])
    return None


def _walk(order: Order, cap: int | None) -> None:
    """Evaluate the rows not evaluated yet in the order of the walked field's index keys,
    until ``cap`` qualifying rows (None: all) are known under the keys walked so far.

    The head is then right: its last entry is at most the ``cap``-th of those, and every
    row not evaluated is under a later key of the same kind, so its entry (were it to
    qualify) comes after. A row the walk skips was evaluated before (at registration under
    a key of another kind, or walked, or written since: `requalify` evaluates every write)
    and qualifies exactly when it has an entry. The lists walked may be older than the
    last writes (engine.rangescan.walk_keys): never older than the order, so what they
    miss was written since and evaluated, and what they hold that is gone is skipped.

    A key holding many rows (`ORDER BY qty LIMIT 10`, five quantities over 50k orders) is
    walked in entry order when entries read the row alone (:func:`_key_order`), and the
    walk may stop inside it (``order.tcut``): the rows of that key after the last one
    evaluated have later entries, the rows of later keys too."""
    walk = order.walk
    assert walk is not None
    field, kind, desc = walk
    circuit = order.circuit
    deps = circuit.deps
    ts = circuit.store.table(circuit.table)
    idx, keys, _ = _walk_source(ts, field, kind, order.born)
    rows = circuit.rows
    entries = order.entries
    cx = Cx(circuit.store) if circuit.plan.qlinks else None
    cut = order.cut
    tcut = order.tcut
    only = order.only
    in_order = cap is not None and circuit.plan.row_entries and field != "id"
    n = 0
    for v, k in (reversed(keys) if desc else keys):
        beyond = cut is None or (v < cut if desc else v > cut)
        partial = not beyond and tcut is not None and v == cut  # walked part way
        rids = idx.get(k)
        if not rids:
            continue  # emptied since the list was made
        if in_order and len(rids) > _IN_ORDER and (beyond or partial):
            assert cap is not None
            n = _walk_in_order(order, k, v, rids, tcut if partial else None, n, cap, cx)
            if n >= cap:
                return
            continue
        # (a key walked part way is evaluated again whole: its rows evaluated before that
        # have no entry did not qualify, and do not now)
        beyond = beyond or partial
        for rid in rids:
            if rid in entries:
                n += 1
            elif beyond and (only is None or rid in only):
                row = rows.get(rid)
                if row is not None and _qualify(order, rid, row, cx, deps):
                    n += 1
        if beyond:
            order.cut = v
            order.tcut = None
        if cap is not None and n >= cap:
            return
    order.walk = None  # every row has been evaluated
    order.cut = None
    order.tcut = None
    order.only = None


def _walk_in_order(order: Order, k: Any, v: Any, rids: set[str], tcut: Any, n: int,
                   cap: int, cx: Cx | None) -> int:
    """:func:`_walk` through one key's rows in entry order, from after ``tcut`` (None: the
    first), until ``cap`` qualifying rows are known (``n`` so far, returned). An entry of
    the list that is no longer its row's (the row was written since the list was made, and
    evaluated then) is neither counted nor evaluated here."""
    circuit = order.circuit
    rows = circuit.rows
    entries = order.entries
    entry = circuit.entry
    only = order.only
    deps = circuit.deps
    ents = _key_order(circuit, k, rids, order.born)
    start = bisect_right(ents, tcut) if tcut is not None else 0
    for i in range(start):
        e = ents[i]
        if entries.get(e[-1]) == e:
            n += 1
    last = len(ents) - 1
    for i in range(start, len(ents)):
        e = ents[i]
        rid = e[-1]
        got = entries.get(rid)
        if got is not None:
            if got == e:
                n += 1
        elif only is None or rid in only:
            row = rows.get(rid)
            if row is not None and entry(rid, row) == e and _qualify(order, rid, row, cx, deps):
                n += 1
        if n >= cap and i < last:
            order.cut = v
            order.tcut = e
            return n
    order.cut = v
    order.tcut = None
    return n


_IN_ORDER = 64  # rows of an index key worth walking in entry order


def _key_order(circuit: Any, k: Any, rids: set[str], born: int) -> list[Any]:
    """The sort entries of the rows under index key ``k``, ascending, for an order made
    when the table had seen ``born`` writes (shared by the shape's windows, kept across
    writes as engine.rangescan.walk_keys keeps its lists; an entry may be stale there).
    Rows under one key share their first ORDER BY value (equal values share a key), so
    their entries order by the keys after it and the record id, as the windows order
    them."""
    ts = circuit.store.table(circuit.table)
    kept = circuit.key_orders.get(k)
    if kept is not None and not stale(ts, kept[0], len(kept[1]), born):
        return kept[1]
    if kept is None and len(circuit.key_orders) >= _KEY_ORDERS:
        circuit.key_orders.clear()
    entry = circuit.entry
    rows = circuit.rows
    ents = sorted([entry(rid, rows[rid]) for rid in rids])
    circuit.key_orders[k] = (ts.writes, ents)
    return ents


_KEY_ORDERS = 256  # keys whose orders a shape keeps at most


class _OneRow:
    """The "index" of an id walk: each key (a row's id text) stands for its row alone."""

    def get(self, rid: str) -> tuple[str]:
        return (rid,)


_ONE_ROW = _OneRow()


def _walk_source(ts: Any, field: str, kind: int, born: int
                 ) -> tuple[Any, list[Any], list[Any]]:
    """A walk's index (key -> its rows), its keys of kind ``kind`` in order with their walk
    values, and its other keys: the field's equality index, or for ``id`` one key per row
    (lists made at or after ``born``, the order's birth: engine.rangescan.walk_keys)."""
    if field == "id":
        keys, others = walk_ids(ts, kind, born)
        return _ONE_ROW, keys, others
    keys, others = walk_keys(ts, field, kind, born)
    return ts.index(field), keys, others


def _walk_start(order: Order, store: Any, deps: Any) -> None:
    """Evaluate the rows of a new walked order that its walk would not reach in key order:
    those under index keys of another kind, and (a WHERE through one-hop links) those whose
    link fields hold arrays, whose reads are registered row by row."""
    walk = order.walk
    assert walk is not None
    circuit = order.circuit
    plan = circuit.plan
    ts = store.table(circuit.table)
    rows = circuit.rows
    cx = Cx(store) if plan.qlinks else None
    idx, _, others = _walk_source(ts, walk[0], walk[1], order.born)
    for k in others:
        for rid in idx.get(k) or ():
            row = rows.get(rid)
            if row is not None:
                _qualify(order, rid, row, cx, deps)
    hop = plan.qhop
    if cx is not None and hop is not None:
        for f in hop:
            for k, rids in ts.index(f).items():
                if type(k) is tuple and k[0] == "\0a":  # ikey of an array
                    for rid in rids:
                        _qualify(order, rid, rows[rid], cx, deps)


def _qualify(order: Order, rid: str, row: dict[str, Any], cx: Cx | None, deps: Any) -> bool:
    """Evaluate one row for a walked order (``cx`` None: the WHERE reads the row alone):
    its entry when it qualifies (True); the links a one-hop predicate read are registered
    when the row's link fields hold arrays (others are found from the index)."""
    circuit = order.circuit
    plan = circuit.plan
    if cx is None:
        if plan.pred(row, order.S, NONE, NOLINKS):
            order.entries[rid] = circuit.entry(rid, row)
            return True
        return False
    ok = False
    if plan.pred(row, order.S, NONE, cx):
        order.entries[rid] = plan.entry(row, rid, cx)
        ok = True
    if cx.reads:
        hop = plan.qhop
        if hop is None or not covered(row, hop):
            set_qdeps(order, rid, cx.reads, deps)
        cx.reads = set()
    return ok


def rewindow(mat: WMat) -> None:
    """Recompute the visible slice of the ordered qualifying set."""
    new_list = [e[-1] for e in mat.order.head[mat.lo:mat.hi]]
    new_set = set(new_list)
    old_set = mat.visible
    for r in old_set - new_set:
        hide(mat, r)
    for r in new_set - old_set:
        show(mat, r)


def covered(row: dict[str, Any], hop: tuple[str, ...]) -> bool:
    """Whether the records a one-hop predicate read of ``row`` are the links its ``hop``
    fields hold (found by the table's index on them, engine.core) rather than links inside
    arrays there (registered for the row, ``Deps.quals``)."""
    for f in hop:
        t = type(row.get(f))
        if t is list or t is tuple:
            return False
    return True


def set_qdeps(order: Order, rid: str, reads: set[str], deps: Any) -> None:
    """Remember which linked records ``rid``'s predicate/sort read for ``order``."""
    old = order.qdeps.get(rid)
    if old == reads:
        return
    deps.set_qual(order, rid, old, reads)
    if reads:
        order.qdeps[rid] = reads
    else:
        order.qdeps.pop(rid, None)


def watch_sets(order: Order, store: Any) -> None:
    """Tell the semi-join sets an order of a ``qkeyed`` plan tests which field of its rows
    each is tested with, and keep the table's equality index on those fields (a key that
    enters or leaves a set finds the rows holding it there: engine.write)."""
    plan = order.circuit.plan
    ts = store.table(plan.table)
    for spec in plan.semis:
        field = spec.outer[1][0]
        ts.index(field)
        spec.sets[spec.key(order.S)].keyed[order] = field


def unwatch_sets(order: Order) -> None:
    """The order is gone: its sets (those still open) stop telling it."""
    for spec in order.circuit.plan.semis:
        s = spec.sets.get(spec.key(order.S))
        if s is not None:
            s.keyed.pop(order, None)


def teardown(mat: WMat, deps: Any) -> None:
    """Release the rows of an explicit materialisation, and its order's dependencies when it
    is the order's last materialisation."""
    order = mat.order
    if len(order.mats) <= 1:
        for rid in list(order.qdeps):
            set_qdeps(order, rid, set(), deps)
        if order.circuit.plan.qkeyed:
            unwatch_sets(order)
    ref = mat.proj.ref
    for rid in mat.visible:
        ref(rid, -1)
    mat.visible = set()
