"""Settling: rounds of decisions until none is left (a fire makes a run, which makes steps
ready, ...). Each round decides against memory as it is (the schedule clock's fires, the run
state machine's moves, queued fires to start) and commits the units together; memory changes
only as units commit. The loop's pass and every operator action end with it."""

from __future__ import annotations

import logging
import time

from scheduler.workflows.commits import Committer
from scheduler.workflows.firing import Firing
from scheduler.workflows.runstate import RunStates
from scheduler.workflows.state import Memory

log = logging.getLogger("scheduler.workflows")

__all__ = ["ROUNDS_MAX", "Settler"]

ROUNDS_MAX = 10_000  # a bug must not spin the loop forever


class Settler:
    def __init__(self, memory: Memory, committer: Committer, firing: Firing,
                 runstates: RunStates) -> None:
        self.memory = memory
        self.committer = committer
        self.firing = firing
        self.runstates = runstates

    async def settle(self) -> None:
        """Rounds of decisions until none is left; the caller holds the memory's lock."""
        mem = self.memory
        for _ in range(ROUNDS_MAX):
            if mem.resync:
                return
            now = mem.now()
            self.firing.index_fires()
            t0 = time.perf_counter()
            units = (self.firing.schedule_units(now) + self.runstates.run_units(now)
                     + self.firing.queue_units(now))
            if not units:
                return
            t1 = time.perf_counter()
            await self.committer.commit(units)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("workflows: %d units (%d statements) decided in %.1f ms, committed "
                          "in %.1f ms", len(units), sum(len(u.statements) for u in units),
                          (t1 - t0) * 1000, (time.perf_counter() - t1) * 1000)
            mem.changed()
        log.error("workflows: decisions did not settle in %d rounds", ROUNDS_MAX)
