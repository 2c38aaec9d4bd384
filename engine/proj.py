"""Projection groups: a shape's projected rows, computed and stored once for every
materialisation that shows them.

The output of a row (its projection, lateral subqueries and link reads included) depends on
the row and on the values of the slots the projection reads (a subquery's ``LIMIT`` or
``$auth.id``), never on the slots of the top-level WHERE. Materialisations of one shape with
the same projection slot values therefore share one :class:`Proj`: each visible row is
projected once, its dependencies (``engine.deps``) are registered once, and a change re-runs
the projection once whatever the number of materialisations showing the row.

Per projected row: ``outs`` (the output), ``trees`` (the members of the output: None for a
row whose only member is itself), ``istate`` (per-item values and dependencies, so a change
re-runs only the items that read it), ``pdeps`` (its registered dependencies). ``own`` maps a
member to the other rows whose tree holds it (a string for one row, a set for several), which
tells whether a member is clean (see :mod:`engine.delta`).

Rows are projected while some materialisation of the group shows them. During a flush,
``dirty`` lists the rows to re-examine and ``recs`` what happened to each.
"""

from __future__ import annotations

from typing import Any

from surrealdb import RecordID

from engine.delta import NO_TREE, Rec, has_nested
from engine.plan import Cx, Plan, tree_members
from engine.store import Store, rid_text

_ABSENT = object()


class NoLinks:
    """Context for evaluation that never follows links (nothing to record)."""

    __slots__ = ()

    def fetch(self, rid: RecordID) -> None:  # pragma: no cover - never called
        raise AssertionError("a link-free predicate followed a link")


NOLINKS = NoLinks()


