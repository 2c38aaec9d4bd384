"""The sequencer: the one order every event is applied in.

`submit` queues events; the sequencer loop takes them in batches (up to BATCH_MAX, one kind at
a time: deferred or not, `take_batch`), stores each batch in the row arena (`store`: stale
versions skipped), and sends it to every shard without waiting for the previous batch's
replies (up to PIPELINE_DEPTH in flight). The collector takes the replies in send order and
`deliver`s the per-view deltas: member sets updated, publisher marked (for transport http once
the commit is visible, `ssp.hub.visibility`), and the members whose edges a DELETE took along
marked again (`ssp.hub.members`). The exclusive section (`HubState.exclusive`) waits for every
batch in flight.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from engine.values import canonical_bytes
from engine.versions import rv_is_stale
from ipc.routebodies import OPS
from ssp.hub.errors import RowArenaFull

if TYPE_CHECKING:
    from ssp.hub.edgetables import EdgeTables
    from ssp.hub.shardpool import ShardPool
    from ssp.hub.state import HubState
    from ssp.hub.visibility import Visibility

log = logging.getLogger("ssp.hub")

BATCH_MAX = 2000  # events per shard round trip

Event = tuple[str, str, str, Any]  # (table, op, record id text, row)
# (event, its future, deferred?, monotonic arrival time, the row's canonical bytes when the
# caller has them already)
Queued = tuple[Event, "asyncio.Future[None]", bool, float, "bytes | None"]


class Sequencer:
    """Orders events into batches, applies them to the arena and the shards."""

    def __init__(self, state: HubState, pool: ShardPool, visibility: Visibility,
                 edges: EdgeTables) -> None:
        self.state = state
        self.pool = pool
        self.visibility = visibility
        self.edges = edges
        self._queue: asyncio.Queue[Queued] = asyncio.Queue()

    async def submit(self, events: list[Event], *, defer: bool = False,
                     encoded: list[bytes] | None = None) -> None:
        """Sequence events and wait until the shards applied them (the in-memory step).

        `defer`: the events come from inside their writing transaction (transport http), so
        their edges wait for the commit to be visible. `encoded`: each event's row as
        `canonical_bytes` made it, when the caller checked the rows that way already (the
        admission does: the store then need not encode each row a second time)."""
        loop = asyncio.get_running_loop()
        futs = []
        arrived = time.monotonic()
        put = self._queue.put_nowait
        for i, ev in enumerate(events):
            fut: asyncio.Future[None] = loop.create_future()
            put((ev, fut, defer, arrived, encoded[i] if encoded is not None else None))
            futs.append(fut)
        if len(futs) == 1:
            await futs[0]  # one ingest, one event: no gathering future around it
        else:
            await asyncio.gather(*futs)

    async def run(self) -> None:
        """Order events into batches and send each to the shards without waiting for the
        previous batch's replies (up to PIPELINE_DEPTH in flight): a shard answers in the
        order it received, and `collect` handles replies in the same order."""
        state = self.state
        queue = self._queue
        while True:
            first = await queue.get()
            batch = self.take_batch(first)
            try:
                async with state.apply_lock:
                    kept = self.store([b[0] for b in batch], [b[4] for b in batch])
                    sends = (self.pool.send("ingest", {"events": [list(e) for e in kept]})
                             if kept else [])
                    # Queued under the lock, so `exclusive()` sees every batch already sent.
                    await state.inflight.put((batch, kept, sends, first[2], first[3]))
            except OSError as e:
                # The row arena could not grow (no space): part of the batch may be stored
                # here and not in the shards, so nothing can be trusted any more.
                state.status = "failed"
                log.error("row arena write failed (%s): SSP failed", e.strerror or e)
                _fail_all(batch, RowArenaFull(f"row arena write failed: {e.strerror or e}"))
            except Exception as e:
                log.exception("sequencing %d events failed", len(batch))
                _fail_all(batch, e)

    def take_batch(self, first: Queued) -> list[Queued]:
        """`first` and what queued up behind it, up to BATCH_MAX, of one kind (deferred or
        not)."""
        queue = self._queue
        pending = queue._queue  # type: ignore[attr-defined]  # a deque: peek without taking
        batch = [first]
        kind = first[2]
        while len(batch) < BATCH_MAX and pending and pending[0][2] == kind:
            batch.append(queue.get_nowait())
        return batch

    async def collect(self) -> None:
        """Handle the shards' replies to each batch in send order."""
        inflight = self.state.inflight
        while True:
            batch, kept, sends, defer, arrived = await inflight.get()
            try:
                replies = await self.pool.collect("ingest", sends)
                self.deliver(kept, replies, defer, arrived)
                for b in batch:
                    if not b[1].done():
                        b[1].set_result(None)
            except Exception as e:
                log.exception("applying %d events failed", len(batch))
                _fail_all(batch, e)
            finally:
                inflight.task_done()

    def store(self, events: list[Event], encoded: list[bytes | None] | None = None
              ) -> list[Event]:
        """Apply events to the hub's rows (stale versions skipped); returns the kept ones.
        `encoded`: per event, its row's canonical bytes when already known (else None)."""
        state = self.state
        kept: list[Event] = []
        store = state.rows
        rv = state.rv
        for i, (table, op, rid, record) in enumerate(events):
            if op not in OPS:
                continue
            state.seq += 1
            if op == "DELETE":
                store.delete(table, rid)
                rv.pop(rid, None)
            else:
                rv_new = record.get("_00_rv")
                if rv_is_stale(rv_new, rv.get(rid)) and store.contains(table, rid):
                    continue  # stale: a newer version of the row is already applied
                data = encoded[i] if encoded is not None else None
                store.put_bytes(table, rid, data if data is not None else canonical_bytes(record))
                rv[rid] = rv_new
            kept.append((table, op, rid, record))
            if op != "DELETE" and record.get("status") == "pending":
                state.jobs.hint(table)  # a no-op unless `table` is a job table
            if table == "user" and op in ("CREATE", "DELETE"):
                self.edges.user_changed(op, rid)
        state.ingested += len(kept)
        state.arena.release()
        return kept

    def deliver(self, kept: list[Event], replies: list[dict[str, Any]], defer: bool,
                arrived: float | None) -> None:
        """Per-view deltas -> member sets -> publisher marks (deferred until commit-visible
        for transport http). Then every view still holding a record the batch deleted gets
        that member marked too: the database took its edge along (`ssp.hub.members`)."""
        views = self.state.views
        index = views.members
        if defer:
            self.visibility.supersede(kept)
        marks: list[tuple[str, list[str]]] = []
        for r in replies:
            # groups of views sharing one delta, in order (a view may recur: apply each)
            for vids, d in r.get("groups") or ():
                touched = None
                for vid in vids:
                    view = views.get(vid)
                    if view is None:
                        continue
                    removed, added = d["removed"], d["added"]
                    view.members.difference_update(removed)
                    view.members.update(added)
                    if removed:
                        index.remove(vid, removed)
                    if added:
                        index.add(vid, added)
                    if touched is None:
                        touched = [*added, *removed, *d["updated"]]
                    marks.append((vid, touched))
        for _table, op, rid, _row in kept:
            if op == "DELETE":
                marks.extend((vid, [rid]) for vid in index.views_of(rid))
        if not marks:
            return
        if defer and self.visibility.publish_after_commit(kept, marks, arrived):
            return
        publisher = self.state.publisher
        for vid, members in marks:
            publisher.mark(vid, members, at=arrived)


def _fail_all(batch: list[Queued], error: BaseException) -> None:
    """Fail the futures of a sequencer batch that are still waiting."""
    for _, fut, _, _, _ in batch:
        if not fut.done():
            fut.set_exception(error)
