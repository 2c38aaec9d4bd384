"""The coordinator's composition root: WAL, replica, SSP registry and state machine, views,
broadcast.

One :class:`Scheduler` per process, driven by one asyncio loop; the HTTP listener
(:mod:`scheduler.app`) only parses bodies and maps the answers below to statuses.

Components (each given the shared state, :mod:`scheduler.state`, and the peers it calls):
:class:`~scheduler.placement.Placement` (which SSP holds a view), :class:`~scheduler.roster.Roster`
(flags and removals), :class:`~scheduler.delivery.Delivery` (the queues and the senders),
:class:`~scheduler.ssppool.SspPool` (registration, heartbeats, poll, reaper) and
:class:`~scheduler.status.Status` (health, snapshot, metrics, info). The root keeps the
lifecycle, ingest, the replica's drain and clones, and the entry points the listener calls.

Event pipeline: an event is appended to the WAL (fsync before the caller learns its ``seq``),
then handed to every SSP entry's outbound queue *in seq order* (a small reorder buffer keyed by
seq: concurrent appends resolve in order, but their callers resume in any order). One sender
task per SSP posts batches of up to ``bootstrap_chunk_size`` events (``seq`` added) to the
SSP's ``/ingest`` and retries a batch on 503 or a connection error with capped backoff, so
per-SSP order holds. Batches travel in the typed encoding of :mod:`ipc.typed` (record ids,
datetimes, decimals... as the database stored them; JSON would turn a SCHEMALESS link into
text); each event is packed once (:class:`Outbound`) and its bytes shared by every SSP's
batches, replays of buffered events and redeliveries included. An SSP that refuses that
Content-Type (400/415 naming it: an older release) gets JSON from then on. The
commit-and-publish step is shielded from the caller's cancellation: an event that reached the
WAL always reaches the queues.

SSP entries follow the spec's states (see ``SspState``): register -> Bootstrapping (replica
frozen at ``snapshot_seq``, events buffered) -> health poll says ready -> Replaying (freeze
released, buffer sent) -> Ready (buffer empty; its tracked views re-sent). A flagged entry
(buffer overflow, bootstrap timeout, reclone, :meth:`Scheduler.flag_ssp`) gets nothing more,
answers its next heartbeat with 409 ``{reason, clean}`` and is removed then. An entry without
heartbeat for ``heartbeat_timeout_ms`` (counted from Replaying on) is removed and its views are
placed on the other ready SSPs (or kept unplaced until one is ready).

Hooks for other modules (the changefeed tail, drift, the admin plane):

* ``await ingest_many(events) -> list[int]``: WAL + broadcast, accepted in any state
  (events read from the database while a clone runs are replayed on top of it, guarded by
  ``_00_rv``); ValueError for an invalid event (nothing written).
* ``await reclone(reason)``: state ``cloning``, every SSP flagged clean, replica re-cloned.
* ``flag_ssp(ssp_id, reason, clean) -> bool``.
* ``extra_health[name]`` / ``extra_snapshot[name]``: callables returning a dict merged into
  ``/health`` / ``/health/snapshot`` under ``name`` (``changefeed``, ``drift``).
* ``after_drain``: async callables run after each drain that left nothing buffered.
* ``ssp_events``: callables ``(ssp_id, what, reason)`` told when an SSP registers
  (``registered``, or ``reregistered`` with the state its old entry was in), is flagged
  (``flagged``) or removed (``removed``); the admin plane records incidents from them.
* ``incidents``: the incident store (:mod:`scheduler.incidents`) every part of the
  scheduler records through (drift's ``schema_change``, the backend monitor, the admin plane).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from dbclient import Database, DbError
from dbclient.clock import now_ms
from dbclient.commitcheck import CommitCheck, applies_to
from dbclient.errors import retry_conflicts
from dbclient.tasks import cancel_and_wait
from engine.wire import check_record
from ipc.http import client_session
from scheduler.config import IngestTransport, SchedulerConfig
from scheduler.delivery import Delivery
from scheduler.drift import DriftChecker, default_tables
from scheduler.entries import (
    LAGGING_HARD_LIMIT_FACTOR,
    Outbound,
    Reply,
    SchedulerBusy,
    SspEntry,
    SspState,
)
from scheduler.feed import CURSOR_MARGIN_MS, ChangefeedTail, disabled_status
from scheduler.placement import Placement
from scheduler.replica import CloneInProgress
from scheduler.roster import Roster
from scheduler.ssppool import SspPool
from scheduler.state import CoordinatorState
from scheduler.status import Status
from scheduler.wal import validate_event

# The shared types live in `scheduler.entries` and are named here for the modules that import
# them.
__all__ = ["LAGGING_HARD_LIMIT_FACTOR", "Outbound", "Reply", "Scheduler",
           "SchedulerBusy", "SspEntry", "SspState"]

log = logging.getLogger("scheduler")
# Attempts at the start's DELETE of the _00_query rows that lose a write conflict.
DELETE_ROWS_ATTEMPTS = 10
# WAL events a periodic fold applies per part (`Scheduler._fold`): ~2,000 took ~0.1 s.
FOLD_CHUNK = 2_000


class Scheduler(CoordinatorState):
    """The composition root (see the module docstring): ``open`` (sync, files) then ``start``
    (async, tasks)."""

    def __init__(self, cfg: SchedulerConfig, *, db: Database | None = None) -> None:
        super().__init__(cfg, db)
        self.job_plane: Any = None  # scheduler.jobs.JobPlane, set by add_job_routes
        self.workflows: Any = None  # scheduler.workflows.engine.WorkflowEngine (its attach)
        # The components, each given the peers it calls (see the module docstring).
        self.placement = Placement(self, self.sync_sources)
        self.roster = Roster(self, self.placement)
        self.delivery = Delivery(self, self.roster, self.placement)
        self.pool = SspPool(self, self.roster, self.delivery)
        self.reports = Status(self, self.placement)
        # Tables with a `_00_schema_state` row at the last look (None: not looked yet), and
        # the registrations' sync with the database (`sync_sources`).
        self._hooked: set[str] | None = None
        self._hook_lock = asyncio.Lock()
        self._sync_lock = asyncio.Lock()
        self._synced_from = 0.0
        self._loops: list[asyncio.Task[None]] = []
        self._clone_task: asyncio.Task[None] | None = None
        self._closed = False
        # Changefeed transport and drift (scheduler.feed, scheduler.drift) through the hooks.
        self.feed: ChangefeedTail | None = None
        if cfg.ingest_transport is IngestTransport.CHANGEFEED:
            self.feed = ChangefeedTail(
                self.db, self.ingest_many, cfg.replica_db_path.parent / "changefeed.json",
                lambda: default_tables(self.db),
                on_gap=lambda: self.reclone("changefeed cursor older than the retention"))
            self.extra_health["changefeed"] = self.feed.status
        else:
            self.extra_health["changefeed"] = disabled_status
        # Changes posted from inside a transaction, checked against what committed
        # (transport http: a transaction may fail after its events fired).
        self.commits = CommitCheck(self.db, self.ingest_many)
        self.extra_health["commit_check"] = self.commits.status
        self.drift = DriftChecker(self.replica, self.db, self.ingest_many, self.reclone,
                                  cfg.drift, self._undrained,
                                  component=cfg.scheduler_id, sink=self.incidents.record)
        self.extra_snapshot["drift"] = self.drift.status
        self.after_drain.append(self._check_drift)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Replay the WAL, start the loops, connect upstream, clone if needed, then ready."""
        self.session = client_session(
            timeout=aiohttp.ClientTimeout(total=60, sock_connect=5))
        res = await self.in_replica_thread(
            self.replica.apply, self.wal.replay(self.replica.applied_seq))
        if res.applied or res.rejected:
            log.info("replayed %d WAL events into the replica (%d rejected), applied_seq=%d",
                     res.applied, len(res.rejected), self.replica.applied_seq)
        for loop in (self.pool.poll_loop, self.pool.reaper_loop, self._drain_loop,
                     self.commits.run):
            self._loops.append(asyncio.create_task(loop(), name=loop.__name__))
        await self._connect_upstream()
        if self.cfg.clear_views_on_start:
            await self._delete_query_rows()
        if not self._clone_marker.exists():
            # A new replica, or a clone that a crash interrupted (events replayed from the
            # WAL on top of a partial clone would otherwise pass for a complete replica).
            await self._clone("startup")
        else:
            self.epoch = self._marker_epoch()
        self.state = "restoring" if self.restore_hold else "ready"
        log.info("scheduler %s: applied_seq=%d latest_seq=%d", self.state,
                 self.replica.applied_seq, self.wal.last_seq)
        if self.feed is not None and not self.restore_hold:
            await self.feed.start()
        self.spawn(self._check_drift(), "drift-startup")
        self.spawn(self._schema_watch(), "schema-watch")

    async def _check_drift(self) -> None:
        await self.drift.check_once()

    async def _schema_watch(self) -> None:
        """`backfill_hooked` at start and every `schema_watch_secs` (0: at start only; every
        registration looks too, `sync_sources`), so the rows a table had before its hooks
        reach the views in seconds, not at the next drift check (after a drain, every
        snapshot interval)."""
        while True:
            try:
                await self.backfill_hooked()
            except DbError as e:
                log.debug("schema watch: %s", e)  # no schema applied yet, or the db is away
            except Exception:
                log.exception("schema watch failed")
            if self.cfg.schema_watch_secs <= 0:
                return
            await asyncio.sleep(self.cfg.schema_watch_secs)

    async def backfill_hooked(self) -> list[str]:
        """Backfill the tables hooked upstream since the last look (`svc schema apply` writes
        their `_00_schema_state` rows; :meth:`DriftChecker.backfill_new`): their rows written
        before the hooks are in no changefeed and no http event. The first look only notes
        what is hooked (the clone read those tables). Returns the tables backfilled."""
        rows = await self.db.query_one("SELECT VALUE record::id(id) FROM _00_schema_state",
                                       idempotent=True) or []
        now = {str(r) for r in rows}
        async with self._hook_lock:
            new = sorted(now - self._hooked) if self._hooked is not None else []
            done = (await self.drift.backfill_new(new)
                    if new and self.state == "ready" else [])
            self._hooked = now
        if done:
            log.info("schema: backfilled newly hooked tables %s", ", ".join(done))
        return done

    async def sync_sources(self) -> None:
        """Bring into the WAL every row the database holds now: tables hooked since the last
        look are backfilled and the changefeed is read to its end (a write committed before
        this call is then ingested). Registrations call it before they are forwarded, so a
        view's initial set holds those rows. Calls that queue up share one sync: a sync
        that started after a call was made covers it."""
        asked = time.monotonic()
        async with self._sync_lock:
            if self._synced_from >= asked:
                return
            self._synced_from = time.monotonic()
            try:
                await self.backfill_hooked()
                if self.feed is not None and self.restore_hold is None:
                    await self.feed.catch_up()
            except DbError as e:
                # The view is still registered: rows it missed reach it as events.
                log.warning("registration: the database could not be read up to now (%s)", e)

    def _undrained(self) -> bool:
        """Events the replica has not absorbed yet (drift compares only without them)."""
        return (self.wal.last_seq > self.replica.applied_seq or self.replica.frozen
                or any(e.queue for e in self.entries.values()))

    async def _connect_upstream(self) -> None:
        delay = 0.1
        while True:
            try:
                await self.db.connect()
                return
            except DbError as e:
                log.warning("database not reachable yet (%s); retrying in %.1fs", e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _delete_query_rows(self) -> None:
        # Clients re-register when their _00_query row disappears; deleting a record also
        # deletes the graph edges that point at it (tests/integration checks this holds).
        # SSPs still running from before write those rows (row counts, refreshes), so the
        # DELETE can lose a write conflict: it is sent again. Left undone, every view kept
        # its row and its edges while no SSP held it (test_ops_run_crash_recovery, the
        # scheduler's kill -9 under writes, about 1 run in 3 under load).
        async def delete() -> None:
            if "_00_query" in await self.db.tables():
                await self.db.query("DELETE _00_query RETURN NONE")

        try:
            await retry_conflicts(delete, attempts=DELETE_ROWS_ATTEMPTS)
        except DbError as e:
            log.warning("could not delete the _00_query rows at start: %s", e)

    async def close(self) -> None:
        """Stop the loops and senders, flush the committer, close files and connections."""
        if self._closed:
            return
        self._closed = True
        if self.feed is not None:
            await self.feed.stop()
        pending = [*self._loops, *self.tasks,
                   *(e.sender for e in self.entries.values() if e.sender is not None)]
        if self._clone_task is not None:
            pending.append(self._clone_task)
        # a loop whose cancel Python 3.11's wait_for loses runs on (dbclient.tasks)
        await cancel_and_wait(*pending)
        task = self.committer._task
        if task is not None and not task.done():
            await asyncio.gather(task, return_exceptions=True)
        if self.session is not None:
            await self.session.close()
        with contextlib.suppress(Exception):
            await self.db.close()
        self.incidents.shutdown()
        self.replica_thread.shutdown(wait=True)  # a fold part in flight ends first
        self.wal.close()
        self.tracker.close()
        self.replica.close()

    # ------------------------------------------------------------------ entry points
    # What the listener (`scheduler.app`), the admin plane and the job plane call; the work is
    # in the components.

    async def register_ssp(self, ssp_id: str, url: str, *, verified: bool = False,
                           warm: tuple[str, int] | None = None) -> Reply:
        """``POST /ssp/register`` (`SspPool.register_ssp`)."""
        return await self.pool.register_ssp(ssp_id, url, verified=verified, warm=warm)

    def catchup(self, ssp_id: str, after: int, through: int, limit: int) -> Reply:
        """``POST /ssp/catchup`` (`SspPool.catchup`)."""
        return self.pool.catchup(ssp_id, after, through, limit)

    def heartbeat(self, body: Mapping[str, Any]) -> Reply:
        """``POST /ssp/heartbeat`` (`SspPool.heartbeat`)."""
        return self.pool.heartbeat(body)

    def bootstrap_progress(self, body: Mapping[str, Any]) -> None:
        """``POST /ssp/bootstrap-progress`` (`SspPool.bootstrap_progress`)."""
        self.pool.bootstrap_progress(body)

    def flag_ssp(self, ssp_id: str, reason: str, clean: bool) -> bool:
        """Mark an SSP for re-bootstrap (`Roster.flag_ssp`); False when unknown."""
        return self.roster.flag_ssp(ssp_id, reason, clean)

    def remove_ssp(self, ssp_id: str, reason: str) -> None:
        """Remove an SSP and move its views (`Roster.remove_ssp`)."""
        self.roster.remove_ssp(ssp_id, reason)

    def ready_ids(self) -> list[str]:
        """The SSPs that take views (`Placement.ready_ids`)."""
        return self.placement.ready_ids()

    async def forward(self, ssp_id: str, path: str, body: Mapping[str, Any]
                      ) -> tuple[int, bytes, str] | None:
        """POST to an SSP (`Placement.forward`); None when unreachable."""
        return await self.placement.forward(ssp_id, path, body)

    async def register_view(self, view_id: str, body: Mapping[str, Any]) -> Reply:
        """``POST /view/register`` (`Placement.register_view`)."""
        return await self.placement.register_view(view_id, body)

    def unregister_view(self, view_id: str) -> None:
        """``POST /view/unregister`` (`Placement.unregister_view`)."""
        self.placement.unregister_view(view_id)

    def health(self) -> Reply:
        """``GET /health`` (`Status.health`)."""
        return self.reports.health()

    def snapshot(self) -> dict[str, Any]:
        """``GET /health/snapshot`` (`Status.snapshot`)."""
        return self.reports.snapshot()

    def metrics(self) -> dict[str, Any]:
        """``GET /metrics`` (`Status.metrics`)."""
        return self.reports.metrics()

    def info(self) -> list[dict[str, Any]]:
        """``GET /info`` (`Status.info`)."""
        return self.reports.info()

    # ------------------------------------------------------------------ ingest
    async def ingest(self, event: Mapping[str, Any], *, typed: bool = False) -> int:
        """One event from ``POST /ingest``: SchedulerBusy while cloning, ValueError when
        invalid, OSError when the WAL cannot take it; else its durable ``seq``.

        A row that arrived as JSON has its record links and datetimes typed again from the
        table's field definitions before the WAL, so the replica (and its hash) holds what the
        database holds, like rows read from the changefeed or cloned. A `typed` row (the
        event's `record_cbor`, `dbclient.eventrecord`) is as the database wrote it: only its
        id is checked against the event's."""
        if self.state != "ready":
            raise SchedulerBusy(f"the scheduler is {self.state}"
                                + (" its replica" if self.state == "cloning" else ""))
        checked = validate_event(event)
        if typed and checked["record"] is not None:
            checked["record"] = check_record(checked["table"], str(checked["id"]),
                                             dict(checked["record"]))
        elif isinstance(checked["id"], str) and checked["record"] is not None:
            checked["record"] = await self.field_types.restore(
                checked["table"], checked["id"], checked["record"])
        # A database event's row (typed, versioned) came from inside its transaction: it is
        # checked against what committed (dbclient.commitcheck).
        check = (typed and self.cfg.commit_check
                 and applies_to(checked["table"], checked["record"]))
        return await asyncio.shield(self._commit_one(checked, check))

    async def _commit_one(self, event: dict[str, Any], check: bool = False) -> int:
        seq = await self.committer.submit(event)
        self.delivery.publish(seq, event)
        if check:
            self.commits.note(event["table"], event["op"], event["record"])
        return seq

    async def ingest_many(self, events: Iterable[Mapping[str, Any]]) -> list[int]:
        """Append ``events`` to the WAL in one fsync and broadcast them (any state).

        ValueError (nothing written) when one is invalid."""
        checked = [validate_event(e) for e in events]
        if not checked:
            return []
        return await asyncio.shield(self._commit_many(checked))

    async def _commit_many(self, events: list[dict[str, Any]]) -> list[int]:
        seqs = await asyncio.to_thread(self.wal.append_many, events)
        for seq, ev in zip(seqs, events, strict=True):
            self.delivery.publish(seq, ev)
        return seqs

    # ------------------------------------------------------------------ replica drain
    async def drain(self) -> bool:
        """Apply the WAL to the replica and truncate it; False when frozen or cloning."""
        async with self.drain_lock:
            if self.replica.frozen or self.replica.cloning:
                return False
            await self._fold()
        if not any(e.queue for e in self.entries.values()) and not self.replica.frozen:
            for hook in list(self.after_drain):
                try:
                    await hook()
                except Exception:
                    log.exception("after-drain hook failed")
        return True

    async def _fold(self) -> None:
        """Apply the WAL to the replica FOLD_CHUNK events at a time, each part in a thread,
        resting after each part as long as it took. Why: the fold is Python work per event
        that holds the GIL, and in one piece (minutes of events) it starved this loop for
        seconds: a 10-minute soak at 500 writes/s stalled the scheduler 6.7-7.4 s at each
        5-minute fold, and write-to-edge p99 rose to 8.5-9.7 s in those minutes."""
        events = iter(self.wal.replay(self.replica.applied_seq))
        while True:
            began = time.monotonic()
            n = await self.in_replica_thread(self.apply_wal,
                                             itertools.islice(events, FOLD_CHUNK))
            if n < FOLD_CHUNK:
                return
            await asyncio.sleep(time.monotonic() - began)

    async def _drain_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.snapshot_update_interval_secs)
            if self.state == "ready":
                try:
                    await self.drain()
                except Exception:
                    log.exception("replica drain failed")

    # ------------------------------------------------------------------ cloning
    @property
    def cloning(self) -> bool:
        return self.state == "cloning"

    def start_reclone(self, reason: str) -> Reply:
        """``POST /admin/resync``: 202 and the clone in the background; 409 when one runs."""
        if self._clone_task is not None and not self._clone_task.done():
            return Reply(409, {"error": "reclone_running",
                               "message": "a reclone is already running"})
        if self.state != "ready":
            return Reply(503, {"error": self.state,
                               "message": f"the scheduler is {self.state}"})
        self._clone_task = asyncio.create_task(self.reclone(reason), name="reclone")
        return Reply(202, {"status": "cloning"})

    async def reclone(self, reason: str) -> None:
        """Re-clone the replica from the database and flag every SSP clean (re-bootstrap).

        Raises CloneInProgress when a clone already runs."""
        if self.replica.cloning:
            raise CloneInProgress("a clone of the replica is already running")
        if self.restore_hold:
            raise SchedulerBusy("the scheduler is restoring: only the restore re-clones")
        self.state = "cloning"
        try:
            for ssp_id in list(self.entries):
                self.roster.flag_ssp(ssp_id, f"replica re-cloned: {reason}", True)
            await self._clone(reason)
        finally:
            self.state = "ready"

    async def hold_for_restore(self, reason: str) -> None:
        """Enter Restoring (a restore replaces the database): ingest, reclone and SSP
        registration answer 503 and the changefeed tail stops until :meth:`release_restore`.
        Every SSP hears it in its next heartbeat's answer (`restoring`) and its periodic
        writers hold still; this waits for those answers (at most one heartbeat timeout) so
        the wipe does not race them."""
        self.restore_hold = reason
        self.state = "restoring"
        held_at = time.monotonic()
        if self.feed is not None:
            await self.feed.stop()
        log.warning("scheduler restoring: %s", reason)
        deadline = held_at + self.cfg.heartbeat_timeout_ms / 1000

        def told() -> bool:
            return all(e.last_heartbeat is not None and e.last_heartbeat >= held_at
                       for e in self.entries.values()
                       if e.flagged is None and e.last_heartbeat is not None)
        while not told() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if not told():
            log.warning("restore: some SSPs did not heartbeat within %.0f s; going on",
                        self.cfg.heartbeat_timeout_ms / 1000)

    async def release_restore(self, reason: str) -> None:
        """Leave Restoring: re-clone the replica from the database as it is now (every SSP
        flagged to re-bootstrap), then restart the changefeed tail. Raises what the clone
        raises; the caller holds again on failure."""
        self.restore_hold = None
        since_ms = now_ms()
        await self.reclone(reason)
        if self.feed is not None:
            # From the re-clone on, without the usual margin: the feed still holds the changes
            # made before the database was replaced (REMOVE TABLE does not drop them), and
            # read again they would put pre-restore rows back over the restored ones.
            await self.feed.reset(since_ms, floor=True)
            await self.feed.start()

    @property
    def _clone_marker(self) -> Path:
        """Present while the replica holds a complete clone (removed when one starts)."""
        p = self.cfg.replica_db_path
        return p.with_name(p.name + ".cloned")

    def _marker_epoch(self) -> str:
        """The epoch the clone marker names; a marker of an older release names none, so
        one is given to it now (the SSPs' snapshots from before carry none either)."""
        try:
            doc = json.loads(self._clone_marker.read_text())
        except (OSError, ValueError):
            doc = {}
        if not isinstance(doc, dict):
            doc = {}
        epoch = doc.get("epoch")
        if isinstance(epoch, str) and epoch:
            return epoch
        doc["epoch"] = uuid.uuid4().hex
        self._clone_marker.write_text(json.dumps(doc))
        return str(doc["epoch"])

    async def _clone(self, reason: str) -> None:
        self.state = "cloning"
        async with self.drain_lock:
            self._clone_marker.unlink(missing_ok=True)
            started = time.time()
            seq = self.wal.last_seq
            log.info("cloning the replica from the database (%s)", reason)
            delay = 0.2
            while True:
                try:
                    counts = await self.replica.clone_from(
                        self.db, self.cfg.bootstrap_page_size, applied_seq=seq)
                    break
                except DbError as e:
                    log.warning("clone failed (%s); retrying in %.1fs", e, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
            await self.in_replica_thread(self.apply_wal)
            epoch = uuid.uuid4().hex
            self._clone_marker.write_text(json.dumps({"reason": reason, "at": started,
                                                      "epoch": epoch}))
            self.epoch = epoch
        self.last_clone = {"reason": reason, "at": started, "secs": time.time() - started,
                           "rows": sum(counts.values())}
        self.drift.note_recloned()
        if self.feed is not None:  # the feed restarts from the clone (re-reads are harmless)
            await self.feed.reset(int(started * 1000) - CURSOR_MARGIN_MS)
        log.info("replica cloned: %d rows in %d tables", sum(counts.values()), len(counts))