class Proj:
    """The projected rows of one shape for one value of its projection slots."""

    __slots__ = ("S", "__weakref__", "circuit", "deps", "dirty", "istate", "key", "nmats",
                 "outs", "own", "own0", "pdeps", "plan", "recs", "refs", "store", "trees")

    def __init__(self, circuit: Any, S: tuple[Any, ...], key: Any, store: Store,
                 deps: Any) -> None:
        self.circuit = circuit
        self.plan: Plan = circuit.plan
        self.S = S  # a representative slot tuple: only the projection slots are read
        self.key = key
        self.store = store
        self.deps = deps
        self.nmats = 0
        self.outs: dict[str, Any] = {}
        self.trees: dict[str, dict[str, Any] | None] = {}
        self.istate: dict[str, tuple[list[Any], list[Any]]] = {}
        self.pdeps: dict[str, Any] = {}
        self.own: dict[str, Any] = {}
        # flush state
        self.own0: dict[str, Any] | None = None  # member -> owners before the flush
        self.dirty: dict[str, set[Any] | None] = {}  # row -> tokens (None: whole row)
        self.recs: dict[str, Rec] = {}
        # materialisations with windows or link predicates count the views showing a row
        self.refs: dict[str, int] = {}

    # -- reading ------------------------------------------------------------------------
    def tree(self, rid: str) -> dict[str, Any]:
        """Members of a projected row's output (empty when the row is not projected)."""
        t = self.trees.get(rid, _ABSENT)
        if t is None:
            out = self.outs[rid]
            i = out.get("id")
            return {rid: out} if type(i) is RecordID else NO_TREE
        if t is _ABSENT:
            return NO_TREE
        return t  # type: ignore[return-value]

    def rec(self, rid: str) -> Rec:
        """What the current flush did to ``rid`` (unchanged rows: the same tree twice)."""
        r = self.recs.get(rid)
        if r is None:
            t = self.tree(rid)
            r = Rec(rid, t, t, self._clean(rid, t, t))
            self.recs[rid] = r
        return r

    def owners(self, m: str) -> tuple[list[str], list[str]]:
        """Rows whose tree held ``m`` before the flush and hold it now."""
        now = self._owner_list(self.own.get(m))
        if self.own0 is not None and m in self.own0:
            before = self._owner_list(self.own0[m])
        else:
            before = list(now)
        r = self.recs.get(m)
        if r is not None:
            if m in r.t0:
                before.append(m)
            if m in r.t1:
                now.append(m)
        elif m in self.tree(m):
            before.append(m)
            now.append(m)
        return before, now

    @staticmethod
    def _owner_list(o: Any) -> list[str]:
        if o is None:
            return []
        if type(o) is str:
            return [o]
        return list(o)

    def _clean(self, rid: str, t0: dict[str, Any], t1: dict[str, Any]) -> bool:
        own = self.own
        own0 = self.own0
        for t in (t0, t1) if t0 is not t1 else (t0,):
            for m in t:
                if m == rid:
                    if m in own or (own0 is not None and own0.get(m) is not None):
                        return False
                    continue
                o = own.get(m)
                if o is not None and o != rid:
                    return False
                if own0 is not None and m in own0:
                    o = own0[m]
                    if o is not None and o != rid:
                        return False
                if m in self.outs or m in self.recs:
                    return False  # a row of this group nested in another one
        return True

    # -- projecting -----------------------------------------------------------------------
    def ensure(self, rid: str, row: dict[str, Any]) -> None:
        """Project ``rid`` unless it already is (registration: no flush in progress)."""
        if rid not in self.outs:
            self.project(rid, row, None)

    def project(self, rid: str, row: dict[str, Any], tokens: set[Any] | None) -> None:
        """(Re)project ``rid``; with ``tokens`` only the items that read one of them rerun."""
        plan = self.plan
        deps: Any = None
        if plan.star_only:
            out = row
            tree: dict[str, Any] | None = None
            if has_nested(row):
                tree = {}
                tree_members(row, tree)
        elif plan.simple:
            out = plan.project(self.store, self.S, row, NOLINKS)  # type: ignore[arg-type]
            tree = None
            if has_nested(out):
                tree = {}
                tree_members(out, tree)
            else:
                i = out.get("id")
                if type(i) is RecordID and rid_text(i) != rid:
                    tree = {rid_text(i): out}
        elif plan.fetch:
            cx = Cx(self.store)
            out = plan.project(self.store, self.S, row, cx)
            tree = {}
            tree_members(out, tree)
            deps = (cx.reads, cx.subs)
        else:
            out, deps = self._project_items(rid, row, tokens)
            tree = {}
            tree_members(out, tree)
        old_tree = self.trees.get(rid, _ABSENT)
        if old_tree is not _ABSENT or tree is not None:
            self._set_owners(rid, old_tree, tree)
        self.outs[rid] = out
        self.trees[rid] = tree
        old = self.pdeps.pop(rid, None)
        if old is not None or deps is not None:
            if deps is not None and not deps[0] and not deps[1]:
                deps = None
            self.deps.set_proj(self, rid, old, deps)
            if deps is not None:
                self.pdeps[rid] = deps

    def drop(self, rid: str) -> None:
        """Forget a row no materialisation of the group shows any more."""
        if rid not in self.outs:
            return
        del self.outs[rid]
        old_tree = self.trees.pop(rid)
        if old_tree is not None:
            self._set_owners(rid, old_tree, None)
        self.istate.pop(rid, None)
        old = self.pdeps.pop(rid, None)
        if old is not None:
            self.deps.set_proj(self, rid, old, None)

    def drop_all(self) -> None:
        """Forget every row (the group's last materialisation went away)."""
        for rid in list(self.outs):
            self.drop(rid)

    def _set_owners(self, rid: str, old: Any, new: dict[str, Any] | None) -> None:
        old_m = [m for m in old if m != rid] if old is not None and old is not _ABSENT else ()
        new_m = [m for m in new if m != rid] if new is not None else ()
        if not old_m and not new_m:
            return
        own = self.own
        own0 = self.own0
        new_s = set(new_m)
        for m in old_m:
            if m in new_s:
                continue
            if own0 is not None and m not in own0:
                own0[m] = _copy(own.get(m))
            o = own[m]
            if type(o) is str:
                del own[m]
            else:
                o.discard(rid)
                if len(o) == 1:
                    own[m] = next(iter(o))
        old_s = set(old_m)
        for m in new_m:
            if m in old_s:
                continue
            if own0 is not None and m not in own0:
                own0[m] = _copy(own.get(m))
            o = own.get(m)
            if o is None:
                own[m] = rid
            elif type(o) is str:
                own[m] = {o, rid}
            else:
                o.add(rid)

    def _project_items(self, rid: str, row: dict[str, Any],
                       tokens: set[Any] | None) -> tuple[dict[str, Any], Any]:
        plan = self.plan
        store = self.store
        S = self.S
        state = self.istate.get(rid) if tokens is not None else None
        if state is None:
            vals: list[Any] = []
            ideps: list[Any] = []
            for item in plan.items:
                if item[0] == "all":
                    vals.append(None)
                    ideps.append(None)
                    continue
                icx = Cx(store)
                vals.append(plan.item_value(item, store, S, row, icx))
                ideps.append((icx.reads, icx.subs))
        else:
            assert tokens is not None
            vals = list(state[0])
            ideps = list(state[1])
            for i, item in enumerate(plan.items):
                d = ideps[i]
                if d is None:
                    continue
                if tokens.isdisjoint(d[0]) and not any(k in tokens for k in d[1]):
                    continue
                icx = Cx(store)
                vals[i] = plan.item_value(item, store, S, row, icx)
                ideps[i] = (icx.reads, icx.subs)
        self.istate[rid] = (vals, ideps)
        reads: set[str] = set()
        subs: list[Any] = []
        for d in ideps:
            if d is not None:
                reads |= d[0]
                subs.extend(d[1])
        return plan.assemble(row, vals), (reads, subs)

    # -- flush ----------------------------------------------------------------------------
    def mark(self, rid: str, token: Any = None) -> None:
        """Re-examine ``rid`` at the next flush (``token``: only what read it changed)."""
        dirty = self.dirty
        if token is None:
            dirty[rid] = None
        elif rid in dirty:
            toks = dirty[rid]
            if toks is not None:
                toks.add(token)
        else:
            dirty[rid] = {token}

    def ref(self, rid: str, d: int) -> None:
        """A windowed materialisation started (+1) or stopped (-1) showing ``rid``."""
        refs = self.refs
        n = refs.get(rid, 0) + d
        if n:
            refs[rid] = n
            if n == 1 and rid not in self.outs and rid not in self.dirty:
                self.dirty[rid] = None
        else:
            del refs[rid]
            self.dirty[rid] = None

    def process(self, held: Any) -> None:
        """Re-project, project or drop the dirty rows; ``held(proj, rid, row)`` says whether
        some materialisation of the group shows the row now. Fills ``recs``."""
        self.own0 = {}
        rows = self.store.table(self.plan.table).rows
        recs = self.recs
        dirty = self.dirty
        self.dirty = {}
        pending: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        for rid, toks in dirty.items():
            row = rows.get(rid)
            had = rid in self.outs
            keep = row is not None and held(self, rid, row)
            if not keep and not had:
                continue
            t0 = self.tree(rid) if had else NO_TREE
            if keep:
                assert row is not None
                self.project(rid, row, toks if had else None)
                t1 = self.tree(rid)
            else:
                self.drop(rid)
                t1 = NO_TREE
            pending.append((rid, t0, t1))
        # cleanness needs every owner change of the flush: decide it once all rows moved
        for rid, t0, t1 in pending:
            recs[rid] = Rec(rid, t0, t1, True)
        for rid, t0, t1 in pending:
            recs[rid].clean = self._clean(rid, t0, t1)

    def finish(self) -> None:
        """Forget the flush state."""
        self.recs = {}
        self.own0 = None


def _copy(o: Any) -> Any:
    if o is None or type(o) is str:
        return o
    return set(o)
