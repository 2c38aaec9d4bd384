"""Anti-entropy: each view's edges and `_00_query` row read back and compared with what the
SSP holds, a slice of views at a time, so a write by anyone else converges within one pass.

The publisher writes only what changed and assumes nothing else changes edge rows. The
database does (a DELETE takes the edges pointing at the record along; the sequencer and the
user-table rules cover that path exactly), and so can an application with the rights to:
root writing into an edge table, or into `state` and `rowCount` of a `_00_query` row. Every
`SVC_SSP_RECONCILE_MS` (ours, default 1000; 0 = off) the reconciler reads the edges of the
next views in turn (at most `SLICE_VIEWS` views and `SLICE_EDGES` of their members, one
request) and their `_00_query` rows:

* an edge missing, or one that is not a member, is marked for the publisher, which writes it
  from the view's current members like any other change (a mark is only "look at this one
  again", so a needless mark costs a write, never a wrong edge); an edge under an id other
  than the one the SSP gives it (`ssp.naming.edge_id`) is deleted here (the publisher never
  writes that id, so nothing it does can race the delete);
* a row whose `state` is not `ready` or whose `rowCount` is not the one this SSP wrote gets the
  view materialised again (its edges written, then `ready` and the count).

A view with publication pending or in flight, one whose first publication has not committed
(a registration under way), one whose members changed during the read, and one whose table
was dropped with its user are left to the next pass: the read could not tell their edges
apart from a foreign write. A missing row is left alone: deleting the row
is how a view is unregistered (spec), and that rule acts on it.

Cost: one read of at most 2,000 edges per interval; it reads when publication is quiet (no
flush in flight, nothing pending longer than the throttle window), else at most every
`BUSY_SKIPS + 1` intervals. A slice read costs the database ~0.6x the time of writing the
same 2,000 edges again (`loadtests/probe_reconcile_read.py`); `loadtests/bench_ssp.py
--reconcile-ms 0,1000` measures the SSP with and without it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from surrealdb import RecordID

from dbclient import DbError, DbQueryError
from engine.values import record_id_text
from ssp.naming import edge_id

if TYPE_CHECKING:
    from ssp.hub.state import HubState, ViewState

log = logging.getLogger("ssp.hub")

SLICE_VIEWS = 200  # views read back per interval
SLICE_EDGES = 2000  # members of those views read back per interval (at least one view)
# Intervals a slice may wait for publication to be quiet: edge writes come first, but a busy
# SSP still reads one slice every BUSY_SKIPS + 1 intervals.
BUSY_SKIPS = 9


@dataclass
class ReconcileStats:
    """`/debug/memory`'s `reconcile` object."""

    passes: int = 0  # full passes over every view
    views_checked: int = 0
    edges_marked: int = 0  # missing or extra edges found and marked
    rows_repaired: int = 0  # `_00_query` rows found changed (view materialised again)
    last_error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"passes": self.passes, "views_checked": self.views_checked,
                "edges_marked": self.edges_marked, "rows_repaired": self.rows_repaired,
                "last_error": self.last_error}


