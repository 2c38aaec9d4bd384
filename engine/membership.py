"""What a materialisation shows and holds: its shown rows, its members, its member counts,
and the filling of a new one from the stored rows.

Read by the facade (:mod:`engine.core`: registration, ``members``, ``result``) and by the
flush (:mod:`engine.flush`: a materialisation counts its members the first time a delta
needs the counts).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain
from typing import Any

from engine import window
from engine.aggregate import AggState, _values
from engine.circuit import Mat, WMat
from engine.delta import has_nested
from engine.deps import Deps
from engine.lazy import bulk, bulk_paths
from engine.linkscan import link_candidates
from engine.plan import Cx
from engine.proj import Proj
from engine.rangescan import index_bounds, own_conditions, range_filter, range_rows
from engine.store import Store, ikey
from engine.values import NONE


def eq_candidates(store: Store, mat: Mat) -> list[str] | None:
    """The rows the equality index gives for a materialisation whose WHERE holds an
    equality (None: there is none, every row is a candidate)."""
    plan = mat.circuit.plan
    if plan.eq is None:
        return None
    return list(plan.candidates(store, mat.S, NONE, Cx(store)))


def member_candidates(store: Store, mat: Mat) -> set[str] | None:
    """A superset of the rows passing a materialisation's membership conjunct (``field IN
    $list``, ``field CONTAINSANY $list``, ``field CONTAINS $v``, ``field CONTAINSALL
    $list``: ``circuit.analyse``) from the table's indexes (None: there is none, or its
    constant cannot narrow the rows). Without it a new view of such a shape evaluates its
    WHERE on every row of the table however few rows it shows (issue 33: ~30 ms for a
    top-10 of `tags CONTAINSANY $tags` over 20k products)."""
    circuit = mat.circuit
    kind = circuit.mkind
    if kind is None or circuit.mfield is None or circuit.mslot is None or circuit.plan.qlinks:
        # a WHERE through links registers what each row read while it is evaluated: no
        # row may be skipped
        return None
    v = mat.S[circuit.mslot]
    tv = type(v)
    t = store.table(circuit.table)
    out: set[str] = set()
    if kind == "inside":
        # `field IN $list`: the row's value equals an element of the list (a string constant
        # means substring: not narrowed)
        if tv is not list and tv is not tuple:
            return None
        idx = t.index(circuit.mfield)
        for x in v:
            s = idx.get(ikey(x))
            if s:
                out.update(s)
        return out
    keys: Any
    if kind == "contains":
        keys = (v,)
    elif tv is not list and tv is not tuple:
        return None
    elif kind == "containsall":
        if not v:
            return None  # holds for every array
        keys = v[:1]  # a row holding all of them holds the first
    else:
        keys = v
    ex = t.element_index(circuit.mfield)
    out.update(ex.other)
    for x in keys:
        s = ex.by.get(ikey(x))
        if s:
            out.update(s)
    return out


def semi_candidates(store: Store, mat: Mat) -> set[str] | None:
    """The rows holding a key of the (open) set of a top-level ``field IN (SELECT VALUE
    ...)`` conjunct, from the table's equality index, when they are under an eighth of the
    table (None: no such conjunct, or more: the order may then be walked). A key maps to
    the index key of its values (``InnerSet.index_key``), as a key entering the set finds
    its rows (engine.write, "_requalify_keyed"). 89290 S08 over 50k orders: a set of few
    users evaluated every order."""
    plan = mat.circuit.plan
    if not plan.semi_in:
        return None
    t = store.table(plan.table)
    limit = len(t.rows) // 8
    best: set[str] | None = None
    for field, spec in plan.semi_in:
        inner = spec.sets.get(spec.key(mat.S))
        if inner is None:
            continue
        idx = t.index(field)
        out: set[str] = set()
        for k in inner.counts:
            s = idx.get(inner.index_key(k))
            if s:
                out.update(s)
                if len(out) > limit:
                    break
        if len(out) <= limit and (best is None or len(out) < len(best)):
            best = out
    return best


def range_narrow(store: Store, mat: Mat, cands: Iterable[str] | None
                 ) -> Iterable[str] | None:
    """``cands`` (None: every row) kept to a superset of the rows passing the
    materialisation's range conjuncts on fields of the row (``votes >= $lo AND votes <
    $hi``, ``total * 2 > $x``: engine.rangescan; ``cands`` as they are: there is none).
    Every row: from a field's equality index in key order, unless that keeps most rows;
    then (or given candidates) each one's values tested. A row left out fails a conjunct
    on its own field: no write but its own (which requalifies it) can make it pass, so it
    needs no reads registered, even when the WHERE clause follows links."""
    circuit = mat.circuit
    conds = own_conditions(circuit.plan.q.where, mat.S)
    if not conds:
        return cands
    rest = list(conds.items())
    if cands is None:
        ts = store.table(circuit.table)
        for n, (field, fc) in enumerate(rest):
            got = range_rows(ts, field, index_bounds(fc))
            if got is not None:
                # many of the rows: read in the table's order, as a scan reads them (see
                # `build`: a set's order scatters the reads)
                cands = got if len(got) * 8 < len(circuit.rows) else [
                    r for r in circuit.rows if r in got]
                # (a product's bounds were widened by one: the predicate tests the few
                # rows at the edges, cheaper than testing every candidate here)
                del rest[n]
                break
        else:
            return None  # most rows pass each: the predicate decides, row by row
    for field, fc in rest:
        if isinstance(cands, set) and len(cands) > _MANY:
            # many candidates from another index (a link's): intersect with the range's
            # rows when it keeps under half the table (a set operation instead of a test
            # per row: 8290 S08, 34k comments of the linked threads, ~20 ms a view)
            got = range_rows(store.table(circuit.table), field, index_bounds(fc))
            if got is not None:
                cands = cands & got
                continue
        cands = range_filter(circuit.rows, cands, field, fc)
    return cands


_MANY = 2048  # candidates worth a set intersection over a test of each


def _narrow(cands: Iterable[str] | None, by: set[str] | None) -> Iterable[str] | None:
    """``cands`` (None: every row) kept to those in ``by`` (None: no narrowing)."""
    if by is None:
        return cands
    if cands is None:
        return by
    return [r for r in cands if r in by]


def shown(store: Store, mat: Mat) -> Iterable[str]:
    """The top-level rows a materialisation shows."""
    if isinstance(mat, WMat):
        return mat.visible
    rows = mat.circuit.rows
    cands: Iterable[str] | None = eq_candidates(store, mat)
    if cands is None:
        # every shown row is projected or lazy: the group's rows are the candidates
        proj = mat.proj
        cands = chain(proj.outs, proj.lazy) if proj.lazy else proj.outs.keys()
    holds = mat.holds
    return [r for r in cands if holds(rows.get(r))]


def members(store: Store, mat: Mat, rows_shown: Iterable[str] | None = None) -> set[str]:
    """The record ids in a materialisation's result tree (its rows and what they nest)."""
    proj = mat.proj
    lazy = proj.lazy
    if lazy and not proj.outs and proj.spec is None:
        # every shown row lazy, reading links or grouped (engine.lazy): each is its own
        # only member
        return set(shown(store, mat) if rows_shown is None else rows_shown)
    trees = proj.trees
    tree = proj.tree
    out: set[str] = set()
    flat: list[str] = []
    for rid in shown(store, mat) if rows_shown is None else rows_shown:
        kids = lazy.get(rid) if lazy else None
        if kids is not None:
            flat.append(rid)  # a lazy row: itself and the children it shows
            out.update(kids)
        elif trees.get(rid, 0) is None and proj.outs[rid] is mat.circuit.rows.get(rid):
            flat.append(rid)  # a flat `SELECT *` row: its only member is itself
        else:
            out.update(tree(rid))
    out.update(flat)
    return out


