"""Table loading: the bootstrap (cold from the database, warm from the snapshot plus the feed,
or through the scheduler's proxy), one table's rows into the arena and the shards, field
types, the views restored from their `_00_query` rows, and the routes that reload or reset
everything (`POST /admin/reload`, `POST /reset`)."""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from dbclient import DbError
from dbclient.feedfloor import read_floor
from dbclient.fieldtypes import field_kinds, restore_types
from engine.hashing import bytes_hash
from engine.values import canonical_bytes, record_id_text, unpack_value
from ipc.messages import reply
from ssp.hub.state import cold_cursor
from ssp.link import SchedulerExit
from ssp.naming import QUERY_TABLE
from timetext.timestamps import parse_timestamp

if TYPE_CHECKING:
    from ssp.hub.sequencer import Sequencer
    from ssp.hub.shardpool import ShardPool
    from ssp.hub.snapshot import Snapshot
    from ssp.hub.state import HubState
    from ssp.hub.views import ViewLifecycle
    from ssp.link import ProxySource

log = logging.getLogger("ssp.hub")

_LOADED_META = ("_00_app_release", "_00_user_feature")
# After a table loaded no rows: does it have rows upstream (a bootstrap warning)? One of the
# statements the scheduler's /proxy/query serves (scheduler.proxy).
ZERO_ROW_CHECK = "SELECT count() AS n FROM {table} GROUP ALL"


def syncs_table(name: str, definition: str = "") -> bool:
    """True for a table the SSP loads (not our bookkeeping, not a computed view)."""
    if name.startswith("_00_") and name not in _LOADED_META:
        return False
    return " AS SELECT" not in definition.upper()


def _snapshot_below(snap: dict[str, Any], floor: int) -> bool:
    """Whether a snapshot's feed position lies below the database's feed floor
    (`dbclient.feedfloor`): its rows are of the database a restore replaced."""
    cursors = snap.get("cursors")
    if not floor or not isinstance(cursors, dict):
        return False
    return any(isinstance(c, int) and c < floor for c in cursors.values())