class Reconciler:
    """Reads back a slice of views per interval (see the module docstring)."""

    def __init__(self, state: HubState) -> None:
        self.state = state
        self.stats = ReconcileStats()
        self._order: list[str] = []  # view ids of the pass under way, next first (reversed)

    async def run(self) -> None:
        """`check_slice` every `reconcile_ms` until cancelled; while publication is busy (a
        flush in flight or falling behind) a slice waits, up to BUSY_SKIPS intervals."""
        interval = self.state.cfg.reconcile_ms / 1000.0
        skipped = 0
        while True:
            await asyncio.sleep(interval)
            if self.state.writers_hold():
                continue
            if not self.state.publisher.quiet() and skipped < BUSY_SKIPS:
                skipped += 1
                continue
            skipped = 0
            try:
                await self.check_slice()
            except DbError as e:
                self.stats.last_error = str(e)[:300]
                log.info("reconciling edges failed (next interval tries again): %s", e)

    def _next_slice(self) -> list[ViewState]:
        state = self.state
        pub = state.publisher
        out: list[ViewState] = []
        edges = 0
        refilled = False
        while len(out) < SLICE_VIEWS:
            if not self._order:
                if out or refilled:
                    break  # the next pass starts at the next interval
                # a new pass (once per slice: every view may be busy)
                self._order = list(reversed(state.views))
                self.stats.passes += 1
                refilled = True
                if not self._order:
                    break
            vid = self._order[-1]
            view = state.views.get(vid)
            if view is not None and out and edges + len(view.members) > SLICE_EDGES:
                break
            self._order.pop()
            if (view is None or view.row_count is None or pub.busy(vid)
                    or view.edge_table in pub.dropped):
                continue  # (no row_count: its first publication has not committed yet)
            out.append(view)
            edges += len(view.members)
        return out

    async def check_slice(self) -> int:
        """Read back the next slice; returns how many views needed a repair."""
        state = self.state
        pub = state.publisher
        views = self._next_slice()
        if not views:
            return 0
        before = {v.view_id: frozenset(v.members) for v in views}
        views, results = await self._read(views)
        rows = {record_id_text(r["id"]): r for r in results[-1] or []}
        self.stats.views_checked += len(views)
        repaired = 0
        foreign: list[RecordID] = []
        for view, edges in zip(views, results, strict=False):
            vid = view.view_id
            if (state.views.get(vid) is not view or pub.busy(vid) or view.members != before[vid]
                    or view.edge_table in pub.dropped):
                continue  # it moved while we read: the next pass looks again
            row = rows.get(record_id_text(view.record))
            if row is not None and (row.get("state") != "ready" or (
                    view.row_count is not None and row.get("rowCount") != view.row_count)):
                log.warning("view %s: its _00_query row was changed by another writer "
                            "(state %r, rowCount %r): materialised again", vid,
                            row.get("state"), row.get("rowCount"))
                pub.materialise(view)
                self.stats.rows_repaired += 1
                repaired += 1
                continue
            have = set()
            for e in edges or ():
                out = e.get("out")
                if not (isinstance(out, RecordID)
                        and e.get("id") == edge_id(view.edge_table, view.record, out)):
                    foreign.append(e.get("id"))  # an id this SSP never writes: nothing to race
                elif e.get("removed") is not True:  # (retired, mode dedicated: not a member)
                    have.add(record_id_text(out))
            wrong = (view.members - have) | (have - view.members)
            if wrong:
                log.warning("view %s: %d edges differ from its members (written by another "
                            "writer): marked for publication", vid, len(wrong))
                pub.mark(vid, wrong)
                self.stats.edges_marked += len(wrong)
                repaired += 1
        if foreign:
            log.warning("%d edges under ids this SSP does not write: deleted", len(foreign))
            await state.pub_db.query("DELETE $ids", {"ids": foreign})
            self.stats.edges_marked += len(foreign)
        return repaired

    async def _read(self, views: list[ViewState]) -> tuple[list[ViewState], list[Any]]:
        """Each view's edge `out`s, then their rows, in one request. A view whose edge table
        is missing (removed by someone else) fails its statement: it is left out, logged."""
        while True:
            sql = "; ".join(f"SELECT id, out, removed FROM {v.edge_table} WHERE in = $q{i}"
                            for i, v in enumerate(views))
            params: dict[str, Any] = {f"q{i}": v.record for i, v in enumerate(views)}
            params["rows"] = [v.record for v in views]
            # The WHERE is for SurrealDB 3.0.x (the Node build, transport http): it refuses a
            # SELECT over an array parameter without one ("Specify a database to use").
            try:
                return views, await self.state.db.query(
                    sql + "; SELECT id, state, rowCount FROM $rows WHERE id != NONE", params,
                    idempotent=True)
            except DbQueryError as e:
                i = e.statement_index
                if i is None or i >= len(views) or len(views) == 1:
                    raise
                log.warning("view %s: its edges cannot be read back: %s", views[i].view_id,
                            e.engine_message)
                views = views[:i] + views[i + 1:]
