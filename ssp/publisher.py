"""Edge publication: view membership written into the database as graph edges.

The hub tells the publisher WHICH members of a view changed (`mark`), never what to write: at
flush time each marked member is looked up in the view's current member set and its edge is
upserted (member, with the row's current `_00_rv`) or deleted (not a member). Coalescing is
therefore free and exact: an add followed by a remove inside one throttle window writes
nothing but a delete of an edge that may not exist, and a failed flush only has to put its
marks back to be retried (a delta is never lost).

One flush = ONE database transaction (bound parameters only; table names are generated
identifiers, see `ssp.naming`) holding, in order: deletes of the prior edges of views being
(re)materialised that are not members now (members are upserted, which leaves the same final
state as "delete all, insert members" without a delete+create pair per unchanged edge), teardowns of unregistered views, edge deletes, edge upserts, and the
`_00_query` `state='ready'`/`rowCount` updates of views whose initial edges it commits.
A flush takes at most `max_ops` operations; the rest stays queued for the next one at once.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from surrealdb import RecordID

from dbclient import Database, DbError, DbTimeout
from engine.values import parse_record_id
from ssp.naming import SINGLE_TABLE, edge_id

log = logging.getLogger("ssp.publisher")

# Admission thresholds for pending deltas (spec, Limits): soft, checked before ingest.
MAX_PENDING_OPS = 100_000
MAX_PENDING_BYTES = 64 * 1024 * 1024
_OP_BYTES = 160  # estimated bytes per pending operation (ids + bookkeeping)
# A (re)materialisation costs a DELETE ... WHERE scan of the view's prior edges besides its
# upserts: count it as this many operations against a flush's budget.
INITIAL_COST = 10
UPSERT_EDGES = ("INSERT RELATION $rows ON DUPLICATE KEY UPDATE rv = $input.rv, "
                "seq = $input.seq")
# UPDATE (never UPSERT): a view unregistered meanwhile must not get its row back.
MARK_READY = "FOR $u IN $ups { UPDATE $u.q MERGE { state: 'ready', rowCount: $u.n } }"
MIN_OPS = 50


@dataclass(eq=False)
class PubView:
    """What the publisher needs of a view (the hub's `ViewState` satisfies it)."""

    view_id: str
    record: RecordID
    edge_table: str
    auth: RecordID | None
    members: set[str]
    generation: int = 0


@dataclass
class Teardown:
    """An unregistered view whose edges and row must go (unless registered again)."""

    view_id: str
    record: RecordID
    edge_table: str
    generation: int


@dataclass
class PublisherStats:
    """Counters reported by /debug/memory and /info."""

    flushes: int = 0
    operations: int = 0
    failures: int = 0
    last_success_ms: int = 0
    last_error: str = ""
    latencies_ms: deque[float] = field(default_factory=lambda: deque(maxlen=20_000))


class Publisher:
    """Coalesces per-view membership changes and writes them in one transaction per flush."""

    def __init__(
        self,
        db: Database,
        *,
        ref_mode: str,
        throttle_ms: int,
        view_lookup: Callable[[str], PubView | None],
        rv_lookup: Callable[[str], Any],
        max_ops: int = 4000,
    ) -> None:
        self.db = db
        self.ref_mode = ref_mode
        self.throttle = throttle_ms / 1000.0
        self.max_ops = max_ops
        self.budget = max_ops  # shrinks after a timed-out flush, grows back on success
        self._view = view_lookup
        self._rv = rv_lookup
        self.dirty: dict[str, set[str]] = {}
        self.initial: dict[str, int] = {}  # view id -> generation to (re)materialise
        self.teardowns: dict[str, Teardown] = {}
        self._since: dict[str, float] = {}  # view id -> monotonic time of its oldest mark
        self.pending_ops = 0
        self.lock = asyncio.Lock()  # held by a flush and by direct row writes of the hub
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self.stats = PublisherStats()
        self._seq = 0

    # ------------------------------------------------------------------ queueing

    def overloaded(self) -> bool:
        """True when pending work is over the admission thresholds (ingest answers 503)."""
        return (self.pending_ops >= MAX_PENDING_OPS
                or self.pending_ops * _OP_BYTES >= MAX_PENDING_BYTES)

    def mark(self, view_id: str, members: Iterable[str], at: float | None = None) -> None:
        """Members of `view_id` whose edge must be brought up to date; `at` is when the
        change arrived (monotonic), the start of the ingest-to-commit latency."""
        s = self.dirty.get(view_id)
        if s is None:
            s = self.dirty[view_id] = set()
            self._since.setdefault(view_id, time.monotonic() if at is None else at)
        before = len(s)
        s.update(members)
        self.pending_ops += len(s) - before
        self._kick()

    def materialise(self, view: PubView) -> None:
        """(Re)write all edges of `view`: prior edges deleted, members inserted, row `ready`."""
        self.teardowns.pop(view.view_id, None)
        self.pending_ops -= len(self.dirty.pop(view.view_id, ()))
        self.initial[view.view_id] = view.generation
        self.pending_ops += len(view.members) + 1
        self._since.setdefault(view.view_id, time.monotonic())
        self._kick()

    def teardown(self, td: Teardown) -> None:
        """Delete the view's edges and `_00_query` row at the next flush."""
        self.pending_ops -= len(self.dirty.pop(td.view_id, ()))
        if td.view_id in self.initial:
            self.initial.pop(td.view_id)
        self.teardowns[td.view_id] = td
        self.pending_ops += 1
        self._kick()

    def _kick(self) -> None:
        self._idle.clear()
        self._wake.set()

    @property
    def pending(self) -> bool:
        """True while anything waits to be written."""
        return bool(self.dirty or self.initial or self.teardowns)

    def oldest_age_ms(self) -> float:
        """Age of the oldest pending mark (0 when idle)."""
        if not self._since:
            return 0.0
        return (time.monotonic() - min(self._since.values())) * 1000

    # ------------------------------------------------------------------ running

    def start(self) -> None:
        """Run the flush loop in the background."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="publisher")

    async def stop(self) -> None:
        """Stop the loop (call `drain` first to flush what is pending)."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def drain(self, timeout: float = 30.0) -> bool:
        """Flush until nothing is pending (shutdown, tests); False when it did not finish."""
        deadline = time.monotonic() + timeout
        while self.pending and time.monotonic() < deadline:
            try:
                await self.flush()
            except DbError:
                await asyncio.sleep(0.2)
        return not self.pending

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            await self._wake.wait()
            if self.throttle > 0:
                # Coalescing window, measured from the oldest pending mark.
                wait = self.throttle - self.oldest_age_ms() / 1000
                if wait > 0:
                    await asyncio.sleep(wait)
            self._wake.clear()
            try:
                await self.flush()
                backoff = 0.1
            except DbError as e:
                self.stats.failures += 1
                self.stats.last_error = str(e)[:300]
                log.warning("edge publication failed (will retry in %.1fs): %s", backoff, e)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                self._wake.set()
            except Exception:  # a bug here must not stop publication for good
                self.stats.failures += 1
                log.exception("edge publication crashed; retrying")
                await asyncio.sleep(1.0)
                self._wake.set()
            if self.pending:
                self._wake.set()
            else:
                self._idle.set()

    async def flush(self) -> int:
        """Write one batch of pending work in one transaction; returns operations written."""
        async with self.lock:
            return await self._flush_locked()

    async def _flush_locked(self) -> int:
        if not self.pending:
            return 0
        budget = self.budget
        stmts: list[tuple[str, dict[str, Any] | None]] = []
        taken_dirty: dict[str, set[str]] = {}
        taken_initial: dict[str, int] = {}
        taken_teardown: dict[str, Teardown] = {}
        ready_updates: list[tuple[RecordID, int]] = []
        inserts: dict[str, list[dict[str, Any]]] = {}
        deletes: list[RecordID] = []
        started: list[float] = []
        self._seq += 1
        seq = self._seq

        for vid, td in list(self.teardowns.items()):
            if budget <= 0:
                break
            taken_teardown[vid] = self.teardowns.pop(vid)
            cur = self._view(vid)
            if cur is not None:
                continue  # registered again since: the teardown is dropped
            stmts.append((f"DELETE {td.edge_table} WHERE in = $q", {"q": td.record}))
            stmts.append(("DELETE $q", {"q": td.record}))
            budget -= 1
        for vid, gen in list(self.initial.items()):
            if budget <= 0:
                break
            view = self._view(vid)
            taken_initial[vid] = self.initial.pop(vid)
            if view is None or view.generation != gen:
                continue
            # Prior edges that are not members go; members are upserted. (Deleting all and
            # re-inserting in one transaction loses the re-inserted ids in SurrealDB 3.2.4:
            # INSERT ... ON DUPLICATE KEY UPDATE treats the deleted record as present.)
            outs = [parse_record_id(m) for m in view.members]
            stmts.append((f"DELETE {view.edge_table} WHERE in = $q AND out NOTINSIDE $outs",
                          {"q": view.record, "outs": outs}))
            rows = inserts.setdefault(view.edge_table, [])
            for m in view.members:
                rows.append(self._edge_row(view, m, seq))
            ready_updates.append((view.record, len(view.members)))
            budget -= len(view.members) + INITIAL_COST
            started.append(self._since.pop(vid, time.monotonic()))
        for vid in list(self.dirty):
            if budget <= 0:
                break
            members = self.dirty[vid]
            if len(members) > budget:
                # A big view is split across flushes; the rest stays marked.
                part = set(itertools.islice(members, budget))
                members.difference_update(part)
                members = part
                started.append(self._since.get(vid, time.monotonic()))
            else:
                del self.dirty[vid]
                started.append(self._since.pop(vid, time.monotonic()))
            taken_dirty[vid] = members
            view = self._view(vid)
            if view is None:
                continue
            for m in members:
                if m in view.members:
                    inserts.setdefault(view.edge_table, []).append(self._edge_row(view, m, seq))
                else:
                    deletes.append(edge_id(view.edge_table, view.record, parse_record_id(m)))
            budget -= len(members)
        if deletes:
            stmts.append(("DELETE $ids", {"ids": deletes}))
        # Every edge row carries its full id (table included), so one INSERT covers all the
        # per-user tables of the flush: statements per flush stay constant, not per user.
        rows = [r for table_rows in inserts.values() for r in table_rows]
        for i in range(0, len(rows), 1000):
            stmts.append((UPSERT_EDGES, {"rows": rows[i:i + 1000]}))
        if ready_updates:
            stmts.append((MARK_READY, {"ups": [{"q": rec, "n": count}
                                               for rec, count in ready_updates]}))
        ops = sum(len(v) for v in taken_dirty.values()) + len(taken_teardown) + sum(
            1 + len(v.members) for v in (self._view(k) for k in taken_initial) if v is not None)
        if stmts:
            t0 = time.monotonic()
            try:
                await self.db.transaction(stmts)
            except BaseException as e:
                self._restore(taken_dirty, taken_initial, taken_teardown)
                if isinstance(e, DbTimeout):
                    # Too big for the database's time limit: retry smaller, never the same.
                    self.budget = max(MIN_OPS, self.budget // 2)
                raise
            self.budget = min(self.max_ops, self.budget + self.budget // 4 + 1)
            now = time.monotonic()
            self.stats.latencies_ms.extend((now - s) * 1000 for s in started)
            log.debug("flushed %d statements in %.1f ms", len(stmts), (now - t0) * 1000)
        for vid in list(self._since):
            if vid not in self.dirty and vid not in self.initial:
                self._since.pop(vid, None)
        self.pending_ops = max(0, self.pending_ops - ops)
        self.stats.flushes += 1
        self.stats.operations += ops
        self.stats.last_success_ms = int(time.time() * 1000)
        return ops

    def _restore(self, dirty: dict[str, set[str]], initial: dict[str, int],
                 teardown: dict[str, Teardown]) -> None:
        # Put the batch back so the next attempt writes it (newer marks merge in).
        now = time.monotonic()
        for vid, members in dirty.items():
            if vid in self.initial or vid in self.teardowns:
                continue
            self.dirty.setdefault(vid, set()).update(members)
            self._since.setdefault(vid, now)
        for vid, gen in initial.items():
            if vid not in self.initial and vid not in self.teardowns:
                self.initial[vid] = gen
                self._since.setdefault(vid, now)
        for vid, td in teardown.items():
            if vid not in self.initial:
                self.teardowns.setdefault(vid, td)

    def _edge_row(self, view: PubView, member: str, seq: int) -> dict[str, Any]:
        out = parse_record_id(member)
        row: dict[str, Any] = {
            "id": edge_id(view.edge_table, view.record, out),
            "in": view.record,
            "out": out,
            "rv": self._rv(member),
            "seq": seq,
        }
        if view.edge_table == SINGLE_TABLE:
            row["auth_id"] = view.auth
        return row
