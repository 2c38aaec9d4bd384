"""The incremental view engine: shapes, materialisations, dependency indexes, deltas.

Structure (see ``engine/README.md``):

- A **shape** (:class:`Circuit`) is a normalised query with its compiled :class:`Plan`. Views
  whose queries differ only in constants share it.
- A **materialisation** (:class:`Mat`) is a shape plus slot values; view ids with the same
  shape and the same values share one (``views``). It keeps the qualifying set of the
  top-level table (ordered when a LIMIT/START window needs it), the visible window, each
  visible row's output and the Z-set of members (record id -> weight, a record embedded in
  several places weighs more than 1).
- A change to table T reaches: materialisations of shapes over T whose equality slot matches
  the old or new row (``Circuit.index``), materialisations whose predicate/sort read the
  record through a link (``qual_watch``), visible rows whose projection read the record
  (``proj_watch``) and visible rows whose subqueries scanned T with a matching correlation
  key (``sub_watch``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from sortedcontainers import SortedList  # type: ignore[import-untyped]
from surrealdb import RecordID

from engine.arena import Arena, RowStore
from engine.errors import QueryRejected
from engine.parser import parse
from engine.plan import Cx, Plan, tree_members
from engine.shape import normalise, order_source
from engine.store import Store, TableStore, ikey, rid_text
from engine.values import NONE, Duration, parse_record_id, record_id_text
from engine.versions import is_stale

OPS = frozenset({"CREATE", "UPDATE", "DELETE"})
_EMPTY: frozenset[str] = frozenset()


class ViewDelta(NamedTuple):
    """What one view's membership did: records that entered, left, or changed content."""

    added: frozenset[str]
    removed: frozenset[str]
    updated: frozenset[str]


class _NoLinks:
    """Context for predicates that never follow links (nothing to record)."""

    __slots__ = ()

    def fetch(self, rid: RecordID) -> None:  # pragma: no cover - never called
        raise AssertionError("a link-free predicate followed a link")


_NOLINKS = _NoLinks()


def _exact_key(v: Any) -> Any:
    """A hashable key that distinguishes every value (types included): identical params."""
    t = type(v)
    if t is list or t is tuple:
        return ("a", tuple(_exact_key(x) for x in v))
    if t is dict:
        return ("o", tuple(sorted((k, _exact_key(x)) for k, x in v.items())))
    if t is RecordID:
        return ("r", v.table_name, _exact_key(v.id))
    if t is Duration:
        return ("d", v.elapsed)
    try:
        hash(v)
    except TypeError:
        return ("x", t.__name__, repr(v))
    return (t.__name__, v)


class Circuit:
    """One shape: its plan and its materialisations, indexed by the equality slot's value."""

    def __init__(self, shape: Any) -> None:
        self.shape = shape
        self.plan = Plan(shape)
        self.table = self.plan.table
        self.mats: dict[Any, Mat] = {}
        # Every top-level conjunct `field = $slot` indexes materialisations by value, so a
        # row change reaches only the materialisations whose constants match the row.
        eqs = _eq_conjuncts(shape.where)
        self.eq_fields: tuple[str, ...] = tuple(f for f, _ in eqs)
        self.eq_slots: tuple[int, ...] = tuple(i for _, i in eqs)
        self.eq_field: str | None = self.eq_fields[0] if eqs else None
        self.index: dict[Any, set[Mat]] = {}
        # Top-level fields the whole view reads (None: all, e.g. SELECT *); an UPDATE that
        # changes none of them cannot change the view.
        self.fields: frozenset[str] | None = _read_fields(shape)
        self.unindexed: set[Mat] = set()

    def _mat_key(self, mat: Mat) -> Any:
        S = mat.S
        return tuple(ikey(S[i]) for i in self.eq_slots)

    def add(self, mat: Mat) -> None:
        if not self.eq_slots:
            self.unindexed.add(mat)
        else:
            self.index.setdefault(self._mat_key(mat), set()).add(mat)

    def remove(self, mat: Mat) -> None:
        if not self.eq_slots:
            self.unindexed.discard(mat)
        else:
            k = self._mat_key(mat)
            s = self.index.get(k)
            if s is not None:
                s.discard(mat)
                if not s:
                    del self.index[k]

    def affected(
        self, old: dict[str, Any] | None, new: dict[str, Any] | None, keep: bool = False
    ) -> list[Mat]:
        """Materialisations a change of one row of this table can affect; ``keep``: the
        caller knows no equality field changed (one lookup serves both versions)."""
        fields = self.eq_fields
        if not fields:
            return list(self.unindexed)
        out: list[Mat] = []
        ko = None
        index = self.index
        if old is not None:
            ko = tuple([ikey(old.get(f, NONE)) for f in fields])
            s = index.get(ko)
            if s:
                out.extend(s)
            if keep:
                return out
        if new is not None:
            kn = tuple([ikey(new.get(f, NONE)) for f in fields])
            if kn != ko:
                s = index.get(kn)
                if s:
                    out.extend(s)
        return out


