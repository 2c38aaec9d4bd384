"""Edge publication: view membership written into the database as graph edges.

The hub tells the publisher WHICH members of a view changed (`mark`), never what to write: at
flush time each marked member is looked up in the view's current member set and its edge is
upserted (member, with the row's current `_00_rv`) or deleted (not a member). Coalescing is
therefore free and exact: an add followed by a remove inside one throttle window writes
nothing but a delete of an edge that may not exist, and a failed flush only has to put its
marks back to be retried (a delta is never lost).

One flush = ONE database transaction (bound parameters only; table names are generated
identifiers, see `ssp.naming`) holding, in order: teardowns of unregistered views, edge
removals, edge upserts (every member of a view being (re)materialised included), removals of
those views' prior edges that are not members now (the edges the upserts did not stamp with
this flush's `seq`: the same final state as "delete all, insert members" without a
delete+create pair per unchanged edge), and the `_00_query` `state='ready'`/`rowCount`
updates of views whose initial edges it commits.

A removal deletes the edge in mode `single`. In mode `dedicated` it *retires* the edge
(`removed = true`, the flush's `seq`: an UPDATE, which LIVE subscribers see) and the
`ssp.reaper` deletes retired edges later, when publication leaves the database time; an
upsert of a retired edge (its member came back) clears `removed`. Why: SurrealDB 3.2.4 pays
for every table defined in the database on each record it deletes (~2-7 us per table: it reads
the database's table catalogue for each removed record, whatever the statement's form), so
with 1,000 users owning views a deleted edge costs ~5 ms of engine time and an UPDATE ~50 us
(`loadtests/probe_edge_removal.py`); deleting at flush time made the spec's default mode fall
seconds behind (ssp/README.md, "Edge removal"). No cheaper removal exists: an edge's `in` and
`out` cannot change, so a retired edge can only come back for its own member. What keeps the
retired rows bounded: a member whose row is deleted loses its edge in the application's own
transaction (the database's cascade), so the flush's UPDATE finds nothing and the reaper is
given only the edges the UPDATE did retire, those of rows that still exist and left a view;
a member coming back revives its edge instead of a new one.
A flush takes at most `max_ops` operations (halved after a transaction that timed out); the
rest stays queued for the next one at once. Up to `flushers` flushes run concurrently, each on
views no other flush holds, so per-view order is kept while the database works on several
transactions.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from surrealdb import RecordID

from dbclient import Database, DbError, DbTimeout
from dbclient.clock import now_ms
from dbclient.tasks import stop_loops
from engine.values import parse_record_id, record_id_text
from ipc.backoff import Backoff
from ssp.naming import SINGLE_TABLE, edge_id
from ssp.reaper import MAX_QUEUED, EdgeReaper
from ssp.viewmetrics import ViewMetrics

log = logging.getLogger("ssp.publisher")

# Admission thresholds for pending deltas (spec, Limits): soft, checked before ingest.
MAX_PENDING_OPS = 100_000
MAX_PENDING_BYTES = 64 * 1024 * 1024
_OP_BYTES = 160  # estimated bytes per pending operation (ids + bookkeeping)
# A (re)materialisation costs a DELETE ... WHERE scan of the view's prior edges besides its
# upserts: count it as this many operations against a flush's budget.
INITIAL_COST = 10
# One RELATE per edge with its full id: RELATE on an existing edge id updates it in place, so
# this is an upsert. Measured on the embedded engine (core 3.2.4, 1,000 edges in one request):
# ~25 ms, against ~150 ms for `INSERT RELATION $rows ON DUPLICATE KEY UPDATE ...`, which was
# the SSP's publication bottleneck. RETURN NONE: the written rows would otherwise travel back
# and be decoded for nothing.
#
# The rows travel compact: the edge id `[view, member]` is built in the database
# (`type::record`), not sent beside `in` and `out`, the flush's `seq` is one parameter, and
# a view with many edges sends its table, view record and `auth_id` once for all of them.
# One edge row as a map with its full id was ~25 CBOR items; as `[member, rv]` inside a view's
# group it is 5, and the database host decodes a request's parameters before the engine runs
# it. Measured with `CHANGEFEED 1h INCLUDE ORIGINAL` tables (loadtests/probe_edge_rows.py, 1,000
# edges in one transaction), when the host still built every parameter in Python: one view
# 88 ms as maps -> 62 ms grouped; 100 views of 10 edges 117 -> 84 ms grouped; 1,000 views of
# one edge 114 -> 81 ms flat (103 ms grouped). Since the host leaves parameters to the engine
# (dbhost.frames.Request): 67 -> 55, 71 -> 56 and 69 -> 69 ms (grouped: 85). Inside a group
# its fields are read into LET variables first: the engine copies `$g` (all its rows) on each
# `$g[i]` read, which made a 1,000-edge group 4x slower than the maps. `auth_id` is set in
# mode `single` only (NONE leaves it absent).
# Mode `dedicated` also clears `removed`: the edge may be a retired one whose member came back.
UPSERT_FLAT = ("FOR $r IN $rows { RELATE ($r[1])->(type::record($r[0], [$r[1], $r[2]]))->($r[2])"
               " SET rv = $r[3], seq = $seq, removed = NONE RETURN NONE }")
UPSERT_FLAT_SINGLE = ("FOR $r IN $rows { RELATE ($r[1])->(type::record($r[0], [$r[1], $r[2]]))"
                      "->($r[2]) SET rv = $r[3], seq = $seq, auth_id = $r[4] RETURN NONE }")
UPSERT_GROUPS = ("FOR $g IN $groups { LET $t = $g[0]; LET $q = $g[1]; "
                 "FOR $r IN $g[3] { RELATE $q->(type::record($t, [$q, $r[0]]))->($r[0]) "
                 "SET rv = $r[1], seq = $seq, removed = NONE RETURN NONE } }")
# Mode `dedicated`: members that left are retired, not deleted (module docstring). An edge
# already retired is left alone (no second notification); a missing one stays missing. The
# statement's value is the edges it retired, and only those go to the reaper: an edge the
# database took away already (its member's row was deleted: SurrealDB deletes the edges of a
# deleted record in the application's own transaction; its user's table was dropped) costs
# the reaper nothing, and the reaper's queue counts exactly the retired rows it will delete.
RETIRE = "UPDATE $ids SET removed = true, seq = $seq WHERE !removed RETURN VALUE id"
# SurrealDB 3.0.x (the Node build; `Publisher(unlogged_cascades=True)`, set from the
# database's version at start: `logs_cascaded_deletes`) logs
# no changefeed entry for the edges a DELETE of their member takes along, so removing such an
# edge writes nothing either and a LIVE subscriber of the edge table never hears that the
# member left. It also logs a DELETE without the row, so a record user's LIVE on
# `_00_list_ref` (readable where `auth_id = $auth.id`) cannot be shown an edge's DELETE. There
# every removal first writes the edge retired (`removed = true`, the whole row in the feed):
# an UPDATE, or a RELATE where the edge is gone. Mode `dedicated` leaves it retired (the reaper
# deletes it later), mode `single` deletes it next in the same flush (the feed logs both).
# Rows `[edge, view record, member, auth_id]`.
RETIRE_LOGGED = ("FOR $r IN $rows { IF record::exists($r[0]) { UPDATE $r[0] SET removed = true, "
                 "seq = $seq WHERE !removed RETURN NONE } ELSE { RELATE ($r[1])->($r[0])->($r[2]) "
                 "SET removed = true, seq = $seq, auth_id = $r[3] RETURN NONE } }")
# The first release known to log the edges a DELETE takes along (checked: 3.2.4 does, 3.0.2
# does not; releases in between were not checked, so they take the logged path).
_CASCADES_LOGGED_FROM = (3, 2, 4)
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def logs_cascaded_deletes(version: str) -> bool:
    """Whether a SurrealDB of this ``version`` text (``surrealdb-3.2.4``) logs the edges a
    record's DELETE takes along and a DELETE's row (``Publisher.unlogged_cascades`` is the
    negation). A text with no version in it counts as not: the logged path is right on every
    release, only slower."""
    m = _VERSION.search(version)
    return m is not None and tuple(int(g) for g in m.groups()) >= _CASCADES_LOGGED_FROM


# A (re)materialisation's prior edges (not stamped with this flush's seq by the upserts
# before it) are retired, and all of the view's retired edges are the block's value, for the
# reaper. (Not `RETURN $gone`: a RETURN ends the whole transaction, skipping what follows.)
RETIRE_STALE = ("{{ LET $gone = (SELECT VALUE id FROM {table} WHERE in = $q AND seq != $seq); "
                "UPDATE $gone SET removed = true, seq = $seq WHERE !removed RETURN NONE; "
                "$gone }}")
UPSERT_GROUPS_SINGLE = ("FOR $g IN $groups { LET $t = $g[0]; LET $q = $g[1]; LET $a = $g[2]; "
                        "FOR $r IN $g[3] { RELATE $q->(type::record($t, [$q, $r[0]]))->($r[0]) "
                        "SET rv = $r[1], seq = $seq, auth_id = $a RETURN NONE } }")
# A view with at least this many edges in a flush goes as a group (fewer: flat rows, where a
# group's LETs cost more than they save).
GROUP_MIN = 8
# Edge rows per upsert statement.
UPSERT_CHUNK = 1000
# UPDATE (never UPSERT): a view unregistered meanwhile must not get its row back.
MARK_READY = "FOR $u IN $ups { UPDATE $u.q MERGE { state: 'ready', rowCount: $u.n } }"
MIN_OPS = 50
# Distinct edge tables one flush may write. SurrealDB writes one changefeed entry per table per
# transaction, and `SHOW CHANGES` cannot page past the first 1,000 entries of one transaction
# (scheduler/README.md, "changefeed paging"): a flush spanning more users' tables would hide
# part of its edges from every changefeed reader (LIVE subscribers included). With
# `_00_query` and the metrics table this stays well under that.
MAX_TABLES_PER_FLUSH = 400
SLOWEST_KEPT = 5  # slowest transactions a latency window reports (`/debug/memory`)


class EdgeHooks:
    """The publisher's hook interface (`ssp.telemetry` implements it with OpenTelemetry
    histograms); every hook takes a `time.monotonic()` start. No-op here."""

    def lock_wait(self, since: float) -> float:
        """A view was acquired after waiting since `since`; returns now (the hold's start)."""
        return time.monotonic()

    def lock_hold(self, since: float) -> None:
        """Views held since `since` were released."""

    def transaction(self, since: float, ok: bool = True) -> None:
        """A flush's transaction that began at `since` ended."""

    def published(self, started: Iterable[float], now: float) -> None:
        """A flush committed; `started` holds each view's oldest-change time."""


NO_TELEMETRY = EdgeHooks()


NO_TELEMETRY = EdgeHooks()


@dataclass(frozen=True)
class PublicationFigures:
    """One snapshot of the publication's figures: the heartbeat's `publication` object,
    `/debug/memory`'s and the `ssp_edge_*` gauges and counters all read it."""

    pending_batches: int
    pending_operations: int
    pending_bytes: int
    oldest_age_ms: float
    parked_batches: int  # always 0: a failed flush puts its work back, nothing is parked
    last_success_epoch_ms: int
    overload_rejections: int
    connection_generation: int
    flushes: int
    operations: int
    failures: int
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    queued_p99_ms: float | None = None
    transaction_p50_ms: float | None = None
    transaction_p99_ms: float | None = None
    slowest_transactions: list[dict[str, Any]] = field(default_factory=list)
    reaper_waits: int = 0

    def heartbeat(self) -> dict[str, Any]:
        """The heartbeat's `publication` object (without `worst_views`)."""
        return {
            "pending_batches": self.pending_batches,
            "pending_operations": self.pending_operations,
            "pending_bytes": self.pending_bytes,
            "oldest_age_ms": self.oldest_age_ms,
            "parked_batches": self.parked_batches,
            "last_success_epoch_ms": self.last_success_epoch_ms,
            "overload_rejections": self.overload_rejections,
            "connection_generation": self.connection_generation,
        }

    def debug_memory(self) -> dict[str, Any]:
        """`/debug/memory`'s `publication` object."""
        return {
            "pending_operations": self.pending_operations,
            "oldest_age_ms": self.oldest_age_ms,
            "flushes": self.flushes,
            "operations": self.operations,
            "failures": self.failures,
            "last_success_epoch_ms": self.last_success_epoch_ms,
            "overload_rejections": self.overload_rejections,
            "latency_p50_ms": self.latency_p50_ms,
            "latency_p99_ms": self.latency_p99_ms,
            "queued_p99_ms": self.queued_p99_ms,
            "transaction_p50_ms": self.transaction_p50_ms,
            "transaction_p99_ms": self.transaction_p99_ms,
            "slowest_transactions": self.slowest_transactions,
            "reaper_waits": self.reaper_waits,
        }


def _pct(values: Iterable[float], q: float) -> float | None:
    """The q-quantile of `values` (None when empty), nearest rank below."""
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * q))] if s else None


