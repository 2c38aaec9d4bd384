"""Explicit materialisations: ORDER BY + LIMIT/START windows and link-following predicates.

- **Top-k.** A ``SortedList`` of entries ``(keys..., id sort key, id)`` over the whole
  qualifying set (entries depend on the row only, so windows of one shape share them); a
  change re-slices the window only when its position is inside ``[0, start + limit)``, so a
  removal refills from below. Ties break by record id ascending in both directions, as
  SurrealDB's scan order does.
- **Record-link predicates.** When WHERE or ORDER BY follows a link (``author.name = 'x'``),
  the records read while qualifying each row are registered in ``Deps.quals``; a change to
  ``user:1`` re-qualifies exactly the rows that read it.

Visibility changes go through :func:`show`/:func:`hide`, which remember the visibility at the
start of the flush (``WMat.vis0``) and count the views showing each row in the projection
group (``Proj.refs``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from engine.circuit import WMat
from engine.plan import Cx
from engine.proj import NOLINKS
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


def build(mat: WMat, cands: Iterable[str], rows: dict[str, Any], store: Any, deps: Any) -> None:
    """Fill a new explicit materialisation from the stored rows (registration)."""
    circuit = mat.circuit
    plan = circuit.plan
    S = mat.S
    pred = plan.pred
    entries = mat.entries
    if plan.qlinks:
        for rid in cands:
            row = rows[rid]
            cx = Cx(store)
            if pred(row, S, NONE, cx):
                entries[rid] = plan.entry(row, rid, cx) if plan.ordered else 1
            set_qdeps(mat, rid, cx.reads, deps)
    else:
        entry = circuit.entry
        for rid in cands:
            row = rows[rid]
            if pred(row, S, NONE, NOLINKS):
                entries[rid] = entry(rid, row)
    if plan.ordered:
        assert mat.ordered is not None
        mat.ordered.update(entries.values())
        mat.visible = {e[-1] for e in mat.ordered.islice(mat.lo, mat.hi)}
    else:
        mat.visible = set(entries)
    ref = mat.proj.ref
    for rid in mat.visible:
        ref(rid, 1)


def requalify(mat: WMat, rid: str, row: dict[str, Any] | None, store: Any, deps: Any,
              pending: set[WMat], known: bool = False) -> None:
    """Re-evaluate one top-level row of an explicit materialisation (filter, order, window);
    ``known``: the caller's exact index lookup says the (non-None) row qualifies."""
    circuit = mat.circuit
    plan = circuit.plan
    old_e = mat.entries.get(rid)
    new_e = None
    if row is not None:
        if plan.qlinks:
            cx = Cx(store)
            if plan.pred(row, mat.S, NONE, cx):
                new_e = plan.entry(row, rid, cx) if plan.ordered else 1
            set_qdeps(mat, rid, cx.reads, deps)
        elif known or plan.pred(row, mat.S, NONE, NOLINKS):
            new_e = circuit.entry(rid, row)
    elif plan.qlinks:
        set_qdeps(mat, rid, set(), deps)
    if old_e is None and new_e is None:
        return
    pending.add(mat)
    if not plan.ordered:
        if new_e is None:
            del mat.entries[rid]
            hide(mat, rid)
        elif old_e is None:
            mat.entries[rid] = new_e
            show(mat, rid)
        return
    if old_e == new_e:
        return
    ordered = mat.ordered
    assert ordered is not None
    hi = mat.hi
    if mat.lo == 0 and hi is not None:
        # the window is the first `hi` entries: a removal above the cut pulls the entry at
        # the cut in, an insertion above it pushes the last one out (no re-slice)
        # `visible` is the first `hi` entries' rows, so membership tells the position;
        # after an insertion the entry at `hi` is the one just outside (entries are unique)
        if old_e is not None:
            ordered.remove(old_e)
            del mat.entries[rid]
            if rid in mat.visible:
                hide(mat, rid)
                if len(ordered) >= hi:
                    show(mat, ordered[hi - 1][-1])
        if new_e is not None:
            ordered.add(new_e)
            mat.entries[rid] = new_e
            if len(ordered) <= hi:
                show(mat, rid)
            else:
                out = ordered[hi]
                if new_e < out:
                    show(mat, rid)
                    hide(mat, out[-1])
        return
    first = None
    if old_e is not None:
        first = ordered.bisect_left(old_e)
        ordered.remove(old_e)
        del mat.entries[rid]
    if new_e is not None:
        ordered.add(new_e)
        mat.entries[rid] = new_e
        p = ordered.bisect_left(new_e)
        first = p if first is None or p < first else first
    if mat.hi is not None and first is not None and first >= mat.hi:
        return
    rewindow(mat)


def rewindow(mat: WMat) -> None:
    """Recompute the visible slice of the ordered qualifying set."""
    ordered = mat.ordered
    assert ordered is not None
    new_list = [e[-1] for e in ordered.islice(mat.lo, mat.hi)]
    new_set = set(new_list)
    old_set = mat.visible
    for r in old_set - new_set:
        hide(mat, r)
    for r in new_set - old_set:
        show(mat, r)


def set_qdeps(mat: WMat, rid: str, reads: set[str], deps: Any) -> None:
    """Remember which linked records ``rid``'s predicate/sort read for ``mat``."""
    old = mat.qdeps.get(rid)
    if old == reads:
        return
    deps.set_qual(mat, rid, old, reads)
    if reads:
        mat.qdeps[rid] = reads
    else:
        mat.qdeps.pop(rid, None)


def teardown(mat: WMat, deps: Any) -> None:
    """Release the rows and dependencies of an explicit materialisation."""
    for rid in list(mat.qdeps):
        set_qdeps(mat, rid, set(), deps)
    ref = mat.proj.ref
    for rid in mat.visible:
        ref(rid, -1)
    mat.visible = set()
