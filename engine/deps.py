"""Dependency indexes: which rows read which records beyond themselves.

- ``reads``: record id text -> {projection group: projected rows whose projection read it}
  (``link.field``, ``link.*``, FETCH, ``id = $parent.x`` lookups);
- ``scans``: table -> field -> key -> {projection group: projected rows whose subqueries
  scanned that table with that correlation key} (field None: the whole table);
- ``quals``: record id text -> {materialisation: rows whose predicate or sort key read it}
  (views whose WHERE/ORDER BY follows a link);
- :class:`Readers`: the same two-way index for one inner query (a subquery's linked filter,
  a semi-join's inner set), registered in an engine-wide index of such owners per record.

Projection dependencies are registered once per projection group (shared by every
materialisation showing the row), not once per materialisation.
"""

from __future__ import annotations

from typing import Any

from engine.store import ikey
from engine.values import NONE, RecordID, record_id_text

Scan = tuple[str, str | None, Any]


def table_prefix(table: str) -> str:
    """The prefix of every record id text of ``table``."""
    return record_id_text(RecordID(table, "x"))[:-1]


class Deps:
    """The engine's dependency indexes (see the module docstring)."""

    __slots__ = ("quals", "reads", "scans")

    def __init__(self) -> None:
        self.reads: dict[str, dict[Any, set[str]]] = {}
        self.scans: dict[str, dict[str | None, dict[Any, dict[Any, set[str]]]]] = {}
        self.quals: dict[str, dict[Any, set[str]]] = {}

    def clear(self) -> None:
        """Forget every dependency (the engine closes)."""
        self.reads = {}
        self.scans = {}
        self.quals = {}

    def watched(self, table: str) -> bool:
        """True when some row depends on rows of ``table`` (a load must then propagate)."""
        if table in self.scans:
            return True
        prefix = table_prefix(table)
        return any(k.startswith(prefix) for k in self.quals) or any(
            k.startswith(prefix) for k in self.reads)

    # -- projection dependencies ----------------------------------------------------------
    def set_proj(self, proj: Any, rid: str, old: tuple[set[str], list[Any]] | None,
                 new: tuple[set[str], list[Any]] | None) -> None:
        """Replace the registrations of one projected row (``None``: none). A subquery token
        is a scan ``(table, field, key)`` or a join window (engine.join), which counts its
        parents: windows read before and after stay registered throughout."""
        if new is not None:
            for t in new[1]:
                if type(t) is not tuple:
                    t.add(proj, rid)
        if old is not None:
            reads = self.reads
            for t in old[0]:
                w = reads.get(t)
                if w is not None:
                    s = w.get(proj)
                    if s is not None:
                        s.discard(rid)
                        if not s:
                            del w[proj]
                            if not w:
                                del reads[t]
            for t in old[1]:
                if type(t) is tuple:
                    self._unscan(proj, rid, t[0], t[1], t[2])
            for t in old[1]:
                if type(t) is not tuple:
                    t.drop(proj, rid)
        if new is None:
            return
        if new[0]:
            reads = self.reads
            for t in new[0]:
                w = reads.get(t)
                if w is None:
                    reads[t] = {proj: {rid}}
                else:
                    s = w.get(proj)
                    if s is None:
                        w[proj] = {rid}
                    else:
                        s.add(rid)
        scans = self.scans
        for t in new[1]:
            if type(t) is not tuple:
                continue
            table, field, key = t
            tw = scans.get(table)
            if tw is None:
                tw = scans[table] = {}
            fw = tw.get(field)
            if fw is None:
                fw = tw[field] = {}
            kw = fw.get(key)
            if kw is None:
                fw[key] = {proj: {rid}}
            else:
                s = kw.get(proj)
                if s is None:
                    kw[proj] = {rid}
                else:
                    s.add(rid)

    def _unscan(self, proj: Any, rid: str, table: str, field: str | None, key: Any) -> None:
        tw = self.scans.get(table)
        if tw is None:
            return
        fw = tw.get(field)
        if fw is None:
            return
        kw = fw.get(key)
        if kw is None:
            return
        s = kw.get(proj)
        if s is None:
            return
        s.discard(rid)
        if not s:
            del kw[proj]
            if not kw:
                del fw[key]
                if not fw:
                    del tw[field]
                    if not tw:
                        del self.scans[table]

    def touch_proj(self, table: str, text: str, old: dict[str, Any] | None,
                   new: dict[str, Any] | None, mark: Any) -> None:
        """A row of ``table`` changed: ``mark(proj, rid, token)`` every projected row that read
        it or scanned for it."""
        w = self.reads.get(text) if self.reads else None
        if w:
            for proj, ids in list(w.items()):
                for r in list(ids):
                    mark(proj, r, text)
        sw = self.scans.get(table)
        if not sw:
            return
        for field, keyed in list(sw.items()):
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
                for proj, ids in list(h.items()):
                    for r in list(ids):
                        mark(proj, r, token)

    # -- predicate dependencies -----------------------------------------------------------
    def set_qual(self, mat: Any, rid: str, old: set[str] | None, reads: set[str]) -> None:
        """Replace the records one row's predicate/sort read for ``mat``."""
        qw = self.quals
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
        for t in reads if not old else reads - old:
            qw.setdefault(t, {}).setdefault(mat, set()).add(rid)


class Readers:
    """The records an owner's rows read through links, both ways (record -> rows, row ->
    records), and the owner's place in an engine-wide index (record -> owners whose rows read
    it, insertion-ordered, so a write re-evaluates owners in a stable order).

    One owner is a :class:`engine.join.Join` (its linked filter) or a
    :class:`engine.semijoin.InnerSet` (its inner rows): a write to a record looks its owners
    up in the engine's index and asks each for :meth:`rows`."""

    __slots__ = ("by_record", "by_row", "index", "owner")

    def __init__(self, owner: object, index: dict[str, dict[Any, None]]) -> None:
        self.owner = owner
        self.index = index
        self.by_record: dict[str, set[str]] = {}
        self.by_row: dict[str, frozenset[str]] = {}

    def rows(self, record: str) -> set[str] | None:
        """The rows whose last evaluation read ``record`` (None: none)."""
        return self.by_record.get(record)

    def note(self, rid: str, reads: frozenset[str]) -> None:
        """Row ``rid``'s last evaluation read exactly ``reads`` (empty: nothing, or the row
        is gone); moves only the records that differ from its previous evaluation."""
        old = self.by_row.get(rid)
        if old == reads or (old is None and not reads):
            return
        by_record = self.by_record
        if old is not None:
            for rec in old - reads if reads else old:
                ids = by_record.get(rec)
                if ids is not None:
                    ids.discard(rid)
                    if not ids:
                        del by_record[rec]
                        self._unlink(rec)
        if reads:
            self.by_row[rid] = reads
            for rec in reads if old is None else reads - old:
                ids = by_record.get(rec)
                if ids is None:
                    ids = by_record[rec] = set()
                    self.index.setdefault(rec, {})[self.owner] = None
                ids.add(rid)
        else:
            del self.by_row[rid]

    def clear(self) -> None:
        """Forget every row (the owner is dropped)."""
        for rec in self.by_record:
            self._unlink(rec)
        self.by_record = {}
        self.by_row = {}

    def _unlink(self, rec: str) -> None:
        owners = self.index.get(rec)
        if owners is not None:
            owners.pop(self.owner, None)
            if not owners:
                del self.index[rec]
