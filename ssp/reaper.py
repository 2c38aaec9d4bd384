"""Deletes retired edges (mode `dedicated`) in the background, at a bounded share of the
database's time.

In mode `dedicated` a member leaving a view does not delete its edge: the flush *retires* it
(`UPDATE ... SET removed = true`, see `ssp.publisher`), because SurrealDB 3.2.4 pays for every
table defined in the database on each record it deletes: ~2-7 us per table, so ~5 ms of
engine time per deleted edge with 1,000 users owning views, against ~50 us for the UPDATE
(`loadtests/probe_edge_removal.py`: any form of DELETE, any batching). It is given only the
edges a flush did retire: an edge whose member's row was deleted went with the row, in the
application's transaction, and costs the reaper nothing. So what it deletes is the edges of
rows that still exist and left a view (a model of `loadtests/bench_ssp.py`'s mix at 3,000
events/s: ~11 a second, against ~300 a second whose row was deleted, edges the benchmark
leaves in the database unless run with `--app-deletes`). The reaper deletes them while
publication leaves the database time, so the edge tables converge to "one row per member":

- it runs while no flush is in flight and publication is not falling behind (the oldest
  pending mark younger than the throttle window), one transaction at a time, sized to take
  about `TARGET_SECS` (the number of edges adapts to the measured cost per edge), and rests as
  long as the transaction took before the next one: at most about half of one database worker;
- under a steady load publication is never quiet, and a reaper that waited for quiet would let
  retired edges (rows in the database) pile up for as long as the load lasts. So it also takes
  a guaranteed share, `BUSY_SHARE` of the time, while publication is busy: after such a
  transaction it rests (1 - share) / share times as long as the transaction took;
- `DELETE $ids WHERE removed = true`: an edge revived meanwhile (its member came back, a
  RELATE cleared `removed`) stays; the views of the edges it deletes are held
  (`Publisher.claim`) so no flush writes them during its transaction;
- the queue lives in memory, at most `MAX_QUEUED` edges (more are left to the view's next
  materialisation, which queues every retired edge of the view again: after a restart too).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from surrealdb import RecordID

from dbclient import DbError
from engine.values import record_id_text


class Publication(Protocol):
    """What the reaper needs of the publisher (``ssp.publisher.Publisher``), named here so
    the reaper does not import the module that owns it."""

    dropped: set[str]

    def quiet(self) -> bool: ...

    def claim(self, view_id: str) -> bool: ...

    async def unclaim(self, view_ids: Iterable[str]) -> None: ...

log = logging.getLogger("ssp.reaper")

REAP = "DELETE $ids WHERE removed = true RETURN NONE"
TARGET_SECS = 0.025  # one reap transaction
MAX_PER_TXN = 500
MAX_QUEUED = 200_000
IDLE_POLL_SECS = 0.02
BUSY_SHARE = 0.1  # of the time the reaper takes while publication is busy (docstring)


@dataclass
class ReaperStats:
    """Counters for `/debug/memory`."""

    queued: int = 0
    reaped: int = 0  # edges in committed reap transactions (retired or not)
    transactions: int = 0
    failures: int = 0
    dropped: int = 0  # not queued: the queue was full
    busy_transactions: int = 0  # taken while publication was busy (its guaranteed share)
    us_per_edge: float = 0.0


class EdgeReaper:
    """The background deleter of retired edges (see the module docstring)."""

    def __init__(self, db: Any, publisher: Publication) -> None:
        self.db = db
        self.publisher = publisher
        # retired edge, as (its view id, its member's id text: a RecordID with an array key
        # is not hashable) -> (the edge id, its view id); insertion ordered, so the oldest go
        # first. Keyed by member so that a member coming back takes its edge off (`revived`).
        self._queue: dict[tuple[str, str], tuple[RecordID, str]] = {}
        self._wake = asyncio.Event()
        self._per_edge = 0.001  # seconds per edge, measured (start pessimistic: few at first)
        self.stats = ReaperStats()

    def add(self, view_id: str, edges: Iterable[RecordID]) -> None:
        """Queue retired edges of `view_id` for deletion."""
        for e in edges:
            key = (view_id, _member_text(e))
            if key in self._queue:
                continue
            if len(self._queue) >= MAX_QUEUED:
                self.stats.dropped += 1
                continue
            self._queue[key] = (e, view_id)
        self.stats.queued = len(self._queue)
        if self._queue:
            self._wake.set()

    def revived(self, view_id: str, members: Iterable[str]) -> None:
        """Members of `view_id` whose edges a committed flush wrote again (a retired edge
        revived: its member came back): those edges are not the reaper's any more. Without
        this a steady load that moves rows in and out of views kept every edge that had ever
        retired in the queue (an 8-minute soak: 55,627 queued, 231 reaped)."""
        q = self._queue
        if not q:
            return
        for m in members:
            q.pop((view_id, m), None)
        self.stats.queued = len(q)

    def figures(self) -> dict[str, Any]:
        """`/debug/memory`'s `reaper` object."""
        s = self.stats
        return {"queued": len(self._queue), "reaped": s.reaped, "transactions": s.transactions,
                "failures": s.failures, "dropped": s.dropped,
                "busy_transactions": s.busy_transactions,
                "us_per_edge": round(self._per_edge * 1e6, 1)}

    async def run(self) -> None:
        """Reap forever (the publisher's `start` runs it, `stop` cancels it)."""
        busy_turn = 0.0  # monotonic time of the next transaction taken while busy
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
            quiet = self.publisher.quiet()
            if not quiet and time.monotonic() < busy_turn:
                await asyncio.sleep(IDLE_POLL_SECS)
                continue
            took = await self.reap_once()
            if quiet:
                # Rest as long as the transaction took: the database's other writers
                # (flushes, the application) keep at least half of its time.
                await asyncio.sleep(max(took, IDLE_POLL_SECS))
            else:
                self.stats.busy_transactions += 1 if took else 0
                busy_turn = time.monotonic() + max(took, IDLE_POLL_SECS) * (
                    (1 - BUSY_SHARE) / BUSY_SHARE)
                await asyncio.sleep(IDLE_POLL_SECS)

    async def reap_once(self) -> float:
        """One reap transaction over the oldest queued edges whose views no flush holds;
        returns how long it took (0 when nothing could be taken)."""
        want = max(1, min(MAX_PER_TXN, int(TARGET_SECS / self._per_edge)))
        views: set[str] = set()
        ids: list[RecordID] = []
        keys: list[tuple[str, str]] = []
        claimed = self.publisher.claim
        dropped = self.publisher.dropped
        for key, (edge, vid) in list(self._queue.items()):
            if len(ids) >= want:
                break
            if dropped and edge.table_name in dropped:
                # the table went with its user and took the edge along; a DELETE naming a
                # missing table fails the whole transaction
                del self._queue[key]
                continue
            if vid not in views:
                if not claimed(vid):
                    continue  # a flush writes this view now: later
                views.add(vid)
            ids.append(edge)
            keys.append(key)
        if not ids:
            await self.publisher.unclaim(views)
            return 0.0
        began = time.monotonic()
        try:
            await self.db.transaction([(REAP, {"ids": ids})])
        except DbError as e:
            self.stats.failures += 1
            log.info("deleting %d retired edges failed (kept for later): %s", len(ids), e)
            return time.monotonic() - began
        finally:
            await self.publisher.unclaim(views)
        took = time.monotonic() - began
        for key in keys:
            self._queue.pop(key, None)
        self.stats.queued = len(self._queue)
        self.stats.reaped += len(ids)
        self.stats.transactions += 1
        # A moving average of the cost per edge sizes the next transaction.
        self._per_edge = 0.7 * self._per_edge + 0.3 * (took / len(ids))
        return took


def _member_text(edge: RecordID) -> str:
    """The member an edge points at, as the publisher names members: an edge's key is
    ``[view, member]`` (`ssp.naming.edge_id`); another shape keys by the edge itself."""
    key = edge.id
    if isinstance(key, list) and len(key) == 2 and isinstance(key[1], RecordID):
        return record_id_text(key[1])
    return record_id_text(edge)
