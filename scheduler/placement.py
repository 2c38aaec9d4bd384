"""View placement: which ready SSP holds a view (least loaded first), forwarding registrations
and unregistrations, re-sending tracked views and placing unassigned ones (see
`scheduler.core`)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import aiohttp

from engine.jsonvalues import json_default
from scheduler.entries import (
    Reply,
    SspEntry,
    SspState,
)
from scheduler.state import CoordinatorState
from scheduler.views import DEFAULT_MEMORY_LIMIT_MB, Candidate, rank_candidates

log = logging.getLogger("scheduler")

# A registration waits at most this long for its SSP to have been sent every event ingested
# before it (`Placement.sent_through`); a lagging SSP still gets the view after it.
REGISTER_SYNC_SECS = 10.0
# Views re-sent to an SSP at once when it becomes Ready (`Placement.resend_views`).
RESEND_AT_ONCE = 8
# A view an SSP could not take now (unreachable, 5xx: the database busy, a write conflict) is
# sent again after a pause that grows from the first to the last value here, for as long as
# the view is tracked and an SSP is there to take it (`Placement.retry_later`).
RETRY_FIRST_SECS = 0.5
RETRY_MAX_SECS = 10.0


class Placement:
    """Places views on SSPs: the ready ones ranked by the configured strategy, the tracker
    keeping which SSP holds which view."""

    def __init__(self, s: CoordinatorState,
                 sync_sources: Callable[[], Awaitable[None]]) -> None:
        self.s = s
        # Brings every row the database holds now into the WAL (`Scheduler.sync_sources`).
        self.sync_sources = sync_sources
        # views an SSP could not take yet: view id -> the SSP to send it to again (None: any
        # ready one); one background task works through them (`retry_later`)
        self.retrying: dict[str, str | None] = {}
        self._retry_task = False

    def ready_ids(self) -> list[str]:
        # A Lagging SSP still holds its views and receives every event: it stays a candidate.
        return [i for i, e in self.s.entries.items()
                if e.state in (SspState.READY, SspState.LAGGING) and e.flagged is None]

    def ranked(self, exclude: Iterable[str] = ()) -> list[str]:
        skip = set(exclude)
        counts = self.s.tracker.counts()
        cands = []
        for i in self.ready_ids():
            if i in skip:
                continue
            e = self.s.entries[i]
            limit = e.mem_limit()
            cands.append(Candidate(i, counts.get(i, 0), e.cpu(), e.mem(),
                                   DEFAULT_MEMORY_LIMIT_MB if limit is None else limit))
        return rank_candidates(self.s.cfg.load_balance, cands, self.s.rr_turn)

    async def forward(self, ssp_id: str, path: str, body: Mapping[str, Any]
                       ) -> tuple[int, bytes, str] | None:
        """POST to an SSP; (status, body, content type) or None when unreachable."""
        e = self.s.entries.get(ssp_id)
        if e is None or self.s.session is None:
            return None
        try:
            async with self.s.session.post(
                    f"{e.url}{path}", data=json.dumps(body, default=json_default).encode(),
                    headers={**e.auth, "Content-Type": "application/json"}) as r:
                return r.status, await r.read(), r.headers.get("Content-Type",
                                                                "application/json")
        except (aiohttp.ClientError, TimeoutError) as err:
            log.warning("SSP %s unreachable for %s (%s)", ssp_id, path, type(err).__name__)
            return None

    async def register_view(self, view_id: str, body: Mapping[str, Any]) -> Reply:
        """``POST /view/register`` (body validated; ``view_id`` normalised)."""
        if not self.ready_ids():
            return Reply(503, {"error": "no_ssp", "message": "no SSP is ready"})
        order = self.ranked()
        tracked = self.s.tracker.get(view_id)
        if tracked is not None and tracked["ssp_id"] in order:
            order.remove(tracked["ssp_id"])
            order.insert(0, tracked["ssp_id"])
        failures: list[str] = []
        # The view's initial set must hold every row the database holds now (a table hooked
        # a moment ago included): bring them into the WAL, then wait until the SSP was sent
        # all of it before it computes the set.
        await self.sync_sources()
        target = self.s.wal.last_seq
        for ssp_id in order:
            await self.sent_through(ssp_id, target)
            res = await self.forward(ssp_id, "/view/register", body)
            if res is None or res[0] >= 500:
                failures.append(f"{ssp_id}: " + ("unreachable" if res is None else
                                f"{res[0]} {res[1][:200].decode(errors='replace')}"))
                continue
            status, raw, ctype = res
            if status == 200:
                if tracked is None or tracked["ssp_id"] != ssp_id:
                    self.s.rr_turn += 1  # round robin advances on a new placement only
                entry = self.s.tracker.set(view_id, ssp_id, body)
                return Reply(200, {"query_id": view_id, "ssp_id": ssp_id,
                                   "assigned_at": entry["assigned_at"]})
            return Reply(status, raw=raw, content_type=ctype)
        log.warning("view %s: no SSP accepted it (%s)", view_id, "; ".join(failures))
        return Reply(503, {"error": "no_ssp",
                           "message": "no SSP accepted the view: " + "; ".join(failures)})

    async def sent_through(self, ssp_id: str, seq: int) -> None:
        """Wait until `ssp_id` answered 200 for every event up to `seq` (its in-memory step
        is done), at most REGISTER_SYNC_SECS: a lagging SSP gets the view anyway, and the
        events it has not applied yet reach the view as changes."""
        deadline = time.monotonic() + REGISTER_SYNC_SECS
        while True:
            e = self.s.entries.get(ssp_id)
            if e is None or e.flagged is not None:
                return
            if self.s.next_pub > seq and (not e.queue or e.queue[0].seq > seq):
                return
            if time.monotonic() >= deadline:
                log.warning("SSP %s has not applied events through seq %d after %.0fs; "
                            "registering the view there anyway", ssp_id, seq,
                            REGISTER_SYNC_SECS)
                return
            await asyncio.sleep(0.005)

    def unregister_view(self, view_id: str) -> None:
        """Forget a view now; tell its SSP in the background."""
        entry = self.s.tracker.pop(view_id)
        if entry is not None and entry["ssp_id"] in self.s.entries:
            self.s.spawn(self.forward(entry["ssp_id"], "/view/unregister", {"id": view_id}),
                        f"unregister-{view_id}")

    async def resend_views(self, e: SspEntry) -> None:
        """Send an SSP that became Ready every view the tracker assigns to it, RESEND_AT_ONCE
        at a time (each is a registration of its own on the SSP, mostly waiting on the
        database: one after the other, 1,000 views took ~35 s), then place unplaced ones."""
        gate = asyncio.Semaphore(RESEND_AT_ONCE)

        async def one(view_id: str) -> None:
            async with gate:
                await self.resend(e.ssp_id, view_id)

        await asyncio.gather(*(one(v) for v in self.s.tracker.of_ssp(e.ssp_id)))
        await self.place_unassigned()

    async def resend(self, ssp_id: str, view_id: str) -> bool:
        """Send tracked view `view_id` to `ssp_id`, which the tracker says holds it; False
        when the SSP could not take it now (it is sent again later: `retry_later`)."""
        entry = self.s.tracker.get(view_id)
        if entry is None or entry["ssp_id"] != ssp_id:
            return True  # unregistered or moved meanwhile
        res = await self.forward(ssp_id, "/view/register", entry["body"])
        if res is None or res[0] >= 500:
            self.retry_later(view_id, ssp_id)
            return False
        if 400 <= res[0] < 500:
            log.warning("SSP %s refused tracked view %s (%d); dropped", ssp_id, view_id,
                        res[0])
            self.s.tracker.pop(view_id)
        return True

    async def place_unassigned(self) -> None:
        for view_id in self.s.tracker.of_ssp(None):
            await self.place(view_id)

    async def place(self, view_id: str) -> bool:
        """Place unassigned view `view_id` on the best ready SSP that takes it; False when
        none could take it now (it is placed again later: `retry_later`)."""
        entry = self.s.tracker.get(view_id)
        if entry is None or entry["ssp_id"] is not None:
            return True
        for ssp_id in self.ranked():
            res = await self.forward(ssp_id, "/view/register", entry["body"])
            if res is None or res[0] >= 500:
                continue
            if res[0] == 200:
                self.s.rr_turn += 1
                self.s.tracker.set(view_id, ssp_id, entry["body"])
                log.info("view %s placed on SSP %s", view_id, ssp_id)
            else:
                log.warning("SSP %s refused view %s on reassignment (%d); dropped",
                            ssp_id, view_id, res[0])
                self.s.tracker.pop(view_id)
            return True
        if self.ready_ids():
            self.retry_later(view_id, None)
        return False  # no SSP is ready: the next one that becomes Ready places it

    def retry_later(self, view_id: str, ssp_id: str | None) -> None:
        """Send `view_id` again later (to `ssp_id`, or placed anew when None). A view whose
        re-registration failed on a busy database was left tracked on an SSP that did not
        hold it, and no edge of it was written again until an operator stepped in."""
        self.retrying[view_id] = ssp_id
        if not self._retry_task:
            self._retry_task = True
            self.s.spawn(self._retry_loop(), "views-retry")

    async def _retry_loop(self) -> None:
        delay = RETRY_FIRST_SECS
        try:
            while self.retrying:
                await asyncio.sleep(delay)
                batch, self.retrying = self.retrying, {}
                log.info("sending %d view(s) again that no SSP could take before", len(batch))
                done = True
                for view_id, ssp_id in batch.items():
                    entry = self.s.tracker.get(view_id)
                    if entry is None:
                        continue  # unregistered meanwhile
                    if entry["ssp_id"] is None:
                        done = await self.place(view_id) and done
                    elif ssp_id is not None and entry["ssp_id"] == ssp_id:
                        done = await self.resend(ssp_id, view_id) and done
                    # else: moved to another SSP meanwhile, which was sent it
                delay = RETRY_FIRST_SECS if done else min(delay * 2, RETRY_MAX_SECS)
        finally:
            self._retry_task = False
