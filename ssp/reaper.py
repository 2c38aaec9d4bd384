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

- it runs while publication is idle (nothing pending, no flush in flight: `Publisher.idle`),
  one transaction at a time, sized to take about `TARGET_SECS` (the number of edges adapts to
  the measured cost per edge), and rests as long as the transaction took before the next one:
  at most about half of one database worker;
- under a steady load publication is never idle, and a reaper that waited for idle would let
  retired edges (rows in the database) pile up for as long as the load lasts. So it also takes
  a guaranteed share, `BUSY_SHARE` of the time, while publication is busy: after such a
  transaction it rests (1 - share) / share times as long as the transaction took. (It used to
  count publication as quiet whenever no flush was in flight and nothing pending had waited
  longer than the throttle window. Under a steady load that is most of the time between
  flushes, so in issue 31's soak the reaper held a database worker ~45% of the time, one
  edge per ~40 ms transaction, each DELETE ~4.6 ms of the engine's CPU with 1,000 edge
  tables defined, beside the flushes whose latency the soak measures.);
- `DELETE $ids WHERE removed = true`: an edge revived meanwhile (its member came back, a
  RELATE cleared `removed`) stays; the members whose edges it deletes are held
  (`Publisher.claim`): no flush writes them during its transaction, while their views'
  other members are written as usual;
- the queue in memory is compact and bounded: per view, its edge table and its members'
  texts (each edge id is rebuilt at reap time, `ssp.naming.edge_id`), at most `MAX_QUEUED`
  edges, ~90 bytes each (`loadtests/probe_reaper_queue.py`; a dict of whole edge ids took
  ~220 and grew to 200,000 of them under a steady load). An edge retired while the queue is
  full is not forgotten: its table is remembered by name (`overflow`), and once the queue has
  emptied the reaper lists that table's retired rows from the database (`REFILL`, at most
  `REFILL_ROWS` a turn) and queues them. At start every edge table counts as overflowed, so
  retired rows an earlier run left are found without waiting for their views' next
  materialisation. Memory is so bounded by `MAX_QUEUED` and the number of edge tables, not by
  how long the load lasts; the retired rows themselves are in the database either way.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from surrealdb import RecordID

from dbclient import DbError
from engine.values import parse_record_id, record_id_text
from ssp.naming import EDGE_PREFIX, SINGLE_TABLE, edge_id, view_id_of, view_record


class Publication(Protocol):
    """What the reaper needs of the publisher (``ssp.publisher.Publisher``), named here so
    the reaper does not import the module that owns it."""

    dropped: set[str]

    def idle(self) -> bool: ...

    def claim(self, view_id: str, members: Iterable[str]) -> bool: ...

    async def unclaim(self, view_ids: Iterable[str]) -> None: ...

log = logging.getLogger("ssp.reaper")

REAP = "DELETE $ids WHERE removed = true RETURN NONE"
# One turn of the refill: retired rows of one overflowed table (`{table}` is an edge table's
# name, made by `ssp.naming` or read from the database's own catalogue and checked).
REFILL = "SELECT id, in FROM {table} WHERE removed = true LIMIT $n"
TARGET_SECS = 0.025  # one reap transaction
MAX_PER_TXN = 500
MAX_QUEUED = 20_000  # edges in memory (~2.4 MB); more wait in the database (docstring)
REFILL_ROWS = 2_000
IDLE_POLL_SECS = 0.02
BUSY_SHARE = 0.1  # of the time the reaper takes while publication is busy (docstring)


@dataclass
class ReaperStats:
    """Counters for `/debug/memory`."""

    queued: int = 0
    queued_peak: int = 0  # the most edges the queue held at once
    reaped: int = 0  # edges in committed reap transactions (retired or not)
    transactions: int = 0
    failures: int = 0
    overflowed: int = 0  # retired edges not queued (the queue was full): left to the refill
    refills: int = 0  # turns that listed an overflowed table's retired rows
    refilled: int = 0  # edges those turns queued
    busy_transactions: int = 0  # taken while publication was busy (its guaranteed share)
    revived: int = 0  # queued edges a flush wrote again before they were reaped
    us_per_edge: float = 0.0


@dataclass
class _Retired:
    """One view's queued retired edges: its edge table, its record (the edges' `in`) and its
    members' texts in the order they retired. A member maps to None (its edge id is
    `edge_id(table, record, member)`) or, for an edge whose id has another shape, the id."""

    table: str
    record: RecordID
    members: dict[str, RecordID | None]


