"""The incremental view engine: the facade over shapes, materialisations and deltas.

Structure (see ``engine/README.md``):

- A **shape** (:class:`~engine.circuit.Circuit`) is a normalised query with its compiled plan.
  Views whose queries differ only in constants share it.
- A **materialisation** (:class:`~engine.circuit.Mat`, :class:`~engine.circuit.WMat`) is a
  shape plus slot values; view ids with the same shape and values share one. It holds
  membership only (for windows: the ordered qualifying set and the window), never rows.
- A **projection group** (:class:`~engine.proj.Proj`) holds the projected rows of a shape for
  one value of the slots its projection reads, shared by its materialisations.
- A change to table T reaches: for each shape over T, the materialisations whose indexed
  constants match the old or new row (equality buckets and range intervals,
  :mod:`engine.matindex`); explicit materialisations whose predicate read the record through
  a link (``Deps.quals``); projected rows whose projection read the record or whose
  subqueries scanned T with a matching correlation key (``Deps.reads``/``Deps.scans``).
- Rows are projected and deltas built when a call ends (:meth:`ViewEngine._flush`), once per
  batch, so ``ingest_batch`` yields the net change.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from itertools import chain, islice
from operator import attrgetter
from typing import Any

from surrealdb import RecordID

from engine import gcpolicy, window
from engine.aggregate import AggState
from engine.arena import Arena, RowStore
from engine.circuit import Circuit, Mat, Order, WMat, exact_key
from engine.compile import graph_token
from engine.delta import (
    MANY,
    ViewDelta,
    apply_counts,
    counted_delta,
    has_nested,
    merge_clean,
    owner_delta,
    same,
)
from engine.deps import Deps, table_prefix
from engine.errors import QueryRejected
from engine.lazy import bulk, child_parent, deep, warm
from engine.parser import parse_cached
from engine.plan import Cx
from engine.proj import NOLINKS, Proj
from engine.semijoin import InnerSet
from engine.shape import normalise
from engine.store import Store, TableStore, ikey, rid_text
from engine.values import NONE, parse_record_id, record_id_text
from engine.versions import is_stale

__all__ = ["Circuit", "Mat", "ViewDelta", "ViewEngine", "WMat", "same"]

OPS = frozenset({"CREATE", "UPDATE", "DELETE"})
_VT = attrgetter("vt")
_chain = chain.from_iterable
_CACHED_MEMBERS = 256  # larger member sets are not kept per materialisation
_VCACHE_MAX = 1024  # lists of materialisations whose views are kept (see _emit)


class ViewEngine:
    """Incremental materialised views over SurrealDB rows (see the package docstring)."""

    def __init__(self, arena_dir: str | None = None, segment_mb: int = 64) -> None:
        self.arena_dir = arena_dir
        self.segment_mb = segment_mb
        self.store = Store()
        # Row bytes (canonical msgpack, also the table-hash input) live in memmap segments:
        # file-backed in arena_dir, so another process can map and read them, else anonymous.
        # Evaluation reads the decoded copy in `store` (decoding bytes per read would cost more
        # than the whole incremental update); the bytes of changed rows are written back by
        # sync_arena(): after every ingest/load call when file-backed (readers see each
        # call's rows when it returns), on demand (table_hash, sync_arena) when anonymous, as
        # no other process can read those. A row rewritten many times in between is encoded
        # once.
        self.row_store = RowStore(Arena(arena_dir, segment_mb))
        self._sync_each_call = arena_dir is not None
        self.deps = Deps()
        self.circuits: dict[Any, Circuit] = {}
        self.by_table: dict[str, list[Circuit]] = {}
        self.views: dict[str, Mat] = {}
        # flush state: implicit circuits with changed rows, explicit materialisations whose
        # window moved, projection groups with rows to re-examine
        self._circuits: set[Circuit] = set()
        self._mats: set[WMat] = set()
        self._projs: set[Proj] = set()
        # flushes that changed something: a materialisation's cached member set is valid
        # while the count has not moved (many views registering the same per-user query)
        self._epoch = 0
        # the views of a list of materialisations (a row event reaches the same prefix of a
        # range index again and again): tuple of mats -> view ids; cleared whenever a view
        # registers or unregisters, so it never names a stale view
        self._vcache: dict[tuple[Mat, ...], dict[str, None]] = {}
        # table -> projection groups with lazy rows reading it (engine.lazy)
        self._lazy: dict[str, set[Proj]] = {}
        # explicit shapes whose predicate follows links one hop (Plan.qhop): a write to a
        # record reaches the rows linking to it through the table's index on those fields
        self._hops: list[Circuit] = []
        # grouped shapes registered (their materialisations keep groups: engine.aggregate)
        self._grouped = 0
        # table -> the live sets of semi-joins over it (engine.semijoin), and record -> the
        # sets with a row that read it through a link
        self._semis: dict[str, set[InnerSet]] = {}
        self._semi_links: dict[str, set[InnerSet]] = {}

    # ------------------------------------------------------------------ public API
    # Every entry point that changes the engine's state runs with the collector paused and
    # freezes what the calls kept (engine.gcpolicy): no collection walks the engine's
    # structures inside a call, whatever the process's thresholds.
    def load(self, table: str, rows: Iterable[Mapping[str, Any]]) -> None:
        """Bulk bootstrap: store rows (dicts with ``id``) without reporting deltas."""
        token = gcpolicy.pause()
        try:
            self._load(table, rows)
        finally:
            gcpolicy.resume(token)

    def _load(self, table: str, rows: Iterable[Mapping[str, Any]]) -> None:
        if (self.by_table.get(table) or self.deps.watched(table) or table in self._lazy
                or table in self.store.joins or self._hops or table in self._semis
                or self._semi_reads(table)):
            # something reads the table (lazy rows register no dependency, yet read theirs)
            events = []
            for row in rows:
                rid = row.get("id")
                text = rid_text(rid) if type(rid) is RecordID else _canon_text(str(rid))
                events.append((table, "CREATE", text, row))
            self._ingest_batch(events)
            self.store.table(table).keep_links()
            return
        ts = self.store.table(table)
        for row in rows:
            text, new = self._prepare(table, None, row)
            ts.put(text, new)
        ts.keep_links()
        if self._sync_each_call:
            self.sync_arena(table)

    def _semi_reads(self, table: str) -> bool:
        """Whether a semi-join's inner row read a record of ``table`` through a link, or a
        view's condition traversed ``table`` as an edge table."""
        if self._semi_links:
            prefix = table_prefix(table)
            if any(k.startswith(prefix) for k in self._semi_links):
                return True
        if self.deps.quals:
            edge = graph_token(table, "", "")[:-3]
            return any(k.startswith(edge) for k in self.deps.quals)
        return False

    def register(self, view_id: Any, surql: Any, params: Any = None) -> set[str]:
        """Register (or replace) a view; returns its members. Raises QueryRejected, also for
        arguments of the wrong type (typed Any: the compiled engine would raise TypeError at
        the call instead)."""
        token = gcpolicy.pause()
        try:
            return self._register(view_id, surql, params)
        finally:
            gcpolicy.resume(token)

    def _register(self, view_id: Any, surql: Any, params: Any) -> set[str]:
        if not isinstance(view_id, str) or not view_id:
            raise QueryRejected("the view id must be a non-empty string")
        shape, S = normalise(parse_cached(surql), params)
        if view_id in self.views:
            self._unregister(view_id)
        circuit = self.circuits.get(shape)
        if circuit is None:
            circuit = Circuit(shape, self.store, self.deps)
            self.circuits[shape] = circuit
            self.by_table.setdefault(circuit.table, []).append(circuit)
            hop = circuit.plan.qhop
            if circuit.explicit and hop is not None:
                ts = self.store.table(circuit.table)
                for f in hop:
                    ts.index(f)  # kept from now on: the rows linking to a written record
                self._hops.append(circuit)
            if circuit.agg is not None:
                self._grouped += 1
        key = exact_key(S)
        mat = circuit.mats.get(key)
        shown = None
        if mat is None:
            mat = circuit.new_mat(S, key)
            for spec in circuit.plan.all_semis():
                inner = spec.open(S, self.store, self._semi_links)
                self._semis.setdefault(spec.table, set()).add(inner)
            shown = self._build(mat)
            if circuit.plan.may_share:
                # members held by several rows: the view's counts from the start (else the
                # first write holding such a member would count the whole view)
                self._count_members(mat, shown)
        mat.views.add(view_id)
        mat.vt[view_id] = None
        if self._vcache:
            self._vcache = {}
        self.views[view_id] = mat
        cached = mat.mcache
        if cached is not None and cached[0] == self._epoch:
            return set(cached[1])  # another view of it registered since the last change
        members = self._members(mat, shown)
        if len(members) <= _CACHED_MEMBERS:
            mat.mcache = (self._epoch, frozenset(members))
        return members

    def unregister(self, view_id: str) -> None:
        """Forget a view (unknown ids are ignored)."""
        token = gcpolicy.pause()
        try:
            self._unregister(view_id)
        finally:
            gcpolicy.resume(token)

    def _unregister(self, view_id: str) -> None:
        mat = self.views.pop(view_id, None)
        if mat is None:
            return
        mat.views.discard(view_id)
        mat.vt.pop(view_id, None)
        if self._vcache:
            self._vcache = {}
        if mat.views:
            return
        circuit = mat.circuit
        proj = mat.proj
        for spec in circuit.plan.all_semis():
            inner = spec.close(mat.S)
            if inner is not None:
                semis = self._semis.get(spec.table)
                if semis is not None:
                    semis.discard(inner)
                    if not semis:
                        del self._semis[spec.table]
        if isinstance(mat, WMat):
            window.teardown(mat, self.deps)
            circuit.drop_mat(mat)
            if proj.nmats:
                for rid in proj.dirty:
                    if rid not in proj.refs:
                        proj.drop(rid)
            proj.dirty = {}
        else:
            shown = self._shown(mat)
            circuit.drop_mat(mat)
            if proj.nmats:
                rows = circuit.rows
                for rid in shown:
                    row = rows.get(rid)
                    if row is None or not circuit.held(proj, rid, row):
                        proj.drop(rid)
        if not circuit.mats:
            del self.circuits[circuit.shape]
            if circuit in self._hops:
                self._hops.remove(circuit)
            if circuit.agg is not None:
                self._grouped -= 1
            lst = self.by_table.get(circuit.table, [])
            if circuit in lst:
                lst.remove(circuit)
            if not lst:
                self.by_table.pop(circuit.table, None)

    def has_lazy(self) -> bool:
        """Whether some rows may be lazy (cheap; :meth:`lazy_rows` counts them)."""
        return bool(self._lazy)

    def lazy_rows(self) -> int:
        """Rows shown but not projected yet (:mod:`engine.lazy`)."""
        seen: set[Proj] = set()
        for table, projs in list(self._lazy.items()):
            for p in list(projs):
                if not p.lazy:
                    projs.discard(p)  # projected or dropped since
            if not projs:
                del self._lazy[table]
            seen |= projs
        return sum(len(p.lazy) for p in seen)

    def complete(self, limit: int | None = None) -> int:
        """Project up to ``limit`` lazy rows (all with None); returns how many are left.

        Lazy rows make registration fast and are projected by the first write that can
        change them; projecting them ahead, when idle (the SSP's shards do), keeps that cost
        off the writes. Never call it during an ingest call (between calls is always right).
        """
        token = gcpolicy.pause()
        try:
            return self._complete(limit)
        finally:
            gcpolicy.resume(token)

    def _complete(self, limit: int | None) -> int:
        left = limit
        for projs in list(self._lazy.values()):
            for proj in list(projs):
                lazy = proj.lazy
                if not lazy:
                    continue  # lazy_rows() forgets it
                if left is None:
                    take = list(lazy)
                else:
                    take = list(islice(lazy, left))
                    left -= len(take)
                for rid in take:
                    proj.force(rid)
                warm(proj, take)
                if left is not None and left <= 0:
                    return self.lazy_rows()
        return self.lazy_rows()

    def members(self, view_id: str) -> set[str]:
        """Record ids currently in the view's result tree."""
        mat = self.views.get(view_id)
        if mat is None:
            raise KeyError(view_id)
        return self._members(mat)

    def result(self, view_id: str) -> list[Any]:
        """The view's current result rows, in order (for debugging and tests)."""
        mat = self.views.get(view_id)
        if mat is None:
            raise KeyError(view_id)
        plan = mat.circuit.plan
        spec = mat.circuit.agg
        if spec is not None:
            assert mat.agg is not None
            return spec.rows(mat.agg, mat.S)
        if isinstance(mat, WMat) and plan.bounded:
            ids = [e[-1] for e in mat.order.head[mat.lo:mat.hi]]
        else:
            rows = mat.circuit.rows
            cx = Cx(self.store)
            ids = sorted(self._shown(mat), key=lambda r: plan.entry(rows[r], r, cx))
        proj = mat.proj
        for r in ids:
            proj.force(r)  # a lazy row is projected to be shown
        outs = proj.outs
        if plan.split:
            # each row's split documents, ordered among all by ORDER BY (ties: the row's
            # id, then the element's position)
            rows = mat.circuit.rows
            cx = Cx(self.store)
            split = []
            for r in ids:
                for i, (doc, out) in enumerate(zip(plan.split_docs(rows[r]), outs[r])):
                    split.append((plan.entry(doc, r, cx) + (i,), out))
            split.sort(key=_first)
            return [out for _, out in split]
        return [outs[r] for r in ids]

    def subquery_state(self, view_id: str) -> dict[str, dict[str, int]]:
        """What the view's projection subqueries hold now, per scanned table: ``parents`` (the
        projected rows whose subqueries scanned it) and ``keys`` (distinct correlation keys
        scanned; a whole-table scan counts as one). Empty for a view without subqueries.
        The projection group is shared by the views showing the same rows (engine.proj)."""
        mat = self.views.get(view_id)
        if mat is None:
            raise KeyError(view_id)
        parents: dict[str, int] = {}
        keys: dict[str, set[Any]] = {}
        proj = mat.proj
        if proj.lazy:
            # a lazy row scans its subquery's table by its own id (engine.lazy)
            assert proj.spec is not None
            st = proj.spec.sub.table
            parents[st] = len(proj.lazy)
            rows = mat.circuit.rows
            keys[st] = {(proj.spec.link, _hashable(ikey(rows[r]["id"]))) for r in proj.lazy}
        for deps in proj.pdeps.values():
            seen: set[str] = set()
            for tok in deps[1]:
                table, field, key = tok if type(tok) is tuple else tok.scan()
                keys.setdefault(table, set()).add((field, _hashable(key)))
                if table not in seen:
                    seen.add(table)
                    parents[table] = parents.get(table, 0) + 1
        return {t: {"parents": parents.get(t, 0), "keys": len(keys[t])} for t in sorted(keys)}

    def table_count(self, table: str) -> int:
        """Rows currently stored for ``table``."""
        t = self.store.tables.get(table)
        return 0 if t is None else t.count()

    def table_hash(self, table: str) -> int:
        """XOR of row_hash over the table's rows (0 for an empty table)."""
        self.sync_arena(table)
        return self.row_store.hash(table)

    def sync_arena(self, table: str | None = None) -> int:
        """Write the bytes of rows changed since the last sync (of ``table``, or of every
        table) into the arena; returns how many rows were written or removed."""
        tables = self.store.tables
        if table is None:
            stores = list(tables.values())
        else:
            one = tables.get(table)
            stores = [one] if one is not None else []
        rs = self.row_store
        done = 0
        for ts in stores:
            changed = ts.changed
            if not changed:
                continue
            rows = ts.rows
            name = ts.name
            for rid in changed:
                row = rows.get(rid)
                if row is None:
                    rs.delete(name, rid)
                else:
                    rs.put(name, rid, row)
            done += len(changed)
            changed.clear()
        return done

    def view_ids(self) -> list[str]:
        """Registered view ids."""
        return list(self.views)

    def close(self) -> None:
        """Forget every view now (the engine is empty afterwards; its rows stay).

        Shapes, materialisations, projection groups and dependency indexes refer to each
        other; the entry points freeze what they keep out of the collector's reach
        (engine.gcpolicy), so those references are cut here, and when the engine goes away,
        for reference counting alone to free them."""
        for c in self.circuits.values():
            c.mats = {}
            c.projs = {}
            c.buckets = {}
            c.orders = {}
            c.loose = []
        self.circuits = {}
        self.by_table = {}
        self.views = {}
        self._vcache = {}
        self._lazy = {}
        self._hops = []
        self._circuits = set()
        self._mats = set()
        self._projs = set()
        self.deps.clear()
        for joins in self.store.joins.values():
            for j in list(joins):
                j.clear()
                j.plan.forget_join(j)
        self.store.joins = {}

    def __del__(self) -> None:
        self.close()

    # The entry points take Any where they validate the value themselves (ValueError): the
    # compiled engine (engine.native) would otherwise answer a wrong type with TypeError.
    def ingest(self, table: Any, op: Any, id: Any, record: Any = None) -> dict[str, ViewDelta]:
        """Apply one row change; returns the deltas of the views that changed."""
        return _gather(self.ingest_groups(table, op, id, record))

    def ingest_batch(
        self, events: Iterable[tuple[str, str, str, Mapping[str, Any] | None]]
    ) -> dict[str, ViewDelta]:
        """Apply many changes in order; returns the net delta per view.

        Raises ValueError for a malformed event; the events before it stay applied (and
        their effect on the views is settled), the malformed one and those after it are not.
        """
        return _gather(self.ingest_batch_groups(events))

    def ingest_groups(self, table: Any, op: Any, id: Any, record: Any = None,
                      ) -> list[tuple[Collection[str], ViewDelta]]:
        """:meth:`ingest` with the deltas as ``(view ids, delta)`` groups: see
        :meth:`ingest_batch_groups`."""
        token = gcpolicy.pause()
        try:
            try:
                self._apply(table, op, id, record)
            except BaseException:
                self._flush()
                raise
            return self._flush()
        finally:
            gcpolicy.resume(token)

    def ingest_batch_groups(
        self, events: Iterable[tuple[str, str, str, Mapping[str, Any] | None]]
    ) -> list[tuple[Collection[str], ViewDelta]]:
        """:meth:`ingest_batch` with the deltas as ``(view ids, delta)`` groups, each view in
        one group at most: the form the engine computes them in (every view of a
        materialisation, often of many, shares one delta object), without the dict of one
        entry per view that :meth:`ingest_batch` builds from it. A change reaching a
        materialisation of 100 views costs one group, not 100 entries. The view-id
        collections are the engine's own: read them before the next call, never change them.
        """
        token = gcpolicy.pause()
        try:
            return self._ingest_batch(events)
        finally:
            gcpolicy.resume(token)

    def _ingest_batch(self, events: Iterable[tuple[str, str, str, Mapping[str, Any] | None]]
                      ) -> list[tuple[Collection[str], ViewDelta]]:
        try:
            for event in events:
                if len(event) != 4:
                    raise ValueError("an event is (table, op, id, record)")
                table, op, rid, record = event
                self._apply(table, op, rid, record)
        except BaseException:
            self._flush()
            raise
        return self._flush()

    # ------------------------------------------------------------------ membership
    def _shown(self, mat: Mat) -> Iterable[str]:
        """The top-level rows a materialisation shows."""
        if isinstance(mat, WMat):
            return mat.visible
        circuit = mat.circuit
        plan = circuit.plan
        rows = circuit.rows
        cands: Iterable[str]
        if plan.eq is not None:
            cands = list(plan.candidates(self.store, mat.S, NONE, Cx(self.store)))
        else:
            # every shown row is projected or lazy: the group's rows are the candidates
            proj = mat.proj
            cands = chain(proj.outs, proj.lazy) if proj.lazy else proj.outs.keys()
        holds = mat.holds
        return [r for r in cands if holds(rows.get(r))]

    def _members(self, mat: Mat, shown: Iterable[str] | None = None) -> set[str]:
        proj = mat.proj
        trees = proj.trees
        tree = proj.tree
        out: set[str] = set()
        flat: list[str] = []
        lazy = proj.lazy
        for rid in self._shown(mat) if shown is None else shown:
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

    def _build(self, mat: Mat) -> list[str] | None:
        """Fill a new materialisation from the stored rows; project what it shows (returns
        the rows shown by an implicit materialisation)."""
        circuit = mat.circuit
        plan = circuit.plan
        rows = circuit.rows
        cands: Iterable[str]
        if plan.eq is not None:
            cands = list(plan.candidates(self.store, mat.S, NONE, Cx(self.store)))
        else:
            cands = rows.keys()
        proj = mat.proj
        if isinstance(mat, WMat):
            window.build(mat, cands, rows, self.store, self.deps)
            for rid in proj.dirty:
                if rid in proj.refs:
                    proj.ensure(rid, rows[rid])
            proj.dirty = {}
            if circuit.agg is not None:
                self._fill_groups(mat, mat.visible)
            return None
        pred = plan.pred
        S = mat.S
        outs = proj.outs
        project = proj.project
        shown = [rid for rid in cands if pred(rows[rid], S, NONE, NOLINKS)]
        if plan.star_only:
            # SELECT * of flat rows: the row is its own output and only member
            trees = proj.trees
            for rid in shown:
                if rid not in outs:
                    row = rows[rid]
                    if has_nested(row):
                        project(rid, row, None)
                    else:
                        outs[rid] = row
                        trees[rid] = None
            return shown
        if proj.spec is not None:
            bulk(proj, shown)
            if proj.lazy:
                lz = self._lazy
                lz.setdefault(circuit.table, set()).add(proj)
                lz.setdefault(proj.spec.sub.table, set()).add(proj)
            return shown
        for rid in shown:
            if rid not in outs:
                project(rid, rows[rid], None)
        if circuit.agg is not None:
            self._fill_groups(mat, shown)
        return shown

    def _fill_groups(self, mat: Mat, shown: Iterable[str]) -> None:
        """The groups of a new materialisation of a grouped shape, from its rows'
        contributions (engine.aggregate)."""
        spec = mat.circuit.agg
        assert spec is not None
        outs = mat.proj.outs

        def rows_of() -> list[tuple[str, Any]]:
            return [(r, outs[r]) for r in self._shown(mat)]

        state = mat.agg = AggState(spec, rows_of)
        for rid in shown:
            state.move(rid, None, outs[rid])

    # ------------------------------------------------------------------ ingest
    def _prepare(
        self, table: str, rid: str | None, record: Mapping[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        row = dict(record)
        ident: Any = row.get("id")
        if type(ident) is RecordID and ident.table_name == table:
            return rid_text(ident), row
        if type(ident) is not RecordID:
            if ident is None or ident is NONE:
                if rid is None:
                    raise ValueError("a row without an id")
                ident = parse_record_id(rid)
            else:
                ident = parse_record_id(str(ident))
            row["id"] = ident
        if ident.table_name != table:
            raise ValueError(f"record {record_id_text(ident)} is not in table {table}")
        return rid_text(ident), row

    def _apply(self, table: Any, op: Any, rid: Any, record: Any) -> None:
        if op not in OPS:
            raise ValueError(f"unknown op {op!r} (expected CREATE, UPDATE or DELETE)")
        if not isinstance(table, str) or not table:
            raise ValueError(f"the table must be a non-empty string, got {table!r}")
        if record is not None and type(record) is not dict and not isinstance(record, Mapping):
            raise ValueError(f"a record must be an object, got {type(record).__name__}")
        if (type(rid) is not str and not isinstance(rid, (str, RecordID))) or not rid:
            raise ValueError(f"the record id must be a non-empty string, got {rid!r}")
        ts = self.store.table(table)
        rows = ts.rows
        if isinstance(rid, RecordID):  # tolerated: callers may pass the RecordID itself
            text = rid_text(rid)
        elif rid in rows:
            text = rid  # stored keys are canonical, so a known id is already canonical
        else:
            ident = record.get("id") if record is not None else None
            if type(ident) is RecordID and rid_text(ident) == rid:
                text = rid
            else:
                text = _canon_text(rid)
        old = rows.get(text)
        if old is not None and record is not None and "_00_rv" in record and is_stale(record, old):
            return
        if op == "DELETE":
            if old is None:
                return
            if self._lazy and table in self._lazy:
                self._force_lazy(table, text, old, None)
            ts.delete(text)
            new = None
        else:
            if record is None:
                raise ValueError(f"{op} needs a record")
            text2, new = self._prepare(table, text, record)
            if text2 != text:
                raise ValueError(f"record id {text2} does not match event id {text}")
            if self._lazy and table in self._lazy:
                self._force_lazy(table, text, old, new)
            ts.put(text, new)
        self._propagate(ts, text, old, new)

    def _force_lazy(self, table: str, text: str, old: dict[str, Any] | None,
                    new: dict[str, Any] | None) -> None:
        """Before a write to ``table`` reaches the store: project the lazy rows it may change
        (:mod:`engine.lazy`), so they hold what they showed before it."""
        projs = self._lazy[table]
        for proj in list(projs):
            lazy = proj.lazy
            if not lazy:
                projs.discard(proj)
                continue
            spec = proj.spec
            assert spec is not None  # a group with lazy rows has its lazy form
            ptable = proj.plan.table
            if ptable == table:
                if new is not None and deep(new, spec.name):
                    proj.end_lazy()  # its values may hold members: no laziness from now on
                    projs.discard(proj)
                elif text in lazy:
                    proj.force(text)
            else:
                for r in (old, new):
                    p = child_parent(spec.link, ptable, r)
                    if p is None:
                        continue
                    if p is ...:
                        proj.end_lazy()
                        projs.discard(proj)
                        break
                    t = rid_text(p)
                    if t in lazy:
                        proj.force(t)

    def _propagate(
        self, ts: TableStore, text: str, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> None:
        table = ts.name
        circuits = self.by_table.get(table)
        joins = self.store.joins.get(table)
        changed = None
        if (circuits or joins) and old is not None and new is not None:
            changed = _changed_fields(old, new)
            if not changed:
                # the same row again (type-exact): nothing computed from it can change
                # (checked only where shapes or subqueries read the table: elsewhere the
                # dependency lookups below are cheaper than the comparison)
                return
        if joins:
            # subqueries over the table (engine.join): the windows the row moves in or out of
            for j in list(joins):
                j.touch(text, old, new, changed, self._mark)
        if circuits:
            # an UPDATE: skip shapes that read none of the changed fields
            for circuit in circuits:
                if changed is not None:
                    fields = circuit.fields
                    if fields is not None and changed.isdisjoint(fields):
                        continue
                if circuit.explicit:
                    self._requalify_all(circuit, text, old, new)
                else:
                    ch = circuit.changed
                    if text not in ch:
                        ch[text] = old
                    self._circuits.add(circuit)
        if self._semis:
            semis = self._semis.get(table)
            if semis:
                for inner in list(semis):
                    inner.update(text, new, self._flipped)
            linked = self._semi_links.get(text)
            if linked:
                for inner in list(linked):
                    inner.reread(text, self._flipped)
        if self.deps.quals:
            self._requalify_readers(text)
            for r in (old, new):
                if r is not None:
                    # an edge: the views whose condition traversed from either end
                    for end in ("in", "out"):
                        v = r.get(end)
                        if type(v) is RecordID:
                            self._requalify_readers(graph_token(table, end, ikey(v)))
        if self._hops:
            self._hop_requalify(old if old is not None else new)
        self.deps.touch_proj(table, text, old, new, self._mark)

    def _requalify_readers(self, token: str) -> None:
        """Qualify again the rows whose condition read ``token`` (a linked record's id, a
        semi-join's key, an edge's end)."""
        w = self.deps.quals.get(token)
        if not w:
            return
        for order, ids in list(w.items()):
            rows = order.circuit.rows
            for r in list(ids):
                window.requalify(order, r, rows.get(r), self.store, self.deps, self._mats)
            for proj in order.circuit.projs.values():
                if proj.dirty:
                    self._projs.add(proj)

    def _flipped(self, token: str) -> None:
        """A value entered or left a semi-join's set: the rows that asked for it."""
        self._requalify_readers(token)
        readers = self.deps.reads.get(token)
        if readers:
            for proj, ids in list(readers.items()):
                for rid in list(ids):
                    self._mark(proj, rid, token)
    def _hop_requalify(self, written: dict[str, Any] | None) -> None:
        """Re-qualify the rows whose one-hop link predicate reads the written record: those
        holding its link in a field the predicate follows (the table's index on it)."""
        if written is None:
            return
        key = ikey(written.get("id"))
        store, deps, pending = self.store, self.deps, self._mats
        for c in self._hops:
            hop = c.plan.qhop
            assert hop is not None
            t = store.table(c.table)
            rows = t.rows
            reached = False
            for f in hop:
                hits = t.index(f).get(key)
                if not hits:
                    continue
                reached = True
                for r in list(hits):
                    row = rows.get(r)
                    if row is None:
                        continue
                    for o in _orders(c.lookup(row)[0]):
                        window.requalify(o, r, row, store, deps, pending)
            if reached:
                for proj in c.projs.values():
                    if proj.dirty:
                        self._projs.add(proj)

    def _mark(self, proj: Proj, rid: str, token: Any) -> None:
        proj.mark(rid, token)
        self._projs.add(proj)

    def _requalify_all(self, circuit: Circuit, text: str, old: dict[str, Any] | None,
                       new: dict[str, Any] | None) -> None:
        a, exact_a = circuit.lookup(old) if old is not None else ([], True)
        b, exact_b = circuit.lookup(new) if new is not None else ([], True)
        store, deps, pending = self.store, self.deps, self._mats
        requalify = window.requalify
        # the materialisations' orders (pages of one filter share one): each once
        ob = _orders(b)
        if exact_a and exact_b:
            # the index is the filter: an order keeps or takes the row exactly when the new
            # row's lookup names it
            if a is not b:
                for o in _orders(a):
                    if o not in ob:
                        requalify(o, text, None, store, deps, pending)
            for o in ob:
                requalify(o, text, new, store, deps, pending, True)
        else:
            cands = ob if a is b else {**_orders(a), **ob}
            for o in cands:
                requalify(o, text, new, store, deps, pending)
        for proj in circuit.projs.values():
            if text in proj.outs:
                proj.mark_row(text, old)
            if proj.dirty:
                self._projs.add(proj)

    # ------------------------------------------------------------------ flush
    def _flush(self) -> list[tuple[Collection[str], ViewDelta]]:
        parts: list[tuple[Collection[str], ViewDelta]] = []
        if self._circuits or self._mats or self._projs:
            self._epoch += 1
            self._settle(parts)
        if self._sync_each_call:
            self.sync_arena()
        return parts

    def _settle(self, out: list[tuple[Collection[str], ViewDelta]]) -> None:
        # `out` collects (view ids, delta) parts, each materialisation (so each view) in one
        # part at most: a materialisation belongs to one circuit, an implicit circuit's single
        # row event reaches its materialisations through `_emit` (in one class each), and
        # every other materialisation through one `acc` entry. _gather builds the result
        # dict once (containers are replaced only when used: a flush runs once per ingest call)
        circuits = self._circuits
        if circuits:
            self._circuits = set()
        wmats = self._mats
        if wmats:
            self._mats = set()
        projs = self._projs
        if projs:
            self._projs = set()
        else:
            projs = set()
        # 1. implicit circuits: classify each changed row once for all materialisations
        moves: list[tuple[Circuit, str, list[Mat], list[Mat], list[Mat]]] = []
        for c in circuits:
            rows = c.rows
            held_now = c.held_now
            cprojs = c.projs.values()
            for rid, r0 in c.changed.items():
                st, le, en = c.classify(r0, rows.get(rid))
                if st or le or en:
                    held_now[rid] = bool(st or en)
                    moves.append((c, rid, st, le, en))
                    for proj in cprojs:
                        proj.mark_row(rid, r0)
                        projs.add(proj)
        # 2. projection groups: re-project, project or drop the rows once (`held` notes the
        # materialisations showing each row in `matched`, read by step 3)
        for proj in projs:
            matched = proj.circuit.matched
            if matched:
                matched.clear()
        for proj in projs:
            if proj.dirty:
                proj.process(proj.circuit.held)
        # 3. row events of implicit circuits: (row, shown before and after, left, entered)
        events: dict[Circuit, list[tuple[str, list[Mat], list[Mat], list[Mat]]]] = {}
        for c, rid, st, le, en in moves:
            evs = events.get(c)
            if evs is None:
                events[c] = [(rid, st, le, en)]
            else:
                evs.append((rid, st, le, en))
        acc: dict[Mat, Any] = {}
        touch = _touch
        for proj in projs:
            recs = proj.recs
            if not recs:
                continue
            c = proj.circuit
            explicit = c.explicit
            changed = c.changed
            for rid, rec in recs.items():
                if (not explicit and rid in changed) or not rec.changed():
                    continue
                row = c.rows.get(rid)
                if row is None:
                    continue
                if explicit:
                    for m in c.candidates(row):
                        if m.proj is proj and rid in m.visible and rid not in m.vis0:
                            touch(acc, m, rid, True, True)
                else:
                    ms = c.matched.get(rid)
                    if ms is None:
                        ms = c.matching(row)
                    if len(c.projs) > 1:
                        ms = [m for m in ms if m.proj is proj]
                    evs = events.get(c)
                    if evs is None:
                        events[c] = [(rid, ms, [], [])]
                    else:
                        evs.append((rid, ms, [], []))
        acc_get = acc.get
        for c, evs in events.items():
            if len(evs) == 1:
                # one row event: every materialisation gets at most one entry
                self._emit(c, *evs[0], out)
                continue
            # several row events (a batch): entries per materialisation, in event order; a
            # change reaches every materialisation of a range prefix, so this loop is the
            # batch's hottest (inline, the row's change tested once when one group serves)
            only = next(iter(c.projs.values())) if len(c.projs) == 1 else None
            for rid, st, le, en in evs:
                if st:
                    if only is not None:
                        held = only.recs.get(rid)
                        if held is None or not held.changed():
                            st = []
                    else:
                        st = [m for m in st if (h := m.proj.recs.get(rid)) is not None
                              and h.changed()]
                for ms, ent in ((st, (rid, True, True)), (le, (rid, True, False)),
                                (en, (rid, False, True))):
                    for m in ms:
                        cur = acc_get(m)
                        if cur is None:
                            acc[m] = ent
                        elif type(cur) is tuple:
                            acc[m] = [cur, ent]
                        else:
                            cur.append(ent)
        for m in wmats:
            vis = m.visible
            for rid, was in m.vis0.items():
                now = rid in vis
                if was or now:
                    touch(acc, m, rid, was, now)
        if self._grouped:
            _regroup(events, acc)
        # 4. deltas (shared objects when every member involved is clean)
        used = projs
        if acc:
            used = set(projs)
            # materialisations with the same entries share the delta when every row's
            # members are clean (it depends on the rows alone): in a batch, those of one
            # range prefix all have the same entries
            merged: dict[tuple[Proj, tuple[Any, ...]], Any] = {}
            # per group, entry -> (row's members clean, its delta): a batch's entry reaches
            # many materialisations
            parts: dict[Proj, dict[tuple[str, bool, bool], Any]] = {}
            for m, e in acc.items():
                proj = m.proj
                used.add(proj)
                if type(e) is tuple:
                    rec = proj.rec(e[0])
                    if rec.clean:
                        d = rec.delta(e[1], e[2])
                        if m.cnt is not None:
                            apply_counts([e], proj.rec, m.cnt)
                    else:
                        d = self._counted(m, [e])
                else:
                    key = (proj, tuple(e))
                    got = merged.get(key, _UNSEEN)
                    if got is _UNSEEN:
                        part = parts.get(proj)
                        if part is None:
                            part = parts[proj] = {}
                        ds = []
                        for ent in e:
                            p = part.get(ent)
                            if p is None:
                                r = proj.rec(ent[0])
                                p = part[ent] = (r.clean, r.delta(ent[1], ent[2]))
                            if not p[0]:
                                break
                            if p[1] is not None:
                                ds.append(p[1])
                        else:
                            got = merge_clean(ds)
                        if got is _UNSEEN:
                            got = _NOT_CLEAN
                        merged[key] = got
                    if got is _NOT_CLEAN:
                        d = self._counted(m, e)
                    else:
                        d = got
                        if m.cnt is not None:
                            apply_counts(e, proj.rec, m.cnt)
                if d is not None:
                    out.append((m.vt, d))
        for c in circuits:
            c.changed.clear()
            c.held_now.clear()
        for proj in used:
            proj.finish()
        for m in wmats:
            m.vis0.clear()

    def _emit(self, c: Circuit, rid: str, st: list[Mat], le: list[Mat], en: list[Mat],
              out: list[tuple[Collection[str], ViewDelta]]) -> None:
        """Deltas of one row event of an implicit circuit: each class of materialisations
        (shown before and after, left, entered) shares one delta when the row's members
        are clean."""
        single = len(c.projs) == 1
        rec = None
        if single:
            rec = next(iter(c.projs.values())).recs.get(rid)
            if rec is None:
                return
        for ms, was, now in ((st, True, True), (le, True, False), (en, False, True)):
            if not ms:
                continue
            if rec is not None and rec.clean:
                d = rec.delta(was, now)
                if c.counted:
                    for m in ms:
                        if m.cnt is not None:
                            apply_counts([(rid, was, now)], m.proj.rec, m.cnt)
                if d is not None:
                    if len(ms) == 1:
                        out.append((ms[0].vt, d))
                    else:
                        # a change can reach hundreds of materialisations: their views are
                        # gathered once per list and reused while no view (un)registers
                        key = tuple(ms)
                        vcache = self._vcache
                        views = vcache.get(key)
                        if views is None:
                            if len(vcache) >= _VCACHE_MAX:
                                vcache.clear()
                            views = vcache[key] = dict.fromkeys(_chain(map(_VT, ms)))
                        out.append((views, d))
                continue
            for m in ms:
                proj = m.proj
                r = proj.recs.get(rid)
                if r is None or (was and now and not r.changed()):
                    continue
                if r.clean:
                    d = r.delta(was, now)
                    if m.cnt is not None:
                        apply_counts([(rid, was, now)], proj.rec, m.cnt)
                else:
                    d = self._counted(m, [(rid, was, now)])
                if d is not None:
                    out.append((m.vt, d))

    def _counted(self, m: Mat, entries: list[tuple[str, bool, bool]]) -> ViewDelta | None:
        """The delta of a materialisation whose entries hold members other rows may hold too:
        from the rows holding each member when they are few, else through its member counts
        (engine.delta.counted_delta), counted now if it has none yet."""
        cnt = m.cnt
        fresh = cnt is None
        proj = m.proj
        if cnt is None:
            # few rows hold each member (a comment moving to another thread): ask them
            d = owner_delta(entries, proj.rec, proj.owners, m.holds_start, m.holds_now)
            if d is not MANY:
                return d
            cnt = self._count_members(m)
        return counted_delta(entries, proj.rec, cnt, fresh, m.holds_start, m.holds_now)

    def _count_members(self, m: Mat, shown: Iterable[str] | None = None) -> dict[str, int]:
        """Count, per nested member, the rows ``m`` shows now whose tree holds it; kept on
        the materialisation (and moved by every later flush) from now on."""
        proj = m.proj
        lazy = proj.lazy
        tree = proj.tree
        cnt: dict[str, int] = {}
        get = cnt.get
        for rid in self._shown(m) if shown is None else shown:
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


def _first(pair: tuple[Any, Any]) -> Any:
    return pair[0]


def _regroup(events: dict[Circuit, list[tuple[str, list[Mat], list[Mat], list[Mat]]]],
             acc: dict[Mat, Any]) -> None:
    """Move the flush's rows between the groups of grouped materialisations: each entry
    (row, shown before, shown now) takes its old contribution out and puts the new one in
    (engine.aggregate)."""
    for c, evs in events.items():
        if c.agg is None:
            continue
        for rid, st, le, en in evs:
            for ms, was, now in ((st, True, True), (le, True, False), (en, False, True)):
                for m in ms:
                    _regroup_row(m, rid, was, now)
    for m, e in acc.items():
        if m.agg is None or not isinstance(m, WMat):
            continue  # implicit materialisations came through their events
        for ent in ([e] if type(e) is tuple else e):
            _regroup_row(m, ent[0], ent[1], ent[2])


def _regroup_row(m: Mat, rid: str, was: bool, now: bool) -> None:
    rec = m.proj.rec(rid)
    old = rec.t0.get(rid) if was else None
    new = rec.t1.get(rid) if now else None
    if old is new:
        return
    state = m.agg
    assert state is not None
    state.move(rid, old, new)


def _gather(parts: list[tuple[Collection[str], ViewDelta]]) -> dict[str, ViewDelta]:
    """The deltas by view id from (view ids, delta) parts (a view is in one part at most, see
    `_settle`): one dict built in place instead of merging one temporary dict per part."""
    if not parts:
        return {}
    views, d = parts[0]
    out = dict.fromkeys(views, d)
    for views, d in parts[1:]:
        for v in views:
            out[v] = d
    return out


def _orders(mats: list[Any]) -> dict[Order, None]:
    """The orders of explicit materialisations (engine.window), each once, in their order."""
    return dict.fromkeys([m.order for m in mats])


def _touch(acc: dict[Mat, Any], m: Mat, rid: str, was: bool, now: bool) -> None:
    cur = acc.get(m)
    if cur is None:
        acc[m] = (rid, was, now)
    elif type(cur) is tuple:
        acc[m] = [cur, (rid, was, now)]
    else:
        cur.append((rid, was, now))


def _changed_fields(old: dict[str, Any], new: dict[str, Any]) -> set[str]:
    """Top-level keys whose value differs (type-exact) between two versions of a row."""
    out: set[str] = set()
    get = old.get
    fresh = 0
    for k, v in new.items():
        o = get(k, _MISSING)
        if o is v:
            continue  # the same object (a caller that copies the row and sets one field)
        if o is _MISSING:
            fresh += 1
            out.add(k)
        elif not same(o, v):
            out.add(k)
    if len(old) > len(new) - fresh:
        out.update(k for k in old if k not in new)  # some field was removed
    return out


_MISSING = object()
_UNSEEN = object()  # no delta computed yet for these entries (see _settle)
_NOT_CLEAN = object()  # entries whose delta depends on the materialisation


_CANON: dict[str, str] = {}


def _canon_text(text: str) -> str:
    """Canonical record-id text of an event id (``user:⟨a-b⟩`` -> ``user:`a-b```)."""
    c = _CANON.get(text)
    if c is None:
        if len(_CANON) > 1_000_000:
            _CANON.clear()
        try:
            c = rid_text(parse_record_id(text))
        except ValueError as exc:
            raise ValueError(f"invalid record id {text!r}") from exc
        _CANON[text] = c
    return c


def _hashable(key: Any) -> Any:
    """A correlation key as a set member (record ids and scalars are; others by their text)."""
    try:
        hash(key)
    except TypeError:
        return repr(key)
    return key