def _changed_fields(old: dict[str, Any], new: dict[str, Any]) -> set[str]:
    """Top-level keys whose value differs (type-exact) between two versions of a row."""
    out = {k for k, v in new.items() if k not in old or not same(old[k], v)}
    out.update(k for k in old if k not in new)
    return out


def _expr_fields(e: Any, acc: set[str], parent: bool) -> bool:
    """Collect first segments of field paths (or of $parent paths when ``parent``);
    False when the whole row is read."""
    k = e[0]
    if k == "field" and not parent:
        acc.add(e[1][0])
    elif k == "parent" and parent:
        if not e[1]:
            return False
        acc.add(e[1][0])
    elif k in ("and", "or"):
        return _expr_fields(e[1], acc, parent) and _expr_fields(e[2], acc, parent)
    elif k == "not":
        return _expr_fields(e[1], acc, parent)
    elif k == "cmp":
        return _expr_fields(e[2], acc, parent) and _expr_fields(e[3], acc, parent)
    elif k == "array":
        return all(_expr_fields(x, acc, parent) for x in e[1])
    elif k == "object":
        return all(_expr_fields(x, acc, parent) for x in e[2])
    return True


def _read_fields(q: Any) -> frozenset[str] | None:
    """The top-level fields of a row that a view reads (None when it reads the whole row)."""
    acc: set[str] = {"id"}
    for it in q.items:
        if it.kind == "all":
            return None
        if it.kind in ("field", "linkall"):
            acc.add(it.path[0])
        elif it.kind == "sub":
            sub = it.sub
            if sub.where is not None and not _expr_fields(sub.where, acc, True):
                return None
    if q.where is not None and not _expr_fields(q.where, acc, False):
        return None
    for path, _desc in q.order:
        acc.add(path[0])
        src = order_source(q, path)
        acc.add(src[0])
    for path in q.fetch:
        acc.add(path[0])
    return frozenset(acc)


def _eq_conjuncts(where: Any) -> list[tuple[str, int]]:
    """Top-level conjuncts ``field = $slot`` (single-segment field) of a WHERE clause."""
    out: list[tuple[str, int]] = []
    stack = [where] if where is not None else []
    while stack:
        e = stack.pop()
        if e[0] == "and":
            stack.append(e[2])
            stack.append(e[1])
        elif e[0] == "cmp" and e[1] == "=":
            a, b = e[2], e[3]
            for f, other in ((a, b), (b, a)):
                if f[0] == "field" and len(f[1]) == 1 and other[0] == "slot":
                    if all(f[1][0] != x for x, _ in out):
                        out.append((f[1][0], other[1]))
                    break
    return out


