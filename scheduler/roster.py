"""The end of an SSP entry: flagged for re-bootstrap, dropped, removed (its views placed on the
others), and the observers told of each (`ssp_events`: the admin plane's incidents).

Below the pool, delivery and placement's callers: delivery flags an SSP whose buffer overflows,
the pool flags and removes on its timers, the admin plane flags on an operator's request."""

from __future__ import annotations

import logging
import time

from scheduler.entries import SspEntry
from scheduler.placement import Placement
from scheduler.state import CoordinatorState

log = logging.getLogger("scheduler")


class Roster:
    """Flags, drops and removes SSP entries."""

    def __init__(self, s: CoordinatorState, placement: Placement) -> None:
        self.s = s
        self.placement = placement

    def release_freeze(self, e: SspEntry) -> None:
        if e.holds_freeze:
            e.holds_freeze = False
            self.s.replica.unfreeze()

    def drop(self, e: SspEntry) -> None:
        self.release_freeze(e)
        if e.sender is not None:
            e.sender.cancel()
        e.queue.clear()
        if self.s.entries.get(e.ssp_id) is e:
            del self.s.entries[e.ssp_id]

    def flag_ssp(self, ssp_id: str, reason: str, clean: bool) -> bool:
        """Mark an SSP for re-bootstrap: next heartbeat answers 409 ``{reason, clean}``.
        Its buffer is cleared and its freeze released. False when unknown."""
        e = self.s.entries.get(ssp_id)
        if e is None:
            return False
        if e.flagged is None:
            log.warning("SSP %s flagged for re-bootstrap: %s", ssp_id, reason)
            e.flagged = (reason, clean)
            self.note(ssp_id, "flagged", reason)
            if e.last_heartbeat is None:
                e.last_heartbeat = time.monotonic()
                e.reap_grace = float(self.s.cfg.bootstrap_timeout_secs)
        e.queue.clear()
        self.release_freeze(e)
        if e.sender is not None:
            e.sender.cancel()
        return True

    def remove_ssp(self, ssp_id: str, reason: str) -> None:
        """Remove an SSP and move its views to the ready ones."""
        e = self.s.entries.get(ssp_id)
        if e is None:
            return
        log.warning("SSP %s removed: %s", ssp_id, reason)
        self.drop(e)
        self.note(ssp_id, "removed", reason)
        moved = self.s.tracker.unassign(ssp_id)
        if moved:
            self.s.spawn(self.placement.place_unassigned(), f"reassign-{ssp_id}")

    def note(self, ssp_id: str, what: str, reason: str) -> None:
        for fn in list(self.s.ssp_events):
            try:
                fn(ssp_id, what, reason)
            except Exception:
                log.exception("ssp event observer failed")