class EdgeReaper:
    """The background deleter of retired edges (see the module docstring)."""

    def __init__(self, db: Any, publisher: Publication, max_queued: int = MAX_QUEUED) -> None:
        self.db = db
        self.publisher = publisher
        self.max_queued = max_queued
        # view id -> its retired edges; insertion ordered, and a view whose edges were only
        # partly taken goes to the end, so views take turns (the module docstring).
        self._queue: dict[str, _Retired] = {}
        self._count = 0  # edges in `_queue`
        # edge tables holding retired rows that are not in `_queue` (insertion ordered)
        self.overflow: dict[str, None] = {}
        self._scanned = False  # the database's edge tables were listed (after a start)
        self._wake = asyncio.Event()
        self._per_edge = 0.001  # seconds per edge, measured (start pessimistic: few at first)
        self.stats = ReaperStats()

    def add(self, view_id: str, edges: Iterable[RecordID]) -> None:
        """Queue retired edges of `view_id` for deletion."""
        q = self._queue
        for e in edges:
            table = e.table_name
            entry = q.get(view_id)
            if entry is not None and entry.table != table:
                # (a view's edges live in one table; one elsewhere waits for the refill)
                self._overflowed(table)
                continue
            member, odd = _member(e)
            if entry is not None and member in entry.members:
                continue
            if self._count >= self.max_queued:
                self._overflowed(table)
                continue
            if entry is None:
                entry = q[view_id] = _Retired(table, _view_of(e, view_id), {})
            if odd is None and _view_of(e, view_id) != entry.record:
                odd = e
            entry.members[member] = odd
            self._count += 1
        self.stats.queued = self._count
        self.stats.queued_peak = max(self.stats.queued_peak, self._count)
        if self._count or self.overflow:
            self._wake.set()

    def _overflowed(self, table: str) -> None:
        self.overflow[table] = None
        self.stats.overflowed += 1

    def revived(self, view_id: str, members: Iterable[str]) -> None:
        """Members of `view_id` whose edges a committed flush wrote again (a retired edge
        revived: its member came back): those edges are not the reaper's any more. Without
        this a steady load that moves rows in and out of views kept every edge that had ever
        retired in the queue (an 8-minute soak: 55,627 queued, 231 reaped)."""
        entry = self._queue.get(view_id)
        if entry is None:
            return
        for m in members:
            if entry.members.pop(m, 0) != 0:
                self._count -= 1
                self.stats.revived += 1
        if not entry.members:
            del self._queue[view_id]
        self.stats.queued = self._count

    def figures(self) -> dict[str, Any]:
        """`/debug/memory`'s `reaper` object."""
        s = self.stats
        return {"queued": self._count, "queued_peak": s.queued_peak,
                "queued_views": len(self._queue),
                "overflow_tables": len(self.overflow), "overflowed": s.overflowed,
                "refills": s.refills, "refilled": s.refilled,
                "reaped": s.reaped, "transactions": s.transactions,
                "failures": s.failures, "busy_transactions": s.busy_transactions,
                "revived": s.revived,
                "us_per_edge": round(self._per_edge * 1e6, 1)}

    async def run(self) -> None:
        """Reap forever (the publisher's `start` runs it, `stop` cancels it)."""
        busy_turn = 0.0  # monotonic time of the next transaction taken while busy
        while True:
            if not self._scanned:
                await self.scan_tables()
            if not self._queue and not self.overflow:
                self._wake.clear()
                await self._wake.wait()
            idle = self.publisher.idle()
            if not idle and time.monotonic() < busy_turn:
                await asyncio.sleep(IDLE_POLL_SECS)
                continue
            took = await self.reap_once() if self._queue else await self.refill_once()
            if idle:
                # Rest as long as the transaction took: the database's other writers
                # (flushes, the application) keep at least half of its time.
                await asyncio.sleep(max(took, IDLE_POLL_SECS))
            else:
                self.stats.busy_transactions += 1 if took else 0
                busy_turn = time.monotonic() + max(took, IDLE_POLL_SECS) * (
                    (1 - BUSY_SHARE) / BUSY_SHARE)
                await asyncio.sleep(IDLE_POLL_SECS)

    async def scan_tables(self) -> None:
        """Count every edge table of the database as overflowed, once after a start: retired
        rows an earlier run left (its queue was memory) are then found by the refill."""
        try:
            tables = await self.db.tables()
        except DbError as e:
            log.info("listing the edge tables failed (tried again later): %s", e)
            await asyncio.sleep(1.0)
            return
        self._scanned = True
        for t in tables:
            if _is_edge_table(t):
                self.overflow.setdefault(t, None)
        if self.overflow:
            self._wake.set()

    async def refill_once(self) -> float:
        """Queue retired rows of the oldest overflowed table, at most what the queue has room
        for; returns how long the read took (0 when nothing was read)."""
        room = min(REFILL_ROWS, self.max_queued - self._count)
        if not self.overflow or room <= 0:
            return 0.0
        table = next(iter(self.overflow))
        # Off the list before the read: an edge retired into it meanwhile that the read misses
        # puts it back (`add`), so none is forgotten.
        del self.overflow[table]
        if table in self.publisher.dropped or not _is_edge_table(table):
            return 0.0
        began = time.monotonic()
        try:
            rows = await self.db.query_one(REFILL.format(table=table), {"n": room})
        except DbError as e:
            self.stats.failures += 1
            self.overflow[table] = None  # (at the end: the other tables go first)
            log.info("listing retired edges of %s failed (tried again later): %s", table, e)
            return time.monotonic() - began
        took = time.monotonic() - began
        rows = rows or []
        if len(rows) >= room:
            self.overflow[table] = None  # more may be there: another turn, after the others
        found = 0
        for r in rows:
            edge, view = r.get("id"), r.get("in")
            if isinstance(edge, RecordID) and isinstance(view, RecordID):
                self.add(view_id_of(view), (edge,))
                found += 1
        self.stats.refills += 1
        self.stats.refilled += found
        return took

    async def reap_once(self) -> float:
        """One reap transaction over the oldest queued edges whose views no flush holds;
        returns how long it took (0 when nothing could be taken)."""
        want = max(1, min(MAX_PER_TXN, int(TARGET_SECS / self._per_edge)))
        views: set[str] = set()
        ids: list[RecordID] = []
        taken: list[tuple[str, list[str]]] = []  # (view, its members taken)
        claimed = self.publisher.claim
        dropped = self.publisher.dropped
        for vid, entry in list(self._queue.items()):
            if len(ids) >= want:
                break
            if dropped and entry.table in dropped:
                # the table went with its user and took the edges along; a DELETE naming a
                # missing table fails the whole transaction
                del self._queue[vid]
                self._count -= len(entry.members)
                continue
            members = list(itertools.islice(entry.members.items(), want - len(ids)))
            if not claimed(vid, [m for m, _ in members]):
                continue  # a flush writes this view now: later
            views.add(vid)
            for m, odd in members:
                ids.append(odd if odd is not None else
                           edge_id(entry.table, entry.record, parse_record_id(m)))
            taken.append((vid, [m for m, _ in members]))
        self.stats.queued = self._count
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
        # (The members were held: no flush revived or retired their edges meanwhile.)
        for vid, ms in taken:
            if vid not in self._queue:
                continue
            entry = self._queue.pop(vid)
            for m in ms:
                if entry.members.pop(m, 0) != 0:
                    self._count -= 1
            if entry.members:
                self._queue[vid] = entry  # the rest after the other views' turns
        self.stats.queued = self._count
        self.stats.reaped += len(ids)
        self.stats.transactions += 1
        # A moving average of the cost per edge sizes the next transaction.
        self._per_edge = 0.7 * self._per_edge + 0.3 * (took / len(ids))
        return took


def _member(edge: RecordID) -> tuple[str, RecordID | None]:
    """The member an edge points at, as the publisher names members, and None: an edge's key
    is ``[view, member]`` (`ssp.naming.edge_id`). Another shape is keyed by the edge's own
    text and kept whole."""
    key = edge.id
    if isinstance(key, list) and len(key) == 2 and isinstance(key[1], RecordID):
        return record_id_text(key[1]), None
    return record_id_text(edge), edge


def _view_of(edge: RecordID, view_id: str) -> RecordID:
    """The view record an edge's key names (`view_id`'s record for another shape)."""
    key = edge.id
    if isinstance(key, list) and len(key) == 2 and isinstance(key[0], RecordID):
        return key[0]
    return view_record(view_id)


def _is_edge_table(name: str) -> bool:
    """A table the SSP writes edges into in mode `dedicated` (a name safe to put in text)."""
    return (name == SINGLE_TABLE or name.startswith(EDGE_PREFIX)) and _IDENT.fullmatch(name) is not None


_IDENT = re.compile(r"[A-Za-z0-9_]+")
