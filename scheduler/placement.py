"""View placement: which ready SSP holds a view (least loaded first), forwarding registrations
and unregistrations, re-sending tracked views and placing unassigned ones (see
`scheduler.core`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import aiohttp

from engine.jsonvalues import json_default
from scheduler.entries import (
    Reply,
    SspEntry,
    SspState,
)
from scheduler.views import DEFAULT_MEMORY_LIMIT_MB, Candidate, rank_candidates

log = logging.getLogger("scheduler")


# A mixin of `scheduler.core.Scheduler`, not a component: the listener, the admin plane and
# the tests use one Scheduler object (`s.entries`, `s.flag_ssp(...)`, `s.health()`), and these
# methods work on the state it initialises (`Scheduler.__init__`). The split keeps each job in
# its own module; making them components would change every caller for no behaviour.
class Placement:
    """Places views on SSPs."""

    # ------------------------------------------------------------------ views
    def ready_ids(self) -> list[str]:
        # A Lagging SSP still holds its views and receives every event: it stays a candidate.
        return [i for i, e in self.entries.items()
                if e.state in (SspState.READY, SspState.LAGGING) and e.flagged is None]

    def _ranked(self, exclude: Iterable[str] = ()) -> list[str]:
        skip = set(exclude)
        counts = self.tracker.counts()
        cands = []
        for i in self.ready_ids():
            if i in skip:
                continue
            e = self.entries[i]
            limit = e.mem_limit()
            cands.append(Candidate(i, counts.get(i, 0), e.cpu(), e.mem(),
                                   DEFAULT_MEMORY_LIMIT_MB if limit is None else limit))
        return rank_candidates(self.cfg.load_balance, cands, self._rr_turn)

    async def _forward(self, ssp_id: str, path: str, body: Mapping[str, Any]
                       ) -> tuple[int, bytes, str] | None:
        """POST to an SSP; (status, body, content type) or None when unreachable."""
        e = self.entries.get(ssp_id)
        if e is None or self._session is None:
            return None
        try:
            async with self._session.post(
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
        order = self._ranked()
        tracked = self.tracker.get(view_id)
        if tracked is not None and tracked["ssp_id"] in order:
            order.remove(tracked["ssp_id"])
            order.insert(0, tracked["ssp_id"])
        failures: list[str] = []
        for ssp_id in order:
            res = await self._forward(ssp_id, "/view/register", body)
            if res is None or res[0] >= 500:
                failures.append(f"{ssp_id}: " + ("unreachable" if res is None else
                                f"{res[0]} {res[1][:200].decode(errors='replace')}"))
                continue
            status, raw, ctype = res
            if status == 200:
                if tracked is None or tracked["ssp_id"] != ssp_id:
                    self._rr_turn += 1  # round robin advances on a new placement only
                entry = self.tracker.set(view_id, ssp_id, body)
                return Reply(200, {"query_id": view_id, "ssp_id": ssp_id,
                                   "assigned_at": entry["assigned_at"]})
            return Reply(status, raw=raw, content_type=ctype)
        log.warning("view %s: no SSP accepted it (%s)", view_id, "; ".join(failures))
        return Reply(503, {"error": "no_ssp",
                           "message": "no SSP accepted the view: " + "; ".join(failures)})

    def unregister_view(self, view_id: str) -> None:
        """Forget a view now; tell its SSP in the background."""
        entry = self.tracker.pop(view_id)
        if entry is not None and entry["ssp_id"] in self.entries:
            self._spawn(self._forward(entry["ssp_id"], "/view/unregister", {"id": view_id}),
                        f"unregister-{view_id}")

    async def _resend_views(self, e: SspEntry) -> None:
        for view_id in self.tracker.of_ssp(e.ssp_id):
            entry = self.tracker.get(view_id)
            if entry is None:
                continue
            res = await self._forward(e.ssp_id, "/view/register", entry["body"])
            if res is not None and 400 <= res[0] < 500:
                log.warning("SSP %s refused tracked view %s (%d); dropped", e.ssp_id,
                            view_id, res[0])
                self.tracker.pop(view_id)
        await self._place_unassigned()

    async def _place_unassigned(self) -> None:
        for view_id in self.tracker.of_ssp(None):
            entry = self.tracker.get(view_id)
            if entry is None or entry["ssp_id"] is not None:
                continue
            for ssp_id in self._ranked():
                res = await self._forward(ssp_id, "/view/register", entry["body"])
                if res is None or res[0] >= 500:
                    continue
                if res[0] == 200:
                    self._rr_turn += 1
                    self.tracker.set(view_id, ssp_id, entry["body"])
                    log.info("view %s placed on SSP %s", view_id, ssp_id)
                else:
                    log.warning("SSP %s refused view %s on reassignment (%d); dropped",
                                ssp_id, view_id, res[0])
                    self.tracker.pop(view_id)
                break
