"""The standalone changefeed tail (transport `changefeed` without a scheduler): the synced
tables' feeds and `_00_query`'s, read in commit order through `dbclient.feed.FeedCursor`,
submitted to the sequencer; a `_00_query` delete unregisters its view, and a row a record
user created registers one (`ssp.hub.rowrequests`). The cursor advances
only after the round's events were applied, so nothing read is ever skipped (a round that
fails is read again; a repeat is harmless: the arena skips stale versions).

Each round re-reads only the last 100 ms of the feed (`FEED_SHORT_VS`); a sweep, its own task
(`_sweep_loop`), re-reads the whole 2 s window at most once a second for commits that became
visible late (`dbclient.feed.SweepWindow`), and only its hand-on takes the tail's lock, so new
changes never wait behind it. Before, every round re-read the whole window: at 500 writes/s
~1,000 changes per read, most of them seen already (`loadtests/probe_tail_reads.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from dbclient import DbError
from dbclient.feed import feed_change, sweep_loop
from dbclient.tasks import stop_loops
from engine.values import parse_record_id
from ssp.naming import QUERY_TABLE, view_id_of

if TYPE_CHECKING:
    from ssp.hub.rowrequests import RowRequests
    from ssp.hub.sequencer import Event, Sequencer
    from ssp.hub.state import HubState
    from ssp.hub.views import ViewLifecycle

log = logging.getLogger("ssp.hub")

FEED_POLL_SECS = 2.0


class FeedTail:
    """Follows `state.cursor` into the sequencer (see the module docstring)."""

    def __init__(self, state: HubState, sequencer: Sequencer, views: ViewLifecycle) -> None:
        self.state = state
        self.sequencer = sequencer
        self.views = views
        self.oversized = 0  # transactions with more feed entries than one read returns
        self._wake = asyncio.Event()
        self._live: Any = None
        self._query_live: Any = None
        # Set by the hub: registers the `_00_query` rows record users created.
        self.requests: RowRequests | None = None
        # One reader at a time (two rounds from one cursor would apply changes twice, an old
        # DELETE after a newer write included); `_started` is when the last catch-up began.
        self._lock = asyncio.Lock()
        self._started = 0.0
        self._sweep_owed = False  # rounds ran since the last sweep (`_sweep_loop`)
        self.sweeps = 0

    async def run(self) -> None:
        """Follow the feeds, woken by `_00_version` changes (LIVE) or every 2 s."""
        try:
            self._live = await self.state.db.live("_00_version", lambda _n: self._wake.set())
        except DbError as e:
            log.warning("LIVE on _00_version unavailable (%s); polling every %.0fs", e,
                        FEED_POLL_SECS)
        if self.requests is not None:
            # A client's new `_00_query` row bumps no `_00_version`: its own wake-up.
            try:
                self._query_live = await self.state.db.live(QUERY_TABLE,
                                                            lambda _n: self._wake.set())
            except DbError as e:
                log.warning("LIVE on %s unavailable (%s); its rows are read every %.0fs",
                            QUERY_TABLE, e, FEED_POLL_SECS)
            self.state.spawn(self.scan_requests(self.requests), "row-requests-scan")
        sweeper = asyncio.get_running_loop().create_task(self._sweep_loop(),
                                                         name="changefeed-sweep")
        try:
            while True:
                try:
                    await self.catch_up()
                except DbError as e:
                    log.warning("changefeed read failed: %s", e)
                except Exception:
                    log.exception("changefeed round failed")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), FEED_POLL_SECS)
                self._wake.clear()
        finally:
            await stop_loops(sweeper)

    async def _sweep_loop(self) -> None:
        """Sweeps apart from the rounds, at most every `sweep_secs`, owed after rounds ran (a
        commit later than the short re-read is found only by a sweep, and a quiet feed rings
        no doorbell for it)."""
        await sweep_loop(self.state.cursor.sweep_secs, lambda: self._sweep_owed, self.sweep)

    async def sweep(self) -> int:
        """One sweep of every followed table's window; returns the (late) sets applied."""
        cursor = self.state.cursor
        resets = cursor.resets
        self._sweep_owed = False
        try:
            rnd = await cursor.sweep_read(self.state.db, list(cursor.cursors))
            async with self._lock:
                if cursor.resets != resets:
                    return 0  # the cursor was reset meanwhile: this sweep read the old one
                fresh = cursor.unseen(rnd)
                requests = await self._apply(fresh)
                cursor.absorb_sweep(rnd, fresh)
                self._seen_requests(requests)
                self.sweeps += 1
                return len(fresh)
        except BaseException:
            self._sweep_owed = True  # the next turn sweeps again
            raise

    async def scan_requests(self, requests: RowRequests) -> None:
        """The request rows written while this SSP was down (`RowRequests.scan`)."""
        try:
            await requests.scan()
        except DbError as e:  # the rows are registered again on their next change
            log.warning("reading the _00_query request rows failed: %s", e)

    async def stop(self) -> None:
        """End the LIVE subscription (best effort: the socket closes next anyway)."""
        for live in (self._live, self._query_live):
            if live is not None:
                try:
                    await live.kill()
                except DbError as e:
                    log.info("killing a changefeed subscription failed: %s", e)
        self._live = self._query_live = None

    async def catch_up(self) -> None:
        """Read every feed until nothing new is left. Callers that queue up share one read: a
        catch-up that began after a call was made covers it (a registration uses this to see
        every commit made before it, `ssp.hub.registry`)."""
        asked = time.monotonic()
        async with self._lock:
            if self._started >= asked:
                return
            self._started = time.monotonic()
            while await self.round():
                pass

    async def round(self) -> bool:
        """One round of the database's feed; True when more is waiting."""
        cursor = self.state.cursor
        tables = list(cursor.cursors)
        rnd = await cursor.read(self.state.db, tables, sweeps=False)
        self._sweep_owed = True
        if rnd.oversized:
            self.oversized += len(rnd.oversized)
        requests = await self._apply(rnd.sets)
        # Only now: a round that failed above is read again from the same position.
        cursor.advance(rnd, [t for t in tables if t in cursor.cursors])
        self._seen_requests(requests)
        return rnd.more

    async def _apply(self, sets: list[tuple[int, str, dict[str, Any]]]
                     ) -> list[tuple[str, Any]]:
        """Submit the row changes of `sets` (in their order) and unregister the views whose
        `_00_query` row they delete; returns the request rows they hold (`_seen_requests`,
        after the cursor moved)."""
        events: list[Event] = []
        deletes: list[tuple[str, int]] = []
        requests: list[tuple[str, Any]] = []
        for vs, table, s in sets:
            for ch in s.get("changes") or []:
                ev = feed_change(table, ch)
                if ev is None:
                    continue
                if table == QUERY_TABLE:
                    if ev[1] == "DELETE":
                        deletes.append((view_id_of(parse_record_id(ev[2])), vs >> 16))
                    elif self.requests is not None:
                        requests.append((view_id_of(parse_record_id(ev[2])), ev[3]))
                    continue
                events.append(ev)
        if events:
            await self.sequencer.submit(events)
        for vid, at_ms in deletes:
            if vid in self.state.views:
                await self.views.unregister(vid, deleted_at_ms=at_ms)
        return requests

    def _seen_requests(self, requests: list[tuple[str, Any]]) -> None:
        if self.requests is not None:
            for vid, row in requests:  # each reads its row again first (dbclient.viewrows)
                self.requests.seen(vid, row)