class Loading:
    """Loads tables into the arena and the shards (see the module docstring)."""

    def __init__(self, state: HubState, pool: ShardPool, sequencer: Sequencer,
                 snapshot: Snapshot, views: ViewLifecycle,
                 catch_up: Callable[[], Awaitable[None]]) -> None:
        self.state = state
        self.pool = pool
        self.sequencer = sequencer
        self.snapshot = snapshot
        self.views = views
        self._catch_up = catch_up
        self._proxy: ProxySource | None = None

    @property
    def source(self) -> Any:
        """Where tables are read from: the scheduler's proxy while a linked SSP bootstraps,
        else the database (every other read stays on the database)."""
        return self._proxy if self._proxy is not None else self.state.db

    # ------------------------------------------------------------------ bootstrap

    async def bootstrap(self) -> None:
        """Load every synced table, then re-register the views whose rows are still live."""
        state = self.state
        state.status = "bootstrapping"
        cursor0 = cold_cursor()
        warm = self.snapshot.read()
        floor = await read_floor(state.db)
        if warm is not None and _snapshot_below(warm, floor):
            log.warning("the snapshot is of the database before its last restore: "
                        "bootstrapping cold")
            warm = None
        tables = await self.synced_tables()
        state.bootstrap_warnings = []
        if warm is not None:
            log.info("warm start from snapshot written at %s", warm.get("written_at_ms"))
            await self._load_snapshot_rows(warm, tables)
        else:
            for t in tables:
                await self.load_table(t)
                state.cursor.follow(t, cursor0)
        if QUERY_TABLE not in state.cursor.cursors:
            state.cursor.follow(QUERY_TABLE, cursor0)
        # A cold cursor starts a few seconds back: never in the feed of a replaced database.
        state.cursor.pin(floor)
        if warm is not None:
            # Catch up from the snapshot's feed position before views come back.
            await self._catch_up()
        await self.views.restore_all()

    async def bootstrap_from(self, source: ProxySource, progress: Any = None,
                             snap: dict[str, Any] | None = None) -> None:
        """Scheduler mode: load every synced table from `source` (the proxy), no feed cursors,
        no view restore; `progress(done, total, rows, table)` per table. `snap` (a warm
        start): a table it holds comes from its rows instead, the others from the proxy."""
        state = self.state
        state.status = "bootstrapping"
        self._proxy = source
        state.wire_hashes = {}
        saved = (snap or {}).get("rows") or {}
        try:
            tables = await self.synced_tables()
            state.bootstrap_warnings = []
            for i, t in enumerate(tables):
                encoded = saved.get(t)
                if encoded is None:
                    await self.load_table(t)
                else:
                    await self.field_types(t)
                    await self._put_rows(t, snap or {})
                if progress is not None:
                    await progress(i + 1, len(tables), state.row_count(), t)
        finally:
            self._proxy = None

    async def _put_rows(self, table: str, snap: dict[str, Any]) -> None:
        """A table's rows from a snapshot (base64 canonical bytes) into the arena and shards;
        each row decoded only when the snapshot lacks the ids and versions beside them."""
        state = self.state
        state.tables.add(table)
        rows = state.rows
        rows.add_table(table)
        encoded = snap["rows"][table]
        ids = (snap.get("ids") or {}).get(table)
        rvs = (snap.get("rv") or {}).get(table)
        if (isinstance(ids, list) and isinstance(rvs, list)
                and len(ids) == len(encoded) == len(rvs)):
            for e, rid, rv in zip(encoded, ids, rvs, strict=True):
                rows.put_bytes(table, rid, base64.b64decode(e))
                state.rv[rid] = rv
            rids = ids
        else:
            rids = []
            for e in encoded:
                b = base64.b64decode(e)
                row = unpack_value(b)
                rid = record_id_text(row["id"])
                rows.put_bytes(table, rid, b)
                state.rv[rid] = row.get("_00_rv")
                rids.append(rid)
        await self.pool.load_into(state.shards, table, rids)

    async def clear(self, *, views: bool, tables: bool = True) -> None:
        """Every row gone, in the hub and in fresh shard processes; `views`: the registry and
        the publisher's pending work too; `tables`: the known tables too (loaded again).
        Outside the start-up, the caller holds the exclusive section."""
        state = self.state
        if tables:
            state.tables.clear()
        if views:
            state.views.clear()
            pub = state.publisher
            pub.dirty.clear()
            pub.initial.clear()
            pub.pending_ops = 0
        state.arena.clear()
        state.rv.clear()
        for s in state.shards:
            await s.stop()
            s.stopping = False
            await s.start()

    async def forget_rows(self) -> None:
        """Drop every row (hub and shards) before a reload; views are kept by nobody yet."""
        async with self.state.exclusive():
            await self.clear(views=True)

    async def drop_rows(self) -> None:
        """Every row gone, views kept (the caller holds the exclusive section)."""
        await self.clear(views=False)

    # ------------------------------------------------------------------ tables

    async def synced_tables(self) -> list[str]:
        """The tables to load, sorted."""
        defs = await self.source.table_definitions()
        return sorted(name for name, text in defs.items() if syncs_table(name, text))

    async def load_table(self, table: str) -> None:
        """Every row of `table` into the arena and the shards (deltas delivered)."""
        state = self.state
        state.tables.add(table)
        store = state.rows
        store.add_table(table)
        loaded = 0
        await self.field_types(table)
        # Through the scheduler's proxy: the scheduler types http events from the field
        # definitions it read when they arrived, so a row can still hold text (a field typed
        # since); rows are typed again like an ingest (a no-op on typed values) and the
        # integrity check compares the hash of the rows as the replica sent them (`wire_hashes`).
        linked = self.source is not state.db
        typed = linked and bool(state.field_types.get(table))
        wire = 0
        async for page in self.source.keyset_pages(table, state.cfg.bootstrap_page_size):
            rids = []
            for row in page:
                rid = record_id_text(row["id"])
                b = canonical_bytes(row)
                if linked:
                    wire ^= bytes_hash(b)
                if typed:
                    try:
                        row = restore_types(table, rid, row, state.field_types[table],
                                            parse_datetime=parse_timestamp)
                        b = canonical_bytes(row)
                    except (ValueError, TypeError):
                        pass  # keep the row as sent
                store.put_bytes(table, rid, b)
                state.rv[rid] = row.get("_00_rv")
                rids.append(rid)
            loaded += len(rids)
            replies = await self.pool.load_into(state.shards, table, rids)
            self.sequencer.deliver([], replies, False, time.monotonic())
        if linked:
            state.wire_hashes[table] = wire
        if loaded == 0:
            upstream = await self.source.query_one(ZERO_ROW_CHECK.format(table=table),
                                                   idempotent=True)
            n = upstream[0]["n"] if upstream else 0
            if n:
                msg = f"table {table} loaded 0 rows but has {n} upstream"
                state.bootstrap_warnings.append(msg)
                log.warning("bootstrap: %s", msg)

    async def field_types(self, table: str) -> None:
        """Read `table`'s field definitions again (JSON ingest types links and datetimes)."""
        try:
            info = await self.source.table_info(table)
        except (DbError, ValueError) as e:
            log.info("INFO FOR TABLE %s failed: %s", table, e)
            return
        self.state.field_types[table] = field_kinds(info)

    async def _load_snapshot_rows(self, snap: dict[str, Any], tables: list[str]) -> None:
        state = self.state
        cursor_now = cold_cursor()
        for t in tables:
            encoded = snap.get("rows", {}).get(t)
            cur = snap.get("cursors", {}).get(t)
            if encoded is None or cur is None:
                await self.load_table(t)
                state.cursor.follow(t, cursor_now)
                continue
            await self.field_types(t)
            await self._put_rows(t, snap)
            state.cursor.follow(t, int(cur))
        qc = snap.get("cursors", {}).get(QUERY_TABLE)
        if qc is not None:
            state.cursor.follow(QUERY_TABLE, int(qc))

    # ------------------------------------------------------------------ routes

    async def reset_route(self, req: dict[str, Any]) -> dict[str, Any]:
        """`POST /reset`: every view and row gone (known tables kept, not reloaded)."""
        state = self.state
        async with state.exclusive():
            views = list(state.views.values())
            await self.clear(views=True, tables=False)
        for view in views:  # their rows and edges would otherwise never change again
            state.teardown(view.view_id, view.edge_table)
        log.info("reset: all views and data cleared")
        return reply(200, {"status": "ok"})

    async def reload_route(self, req: dict[str, Any]) -> dict[str, Any]:
        """`POST /admin/reload`: every row loaded again, views rebuilt on them."""
        state = self.state
        state.status = "bootstrapping"  # gates /ingest and /view/register
        try:
            async with state.exclusive():
                views = list(state.views.values())
                await self.drop_rows()
                if state.link is not None:
                    # Scheduler mode: rebuilt from the scheduler's snapshot like the bootstrap
                    # (register again: replica frozen at a snapshot_seq, later events buffered
                    # and replayed once we are ready). A database read is at no position of
                    # the event stream: events after last_seq could take rows back, and an
                    # http event applied before its transaction committed would be lost.
                    await state.link.bootstrap(forget=self.drop_rows)
                else:
                    for t in await self.synced_tables():
                        await self.load_table(t)
                for v in views:
                    await self.pool.register(v)
                    state.publisher.materialise(v)
            await state.allowlist.load(state.db)  # the spec: "also reloaded on Ready"
            state.status = "ready"
            return reply(200, {"status": "ready"})
        except Exception as e:  # noqa: BLE001 - any failure here means `failed`
            state.status = "failed"
            log.error("reload failed: %s", e)
            if isinstance(e, SchedulerExit):
                state.request_exit(e.code)  # as at start-up: the supervisor relaunches us
            return reply(500, {"code": "reload_failed", "error": "reload_failed",
                               "message": f"{type(e).__name__}: {e}"})