def count_members(store: Store, m: Mat, rows_shown: Iterable[str] | None = None
                  ) -> dict[str, int]:
    """Count, per nested member, the rows ``m`` shows now whose tree holds it; kept on
    the materialisation (and moved by every later flush) from now on."""
    proj = m.proj
    lazy = proj.lazy
    tree = proj.tree
    cnt: dict[str, int] = {}
    get = cnt.get
    for rid in shown(store, m) if rows_shown is None else rows_shown:
        kids = lazy.get(rid) if lazy else None
        if kids is not None:
            for k in kids:
                cnt[k] = get(k, 0) + 1
            continue
        for k in tree(rid):
            if k != rid:
                cnt[k] = get(k, 0) + 1
    m.cnt = cnt
    m.circuit.counted += 1
    return cnt


def build(store: Store, deps: Deps, lazy_by_table: dict[str, set[Proj]], mat: Mat
          ) -> list[str] | None:
    """Fill a new materialisation from the stored rows; project what it shows (returns
    the rows shown by an implicit materialisation). A group left with lazy rows is noted in
    ``lazy_by_table`` under the tables its rows read."""
    circuit = mat.circuit
    plan = circuit.plan
    rows = circuit.rows
    cands: Iterable[str] | None = eq_candidates(store, mat)
    # (a page of a filter another page built reads no candidates: window.build)
    member = (None if isinstance(mat, WMat) and mat.order.built
              else member_candidates(store, mat))
    if member is not None:
        if cands is not None:
            cands = [r for r in cands if r in member]
        elif len(member) * 8 < len(rows):
            cands = member
        else:
            # many of the rows: read in the table's order, as a scan reads them (a set's
            # order scatters the reads of a large first view: 37 -> 55 ms over 9k rows)
            cands = [r for r in rows if r in member]
    proj = mat.proj
    if isinstance(mat, WMat):
        if plan.qhop is not None and not mat.order.built:
            # WHERE follows a link (`product.category = $cat`): the rows pointing at the
            # linked records that pass, not a fetch per row (engine.linkscan). Only when
            # every path is one hop: a write to a linked record then finds the rows that
            # point at it from the index (engine.core, "_hops"); with longer paths each
            # row's reads are registered while it is evaluated, so none may be skipped.
            linked = link_candidates(store, circuit.table, plan.q.where, mat.S)
            cands = _narrow(cands, linked)
        if not mat.order.built:
            cands = _narrow(range_narrow(store, mat, cands), semi_candidates(store, mat))
        # most of the table: the order may be walked from its sort field's index instead,
        # evaluating rows only as far as the windows reach (engine.window, "walk")
        wide = cands is None or (isinstance(cands, (list, set)) and len(cands) * 8 >= len(rows))
        every = cands is None
        if cands is None:
            cands = rows.keys()
        window.build(mat, cands, rows, store, deps, wide, every)
        refs = proj.refs
        proj.fill([rid for rid in proj.dirty if rid in refs], rows)
        proj.dirty = {}
        if circuit.agg is not None:
            fill_groups(store, mat, mat.visible)
        return None
    cands = range_narrow(store, mat, cands)
    if cands is None:
        cands = rows.keys()
    outs = proj.outs
    project = proj.project
    rows_shown = window.passing(plan, cands, rows, mat.S, store.table(circuit.table))
    if plan.star_only:
        # SELECT * of flat rows: the row is its own output and only member
        trees = proj.trees
        for rid in rows_shown:
            if rid not in outs:
                row = rows[rid]
                if has_nested(row):
                    project(rid, row, None)
                else:
                    outs[rid] = row
                    trees[rid] = None
        return rows_shown
    if proj.spec is not None:
        bulk(proj, rows_shown)
        if proj.lazy:
            lazy_by_table.setdefault(circuit.table, set()).add(proj)
            lazy_by_table.setdefault(proj.spec.sub.table, set()).add(proj)
        return rows_shown
    if proj.pspec is not None:
        for t in bulk_paths(proj, rows_shown):
            lazy_by_table.setdefault(t, set()).add(proj)
        if circuit.agg is not None:
            fill_groups(store, mat, rows_shown)
        return rows_shown
    proj.fill(rows_shown, rows)
    if circuit.agg is not None:
        fill_groups(store, mat, rows_shown)
    return rows_shown


def fill_groups(store: Store, mat: Mat, rows_shown: Iterable[str]) -> None:
    """The groups of a new materialisation of a grouped shape, from its rows'
    contributions (engine.aggregate). A lazy row's contribution is its fields as stored:
    the row-level query's items are those fields, in ``AggSpec.names`` order
    (engine.lazy, grouped shapes)."""
    spec = mat.circuit.agg
    assert spec is not None
    outs = mat.proj.outs
    rows = mat.circuit.rows
    pspec = mat.proj.pspec
    fields = (pspec.own or []) if pspec is not None and spec.names else []

    def contrib(rid: str) -> tuple[Any, ...]:
        out = outs.get(rid)
        if out is not None:
            return _values(out, spec)
        row = rows[rid]
        return tuple([row.get(f, NONE) for f in fields])

    state = mat.agg = AggState(spec, lambda: [(r, contrib(r)) for r in shown(store, mat)])
    state.fill_values([(rid, contrib(rid)) for rid in rows_shown])
