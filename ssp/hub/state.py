"""What every part of the hub shares: the registry of views, the row arena, the shards, the
publisher, the database connections, and the one exclusive section that orders them.

`HubState` is plain shared state plus the few operations every component needs (spawn a
tracked task, queue a teardown, hold the exclusive section). The components of the package
(`ssp.hub.sequencer`, `ssp.hub.registry`, ...) each take the state and the peers they call,
explicitly, in `ssp.hub.root.Hub`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any

import zmq.asyncio
from surrealdb import RecordID

from dbclient import Database
from dbclient.clock import now_ms
from dbclient.commitcheck import CommitCheck
from dbclient.feed import FeedCursor
from maintenance.backends import BackendMonitor, parse_backends
from ssp.allowlist import Allowlist
from ssp.config import SspConfig
from ssp.hub.logring import LogRing
from ssp.hub.members import MemberIndex
from ssp.jobs import JobRunner
from ssp.naming import view_record
from ssp.permissions import ViewPermissions
from ssp.publisher import Publisher, PubView, Teardown
from ssp.rowarena import HubRows
from ssp.shards import ShardHandle
from ssp.viewmetrics import ViewMetrics

log = logging.getLogger("ssp.hub")

PIPELINE_DEPTH = 4  # ingest batches sent to the shards before the first reply is handled
FEED_LIMIT = 1000  # new change sets per feed round (the engine pages 1000 entries per read)
FEED_OVERLAP_VS = 2000 << 16  # re-read 2 s of the feed: late-visible commits are not lost
# Each read re-reads only 30 ms of it; a sweep (`ssp.hub.tail`, apart from the reads) re-reads
# the whole 2 s every 3 s, as the scheduler's tail does (`scheduler.feed`, which says why).
FEED_SHORT_VS = 30 << 16
FEED_SWEEP_SECS = 3.0
CURSOR_MARGIN_MS = 5000  # cold start: tail from a little before the bootstrap read



def cold_cursor() -> int:
    """Where a table with no known feed position is tailed from: a little before now."""
    return (now_ms() - CURSOR_MARGIN_MS) << 16


def feed_cursor(base: int) -> FeedCursor:
    """The standalone tail's cursor (`ssp.hub.tail`): short reads, sweeps apart."""
    return FeedCursor(base, limit=FEED_LIMIT, overlap_vs=FEED_OVERLAP_VS,
                      short_vs=FEED_SHORT_VS, sweep_secs=FEED_SWEEP_SECS)


@dataclass(eq=False)
class ViewState(PubView):
    """A registered view as the hub keeps it."""

    surql: str = ""
    params: dict[str, Any] | None = None
    client_ids: set[str] = field(default_factory=set)
    client_id: str = ""
    ttl: str = "10m"
    ttl_ms: int = 600_000
    last_active_ms: int = 0
    shard: int = 0
    format: str | None = None
    registered_ms: int = 0
    share: str = ""  # registrations with the same key share a graph (ssp.hub.sharing)
    # What the engine evaluates (ssp.permissions): the query with the tables' select rules in
    # it ("" = `surql` as it is) and the identity's record fields those rules read.
    engine_surql: str = ""
    auth_fields: dict[str, Any] | None = None


class ViewRegistry(dict[str, ViewState]):
    """The held views by id, with the views of each sharing group (`ViewState.share`) kept
    beside them, so finding a view's group does not scan every view (`ssp.hub.sharing`), and
    the views of each member (`ssp.hub.members`). Every way of adding or removing a view goes
    through the methods below."""

    def __init__(self) -> None:
        super().__init__()
        self.groups: dict[str, dict[str, ViewState]] = {}
        self.members = MemberIndex()

    def __setitem__(self, vid: str, view: ViewState) -> None:
        old = self.get(vid)
        if old is not None:
            self._leave(vid, old)
        super().__setitem__(vid, view)
        self.groups.setdefault(view.share, {})[vid] = view
        self.members.add(vid, view.members)

    def __delitem__(self, vid: str) -> None:
        view = self[vid]
        super().__delitem__(vid)
        self._leave(vid, view)

    def pop(self, vid: str, *default: Any) -> Any:
        if vid not in self:
            if default:
                return default[0]
            raise KeyError(vid)
        view = self[vid]
        del self[vid]
        return view

    def popitem(self) -> tuple[str, ViewState]:
        vid, view = super().popitem()
        self._leave(vid, view)
        return vid, view

    def setdefault(self, vid: str, view: ViewState) -> ViewState:
        if vid not in self:
            self[vid] = view
        return self[vid]

    def update(self, *args: Any, **kw: Any) -> None:
        for vid, view in dict(*args, **kw).items():
            self[vid] = view

    def clear(self) -> None:
        super().clear()
        self.groups.clear()
        self.members.clear()

    def _leave(self, vid: str, view: ViewState) -> None:
        self.members.remove(vid, view.members)
        group = self.groups.get(view.share)
        if group is not None:
            group.pop(vid, None)
            if not group:
                del self.groups[view.share]


