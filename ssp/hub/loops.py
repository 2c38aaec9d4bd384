"""The hub's periodic work: the TTL sweep (views whose `lastActiveAt + ttl` passed), the
schema poll (new tables loaded, changed field types read again, dropped tables retracted),
and the database watch (a stalled connection probed until it answers again). The snapshot
checkpoints are `ssp.hub.snapshot`'s."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from surrealdb import RecordID

from dbclient import DbError
from dbclient.clock import now_ms
from ssp.hub.state import cold_cursor
from ssp.naming import QUERY_TABLE, edge_table, view_id_of
from timetext.durations import ttl_ms
from timetext.timestamps import activity_ms

if TYPE_CHECKING:
    from ssp.hub.loading import Loading
    from ssp.hub.sequencer import Sequencer
    from ssp.hub.state import HubState
    from ssp.hub.views import ViewLifecycle

log = logging.getLogger("ssp.hub")


class Loops:
    """The periodic loops and their one-shot steps (`sweep_once`, `poll_schema_once`)."""

    def __init__(self, state: HubState, loading: Loading, views: ViewLifecycle,
                 sequencer: Sequencer) -> None:
        self.state = state
        self.loading = loading
        self.views = views
        self.sequencer = sequencer
        self.fingerprints: dict[str, Any] = {}
        self._missing: dict[str, int] = {}

    async def db_watch(self) -> None:
        """While a connection is stalled, probe it so the count resets on recovery (nothing
        else may call it: /ingest and /view/register fail fast meanwhile)."""
        while True:
            await asyncio.sleep(1.0)
            for db in (self.state.db, self.state.pub_db):
                if db.consecutive_timeouts:
                    try:
                        await db.query("RETURN 1", idempotent=True)
                        log.info("database answers again")
                    except DbError:
                        pass

    async def ttl_sweep(self) -> None:
        """`sweep_once` every `ttl_cleanup_interval_secs`."""
        while True:
            await asyncio.sleep(self.state.cfg.ttl_cleanup_interval_secs)
            if self.state.writers_hold():
                continue  # a restore replaces the database: its rows are not ours to judge
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
        state = self.state
        rows = await state.db.query_one(
            f"SELECT id, lastActiveAt, ttl, auth_id, state, surql FROM {QUERY_TABLE}",
            idempotent=True) or []
        by_id = {view_id_of(r["id"]): r for r in rows}
        now = now_ms()
        expired = []
        for vid, view in list(state.views.items()):
            r = by_id.get(vid)
            last = activity_ms(r.get("lastActiveAt"), now) if r else None
            ttl = ttl_ms(r.get("ttl")) if r else view.ttl_ms
            last = max(last or 0, view.last_active_ms)
            if last + ttl <= now:
                expired.append(vid)
        for vid in expired:
            log.info("TTL expired: %s", vid)
            await self.views.unregister(vid)
        orphans = 0
        if state.cfg.standalone:
            for vid, r in by_id.items():
                if vid in state.views:
                    continue
                last = activity_ms(r.get("lastActiveAt"), now)
                live = last is not None and last + ttl_ms(r.get("ttl")) > now
                if live and r.get("state") is None and r.get("surql") is not None:
                    continue  # a client's request, or a refusal its client is to read
                if live:
                    log.warning("_00_query row of %s is live but no view holds it: removed", vid)
                else:
                    log.info("TTL expired (row of a view not held): %s", vid)
                auth = r.get("auth_id")
                state.teardown(vid, edge_table(auth if isinstance(auth, RecordID) else None,
                                               state.cfg.ref_mode))
                orphans += 1
        return len(expired) + orphans

    async def schema_poll(self) -> None:
        """`poll_schema_once` every `schema_poll_secs`."""
        while True:
            await asyncio.sleep(self.state.cfg.schema_poll_secs)
            try:
                await self.poll_schema_once()
            except DbError as e:
                log.warning("schema poll failed: %s", e)

    async def know_table(self, table: str) -> None:
        """A view on a table created since the last schema probe: probe now, so the table's
        rows are loaded before the view's initial set is computed."""
        if table not in self.state.tables:
            await self.poll_schema_once()

    async def poll_schema_once(self) -> None:
        """Load new tables; re-read field types when a table's `_00_schema_state` fingerprint
        moves; drop a table after two consecutive probes miss it (its rows are retracted)."""
        state = self.state
        if state.status != "ready":
            return  # a reload or reset rebuilds tables itself
        loading = self.loading
        current = set(await loading.synced_tables())
        for t in sorted(current - state.tables):
            log.info("schema: new table %s", t)
            if state.link is not None:
                # Linked: every row of a table created after the bootstrap reaches us as an
                # event from the scheduler (its replica lags, so loading from it could go back).
                state.tables.add(t)
                await loading.field_types(t)
                continue
            state.cursor.follow(t, cold_cursor())
            async with state.exclusive():
                await loading.load_table(t)
        for t in current:
            self._missing.pop(t, None)
        try:
            states = await state.db.query_one("SELECT id, fingerprint FROM _00_schema_state",
                                              idempotent=True) or []
        except DbError:
            states = []  # no schema state table (schema not applied): types stay as read
        for row in states:
            name = str(getattr(row.get("id"), "id", ""))
            fp = row.get("fingerprint")
            if name in current and self.fingerprints.get(name) != fp:
                self.fingerprints[name] = fp
                await loading.field_types(name)
                state.permissions.invalidate()  # its select permission may have moved
        for t in sorted(state.tables - current):
            self._missing[t] = self._missing.get(t, 0) + 1
            if self._missing[t] >= 2:
                log.info("schema: table %s removed; retracting its rows", t)
                events = [(t, "DELETE", rid, None) for rid in state.rows.ids(t)]
                if events:
                    await self.sequencer.submit(events)
                state.tables.discard(t)
                state.rows.clear_table(t)
                state.cursor.forget(t)
                self._missing.pop(t, None)
