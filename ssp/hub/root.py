"""`Hub`, the composition root: the shared state (`ssp.hub.state`) and the components that
work on it, each given the peers it calls. Start-up, shutdown, and the few entry points other
modules call (`handle`, the scheduler link's, the tests') live here; the work is in the
components."""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

import zmq.asyncio

from dbclient import DbAuthError, DbError, DbQueryError
from dbclient.commitcheck import CommitCheck
from dbclient.tasks import cancel_and_wait
from ipc.backoff import Backoff
from ipc.version import VERSION
from ssp.backends import backend_routes
from ssp.config import SspConfig
from ssp.crdt import CrdtFields, crdt_routes
from ssp.hub import routes
from ssp.hub.admission import Admission
from ssp.hub.backups import Backups, SspTarget
from ssp.hub.edgetables import EdgeTables
from ssp.hub.introspection import Introspection
from ssp.hub.loading import Loading, syncs_table
from ssp.hub.loops import Loops
from ssp.hub.reconcile import Reconciler
from ssp.hub.registry import Registry
from ssp.hub.rowrequests import RowRequests
from ssp.hub.sequencer import Event, Sequencer
from ssp.hub.shardpool import ShardPool
from ssp.hub.snapshot import Snapshot
from ssp.hub.state import HubState
from ssp.hub.tail import FeedTail
from ssp.hub.views import ViewLifecycle
from ssp.hub.visibility import VISIBILITY_DEADLINE_SECS, Visibility
from ssp.hub.warmviews import WarmViews, take_views
from ssp.impersonate import impersonation_routes, of_config
from ssp.jobs import job_routes
from ssp.link import ProxySource, SchedulerLink
from ssp.publisher import logs_cascaded_deletes

log = logging.getLogger("ssp.hub")


