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
- Rows are projected and deltas built when a call ends (:mod:`engine.flush`), once per
  batch, so ``ingest_batch`` yields the net change.

A write's path reads forward, one module per step: this facade validates nothing itself and
hands each event to :mod:`engine.write` (check, store, note what it reaches in
:class:`~engine.flush.Pending`), then, once per call, to :mod:`engine.flush` (classify,
project, build the deltas); :mod:`engine.membership` answers what a materialisation shows.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from itertools import islice
from typing import Any

from surrealdb import RecordID

from engine import gcpolicy, membership, window
from engine.arena import Arena, RowStore
from engine.circuit import Circuit, Mat, WMat, exact_key
from engine.compile import graph_token
from engine.delta import ViewDelta, same
from engine.deps import Deps, table_prefix
from engine.errors import QueryRejected
from engine.flush import Pending, gather, settle
from engine.lazy import warm
from engine.membership import build, count_members
from engine.parser import parse_cached
from engine.plan import Cx
from engine.proj import Proj
from engine.shape import normalise
from engine.store import Store, ikey, rid_text
from engine.write import WritePath, canon_text, prepare

__all__ = ["Circuit", "Mat", "ViewDelta", "ViewEngine", "WMat", "same"]

_CACHED_MEMBERS = 256  # larger member sets are kept for one materialisation at a time


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
        self.store.deps = self.deps
        self.circuits: dict[Any, Circuit] = {}
        self.views: dict[str, Mat] = {}
        # what the writes of a call reached, for the flush at its end (engine.flush)
        self.pending = Pending()
        # the write path and the indexes it consults (engine.write); the facade shares them
        self.writes = WritePath(self.store, self.deps, self.pending)
        self.by_table = self.writes.by_table
        self._lazy = self.writes.lazy
        self._hops = self.writes.hops
        self._semis = self.writes.semis
        self._semi_links = self.writes.semi_links
        # flushes that changed something: a materialisation's cached member set is valid
        # while the count has not moved (many views registering the same per-user query)
        self._epoch = 0
        # grouped shapes registered (their materialisations keep groups: engine.aggregate)
        self._grouped = 0
        # the one materialisation holding a member set larger than _CACHED_MEMBERS: views
        # 2..n of a large view registered one after another (the usual burst) copy its set
        # instead of walking every member again, and memory holds one such set, not one per
        # materialisation
        self._big_mcache: Mat | None = None
        # member sets computed by walking a materialisation (views answered from a cached
        # set do not count): registration work a test can count
        self.member_walks = 0

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
                text = rid_text(rid) if type(rid) is RecordID else canon_text(str(rid))
                events.append((table, "CREATE", text, row))
            self._ingest_batch(events)
            self.store.table(table).keep_links()
            return
        ts = self.store.table(table)
        for row in rows:
            text, new = prepare(table, None, row)
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
            shown = build(self.store, self.deps, self._lazy, mat)
            if circuit.plan.may_share:
                # members held by several rows: the view's counts from the start (else the
                # first write holding such a member would count the whole view)
                count_members(self.store, mat, shown)
        mat.views.add(view_id)
        mat.vt[view_id] = None
        if self.pending.vcache:
            self.pending.vcache = {}
        self.views[view_id] = mat
        cached = mat.mcache
        if cached is not None and cached[0] == self._epoch:
            return set(cached[1])  # another view of it registered since the last change
        members = membership.members(self.store, mat, shown)
        self.member_walks += 1
        if len(members) > _CACHED_MEMBERS:
            old = self._big_mcache
            if old is not None and old is not mat:
                old.mcache = None
            self._big_mcache = mat
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
        if self.pending.vcache:
            self.pending.vcache = {}
        if mat.views:
            return
        mat.mcache = None
        if self._big_mcache is mat:
            self._big_mcache = None
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
            shown = membership.shown(self.store, mat)
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
        return membership.members(self.store, mat)

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
            ids = sorted(membership.shown(self.store, mat), key=lambda r: plan.entry(rows[r], r, cx))
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
        if proj.lazy and proj.spec is not None:
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
        self.views = {}
        self.writes.clear()
        self.pending.clear()
        self.deps.clear()
        for joins in self.store.joins.values():
            for j in list(joins):
                j.clear()
                j.plan.forget_join(j)
        self.store.joins = {}
        self.store.jlinks = {}

    def __del__(self) -> None:
        self.close()

    # The entry points take Any where they validate the value themselves (ValueError): the
    # compiled engine (engine.native) would otherwise answer a wrong type with TypeError.
    def ingest(self, table: Any, op: Any, id: Any, record: Any = None) -> dict[str, ViewDelta]:
        """Apply one row change; returns the deltas of the views that changed."""
        return gather(self.ingest_groups(table, op, id, record))

    def ingest_batch(
        self, events: Iterable[tuple[str, str, str, Mapping[str, Any] | None]]
    ) -> dict[str, ViewDelta]:
        """Apply many changes in order; returns the net delta per view.

        Raises ValueError for a malformed event; the events before it stay applied (and
        their effect on the views is settled), the malformed one and those after it are not.
        """
        return gather(self.ingest_batch_groups(events))

    def ingest_groups(self, table: Any, op: Any, id: Any, record: Any = None,
                      ) -> list[tuple[Collection[str], ViewDelta]]:
        """:meth:`ingest` with the deltas as ``(view ids, delta)`` groups: see
        :meth:`ingest_batch_groups`."""
        token = gcpolicy.pause()
        try:
            try:
                self.writes.apply(table, op, id, record)
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
                self.writes.apply(table, op, rid, record)
        except BaseException:
            self._flush()
            raise
        return self._flush()

    # ------------------------------------------------------------------ flush
    def _flush(self) -> list[tuple[Collection[str], ViewDelta]]:
        parts: list[tuple[Collection[str], ViewDelta]] = []
        if self.pending.any():
            self._epoch += 1
            settle(self.pending, self.store, self._grouped > 0, parts)
        if self._sync_each_call:
            self.sync_arena()
        return parts


def _first(pair: tuple[Any, Any]) -> Any:
    return pair[0]


def _hashable(key: Any) -> Any:
    """A correlation key as a set member (record ids and scalars are; others by their text)."""
    try:
        hash(key)
    except TypeError:
        return repr(key)
    return key
