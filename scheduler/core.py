"""The coordinator's state: WAL, replica, SSP registry and state machine, views, broadcast.

One :class:`Scheduler` per process, driven by one asyncio loop; the HTTP listener
(:mod:`scheduler.app`) only parses bodies and maps the answers below to statuses.

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
* ``incidents``: the incident store (:mod:`scheduler.admin.incidents`) every part of the
  scheduler records through (drift's ``schema_change``, the backend monitor, the admin plane).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import aiohttp

from dbclient import Database, DbError
from dbclient.fieldtypes import FieldTypes
from engine.hashing import hash_text
from engine.values import RecordID, parse_record_id
from ipc import typed
from ipc.http import client_session
from scheduler.admin.incidents import IncidentStore
from scheduler.config import IngestTransport, SchedulerConfig
from scheduler.drift import DriftChecker, default_tables
from scheduler.feed import CURSOR_MARGIN_MS, ChangefeedTail, disabled_status
from scheduler.proxy import json_default
from scheduler.replica import CloneInProgress, Replica
from scheduler.views import Candidate, ViewTracker, rank_candidates
from scheduler.wal import GroupCommitter, Wal, validate_event

__all__ = ["Outbound", "Reply", "Scheduler", "SchedulerBusy", "SspEntry", "SspState"]

log = logging.getLogger("scheduler")

BATCH_MAX = 1000  # events per POST /ingest to an SSP (`bootstrap_chunk_size` may lower it)
_BACKOFF_MIN = 0.05
_BACKOFF_MAX = 2.0
VERSION = "0.1.0"
SCHEMA_WATCH_SECS = 5.0  # how often newly hooked tables are looked for (`_schema_watch`)


class SspState(str, Enum):
    """Scheduler-side SSP states."""

    BOOTSTRAPPING = "bootstrapping"
    REPLAYING = "replaying"
    READY = "ready"
    LAGGING = "lagging"  # Ready, but more than max_buffer_per_ssp events wait to be sent


# A Lagging SSP keeps its queue (the spec forces a re-bootstrap only for Bootstrapping and
# Replaying SSPs); past this many times the buffer limit it is re-bootstrapped anyway, so one
# SSP that heartbeats but never takes events cannot grow the scheduler's memory without end.
LAGGING_HARD_LIMIT_FACTOR = 10


class SchedulerBusy(Exception):
    """The scheduler cannot take this now (state cloning): a 503 with ``message``."""


@dataclass
class Reply:
    """An HTTP answer decided by the core: status and JSON body, or raw bytes relayed."""

    status: int
    body: Any = None
    raw: bytes | None = None
    content_type: str = "application/json"


@dataclass(eq=False, slots=True)
class Outbound:
    """One event on its way to the SSPs (``seq`` its WAL sequence number), shared by every
    SSP's queue: packed in the typed encoding on first use, once for all of them."""

    seq: int
    event: dict[str, Any]
    packed: bytes | None = None

    def wire(self) -> bytes:
        """The event's typed bytes (``ipc.typed.encode_event``; TypeError when a value has
        no typed form, which the WAL's own encoding would have refused first)."""
        if self.packed is None:
            self.packed = typed.encode_event(self.event, self.seq)
        return self.packed


@dataclass(eq=False)
class SspEntry:
    """One registered SSP."""

    ssp_id: str
    url: str
    snapshot_seq: int
    registered_at: float = field(default_factory=time.monotonic)
    state: SspState = SspState.BOOTSTRAPPING
    holds_freeze: bool = True
    last_heartbeat: float | None = None  # monotonic; None until Replaying
    queue: deque[Outbound] = field(default_factory=deque)
    flagged: tuple[str, bool] | None = None  # (reason, clean)
    metrics: dict[str, Any] = field(default_factory=dict)
    sent_seq: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sender: asyncio.Task[None] | None = None
    send_failures: int = 0
    # False once the SSP refused the typed encoding (an older release): JSON from then on.
    typed: bool = True
    # Extra seconds before the reaper removes it: an SSP flagged while it bootstraps sends its
    # first heartbeat only when its bootstrap ends, and that heartbeat must still find the
    # entry to get its 409 (not a 404, which skips the clean wipe).
    reap_grace: float = 0.0

    def cpu(self) -> float:
        v = self.metrics.get("cpu_usage")
        return float(v) if isinstance(v, (int, float)) else 0.0

    def mem(self) -> float:
        v = self.metrics.get("memory_usage")
        return float(v) if isinstance(v, (int, float)) else 0.0


def _query_record(event_id: Any) -> RecordID | None:
    """The deleted ``_00_query`` record of an event (``_00_query:abc``), None when unreadable."""
    try:
        return event_id if isinstance(event_id, RecordID) else parse_record_id(str(event_id))
    except ValueError:
        return None