class Hub(HubState):
    """All SSP state and every route of the gateway <-> hub contract."""

    def __init__(self, cfg: SspConfig, *, ctx: zmq.asyncio.Context | None = None) -> None:
        super().__init__(cfg, ctx)
        self.pool = ShardPool(self)
        self.edges = EdgeTables(self)
        self.visibility = Visibility(self)
        self.sequencer = Sequencer(self, self.pool, self.visibility, self.edges)
        self.lifecycle = ViewLifecycle(self, self.pool)
        self.warm_views = WarmViews(self, self.pool, self.lifecycle)
        self.tail = FeedTail(self, self.sequencer, self.lifecycle)
        self.snapshot = Snapshot(self)
        self.loading = Loading(self, self.pool, self.sequencer, self.snapshot, self.lifecycle,
                               self.tail.catch_up)
        self.loops = Loops(self, self.loading, self.lifecycle, self.sequencer)
        tails = cfg.ingest_transport == "changefeed" and cfg.standalone
        self.registry = Registry(self, self.pool, self.lifecycle, self.edges,
                                 self.loops.know_table,
                                 catch_up=self.tail.catch_up if tails else None)
        if tails:
            self.tail.requests = RowRequests(self, self.registry)
        self.admission = Admission(self, self.sequencer)
        if cfg.ingest_transport == "http" and cfg.standalone:
            self.commits = CommitCheck(self.db, self._corrections)
        self.row_requests: RowRequests | None = None
        if not tails and cfg.standalone:
            # transport http: the database's `_00_query_request` event posts the rows
            # (`Admission.query_row`)
            self.row_requests = RowRequests(self, self.registry)
            self.admission.row_requests = self.row_requests
        self.reconciler = Reconciler(self)
        self.introspection = Introspection(self, VERSION, self.reconciler.stats,
                                           self.visibility)
        self.backups = Backups(self, SspTarget(self, self.loading, self.snapshot, self.tail))
        self.crdt = CrdtFields(self.db, cfg.crdt_fields, cfg.crdt_cache_size)
        self.handlers = routes.bind(self, {
            route: partial(handler, self) for route, handler in {
                **job_routes(lambda hub: hub.jobs, lambda hub: hub.stalled()),
                **backend_routes(lambda hub: hub.backend_health),
                **impersonation_routes(of_config(cfg)),
                **crdt_routes(lambda hub: hub.crdt)}.items()})
        # Scheduler mode (ssp.link): bootstrap reads come from the scheduler's proxy; every
        # other read (schema poll, reload, registration) stays on the database.
        self.link = None if cfg.standalone else SchedulerLink(self)

    # ------------------------------------------------------------------ lifecycle

    async def _check_cascades(self) -> None:
        """Removals take the logged path (``Publisher.unlogged_cascades``) unless the database
        is a release known to log the edges a DELETE takes along: what decides is the database,
        not the ingest transport (a 3.0.x server behind the changefeed has the same gap)."""
        try:
            version = await self.pub_db.server_version()
        except DbQueryError as e:  # refused, not unreachable: keep the logged path
            log.warning("the database's version could not be read (%s): removals write the "
                        "edge retired first", e)
            return
        logged = logs_cascaded_deletes(version)
        self.publisher.unlogged_cascades = not logged
        log.info("database %s: %s", version, "cascaded deletes are logged" if logged else
                 "cascaded deletes are not logged: removals write the edge retired first")

    async def start(self) -> None:
        """Spawn the shards, connect, bootstrap, then start the background loops."""
        logging.getLogger().addHandler(self.logs)
        for s in self.shards:
            await s.start()
        self.publisher.start()
        self.spawn(self.sequencer.run(), "sequencer")
        self.spawn(self.sequencer.collect(), "collector")
        self.spawn(self.pool.liveness(), "shard-liveness")
        backoff = Backoff(0.5, cap=10.0)
        while True:
            try:
                await self.db.connect()
                await self.pub_db.connect()
                await self._check_cascades()
                if self.link is not None:
                    # SchedulerExit propagates (exit 2, 5, 6); warm from the snapshot when the
                    # scheduler's WAL still holds what this SSP missed
                    await self.link.bootstrap(warm=True)
                else:
                    await self.loading.bootstrap()
                break
            except DbAuthError:
                raise  # wrong credentials do not heal by waiting
            except DbError as e:
                # The database is down or slow: stay `bootstrapping` and start over.
                log.warning("bootstrap failed (%s); retrying in %.1fs", e, backoff.current)
                await self.loading.clear(views=True)
                await backoff.sleep()
        await self.allowlist.subscribe(self.db)  # before the load: no change in between
        await self.allowlist.load(self.db)
        self.spawn(self.allowlist.watch(self.db), "allowlist-watch")
        cfg = self.cfg
        if cfg.ingest_transport == "changefeed" and self.link is None:
            self.spawn(self.tail.run(), "changefeed")  # the scheduler feeds a linked SSP
        if self.row_requests is not None:
            self.spawn(self.tail.scan_requests(self.row_requests), "row-requests-scan")
        if self.commits is not None:
            self.spawn(self.commits.run(), "commit-check")
        self.spawn(self.loops.ttl_sweep(), "ttl-sweep")
        self.spawn(self.crdt.sweep_loop(cfg.ttl_cleanup_interval_secs, self.writers_hold),
                   "crdt-sweep")
        self.spawn(self.loops.db_watch(), "db-watch")
        if cfg.schema_poll_secs > 0:
            self.spawn(self.loops.schema_poll(), "schema-poll")
        if cfg.reconcile_ms > 0:
            self.spawn(self.reconciler.run(), "reconcile")
        if cfg.snapshot_dir is not None:
            self.spawn(self.snapshot.checkpoints(), "checkpoint")
        await self.jobs.start()
        await self.backend_health.start()
        self.status = "ready"
        if self.link is not None:
            self.spawn(self.link.heartbeats(), "heartbeat")
        log.info("SSP %s ready: %d views, %d tables, %d shards", cfg.ssp_id,
                 len(self.views), len(self.rows.tables()), len(self.shards))

    async def shutdown(self) -> None:
        """Flush pending edges, write the snapshot, stop loops, shards and connections."""
        for t in self.tasks:
            if t.get_name() not in ("sequencer", "collector"):
                t.cancel()
        await self.tail.stop()
        await self.allowlist.stop()
        if self.deferred:
            await asyncio.wait(list(self.deferred), timeout=VISIBILITY_DEADLINE_SECS + 1)
        drained = await self.publisher.drain(timeout=30.0)
        if not drained:
            log.error("shutdown: %d pending edge operations could not be written",
                      self.publisher.pending_ops)
        await self.publisher.stop()
        await self.jobs.stop()
        await self.backend_health.stop()
        if not self.wiped:
            # the views only when every edge reached the database (ssp.hub.warmviews)
            self.snapshot.write(views=drained)
        # the loops have ended before the shards and connections go (a loop that lost its
        # cancel would run on against them: dbclient.tasks)
        await cancel_and_wait(*self.tasks)
        for s in self.shards:
            await s.stop()
        self.arena.close()
        await self.db.close()
        await self.pub_db.close()
        if self.link is not None:
            await self.link.close()
        logging.getLogger().removeHandler(self.logs)

    # ------------------------------------------------------------------ entry points

    async def handle(self, req: Any) -> dict[str, Any]:
        """Answer one gateway request (the contract in `ipc.messages`)."""
        return await routes.dispatch(self.handlers, req)

    async def submit(self, events: list[Event], *, defer: bool = False) -> None:
        """Sequence events and wait until the shards applied them."""
        await self.sequencer.submit(events, defer=defer)

    async def _corrections(self, events: list[dict[str, Any]]) -> None:
        """The commit check's events (what committed, for changes that did not), through
        the sequencer like the database's own."""
        await self.sequencer.submit([(e["table"], e["op"], e["id"], e["record"])
                                     for e in events], defer=True)

    async def unregister(self, vid: str, *, deleted_at_ms: int | None = None) -> None:
        """Forget a view (`ssp.hub.views.ViewLifecycle.unregister`)."""
        await self.lifecycle.unregister(vid, deleted_at_ms=deleted_at_ms)

    # The scheduler link's port (`ssp.link.HubPort`).
    syncs_table = staticmethod(syncs_table)

    async def bootstrap_from(self, source: ProxySource, progress: Any = None) -> None:
        """Load every synced table through the scheduler's proxy."""
        await self.loading.bootstrap_from(source, progress)

    async def load_linked_snapshot(self, snap: dict[str, Any], source: ProxySource) -> None:
        """Warm start: the snapshot's rows (tables it lacks through the proxy)."""
        await self.loading.bootstrap_from(source, snap=snap)

    async def restore_linked_views(self, epoch: str, seq: int, assigned: set[str]
                                   ) -> tuple[int, str]:
        """Warm start: the views written beside the snapshot's rows at `(epoch, seq)` that
        the scheduler still assigns here, built on those rows (`ssp.hub.warmviews`); how
        many, and why none when none."""
        entries, why = take_views(self.snapshot.views_path, epoch, seq)
        if not entries:
            return 0, why or "the views file holds no view"
        n = await self.warm_views.restore(entries, assigned)
        return n, "" if n else "none of the file's views is assigned here any more"

    def linked_snapshot(self) -> tuple[dict[str, Any] | None, str]:
        """The snapshot with a scheduler position, or None and why not."""
        return self.snapshot.read_linked()

    async def catch_up(self, data: bytes) -> dict[str, Any]:
        """Apply a typed batch of the scheduler's events while bootstrapping."""
        return await self.admission.catch_up(data)

    async def forget_rows(self) -> None:
        """Drop every row and view before a reload from the scheduler."""
        await self.loading.forget_rows()