@dataclass(eq=False)
class PubView:
    """What the publisher needs of a view (the hub's `ViewState` satisfies it)."""

    view_id: str
    record: RecordID
    edge_table: str
    auth: RecordID | None
    members: set[str]
    generation: int = 0
    # The `rowCount` this SSP last wrote in the view's `_00_query` row (None: not yet known).
    row_count: int | None = None


@dataclass
class Teardown:
    """An unregistered view whose edges and row must go (unless registered again)."""

    view_id: str
    record: RecordID
    edge_table: str
    generation: int


@dataclass
class _Batch:
    """What one flush took: its statements and what to put back if it fails."""

    stmts: list[tuple[str, dict[str, Any] | None]] = field(default_factory=list)
    views: set[str] = field(default_factory=set)
    dirty: dict[str, set[str]] = field(default_factory=dict)
    initial: dict[str, int] = field(default_factory=dict)
    teardown: dict[str, Teardown] = field(default_factory=dict)
    row_counts: dict[str, int] = field(default_factory=dict)  # rowCount written per view
    started: list[float] = field(default_factory=list)
    # per view: (view id, when its oldest change arrived, operations, initial edges?)
    per_view: list[tuple[str, float, int, bool]] = field(default_factory=list)
    ops: int = 0
    # mode `dedicated`: edges the flush retires, per view (queued for the reaper on commit),
    # and the statements whose results list a (re)materialised view's retired edges
    retired: dict[str, list[RecordID]] = field(default_factory=dict)
    retired_lists: list[tuple[int, str]] = field(default_factory=list)
    # the index of the RETIRE statement, whose value lists the edges it did retire (None:
    # the logged path, which writes every one of them retired)
    retire_at: int | None = None
    # mode `dedicated`: the members each view's upserts write, whose edges are not the
    # reaper's any more once the batch commits (a retired one revived: `EdgeReaper.revived`)
    upserted: list[tuple[str, list[str]]] = field(default_factory=list)


