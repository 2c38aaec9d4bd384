"""View registration (`POST /view/register`): the refusals (body, identity, the engine's
verdict, the allowlist), then the view built on its shard, its edge table, its `_00_query`
row. Every refusal is decided before anything the SSP holds is touched; a view id already
held keeps its view until the new one is built on its shard. After a failure the database
holds the old view (intact, still maintained) or nothing of it (ssp/README.md,
"Registration failures"). A registration of a held view with the same query is a refresh."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from surrealdb import RecordID

from dbclient import DbError, DbQueryError, DbTimeout
from dbclient.clock import now_ms
from dbclient.errors import retry_conflicts, retryable
from engine.errors import QueryRejected
from engine.parser import parse_cached
from engine.shape import normalise
from ipc.messages import ErrorCode, error_reply, not_ready, reply
from ipc.routebodies import ViewRegistration
from ssp.hub.errors import shard_refusal
from ssp.hub.identity import check_params, claimed_auth, effective_query, engine_params, kept
from ssp.hub.sharing import peers, subscribers, write_counts
from ssp.naming import view_record
from ssp.permissions import PermissionRefused, PermissionsUnavailable
from ssp.shards import ShardDown, ShardError

if TYPE_CHECKING:
    from ssp.hub.edgetables import EdgeTables
    from ssp.hub.shardpool import ShardPool
    from ssp.hub.state import HubState, ViewState
    from ssp.hub.views import ViewLifecycle

log = logging.getLogger("ssp.hub")


class Registry:
    """Registers views (`know_table`: probe the schema for a table not loaded yet)."""

    def __init__(self, state: HubState, pool: ShardPool, views: ViewLifecycle, edges: EdgeTables,
                 know_table: Callable[[str], Awaitable[None]],
                 catch_up: Callable[[], Awaitable[None]] | None = None) -> None:
        self.state = state
        self.pool = pool
        self.views = views
        self.edges = edges
        self._know_table = know_table
        # Standalone with transport changefeed: read the feed to its end before a view's
        # initial set is computed, so the set holds every row committed before the request
        # (the scheduler does the same for its SSPs, `scheduler.placement`).
        self._catch_up = catch_up

    async def register(self, req: dict[str, Any]) -> dict[str, Any]:
        """`POST /view/register` (see the module docstring)."""
        state = self.state
        if state.status != "ready":
            return not_ready(f"SSP is {state.status}")
        if state.stalled():
            return not_ready("database calls are timing out")
        try:
            reg = ViewRegistration.from_body(req.get("body"))
            claimed = claimed_auth(reg.params)
            check_params(reg.params)
        except ValueError as e:
            return error_reply(400, ErrorCode.INVALID, str(e))
        vid, surql, params = reg.id, reg.surql, reg.params
        # never later than now: a registration dated in the future would never expire
        last_ms = (min(int(reg.last_active_at.timestamp() * 1000), now_ms())
                   if reg.last_active_at is not None else now_ms())
        row = await state.db.query_one("SELECT * FROM ONLY $q", {"q": view_record(vid)},
                                       idempotent=True)
        row_auth = row.get("auth_id") if isinstance(row, dict) else None
        row_auth = row_auth if isinstance(row_auth, RecordID) else None
        held = state.views.get(vid)
        auth = row_auth or claimed or (held.auth if held is not None else None)
        for other in (row_auth, held.auth if held else None):
            if other is not None and claimed is not None and other != claimed:
                return _mismatch(vid)
        if held is not None and held.auth != auth:
            return _mismatch(vid)  # its edges live in another table: identity never changes
        if auth is None and not state.cfg.anon_live_queries:
            return error_reply(400, ErrorCode.INVALID,
                               "the registration names no identity (params.auth_id or "
                               "params.auth.id) and anonymous views are off")
        suffix = kept(vid, held)
        try:
            # The engine's own verdict (the shard would give the same), before any change.
            query = parse_cached(surql)
            normalise(query, engine_params(params, auth))
        except QueryRejected as e:
            return error_reply(400, ErrorCode.REJECTED, f"{e}{suffix}")
        await self._know_table(query.table)  # a table created since the last schema probe
        if self._catch_up is not None:
            try:
                await self._catch_up()
            except DbError as e:  # the rows it misses reach the view as changes
                log.warning("registration of %s: the changefeed could not be read up to now "
                            "(%s)", vid, e)
        verdict = await state.allowlist.check(state.db, surql, parsed=query)
        if not verdict.allowed:
            return error_reply(403, ErrorCode.NOT_ALLOWLISTED, verdict.reason)
        try:
            # the owner's select permission, in the query the engine runs (ssp.permissions)
            eff = await effective_query(state, surql, query, auth, params)
        except PermissionRefused as e:
            return error_reply(400, ErrorCode.REJECTED, f"{e}{suffix}")
        except PermissionsUnavailable as e:
            return not_ready(f"{e}{suffix}")
        # The awaits above let other requests run: the held view may be gone or replaced.
        held = state.views.get(vid)
        if held is not None and held.auth != auth:
            return _mismatch(vid)
        suffix = kept(vid, held)
        if held is not None and held.surql == surql and (held.params or {}) == (params or {}):
            return await self._refresh(held, row, reg.client_id, reg.ttl, reg.ttl_ms, last_ms)
        # A held id with another query stays on its shard: that shard's engine replaces the
        # old registration (on another shard the old one would live on next to the new).
        view = self.views.new(vid, surql, params, auth, reg.client_id, reg.ttl, reg.ttl_ms,
                              last_ms, reg.format,
                              shard=held.shard if held is not None else None)
        view.engine_surql, view.auth_fields = eff.surql, eff.auth_fields
        try:
            async with state.exclusive():
                await self.pool.register(view)
                state.views[vid] = view
        except (ShardError, ShardDown) as e:
            return shard_refusal(e, vid, suffix, self.pool.restart, view.shard)
        try:
            await self.edges.ensure(view.edge_table, view.auth)
            # A write conflict (the view-metrics writer, another registration, a refresh)
            # rolled the row's transaction back: it is written again, the view stays.
            await retry_conflicts(lambda: self._write_row(view))
        except DbError as e:
            # The row may be half written (a timeout can still commit): nothing of the view
            # stays, its row and edges are deleted by the publisher (retried until done).
            await self.views.abandon(view)
            msg = (f"database call failed while publishing view {vid} ({e}); the view is "
                   "not registered and its row and edges are being removed")
            if isinstance(e, DbTimeout) or (isinstance(e, DbQueryError) and retryable(e)):
                return not_ready(msg)  # the database is busy: the sender tries again later
            log.warning("registering %s failed on the database: %s", vid, e)
            return error_reply(500, ErrorCode.INTERNAL, msg)
        await self._count_peers(view)
        if vid not in state.views:
            return self.views.unregistered_meanwhile(view)
        result = await self.views.result(view)
        state_text = "materializing" if view.members else "ready"
        return reply(200, {"id": vid, "state": state_text, "rowCount": len(view.members),
                           "records": sorted(view.members), "result": result})

    async def _count_peers(self, view: ViewState) -> None:
        """The other rows of `view`'s group get the group's count (its own row has it)."""
        group = peers(self.state, view.share, exclude=view.view_id)
        if not group:
            return
        try:
            await write_counts(self.state, group)
        except DbError as e:  # a count, not a delta: the next registration writes it again
            log.info("subscriber counts of %s's group not updated: %s", view.view_id, e)

    def _row_content(self, view: ViewState, state: str) -> dict[str, Any]:
        return {
            "surql": view.surql, "params": view.params, "clientId": view.client_id,
            "auth_id": view.auth, "lastActiveAt": datetime.fromtimestamp(
                view.last_active_ms / 1000, tz=UTC),
            "ttl": view.ttl, "subscribers": subscribers(self.state, view),
            "rowCount": len(view.members), "state": state,
        }

    async def _write_row(self, view: ViewState) -> None:
        """Write the `_00_query` row: `ready` at once when empty, else `materializing` and
        the initial edges queued (the flush that commits them sets `ready`)."""
        state = self.state
        async with state.publisher.hold(view.view_id):
            if view.members:
                await state.pub_db.query("UPSERT $q CONTENT $c RETURN NONE",
                                         {"q": view.record,
                                          "c": self._row_content(view, "materializing")})
                state.publisher.materialise(view)
            else:
                await state.pub_db.transaction([
                    (f"DELETE {view.edge_table} WHERE in = $q", {"q": view.record}),
                    ("UPSERT $q CONTENT $c RETURN NONE", {"q": view.record,
                                              "c": self._row_content(view, "ready")}),
                ])
                view.row_count = 0

    async def _refresh(self, view: ViewState, row: Any, client_id: str, ttl: str, ttl_ms: int,
                       last_ms: int) -> dict[str, Any]:
        state = self.state
        view.client_ids.add(client_id)
        view.client_id, view.ttl, view.ttl_ms, view.last_active_ms = client_id, ttl, ttl_ms, last_ms
        # Registered again now: a `_00_query` delete read from the feed later but committed
        # before this must not unregister it (spec: the teardown is dropped).
        view.registered_ms = now_ms()
        pub = state.publisher
        republish = not isinstance(row, dict)
        if not republish and view.members and not pub.busy(view.view_id):
            # Its edges should name every member: fewer means they were lost (deleted by
            # another writer), so the view is written again whole. Members counted before
            # the read, and not when a flush is queued or running at either end: one that
            # wrote meanwhile (the events after a warm start's catch-up) is not a loss.
            want = len(view.members)
            n = await state.db.query_one(
                f"SELECT count() AS n FROM {view.edge_table} WHERE in = $q AND !removed "
                "GROUP ALL",
                {"q": view.record}, idempotent=True)
            have = n[0]["n"] if n else 0
            republish = have < want and not pub.busy(view.view_id)
        if republish:
            await retry_conflicts(lambda: self._write_row(view))
        else:
            await state.pub_db.query("UPDATE $q MERGE $d", {"q": view.record, "d": {
                "clientId": client_id, "ttl": ttl, "subscribers": subscribers(state, view),
                "lastActiveAt": datetime.fromtimestamp(last_ms / 1000, tz=UTC)}})
        await self._count_peers(view)
        if view.view_id not in state.views:
            return self.views.unregistered_meanwhile(view)
        return reply(200, {"id": view.view_id,
                           "state": "materializing" if view.view_id in pub.initial else "ready",
                           "rowCount": len(view.members), "records": sorted(view.members),
                           "result": await self.views.result(view)})


def _mismatch(vid: str) -> dict[str, Any]:
    return error_reply(409, ErrorCode.AUTH_MISMATCH,
                       f"view {vid} is registered under another identity")

