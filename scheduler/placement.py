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


class Placement:
    """Places views on SSPs: the ready ones ranked by the configured strategy, the tracker
    keeping which SSP holds which view."""

    def __init__(self, s: CoordinatorState,
                 sync_sources: Callable[[], Awaitable[None]]) -> None:
        self.s = s
        # Brings every row the database holds now into the WAL (`Scheduler.sync_sources`).
        self.sync_sources = sync_sources

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
                entry = self.s.tracker.get(view_id)
                if entry is None or entry["ssp_id"] != e.ssp_id:
                    return  # unregistered or moved meanwhile
                res = await self.forward(e.ssp_id, "/view/register", entry["body"])
                if res is not None and 400 <= res[0] < 500:
                    log.warning("SSP %s refused tracked view %s (%d); dropped", e.ssp_id,
                                view_id, res[0])
                    self.s.tracker.pop(view_id)

        await asyncio.gather(*(one(v) for v in self.s.tracker.of_ssp(e.ssp_id)))
        await self.place_unassigned()

    async def place_unassigned(self) -> None:
        for view_id in self.s.tracker.of_ssp(None):
            entry = self.s.tracker.get(view_id)
            if entry is None or entry["ssp_id"] is not None:
                continue
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
                break