@dataclass
class PublisherStats:
    """Counters reported by /debug/memory and /info."""

    flushes: int = 0
    operations: int = 0
    failures: int = 0
    last_success_ms: int = 0
    last_error: str = ""
    latencies_ms: deque[float] = field(default_factory=lambda: deque(maxlen=20_000))
    # Where that latency went: per view, arrival of its oldest change to the start of the
    # transaction that wrote it (the throttle, and waits for busy views or the database
    # connection); per flush, the transaction's own round trip.
    queued_ms: deque[float] = field(default_factory=lambda: deque(maxlen=20_000))
    transaction_ms: deque[float] = field(default_factory=lambda: deque(maxlen=5_000))
    # the slowest transactions of the window, a min-heap of (ms, operations, views)
    slowest: list[tuple[float, int, int]] = field(default_factory=list)
    # dirty views a flush passed over because the reaper held them (their changes wait)
    reaper_waits: int = 0

    def clear_latencies(self) -> None:
        """Start a new latency window (benchmarks measure one phase)."""
        self.latencies_ms.clear()
        self.queued_ms.clear()
        self.transaction_ms.clear()
        self.slowest.clear()
        self.reaper_waits = 0

    def transaction(self, ms: float, ops: int, views: int) -> None:
        """One committed transaction took `ms`."""
        self.transaction_ms.append(ms)
        if len(self.slowest) < SLOWEST_KEPT:
            heapq.heappush(self.slowest, (ms, ops, views))
        elif ms > self.slowest[0][0]:
            heapq.heapreplace(self.slowest, (ms, ops, views))


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
        max_ops: int = 2000,
        flushers: int = 1,
        metrics: ViewMetrics | None = None,
        unlogged_cascades: bool = False,
        reaper_max_queued: int = MAX_QUEUED,
    ) -> None:
        self.db = db
        self.ref_mode = ref_mode
        # Removals write a logged change even where the edge is gone (RETIRE_LOGGED).
        self.unlogged_cascades = unlogged_cascades
        # Removals retire edges and the reaper deletes them later (module docstring).
        self.retire = ref_mode != "single"
        self.reaper: EdgeReaper | None = (
            EdgeReaper(db, self, reaper_max_queued) if self.retire else None)
        self.throttle = throttle_ms / 1000.0
        self.max_ops = max_ops
        self.budget = max_ops  # shrinks after a timed-out flush, grows back on success
        self._view = view_lookup
        self._rv = rv_lookup
        self.dirty: dict[str, set[str]] = {}
        self.initial: dict[str, int] = {}  # view id -> generation to (re)materialise
        self.teardowns: dict[str, Teardown] = {}
        # Edge tables the database no longer has (their user was deleted): nothing is written
        # to them (a RELATE would create the table again, without its select rule) until the
        # hub defines them again and re-materialises their views (`drop_table`).
        self.dropped: set[str] = set()
        self._since: dict[str, float] = {}  # view id -> monotonic time of its oldest mark
        self.pending_ops = 0
        self.flushers = flushers
        self._inflight: set[str] = set()  # views held by a running flush or by `hold`
        # view id -> the members whose retired edges the reaper is deleting (`claim`): a flush
        # leaves those members for later and writes the view's others
        self._reaping: dict[str, frozenset[str]] = {}
        self._changed = asyncio.Condition()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.stats = PublisherStats()
        self.metrics = metrics
        self.telemetry: EdgeHooks = NO_TELEMETRY  # ssp.telemetry.attach: OpenTelemetry
        self.overload_rejections = 0  # ingests refused (503) by the admission limits
        # Each flush writes its own seq on the edges it upserts (so an upsert always changes
        # the edge and LIVE subscribers hear of it, and a materialisation can tell its prior
        # edges apart): microseconds since the epoch at start, then +1 per flush, so a
        # restarted SSP never writes a seq an earlier run wrote.
        self._seq = time.time_ns() // 1000

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

    def drop_table(self, table: str) -> None:
        """`table` is being removed from the database: from now on its views' marks and
        materialisations are discarded (their edges went with the table), and a teardown of
        one of its views deletes only the `_00_query` row. `quiesce` waits for the flushes
        that hold one of its views; `restore_table` ends this once it is defined again."""
        self.dropped.add(table)
        self._kick()  # the next flush discards what is pending for it

    def restore_table(self, table: str) -> None:
        """`table` exists again: its views are written again (the caller materialises them)."""
        self.dropped.discard(table)

    async def quiesce(self, table: str) -> None:
        """Wait until no flush, hold or reap has a view whose edges live in `table`."""
        def idle() -> bool:
            for vid in itertools.chain(self._inflight, self._reaping):
                v = self._view(vid)
                if v is not None and v.edge_table == table:
                    return False
            return True
        async with self._changed:
            await self._changed.wait_for(idle)

    def _kick(self) -> None:
        self._wake.set()

    def quiet(self) -> bool:
        """True when no flush or hold is in progress and publication is not falling behind
        (nothing pending for longer than the throttle window): the reconciler's turn."""
        return not self._inflight and self.oldest_age_ms() < max(self.throttle, 0.05) * 1000

    def idle(self) -> bool:
        """True when nothing is pending and no flush or hold is in progress: the reaper may
        take half the database's time (`ssp.reaper`); under a steady load it is never idle."""
        return not self._inflight and not self.pending

    def claim(self, view_id: str, members: Iterable[str]) -> bool:
        """Hold `members` of `view_id` (their retired edges) for the reaper's transaction,
        unless a flush or a hold has the view (or the reaper has it already). Flushes
        meanwhile write the view's other members and leave these marked: the conflict is the
        edge, not the view (a view held whole kept each of its changes waiting for a reap
        transaction, seconds under load: issue 31's `reaper_waits`)."""
        if view_id in self._inflight or view_id in self._reaping:
            return False
        self._reaping[view_id] = frozenset(members)
        return True

    async def unclaim(self, view_ids: Iterable[str]) -> None:
        """Release views taken with `claim`."""
        async with self._changed:
            for vid in view_ids:
                self._reaping.pop(vid, None)
            self._changed.notify_all()
        self._kick()

    def busy(self, view_id: str) -> bool:
        """True while the view has work queued or held by a flush (its edges and row may not
        show its members yet)."""
        return (view_id in self.dirty or view_id in self.initial or view_id in self.teardowns
                or view_id in self._inflight or view_id in self._reaping)

    @property
    def pending(self) -> bool:
        """True while anything waits to be written."""
        return bool(self.dirty or self.initial or self.teardowns)

    def figures(self) -> PublicationFigures:
        """The publication's figures now (see `PublicationFigures`)."""
        pending = max(0, self.pending_ops)
        st = self.stats
        return PublicationFigures(
            pending_batches=len(self.dirty) + len(self.initial) + len(self.teardowns),
            pending_operations=pending,
            pending_bytes=pending * _OP_BYTES,
            oldest_age_ms=round(self.oldest_age_ms(), 1),
            parked_batches=0,
            last_success_epoch_ms=st.last_success_ms,
            overload_rejections=self.overload_rejections,
            connection_generation=int(getattr(self.db, "reconnects", 0)),
            flushes=st.flushes,
            operations=st.operations,
            failures=st.failures,
            latency_p50_ms=_pct(st.latencies_ms, 0.5),
            latency_p99_ms=_pct(st.latencies_ms, 0.99),
            queued_p99_ms=_pct(st.queued_ms, 0.99),
            transaction_p50_ms=_pct(st.transaction_ms, 0.5),
            transaction_p99_ms=_pct(st.transaction_ms, 0.99),
            slowest_transactions=[{"ms": round(ms, 1), "operations": ops, "views": n}
                                  for ms, ops, n in sorted(st.slowest, reverse=True)],
            reaper_waits=st.reaper_waits,
        )

    def worst_views(self, n: int) -> list[dict[str, Any]]:
        """The `n` views with the most pending operations (the heartbeat's `worst_views`)."""
        backlog = sorted(((len(s), vid) for vid, s in self.dirty.items()), reverse=True)
        return [{"view_id": vid, "pending_operations": k} for k, vid in backlog[:n]]

    def oldest_age_ms(self) -> float:
        """Age of the oldest pending mark (0 when idle)."""
        if not self._since:
            return 0.0
        return (time.monotonic() - min(self._since.values())) * 1000

    # ------------------------------------------------------------------ running

    def start(self) -> None:
        """Run the flush loops in the background (`flushers` transactions at once)."""
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run(), name=f"publisher-{i}")
                       for i in range(self.flushers)]
        if self.metrics is not None:
            self._tasks.append(loop.create_task(self.metrics.run(self.db), name="view-metrics"))
        if self.reaper is not None:
            self._tasks.append(loop.create_task(self.reaper.run(), name="edge-reaper"))

    async def stop(self) -> None:
        """Stop the loops (call `drain` first to flush what is pending)."""
        # a loop whose cancel Python 3.11's wait_for loses flushes on (dbclient.tasks)
        await stop_loops(*self._tasks)
        self._tasks = []
        if self.metrics is not None:
            await self.metrics.write(self.db)  # the last figures (errors are logged, not raised)

    async def drain(self, timeout: float = 30.0) -> bool:
        """Flush until nothing is pending (shutdown, tests); False when it did not finish."""
        deadline = time.monotonic() + timeout
        while (self.pending or self._inflight) and time.monotonic() < deadline:
            try:
                if not await self.flush():
                    await asyncio.sleep(0.01)  # the rest is in another flush's hands
            except DbError:
                await asyncio.sleep(0.2)
        return not self.pending and not self._inflight

    @contextlib.asynccontextmanager
    async def hold(self, view_id: str) -> AsyncIterator[None]:
        """Keep flushes away from `view_id` (waiting for one in flight) while the hub writes
        its `_00_query` row directly; a pending teardown of it is dropped."""
        asked = time.monotonic()
        async with self._changed:
            await self._changed.wait_for(lambda: view_id not in self._inflight)
            self._inflight.add(view_id)
        held = self.telemetry.lock_wait(asked)
        try:
            self.teardowns.pop(view_id, None)
            yield
        finally:
            async with self._changed:
                self._inflight.discard(view_id)
                self._changed.notify_all()
            self._kick()
            self.telemetry.lock_hold(held)

    async def _run(self) -> None:
        backoff = Backoff(0.1, cap=5.0)
        while True:
            await self._wake.wait()
            if self.throttle > 0:
                # Coalescing window, measured from the oldest pending mark.
                wait = self.throttle - self.oldest_age_ms() / 1000
                if wait > 0:
                    await asyncio.sleep(wait)
            self._wake.clear()
            try:
                if not await self.flush() and self.pending:
                    # Everything pending belongs to views another flush holds: wait for it
                    # rather than spin (an Event that is set never suspends the loop).
                    await asyncio.sleep(0.005)
                backoff.reset()
            except DbError as e:
                self.stats.failures += 1
                self.stats.last_error = str(e)[:300]
                log.warning("edge publication failed (will retry in %.1fs): %s",
                            backoff.current, e)
                await backoff.sleep()
                self._wake.set()
            except Exception:  # a bug here must not stop publication for good
                self.stats.failures += 1
                log.exception("edge publication crashed; retrying")
                await asyncio.sleep(1.0)
                self._wake.set()
            if self.pending:
                self._wake.set()

    async def flush(self) -> int:
        """Write one batch of pending work in one transaction; returns operations written.

        Several flushes may run at once: each takes only views no other flush holds, so the
        writes of one view are always committed in the order they were taken."""
        batch = self._take()
        if batch is None:
            return 0
        held = time.monotonic()
        try:
            return await self._commit(batch)
        finally:
            async with self._changed:
                self._inflight.difference_update(batch.views)
                self._changed.notify_all()
            self._recount()
            self.telemetry.lock_hold(held)

    def _take(self) -> _Batch | None:
        if not self.pending:
            return None
        budget = self.budget
        b = _Batch()
        self._seq += 1
        seq = self._seq
        inserts: list[tuple[PubView, Iterable[str]]] = []  # (view, members to upsert)
        # after the upserts: prior edges that go (and, retiring, the view whose retired edges
        # the statement lists)
        stale: list[tuple[str, dict[str, Any], str | None]] = []
        ready_updates: list[dict[str, Any]] = []
        deletes: list[RecordID] = []
        logged: list[list[Any]] = []  # removals to log where the edge is gone (unlogged_cascades)
        busy = self._inflight
        reaping = self._reaping
        tables: set[str] = set()

        def room(table: str) -> bool:
            # True when the flush may write `table` (it writes it already, or has room).
            if table in tables or len(tables) < MAX_TABLES_PER_FLUSH:
                tables.add(table)
                return True
            return False

        for vid in list(self.teardowns):
            if budget <= 0:
                break
            if vid in busy or vid in reaping or not room(self.teardowns[vid].edge_table):
                continue
            td = b.teardown[vid] = self.teardowns.pop(vid)
            b.views.add(vid)
            if self._view(vid) is not None:
                continue  # registered again since: the teardown is dropped
            if td.edge_table not in self.dropped:  # (a dropped table took its edges along)
                b.stmts.append((f"DELETE {td.edge_table} WHERE in = $q", {"q": td.record}))
            b.stmts.append(("DELETE $q", {"q": td.record}))
            budget -= INITIAL_COST
        for vid in list(self.initial):
            if budget <= 0:
                break
            if vid in busy or vid in b.views or vid in reaping:
                continue
            view = self._view(vid)
            if view is not None and view.edge_table in self.dropped:
                del self.initial[vid]  # written again when its table is back
                self._since.pop(vid, None)
                continue
            if view is not None and not room(view.edge_table):
                continue
            b.initial[vid] = self.initial.pop(vid)
            b.views.add(vid)
            if view is None or view.generation != b.initial[vid]:
                continue
            # Members are upserted with this flush's seq, then the view's edges with another
            # seq (prior edges that are not members) go: one pass over the view's edges.
            # (`out NOTINSIDE $members` before the upserts was quadratic: the engine copies
            # the array for each edge it tests, 0.5 s for 5,000 edges. Deleting all and
            # re-inserting would show every unchanged edge to LIVE subscribers as deleted
            # and created.)
            inserts.append((view, view.members))
            if self.retire:
                # One scan of the view's edges: retire the prior ones, and list them with
                # those an earlier run retired (the reaper's queue is memory) for the reaper.
                stale.append((RETIRE_STALE.format(table=view.edge_table),
                              {"q": view.record, "seq": seq}, vid))
            else:
                if self.unlogged_cascades:  # the whole row in the feed first (RETIRE_LOGGED)
                    stale.append((f"UPDATE {view.edge_table} SET removed = true WHERE in = $q "
                                  "AND seq != $seq RETURN NONE",
                                  {"q": view.record, "seq": seq}, None))
                stale.append((f"DELETE {view.edge_table} WHERE in = $q AND seq != $seq",
                              {"q": view.record, "seq": seq}, None))
            ready_updates.append({"q": view.record, "n": len(view.members)})
            b.row_counts[vid] = len(view.members)
            budget -= len(view.members) + INITIAL_COST
            b.started.append(self._since.pop(vid, time.monotonic()))
            b.per_view.append((vid, b.started[-1], len(view.members), True))
            b.ops += len(view.members) + 1
        for vid in list(self.dirty):
            if budget <= 0:
                break
            if vid in busy or vid in b.views:
                continue
            view = self._view(vid)
            if view is not None and view.edge_table in self.dropped:
                self.pending_ops -= len(self.dirty.pop(vid))  # written again when it is back
                self._since.pop(vid, None)
                continue
            if view is not None and not room(view.edge_table):
                continue
            members = self.dirty[vid]
            held = reaping.get(vid)
            free = members
            if held is not None and not held.isdisjoint(members):
                free = members - held
                self.stats.reaper_waits += len(members) - len(free)
                if not free:
                    continue
            if len(free) > budget or free is not members:
                # A big view is split across flushes, and members whose edges the reaper is
                # deleting wait for the next one; the rest stays marked.
                part = set(itertools.islice(free, budget))
                members.difference_update(part)
                members = part
                b.started.append(self._since.get(vid, time.monotonic()))
            else:
                del self.dirty[vid]
                b.started.append(self._since.pop(vid, time.monotonic()))
            b.dirty[vid] = members
            b.views.add(vid)
            b.ops += len(members)
            b.per_view.append((vid, b.started[-1], len(members), False))
            if view is None:
                continue
            ups = []
            for m in members:
                if m in view.members:
                    ups.append(m)
                else:
                    out = parse_record_id(m)
                    gone = edge_id(view.edge_table, view.record, out)
                    if self.retire:
                        b.retired.setdefault(vid, []).append(gone)
                    else:
                        deletes.append(gone)
                    if self.unlogged_cascades:
                        logged.append([gone, view.record, out,
                                       view.auth if view.edge_table == SINGLE_TABLE else None])
            if ups:
                inserts.append((view, ups))
            budget -= len(members)
        if not b.views:
            return None
        busy.update(b.views)
        if deletes:
            if logged:
                b.stmts.append((RETIRE_LOGGED, {"rows": logged, "seq": seq}))
            b.stmts.append(("DELETE $ids", {"ids": deletes}))
        if b.retired:
            if logged:
                b.stmts.append((RETIRE_LOGGED, {"rows": logged, "seq": seq}))
            else:
                b.retire_at = len(b.stmts)
                b.stmts.append((RETIRE, {"ids": [e for es in b.retired.values() for e in es],
                                         "seq": seq}))
        # Every row or group names its table, so one statement covers all the per-user
        # tables of the flush: statements per flush stay constant, not per user.
        b.stmts.extend(self._upserts(inserts, seq,
                                     b.upserted if self.reaper is not None else None))
        for text, params, listed in stale:
            if listed is not None:
                b.retired_lists.append((len(b.stmts), listed))
            b.stmts.append((text, params))
        if ready_updates:
            b.stmts.append((MARK_READY, {"ups": ready_updates}))
        return b

    async def _commit(self, b: _Batch) -> int:
        if b.stmts:
            began = time.monotonic()
            try:
                results = await self.db.transaction(b.stmts)
            except BaseException as e:
                self.telemetry.transaction(began, ok=False)
                self._restore(b.dirty, b.initial, b.teardown)
                if isinstance(e, DbTimeout):
                    # Too big for the database's time limit: retry smaller, never the same.
                    self.budget = max(MIN_OPS, self.budget // 2)
                raise
            self.budget = min(self.max_ops, self.budget + self.budget // 4 + 1)
            if self.reaper is not None:
                for vid, ms in b.upserted:
                    self.reaper.revived(vid, ms)
                if b.retire_at is not None and b.retired:
                    done = {record_id_text(r) for r in results[b.retire_at] or []
                            if isinstance(r, RecordID)}
                    for vid, ids in b.retired.items():
                        self.reaper.add(vid, (e for e in ids if record_id_text(e) in done))
                else:
                    for vid, ids in b.retired.items():
                        self.reaper.add(vid, ids)
                for i, vid in b.retired_lists:
                    self.reaper.add(vid, (r for r in results[i] or []
                                          if isinstance(r, RecordID)))
            for vid, n in b.row_counts.items():
                view = self._view(vid)
                if view is not None:
                    view.row_count = n
            now = time.monotonic()
            self.telemetry.transaction(began)
            self.stats.latencies_ms.extend((now - s) * 1000 for s in b.started)
            self.stats.queued_ms.extend((began - s) * 1000 for s in b.started)
            self.stats.transaction((now - began) * 1000, b.ops, len(b.views))
            self.telemetry.published(b.started, now)
            if self.metrics is not None:
                for vid, since, ops, initial in b.per_view:
                    self.metrics.observe(vid, (now - since) * 1000, ops, initial)
        self.stats.flushes += 1
        self.stats.operations += b.ops
        self.stats.last_success_ms = now_ms()
        return b.ops or len(b.views)

    def _recount(self) -> None:
        # Exact pending count after each flush (between flushes `mark` adds estimates).
        self.pending_ops = (sum(len(s) for s in self.dirty.values()) + len(self.teardowns)
                            + sum(1 + len(v.members) for v in map(self._view, self.initial)
                                  if v is not None))
        for vid in [v for v in self._since if v not in self.dirty and v not in self.initial]:
            self._since.pop(vid, None)

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

    def _upserts(self, inserts: list[tuple[PubView, Iterable[str]]], seq: int,
                 upserted: list[tuple[str, list[str]]] | None = None
                 ) -> list[tuple[str, dict[str, Any]]]:
        """The upsert statements of a flush: views with many edges as groups
        ``[table, view, auth, [[member, rv], ...]]``, the others as flat rows
        ``[table, view, member, rv, auth]``, at most :data:`UPSERT_CHUNK` edges each.
        ``upserted`` (when given) collects each view's members written."""
        single = self.ref_mode == "single"
        rv = self._rv
        flat: list[list[Any]] = []
        groups: list[list[Any]] = []
        in_groups = 0
        stmts: list[tuple[str, dict[str, Any]]] = []
        flat_q, groups_q = ((UPSERT_FLAT_SINGLE, UPSERT_GROUPS_SINGLE) if single
                            else (UPSERT_FLAT, UPSERT_GROUPS))
        for view, members in inserts:
            table, rec = view.edge_table, view.record
            auth = view.auth if table == SINGLE_TABLE else None
            ms = members if isinstance(members, list) else list(members)
            if upserted is not None:
                upserted.append((view.view_id, ms))
            rows = [[parse_record_id(m), rv(m)] for m in ms]
            if len(rows) < GROUP_MIN:
                for out, v in rows:
                    flat.append([table, rec, out, v, auth] if single else [table, rec, out, v])
                    if len(flat) >= UPSERT_CHUNK:
                        stmts.append((flat_q, {"rows": flat, "seq": seq}))
                        flat = []
                continue
            for i in range(0, len(rows), UPSERT_CHUNK):
                part = rows[i:i + UPSERT_CHUNK]
                groups.append([table, rec, auth, part])
                in_groups += len(part)
                if in_groups >= UPSERT_CHUNK:
                    stmts.append((groups_q, {"groups": groups, "seq": seq}))
                    groups, in_groups = [], 0
        if flat:
            stmts.append((flat_q, {"rows": flat, "seq": seq}))
        if groups:
            stmts.append((groups_q, {"groups": groups, "seq": seq}))
        return stmts