class Scheduler:
    """See the module docstring. ``open`` (sync, files) then ``start`` (async, tasks)."""

    def __init__(self, cfg: SchedulerConfig, *, db: Database | None = None) -> None:
        self.cfg = cfg
        self.state = "cloning"
        self.started = time.monotonic()
        self.db = db if db is not None else Database(cfg.db)
        self.replica = Replica.open(cfg.replica_db_path)
        self.field_types = FieldTypes(self.db)  # for rows that arrive as JSON (/ingest)
        self.wal = Wal.open(cfg.wal_path, min_next_seq=self.replica.applied_seq + 1)
        self.committer = GroupCommitter(self.wal)
        self.tracker = ViewTracker(cfg.replica_db_path.parent / "views.sqlite",
                                   clear=cfg.clear_views_on_start)
        self.entries: dict[str, SspEntry] = {}
        self.progress: dict[str, dict[str, Any]] = {}
        self.extra_health: dict[str, Callable[[], dict[str, Any]]] = {}
        # Jobs dispatched and not finished (the job plane replaces it when wired).
        self.running_jobs: Callable[[], int] = lambda: 0
        self.extra_snapshot: dict[str, Callable[[], dict[str, Any]]] = {}
        self.after_drain: list[Callable[[], Awaitable[None]]] = []
        self.ssp_events: list[Callable[[str, str, str], None]] = []
        self.job_plane: Any = None  # scheduler.jobs.JobPlane, set by add_job_routes
        self.incidents = IncidentStore(
            cfg.data_dir, source=cfg.scheduler_id,
            secrets=(cfg.auth_secret or "", cfg.db.password or "", cfg.admin.password or ""))
        self.ingested = 0
        self.dropped_batches = 0
        self.last_clone: dict[str, Any] | None = None
        # The backup plane (scheduler.backups): while set, the state is Restoring (ingest,
        # reclone and SSP registration answer 503; the changefeed tail is stopped).
        self.restore_hold: str | None = None
        self._next_pub = self.wal.last_seq + 1
        self._pending: dict[int, dict[str, Any]] = {}
        self._drain_lock = asyncio.Lock()
        self._rr_turn = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._clone_task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._auth = {"Authorization": f"Bearer {cfg.auth_secret or 'scheduler'}"}
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
        self.drift = DriftChecker(self.replica, self.db, self.ingest_many, self.reclone,
                                  cfg.drift, self._undrained,
                                  component=cfg.scheduler_id, sink=self.incidents.record)
        self.extra_snapshot["drift"] = self.drift.status
        self.after_drain.append(self._check_drift)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Replay the WAL, start the loops, connect upstream, clone if needed, then ready."""
        self._session = client_session(
            timeout=aiohttp.ClientTimeout(total=60, sock_connect=5))
        res = await asyncio.to_thread(
            self.replica.apply, self.wal.replay(self.replica.applied_seq))
        if res.applied or res.rejected:
            log.info("replayed %d WAL events into the replica (%d rejected), applied_seq=%d",
                     res.applied, len(res.rejected), self.replica.applied_seq)
        for loop in (self._poll_loop, self._reaper_loop, self._drain_loop):
            self._loops.append(asyncio.create_task(loop(), name=loop.__name__))
        await self._connect_upstream()
        if self.cfg.clear_views_on_start:
            await self._delete_query_rows()
        if not self._clone_marker.exists():
            # A new replica, or a clone that a crash interrupted (events replayed from the
            # WAL on top of a partial clone would otherwise pass for a complete replica).
            await self._clone("startup")
        self.state = "restoring" if self.restore_hold else "ready"
        log.info("scheduler %s: applied_seq=%d latest_seq=%d", self.state,
                 self.replica.applied_seq, self.wal.last_seq)
        if self.feed is not None and not self.restore_hold:
            await self.feed.start()
        self._spawn(self._check_drift(), "drift-startup")
        self._spawn(self._schema_watch(), "schema-watch")

    async def _check_drift(self) -> None:
        await self.drift.check_once()

    async def _schema_watch(self) -> None:
        """Every SCHEMA_WATCH_SECS: a table hooked upstream since the last look (`svc schema
        apply` writes its `_00_schema_state` row) is backfilled at once when the replica holds
        none of its rows, so the rows it had before the hooks reach the views in seconds, not
        at the next drift check (after a drain, every snapshot interval)."""
        seen: set[str] | None = None
        while True:
            try:
                rows = await self.db.query_one("SELECT VALUE record::id(id) FROM _00_schema_state",
                                               idempotent=True) or []
                now = {str(r) for r in rows}
                if seen is not None and now - seen and self.state == "ready":
                    done = await self.drift.backfill_new(sorted(now - seen))
                    if done:
                        log.info("schema: backfilled newly hooked tables %s", ", ".join(done))
                seen = now
            except DbError as e:
                log.debug("schema watch: %s", e)  # no schema applied yet, or the db is away
            except Exception:
                log.exception("schema watch failed")
            await asyncio.sleep(SCHEMA_WATCH_SECS)

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
        try:
            if "_00_query" in await self.db.tables():
                await self.db.query("DELETE _00_query RETURN NONE")
        except DbError as e:
            log.warning("could not delete the _00_query rows at start: %s", e)

    async def close(self) -> None:
        """Stop the loops and senders, flush the committer, close files and connections."""
        if self._closed:
            return
        self._closed = True
        if self.feed is not None:
            await self.feed.stop()
        for t in self._loops:
            t.cancel()
        if self._clone_task is not None:
            self._clone_task.cancel()
        for e in self.entries.values():
            if e.sender is not None:
                e.sender.cancel()
        for t in list(self._tasks):
            t.cancel()
        pending = [*self._loops, *self._tasks,
                   *(e.sender for e in self.entries.values() if e.sender is not None)]
        if self._clone_task is not None:
            pending.append(self._clone_task)
        await asyncio.gather(*pending, return_exceptions=True)
        task = self.committer._task
        if task is not None and not task.done():
            await asyncio.gather(task, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
        with contextlib.suppress(Exception):
            await self.db.close()
        self.incidents.shutdown()
        self.wal.close()
        self.tracker.close()
        self.replica.close()

    def _spawn(self, coro: Awaitable[Any], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())

    # ------------------------------------------------------------------ ingest
    async def ingest(self, event: Mapping[str, Any]) -> int:
        """One event from ``POST /ingest``: SchedulerBusy while cloning, ValueError when
        invalid, OSError when the WAL cannot take it; else its durable ``seq``.

        The row arrived as JSON: its record links and datetimes are typed again from the
        table's field definitions before the WAL, so the replica (and its hash) holds what the
        database holds, like rows read from the changefeed or cloned."""
        if self.state != "ready":
            raise SchedulerBusy(f"the scheduler is {self.state}"
                                + (" its replica" if self.state == "cloning" else ""))
        checked = validate_event(event)
        if isinstance(checked["id"], str) and checked["record"] is not None:
            checked["record"] = await self.field_types.restore(
                checked["table"], checked["id"], checked["record"])
        return await asyncio.shield(self._commit_one(checked))

    async def _commit_one(self, event: dict[str, Any]) -> int:
        seq = await self.committer.submit(event)
        self._publish(seq, event)
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
            self._publish(seq, ev)
        return seqs

    def _publish(self, seq: int, event: dict[str, Any]) -> None:
        self.ingested += 1
        self._pending[seq] = event
        while self._next_pub in self._pending:
            s = self._next_pub
            self._deliver(s, self._pending.pop(s))
            self._next_pub += 1

    def _deliver(self, seq: int, event: dict[str, Any]) -> None:
        out = Outbound(seq, event)
        for e in list(self.entries.values()):
            if e.flagged is not None or seq <= e.snapshot_seq:
                continue
            e.queue.append(out)
            limit = self.cfg.max_buffer_per_ssp
            if len(e.queue) > limit:
                if e.state is SspState.BOOTSTRAPPING or e.state is SspState.REPLAYING:
                    self.flag_ssp(e.ssp_id, f"buffer overflow: more than {limit} events "
                                  "queued", True)
                    continue
                if e.state is SspState.READY:
                    e.state = SspState.LAGGING
                    log.warning("SSP %s lagging: more than %d events wait to be sent",
                                e.ssp_id, limit)
                if len(e.queue) > limit * LAGGING_HARD_LIMIT_FACTOR:
                    self.flag_ssp(e.ssp_id, f"lagging: more than "
                                  f"{limit * LAGGING_HARD_LIMIT_FACTOR} events queued", True)
                    continue
            if e.state is not SspState.BOOTSTRAPPING:
                e.wake.set()
        if event["table"] == "_00_query" and event["op"] == "DELETE":
            record = _query_record(event["id"])
            if record is not None:
                self._spawn(self._unregister_if_gone(record), f"query-delete-query:{record.id}")

    async def _unregister_if_gone(self, record: RecordID) -> None:
        """The unregister rule for a `_00_query` DELETE from the feed: the view goes, unless
        its row exists again. The feed delivers the delete after its commit, possibly seconds
        later; a client that re-registered the same id meanwhile has a row again (its SSP
        writes it at registration), and that registration must not be undone."""
        view_id = f"query:{record.id}"
        try:
            back = await self.db.query("SELECT VALUE id FROM $q", {"q": record})
            if back and back[0]:
                log.info("view %s was registered again after its row's delete; kept", view_id)
                return
        except DbError as e:
            log.info("cannot tell whether %s was registered again (%s); unregistering",
                     view_id, e)
        self.unregister_view(view_id)

    # ------------------------------------------------------------------ replica drain
    async def drain(self) -> bool:
        """Apply the WAL to the replica and truncate it; False when frozen or cloning."""
        async with self._drain_lock:
            if self.replica.frozen or self.replica.cloning:
                return False
            await asyncio.to_thread(self._drain_sync)
        if not any(e.queue for e in self.entries.values()) and not self.replica.frozen:
            for hook in list(self.after_drain):
                try:
                    await hook()
                except Exception:
                    log.exception("after-drain hook failed")
        return True

    def _drain_sync(self) -> None:
        res = self.replica.apply(self.wal.replay(self.replica.applied_seq))
        for seq, why in res.rejected[:20]:
            log.warning("replica rejected WAL event %d: %s", seq, why)
        self.wal.truncate_through(self.replica.applied_seq)

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
                self.flag_ssp(ssp_id, f"replica re-cloned: {reason}", True)
            await self._clone(reason)
        finally:
            self.state = "ready"

    async def hold_for_restore(self, reason: str) -> None:
        """Enter Restoring (a restore replaces the database): ingest, reclone and SSP
        registration answer 503 and the changefeed tail stops until :meth:`release_restore`."""
        self.restore_hold = reason
        self.state = "restoring"
        if self.feed is not None:
            await self.feed.stop()
        log.warning("scheduler restoring: %s", reason)

    async def release_restore(self, reason: str) -> None:
        """Leave Restoring: re-clone the replica from the database as it is now (every SSP
        flagged to re-bootstrap), then restart the changefeed tail. Raises what the clone
        raises; the caller holds again on failure."""
        self.restore_hold = None
        since_ms = int(time.time() * 1000)
        await self.reclone(reason)
        if self.feed is not None:
            # From the re-clone on, without the usual margin: the feed still holds the changes
            # made before the database was replaced (REMOVE TABLE does not drop them), and
            # read again they would put pre-restore rows back over the restored ones.
            await self.feed.reset(since_ms)
            await self.feed.start()

    @property
    def _clone_marker(self) -> Path:
        """Present while the replica holds a complete clone (removed when one starts)."""
        p = self.cfg.replica_db_path
        return p.with_name(p.name + ".cloned")

    async def _clone(self, reason: str) -> None:
        self.state = "cloning"
        async with self._drain_lock:
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
            await asyncio.to_thread(self._drain_sync)
            self._clone_marker.write_text(json.dumps({"reason": reason, "at": started}))
        self.last_clone = {"reason": reason, "at": started, "secs": time.time() - started,
                           "rows": sum(counts.values())}
        self.drift.note_recloned()
        if self.feed is not None:  # the feed restarts from the clone (re-reads are harmless)
            await self.feed.reset(int(started * 1000) - CURSOR_MARGIN_MS)
        log.info("replica cloned: %d rows in %d tables", sum(counts.values()), len(counts))

    # ------------------------------------------------------------------ SSP registry
    async def register_ssp(self, ssp_id: str, url: str) -> Reply:
        """``POST /ssp/register`` (body already validated): 202 ``{snapshot_seq}``."""
        if self.state != "ready":
            return Reply(503, {"error": self.state,
                               "message": f"the scheduler is {self.state}; retry"})
        old = self.entries.get(ssp_id)
        if old is not None:
            self._drop_entry(old)
        self._note(ssp_id, "registered" if old is None else "reregistered",
                   "" if old is None else old.state.value)
        async with self._drain_lock:
            if not self.replica.frozen and not self.replica.cloning:
                await asyncio.to_thread(self._drain_sync)
            # No await from here on: the backfill and the entry appear atomically w.r.t.
            # publication, so every seq > snapshot_seq reaches the queue exactly once.
            snapshot_seq = self.replica.freeze()
            entry = SspEntry(ssp_id, url.rstrip("/"), snapshot_seq)
            for seq, ev in self.wal.replay(snapshot_seq):
                if seq >= self._next_pub:
                    break
                entry.queue.append(Outbound(seq, ev))
            self.entries[ssp_id] = entry
        entry.sender = asyncio.create_task(self._sender(entry), name=f"sender-{ssp_id}")
        entry.sender.add_done_callback(self._task_done)
        if len(entry.queue) > self.cfg.max_buffer_per_ssp:
            self.flag_ssp(ssp_id, "buffer overflow at registration", True)
        log.info("SSP %s registered at %s (snapshot_seq=%d)", ssp_id, entry.url, snapshot_seq)
        return Reply(202, {"snapshot_seq": snapshot_seq})

    def _release_freeze(self, e: SspEntry) -> None:
        if e.holds_freeze:
            e.holds_freeze = False
            self.replica.unfreeze()

    def _drop_entry(self, e: SspEntry) -> None:
        self._release_freeze(e)
        if e.sender is not None:
            e.sender.cancel()
        e.queue.clear()
        if self.entries.get(e.ssp_id) is e:
            del self.entries[e.ssp_id]

    def flag_ssp(self, ssp_id: str, reason: str, clean: bool) -> bool:
        """Mark an SSP for re-bootstrap: next heartbeat answers 409 ``{reason, clean}``.
        Its buffer is cleared and its freeze released. False when unknown."""
        e = self.entries.get(ssp_id)
        if e is None:
            return False
        if e.flagged is None:
            log.warning("SSP %s flagged for re-bootstrap: %s", ssp_id, reason)
            e.flagged = (reason, clean)
            self._note(ssp_id, "flagged", reason)
            if e.last_heartbeat is None:
                e.last_heartbeat = time.monotonic()
                e.reap_grace = float(self.cfg.bootstrap_timeout_secs)
        e.queue.clear()
        self._release_freeze(e)
        if e.sender is not None:
            e.sender.cancel()
        return True

    def remove_ssp(self, ssp_id: str, reason: str) -> None:
        """Remove an SSP and move its views to the ready ones."""
        e = self.entries.get(ssp_id)
        if e is None:
            return
        log.warning("SSP %s removed: %s", ssp_id, reason)
        self._drop_entry(e)
        self._note(ssp_id, "removed", reason)
        moved = self.tracker.unassign(ssp_id)
        if moved:
            self._spawn(self._place_unassigned(), f"reassign-{ssp_id}")

    def _note(self, ssp_id: str, what: str, reason: str) -> None:
        for fn in list(self.ssp_events):
            try:
                fn(ssp_id, what, reason)
            except Exception:  # noqa: BLE001 - an observer must not break the SSP registry
                log.exception("ssp event observer failed")

    def heartbeat(self, body: Mapping[str, Any]) -> Reply:
        """``POST /ssp/heartbeat`` (body validated)."""
        ssp_id = body["ssp_id"]
        e = self.entries.get(ssp_id)
        if e is None:
            return Reply(404, {"error": "not_found",
                               "message": f"SSP {ssp_id} is not registered; register again"})
        if e.flagged is not None:
            reason, clean = e.flagged
            self.remove_ssp(ssp_id, f"answered 409 ({reason})")
            return Reply(409, {"reason": reason, "clean": clean})
        e.last_heartbeat = time.monotonic()
        for k in ("timestamp", "views", "cpu_usage", "memory_usage", "version",
                  "publication", "last_seq"):
            if k in body:
                e.metrics[k] = body[k]
        return Reply(200, {"ok": True})

    def bootstrap_progress(self, body: Mapping[str, Any]) -> None:
        ssp_id = body.get("ssp_id")
        if isinstance(ssp_id, str) and ssp_id in self.entries:  # unknown ids: nothing kept
            self.progress[ssp_id] = {**body, "received_at": time.time()}

    async def _poll_loop(self) -> None:
        interval = self.cfg.ssp_poll_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            booting = [e for e in self.entries.values()
                       if e.state is SspState.BOOTSTRAPPING and e.flagged is None]
            if booting:
                await asyncio.gather(*(self._poll_one(e) for e in booting))

    async def _poll_one(self, e: SspEntry) -> None:
        assert self._session is not None
        try:
            async with self._session.get(f"{e.url}/health",
                                         timeout=aiohttp.ClientTimeout(total=5)) as r:
                body = await r.json(content_type=None)
            ready = isinstance(body, dict) and body.get("status") == "ready"
        except (aiohttp.ClientError, TimeoutError, ValueError):
            ready = False
        if self.entries.get(e.ssp_id) is not e or e.flagged is not None:
            return
        if ready:
            log.info("SSP %s bootstrapped; replaying %d buffered events", e.ssp_id, len(e.queue))
            self._release_freeze(e)
            e.state = SspState.REPLAYING
            e.last_heartbeat = time.monotonic()
            e.wake.set()
        elif time.monotonic() - e.registered_at > self.cfg.bootstrap_timeout_secs:
            self.flag_ssp(e.ssp_id, f"bootstrap not finished within "
                          f"{self.cfg.bootstrap_timeout_secs}s", True)

    async def _reaper_loop(self) -> None:
        timeout = self.cfg.heartbeat_timeout_ms / 1000
        while True:
            await asyncio.sleep(min(timeout / 4, 1.0))
            now = time.monotonic()
            for e in list(self.entries.values()):
                if e.last_heartbeat is not None and \
                        now - e.last_heartbeat > timeout + e.reap_grace:
                    self.remove_ssp(e.ssp_id, f"no heartbeat for {now - e.last_heartbeat:.1f}s")

    # ------------------------------------------------------------------ sending
    async def _sender(self, e: SspEntry) -> None:
        backoff = _BACKOFF_MIN
        limit = min(self.cfg.bootstrap_chunk_size, BATCH_MAX)
        chunk = limit
        while True:
            await e.wake.wait()
            e.wake.clear()
            while e.queue and e.state is not SspState.BOOTSTRAPPING and e.flagged is None:
                batch = [e.queue[i] for i in range(min(chunk, len(e.queue)))]
                status = await self._post_batch(e, batch)
                if status == 413 and len(batch) > 1:
                    # Over the SSP's body limit: halve the batch until it fits (and grow
                    # back to the configured size once batches pass again).
                    chunk = max(1, len(batch) // 2)
                    continue
                if status == 413:
                    status = 400  # one event the SSP can never take: as malformed
                if status == 200:
                    chunk = min(limit, chunk * 2)
                if status == 200 or status == 400:
                    for _ in batch:
                        e.queue.popleft()
                    e.sent_seq = batch[-1].seq
                    e.send_failures = 0
                    backoff = _BACKOFF_MIN
                    if status == 400:
                        # Sending it again gets the same answer, and skipping it would leave
                        # the SSP's views silently wrong: it re-bootstraps from the replica,
                        # which holds these events.
                        self.dropped_batches += 1
                        self.flag_ssp(e.ssp_id, f"an ingest batch (seq {batch[0].seq}-"
                                      f"{batch[-1].seq}) was refused as malformed", True)
                        break
                    if e.state is SspState.LAGGING and not e.queue:
                        e.state = SspState.READY
                        log.info("SSP %s caught up (sent through seq %d)", e.ssp_id,
                                 e.sent_seq)
                else:
                    e.send_failures += 1
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, _BACKOFF_MAX)
            if e.state is SspState.REPLAYING and not e.queue and e.flagged is None:
                e.state = SspState.READY
                log.info("SSP %s ready (sent through seq %d)", e.ssp_id, e.sent_seq)
                self._spawn(self._resend_views(e), f"views-{e.ssp_id}")

    async def _post_batch(self, e: SspEntry, batch: list[Outbound]) -> int:
        assert self._session is not None
        try:
            if e.typed:
                data = typed.encode_batch([o.wire() for o in batch])
            else:
                data = json.dumps([{**o.event, "seq": o.seq} for o in batch],
                                  default=json_default, separators=(",", ":")).encode()
        except (TypeError, ValueError) as err:  # a value with no such form: it never will
            log.error("a batch for SSP %s (seq %d-%d) cannot be encoded, dropped: %s",
                      e.ssp_id, batch[0].seq, batch[-1].seq, err)
            return 400
        ctype = typed.CONTENT_TYPE if e.typed else "application/json"
        try:
            async with self._session.post(f"{e.url}/ingest", data=data,
                                          headers={**self._auth, "Content-Type": ctype}) as r:
                status, text = r.status, await r.text()
        except (aiohttp.ClientError, TimeoutError) as err:
            log.info("SSP %s unreachable for ingest (%s); retrying", e.ssp_id,
                     type(err).__name__)
            return 0
        if e.typed and status in (400, 415) and "Content-Type must be" in text:
            # An SSP of an older release: it still gets every event, as JSON (a schemaless
            # link or datetime then reaches it as text, as before).
            log.warning("SSP %s does not take %s (%d: %.200s); sending it JSON", e.ssp_id,
                        typed.CONTENT_TYPE, status, text)
            e.typed = False
            return await self._post_batch(e, batch)
        if status == 400:
            log.error("SSP %s refused a batch of %d events (seq %d-%d) as malformed, "
                      "dropped: %.300s", e.ssp_id, len(batch), batch[0].seq, batch[-1].seq,
                      text)
        elif status != 200:
            log.info("SSP %s answered %d to a batch; retrying", e.ssp_id, status)
        return status

    # ------------------------------------------------------------------ views
    def ready_ids(self) -> list[str]:
        # A Lagging SSP still holds its views and receives every event: it stays a candidate.
        return [i for i, e in self.entries.items()
                if e.state in (SspState.READY, SspState.LAGGING) and e.flagged is None]

    def _ranked(self, exclude: Iterable[str] = ()) -> list[str]:
        skip = set(exclude)
        counts = self.tracker.counts()
        cands = [Candidate(i, counts.get(i, 0), self.entries[i].cpu(), self.entries[i].mem())
                 for i in self.ready_ids() if i not in skip]
        return rank_candidates(self.cfg.load_balance, cands, self._rr_turn)

    async def _forward(self, ssp_id: str, path: str, body: Mapping[str, Any]
                       ) -> tuple[int, bytes, str] | None:
        """POST to an SSP; (status, body, content type) or None when unreachable."""
        e = self.entries.get(ssp_id)
        if e is None or self._session is None:
            return None
        try:
            async with self._session.post(
                    f"{e.url}{path}", data=json.dumps(body, default=json_default).encode(),
                    headers={**self._auth, "Content-Type": "application/json"}) as r:
                return r.status, await r.read(), r.headers.get("Content-Type",
                                                                "application/json")
        except (aiohttp.ClientError, TimeoutError) as err:
            log.warning("SSP %s unreachable for %s (%s)", ssp_id, path, type(err).__name__)
            return None

    async def register_view(self, view_id: str, body: Mapping[str, Any]) -> Reply:
        """``POST /view/register`` (body validated; ``view_id`` normalised)."""
        if not self.ready_ids():
            return Reply(503, {"error": "no_ssp", "message": "no SSP is ready"})
        order = self._ranked()
        tracked = self.tracker.get(view_id)
        if tracked is not None and tracked["ssp_id"] in order:
            order.remove(tracked["ssp_id"])
            order.insert(0, tracked["ssp_id"])
        failures: list[str] = []
        for ssp_id in order:
            res = await self._forward(ssp_id, "/view/register", body)
            if res is None or res[0] >= 500:
                failures.append(f"{ssp_id}: " + ("unreachable" if res is None else
                                f"{res[0]} {res[1][:200].decode(errors='replace')}"))
                continue
            status, raw, ctype = res
            if status == 200:
                if tracked is None or tracked["ssp_id"] != ssp_id:
                    self._rr_turn += 1  # round robin advances on a new placement only
                entry = self.tracker.set(view_id, ssp_id, body)
                return Reply(200, {"query_id": view_id, "ssp_id": ssp_id,
                                   "assigned_at": entry["assigned_at"]})
            return Reply(status, raw=raw, content_type=ctype)
        log.warning("view %s: no SSP accepted it (%s)", view_id, "; ".join(failures))
        return Reply(503, {"error": "no_ssp",
                           "message": "no SSP accepted the view: " + "; ".join(failures)})

    def unregister_view(self, view_id: str) -> None:
        """Forget a view now; tell its SSP in the background."""
        entry = self.tracker.pop(view_id)
        if entry is not None and entry["ssp_id"] in self.entries:
            self._spawn(self._forward(entry["ssp_id"], "/view/unregister", {"id": view_id}),
                        f"unregister-{view_id}")

    async def _resend_views(self, e: SspEntry) -> None:
        for view_id in self.tracker.of_ssp(e.ssp_id):
            entry = self.tracker.get(view_id)
            if entry is None:
                continue
            res = await self._forward(e.ssp_id, "/view/register", entry["body"])
            if res is not None and 400 <= res[0] < 500:
                log.warning("SSP %s refused tracked view %s (%d); dropped", e.ssp_id,
                            view_id, res[0])
                self.tracker.pop(view_id)
        await self._place_unassigned()

    async def _place_unassigned(self) -> None:
        for view_id in self.tracker.of_ssp(None):
            entry = self.tracker.get(view_id)
            if entry is None or entry["ssp_id"] is not None:
                continue
            for ssp_id in self._ranked():
                res = await self._forward(ssp_id, "/view/register", entry["body"])
                if res is None or res[0] >= 500:
                    continue
                if res[0] == 200:
                    self._rr_turn += 1
                    self.tracker.set(view_id, ssp_id, entry["body"])
                    log.info("view %s placed on SSP %s", view_id, ssp_id)
                else:
                    log.warning("SSP %s refused view %s on reassignment (%d); dropped",
                                ssp_id, view_id, res[0])
                    self.tracker.pop(view_id)
                break

    # ------------------------------------------------------------------ status
    def health(self) -> Reply:
        ready = self.ready_ids()
        now = time.monotonic()
        body: dict[str, Any] = {
            "status": "healthy" if ready else "unavailable",
            "scheduler": {
                "id": self.cfg.scheduler_id,
                "state": self.state,
                "replica_lag": self.wal.last_seq - self.replica.applied_seq,
                "applied_seq": self.replica.applied_seq,
                "latest_seq": self.wal.last_seq,
                "ready_ssps": len(ready),
                "total_ssps": len(self.entries),
            },
            "heartbeat": self._heartbeat_probe(now),
            "changefeed": {"enabled": False},
        }
        for name, provider in self.extra_health.items():
            body[name] = provider()
        feed = body.get("changefeed") or {}
        if ready and (feed.get("gap") or feed.get("stalled")):
            # Events stopped flowing from the database: SSPs serve, but go stale.
            body["status"] = "degraded"
        return Reply(200 if ready else 503, body)

    def _heartbeat_probe(self, now: float) -> dict[str, Any]:
        """The end-to-end view of `/health`: per SSP, how long ago it heartbeated, the last
        event sent to it, the last one it reports applied (`last_seq` of its heartbeat) and how
        many events it is behind the WAL; `ok` when there is an SSP and every Ready one
        heartbeated within the timeout."""
        latest = self.wal.last_seq
        timeout = self.cfg.heartbeat_timeout_ms / 1000
        ssps: dict[str, Any] = {}
        ok = True
        for i, e in self.entries.items():
            ago = None if e.last_heartbeat is None else round(now - e.last_heartbeat, 3)
            acked = e.metrics.get("last_seq")
            acked = acked if isinstance(acked, int) and not isinstance(acked, bool) else None
            ssps[i] = {"state": e.state.value, "seconds_ago": ago, "sent_seq": e.sent_seq,
                       "acked_seq": acked,
                       "behind": None if acked is None else max(0, latest - acked)}
            if e.state in (SspState.READY, SspState.LAGGING) and e.flagged is None:
                ok = ok and ago is not None and ago <= timeout
        return {"ok": ok and bool(ssps), "timeout_ms": self.cfg.heartbeat_timeout_ms,
                "latest_seq": latest,
                "last_heartbeat_seconds_ago": {i: v["seconds_ago"] for i, v in ssps.items()
                                               if v["seconds_ago"] is not None},
                "ssps": ssps}

    def snapshot(self) -> dict[str, Any]:
        tables = {t: self.replica.count(t) for t in self.replica.tables()}
        # The same wire text as the SSP's circuit_hashes (16 hex digits).
        hashes = {t: hash_text(self.replica.hash(t)) for t in tables}
        applied = self.replica.applied_seq
        body: dict[str, Any] = {
            "tables": tables,
            "hashes": hashes,
            "total_records": sum(tables.values()),
            "snapshot_seq": applied,
            "latest_seq": self.wal.last_seq,
            "lag": self.wal.last_seq - applied,
            "frozen": self.replica.frozen,
            "drift": {"enabled": False},
        }
        for name, provider in self.extra_snapshot.items():
            body[name] = provider()
        return body

    def metrics(self) -> dict[str, Any]:
        now = time.monotonic()
        counts = self.tracker.counts()
        ssps = []
        for i, e in self.entries.items():
            ssps.append({
                "id": i, "url": e.url, "state": e.state.value,
                "flagged": e.flagged[0] if e.flagged else None,
                "query_count": counts.get(i, 0),
                "views": e.metrics.get("views", 0),
                "cpu_usage": e.metrics.get("cpu_usage"),
                "memory_usage": e.metrics.get("memory_usage"),
                "version": e.metrics.get("version"),
                "last_seq": e.metrics.get("last_seq"),
                "last_heartbeat_seconds_ago": (round(now - e.last_heartbeat, 3)
                                               if e.last_heartbeat is not None else None),
                "queued": len(e.queue), "sent_seq": e.sent_seq,
                "send_failures": e.send_failures,
                "bootstrap_progress": self.progress.get(i),
            })
        return {
            "scheduler": {
                "total_ssps": len(self.entries),
                "ready_ssps": len(self.ready_ids()),
                "total_queries": len(self.tracker),
                "running_jobs": self.running_jobs(),
                "uptime_seconds": int(now - self.started),
                "state": self.state,
                "ingested": self.ingested,
                "dropped_batches": self.dropped_batches,
                "wal_batches": self.committer.batches,
                "applied_seq": self.replica.applied_seq,
                "latest_seq": self.wal.last_seq,
                "last_clone": self.last_clone,
            },
            "ssps": ssps,
        }

    def info(self) -> list[dict[str, Any]]:
        out = [{"entity": "scheduler", "id": self.cfg.scheduler_id, "status": self.state,
                "views": len(self.tracker), "version": VERSION}]
        counts = self.tracker.counts()
        for i, e in self.entries.items():
            out.append({"entity": "ssp", "id": i,
                        "status": "flagged" if e.flagged else e.state.value,
                        "views": e.metrics.get("views", counts.get(i, 0))})
        return out
