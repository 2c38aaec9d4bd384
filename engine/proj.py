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
tells whether a member is clean (see :mod:`engine.delta`). Rows of a uniform projection
(every item reads the row alone or no row: fields beside uncorrelated subqueries) share one
``istate`` tuple and their dependencies; their item values are read back from their output.

Rows are projected while some materialisation of the group shows them. During a flush,
``dirty`` lists the rows to re-examine and ``recs`` what happened to each. A row whose own
fields did not change but whose subquery values moved is patched (``_patch``): its output,
tree, owners and diff follow the members the window edits moved (``engine.join.EDITS``),
not the windows' sizes.
"""

from __future__ import annotations

from typing import Any

from surrealdb import RecordID

from engine.cx import NOLINKS, Cx
from engine.delta import (
    EMPTY,
    FEW_OWNERS,
    NO_TREE,
    Rec,
    has_nested,
    rows_members,
    same,
    tree_members,
)
from engine.join import EDITS, Win
from engine.lazy import PathSpec, Spec, path_spec_of, spec_of
from engine.plan import Plan
from engine.store import Store, ikey, rid_text
from engine.values import NONE

_ABSENT = object()




class Proj:
    """The projected rows of one shape for one value of its projection slots."""

    __slots__ = ("S", "__weakref__", "circuit", "deps", "dirty", "evals", "iconst", "ikeys", "istate",
                 "slast", "tlast",
                 "key", "lazy", "levels", "multi", "multi0", "nmats", "outs", "overlap", "own", "own0",
                 "patched", "pcache", "pdeps", "plan", "prev", "psteps", "ptree", "recs", "refs", "sdeps",
                 "pspec", "shared", "spec", "store", "trees", "uniform", "vdiff", "vkeys", "vmoved", "walked")

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
        # per-item values, dependencies and members (see _project_items)
        # (a uniform row's values are None: read back from its output, see _values)
        self.istate: dict[str, tuple[Any, list[Any], list[Any]]] = {}
        # every item reads the row alone or no row at all (an uncorrelated subquery): the
        # rows' item dependencies and members are then the same objects, and rows showing
        # them share one pair of lists (``iconst``) instead of a pair each (see _state)
        self.uniform = all(a or b for a, b in zip(self.plan.row_only, self.plan.row_free))
        self.iconst: tuple[Any, list[Any], list[Any]] | None = None
        # the last member list and subquery-token list a row kept (see _state, _merged):
        # rows beside the same uncorrelated subqueries keep these very objects, not copies
        self.tlast: list[Any] = []
        self.slast: list[Any] = []
        self.pdeps: dict[str, Any] = {}
        self.own: dict[str, Any] = {}
        # members whose presence depends on more than one row (see _multi); usually empty
        self.multi: set[str] = set()
        self.multi0: set[str] = set()  # members that left `multi` during the flush
        # flush state
        self.own0: dict[str, Any] | None = None  # member -> owners before the flush
        self.dirty: dict[str, set[Any] | None] = {}  # row -> tokens of what it read changed
        self.prev: dict[str, Any] = {}  # row -> itself before the flush, when it changed
        self.recs: dict[str, Rec] = {}
        # materialisations with windows or link predicates count the views showing a row
        self.refs: dict[str, int] = {}
        # rows shown but not projected yet -> the children they show (engine.lazy)
        self.lazy: dict[str, tuple[str, ...]] = {}
        self.spec: Spec | None = None if circuit.explicit else spec_of(self.plan)
        # the lazy form of a projection of link paths (engine.lazy, "rows reading links"),
        # and the tables its paths' records sit in at each hop once rows are lazy
        self.pspec: PathSpec | None = (None if circuit.explicit or self.spec is not None
                                       else path_spec_of(self.plan))
        self.levels: list[list[set[str]]] = []
        # during `process`: item index -> the value of a row-free item (Plan.row_free) as
        # computed once for the flush, shared by every row re-projected (see _Shared)
        self.shared: dict[int, _Shared] | None = None
        # item index -> the dependencies a row-free item had at the last flush: kept as one
        # object while equal, so rows compare them by identity
        self.sdeps: dict[int, Any] = {}
        # during `process`: row -> (output before, after) when an item's value changed at
        # its own output key (so the outputs differ: engine.delta.Rec.hint); only for plans
        # whose outputs keep every item at its key (no OMIT)
        self.vmoved: dict[str, tuple[Any, Any]] = {}
        # items evaluated again by flushes (a work count the tests read: a write changing an
        # uncorrelated subquery costs one evaluation per group, not one per parent row)
        self.evals = 0
        # Patching (see _patch): item index -> its output key, when an output is the row's
        # fields and one key per item (a changed item is then one changed key); else None
        keys = self.plan.item_keys
        self.ikeys: list[str | None] | None = None
        if keys is not None and not self.plan.omit and not self.plan.value and \
                not self.plan.self_member:
            ik: list[str | None] = [None] * len(self.plan.items)
            for k, i in keys.items():
                ik[i] = k
            self.ikeys = ik
        # item index -> its output key (None for `*`), when the output holds every item's
        # value at its own key: a uniform row then keeps no list of its values (see _state)
        # (any group with one key per item: a row's values are then never a list of its
        # own, which was a third of what a row held beside its output)
        self.vkeys: list[str | None] | None = None
        if self.ikeys is not None:
            self.vkeys = [None if it.kind == "all" else it.out[0] for it in self.plan.q.items]
        # rows whose tree holds a member from two places (their item trees overlap, or
        # show the row itself): never patched, as a member leaving one place may stay
        self.overlap: set[str] = set()
        # during `process`: row -> its diff, known from the items' member changes (Rec)
        self.vdiff: dict[str, tuple[frozenset[str], frozenset[str], frozenset[str]]] = {}
        # during `process`: (old value, new value) of an item -> its member changes, shared
        # by the rows showing the same window before and after
        self.pcache: dict[tuple[int, int], Any] = {}
        # during `process`: the item changes of a patched row -> what they do to a row
        self.psteps: dict[tuple[Any, ...], _Step] = {}
        self.ptree: Any = None  # the tree whose owners _patch moved already (_install)
        # work counts the tests read: members walked building and diffing trees, and rows
        # patched instead of projected again
        self.walked = 0
        self.patched = 0

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

    def owners(self, m: str, limit: int) -> tuple[list[str], list[str]] | None:
        """Rows whose tree held ``m`` before the flush and hold it now; None when more than
        ``limit`` rows hold it (a view counts its members instead, engine.delta)."""
        o = self.own.get(m)
        if o is not None and type(o) is not str and len(o) > limit:
            return None
        now = self._owner_list(o)
        if self.own0 is not None and m in self.own0:
            o0 = self.own0[m]
            if o0 is MANY_OWNERS or (o0 is not None and type(o0) is not str
                                     and len(o0) > limit):
                return None
            before = self._owner_list(o0)
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
        """Whether ``rid`` alone holds every member of its trees, before and after."""
        own = self.own
        own0 = self.own0
        if rid in own or (own0 and own0.get(rid) is not None):
            return False  # the row is also nested in another row
        multi = self.multi
        multi0 = self.multi0
        both = (t0, t1) if t0 is not t1 else (t0,)
        if multi or multi0:
            for t in both:
                if not multi.isdisjoint(t) or not multi0.isdisjoint(t):
                    return False
        if own0:
            for t in both:
                # the smaller side walked: own0 holds the members moved in this flush
                for m in (t if len(t) <= len(own0) else [x for x in own0 if x in t]):
                    if m != rid and m in own0:
                        o = own0[m]
                        if o is not None and o != rid:
                            return False  # held by another row when the flush began
                        o = own.get(m)
                        if o is not None and o != rid:
                            return False  # moved to another row
        return True

    def _multi(self, m: str) -> None:
        """Keep ``multi``: members held by several rows, or nested in a row while being a
        row of the group themselves."""
        o = self.own.get(m)
        if o is not None and (type(o) is not str or m in self.outs):
            self.multi.add(m)
        elif m in self.multi:
            self.multi.discard(m)
            if self.own0 is not None:
                self.multi0.add(m)

    # -- projecting -----------------------------------------------------------------------
    def ensure(self, rid: str, row: dict[str, Any]) -> None:
        """Project ``rid`` unless it already is (registration: no flush in progress)."""
        if rid not in self.outs:
            self.project(rid, row, None)

    def fill(self, rids: Any, rows: dict[str, dict[str, Any]]) -> None:
        """Project the rows of ``rids`` not projected yet (registration: no flush in
        progress). Row-free items are evaluated once for all of them (see _items_fresh)."""
        outs = self.outs
        own = self.shared is None
        if own:
            self.shared = {}
        try:
            if self.uniform and self.vkeys is not None and not self.plan.star_only and \
                    not self.plan.simple:
                self._fill_uniform(rids, rows)
            else:
                for rid in rids:
                    if rid not in outs:
                        self.project(rid, rows[rid], None)
        finally:
            if own:
                self.shared = None

    def _fill_uniform(self, rids: Any, rows: dict[str, dict[str, Any]]) -> None:
        """``fill`` for a uniform group (each item reads the row alone or no row): the
        first row is projected as any other; the rest reuse its row-free values, state and
        dependencies and compute only their own fields, output and members."""
        plan = self.plan
        outs = self.outs
        keys = plan.item_keys
        assert keys is not None
        getters = [(i, item[1]) for i, item in enumerate(plan.items)
                   if plan.row_only[i] and item[0] != "all"]
        tmpl: list[Any] | None = None
        state: Any = None
        deps: Any = None
        for rid in rids:
            if rid in outs:
                continue
            row = rows[rid]
            if tmpl is None:
                self.project(rid, row, None)
                state = self.istate.get(rid)
                if state is None or state[0] is not None or not self.shared:
                    continue  # not the shared state: the next row tries again
                vals = self._values(rid, state)[0]
                tmpl = [None if plan.row_only[i] else v for i, v in enumerate(vals)]
                deps = self.pdeps.get(rid)
                continue
            vals = list(tmpl)
            for i, get in getters:
                vals[i] = get(row, NOLINKS)
            out = plan.assemble(row, vals)
            self.istate[rid] = state
            self._install(rid, out, self._tree(rid, out, keys, state[2]), deps)

    def project(self, rid: str, row: dict[str, Any], tokens: set[Any] | None,
                prev: Any = _ABSENT) -> None:
        """(Re)project ``rid``. With ``tokens`` (a set) only the items that read one of them
        rerun, and with ``prev`` (the row before it changed) also those reading a changed
        field; ``tokens`` None reruns everything."""
        plan = self.plan
        deps: Any = None
        out: Any  # a dict, or any value for a VALUE row (the compiled engine checks it)
        if plan.star_only:
            out = row
            tree: dict[str, Any] | None = None
            if has_nested(row):
                tree = {}
                tree_members(row, tree)
        elif plan.simple:
            out = plan.project(self.store, self.S, row, NOLINKS)
            tree = None
            if has_nested(out):
                tree = {}
                tree_members(out, tree)
            else:
                i = out.get("id")
                if type(i) is RecordID and rid_text(i) != rid:
                    tree = {rid_text(i): out}
        elif plan.fetch or plan.split:
            cx = Cx(self.store)
            out = plan.project(self.store, self.S, row, cx)
            tree = {}
            tree_members(out, tree)
            if plan.split and rid in tree:
                tree[rid] = out  # what the row shows is all its split rows
            for m, v in cx.extra.items():  # the rows of VALUE subqueries
                if m not in tree:
                    tree[m] = v
            deps = (cx.reads, cx.subs)
        else:
            got = self._project_items(rid, row, tokens, prev)
            if got is None:
                return  # a partial re-projection changed no item value: nothing to do
            out, deps, tree = got
        self._install(rid, out, tree, deps)

    def _install(self, rid: str, out: Any, tree: dict[str, Any] | None,
                 deps: Any) -> None:
        """Store a row's new projection: output, tree, owners of its members, dependencies."""
        old_tree = self.trees.get(rid, _ABSENT)
        if tree is self.ptree:
            self.ptree = None  # owners moved by _patch
        elif old_tree is not _ABSENT or tree is not None:
            self._set_owners(rid, old_tree, tree)
        fresh = rid not in self.outs
        self.outs[rid] = out
        self.trees[rid] = tree
        if fresh and rid in self.own:
            self.multi.add(rid)
        old = self.pdeps.get(rid)
        if old is not None or deps is not None:
            if deps is not None and not deps[0] and not deps[1]:
                deps = None
            if old != deps:
                self.deps.set_proj(self, rid, old, deps)
                if deps is None:
                    del self.pdeps[rid]
                else:
                    self.pdeps[rid] = deps

    def force(self, rid: str) -> None:
        """Project a lazy row (engine.lazy): a write is about to change what it reads.

        Nothing the row reads changed since it became lazy, so its children are still the
        ones kept for it: the projection is assembled from them, as the subquery would
        (same values, dependencies and members), without running it."""
        children: Any = self.lazy.pop(rid, _ABSENT)
        if children is _ABSENT:
            return
        row = self.store.table(self.plan.table).rows[rid]
        spec = self.spec
        if spec is None:
            self.project(rid, row, None)
            return
        sub = spec.sub
        t = self.store.table(sub.table)
        crows = t.rows
        ecache, fcache = sub.row_caches(t)  # what the subquery's runs share
        flat = sub.flat
        assert ecache is not None and fcache is not None and flat is not None
        # in the subquery's order (the columns leave rows with equal sort values in any
        # order): its own sort entries, cached per child as a run caches them
        entry = sub.entry
        ents = []
        for m in children:
            e = ecache.get(m)
            if e is None:
                e = ecache[m] = entry(crows[m], m, NOLINKS)
            ents.append(e)
        if len(ents) > 1:
            ents.sort()
            children = [e[-1] for e in ents]
        value = []
        for m in children:
            o = fcache.get(m)
            if o is None:
                o = fcache[m] = flat(crows[m])
            value.append(o)
        plan = self.plan
        j = sub.join(self.store, self.S)
        tok: Any = (sub.table, spec.link, ikey(row["id"])) if j is None else j.adopt(
            row, ents, value)
        ideps: list[Any] = [None, (set(), [tok])]
        vals: list[Any] = [None, value]
        itrees: list[Any] = [None, _members_of(value, self.store.rmembers)]
        self.istate[rid] = self._state(vals, ideps, itrees)
        out = plan.assemble(row, vals)
        assert plan.item_keys is not None
        self._install(rid, out, self._tree(rid, out, plan.item_keys, itrees),
                      self._merged(ideps))

    def end_lazy(self) -> None:
        """Project every lazy row; the group never makes rows lazy again."""
        self.spec = None
        self.pspec = None
        rows = self.store.table(self.plan.table).rows
        lazy = self.lazy
        self.lazy = {}
        for rid in lazy:
            self.project(rid, rows[rid], None)

    def drop(self, rid: str) -> None:
        """Forget a row no materialisation of the group shows any more."""
        if rid not in self.outs:
            self.lazy.pop(rid, None)
            return
        del self.outs[rid]
        old_tree = self.trees.pop(rid)
        if old_tree is not None:
            self._set_owners(rid, old_tree, None)
        if rid in self.multi:
            self._multi(rid)
        self.overlap.discard(rid)
        self.istate.pop(rid, None)
        old = self.pdeps.pop(rid, None)
        if old is not None:
            self.deps.set_proj(self, rid, old, None)

    def drop_all(self) -> None:
        """Forget every row (the group's last materialisation went away)."""
        self.lazy = {}
        for rid in list(self.outs):
            self.drop(rid)

    def _set_owners(self, rid: str, old: Any, new: dict[str, Any] | None) -> None:
        if old is not None and new is not None and old is not _ABSENT and \
                old.keys() == new.keys():
            return  # same members: nothing moves
        # the members that left and entered, as differences of the key sets (in C: a row
        # whose window moved by one row walks that row, not the window)
        had = old is not None and old is not _ABSENT
        if had and new is not None:
            old_m: Any = old.keys() - new.keys()
            new_m: Any = new.keys() - old.keys()
        elif had:
            old_m = set(old)
            new_m = ()
        else:
            old_m = ()
            new_m = set(new) if new is not None else ()
        if old_m:
            old_m.discard(rid)
        if new_m:
            new_m.discard(rid)
        if not old_m and not new_m:
            return
        self._move_owners(rid, old_m, new_m)

    def _move_owners(self, rid: str, old_m: Any, new_m: Any) -> None:
        """``rid``'s tree no longer holds ``old_m`` and now holds ``new_m`` (not ``rid``)."""
        own = self.own
        own0 = self.own0
        for m in old_m:
            if own0 is not None and m not in own0:
                own0[m] = _copy(own.get(m))
            o = own[m]
            if type(o) is str:
                del own[m]
            else:
                o.discard(rid)
                if len(o) == 1:
                    own[m] = next(iter(o))
            if m in self.multi:
                self._multi(m)
        for m in new_m:
            if own0 is not None and m not in own0:
                own0[m] = _copy(own.get(m))
            o = own.get(m)
            if o is None:
                own[m] = rid
                if m in self.outs:
                    self.multi.add(m)
            elif type(o) is str:
                own[m] = {o, rid}
                self.multi.add(m)
            else:
                o.add(rid)

    def _project_items(self, rid: str, row: dict[str, Any], tokens: set[Any] | None,
                       prev: Any) -> tuple[Any, Any, dict[str, Any]] | None:
        """(output, dependencies, tree) item by item; with ``tokens`` only the items that read
        one of them (or, with ``prev``, a changed field) rerun, and None when no value
        changed."""
        plan = self.plan
        state = self._values(rid, self.istate.get(rid)) if tokens is not None else None
        vchanged = False
        dchanged = True
        if state is None:
            vals, ideps, itrees = self._items_fresh(row)
        else:
            assert tokens is not None
            vals, ideps, itrees, moved, vchanged, dchanged = self._items_again(
                row, tokens, prev, state)
            if not moved:
                if dchanged:
                    self._keep_output(rid, vals, ideps, itrees)
                else:
                    self.istate[rid] = self._state(vals, ideps, itrees)
                return None
            if vchanged and prev is _ABSENT and self.ikeys is not None:
                got = self._patch(rid, state, vals, itrees)
                if got is not None:
                    self.istate[rid] = self._state(vals, ideps, itrees)
                    return got[0], (self._merged(ideps) if dchanged else
                                    self.pdeps.get(rid)), got[1]
        self.istate[rid] = self._state(vals, ideps, itrees)
        out = plan.assemble(row, vals)
        if vchanged and plan.item_keys is not None and not plan.omit and not plan.value:
            # every item sits at its own distinct key: a changed value is a changed output
            old = self.outs.get(rid, _ABSENT)
            if old is not _ABSENT:
                self.vmoved[rid] = (old, out)
        item_keys = plan.item_keys
        if item_keys is not None:
            tree = self._tree(rid, out, item_keys, itrees)
        else:
            tree = {}
            tree_members(out, tree)  # of the output: a later item may hide an earlier one
            for t in itrees:
                if t:  # the rows of VALUE subqueries (no dict of theirs in the output)
                    for m, v in t.items():
                        if m not in tree:
                            tree[m] = v
        if plan.self_member:
            # a VALUE row, a grouped shape's row: the row itself is a member, its value (its
            # contribution) what it shows
            tree.setdefault(rid, out)
        # every item's dependencies the same objects: the row's registered ones still hold
        return out, (self._merged(ideps) if dchanged else self.pdeps.get(rid)), tree

    def _tree(self, rid: str, out: dict[str, Any], keys: dict[str, int], itrees: list[Any]
              ) -> dict[str, Any]:
        """``_tree_of``, noting whether the tree holds each member from one place only."""
        tree, parts = _tree_of(out, keys, itrees)
        self.walked += len(tree)
        if parts == len(tree):
            if rid in self.overlap:
                self.overlap.discard(rid)
        else:
            self.overlap.add(rid)
        return tree

    def _patch(self, rid: str, state: Any, vals: list[Any], itrees: list[Any]
               ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The new output and tree of a row whose item values moved while the row did not,
        from the old ones: each moved item's key set again, and its members that left,
        entered or changed applied to a copy of the tree; the row's diff is known from them
        (``vdiff``). The items' member changes are found once per (old, new) value, and
        what they do to a row (a ``_Step``) once per set of such changes, shared by every
        row that showed the same windows: a row then costs its own copies and checks.
        Costs the changed members, not the windows (a parent of a 5,000-row window that
        gained one row walked 5,000 members three times: its tree, its owners and its
        diff). None when the tree cannot be patched (members from two places): the row is
        assembled again."""
        t0 = self.trees.get(rid)
        old_out = self.outs.get(rid)
        if type(t0) is not dict or type(old_out) is not dict or rid in self.overlap:
            return None
        ikeys = self.ikeys
        assert ikeys is not None
        old_vals, old_trees = state[0], state[2]
        sig: list[Any] = []
        for j in range(len(vals)):
            v = vals[j]
            ov = old_vals[j]
            nt = itrees[j]
            if v is ov and nt is old_trees[j]:
                continue
            if ikeys[j] is None or v is ov:
                return None
            if type(nt) is tuple and nt[0] and not nt[1].keys().isdisjoint(nt[0]):
                return None  # a VALUE row the item also shows as a dict: two places
            ck = (id(ov), id(v))
            if ck not in self.pcache:
                # the cache holds both values: their ids are theirs until the flush ends (a
                # parent's old value is freed once it is replaced, and its id reused)
                ch = _member_changes(ov, v, old_trees[j], nt, self.store.rmembers)
                self.pcache[ck] = (ch, ov, v)
                self.walked += ch[5]
            sig.append((j, ck))
        key = tuple(sig)
        step = self.psteps.get(key)
        if step is None:
            step = self.psteps[key] = _Step(
                [(ikeys[j], vals[j], self.pcache[ck][0]) for j, ck in sig])
        out = dict(old_out)
        for k, v in step.sets:
            out[k] = v
        t1 = dict(t0)
        for olds, entered, left, other in step.parts:
            for m in left:
                if t0.get(m) is not olds[m]:
                    return None
                del t1[m]
            for m in entered:
                if m in t0:
                    return None  # also held elsewhere (or by another moved item)
            t1.update(entered)
            for m in other:
                if t0.get(m) is not olds[m]:
                    return None
            t1.update(other)
        i = out.get("id")
        updated = step.updated
        if type(i) is RecordID:
            # a tree keys an output by its own id's text: finding the output at ``rid`` names
            # it without building that text again
            me = rid if t0.get(rid) is old_out else rid_text(i)
            if t0.get(me) is not old_out:
                return None  # the row's own member shows another dict (its own window)
            t1[me] = out
            updated = updated | {me}
        if len(step.parts) > 1 and \
                len(t1) != len(t0) + len(step.ladded) - len(step.lremoved):
            return None  # two items' members met (counted with repeats: not the sets)
        added = step.added
        removed = step.removed
        if added or removed:
            if rid in added or rid in removed:
                self._move_owners(rid, [m for m in removed if m != rid],
                                  [m for m in added if m != rid])
            else:
                self._move_owners(rid, step.lremoved, step.ladded)
        self.ptree = t1
        self.vdiff[rid] = (added, removed, updated)
        self.patched += 1
        return out, t1

    def _state(self, vals: list[Any], ideps: list[Any], itrees: list[Any]
               ) -> tuple[Any, list[Any], list[Any]]:
        """A row's item state; a uniform group's rows share their dependency and member
        lists while they hold the same objects (a thread list beside one uncorrelated
        subquery: 20k rows, one pair of lists). Nothing changes the lists in place."""
        if self.uniform:
            c = self.iconst
            if c is None or not _same_objs(c[1], ideps) or not _same_objs(c[2], itrees):
                c = self.iconst = (None, ideps, itrees)
            if self.vkeys is not None:
                return c  # the values are the output's (_values): one tuple for all rows
            return vals, c[1], c[2]
        if self.vkeys is None:
            return vals, ideps, itrees
        # the values are the output's; the member list is most often the last row's again
        # (only row-free items and link reads without members differ from None)
        t = self.tlast
        if _same_objs(t, itrees):
            itrees = t
        else:
            self.tlast = itrees
        return None, ideps, itrees

    def _merged(self, ideps: list[Any]) -> tuple[set[str], list[Any]] | None:
        """``_merge_deps``, keeping the last row's list of subquery tokens when it holds the
        same ones (rows beside the same uncorrelated windows: one list, not one a row)."""
        d: tuple[set[str], list[Any]] | None = _merge_deps(ideps)
        if d is None:
            return None
        subs = d[1]
        last = self.slast
        if subs is last:
            return d
        if _same_objs(last, subs):
            return d[0], last
        self.slast = subs
        return d

    def _values(self, rid: str, state: Any) -> Any:
        """``state`` with its item values (a uniform row keeps none: they are read back
        from its output, where each item's value sits at its own key)."""
        if state is None or state[0] is not None:
            return state
        vkeys = self.vkeys
        assert vkeys is not None
        out = self.outs[rid]
        return ([None if k is None else out[k] for k in vkeys], state[1], state[2])

    def _items_fresh(self, row: dict[str, Any]) -> tuple[list[Any], list[Any], list[Any]]:
        """Every item's value, dependencies and member tree for a row seen first."""
        plan = self.plan
        store = self.store
        S = self.S
        keyed = plan.item_keys is not None
        shared = self.shared
        row_free = plan.row_free
        vals: list[Any] = []
        ideps: list[Any] = []
        itrees: list[Any] = []
        for item, row_only in zip(plan.items, plan.row_only):
            if row_only:
                # `*` or a one-segment field: depends on the row alone
                vals.append(None if item[0] == "all" else item[1](row, NOLINKS))
                ideps.append(None)
                itrees.append(None)
                continue
            i = len(vals)
            if shared is not None and row_free[i]:
                # the same value, dependencies and members for every row (an uncorrelated
                # subquery): evaluated once for the flush or registration, the objects
                # shared by every row that shows them, not a copy per row
                sh = shared.get(i)
                if sh is None:
                    sh = shared[i] = self._shared_item(i, item, row)
                vals.append(sh.value)
                ideps.append(sh.deps)
                itrees.append(sh.tree)
                continue
            icx = Cx(store)
            v = plan.item_value(item, store, S, row, icx)
            vals.append(v)
            ideps.append(_item_deps(icx, self.circuit.rdeps))
            itrees.append(None if plan.quiet[len(itrees)] else
                          _item_tree(v, keyed, icx))
        return vals, ideps, itrees

    def _items_again(self, row: dict[str, Any], tokens: set[Any], prev: Any, state: Any
                     ) -> tuple[list[Any], list[Any], list[Any], bool, bool, bool]:
        """The items rerun that read a token (or, with ``prev``, a changed field) from the
        row's last ``state``; and whether the output moved."""
        plan = self.plan
        store = self.store
        S = self.S
        keyed = plan.item_keys is not None
        shared = self.shared
        vals = list(state[0])
        ideps = list(state[1])
        itrees = list(state[2])
        changed_row = prev is not _ABSENT
        moved = changed_row  # the row changed: its own fields are reassembled
        vchanged = False  # some item's value changed (not only its members)
        dchanged = False  # some item's dependencies are another object
        item_fields = plan.item_fields
        for i, item in enumerate(plan.items):
            if plan.row_only[i]:
                if changed_row and item[0] != "all":
                    vals[i] = item[1](row, NOLINKS)
                continue
            d = ideps[i]
            rerun = False
            if changed_row:
                fields = item_fields[i]
                rerun = fields is None or any(
                    not same(prev.get(f, NONE), row.get(f, NONE)) for f in fields)
            if not rerun and tokens and d is not None:
                rerun = not tokens.isdisjoint(d[0]) or any(k in tokens for k in d[1])
            if not rerun:
                continue
            if shared is not None and plan.row_free[i]:
                # the same value for every row: computed for the first row of the flush
                sh = shared.get(i)
                if sh is None:
                    sh = shared[i] = self._shared_item(i, item, row)
                    self.evals += 1
                v = sh.value
                if d is not sh.deps:
                    ideps[i] = sh.deps
                    dchanged = True
                old = vals[i]
                if old is sh.old:
                    changed = sh.changed  # rows mostly showed the same old value too
                else:
                    changed = not same(v, old)
                    sh.old = old
                    sh.changed = changed
                if changed or plan.item_extra[i]:
                    t = sh.tree
                    if changed or not _same_tree(t, itrees[i]):
                        vals[i] = v
                        itrees[i] = t
                        moved = True
                        if changed:
                            vchanged = True
                continue
            icx = Cx(store)
            v = plan.item_value(item, store, S, row, icx)
            self.evals += 1
            ideps[i] = _item_deps(icx, self.circuit.rdeps)
            dchanged = True
            changed = not same(v, vals[i])
            if changed or plan.item_extra[i]:
                # a VALUE subquery may show the same values from other rows
                t = None if plan.quiet[i] else _item_tree(v, keyed, icx)
                if changed or not _same_tree(t, itrees[i]):
                    vals[i] = v
                    itrees[i] = t
                    moved = True
                    if changed:
                        vchanged = True
            elif type(itrees[i]) is dict:
                # the value is kept, so its tree must stay the kept value's: the members of
                # a window the row no longer reads (it moved to another showing the same
                # rows) follow that window's later edits, and the row's tree would drift
                # (once: the tree built here is the row's own, which no edit reaches; walking
                # the kept value on every rerun cost the window, nested rows and all)
                subs = icx.subs
                w = subs[-1] if subs else None
                t = itrees[i]
                if not (type(w) is Win and w.members is t):
                    osubs = d[1] if d is not None else None
                    ow = osubs[-1] if osubs else None
                    if type(ow) is Win and ow.members is t:
                        kept = _members_of(vals[i], store.rmembers)
                        if kept is not None:
                            self.walked += len(kept)
                        itrees[i] = kept
        return vals, ideps, itrees, moved, vchanged, dchanged

    def _shared_item(self, i: int, item: tuple[Any, ...], row: dict[str, Any]) -> _Shared:
        """Evaluate row-free item ``i`` once for the flush (``row``: any row; it is not read)."""
        plan = self.plan
        icx = Cx(self.store)
        v = plan.item_value(item, self.store, self.S, row, icx)
        t = None if plan.quiet[i] else _item_tree(v, plan.item_keys is not None, icx)
        deps: Any = (icx.reads, icx.subs) if icx.reads or icx.subs else None
        old = self.sdeps.get(i, _ABSENT)
        if old is not _ABSENT and old == deps:
            deps = old
        else:
            self.sdeps[i] = deps
        return _Shared(v, deps, t)

    def _keep_output(self, rid: str, vals: list[Any], ideps: list[Any], itrees: list[Any]
                     ) -> None:
        """Same output; the dependencies may still differ (a scan key, a link read)."""
        self.istate[rid] = self._state(vals, ideps, itrees)
        deps = self._merged(ideps)
        old = self.pdeps.get(rid)
        if old != deps:
            self.deps.set_proj(self, rid, old, deps)
            if deps is None:
                self.pdeps.pop(rid, None)
            else:
                self.pdeps[rid] = deps

    # -- flush ----------------------------------------------------------------------------
    def mark(self, rid: str, token: Any) -> None:
        """Something ``rid``'s projection read changed (``token``: a record id text or a
        subquery scan ``(table, field, key)``): rerun the items that read it at the flush."""
        toks: Any = self.dirty.get(rid, _ABSENT)
        if toks is _ABSENT:
            self.dirty[rid] = {token}
        elif toks is not None:
            toks.add(token)

    def mark_row(self, rid: str, prev: dict[str, Any] | None) -> None:
        """The row ``rid`` itself changed (``prev``: the row before, None when absent)."""
        if rid not in self.dirty:
            self.dirty[rid] = set()
        if rid not in self.prev:
            self.prev[rid] = prev

    def ref(self, rid: str, d: int) -> None:
        """A windowed materialisation started (+1) or stopped (-1) showing ``rid``."""
        refs = self.refs
        n = refs.get(rid, 0) + d
        if n:
            refs[rid] = n
            if n == 1 and rid not in self.dirty:
                self.dirty[rid] = set()
        else:
            del refs[rid]
            if rid not in self.dirty:
                self.dirty[rid] = set()

    def _same_output(self, prev: dict[str, Any], row: dict[str, Any]) -> bool:
        """Whether a row change leaves a simple projection's output as it is (the changed
        fields are not read: a thread moving to another author in `SELECT id, title`)."""
        fields = self.plan.out_fields
        if fields is None:
            return False
        for f in fields:
            if not same(prev.get(f, NONE), row.get(f, NONE)):
                return False
        return True

    def process(self, held: Any) -> None:
        """Re-project, project or drop the dirty rows; ``held(proj, rid, row)`` says whether
        some materialisation of the group shows the row now. Fills ``recs``."""
        self.own0 = {}
        self.shared = {}
        rows = self.store.table(self.plan.table).rows
        recs = self.recs
        dirty = self.dirty
        prev = self.prev
        self.dirty = {}
        self.prev = {}
        pending: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        try:
            for rid, toks in dirty.items():
                row = rows.get(rid)
                had = rid in self.outs
                keep = row is not None and held(self, rid, row)
                if not keep and not had:
                    continue
                t0 = self.tree(rid) if had else NO_TREE
                if keep:
                    assert row is not None
                    if not had:
                        self.project(rid, row, None)
                    else:
                        p = prev.get(rid, _ABSENT)
                        if p is None:
                            self.project(rid, row, None)  # deleted and created again
                        elif toks or (p is not _ABSENT and not self._same_output(p, row)):
                            self.project(rid, row, toks, p)
                    t1 = self.tree(rid)
                else:
                    self.drop(rid)
                    t1 = NO_TREE
                pending.append((rid, t0, t1))
        finally:
            self.shared = None  # valid for this flush only
            if self.pcache:
                self.pcache = {}
                self.psteps = {}
            self.ptree = None
        # cleanness needs every owner change of the flush: decided once all rows moved
        vmoved = self.vmoved
        vdiff = self.vdiff
        for rid, t0, t1 in pending:
            r = recs[rid] = Rec(rid, t0, t1, self._clean(rid, t0, t1))
            if vdiff:
                got = vdiff.get(rid)
                if got is not None:
                    r.preset(got)
                    continue
            if vmoved:
                r.hint = vmoved.get(rid)
            if t0 is not t1:
                self.walked += len(t1)  # what Rec.diff walks when a view asks
        if vmoved:
            self.vmoved = {}
        if vdiff:
            self.vdiff = {}

    def finish(self) -> None:
        """Forget the flush state."""
        if self.recs:
            self.recs = {}
        self.own0 = None
        if self.multi0:
            self.multi0 = set()


class _Shared:
    """A row-free item's value, dependencies and members for one flush, and the last old
    value it was compared with (an identity test then answers for the next row)."""

    __slots__ = ("changed", "deps", "old", "tree", "value")

    def __init__(self, value: Any, deps: Any, tree: Any) -> None:
        self.value = value
        self.deps = deps
        self.tree = tree
        self.old: Any = _ABSENT
        self.changed = True


class _Step:
    """What the member changes of a row's moved items do to any row showing them (see
    Proj._patch): the output keys set again, per item its members before, entered, left
    and stayed as other objects, and the row's diff without the row itself. Built once per
    flush and set of changes, shared by the rows of one window."""

    __slots__ = ("added", "ladded", "lremoved", "parts", "removed", "sets", "updated")

    def __init__(self, changes: list[tuple[str | None, Any, Any]]) -> None:
        self.sets: list[tuple[str, Any]] = []
        self.parts: list[tuple[dict[str, Any], dict[str, Any], list[str], dict[str, Any]]] = []
        ladded: list[str] = []
        lremoved: list[str] = []
        upd: list[str] = []
        for k, v, ch in changes:
            assert k is not None
            olds, entered, left, other, changed, _ = ch
            self.sets.append((k, v))
            self.parts.append((olds, entered, left, other))
            ladded.extend(entered)
            lremoved.extend(left)
            upd.extend(changed)
        self.ladded = ladded
        self.lremoved = lremoved
        self.added: frozenset[str] = frozenset(ladded) if ladded else EMPTY
        self.removed: frozenset[str] = frozenset(lremoved) if lremoved else EMPTY
        self.updated: frozenset[str] = frozenset(upd) if upd else EMPTY


def _same_tree(a: Any, b: Any) -> bool:
    """Whether two item trees hold the same members with the same contents. Unlike
    ``same`` (an output's key holding NONE is a key the client does not see), a member
    shown as NONE is still a member: a VALUE row showing NONE that takes the place of
    another showing NONE changes the members, not the value."""
    if a is b:
        return True
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is tuple:
        return _same_tree(a[0], b[0]) and _same_tree(a[1], b[1])
    if ta is dict and a.keys() != b.keys():
        return False
    return same(a, b)


def _members_of(v: Any, cache: dict[int, tuple[Any, dict[str, Any]]]
                ) -> dict[str, Any] | None:
    """The members inside one item value (None when it cannot hold any)."""
    t = type(v)
    if t is not dict and t is not list:
        return None
    acc: dict[str, Any] = {}
    if t is list:
        rows_members(v, acc, cache)
    else:
        tree_members(v, acc)
    return acc


def _item_tree(v: Any, keyed: bool, icx: Cx) -> Any:
    """What an item keeps of its value's members: all of them when the output's members
    are assembled per item (``keyed``), else only those the output does not show as dicts
    (the rows of VALUE subqueries, in ``extra``).

    Keyed, an item with VALUE rows keeps ``(dict members or None, VALUE rows)`` apart: a
    record the output shows as a dict anywhere (the row itself, `author.*`) has that dict as
    its content, whatever a VALUE row shows of it (its id, a field), so ``_tree_of`` lets
    the VALUE rows fill only the members no dict shows. Otherwise a thread listed by id in
    its own `peers` had its id as content, and a write to its fields updated nothing."""
    # ``extra`` is the item's own evaluation context's, used by nothing else: kept, not copied
    extra = icx.extra
    if keyed and not extra:
        subs = icx.subs
        if subs:
            w = subs[-1]
            if type(w) is Win and w.value is v:
                # a join window's rows: its members are kept with it (edited by writes)
                return w.tree()
    if not keyed:
        return extra if extra else None
    t = _members_of(v, icx.store.rmembers)
    if extra:
        return (t, extra)
    return t


def _tree_of(out: dict[str, Any], keys: dict[str, int], itrees: list[Any]
             ) -> tuple[dict[str, Any], int]:
    """``tree_members(out)`` from the members of each item value, kept per row, so a changed
    row or subquery does not walk the unchanged values again (a nested row-only value, such
    as a list of tags, is walked where it stands). Same visiting order as ``tree_members``:
    the output itself, then its values in key order, a later visit overwriting an earlier
    one. Also the members counted per place they come from: the tree's size when no
    member comes from two places (-1 when a VALUE row is also shown by a dict or by another
    VALUE subquery: never patched, see Proj._patch)."""
    tree: dict[str, Any] = {}
    parts = 0
    i = out.get("id")
    if type(i) is RecordID:
        tree[rid_text(i)] = out
        parts = 1
    get = keys.get
    extras: list[dict[str, Any]] | None = None
    for k, v in out.items():
        j = get(k)
        if j is not None:
            t = itrees[j]
            if t:
                if type(t) is tuple:  # a VALUE subquery's rows, even when it shows `[0]`
                    if t[0]:
                        tree.update(t[0])
                        parts += len(t[0])
                    if extras is None:
                        extras = [t[1]]
                    else:
                        extras.append(t[1])
                else:
                    tree.update(t)
                    parts += len(t)
            continue
        tv = type(v)
        if tv is dict or tv is list:  # only containers hold members
            acc: dict[str, Any] = {}
            tree_members(v, acc)
            if acc:
                tree.update(acc)
                parts += len(acc)
    if extras is not None:
        two = False
        for extra in extras:  # after every dict: a dict's content wins (see _item_tree)
            for m, x in extra.items():
                if m not in tree:
                    tree[m] = x
                    parts += 1
                else:
                    two = True
        if two:
            parts = -1
    return tree, parts


def _member_changes(ov: Any, v: Any, ot: Any, nt: Any,
                    cache: dict[int, tuple[Any, dict[str, Any]]]) -> tuple[
        dict[str, Any], dict[str, Any], list[str], dict[str, Any], list[str], int]:
    """An item's members before (from its old value: a window's member tree is edited in
    place, so the old one is gone), and those that entered, left, or stayed as another
    object, those of them with another content; and how many members were walked. ``ot`` /
    ``nt``: the item's trees (None: the value holds no member; a tuple: its dict members
    and the rows of its VALUE subqueries, see ``_item_tree``, built for that value alone
    and never edited, so the old one is still whole)."""
    if type(ot) is dict and type(nt) is dict and type(v) is list:
        got = _logged(ov, v)
        if got is not None:
            return got
    olds: dict[str, Any] = {}
    if type(ot) is tuple:
        olds.update(ot[1])
        if ot[0]:
            olds.update(ot[0])  # a dict's content wins, as in _tree_of
    elif ot is not None:
        if type(ov) is list:
            rows_members(ov, olds, cache)  # rows that did not change: not walked again
        else:
            tree_members(ov, olds)
    news: dict[str, Any]
    if type(nt) is tuple:
        news = dict(nt[1])
        if nt[0]:
            news.update(nt[0])
    else:
        news = nt if nt is not None else {}
    entered: dict[str, Any] = {}
    other: dict[str, Any] = {}
    changed: list[str] = []
    for m, o in news.items():
        p = olds.get(m, _ABSENT)
        if p is _ABSENT:
            entered[m] = o
        elif p is not o:
            other[m] = o  # the row's tree takes the new object (identity tests next time)
            if not same(p, o):
                changed.append(m)
    left = [m for m in olds if m not in news]
    return olds, entered, left, other, changed, len(olds) + len(news)


def _logged(ov: Any, v: list[Any]) -> tuple[
        dict[str, Any], dict[str, Any], list[str], dict[str, Any], list[str], int] | None:
    """``_member_changes`` from the edits that made window value ``v`` out of ``ov``
    (engine.join.EDITS: one or several in a flush), costing the members they moved, not
    the window; None when ``v`` did not come from ``ov`` by edits (computed again, another
    window)."""
    steps: list[dict[str, tuple[Any, Any]]] = []
    cur: Any = v
    while cur is not ov:
        st = EDITS.get(id(cur))
        if st is None or st[1] is not cur or len(steps) > 64:
            return None
        steps.append(st[2])
        cur = st[0]
    net: dict[str, tuple[Any, Any]] = {}
    for n in range(len(steps) - 1, -1, -1):  # the oldest edit first
        for k, ab in steps[n].items():
            was = net.get(k)
            net[k] = ab if was is None else (was[0], ab[1])
    olds: dict[str, Any] = {}
    entered: dict[str, Any] = {}
    other: dict[str, Any] = {}
    changed: list[str] = []
    left: list[str] = []
    for k, (a, b) in net.items():
        if a is None:
            if b is not None:
                entered[k] = b
            continue
        olds[k] = a
        if b is None:
            left.append(k)
        elif a is not b:
            other[k] = b
            if not same(a, b):
                changed.append(k)
    return olds, entered, left, other, changed, len(net)


def _item_deps(icx: Cx, shared: dict[str, tuple[set[str], list[Any]]]) -> Any:
    """An item's dependencies from its evaluation; one read record and no subquery (a link
    read) gives the shape's one tuple for that record (``Circuit.rdeps``). Nothing changes
    a dependency tuple or its set and list in place, so rows may share them."""
    reads = icx.reads
    subs = icx.subs
    if subs:
        return reads, subs
    if not reads:
        return None
    if len(reads) != 1:
        return reads, subs
    for r in reads:
        d = shared.get(r)
        if d is None:
            if len(shared) >= RDEPS_MAX:
                shared.clear()  # only a cache of equal objects: dropping it is safe
            d = shared[r] = (reads, subs)
        return d
    return None


def _same_objs(a: list[Any], b: list[Any]) -> bool:
    """Whether two lists hold the same objects, place by place."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x is not y:
            return False
    return True


def _merge_deps(ideps: list[Any]) -> tuple[set[str], list[Any]] | None:
    """The dependencies of a row's items together (None when there are none). One item's
    dependencies are returned as they are (never changed by their readers): rows that
    share a row-free item's then share their merged dependencies too."""
    one: Any = None
    for d in ideps:
        if d is not None:
            if one is not None:
                break
            one = d
    else:
        return one
    # one item's set of reads is kept as it is (a row reading one link: no copy of it)
    reads: set[str] | None = None
    alone = True
    subs: list[Any] = []
    for d in ideps:
        if d is not None:
            if d[0]:
                if reads is None:
                    reads = d[0]
                else:
                    if alone:
                        reads = set(reads)
                        alone = False
                    reads |= d[0]
            subs.extend(d[1])
    if reads is None:
        reads = set()
    if not reads and not subs:
        return None
    return reads, subs


def _copy(o: Any) -> Any:
    """The owners of a member as `own0` keeps them: a member many rows hold (a featured
    product in every order) is only said to be held by many, not copied at every flush."""
    if o is None or type(o) is str:
        return o
    if len(o) > FEW_OWNERS:
        return MANY_OWNERS
    return set(o)


#: entries of `Circuit.rdeps` before it is emptied. It keeps the records rows of one shape
#: read, also after no row reads one any more: the bound caps what such stale entries hold
#: (~400 bytes each) at a fraction of what the rows reading that many records hold anyway
RDEPS_MAX = 1 << 16

#: `own0`'s value for a member held by more than FEW_OWNERS rows when the flush began
MANY_OWNERS = "\0many"
