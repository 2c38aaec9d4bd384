"""The SSP hub: request dispatcher, sequencer, registry, bootstrap, changefeed tail, sweeps.

Data flow (one way): gateway request -> `Hub.handle` -> sequencer (`_apply`) -> every shard
(`ingest`) -> per-view deltas -> `Publisher` -> database.

Decisions documented here:
- Rows: the hub keeps every synced row once per host as canonical bytes
  (`engine.values.canonical_bytes`) in its memmap row arena (`ssp.rowarena`: in
  `SVC_SSP_ARENA_DIR`, else private memory under /dev/shm), the source for circuit hashes,
  `/debug/catchup-rows` and the snapshot. Shards map the arena read-only: a load (bootstrap, a
  new table, the rebuild of a restarted shard) sends arena handles, never the rows; every
  shard ingests every event and keeps the decoded rows its circuits evaluate (see `ssp.shard`).
- View identity (`auth_id`): the existing `_00_query` row's `auth_id` wins; else the
  registration's `params.auth_id`, else `params.auth.id` (text such as `user:alice`).
  `/view/register` is bearer-protected, so the caller is trusted to name the identity. A view
  id already held (or whose row exists) under another identity answers 409 `auth_mismatch`.
  `$auth.id` in the view resolves to that identity: the engine gets param `auth = {id}`.
  Without any identity the view is refused (400) unless `SVC_SSP_ANON_LIVE_QUERIES` is on;
  anonymous views publish into `_00_list_ref` with `auth_id` NONE.
- Types: the scheduler delivers events in the typed encoding of `ipc.typed` (every SurrealDB
  value as stored). A JSON ingest body (transport http: the database's event posts) carries
  record links and datetimes as strings; fields whose definition (`INFO FOR TABLE`) has a
  `record` or `datetime` type get them back, but a SCHEMALESS field has no definition, so a
  link written there arrives as a plain string (a view comparing it with a record id will not
  match). The changefeed transport keeps types.
- Serialisation: one `asyncio.Lock` (`_apply_lock`) orders ingest batches; registrations,
  unregistrations, shard rebuilds and reloads also wait for the batches in flight
  (`_exclusive`), so a view's initial members and the deltas that follow are consistent.
- Registration failures: every refusal is decided before anything held is touched, and after
  a failure at any later step the database holds the old view (intact, maintained) or nothing
  of it (ssp/README.md, "Registration failures").
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import zmq.asyncio
from surrealdb import RecordID
from surrealdb.data.types.duration import Duration

from dbclient import Database, DbAuthError, DbError, DbTimeout
from dbclient.feed import read_round
from dbclient.fieldtypes import field_kinds, restore_types
from engine.errors import QueryRejected
from engine.hashing import bytes_hash, hash_text
from engine.parser import MAX_DEPTH, parse
from engine.versions import rv_is_stale
from engine.shape import normalise
from engine.values import canonical_bytes, parse_record_id, record_id_text, unpack_value
from ipc.messages import (
    ErrorCode,
    error_reply,
    logs_reply,
    normalize_view_id,
    not_ready,
    parse_duration_ms,
    parse_timestamp,
    reply,
    request_expired,
)
from ipc.typed import check_record
from ipc.typed import decode as decode_typed
from ssp.allowlist import Allowlist
from ssp.backends import BackendMonitor, backend_routes, parse_backends
from ssp.backups import backup_routes
from ssp.config import SspConfig
from ssp.jobs import JobRunner, job_routes
from ssp.link import ProxySource, SchedulerExit, SchedulerLink
from ssp.naming import (
    EDGE_PREFIX,
    QUERY_TABLE,
    SINGLE_TABLE,
    auth_record,
    edge_table,
    view_id_of,
    view_record,
)
from ssp.publisher import Publisher, PubView, Teardown
from ssp.rowarena import HubRows, pack_handles
from ssp.shard import encode_request
from ssp.shards import ShardDown, ShardError, ShardHandle, ShardTimeout, shard_of
from ssp.viewmetrics import ViewMetrics

log = logging.getLogger("ssp.hub")

VERSION = "0.1.0"
PUBLICATION_SLOTS = 256
BATCH_MAX = 2000  # events per shard round trip
PIPELINE_DEPTH = 4  # ingest batches sent to the shards before the first reply is handled
LOAD_CHUNK = 2000  # rows per load message (arena handles: 8 bytes each on the wire)
FEED_LIMIT = 1000  # new change sets per feed round (the engine pages 1000 entries per read)
FEED_OVERLAP_VS = 2000 << 16  # re-read 2 s of the feed: late-visible commits are not lost
FEED_POLL_SECS = 2.0
CURSOR_MARGIN_MS = 5000  # cold start: tail from a little before the bootstrap read
LOG_RING = 10_000
VISIBILITY_PROBES = 16  # source-commit visibility probes at once (spec, Limits)
VISIBILITY_DEADLINE_SECS = 5.0
# Tables the SSP never loads (its own output and bookkeeping).
_SKIP_META = ("_00_query", "_00_version", "_00_list_ref", "_00_schema_state",
              "_00_query_allowlist", "_00_admin")
_LOADED_META = ("_00_app_release", "_00_user_feature")


def now_ms() -> int:
    """Unix time in milliseconds."""
    return int(time.time() * 1000)


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


class LogRing(logging.Handler):
    """The SSP's own log lines, numbered 1, 2, 3..., for `GET /logs`."""

    def __init__(self, size: int = LOG_RING) -> None:
        super().__init__(logging.INFO)
        self.lines: deque[tuple[int, Any]] = deque(maxlen=size)
        self.count = 0
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.add(self.format(record))
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)

    def add(self, line: Any) -> None:
        """Append one line (a string or a JSON object)."""
        self.count += 1
        self.lines.append((self.count, line))

    def poll(self, cursor: int | None, backfill: int | None, cap: int = 500) -> dict[str, Any]:
        """Lines after `cursor` (or the last `backfill`), per the `/logs` contract.

        The first poll (no cursor) returns the whole backfill asked for: the gateway has
        already bounded it (0..10,000, the ring's size). A follow-up poll returns at most
        `cap` lines. `gap` is true when lines the viewer never saw are gone: the cursor fell
        behind the ring, or it is ahead of the last line (the SSP restarted and numbering began
        again), in which case the viewer gets everything still held.
        """
        if cursor is None:
            n = max(0, min(backfill or 0, len(self.lines)))
            picked = list(self.lines)[len(self.lines) - n:] if n else []
            return logs_reply([ln for _, ln in picked], picked[-1][0] if picked else self.count,
                              False)
        if cursor > self.count:
            picked = list(self.lines)[-cap:]
            return logs_reply([ln for _, ln in picked], self.count, True)
        first = self.lines[0][0] if self.lines else self.count + 1
        gap = cursor + 1 < first and cursor < self.count
        picked = [(i, ln) for i, ln in self.lines if i > cursor][:cap]
        return logs_reply([ln for _, ln in picked], picked[-1][0] if picked else cursor, gap)