class HubState:
    """The hub's shared state (see the module docstring)."""

    def __init__(self, cfg: SspConfig, ctx: zmq.asyncio.Context | None = None) -> None:
        self.cfg = cfg
        self.ctx = ctx or zmq.asyncio.Context.instance()
        self.db = Database(cfg.db)
        self.pub_db = Database(cfg.db)
        self.status = "bootstrapping"
        self.started = time.monotonic()
        self.views = ViewRegistry()
        # Row bytes and table hashes, once per host, in the arena the shards map read-only.
        self.arena = HubRows(cfg.arena_dir, cfg.arena_segment_mb, cfg.memory_limit_mb)
        self.rows = self.arena.store
        self.rv: dict[str, Any] = {}
        self.field_types: dict[str, dict[str, str]] = {}
        self.tables: set[str] = set()  # synced tables known (kept by /reset: not reloaded)
        self.bootstrap_warnings: list[str] = []
        # Standalone changefeed position (`ssp.hub.tail`; kept in the snapshot).
        self.cursor = FeedCursor(cold_cursor(), limit=FEED_LIMIT, overlap_vs=FEED_OVERLAP_VS)
        self.seq = 0  # events sequenced (the ingest reply's `seq`)
        self.ingested = 0  # events applied (stale versions left out)
        self.shards: list[ShardHandle] = []  # built by the shard pool
        # Scheduler mode: the scheduler is restoring a backup (its heartbeat answer says so).
        self.upstream_restoring = False
        self.publisher = Publisher(self.pub_db, ref_mode=cfg.ref_mode,
                                   throttle_ms=cfg.query_update_throttle_ms,
                                   view_lookup=self.views.get, rv_lookup=self.rv.get,
                                   flushers=cfg.publish_flushers,
                                   reaper_max_queued=cfg.reaper_max_queued,
                                   # the logged removals until the hub has asked the
                                   # database's version (HubRoot.start)
                                   unlogged_cascades=True,
                                   metrics=ViewMetrics(cfg.ssp_id, cfg.view_metrics_flush_ms,
                                                       self._view_size,
                                                       hold=self.writers_hold))
        self.logs = LogRing()
        self.allowlist = Allowlist(cfg.query_allowlist)
        self.permissions = ViewPermissions(self.db, cfg.view_permissions)
        self.generation = 0
        self.overload_rejections = 0
        self.last_seq = 0  # highest scheduler `seq` applied (batched ingest dedup)
        self.wire_hashes: dict[str, int] = {}  # table -> hash of the rows as the proxy sent them
        self.wiped = False  # clean resync: local state deleted, write no snapshot on the way out
        self.exit_code: int | None = None
        self.exit_event = asyncio.Event()
        # Scheduler mode (`ssp.link`, set by the root): None when standalone.
        self.link: Any = None
        # The exclusive section: the sequencer sends batches under `apply_lock` and queues
        # them on `inflight`; `exclusive()` holds the lock and waits for them all.
        self.apply_lock = asyncio.Lock()
        self.inflight: asyncio.Queue[Any] = asyncio.Queue(maxsize=PIPELINE_DEPTH)
        self.tasks: list[asyncio.Task[Any]] = []
        self.deferred: set[asyncio.Task[None]] = set()
        # Standalone over transport http: the database's events checked against what
        # committed (dbclient.commitcheck; under a scheduler, the scheduler checks them).
        self.commits: CommitCheck | None = None
        # Outbox jobs and backend health (ssp.jobs, maintenance.backends): own connection, own loops.
        self.jobs = JobRunner(Database(cfg.db), cfg.job_tables, cfg.ssp_id,
                              sweep_secs=cfg.job_sweep_secs, standalone=cfg.standalone,
                              scheduler_url=cfg.scheduler_url,
                              auth_secret=cfg.scheduler_bearer)
        self.backend_health = BackendMonitor(
            parse_backends(list(cfg.backends)), interval_secs=cfg.health_check_interval_secs,
            down_after_secs=cfg.backend_down_after_secs,
            # Without a snapshot dir the run dir (SVC_SSP_RUN_DIR) keeps incidents.jsonl.
            incidents_dir=cfg.snapshot_dir or cfg.run_dir, component=cfg.ssp_id)

    def _view_size(self, view_id: str) -> tuple[RecordID, int] | None:
        view = self.views.get(view_id)
        return None if view is None else (view.record, len(view.members))

    def writers_hold(self) -> bool:
        """True while a restore replaces the database (standalone: this SSP is not ready;
        scheduler mode: the scheduler says it is restoring): the periodic writers (view
        metrics, TTL sweep, CRDT sweep, reconciler) hold still meanwhile, so they neither
        write rows the import is about to create nor delete rows it has just created."""
        return self.status != "ready" or self.upstream_restoring

    def stalled(self) -> bool:
        """True while a database connection's calls are timing out (ingest fails fast)."""
        return max(self.db.consecutive_timeouts, self.pub_db.consecutive_timeouts) > 0

    def request_exit(self, code: int) -> None:
        """End the whole SSP with exit `code` (the supervisor stops everything gracefully)."""
        if self.exit_code is None:
            self.exit_code = code
        self.exit_event.set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        """Start a background loop that lives until shutdown."""
        self.tasks.append(asyncio.get_running_loop().create_task(coro, name=name))

    def spawn_tracked(self, coro: Coroutine[Any, Any, None]) -> None:
        """Start a short task that shutdown waits for (deferred publication, edge DDL)."""
        task = asyncio.get_running_loop().create_task(coro)
        self.deferred.add(task)
        task.add_done_callback(self.deferred.discard)

    def teardown(self, vid: str, table: str) -> None:
        """Queue the deletion of a view's edges and `_00_query` row (dropped by the publisher
        if the id is registered again first)."""
        self.generation += 1
        self.publisher.teardown(Teardown(vid, view_record(vid), table, self.generation))

    def row_count(self) -> int:
        """Rows held in the arena, all tables."""
        return sum(self.rows.count(t) for t in self.rows.tables())

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Hold the sequencer and wait for every batch in flight: registrations, rebuilds and
        reloads see the shards and the hub's member sets in one consistent state."""
        async with self.apply_lock:
            await self.inflight.join()
            yield
