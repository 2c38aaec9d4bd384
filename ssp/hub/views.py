"""The registry's view lifecycle: a new `ViewState`, the views restored from their
`_00_query` rows at a bootstrap, a view's current result, and its end (unregistration, the
cleanup after a failed registration). Registration itself, with its
refusals, is `ssp.hub.registry`."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from surrealdb import RecordID

from dbclient import DbError
from dbclient.clock import now_ms
from engine.errors import QueryRejected
from engine.jsonvalues import to_json
from engine.parser import parse_cached
from engine.values import unpack_value
from ipc.messages import not_ready, reply
from ipc.routebodies import normalize_view_id
from ssp.hub.identity import effective_query
from ssp.hub.sharing import peers, share_key, write_counts
from ssp.hub.state import ViewState
from ssp.naming import QUERY_TABLE, edge_table, view_id_of, view_record
from ssp.permissions import PermissionsUnavailable
from ssp.shards import ShardDown, ShardError, ShardTimeout, shard_of
from timetext.durations import ttl_ms
from timetext.timestamps import activity_ms

if TYPE_CHECKING:
    from ssp.hub.shardpool import ShardPool
    from ssp.hub.state import HubState

log = logging.getLogger("ssp.hub")


class ViewLifecycle:
    """Creates, reads and retires the views of the registry (`state.views`)."""

    def __init__(self, state: HubState, pool: ShardPool) -> None:
        self.state = state
        self.pool = pool

    def new(self, vid: str, surql: str, params: dict[str, Any] | None,
            auth: RecordID | None, client_id: str, ttl: str, ttl_ms: int,
            last_ms: int, fmt: str | None, *, shard: int | None = None) -> ViewState:
        """A view not registered yet (its own generation). Its shard: `shard` when given (a
        held id registered with another query stays where the shard's engine replaces it),
        else that of a held view it shares a graph with (`ssp.hub.sharing`), else by id."""
        state = self.state
        state.generation += 1
        share = share_key(auth, surql, params)
        if shard is None:
            group = peers(state, share, exclude=vid)
            shard = group[0].shard if group else shard_of(vid, len(state.shards))
        return ViewState(
            view_id=vid, record=view_record(vid), edge_table=edge_table(auth, state.cfg.ref_mode),
            auth=auth, members=set(), generation=state.generation, surql=surql, params=params,
            client_ids={client_id}, client_id=client_id, ttl=ttl, ttl_ms=ttl_ms,
            last_active_ms=last_ms, shard=shard, format=fmt, registered_ms=now_ms(),
            share=share)

    # ------------------------------------------------------------------ restore

    async def restore_all(self) -> None:
        """Register again the views whose `_00_query` rows are live. A row that is expired,
        or whose view cannot be registered any more (a query this engine refuses, a bad
        row), is torn down: nobody else would ever maintain or remove it."""
        state = self.state
        rows = await state.db.query_one(f"SELECT * FROM {QUERY_TABLE}", idempotent=True) or []
        now = now_ms()
        for row in rows:
            try:
                vid = view_id_of(row["id"])
            except (KeyError, ValueError, TypeError) as e:
                log.warning("bootstrap: unreadable _00_query row %r: %s", row.get("id"), e)
                continue
            if row.get("state") is None and row.get("surql") is not None:
                # A client's request (registered through the allowlist by the feed tail,
                # `ssp.hub.rowrequests`) or a refusal left for its client to read.
                continue
            auth = row.get("auth_id")
            auth = auth if isinstance(auth, RecordID) else None
            ttl = ttl_ms(row.get("ttl"))
            last = activity_ms(row.get("lastActiveAt"), now)
            if last is None or last + ttl <= now:
                state.teardown(vid, edge_table(auth, state.cfg.ref_mode))
                continue
            try:
                params = row.get("params") if isinstance(row.get("params"), dict) else None
                surql = str(row.get("surql") or "")
                view = self.new(vid, surql, params, auth,
                                str(row.get("clientId") or ""), str(row.get("ttl") or "10m"),
                                ttl, last, None)
                eff = await effective_query(state, surql, parse_cached(surql), auth, params)
                view.engine_surql, view.auth_fields = eff.surql, eff.auth_fields
                await self._restore_one(view)
            except (ShardError, ShardDown, KeyError, ValueError, TypeError, QueryRejected,
                    DbError, PermissionsUnavailable) as e:
                log.warning("bootstrap: view %s not restored (%s); its row and edges are "
                            "removed", vid, e)
                if isinstance(e, ShardTimeout) or (isinstance(e, ShardError)
                                                   and e.code != "rejected"):
                    self.pool.restart(shard_of(vid, len(state.shards)), e)
                state.teardown(vid, edge_table(auth, state.cfg.ref_mode))

    async def _restore_one(self, view: ViewState, attempts: int = 3) -> None:
        """Register a restored view; a shard that is down (restarting) is waited for."""
        state = self.state
        shard = state.shards[view.shard]
        for attempt in range(attempts):
            try:
                async with state.exclusive():
                    await self.pool.register(view)
                break
            except ShardDown as e:
                if isinstance(e, ShardTimeout) or attempt == attempts - 1:
                    raise
                deadline = time.monotonic() + 30.0
                while not shard.up and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
        state.views[view.view_id] = view
        state.publisher.materialise(view)

    async def result(self, view: ViewState) -> list[Any]:
        """The view's current result rows as JSON ([] when its shard cannot answer)."""
        try:
            r = await self.state.shards[view.shard].call("result", {"view_id": view.view_id})
        except (ShardDown, ShardError):
            return []
        return to_json(unpack_value(r["data"]))

    def unregistered_meanwhile(self, view: ViewState) -> dict[str, Any]:
        """The view was unregistered (its row deleted, an unregister call) while its row was
        being written: that row must go too, and the client registers again."""
        self.state.teardown(view.view_id, view.edge_table)
        return not_ready(f"view {view.view_id} was unregistered while it was being "
                         "registered; register it again")

    async def abandon(self, view: ViewState) -> None:
        """Undo a registration whose first publication failed (unless the id was registered
        again meanwhile, by a request whose own publication then follows)."""
        if self.state.views.get(view.view_id) is view:
            await self.unregister(view.view_id)

    async def _recount(self, gone: ViewState) -> None:
        """The rest of a departed view's group: their `subscribers` without its clients."""
        rest = peers(self.state, gone.share, exclude=gone.view_id)
        try:
            await write_counts(self.state, rest)
        except DbError as e:  # a count, not a delta: the next registration writes it again
            log.info("subscriber counts of %s's group not updated: %s", gone.view_id, e)

    async def unregister_route(self, req: dict[str, Any]) -> dict[str, Any]:
        """`POST /view/unregister`."""
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
        state = self.state
        if vid in state.views:
            async with state.exclusive():
                view = state.views.get(vid)
                if (view is not None and deleted_at_ms is not None
                        and view.registered_ms > deleted_at_ms):
                    return
                if view is not None:
                    state.views.pop(vid, None)
                    try:
                        await state.shards[view.shard].call(
                            "unregister", {"view_id": vid},
                            timeout=state.cfg.shard_call_timeout_secs)
                    except (ShardTimeout, ShardError) as e:
                        self.pool.restart(view.shard, e)
                    except ShardDown:
                        pass  # the rebuild only re-registers views still in the registry
            if view is not None:
                state.teardown(vid, view.edge_table)
                await self._recount(view)
                return
        if deleted_at_ms is not None:
            return  # not held: whoever unregistered it queued its teardown
        row = await state.db.query_one("SELECT auth_id, state FROM ONLY $q",
                                       {"q": view_record(vid)}, idempotent=True)
        if isinstance(row, dict) and row.get("state") is None:
            # A row never registered (a request, or refused: `error`) has no edges, and its
            # user's edge table may not exist: SurrealDB 3.0.x (the Node build, transport
            # http, whose event posts this unregister from inside the row's DELETE) fails a
            # DELETE on a missing table, and the publisher would retry it for ever.
            return
        auth = row.get("auth_id") if isinstance(row, dict) else None
        state.teardown(vid, edge_table(auth if isinstance(auth, RecordID) else None,
                                       state.cfg.ref_mode))
