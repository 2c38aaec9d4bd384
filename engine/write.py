"""A write's path through the engine, up to the flush: check the event, store the row, and
note what it reaches.

:meth:`WritePath.apply` validates one row change and stores it (after projecting the lazy
rows it may change, :mod:`engine.lazy`); :meth:`WritePath.propagate` then notes what the
change reaches, for the flush (:mod:`engine.flush`) at the end of the call:

- implicit circuits over the table: the changed row, classified by the flush;
- explicit circuits: their windows re-qualify the row now (:mod:`engine.window`);
- subqueries over the table (:mod:`engine.join`), semi-join sets (:mod:`engine.semijoin`),
  rows whose condition read the record through a link or an edge, one-hop link predicates;
- projected rows that read the record (``Deps.touch_proj``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from surrealdb import RecordID

from engine import window
from engine.circuit import Circuit, Order
from engine.compile import graph_token
from engine.delta import same
from engine.deps import Deps
from engine.flush import Pending
from engine.lazy import child_parent, deep, reaching
from engine.proj import Proj
from engine.semijoin import InnerSet
from engine.store import Store, TableStore, ikey, rid_text
from engine.values import NONE, parse_record_id, record_id_text
from engine.versions import is_stale

OPS = frozenset({"CREATE", "UPDATE", "DELETE"})


def check_change(table: Any, op: Any, rid: Any, record: Any) -> None:
    """The rules of one row change, wherever one enters (the engine's write, the scheduler's
    WAL, the replica): ValueError saying what is wrong. The op is CREATE, UPDATE or DELETE;
    the table a non-empty string; the id a non-empty record id string or a RecordID; the
    record an object, absent (None) only for a DELETE."""
    _check_op_table(table, op)
    if (type(rid) is not str and not isinstance(rid, (str, RecordID))) or not rid:
        raise ValueError(f"the record id must be a non-empty string, got {rid!r:.80}")
    _check_record(op, record)


def check_change_body(table: Any, op: Any, record: Any) -> None:
    """``check_change`` before the id is known: for a caller that takes the id from the
    record when the change carries none (the replica), and checks it when resolving it."""
    _check_op_table(table, op)
    _check_record(op, record)


def _check_op_table(table: Any, op: Any) -> None:
    if type(op) is not str or op not in OPS:
        raise ValueError(f"unknown op {op!r:.40} (expected CREATE, UPDATE or DELETE)")
    if not isinstance(table, str) or not table:
        raise ValueError(f"the table must be a non-empty string, got {table!r:.80}")


def _check_record(op: str, record: Any) -> None:
    if record is None:
        if op != "DELETE":
            raise ValueError(f"{op} needs a record")
    elif type(record) is not dict and not isinstance(record, Mapping):
        raise ValueError(f"a record must be an object, got {type(record).__name__}")


class WritePath:
    """The engine's indexes a write consults, and the write path over them."""

    def __init__(self, store: Store, deps: Deps, pending: Pending) -> None:
        self.store = store
        self.deps = deps
        self.pending = pending
        self.by_table: dict[str, list[Circuit]] = {}
        # table -> projection groups with lazy rows reading it (engine.lazy)
        self.lazy: dict[str, set[Proj]] = {}
        # explicit shapes whose predicate follows links one hop (Plan.qhop): a write to a
        # record reaches the rows linking to it through the table's index on those fields
        self.hops: list[Circuit] = []
        self.hop_rows = 0  # rows qualified again through a hop (a work count tests read)
        # table -> the live sets of semi-joins over it (engine.semijoin), and record -> the
        # sets with a row that read it through a link
        self.semis: dict[str, set[InnerSet]] = {}
        self.semi_links: dict[str, dict[Any, None]] = {}

    def clear(self) -> None:
        """Forget every view's indexes (the engine's close)."""
        self.by_table.clear()
        self.lazy.clear()
        self.hops.clear()

    def apply(self, table: Any, op: Any, rid: Any, record: Any) -> None:
        """Validate one row change (ValueError), store it and note what it reaches."""
        check_change(table, op, rid, record)
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
                text = canon_text(rid)
        old = rows.get(text)
        if old is not None and record is not None and "_00_rv" in record and is_stale(record, old):
            return
        if op == "DELETE":
            if old is None:
                return
            if self.lazy and table in self.lazy:
                self._force_lazy(table, text, old, None)
            ts.delete(text)
            new = None
        else:
            text2, new = prepare(table, text, record)
            if text2 != text:
                raise ValueError(f"record id {text2} does not match event id {text}")
            if self.lazy and table in self.lazy:
                self._force_lazy(table, text, old, new)
            ts.put(text, new)
        self.propagate(ts, text, old, new)

    def _force_lazy(self, table: str, text: str, old: dict[str, Any] | None,
                    new: dict[str, Any] | None) -> None:
        """Before a write to ``table`` reaches the store: project the lazy rows it may change
        (:mod:`engine.lazy`), so they hold what they showed before it."""
        projs = self.lazy[table]
        for proj in list(projs):
            lazy = proj.lazy
            if not lazy:
                projs.discard(proj)
                continue
            spec = proj.spec
            ptable = proj.plan.table
            if spec is None:
                # rows reading link paths (engine.lazy): the row itself, and the rows whose
                # paths read the written record
                if proj.pspec is None:
                    projs.discard(proj)
                    continue
                if ptable == table and text in lazy:
                    proj.force(text)
                row = old if old is not None else new
                if row is not None and lazy:
                    for hit in reaching(proj, table, ikey(row["id"])):
                        if hit in proj.lazy:
                            proj.force(hit)
                continue
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

    def propagate(
        self, ts: TableStore, text: str, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> None:
        """Note what a stored change reaches, for the flush (see the module docstring)."""
        table = ts.name
        circuits = self.by_table.get(table)
        joins = self.store.joins.get(table)
        pending = self.pending
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
                j.touch(text, old, new, changed, pending.mark)
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
                    pending.circuits.add(circuit)
        jlinks = self.store.jlinks
        if jlinks:
            # subqueries whose WHERE read this record through a link (engine.join)
            js = jlinks.get(text)
            if js:
                for j in list(js):
                    j.relink(text, pending.mark)
        if self.semis:
            semis = self.semis.get(table)
            if semis:
                for inner in list(semis):
                    inner.update(text, new, self._flipped)
            linked = self.semi_links.get(text)
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
        if self.hops:
            self._hop_requalify(old, new)
        self.deps.touch_proj(table, text, old, new, pending.mark)

    def _requalify_readers(self, token: str) -> None:
        """Qualify again the rows whose condition read ``token`` (a linked record's id, a
        semi-join's key, an edge's end)."""
        w = self.deps.quals.get(token)
        if not w:
            return
        pending = self.pending
        for order, ids in list(w.items()):
            rows = order.circuit.rows
            for r in list(ids):
                window.requalify(order, r, rows.get(r), self.store, self.deps, pending.mats)
            for proj in order.circuit.projs.values():
                if proj.dirty:
                    pending.projs.add(proj)

    def _flipped(self, inner: InnerSet, k: Any, token: str) -> None:
        """A value entered or left a semi-join's set: the rows that asked for it."""
        self._requalify_readers(token)
        if inner.keyed:
            self._requalify_keyed(inner, k)
        readers = self.deps.reads.get(token)
        if readers:
            mark = self.pending.mark
            for proj, ids in list(readers.items()):
                for rid in list(ids):
                    mark(proj, rid, token)

    def _requalify_keyed(self, inner: InnerSet, k: Any) -> None:
        """Qualify again, in each order testing a field of its rows against ``inner``, the
        rows holding a value of key ``k`` there (the table's equality index: a superset of
        those whose condition reached the test, which is all a requalification needs)."""
        ik = inner.index_key(k)
        store, deps, mats = self.store, self.deps, self.pending.mats
        for order, field in list(inner.keyed.items()):
            t = store.table(order.circuit.table)
            hits = t.index(field).get(ik)
            if not hits:
                continue
            rows = t.rows
            for r in list(hits):
                window.requalify(order, r, rows.get(r), store, deps, mats)
            for proj in order.circuit.projs.values():
                if proj.dirty:
                    self.pending.projs.add(proj)

    def _hop_requalify(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        """Re-qualify the rows whose one-hop link predicate reads the written record: those
        holding its link in a field the predicate follows (the table's index on it). An
        update that changes none of the fields a shape reads through the link qualifies none
        of its rows again (a thread's title changed: its comments are not tested against
        every view's `thread.category IN $list`)."""
        written = old if old is not None else new
        if written is None:
            return
        key = ikey(written.get("id"))
        store, deps, pending = self.store, self.deps, self.pending.mats
        for c in self.hops:
            hop = c.plan.qhop
            assert hop is not None
            fields = c.hop_reads
            if fields is not None and old is not None and new is not None and all(
                    same(old.get(f, NONE), new.get(f, NONE)) for f in fields):
                continue
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
                    self.hop_rows += 1
                    for o in _orders(c.lookup(row)[0]):
                        window.requalify(o, r, row, store, deps, pending)
            if reached:
                for proj in c.projs.values():
                    if proj.dirty:
                        self.pending.projs.add(proj)

    def _requalify_all(self, circuit: Circuit, text: str, old: dict[str, Any] | None,
                       new: dict[str, Any] | None) -> None:
        a, exact_a = circuit.lookup(old) if old is not None else ([], True)
        b, exact_b = circuit.lookup(new) if new is not None else ([], True)
        store, deps, pending = self.store, self.deps, self.pending.mats
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
                self.pending.projs.add(proj)


def prepare(table: str, rid: str | None, record: Mapping[str, Any]
            ) -> tuple[str, dict[str, Any]]:
    """A stored copy of a record of ``table`` with its id as a RecordID, and that id's
    canonical text (ValueError for a row without an id or of another table)."""
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


def _orders(mats: list[Any]) -> dict[Order, None]:
    """The orders of explicit materialisations (engine.window), each once, in their order."""
    return dict.fromkeys([m.order for m in mats])


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
_CANON: dict[str, str] = {}


def canon_text(text: str) -> str:
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