def to_json(v: Any) -> Any:
    """SurrealDB-typed values -> JSON-able (record ids and datetimes as SurrealDB text)."""
    if isinstance(v, dict):
        return {str(k): to_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [to_json(x) for x in v]
    if isinstance(v, RecordID):
        return record_id_text(v)
    if isinstance(v, datetime):
        return v.isoformat().replace("+00:00", "Z")
    if isinstance(v, (Decimal, UUID)):
        return str(v)
    if isinstance(v, Duration):
        return f"{v.elapsed}ns"
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


class Hub:
    """All SSP state and every route of the gateway <-> hub contract."""

    def __init__(self, cfg: SspConfig, *, ctx: zmq.asyncio.Context | None = None) -> None:
        self.cfg = cfg
        self.ctx = ctx or zmq.asyncio.Context.instance()
        self.db = Database(cfg.db)
        self.pub_db = Database(cfg.db)
        self.status = "bootstrapping"
        self.started = time.monotonic()
        self.views: dict[str, ViewState] = {}
        # Row bytes and table hashes, once per host, in the arena the shards map read-only.
        self.arena = HubRows(cfg.arena_dir, cfg.arena_segment_mb, cfg.memory_limit_mb)
        self.rows = self.arena.store
        self.rv: dict[str, Any] = {}
        self.field_types: dict[str, dict[str, str]] = {}
        self.bootstrap_warnings: list[str] = []
        self.cursors: dict[str, int] = {}
        self.tables: set[str] = set()  # synced tables known (kept by /reset: not reloaded)
        self.fingerprints: dict[str, Any] = {}
        self._seen: dict[str, set[int]] = {}
        self.feed_oversized = 0  # transactions with more feed entries than one read returns
        self.shards = [ShardHandle(i, cfg.shard_endpoint(i), self.ctx, self._shard_exited,
                                   arena_dir=str(self.arena.dir))
                       for i in range(cfg.shards)]
        self.publisher = Publisher(self.pub_db, ref_mode=cfg.ref_mode,
                                   throttle_ms=cfg.query_update_throttle_ms,
                                   view_lookup=self.views.get, rv_lookup=self.rv.get,
                                   flushers=cfg.publish_flushers,
                                   metrics=ViewMetrics(cfg.ssp_id, cfg.view_metrics_flush_ms,
                                                       self._view_size))
        self.logs = LogRing()
        self.allowlist = Allowlist(cfg.query_allowlist)
        self.slots = 0
        self.seq = 0
        self.generation = 0
        self.overload_rejections = 0
        self.last_seq = 0  # highest scheduler `seq` applied (batched ingest dedup)
        self._batch_lock = asyncio.Lock()
        self.ingested = 0
        # (event, its future, deferred?, monotonic arrival time)
        self._queue: asyncio.Queue[tuple[tuple[str, str, str, Any], asyncio.Future[None], bool,
                                         float]]
        self._queue = asyncio.Queue()
        self._probe_slots = asyncio.Semaphore(VISIBILITY_PROBES)
        self._deferred: set[asyncio.Task[None]] = set()
        self.visibility_fallbacks = 0
        self._apply_lock = asyncio.Lock()
        self._inflight: asyncio.Queue[Any] = asyncio.Queue(maxsize=PIPELINE_DEPTH)
        self._tasks: list[asyncio.Task[Any]] = []
        self._feed_wake = asyncio.Event()
        self._edge_tables: set[str] = set()
        self._define_lock = asyncio.Lock()
        self._missing: dict[str, int] = {}
        self._live: Any = None
        # Outbox jobs and backend health (ssp.jobs, ssp.backends): own connection, own loops.
        self.jobs = JobRunner(Database(cfg.db), cfg.job_tables, cfg.ssp_id,
                              sweep_secs=cfg.job_sweep_secs, standalone=cfg.standalone,
                              scheduler_url=cfg.scheduler_url, auth_secret=cfg.auth_secret)
        self.backend_health = BackendMonitor(
            parse_backends(list(cfg.backends)), interval_secs=cfg.health_check_interval_secs,
            down_after_secs=cfg.backend_down_after_secs,
            # Without a snapshot dir the run dir (SVC_SSP_RUN_DIR) keeps incidents.jsonl.
            incidents_dir=cfg.snapshot_dir or cfg.run_dir, component=cfg.ssp_id)
        # Scheduler mode (ssp.link): bootstrap reads come from the scheduler's proxy; every
        # other read (schema poll, reload, registration) stays on the database.
        self.link = None if cfg.standalone else SchedulerLink(self)
        self.source: Database | ProxySource = self.db
        self.exit_code: int | None = None
        self.exit_event = asyncio.Event()
        self.wiped = False  # clean resync: local state deleted, write no snapshot on the way out
        self.wire_hashes: dict[str, int] = {}  # table -> hash of the rows as the proxy sent them

    # ================================================================== lifecycle

    async def start(self) -> None:
        """Spawn the shards, connect, bootstrap, then start the background loops."""
        logging.getLogger().addHandler(self.logs)
        for s in self.shards:
            await s.start()
        self.publisher.start()
        self._spawn(self._sequencer(), "sequencer")
        self._spawn(self._collector(), "collector")
        backoff = 0.5
        while True:
            try:
                await self.db.connect()
                await self.pub_db.connect()
                if self.link is not None:
                    await self.link.bootstrap()  # SchedulerExit propagates (exit 2, 5, 6)
                else:
                    await self.bootstrap()
                break
            except DbAuthError:
                raise  # wrong credentials do not heal by waiting
            except DbError as e:
                # The database is down or slow: stay `bootstrapping` and start over.
                log.warning("bootstrap failed (%s); retrying in %.1fs", e, backoff)
                await self._clear_state()
                self.tables.clear()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
        await self.allowlist.load(self.db)
        if self.cfg.ingest_transport == "changefeed" and self.link is None:
            self._spawn(self._tail(), "changefeed")  # the scheduler feeds a linked SSP
        self._spawn(self._ttl_sweep(), "ttl-sweep")
        self._spawn(self._db_watch(), "db-watch")
        if self.cfg.schema_poll_secs > 0:
            self._spawn(self._schema_poll(), "schema-poll")
        if self.cfg.snapshot_dir is not None:
            self._spawn(self._checkpoints(), "checkpoint")
        await self.jobs.start()
        await self.backend_health.start()
        self.status = "ready"
        if self.link is not None:
            self._spawn(self.link.heartbeats(), "heartbeat")
        log.info("SSP %s ready: %d views, %d tables, %d shards", self.cfg.ssp_id,
                 len(self.views), len(self.rows.tables()), len(self.shards))

    def request_exit(self, code: int) -> None:
        """End the whole SSP with exit `code` (the supervisor stops everything gracefully)."""
        if self.exit_code is None:
            self.exit_code = code
        self.exit_event.set()

    def _view_size(self, view_id: str) -> tuple[RecordID, int] | None:
        view = self.views.get(view_id)
        return None if view is None else (view.record, len(view.members))

    def _spawn(self, coro: Any, name: str) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(coro, name=name))

    async def shutdown(self) -> None:
        """Flush pending edges, write the snapshot, stop loops, shards and connections."""
        for t in self._tasks:
            if t.get_name() not in ("sequencer", "collector"):
                t.cancel()
        if self._live is not None:
            try:
                await self._live.kill()
            except DbError as e:  # best effort: the socket closes next anyway
                log.info("killing the _00_version subscription failed: %s", e)
        if self._deferred:
            await asyncio.wait(list(self._deferred), timeout=VISIBILITY_DEADLINE_SECS + 1)
        drained = await self.publisher.drain(timeout=30.0)
        if not drained:
            log.error("shutdown: %d pending edge operations could not be written",
                      self.publisher.pending_ops)
        await self.publisher.stop()
        await self.jobs.stop()
        await self.backend_health.stop()
        if not self.wiped:
            self.write_snapshot()
        for t in self._tasks:
            t.cancel()
        for s in self.shards:
            await s.stop()
        self.arena.close()
        await self.db.close()
        await self.pub_db.close()
        if self.link is not None:
            await self.link.close()
        logging.getLogger().removeHandler(self.logs)

    # ================================================================== bootstrap

    async def bootstrap(self) -> None:
        """Load every synced table, then re-register the views whose rows are still live."""
        self.status = "bootstrapping"
        cursor0 = (now_ms() - CURSOR_MARGIN_MS) << 16
        warm = self._read_snapshot()
        tables = await self._synced_tables()
        self.bootstrap_warnings = []
        if warm is not None:
            log.info("warm start from snapshot written at %s", warm.get("written_at_ms"))
            await self._load_snapshot_rows(warm, tables)
        else:
            for t in tables:
                await self._load_table(t)
                self.cursors[t] = cursor0
        self.cursors.setdefault(QUERY_TABLE, cursor0)
        if warm is not None:
            # Catch up from the snapshot's feed position before views come back.
            await self._catch_up()
        await self._restore_views()

    async def bootstrap_from(self, source: ProxySource,
                             progress: Any = None) -> None:
        """Scheduler mode: load every synced table from `source` (the proxy), no snapshot,
        no feed cursors, no view restore; `progress(done, total, rows, table)` per table."""
        self.status = "bootstrapping"
        self.source = source
        self.wire_hashes = {}
        try:
            tables = await self._synced_tables()
            self.bootstrap_warnings = []
            for i, t in enumerate(tables):
                await self._load_table(t)
                if progress is not None:
                    await progress(i + 1, len(tables), self._row_count(), t)
        finally:
            self.source = self.db

    async def forget_rows(self) -> None:
        """Drop every row (hub and shards) before a reload; views are kept by nobody yet."""
        async with self._exclusive():
            await self._clear_state()
        self.tables.clear()

    @staticmethod
    def syncs_table(name: str, definition: str = "") -> bool:
        """True for a table the SSP loads (not our bookkeeping, not a computed view)."""
        if name.startswith("_00_") and name not in _LOADED_META:
            return False
        return " AS SELECT" not in definition.upper()

    async def _synced_tables(self) -> list[str]:
        defs = await self.source.table_definitions()
        return sorted(name for name, text in defs.items() if self.syncs_table(name, text))

    async def _load_table(self, table: str) -> None:
        self.tables.add(table)
        store = self.rows
        store.add_table(table)
        loaded = 0
        await self._field_types(table)
        # Through the scheduler's proxy: the scheduler types http events from the field
        # definitions it read when they arrived, so a row can still hold text (a field typed
        # since); rows are typed again like an ingest (a no-op on typed values) and the
        # integrity check compares the hash of the rows as the replica sent them (`wire_hashes`).
        linked = self.source is not self.db
        typed = linked and bool(self.field_types.get(table))
        wire = 0
        async for page in self.source.keyset_pages(table, self.cfg.bootstrap_page_size):
            rids = []
            for row in page:
                rid = record_id_text(row["id"])
                b = canonical_bytes(row)
                if linked:
                    wire ^= bytes_hash(b)
                if typed:
                    try:
                        row = self.restore_types(table, rid, row)
                        b = canonical_bytes(row)
                    except (ValueError, TypeError):
                        pass  # keep the row as sent
                store.put_bytes(table, rid, b)
                self.rv[rid] = row.get("_00_rv")
                rids.append(rid)
            loaded += len(rids)
            replies = await self._load_into(self.shards, table, rids)
            self._deliver([], replies, False, time.monotonic())
        if linked:
            self.wire_hashes[table] = wire
        if loaded == 0:
            upstream = await self.source.query_one(
                f"SELECT count() AS n FROM {table} GROUP ALL", idempotent=True)
            n = upstream[0]["n"] if upstream else 0
            if n:
                msg = f"table {table} loaded 0 rows but has {n} upstream"
                self.bootstrap_warnings.append(msg)
                log.warning("bootstrap: %s", msg)

    async def _field_types(self, table: str) -> None:
        try:
            info = await self.source.table_info(table)
        except (DbError, ValueError) as e:
            log.info("INFO FOR TABLE %s failed: %s", table, e)
            return
        self.field_types[table] = field_kinds(info)

    async def _restore_views(self) -> None:
        """Register again the views whose `_00_query` rows are live. A row that is expired,
        or whose view cannot be registered any more (a query this engine refuses, a bad
        row), is torn down: nobody else would ever maintain or remove it."""
        rows = await self.db.query_one(f"SELECT * FROM {QUERY_TABLE}", idempotent=True) or []
        now = now_ms()
        for row in rows:
            try:
                vid = view_id_of(row["id"])
            except (KeyError, ValueError, TypeError) as e:
                log.warning("bootstrap: unreadable _00_query row %r: %s", row.get("id"), e)
                continue
            auth = row.get("auth_id")
            auth = auth if isinstance(auth, RecordID) else None
            ttl_ms = _ttl_ms(row.get("ttl"))
            last = _ms(row.get("lastActiveAt"))
            if last is None or last + ttl_ms <= now:
                self._teardown(vid, edge_table(auth, self.cfg.ref_mode))
                continue
            try:
                params = row.get("params") if isinstance(row.get("params"), dict) else None
                view = self._new_view(vid, str(row.get("surql") or ""), params, auth,
                                      str(row.get("clientId") or ""), str(row.get("ttl") or "10m"),
                                      ttl_ms, last, None)
                await self._restore_one(view)
            except (ShardError, ShardDown, KeyError, ValueError, TypeError) as e:
                log.warning("bootstrap: view %s not restored (%s); its row and edges are "
                            "removed", vid, e)
                if isinstance(e, ShardTimeout) or (isinstance(e, ShardError)
                                                   and e.code != "rejected"):
                    self._restart_shard(shard_of(vid, len(self.shards)), e)
                self._teardown(vid, edge_table(auth, self.cfg.ref_mode))

    async def _restore_one(self, view: ViewState, attempts: int = 3) -> None:
        """Register a restored view; a shard that is down (restarting) is waited for."""
        shard = self.shards[view.shard]
        for attempt in range(attempts):
            try:
                async with self._exclusive():
                    await self._register_on_shard(view)
                break
            except ShardDown as e:
                if isinstance(e, ShardTimeout) or attempt == attempts - 1:
                    raise
                deadline = time.monotonic() + 30.0
                while not shard.up and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
        self.views[view.view_id] = view
        self.publisher.materialise(view)

    # ================================================================== dispatcher

    async def handle(self, req: Any) -> dict[str, Any]:
        """Answer one gateway request (the contract in `ipc.messages`)."""
        if not isinstance(req, dict) or not isinstance(req.get("route"), str):
            return error_reply(400, ErrorCode.INVALID, "malformed hub request")
        route = req["route"]
        handler = _ROUTES.get(route)
        if handler is None:
            return error_reply(404, ErrorCode.NOT_FOUND, f"no route {route}")
        try:
            return await handler(self, req)
        except DbTimeout as e:
            return not_ready(f"database call timed out: {e}")
        except RowArenaFull as e:
            return not_ready(str(e))
        except DbError as e:
            log.warning("%s failed on the database: %s", route, e)
            return error_reply(500, ErrorCode.INTERNAL, f"database error: {e}")

    def _stalled(self) -> bool:
        return max(self.db.consecutive_timeouts, self.pub_db.consecutive_timeouts) > 0

    # ------------------------------------------------------------------ public routes

    async def r_health(self, req: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"status": self.status}
        timeouts = max(self.db.consecutive_timeouts, self.pub_db.consecutive_timeouts)
        if timeouts:
            body["db"] = {"status": "stalled", "consecutive_timeouts": timeouts}
        if self.backend_health.configured:
            body["backends"] = self.backend_health.summary()
        return reply(200 if self.status == "ready" else 503, body)

    async def r_version(self, req: dict[str, Any]) -> dict[str, Any]:
        return reply(200, {"version": VERSION,
                           "mode": "standalone" if self.cfg.standalone else "scheduler"})

    def info_record(self) -> dict[str, Any]:
        """This SSP's entity record for `/info`."""
        return {
            "entity": "ssp",
            "id": self.cfg.ssp_id,
            "status": self.status,
            "views": len(self.views),
            "ref_mode": self.cfg.ref_mode,
            "version": VERSION,
            "uptime_seconds": int(time.monotonic() - self.started),
            "circuit_tables": {t: self.rows.count(t) for t in sorted(self.rows.tables())},
            "circuit_hashes": {t: hash_text(self.rows.hash(t)) for t in sorted(self.rows.tables())},
            "bootstrap_warnings": list(self.bootstrap_warnings),
            "query_allowlist": self.allowlist.info(),
        }

    async def r_info(self, req: dict[str, Any]) -> dict[str, Any]:
        return reply(200, [self.info_record()])

    async def r_info_text(self, req: dict[str, Any]) -> dict[str, Any]:
        rec = self.info_record()
        lines = []
        for k, v in rec.items():
            if isinstance(v, dict):
                lines.append(f"{k}:")
                lines += [f"  {kk}: {json.dumps(vv)}" for kk, vv in v.items()]
            elif isinstance(v, list):
                lines.append(f"{k}: {', '.join(map(str, v)) if v else '-'}")
            else:
                lines.append(f"{k}: {v}")
        return reply(200, None, text="\n".join(lines) + "\n")

    # ------------------------------------------------------------------ ingest

    async def r_ingest(self, req: dict[str, Any]) -> dict[str, Any]:
        if self.status != "ready":
            return not_ready(f"SSP is {self.status}")
        if self._stalled():
            return not_ready("database calls are timing out")
        if self.slots >= PUBLICATION_SLOTS:
            self.overload_rejections += 1
            return not_ready("all 256 publication slots are in use")
        if self.publisher.overloaded():
            self.overload_rejections += 1
            return not_ready("too many edge operations are pending publication")
        if request_expired(req):
            return not_ready("request expired before the hub reached it")
        self.slots += 1  # reserved before any side effect
        try:
            body = req.get("body")
            is_typed = isinstance(body, bytes)  # the typed encoding, as the client sent it
            if is_typed:
                try:
                    body = decode_typed(body)
                except ValueError as e:
                    return error_reply(400, ErrorCode.INVALID, f"request body: {e}")
            if isinstance(body, list):
                return await self._ingest_batch(body, typed=is_typed)
            body = body if isinstance(body, dict) else {}
            try:
                table, op, rid = body["table"], str(body["op"]).upper(), body["id"]
            except KeyError as e:
                return error_reply(400, ErrorCode.INVALID, f"{e.args[0]} is required")
            record = body.get("record")
            if not isinstance(record, dict) or not isinstance(rid, str):
                return error_reply(400, ErrorCode.INVALID, "record must be an object, id a string")
            if op not in ("CREATE", "UPDATE", "DELETE"):
                return error_reply(400, ErrorCode.INVALID, f"unknown op {op[:20]!r}")
            try:
                record = self.restore_types(table, rid, record, typed=is_typed)
                canonical_bytes(record)  # refuse what cannot be stored, before sequencing
            except (ValueError, TypeError, OverflowError, RecursionError) as e:
                return error_reply(400, ErrorCode.INVALID, f"record: {self._refusal(e)}")
            await self.submit([(table, op, record_id_text(record["id"]), record)],
                              defer=self.cfg.ingest_transport == "http")
            return reply(200, {"status": "ok", "seq": self.seq})
        finally:
            self.slots -= 1

    async def _ingest_batch(self, body: list[Any], *, typed: bool = False) -> dict[str, Any]:
        """A batched ingest (the scheduler's delivery). One admission unit: the whole batch
        holds one publication slot (a batch is one request, and the scheduler sends one batch
        at a time per SSP); the publisher's pending-work threshold still gates it as a whole.
        Every event is checked before any is applied (400 names the index, nothing applied).
        Events with `seq <= last_seq` were applied before (a redelivery) and are skipped;
        events without `seq` are always applied. `typed`: decoded from `ipc.typed` (values
        as stored, not typed again from the field definitions)."""
        async with self._batch_lock:
            events = []
            top = self.last_seq
            for i, ev in enumerate(body):
                if not isinstance(ev, dict):
                    return error_reply(400, ErrorCode.INVALID, f"[{i}]: must be an object")
                seq = ev.get("seq")
                has_seq = isinstance(seq, int) and not isinstance(seq, bool)
                if has_seq and seq <= top:
                    continue
                try:
                    table, op, rid = ev["table"], str(ev["op"]).upper(), ev["id"]
                    record = ev.get("record")
                    if not isinstance(record, dict) or not isinstance(rid, str):
                        raise TypeError("record must be an object, id a string")
                    if op not in ("CREATE", "UPDATE", "DELETE"):
                        raise ValueError(f"unknown op {op[:20]!r}")
                    record = self.restore_types(table, rid, record, typed=typed)
                    canonical_bytes(record)
                except (KeyError, ValueError, TypeError, OverflowError, RecursionError) as e:
                    return error_reply(400, ErrorCode.INVALID, f"[{i}]: {self._refusal(e)}")
                if has_seq:
                    top = seq
                events.append((table, op, record_id_text(record["id"]), record))
            if events:
                await self.submit(events, defer=self.cfg.ingest_transport == "http")
            self.last_seq = top
            return reply(200, {"accepted": len(events)})

    def restore_types(self, table: str, rid: str, record: dict[str, Any], *,
                      typed: bool = False) -> dict[str, Any]:
        """A JSON ingest record with its record links and datetimes typed again from the
        table's field definitions; a `typed` one (`ipc.typed`) as it came, its id checked."""
        if typed:
            return check_record(table, rid, record)
        return restore_types(table, rid, record, self.field_types.get(table, {}))

    @staticmethod
    def _refusal(e: Exception) -> str:
        """An ingest refusal's message (a record nested deeper than Python recurses is bad
        input too, not a 500)."""
        if isinstance(e, RecursionError):
            return "nested too deeply"
        if isinstance(e, KeyError):
            return f"{e.args[0]} is required"
        return str(e)

    async def submit(self, events: list[tuple[str, str, str, Any]], *, defer: bool = False
                     ) -> None:
        """Sequence events and wait until the shards applied them (the in-memory step).

        `defer`: the events come from inside their writing transaction (transport http), so
        their edges wait for the commit to be visible (`_publish_when_visible`)."""
        loop = asyncio.get_running_loop()
        futs = []
        arrived = time.monotonic()
        for ev in events:
            fut: asyncio.Future[None] = loop.create_future()
            self._queue.put_nowait((ev, fut, defer, arrived))
            futs.append(fut)
        await asyncio.gather(*futs)

    async def _sequencer(self) -> None:
        """Order events into batches and send each to the shards without waiting for the
        previous batch's replies (up to PIPELINE_DEPTH in flight): a shard answers in the
        order it received, and `_collector` handles replies in the same order."""
        while True:
            first = await self._queue.get()
            batch = [first]
            # Batch what queued up, keeping events of one kind (deferred or not) together.
            while (len(batch) < BATCH_MAX and not self._queue.empty()
                   and self._queue._queue[0][2] == first[2]):  # type: ignore[attr-defined]
                batch.append(self._queue.get_nowait())
            try:
                async with self._apply_lock:
                    kept = self._store([b[0] for b in batch])
                    sends = self._send("ingest", {"events": [list(e) for e in kept]}) if kept \
                        else []
                    # Queued under the lock, so `_exclusive()` sees every batch already sent.
                    await self._inflight.put((batch, kept, sends, first[2], first[3]))
            except OSError as e:
                # The row arena could not grow (no space): part of the batch may be stored
                # here and not in the shards, so nothing can be trusted any more.
                self.status = "failed"
                log.error("row arena write failed (%s): SSP failed", e.strerror or e)
                _fail_all(batch, RowArenaFull(f"row arena write failed: {e.strerror or e}"))
            except Exception as e:
                log.exception("sequencing %d events failed", len(batch))
                _fail_all(batch, e)

    async def _collector(self) -> None:
        while True:
            batch, kept, sends, defer, arrived = await self._inflight.get()
            try:
                replies = await self._collect("ingest", sends)
                self._deliver(kept, replies, defer, arrived)
                for b in batch:
                    if not b[1].done():
                        b[1].set_result(None)
            except Exception as e:
                log.exception("applying %d events failed", len(batch))
                _fail_all(batch, e)
            finally:
                self._inflight.task_done()

    @contextlib.asynccontextmanager
    async def _exclusive(self) -> AsyncIterator[None]:
        """Hold the sequencer and wait for every batch in flight: registrations, rebuilds and
        reloads see the shards and the hub's member sets in one consistent state."""
        async with self._apply_lock:
            await self._inflight.join()
            yield

    def _store(self, events: list[tuple[str, str, str, Any]]) -> list[tuple[str, str, str, Any]]:
        """Apply events to the hub's rows (stale versions skipped); returns the kept ones."""
        kept: list[tuple[str, str, str, Any]] = []
        store = self.rows
        for table, op, rid, record in events:
            if op not in ("CREATE", "UPDATE", "DELETE"):
                continue
            self.seq += 1
            if op == "DELETE":
                store.delete(table, rid)
                self.rv.pop(rid, None)
            else:
                rv_new = record.get("_00_rv")
                rv_old = self.rv.get(rid)
                if rv_is_stale(rv_new, rv_old) and store.contains(table, rid):
                    continue  # stale: a newer version of the row is already applied
                store.put_bytes(table, rid, canonical_bytes(record))
                self.rv[rid] = rv_new
            kept.append((table, op, rid, record))
            if op != "DELETE" and record.get("status") == "pending":
                self.jobs.hint(table)  # a no-op unless `table` is a job table
            if table == "user" and op in ("CREATE", "DELETE"):
                self._spawn_user_table(op, rid)
        self.ingested += len(kept)
        self.arena.release()
        return kept

    def _deliver(self, kept: list[tuple[str, str, str, Any]], replies: list[dict[str, Any]],
                 defer: bool, arrived: float | None) -> None:
        """Per-view deltas -> member sets -> publisher marks (deferred until commit-visible
        for transport http)."""
        marks: list[tuple[str, list[str]]] = []
        for r in replies:
            for vid, d in (r.get("deltas") or {}).items():
                view = self.views.get(vid)
                if view is None:
                    continue
                view.members.difference_update(d["removed"])
                view.members.update(d["added"])
                marks.append((vid, [*d["added"], *d["removed"], *d["updated"]]))
        if not marks:
            return
        probes = self._visibility_probes(kept) if defer else []
        if probes:
            self._spawn_tracked(self._publish_when_visible(probes, marks, arrived))
        else:
            for vid, members in marks:
                self.publisher.mark(vid, members, at=arrived)

    def _visibility_probes(self, events: list[tuple[str, str, str, Any]]
                           ) -> list[tuple[RecordID, int]]:
        """(the `_00_version` record, the rv it must reach) of each event that carries one."""
        out = []
        for table, op, rid, record in events:
            rv = record.get("_00_rv") if isinstance(record, dict) else None
            if not isinstance(rv, int) or isinstance(rv, bool):
                continue
            key = parse_record_id(rid).id
            out.append((RecordID("_00_version", [table, key]), rv + 1 if op == "DELETE" else rv))
        return out

    async def _publish_when_visible(self, probes: list[tuple[RecordID, int]],
                                    marks: list[tuple[str, list[str]]],
                                    arrived: float | None = None) -> None:
        """Transport http: the event arrived inside the writing transaction. Publish its
        edges once the row's `_00_version` is readable on our own connection (committed), at
        most 16 probes at once, 5 s in all; after that publish anyway (the fallback)."""
        deadline = time.monotonic() + VISIBILITY_DEADLINE_SECS
        try:
            for rec, want in probes:
                while time.monotonic() < deadline:
                    async with self._probe_slots:
                        row = await self.db.query_one("SELECT rv FROM ONLY $v", {"v": rec})
                    rv = row.get("rv") if isinstance(row, dict) else None
                    if isinstance(rv, int) and rv >= want:
                        break
                    await asyncio.sleep(0.01)
                else:
                    self.visibility_fallbacks += 1
                    log.info("commit of %s not visible within %.0fs: publishing anyway", rec,
                             VISIBILITY_DEADLINE_SECS)
                    break
        except DbError as e:
            log.warning("visibility probe failed (%s): publishing anyway", e)
        for vid, members in marks:
            if vid in self.views:
                self.publisher.mark(vid, members, at=arrived)

    def _spawn_tracked(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._deferred.add(task)
        task.add_done_callback(self._deferred.discard)

    async def _broadcast(self, kind: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
        """Send one request to every running shard and wait for the replies."""
        return await self._collect(kind, self._send(kind, payload))

    async def _load_into(self, shards: list[ShardHandle], table: str, rids: list[str]
                         ) -> list[dict[str, Any]]:
        """Load stored rows of `table` into every running shard of `shards` by arena handle;
        the replies (with the deltas of views that already read the table). A shard that
        fails is restarted and rebuilt (`_collect`)."""
        replies: list[dict[str, Any]] = []
        with self.arena.reading():
            for msg in self._handle_chunks(table, rids):
                sends = [(s, asyncio.ensure_future(s.send(msg))) for s in shards if s.up]
                replies.extend(await self._collect("load_handles", sends))
        return replies

    def _handle_chunks(self, table: str, rids: list[str]) -> Iterator[dict[str, Any]]:
        """`load_handles` requests naming the arena blocks of `rids`, LOAD_CHUNK at a time.
        Each chunk's handles are read when it is sent: use inside `self.arena.reading()`."""
        handle = self.rows.handle
        for i in range(0, len(rids), LOAD_CHUNK):
            raw = pack_handles(h for r in rids[i:i + LOAD_CHUNK]
                               if (h := handle(table, r)) is not None)
            yield encode_request("load_handles", {"tables": {table: raw}})

    def _row_count(self) -> int:
        return sum(self.rows.count(t) for t in self.rows.tables())

    def _send(self, kind: str, payload: dict[str, Any]
              ) -> list[tuple[ShardHandle, asyncio.Future[dict[str, Any]]]]:
        """Start sending one request (encoded once) to every running shard."""
        msg = encode_request(kind, payload)
        return [(s, asyncio.ensure_future(s.send(msg))) for s in self.shards if s.up]

    async def _collect(self, kind: str,
                       sends: list[tuple[ShardHandle, asyncio.Future[dict[str, Any]]]]
                       ) -> list[dict[str, Any]]:
        """The replies of `_send`; a dead shard is skipped (its exit handler rebuilds it)."""
        results = await asyncio.gather(*(f for _, f in sends), return_exceptions=True)
        out = []
        for (shard, _), r in zip(sends, results):
            if isinstance(r, ShardTimeout):
                # Still running, and it may apply the request later: its views could drift.
                self._restart_shard(shard.index, r)
                continue
            if isinstance(r, ShardDown):
                continue  # its exit handler restarts and rebuilds it from the hub's rows
            if isinstance(r, BaseException):
                # The shard may have applied part of the batch: its views can no longer be
                # trusted. Restart it; the rebuild recomputes them and publishes the diff.
                log.error("shard %d failed %s (%s): restarting it to rebuild", shard.index,
                          kind, r)
                shard.kill()
                continue
            out.append(r)
        return out

    def _spawn_user_table(self, op: str, rid: str) -> None:
        if self.cfg.ref_mode == "single":
            return
        try:
            auth = parse_record_id(rid)
        except ValueError:
            return
        table = edge_table(auth, self.cfg.ref_mode)
        if op == "CREATE":
            self._spawn_tracked(self._define_quietly(table, auth))
        else:
            self._edge_tables.discard(table)
            self._spawn_tracked(self._drop_edge_table(table))

    async def _ensure_edge_table(self, table: str, auth: RecordID | None) -> None:
        """Define the user's edge table (select permission fixed to that user)."""
        if table in self._edge_tables or table == SINGLE_TABLE:
            return
        if auth is None:
            return
        # `$auth` is the signed-in record's id. Written as `$auth = <id>`, not `$auth.id =
        # <id>`: SurrealDB 3.2.4 reads every table's definition on each DELETE in the database,
        # so this expression is paid per table per deleted record (1,000 users: ~3.8 ms vs
        # ~4.8 ms per edge delete, loadtests/probe_delete_cost.py). Tables defined by an older
        # SSP keep the longer form, which allows the same reads.
        perm = f"$auth = {record_id_text(auth)}"
        # Schema writes conflict with each other under concurrency: one at a time, retried.
        async with self._define_lock:
            for attempt in range(5):
                if table in self._edge_tables:
                    return
                try:
                    await self.pub_db.query(
                        f"DEFINE TABLE IF NOT EXISTS {table} TYPE RELATION SCHEMALESS "
                        f"CHANGEFEED 1h INCLUDE ORIGINAL PERMISSIONS FOR select WHERE {perm} "
                        "FOR create, update, delete NONE")
                    self._edge_tables.add(table)
                    return
                except DbError as e:
                    log.warning("defining edge table %s failed (attempt %d): %s", table,
                                attempt + 1, e)
                    if attempt == 4:
                        raise
                    await asyncio.sleep(0.05 * 2 ** attempt)

    async def _define_quietly(self, table: str, auth: RecordID) -> None:
        try:
            await self._ensure_edge_table(table, auth)
        except DbError as e:  # registration defines it again before any edge is written
            log.error("edge table %s not defined: %s", table, e)

    async def _drop_edge_table(self, table: str) -> None:
        try:
            await self.pub_db.query(f"REMOVE TABLE IF EXISTS {table}")
        except DbError as e:
            log.warning("removing edge table %s failed: %s", table, e)

    # ------------------------------------------------------------------ views

    async def _know_table(self, table: str) -> None:
        """A view on a table created since the last schema probe: probe now, so the table's
        rows are loaded before the view's initial set is computed."""
        if table not in self.tables:
            await self.poll_schema_once()

    def _new_view(self, vid: str, surql: str, params: dict[str, Any] | None,
                  auth: RecordID | None, client_id: str, ttl: str, ttl_ms: int,
                  last_ms: int, fmt: str | None) -> ViewState:
        self.generation += 1
        return ViewState(
            view_id=vid, record=view_record(vid), edge_table=edge_table(auth, self.cfg.ref_mode),
            auth=auth, members=set(), generation=self.generation, surql=surql, params=params,
            client_ids={client_id}, client_id=client_id, ttl=ttl, ttl_ms=ttl_ms,
            last_active_ms=last_ms, shard=shard_of(vid, len(self.shards)), format=fmt,
            registered_ms=now_ms())

    @staticmethod
    def _engine_params(params: dict[str, Any] | None, auth: RecordID | None) -> dict[str, Any]:
        out = {k: v for k, v in (params or {}).items() if k != "auth_id"}
        if auth is not None:
            given = out.get("auth")
            base: dict[str, Any] = given if isinstance(given, dict) else {}
            out["auth"] = {**base, "id": auth}
        return out

    async def _register_on_shard(self, view: ViewState) -> None:
        """Register on the owning shard (caller holds the apply lock); fills `members`.
        A view id the shard holds is replaced only once the new view is built there, so a
        refusal (ShardError `rejected`) leaves the old one registered and maintained."""
        shard = self.shards[view.shard]
        r = await shard.call("register", {"view_id": view.view_id, "surql": view.surql,
                                          "params": self._engine_params(view.params, view.auth)},
                             timeout=self.cfg.shard_call_timeout_secs)
        view.members = set(r["members"])

    def _restart_shard(self, index: int, why: BaseException) -> None:
        """A shard that timed out or failed unexpectedly may hold a half-applied change: kill
        it; its exit handler restarts it and rebuilds it from the registry and the rows."""
        shard = self.shards[index]
        if shard.up:
            log.error("shard %d is restarted to rebuild its views: %s", index, why)
            shard.kill()

    async def r_register(self, req: dict[str, Any]) -> dict[str, Any]:
        """`POST /view/register`. Every refusal is decided before anything the SSP holds is
        touched; a view id already held keeps its view until the new one is built on its
        shard. After a failure the database holds the old view (intact, still maintained)
        or nothing of it (ssp/README.md, "Registration failures")."""
        if self.status != "ready":
            return not_ready(f"SSP is {self.status}")
        if self._stalled():
            return not_ready("database calls are timing out")
        body = req.get("body") or {}
        vid = body["id"]
        surql = body["surql"]
        params = body.get("params") if isinstance(body.get("params"), dict) else None
        client_id = str(body.get("clientId") or "")
        ttl = str(body.get("ttl") or "10m")
        try:
            ttl_ms = parse_duration_ms(ttl)
            last = body.get("lastActiveAt")
            last_ms = (int(parse_timestamp(last).timestamp() * 1000) if isinstance(last, str)
                       else now_ms())
            claimed = _claimed_auth(params)
            _check_params(params)
        except ValueError as e:
            return error_reply(400, ErrorCode.INVALID, str(e))
        rec = view_record(vid)
        row = await self.db.query_one("SELECT * FROM ONLY $q", {"q": rec}, idempotent=True)
        row_auth = row.get("auth_id") if isinstance(row, dict) else None
        row_auth = row_auth if isinstance(row_auth, RecordID) else None
        held = self.views.get(vid)
        auth = row_auth or claimed or (held.auth if held is not None else None)
        for other in (row_auth, held.auth if held else None):
            if other is not None and claimed is not None and other != claimed:
                return error_reply(409, ErrorCode.AUTH_MISMATCH,
                                   f"view {vid} is registered under another identity")
        if held is not None and held.auth != auth:
            # Its edges live in another table: a held view never changes identity.
            return error_reply(409, ErrorCode.AUTH_MISMATCH,
                               f"view {vid} is registered under another identity")
        if auth is None and not self.cfg.anon_live_queries:
            return error_reply(400, ErrorCode.INVALID,
                               "the registration names no identity (params.auth_id or "
                               "params.auth.id) and anonymous views are off")
        kept = _kept(vid, held)
        try:
            # The engine's own verdict (the shard would give the same), before any change.
            query = parse(surql)
            normalise(query, self._engine_params(params, auth))
        except QueryRejected as e:
            return error_reply(400, ErrorCode.REJECTED, f"{e}{kept}")
        await self._know_table(query.table)
        verdict = await self.allowlist.check(self.db, surql, parsed=query)
        if not verdict.allowed:
            return error_reply(403, ErrorCode.NOT_ALLOWLISTED, verdict.reason)
        # The awaits above let other requests run: the held view may be gone or replaced.
        held = self.views.get(vid)
        if held is not None and held.auth != auth:
            return error_reply(409, ErrorCode.AUTH_MISMATCH,
                               f"view {vid} is registered under another identity")
        kept = _kept(vid, held)
        if held is not None and held.surql == surql and (held.params or {}) == (params or {}):
            return await self._refresh(held, row, client_id, ttl, ttl_ms, last_ms)
        view = self._new_view(vid, surql, params, auth, client_id, ttl, ttl_ms, last_ms,
                              body.get("format"))
        try:
            async with self._exclusive():
                await self._register_on_shard(view)
                self.views[vid] = view
        except ShardError as e:
            if e.code == "rejected":
                return error_reply(400, ErrorCode.REJECTED, f"{e.message}{kept}")
            self._restart_shard(view.shard, e)
            return error_reply(400, ErrorCode.INVALID,
                               f"the shard could not register view {vid}: {e.message}{kept}")
        except ShardDown as e:
            if isinstance(e, ShardTimeout):
                self._restart_shard(view.shard, e)
            return not_ready(f"the view's shard is restarting: {e}{kept}")
        try:
            await self._ensure_edge_table(view.edge_table, view.auth)
            await self._write_row(view, new=True)
        except DbError as e:
            # The row may be half written (a timeout can still commit): nothing of the view
            # stays, its row and edges are deleted by the publisher (retried until done).
            await self._abandon(view)
            msg = (f"database call failed while publishing view {vid} ({e}); the view is "
                   "not registered and its row and edges are being removed")
            if isinstance(e, DbTimeout):
                return not_ready(msg)
            log.warning("registering %s failed on the database: %s", vid, e)
            return error_reply(500, ErrorCode.INTERNAL, msg)
        if vid not in self.views:
            return self._unregistered_meanwhile(view)
        result = await self._result(view)
        state = "materializing" if view.members else "ready"
        return reply(200, {"id": vid, "state": state, "rowCount": len(view.members),
                           "records": sorted(view.members), "result": result})

    def _unregistered_meanwhile(self, view: ViewState) -> dict[str, Any]:
        """The view was unregistered (its row deleted, an unregister call) while its row was
        being written: that row must go too, and the client registers again."""
        self._teardown(view.view_id, view.edge_table)
        return not_ready(f"view {view.view_id} was unregistered while it was being "
                         "registered; register it again")

    async def _abandon(self, view: ViewState) -> None:
        """Undo a registration whose first publication failed (unless the id was registered
        again meanwhile, by a request whose own publication then follows)."""
        if self.views.get(view.view_id) is view:
            await self.unregister(view.view_id)

    async def _result(self, view: ViewState) -> list[Any]:
        try:
            r = await self.shards[view.shard].call("result", {"view_id": view.view_id})
        except (ShardDown, ShardError):
            return []
        return to_json(unpack_value(r["data"]))  # type: ignore[no-any-return]

    def _row_content(self, view: ViewState, state: str) -> dict[str, Any]:
        return {
            "surql": view.surql, "params": view.params, "clientId": view.client_id,
            "auth_id": view.auth, "lastActiveAt": datetime.fromtimestamp(
                view.last_active_ms / 1000, tz=UTC),
            "ttl": view.ttl, "subscribers": len(view.client_ids),
            "rowCount": len(view.members), "state": state,
        }

    async def _write_row(self, view: ViewState, *, new: bool) -> None:
        """Write the `_00_query` row: `ready` at once when empty, else `materializing` and
        the initial edges queued (the flush that commits them sets `ready`)."""
        async with self.publisher.hold(view.view_id):
            if view.members:
                await self.pub_db.query("UPSERT $q CONTENT $c RETURN NONE",
                                        {"q": view.record,
                                         "c": self._row_content(view, "materializing")})
                self.publisher.materialise(view)
            else:
                await self.pub_db.transaction([
                    (f"DELETE {view.edge_table} WHERE in = $q", {"q": view.record}),
                    ("UPSERT $q CONTENT $c RETURN NONE", {"q": view.record,
                                              "c": self._row_content(view, "ready")}),
                ])

    async def _refresh(self, view: ViewState, row: Any, client_id: str, ttl: str, ttl_ms: int,
                       last_ms: int) -> dict[str, Any]:
        view.client_ids.add(client_id)
        view.client_id, view.ttl, view.ttl_ms, view.last_active_ms = client_id, ttl, ttl_ms, last_ms
        # Registered again now: a `_00_query` delete read from the feed later but committed
        # before this must not unregister it (spec: the teardown is dropped).
        view.registered_ms = now_ms()
        republish = not isinstance(row, dict)
        if not republish and view.members and view.view_id not in self.publisher.initial:
            n = await self.db.query_one(
                f"SELECT count() AS n FROM {view.edge_table} WHERE in = $q GROUP ALL",
                {"q": view.record}, idempotent=True)
            have = n[0]["n"] if n else 0
            republish = have < len(view.members) and view.view_id not in self.publisher.dirty
        if republish:
            await self._write_row(view, new=False)
        else:
            await self.pub_db.query("UPDATE $q MERGE $d", {"q": view.record, "d": {
                "clientId": client_id, "ttl": ttl, "subscribers": len(view.client_ids),
                "lastActiveAt": datetime.fromtimestamp(last_ms / 1000, tz=UTC)}})
        if view.view_id not in self.views:
            return self._unregistered_meanwhile(view)
        state = "ready"
        if view.view_id in self.publisher.initial:
            state = "materializing"
        return reply(200, {"id": view.view_id, "state": state, "rowCount": len(view.members),
                           "records": sorted(view.members), "result": await self._result(view)})

    async def r_unregister(self, req: dict[str, Any]) -> dict[str, Any]:
        vid = normalize_view_id(str((req.get("body") or {}).get("id", "")))
        await self.unregister(vid)
        return reply(200, {"status": "ok", "id": vid})

    async def unregister(self, vid: str, *, deleted_at_ms: int | None = None) -> None:
        """Forget the view now; its edges and row go at the next flush (unless re-registered).

        For a held view this never fails half way: the registry forgets it first, a shard
        that cannot confirm is restarted (its rebuild registers only views still held), and
        the teardown is queued whatever the shard said (the publisher retries it).
        `deleted_at_ms` (the `_00_query` delete rule): the commit time of the row's delete; a
        view registered again after it is kept (decided under the exclusive section, so a
        registration finishing meanwhile is seen)."""
        if vid in self.views:
            async with self._exclusive():
                view = self.views.get(vid)
                if (view is not None and deleted_at_ms is not None
                        and view.registered_ms > deleted_at_ms):
                    return
                if view is not None:
                    self.views.pop(vid, None)
                    try:
                        await self.shards[view.shard].call(
                            "unregister", {"view_id": vid},
                            timeout=self.cfg.shard_call_timeout_secs)
                    except (ShardTimeout, ShardError) as e:
                        self._restart_shard(view.shard, e)
                    except ShardDown:
                        pass  # the rebuild only re-registers views still in the registry
            if view is not None:
                self._teardown(vid, view.edge_table)
                return
        if deleted_at_ms is not None:
            return  # not held: whoever unregistered it queued its teardown
        row = await self.db.query_one("SELECT auth_id FROM ONLY $q",
                                      {"q": view_record(vid)}, idempotent=True)
        auth = row.get("auth_id") if isinstance(row, dict) else None
        self._teardown(vid, edge_table(auth if isinstance(auth, RecordID) else None,
                                       self.cfg.ref_mode))

    def _teardown(self, vid: str, table: str) -> None:
        """Queue the deletion of a view's edges and `_00_query` row (dropped by the publisher
        if the id is registered again first)."""
        self.generation += 1
        self.publisher.teardown(Teardown(vid, view_record(vid), table, self.generation))

    # ------------------------------------------------------------------ admin and debug

    async def _clear_state(self) -> None:
        """Forget every view and row, in the hub and in fresh shard processes."""
        self.views.clear()
        self.arena.clear()
        self.rv.clear()
        self.publisher.dirty.clear()
        self.publisher.initial.clear()
        self.publisher.pending_ops = 0
        for s in self.shards:
            await s.stop()
            s.stopping = False
            await s.start()

    async def r_reset(self, req: dict[str, Any]) -> dict[str, Any]:
        async with self._exclusive():
            views = list(self.views.values())
            await self._clear_state()
        for view in views:  # their rows and edges would otherwise never change again
            self._teardown(view.view_id, view.edge_table)
        log.info("reset: all views and data cleared")
        return reply(200, {"status": "ok"})

    async def r_reload(self, req: dict[str, Any]) -> dict[str, Any]:
        self.status = "bootstrapping"  # gates /ingest and /view/register
        try:
            async with self._exclusive():
                views = list(self.views.values())
                await self._drop_rows()
                if self.link is not None:
                    # Scheduler mode: rebuilt from the scheduler's snapshot like the bootstrap
                    # (register again: replica frozen at a snapshot_seq, later events buffered
                    # and replayed once we are ready). A database read is at no position of
                    # the event stream: events after last_seq could take rows back, and an
                    # http event applied before its transaction committed would be lost.
                    await self.link.bootstrap(forget=self._drop_rows)
                else:
                    for t in await self._synced_tables():
                        await self._load_table(t)
                for v in views:
                    await self._register_on_shard(v)
                    self.publisher.materialise(v)
            self.status = "ready"
            return reply(200, {"status": "ready"})
        except Exception as e:  # noqa: BLE001 - any failure here means `failed`
            self.status = "failed"
            log.error("reload failed: %s", e)
            if isinstance(e, SchedulerExit):
                self.request_exit(e.code)  # as at start-up: the supervisor relaunches us
            return reply(500, {"code": "reload_failed", "error": "reload_failed",
                               "message": f"{type(e).__name__}: {e}"})

    async def _drop_rows(self) -> None:
        """Every row gone (hub and fresh shard processes); views stay registered here.
        The caller holds the exclusive section."""
        self.tables.clear()
        self.arena.clear()
        self.rv.clear()
        for s in self.shards:
            await s.stop()
            s.stopping = False
            await s.start()

    async def r_log(self, req: dict[str, Any]) -> dict[str, Any]:
        body = req.get("body") or {}
        self.logs.add({"at": now_ms(), "level": body.get("level", "info"),
                       "message": body.get("message", ""), "data": body.get("data"),
                       "source": "client"})
        return reply(200, {"status": "ok"})

    async def r_logs(self, req: dict[str, Any]) -> dict[str, Any]:
        q = req.get("query") or {}
        try:
            cursor = int(q["cursor"]) if "cursor" in q else None
            backfill = int(q.get("backfill", "0") or 0)
        except ValueError:
            return error_reply(400, ErrorCode.INVALID, "cursor and backfill must be integers")
        return self.logs.poll(cursor, backfill)

    async def r_debug_view(self, req: dict[str, Any]) -> dict[str, Any]:
        vid = normalize_view_id(str((req.get("params") or {}).get("view_id", "")))
        view = self.views.get(vid)
        if view is None:
            return error_reply(404, ErrorCode.NOT_FOUND, f"no view {vid}")
        members = sorted(view.members)
        tables = sorted({m.split(":", 1)[0] for m in members})
        return reply(200, {
            "view_id": vid, "cache_size": len(members), "last_hash": str(hash(tuple(members))),
            "format": view.format, "cache": members, "subquery_tables": [],
            "referenced_tables": tables, "content_generation": view.generation,
            "subquery_cache": {}, "shard": view.shard, "auth_id": to_json(view.auth),
            "edge_table": view.edge_table, "surql": view.surql,
        })

    async def r_debug_deps(self, req: dict[str, Any]) -> dict[str, Any]:
        deps: dict[str, list[str]] = {}
        for v in self.views.values():
            for t in {m.split(":", 1)[0] for m in v.members}:
                deps.setdefault(t, []).append(v.view_id)
        return reply(200, {"dependency_map": deps, "tables_in_store": sorted(self.rows.tables()),
                           "view_count": len(self.views)})

    async def r_debug_memory(self, req: dict[str, Any]) -> dict[str, Any]:
        if (req.get("query") or {}).get("reset_latency") in ("1", "true"):
            self.publisher.stats.latencies_ms.clear()  # benchmarks measure one phase
        shards = []
        for s in self.shards:
            try:
                st = await s.call("stats", {}, timeout=5.0) if s.up else {"up": False}
            except (ShardDown, ShardError) as e:
                st = {"up": False, "error": str(e)}
            st.pop("ok", None)
            shards.append({"index": s.index, "pid": s.pid, **st})
        lat = sorted(self.publisher.stats.latencies_ms)
        return reply(200, {
            "rows": self._row_count(),
            "row_bytes": self.rows.arena.live_bytes,
            "arena": {"private": self.arena.private, "segments": self.rows.arena.segments,
                      "segment_bytes": self.rows.arena.segment_bytes},
            "views": len(self.views), "shards": shards,
            "publication": {
                "pending_operations": self.publisher.pending_ops,
                "oldest_age_ms": self.publisher.oldest_age_ms(),
                "flushes": self.publisher.stats.flushes,
                "operations": self.publisher.stats.operations,
                "failures": self.publisher.stats.failures,
                "last_success_epoch_ms": self.publisher.stats.last_success_ms,
                "overload_rejections": self.overload_rejections,
                "latency_p50_ms": lat[len(lat) // 2] if lat else None,
                "latency_p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else None,
            },
            "ingested": self.ingested,
        })

    async def r_debug_catchup(self, req: dict[str, Any]) -> dict[str, Any]:
        table = str((req.get("params") or {}).get("table", ""))
        return reply(200, {"table": table, "rows": self.rows.count(table),
                           "cursor": self.cursors.get(table)})

    async def r_debug_heartbeat(self, req: dict[str, Any]) -> dict[str, Any]:
        if self.link is not None:
            return reply(200, self.link.debug())
        return reply(200, {"last_heartbeat_seq": None, "mode": "standalone",
                           "last_seq": self.last_seq})

    # ================================================================== shard supervision

    async def _shard_exited(self, shard: ShardHandle, code: int) -> None:
        """A shard died: restart it and rebuild its views, or report `failed`."""
        if not shard.may_restart():
            self.status = "failed"
            log.error("shard %d keeps dying; SSP failed", shard.index)
            return
        try:
            await shard.start()
            async with self._exclusive():
                await self._rebuild(shard)
            log.info("shard %d rebuilt", shard.index)
        except Exception as e:  # noqa: BLE001 - any failure here means `failed`
            self.status = "failed"
            log.error("rebuilding shard %d failed: %s", shard.index, e)

    async def _rebuild(self, shard: ShardHandle) -> None:
        """Reload a restarted shard from the arena, then register its views again.
        The caller holds the exclusive section."""
        with self.arena.reading():
            for table in self.rows.tables():
                for msg in self._handle_chunks(table, self.rows.ids(table)):
                    await shard.send(msg)  # a failure leaves the SSP `failed` (the caller)
        for view in [v for v in self.views.values() if v.shard == shard.index]:
            before = set(view.members)
            try:
                await self._register_on_shard(view)
            except ShardError as e:
                log.error("view %s could not be rebuilt (%s): its row and edges are removed",
                          view.view_id, e)
                self.views.pop(view.view_id, None)
                self._teardown(view.view_id, view.edge_table)
                continue
            changed = before ^ view.members
            if changed:
                self.publisher.mark(view.view_id, changed)

    # ================================================================== changefeed

    async def _tail(self) -> None:
        """Follow the synced tables' changefeeds, in versionstamp order, from the cursors."""
        try:
            self._live = await self.db.live("_00_version", lambda _n: self._feed_wake.set())
        except DbError as e:
            log.warning("LIVE on _00_version unavailable (%s); polling every %.0fs", e,
                        FEED_POLL_SECS)
        while True:
            try:
                await self._catch_up()
            except DbError as e:
                log.warning("changefeed read failed: %s", e)
            except Exception:
                log.exception("changefeed round failed")
            try:
                await asyncio.wait_for(self._feed_wake.wait(), FEED_POLL_SECS)
            except TimeoutError:
                pass
            self._feed_wake.clear()

    async def _catch_up(self) -> None:
        """Read every feed until nothing new is left."""
        while await self._feed_round():
            pass

    async def _feed_round(self) -> bool:
        """One round of the database's feed (:func:`dbclient.feed.read_round`: paged, commit
        order, late-visible commits re-read); True when more is waiting."""
        rnd = await read_round(self.db, self.cursors, self._seen, limit=FEED_LIMIT,
                               overlap_vs=FEED_OVERLAP_VS)
        events: list[tuple[str, str, str, Any]] = []
        deletes: list[tuple[str, int]] = []
        for vs, table, s in rnd.sets:
            self._seen.setdefault(table, set()).add(vs)
            self.cursors[table] = max(self.cursors[table], vs)
            for ch in s.get("changes") or []:
                ev = _feed_event(table, ch)
                if ev is None:
                    continue
                if table == QUERY_TABLE:
                    if ev[1] == "DELETE":
                        deletes.append((view_id_of(parse_record_id(ev[2])), vs >> 16))
                    continue
                events.append(ev)
        if rnd.horizon is not None:
            # Every table was read up to the horizon, quiet ones included.
            for table in self.cursors:
                self.cursors[table] = max(self.cursors[table], rnd.horizon)
        if rnd.oversized:
            self.feed_oversized += len(rnd.oversized)
        for table, seen in self._seen.items():
            floor = self.cursors.get(table, 0) - FEED_OVERLAP_VS
            if len(seen) > 5000:
                self._seen[table] = {v for v in seen if v >= floor}
        if events:
            await self.submit(events)
        for vid, at_ms in deletes:
            if vid in self.views:
                await self.unregister(vid, deleted_at_ms=at_ms)
        return rnd.more

    # ================================================================== sweeps

    async def _db_watch(self) -> None:
        """While a connection is stalled, probe it so the count resets on recovery (nothing
        else may call it: /ingest and /view/register fail fast meanwhile)."""
        while True:
            await asyncio.sleep(1.0)
            for db in (self.db, self.pub_db):
                if db.consecutive_timeouts:
                    try:
                        await db.query("RETURN 1", idempotent=True)
                        log.info("database answers again")
                    except DbError:
                        pass

    async def _ttl_sweep(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.ttl_cleanup_interval_secs)
            try:
                await self.sweep_once()
            except DbError as e:
                log.warning("TTL sweep failed: %s", e)

    async def sweep_once(self) -> int:
        """Unregister views whose `lastActiveAt + ttl <= now` (row values win: clients refresh
        `lastActiveAt` in the database directly). Returns how many views or rows it removed.

        Standalone, this SSP is the only one that maintains `_00_query` rows, so a row of a
        view it does not hold is maintained by nobody (left by an earlier run, or written
        by a database call that timed out and committed after the registration was undone):
        it is torn down with its edges, expired or not. A registration of that id in flight
        writes its row under `Publisher.hold`, which drops such a teardown, and a flush skips
        it once the view is held, so a view being registered is never removed."""
        rows = await self.db.query_one(
            f"SELECT id, lastActiveAt, ttl, auth_id FROM {QUERY_TABLE}", idempotent=True) or []
        by_id = {view_id_of(r["id"]): r for r in rows}
        now = now_ms()
        expired = []
        for vid, view in list(self.views.items()):
            r = by_id.get(vid)
            last = _ms(r.get("lastActiveAt")) if r else None
            ttl = _ttl_ms(r.get("ttl")) if r else view.ttl_ms
            last = max(last or 0, view.last_active_ms)
            if last + ttl <= now:
                expired.append(vid)
        for vid in expired:
            log.info("TTL expired: %s", vid)
            await self.unregister(vid)
        orphans = 0
        if self.cfg.standalone:
            for vid, r in by_id.items():
                if vid in self.views:
                    continue
                last = _ms(r.get("lastActiveAt"))
                if last is not None and last + _ttl_ms(r.get("ttl")) > now:
                    log.warning("_00_query row of %s is live but no view holds it: removed", vid)
                else:
                    log.info("TTL expired (row of a view not held): %s", vid)
                auth = r.get("auth_id")
                self._teardown(vid, edge_table(auth if isinstance(auth, RecordID) else None,
                                               self.cfg.ref_mode))
                orphans += 1
        return len(expired) + orphans

    async def _schema_poll(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.schema_poll_secs)
            try:
                await self.poll_schema_once()
            except DbError as e:
                log.warning("schema poll failed: %s", e)

    async def poll_schema_once(self) -> None:
        """Load new tables; re-read field types when a table's `_00_schema_state` fingerprint
        moves; drop a table after two consecutive probes miss it (its rows are retracted)."""
        if self.status != "ready":
            return  # a reload or reset rebuilds tables itself
        current = set(await self._synced_tables())
        for t in sorted(current - self.tables):
            log.info("schema: new table %s", t)
            if self.link is not None:
                # Linked: every row of a table created after the bootstrap reaches us as an
                # event from the scheduler (its replica lags, so loading from it could go back).
                self.tables.add(t)
                await self._field_types(t)
                continue
            self.cursors[t] = (now_ms() - CURSOR_MARGIN_MS) << 16
            async with self._exclusive():
                await self._load_table(t)
        for t in current:
            self._missing.pop(t, None)
        try:
            states = await self.db.query_one("SELECT id, fingerprint FROM _00_schema_state",
                                             idempotent=True) or []
        except DbError:
            states = []  # no schema state table (schema not applied): types stay as read
        for row in states:
            name = str(getattr(row.get("id"), "id", ""))
            fp = row.get("fingerprint")
            if name in current and self.fingerprints.get(name) != fp:
                self.fingerprints[name] = fp
                await self._field_types(name)
        for t in sorted(self.tables - current):
            self._missing[t] = self._missing.get(t, 0) + 1
            if self._missing[t] >= 2:
                log.info("schema: table %s removed; retracting its rows", t)
                events = [(t, "DELETE", rid, None) for rid in self.rows.ids(t)]
                if events:
                    await self.submit(events)
                self.tables.discard(t)
                self.rows.clear_table(t)
                self.cursors.pop(t, None)
                self._missing.pop(t, None)

    # ================================================================== snapshot

    def _snapshot_path(self) -> Any:
        return self.cfg.snapshot_dir / "snapshot.json" if self.cfg.snapshot_dir else None

    async def _checkpoints(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.checkpoint_interval_secs)
            self.write_snapshot()

    def write_snapshot(self) -> bool:
        """Write `snapshot.json` (rows, feed cursors); False when there is no usable dir."""
        path = self._snapshot_path()
        if path is None:
            return False
        data = {
            "version": 1, "ssp_id": self.cfg.ssp_id, "written_at_ms": now_ms(),
            "cursors": self.cursors,
            "rows": {t: [base64.b64encode(b).decode() for b in self.rows.iter_bytes(t)]
                     for t in self.rows.tables()},
        }
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, path)
            log.info("snapshot written: %d tables", len(self.rows.tables()))
            return True
        except OSError as e:
            log.warning("snapshot not written (%s): running memory-only", e)
            return False

    def _read_snapshot(self) -> dict[str, Any] | None:
        path = self._snapshot_path()
        if (path is None or not path.exists() or self.cfg.ingest_transport != "changefeed"
                or self.link is not None):  # a linked SSP bootstraps from the scheduler
            # Over http the SSP cannot replay what it missed while down: bootstrap cold.
            return None
        try:
            data = json.loads(path.read_text())
            if data.get("version") != 1:
                return None
            return data  # type: ignore[no-any-return]
        except (OSError, ValueError) as e:
            log.warning("snapshot unreadable (%s): cold bootstrap", e)
            return None

    async def _load_snapshot_rows(self, snap: dict[str, Any], tables: list[str]) -> None:
        cursor_now = (now_ms() - CURSOR_MARGIN_MS) << 16
        for t in tables:
            encoded = snap.get("rows", {}).get(t)
            cur = snap.get("cursors", {}).get(t)
            if encoded is None or cur is None:
                await self._load_table(t)
                self.cursors[t] = cursor_now
                continue
            await self._field_types(t)
            self.tables.add(t)
            self.rows.add_table(t)
            rids = []
            for e in encoded:
                b = base64.b64decode(e)
                row = unpack_value(b)
                rid = record_id_text(row["id"])
                self.rows.put_bytes(t, rid, b)
                self.rv[rid] = row.get("_00_rv")
                rids.append(rid)
            await self._load_into(self.shards, t, rids)
            self.cursors[t] = int(cur)
        qc = snap.get("cursors", {}).get(QUERY_TABLE)
        if qc is not None:
            self.cursors[QUERY_TABLE] = int(qc)


class RowArenaFull(Exception):
    """The hub's row arena could not grow: the events were not applied and the SSP is failed
    (answered 503 `SSP_NOT_READY`, so the sender keeps them)."""


def _fail_all(batch: list[Any], error: BaseException) -> None:
    """Fail the futures of a sequencer batch that are still waiting."""
    for _, fut, _, _ in batch:
        if not fut.done():
            fut.set_exception(error)


def _feed_event(table: str, ch: dict[str, Any]) -> tuple[str, str, str, Any] | None:
    """One changefeed change -> (table, op, id text, row) or None for schema entries."""
    if "delete" in ch:
        d = ch["delete"]
        rid = d.get("id") if isinstance(d, dict) else None
        if not isinstance(rid, RecordID):
            return None
        return (table, "DELETE", record_id_text(rid), d.get("original"))
    if "current" in ch:
        row = ch["current"]
        op = "UPDATE"
    elif "update" in ch and isinstance(ch["update"], dict):
        row = ch["update"]
        op = "CREATE"
    else:
        return None
    if not isinstance(row, dict) or not isinstance(row.get("id"), RecordID):
        return None
    return (table, op, record_id_text(row["id"]), row)


def _claimed_auth(params: dict[str, Any] | None) -> RecordID | None:
    if not params:
        return None
    raw = params.get("auth_id")
    if raw is None and isinstance(params.get("auth"), dict):
        raw = params["auth"].get("id")
    if raw is None:
        return None
    if isinstance(raw, RecordID):
        return raw
    if not isinstance(raw, str):
        raise ValueError(  # noqa: TRY004 - reported as a 400 like every other bad value
            "params.auth_id must be a record id text such as user:alice")
    try:
        return auth_record(raw)
    except ValueError:
        raise ValueError(f"params.auth_id {raw[:80]!r} is not a record id") from None


def _kept(vid: str, held: ViewState | None) -> str:
    """What a refusal adds when the id is held: its view is exactly as it was."""
    return (f"; view {vid} keeps its previous query and is still maintained"
            if held is not None else "")


def _check_params(params: dict[str, Any] | None) -> None:
    """ValueError when the registration's params nest deeper than the engine's MAX_DEPTH
    (they become slot values that the engine and the wire encoding walk recursively)."""
    stack: list[tuple[Any, int]] = [(params, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            children: Any = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        if depth >= MAX_DEPTH:
            raise ValueError(f"params nest deeper than the limit of {MAX_DEPTH} levels")
        stack.extend((c, depth + 1) for c in children)


def _ttl_ms(v: Any) -> int:
    if isinstance(v, Duration):
        return max(1, v.elapsed // 1_000_000)
    if isinstance(v, str):
        try:
            return parse_duration_ms(v)
        except ValueError:
            return 600_000
    return 600_000


def _ms(v: Any) -> int | None:
    if isinstance(v, datetime):
        return int(v.timestamp() * 1000)
    if isinstance(v, str):
        try:
            return int(parse_timestamp(v).timestamp() * 1000)
        except ValueError:
            return None
    return None


_ROUTES = {
    "GET /health": Hub.r_health,
    "GET /version": Hub.r_version,
    "GET /info": Hub.r_info,
    "GET /info/text": Hub.r_info_text,
    "POST /ingest": Hub.r_ingest,
    "POST /view/register": Hub.r_register,
    "POST /view/unregister": Hub.r_unregister,
    "POST /reset": Hub.r_reset,
    "POST /admin/reload": Hub.r_reload,
    "POST /log": Hub.r_log,
    "GET /logs": Hub.r_logs,
    "GET /debug/view/{view_id}": Hub.r_debug_view,
    "GET /debug/deps": Hub.r_debug_deps,
    "GET /debug/memory": Hub.r_debug_memory,
    "GET /debug/catchup-rows/{table}": Hub.r_debug_catchup,
    "GET /debug/heartbeat": Hub.r_debug_heartbeat,
    **job_routes(lambda hub: hub.jobs, Hub._stalled),
    **backend_routes(lambda hub: hub.backend_health),
    **backup_routes(),  # the standalone maintenance plane (ssp/backups.py)
}
__all__ = ["EDGE_PREFIX", "Hub", "ViewState"]
