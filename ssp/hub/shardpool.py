"""The hub's shard workers as one pool: send a request to every shard and collect the
replies, load rows by arena handle, register a view on its shard, and keep every shard
trustworthy: a shard that failed, timed out or died is killed, restarted and rebuilt from the
arena and the registry (so no batch is ever missed for it).

Every request waits at most `SVC_SSP_SHARD_TIMEOUT_SECS`. A shard that stays alive but hangs
(stopped, stuck) is found by the call that times out, and without traffic by the liveness
ping (`liveness`: one `ping` per shard every PING_INTERVAL_SECS, the same timeout): either way
it is killed and rebuilt from the arena, which holds every batch it missed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ssp.hub.identity import engine_params
from ssp.rowarena import pack_handles
from ssp.shard import encode_request
from ssp.shards import ShardDown, ShardError, ShardHandle, ShardTimeout

if TYPE_CHECKING:
    from ssp.hub.state import HubState, ViewState

log = logging.getLogger("ssp.hub")

LOAD_CHUNK = 2000  # rows per load message (arena handles: 8 bytes each on the wire)
PING_INTERVAL_SECS = 5.0

Sends = list[tuple[ShardHandle, "asyncio.Future[dict[str, Any]]"]]


class ShardPool:
    """The shards of one hub (`state.shards`), built here."""

    def __init__(self, state: HubState) -> None:
        self.state = state
        cfg = state.cfg
        state.shards = [ShardHandle(i, cfg.shard_endpoint(i), state.ctx, self._exited,
                                    arena_dir=str(state.arena.dir))
                        for i in range(cfg.shards)]

    # ------------------------------------------------------------------ calls

    def send(self, kind: str, payload: dict[str, Any]) -> Sends:
        """Start sending one request (encoded once) to every running shard."""
        msg = encode_request(kind, payload)
        timeout = self.state.cfg.shard_call_timeout_secs
        return [(s, asyncio.ensure_future(s.send(msg, timeout)))
                for s in self.state.shards if s.up]

    async def collect(self, kind: str, sends: Sends) -> list[dict[str, Any]]:
        """The replies of `send`. A shard that did not answer is left out and rebuilt: a
        dead one by its exit handler, one that timed out or failed is killed first (it may
        apply the request later, or have applied part of it), and its rebuild recomputes its
        views from the arena (which holds the batch) and publishes the difference."""
        results = await asyncio.gather(*(f for _, f in sends), return_exceptions=True)
        out = []
        for (shard, _), r in zip(sends, results):
            if isinstance(r, ShardTimeout):
                self.restart(shard.index, r)
                continue
            if isinstance(r, ShardDown):
                continue  # its exit handler restarts and rebuilds it from the hub's rows
            if isinstance(r, BaseException):
                log.error("shard %d failed %s (%s): restarting it to rebuild", shard.index,
                          kind, r)
                shard.kill()
                continue
            out.append(r)
        return out

    async def broadcast(self, kind: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
        """Send one request to every running shard and wait for the replies."""
        return await self.collect(kind, self.send(kind, payload))

    async def load_into(self, shards: list[ShardHandle], table: str, rids: list[str]
                        ) -> list[dict[str, Any]]:
        """Load stored rows of `table` into every running shard of `shards` by arena handle;
        the replies (with the deltas of views that already read the table). A shard that
        fails is restarted and rebuilt (`collect`)."""
        replies: list[dict[str, Any]] = []
        timeout = self.state.cfg.shard_call_timeout_secs
        with self.state.arena.reading():
            for msg in self.handle_chunks(table, rids):
                sends: Sends = [(s, asyncio.ensure_future(s.send(msg, timeout)))
                         for s in shards if s.up]
                replies.extend(await self.collect("load_handles", sends))
        return replies

    def handle_chunks(self, table: str, rids: list[str]) -> Iterator[dict[str, Any]]:
        """`load_handles` requests naming the arena blocks of `rids`, LOAD_CHUNK at a time.
        Each chunk's handles are read when it is sent: use inside `arena.reading()`."""
        handle = self.state.rows.handle
        for i in range(0, len(rids), LOAD_CHUNK):
            raw = pack_handles(h for r in rids[i:i + LOAD_CHUNK]
                               if (h := handle(table, r)) is not None)
            yield encode_request("load_handles", {"tables": {table: raw}})

    async def register(self, view: ViewState) -> None:
        """Register on the owning shard (caller holds the exclusive section); fills
        `members`. A view id the shard holds is replaced only once the new view is built
        there, so a refusal (ShardError `rejected`) leaves the old one registered."""
        shard = self.state.shards[view.shard]
        r = await shard.call("register", _registration(view),
                             timeout=self.state.cfg.shard_call_timeout_secs)
        members = set(r["members"])
        views = self.state.views
        if views.get(view.view_id) is view:  # held already (a rebuild, a reload)
            views.members.remove(view.view_id, view.members)
            views.members.add(view.view_id, members)
        view.members = members

    async def register_all(self, views: list[ViewState]) -> list[set[str] | BaseException]:
        """Register views not held yet, pipelined: every request is sent before the first
        reply is awaited (a warm start's 1,000 views one round trip at a time took 11-13 s on
        a busy host, the shard's own work ~0.5 s). Each view's members, or the exception its
        request raised, in order; the caller holds the exclusive section and restarts a
        shard that timed out or failed."""
        timeout = self.state.cfg.shard_call_timeout_secs
        replies = await asyncio.gather(
            *(self.state.shards[v.shard].call("register", _registration(v), timeout=timeout)
              for v in views), return_exceptions=True)
        return [r if isinstance(r, BaseException) else set(r["members"]) for r in replies]

    # ------------------------------------------------------------------ supervision

    def restart(self, index: int, why: BaseException) -> None:
        """A shard that timed out or failed unexpectedly may hold a half-applied change: kill
        it; its exit handler restarts it and rebuilds it from the registry and the rows."""
        shard = self.state.shards[index]
        if shard.up:
            log.error("shard %d is restarted to rebuild its views: %s", index, why)
            shard.kill()

    async def liveness(self, interval: float = PING_INTERVAL_SECS) -> None:
        """Ping every running shard every `interval`: one that does not answer within the
        call timeout is hung (alive, but it would miss the next batch): restart it."""
        while True:
            await asyncio.sleep(interval)
            await asyncio.gather(*(self._ping(s) for s in self.state.shards if s.up))

    async def _ping(self, shard: ShardHandle) -> None:
        try:
            await shard.call("ping", timeout=self.state.cfg.shard_call_timeout_secs)
        except ShardTimeout as e:
            self.restart(shard.index, e)
        except (ShardDown, ShardError):
            pass  # dying already (its exit handler rebuilds it), or answered: alive

    async def _exited(self, shard: ShardHandle, code: int) -> None:
        """A shard died: restart it and rebuild its views, or report `failed`."""
        state = self.state
        if not shard.may_restart():
            state.status = "failed"
            log.error("shard %d keeps dying; SSP failed", shard.index)
            return
        try:
            await shard.start()
            async with state.exclusive():
                await self._rebuild(shard)
            log.info("shard %d rebuilt", shard.index)
        except Exception as e:  # noqa: BLE001 - any failure here means `failed`
            state.status = "failed"
            log.error("rebuilding shard %d failed: %s", shard.index, e)

    async def _rebuild(self, shard: ShardHandle) -> None:
        """Reload a restarted shard from the arena, then register its views again.
        The caller holds the exclusive section."""
        state = self.state
        timeout = state.cfg.shard_call_timeout_secs
        with state.arena.reading():
            for table in state.rows.tables():
                for msg in self.handle_chunks(table, state.rows.ids(table)):
                    await shard.send(msg, timeout)  # a failure leaves the SSP `failed`
        for view in [v for v in state.views.values() if v.shard == shard.index]:
            before = set(view.members)
            try:
                await self.register(view)
            except ShardError as e:
                log.error("view %s could not be rebuilt (%s): its row and edges are removed",
                          view.view_id, e)
                state.views.pop(view.view_id, None)
                state.teardown(view.view_id, view.edge_table)
                continue
            changed = before ^ view.members
            if changed:
                state.publisher.mark(view.view_id, changed)


def _registration(view: ViewState) -> dict[str, Any]:
    """A view's `register` request: what the engine evaluates (`ssp.permissions`)."""
    return {"view_id": view.view_id, "surql": view.engine_surql or view.surql,
            "params": engine_params(view.params, view.auth, view.auth_fields)}