class Mat:
    """One materialised result (a shape with slot values), shared by identical views."""

    __slots__ = (
        "S",
        "__weakref__",
        "after",
        "before",
        "circuit",
        "dirty",
        "entries",
        "hi",
        "istate",
        "key",
        "lo",
        "ordered",
        "outs",
        "partial",
        "pdeps",
        "plan",
        "qdeps",
        "touched",
        "trees",
        "upd",
        "views",
        "vis_list",
        "visible",
        "zs",
    )

    def __init__(self, circuit: Circuit, S: tuple[Any, ...], key: Any) -> None:
        self.circuit = circuit
        self.plan = circuit.plan
        self.S = S
        self.key = key
        self.views: set[str] = set()
        self.entries: dict[str, Any] = {}
        self.ordered: SortedList | None = SortedList() if self.plan.ordered else None
        self.lo, self.hi = self.plan.window(S)
        self.visible: set[str] = set()
        self.vis_list: list[str] = []
        self.outs: dict[str, Any] = {}
        # member id -> content, per visible row; None when the row's only member is itself
        self.trees: dict[str, dict[str, Any] | None] = {}
        self.zs: dict[str, int] = {}
        self.qdeps: dict[str, set[str]] = {}
        self.pdeps: dict[str, tuple[set[str], list[Any]]] = {}
        self.dirty: set[str] = set()
        self.touched: dict[str, bool] = {}
        self.upd: set[str] = set()
        self.before: dict[str, Any] = {}
        # row id -> what changed elsewhere (linked record texts, subquery scan keys)
        self.partial: dict[str, set[Any]] = {}
        # row id -> (per-item values, per-item (reads, subs)) for item-wise re-projection
        self.istate: dict[str, tuple[list[Any], list[Any]]] = {}
        self.after: dict[str, Any] = {}


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
        self.circuits: dict[Any, Circuit] = {}
        self.by_table: dict[str, list[Circuit]] = {}
        self.views: dict[str, Mat] = {}
        # record id text -> {mat: row ids whose predicate/sort read it}
        self.qual_watch: dict[str, dict[Mat, set[str]]] = {}
        # record id text -> {mat: visible row ids whose projection read it}
        self.proj_watch: dict[str, dict[Mat, set[str]]] = {}
        # table -> field -> key -> {mat: visible row ids}; field None: the whole table
        self.sub_watch: dict[str, dict[str | None, dict[Any, dict[Mat, set[str]]]]] = {}
        self._pending: set[Mat] = set()
        # the row change being propagated: (old row, new row, content differs, new row flat)
        self._change: tuple[Any, Any, bool, bool] = (None, None, True, False)
        # Parsed queries by text: many views share a text (per-user views), parsing is pure.
        self._parsed: dict[str, Any] = {}

    # ------------------------------------------------------------------ public API
    def load(self, table: str, rows: Iterable[Mapping[str, Any]]) -> None:
        """Bulk bootstrap: store rows (dicts with ``id``) without reporting deltas."""
        if self.by_table.get(table) or self._watched(table):
            events = []
            for row in rows:
                rid = row.get("id")
                text = rid_text(rid) if type(rid) is RecordID else _canon_text(str(rid))
                events.append((table, "CREATE", text, row))
            self.ingest_batch(events)
            return
        ts = self.store.table(table)
        for row in rows:
            text, new = self._prepare(table, None, row)
            ts.put(text, new)
        if self._sync_each_call:
            self.sync_arena(table)

    def register(self, view_id: str, surql: str, params: Mapping[str, Any] | None = None) -> set[str]:
        """Register (or replace) a view; returns its members. Raises QueryRejected."""
        if not isinstance(view_id, str) or not view_id:
            raise QueryRejected("the view id must be a non-empty string")
        q = self._parsed.get(surql) if isinstance(surql, str) else None
        if q is None:
            q = parse(surql)
            if len(self._parsed) > 10_000:
                self._parsed.clear()
            self._parsed[surql] = q
        shape, S = normalise(q, params)
        if view_id in self.views:
            self.unregister(view_id)
        circuit = self.circuits.get(shape)
        if circuit is None:
            circuit = Circuit(shape)
            self.circuits[shape] = circuit
            self.by_table.setdefault(circuit.table, []).append(circuit)
        key = _exact_key(S)
        mat = circuit.mats.get(key)
        if mat is None:
            mat = Mat(circuit, S, key)
            circuit.mats[key] = mat
            circuit.add(mat)
            self._build(mat)
        mat.views.add(view_id)
        self.views[view_id] = mat
        return set(mat.zs)

    def unregister(self, view_id: str) -> None:
        """Forget a view (unknown ids are ignored)."""
        mat = self.views.pop(view_id, None)
        if mat is None:
            return
        mat.views.discard(view_id)
        if mat.views:
            return
        self._teardown(mat)

    def members(self, view_id: str) -> set[str]:
        """Record ids currently in the view's result tree."""
        mat = self.views.get(view_id)
        if mat is None:
            raise KeyError(view_id)
        return set(mat.zs)

    def result(self, view_id: str) -> list[Any]:
        """The view's current result rows, in order (for debugging and tests)."""
        mat = self.views.get(view_id)
        if mat is None:
            raise KeyError(view_id)
        if mat.plan.bounded:
            ids = mat.vis_list
        else:
            rows = self.store.table(mat.plan.table).rows
            cx = Cx(self.store)
            ids = sorted(mat.visible, key=lambda r: mat.plan.entry(rows[r], r, cx))
        return [mat.outs[r] for r in ids]

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

    def ingest(
        self, table: str, op: str, id: str, record: Mapping[str, Any] | None = None
    ) -> dict[str, ViewDelta]:
        """Apply one row change; returns the deltas of the views that changed."""
        try:
            self._apply(table, op, id, record)
        except BaseException:
            self._flush()
            raise
        return self._flush()

    def ingest_batch(
        self, events: Iterable[tuple[str, str, str, Mapping[str, Any] | None]]
    ) -> dict[str, ViewDelta]:
        """Apply many changes in order; returns the net delta per view.

        Raises ValueError for a malformed event; the events before it stay applied (and
        their effect on the views is settled), the malformed one and those after it are not.
        """
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

    # ------------------------------------------------------------------ ingest
    def _watched(self, table: str) -> bool:
        if table in self.sub_watch:
            return True
        prefix = _table_prefix(table)
        return any(k.startswith(prefix) for k in self.qual_watch) or any(
            k.startswith(prefix) for k in self.proj_watch
        )

    def _prepare(
        self, table: str, rid: str | None, record: Mapping[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        row = dict(record)
        ident = row.get("id")
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

    def _apply(self, table: str, op: str, rid: str, record: Mapping[str, Any] | None) -> None:
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
        # engine.versions: a version-less row over a versioned one is stale, except an
        # id-only DELETE (no version to compare).
        if (old is not None and record is not None and (op != "DELETE" or "_00_rv" in record)
                and is_stale(record, old)):
            return
        if op == "DELETE":
            if old is None:
                return
            ts.delete(text)
            new = None
        else:
            if record is None:
                raise ValueError(f"{op} needs a record")
            text2, new = self._prepare(table, text, record)
            if text2 != text:
                raise ValueError(f"record id {text2} does not match event id {text}")
            ts.put(text, new)
        self._propagate(ts, text, old, new)

    def _propagate(
        self, ts: TableStore, text: str, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> None:
        table = ts.name
        pending = self._pending
        circuits = self.by_table.get(table)
        if circuits:
            requalify = self._requalify
            # an UPDATE: skip shapes that read none of the changed fields, and look up the
            # materialisations once when no equality field changed
            changed = _changed_fields(old, new) if old is not None and new is not None else None
            # what the SELECT * fast path needs to know of this change, computed once
            self._change = (old, new, changed is None or bool(changed),
                            new is not None and not _has_nested(new))
            for circuit in circuits:
                keep = False
                if changed is not None:
                    fields = circuit.fields
                    if fields is not None and changed.isdisjoint(fields):
                        continue
                    keep = changed.isdisjoint(circuit.eq_fields)
                for mat in circuit.affected(old, new, keep):
                    requalify(mat, text, new)
        if self.qual_watch:
            w = self.qual_watch.get(text)
            if w:
                for mat, ids in list(w.items()):
                    rows = self.store.table(mat.plan.table).rows
                    for r in list(ids):
                        self._requalify(mat, r, rows.get(r))
        if self.proj_watch:
            w = self.proj_watch.get(text)
            if w:
                for mat, ids in w.items():
                    part = mat.partial
                    for r in ids:
                        toks = part.get(r)
                        if toks is None:
                            part[r] = {text}
                        else:
                            toks.add(text)
                    pending.add(mat)
        sw = self.sub_watch.get(table)
        if sw:
            for field, keyed in sw.items():
                keys: list[Any]
                if field is None:
                    keys = [None]
                elif field == "id":
                    keys = [ikey((old if old is not None else new or {}).get("id"))]
                else:
                    keys = []
                    if old is not None:
                        keys.append(ikey(old.get(field, NONE)))
                    if new is not None:
                        kn = ikey(new.get(field, NONE))
                        if not keys or kn != keys[0]:
                            keys.append(kn)
                for key in keys:
                    h = keyed.get(key)
                    if not h:
                        continue
                    token = (table, field, key)
                    for mat, ids in h.items():
                        part = mat.partial
                        for r in ids:
                            toks = part.get(r)
                            if toks is None:
                                part[r] = {token}
                            else:
                                toks.add(token)
                        pending.add(mat)

    # ------------------------------------------------------------------ operators
    def _requalify(self, mat: Mat, rid: str, row: dict[str, Any] | None) -> None:
        """Re-evaluate one top-level row of a materialisation (filter + order + window)."""
        plan = mat.plan
        if plan.fast_filter:
            # Unordered, link-free predicate: membership of the row is all that can change.
            entries = mat.entries
            if row is not None and plan.pred(row, mat.S, NONE, _NOLINKS):
                if rid not in entries:
                    entries[rid] = 1
                    mat.visible.add(rid)
                elif plan.star_only and mat.trees.get(rid, 0) is None:
                    # A flat SELECT * row that stays: its new content is the row itself.
                    old, new, differs, flat = self._change
                    if new is not row:
                        differs, flat = True, not _has_nested(row)
                    old_out = mat.outs.get(rid) if flat else None
                    if old_out is not None:
                        if (differs if old_out is old else not same(old_out, row)):
                            mat.upd.add(rid)
                        mat.outs[rid] = row
                        self._pending.add(mat)
                        return
                mat.dirty.add(rid)
                self._pending.add(mat)
            elif rid in entries:
                del entries[rid]
                mat.visible.discard(rid)
                self._drop_row(mat, rid)
                self._pending.add(mat)
            return
        old_e = mat.entries.get(rid)
        new_e = None
        if row is not None:
            if plan.qlinks:
                cx = Cx(self.store)
                if plan.pred(row, mat.S, NONE, cx):
                    new_e = plan.entry(row, rid, cx) if plan.ordered else 1
                self._set_qdeps(mat, rid, cx.reads)
            else:
                if plan.pred(row, mat.S, NONE, _NOLINKS):
                    new_e = plan.entry(row, rid, _NOLINKS) if plan.ordered else 1
        elif plan.qlinks:
            self._set_qdeps(mat, rid, set())
        if old_e is None and new_e is None:
            return
        self._pending.add(mat)
        if not plan.ordered:
            if new_e is None:
                del mat.entries[rid]
                mat.visible.discard(rid)
                self._drop_row(mat, rid)
            else:
                if old_e is None:
                    mat.entries[rid] = new_e
                    mat.visible.add(rid)
                mat.dirty.add(rid)
            return
        if old_e == new_e:
            if rid in mat.visible:
                mat.dirty.add(rid)
            return
        ordered = mat.ordered
        assert ordered is not None
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
        self._rewindow(mat)
        if rid in mat.visible:
            mat.dirty.add(rid)

    def _rewindow(self, mat: Mat) -> None:
        ordered = mat.ordered
        assert ordered is not None
        new_list = [e[-1] for e in ordered.islice(mat.lo, mat.hi)]
        new_set = set(new_list)
        old_set = mat.visible
        for r in old_set - new_set:
            self._drop_row(mat, r)
        for r in new_set - old_set:
            mat.dirty.add(r)
        mat.visible = new_set
        mat.vis_list = new_list

    def _set_qdeps(self, mat: Mat, rid: str, reads: set[str]) -> None:
        old = mat.qdeps.get(rid)
        if old == reads:
            return
        qw = self.qual_watch
        if old:
            for t in old - reads:
                w = qw.get(t)
                if w is not None:
                    s = w.get(mat)
                    if s is not None:
                        s.discard(rid)
                        if not s:
                            del w[mat]
                            if not w:
                                del qw[t]
        if reads:
            for t in reads if not old else reads - old:
                qw.setdefault(t, {}).setdefault(mat, set()).add(rid)
            mat.qdeps[rid] = reads
        else:
            mat.qdeps.pop(rid, None)

    def _zs(self, mat: Mat, member: str, w: int, content: Any) -> None:
        """Add weight ``w`` to a member; remembers contents so a member that moves between
        rows (left one place, appeared in another) is still seen as updated."""
        zs = mat.zs
        c = zs.get(member, 0)
        if member not in mat.touched:
            mat.touched[member] = c > 0
        if w < 0:
            if member not in mat.before:
                mat.before[member] = content
        else:
            mat.after[member] = content
        c += w
        if c:
            zs[member] = c
        else:
            del zs[member]

    def _drop_row(self, mat: Mat, rid: str) -> None:
        """A row left the visible window: retract its members and dependencies."""
        mat.dirty.discard(rid)
        mat.partial.pop(rid, None)
        mat.istate.pop(rid, None)
        if rid not in mat.outs:
            return
        out = mat.outs.pop(rid)
        tree = mat.trees.pop(rid)
        if tree is None:
            if type(out) is dict and type(out.get("id")) is RecordID:
                self._zs(mat, rid, -1, out)
        else:
            for m, content in tree.items():
                self._zs(mat, m, -1, content)
        self._set_pdeps(mat, rid, None)

    def _project_items(
        self, mat: Mat, rid: str, row: dict[str, Any], tokens: set[Any] | None
    ) -> tuple[dict[str, Any], tuple[set[str], list[Any]]]:
        """Project item by item; with ``tokens`` (what changed elsewhere) only the items that
        read one of them are recomputed (a lateral join re-runs only its own subquery)."""
        plan = mat.plan
        store = self.store
        S = mat.S
        state = mat.istate.get(rid) if tokens is not None else None
        if state is None:
            vals: list[Any] = []
            ideps: list[tuple[set[str], list[Any]] | None] = []
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
        mat.istate[rid] = (vals, ideps)
        reads: set[str] = set()
        subs: list[Any] = []
        for d in ideps:
            if d is not None:
                reads |= d[0]
                subs.extend(d[1])
        return plan.assemble(row, vals), (reads, subs)

    def _project_row(self, mat: Mat, rid: str, tokens: set[Any] | None = None) -> None:
        plan = mat.plan
        row = self.store.table(plan.table).rows[rid]
        if plan.star_only and not _has_nested(row):
            # SELECT * of a flat row: the row is its own output and its only member.
            outs = mat.outs
            old_out = outs.get(rid)
            if old_out is None:
                if rid in mat.trees:
                    mat.trees.pop(rid)
                if type(row.get("id")) is RecordID:
                    self._zs(mat, rid, 1, row)
            else:
                old_tree = mat.trees.get(rid)
                if old_tree is not None:
                    for m, content in old_tree.items():
                        if m != rid:
                            self._zs(mat, m, -1, content)
                if not same(old_out, row):
                    mat.upd.add(rid)
            outs[rid] = row
            mat.trees[rid] = None
            return
        if plan.simple:
            out = plan.project(self.store, mat.S, row, _NOLINKS)  # type: ignore[arg-type]
            nested = _has_nested(out)
            tree: dict[str, Any] | None = None
            if nested:
                tree = {}
                tree_members(out, tree)
            reads = None
        elif plan.fetch:
            cx = Cx(self.store)
            out = plan.project(self.store, mat.S, row, cx)
            tree = {}
            tree_members(out, tree)
            reads = (cx.reads, cx.subs)
        else:
            out, reads = self._project_items(mat, rid, row, tokens)
            tree = {}
            tree_members(out, tree)
        old_out = mat.outs.get(rid)
        had = rid in mat.outs
        old_tree = mat.trees.get(rid) if had else {}
        if had and old_tree is None:
            assert old_out is not None
            old_tree = {rid: old_out} if type(old_out.get("id")) is RecordID else {}
        new_tree = tree
        if new_tree is None:
            new_tree = {rid: out} if type(out.get("id")) is RecordID else {}
        assert old_tree is not None
        for m, content in old_tree.items():
            if m not in new_tree:
                self._zs(mat, m, -1, content)
        for m, content in new_tree.items():
            if m not in old_tree:
                self._zs(mat, m, 1, content)
            elif not same(old_tree[m], content):
                mat.upd.add(m)
        mat.outs[rid] = out
        mat.trees[rid] = tree
        if reads is not None:
            self._set_pdeps(mat, rid, reads)
        elif had:
            self._set_pdeps(mat, rid, None)

    def _set_pdeps(self, mat: Mat, rid: str, deps: tuple[set[str], list[Any]] | None) -> None:
        old = mat.pdeps.pop(rid, None)
        if old is not None:
            for t in old[0]:
                w = self.proj_watch.get(t)
                if w is not None:
                    s = w.get(mat)
                    if s is not None:
                        s.discard(rid)
                        if not s:
                            del w[mat]
                            if not w:
                                del self.proj_watch[t]
            for table, field, key in old[1]:
                tw = self.sub_watch.get(table)
                if tw is None:
                    continue
                fw = tw.get(field)
                if fw is None:
                    continue
                kw = fw.get(key)
                if kw is None:
                    continue
                s = kw.get(mat)
                if s is not None:
                    s.discard(rid)
                    if not s:
                        del kw[mat]
                        if not kw:
                            del fw[key]
                            if not fw:
                                del tw[field]
                                if not tw:
                                    del self.sub_watch[table]
        if deps is None:
            return
        reads, subs = deps
        if not reads and not subs:
            return
        for t in reads:
            self.proj_watch.setdefault(t, {}).setdefault(mat, set()).add(rid)
        for table, field, key in subs:
            self.sub_watch.setdefault(table, {}).setdefault(field, {}).setdefault(
                key, {}
            ).setdefault(mat, set()).add(rid)
        mat.pdeps[rid] = deps

    def _settle(self, mat: Mat) -> ViewDelta | None:
        """Project dirty visible rows and turn the Z-set changes into a delta."""
        if not mat.dirty and not mat.partial and not mat.touched and not mat.upd:
            return None
        if mat.dirty or mat.partial:
            visible = mat.visible
            dirty = mat.dirty
            for rid in list(dirty):
                if rid in visible:
                    self._project_row(mat, rid)
            for rid, toks in list(mat.partial.items()):
                if rid in visible and rid not in dirty:
                    self._project_row(mat, rid, toks)
            dirty.clear()
            mat.partial.clear()
        zs = mat.zs
        touched = mat.touched
        if not touched:
            # no weight moved: only content changes (the common UPDATE of a member)
            upd = mat.upd
            if not upd:
                return None
            updated = frozenset([m for m in upd if m in zs])
            upd.clear()
            return ViewDelta(_EMPTY, _EMPTY, updated) if updated else None
        if mat.before:
            after = mat.after
            for m, content in mat.before.items():
                if touched.get(m) and m in zs and m in after and not same(content, after[m]):
                    mat.upd.add(m)
            mat.before.clear()
        mat.after.clear()
        added = frozenset([m for m, was in touched.items() if not was and m in zs])
        removed = frozenset([m for m, was in touched.items() if was and m not in zs])
        updated = frozenset([m for m in mat.upd if m in zs and m not in added])
        touched.clear()
        mat.upd.clear()
        if added or removed or updated:
            return ViewDelta(added, removed, updated)
        return None

    def _flush(self) -> dict[str, ViewDelta]:
        out: dict[str, ViewDelta] = {}
        pending = self._pending
        self._pending = set()
        for mat in pending:
            d = self._settle(mat)
            if d is not None:
                for v in mat.views:
                    out[v] = d
        if self._sync_each_call:
            self.sync_arena()
        return out

    # ------------------------------------------------------------------ build / teardown
    def _build(self, mat: Mat) -> None:
        plan = mat.plan
        ts = self.store.table(plan.table)
        rows = ts.rows
        cx = Cx(self.store)
        cands: Iterable[str]
        if plan.eq is not None:
            cands = list(plan.candidates(self.store, mat.S, NONE, cx))
        else:
            cands = rows.keys()
        pred = plan.pred
        S = mat.S
        entries = mat.entries
        if plan.star_only and not plan.ordered and not plan.qlinks:
            # Bulk path for SELECT * of flat rows: each row is its own output and member.
            outs, trees, zs, dirty = mat.outs, mat.trees, mat.zs, mat.dirty
            for rid in cands:
                row = rows[rid]
                if pred(row, S, NONE, _NOLINKS):
                    entries[rid] = 1
                    if type(row.get("id")) is RecordID and not _has_nested(row):
                        outs[rid] = row
                        trees[rid] = None
                        zs[rid] = 1
                    else:
                        dirty.add(rid)
            mat.visible = set(entries)
            self._settle(mat)
            return
        if plan.qlinks:
            for rid in cands:
                row = rows[rid]
                cx = Cx(self.store)
                if pred(row, S, NONE, cx):
                    entries[rid] = plan.entry(row, rid, cx) if plan.ordered else 1
                self._set_qdeps(mat, rid, cx.reads)
        else:
            ordered = plan.ordered
            for rid in cands:
                row = rows[rid]
                if pred(row, S, NONE, _NOLINKS):
                    entries[rid] = plan.entry(row, rid, _NOLINKS) if ordered else 1
        if plan.ordered:
            assert mat.ordered is not None
            mat.ordered.update(entries.values())
            self._rewindow(mat)
        else:
            mat.visible = set(entries)
            mat.dirty.update(entries)
        self._settle(mat)

    def _teardown(self, mat: Mat) -> None:
        circuit = mat.circuit
        circuit.mats.pop(mat.key, None)
        circuit.remove(mat)
        for rid in list(mat.qdeps):
            self._set_qdeps(mat, rid, set())
        for rid in list(mat.pdeps):
            self._set_pdeps(mat, rid, None)
        self._pending.discard(mat)
        if not circuit.mats:
            del self.circuits[circuit.shape]
            lst = self.by_table.get(circuit.table, [])
            if circuit in lst:
                lst.remove(circuit)
            if not lst:
                self.by_table.pop(circuit.table, None)


def same(a: Any, b: Any) -> bool:
    """Type-exact equality of result values (1 and 1.0 differ, as a client sees them)."""
    if a is b:
        return True
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is dict:
        if len(a) != len(b):
            return False
        for k, v in a.items():
            if k not in b or not same(v, b[k]):
                return False
        return True
    if ta is list or ta is tuple:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if ta is RecordID:
        return bool(a.table_name == b.table_name) and same(a.id, b.id)
    return bool(a == b)


def _has_nested(out: Any) -> bool:
    for v in out.values():
        t = type(v)
        if t is dict or t is list:
            return True
    return False


def _table_prefix(table: str) -> str:
    return record_id_text(RecordID(table, "x"))[:-1]


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
