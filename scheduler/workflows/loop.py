"""The engine's one loop: definitions, the clock, the job rows, the consequences, in order.

Each turn: the definitions when their poll is due (or the schema's absence), a recovery when
memory may be wrong (`Memory.resync`: at start and after any database error, backing off when
it keeps failing), then the pass (the job rows, then settling), retention once an hour. While
nothing is due it plans the cron ahead, then sleeps until the next due time, deadline or poll,
or a wake."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import timedelta

from dbclient import Database, DbError
from ipc.backoff import delay
from scheduler.workflows.commits import select
from scheduler.workflows.config import WorkflowConfig
from scheduler.workflows.firing import Firing
from scheduler.workflows.following import Following
from scheduler.workflows.loading import Loading
from scheduler.workflows.settle import Settler
from scheduler.workflows.state import Memory
from scheduler.workflows.tables import schema_version

log = logging.getLogger("scheduler.workflows")

__all__ = ["AHEAD_MARGIN_SECS", "AHEAD_MIN_IDLE_SECS", "Loop"]

# Cron work done ahead (Firing.plan_ahead) only when this much idle time is left, and it
# stops this long before the next due time.
AHEAD_MIN_IDLE_SECS = 0.2
AHEAD_MARGIN_SECS = 0.1


class Loop:
    """`ready` says whether the scheduler is ready (nothing is read before it is)."""

    def __init__(self, db: Database, cfg: WorkflowConfig, memory: Memory, loading: Loading,
                 following: Following, firing: Firing, settler: Settler,
                 ready: Callable[[], bool]) -> None:
        self.db = db
        self.cfg = cfg
        self.memory = memory
        self.loading = loading
        self.following = following
        self.firing = firing
        self.settler = settler
        self._ready = ready
        self._next_defs = 0.0
        self._next_prune = time.monotonic() + 60
        self._warned_schema = False
        self._resyncs_in_row = 0

    async def run(self) -> None:
        mem = self.memory
        while not self._ready():
            await asyncio.sleep(0.2)
        while True:
            try:
                if time.monotonic() >= self._next_defs:
                    self._next_defs = time.monotonic() + self.cfg.definitions_poll_secs
                    mem.version = await schema_version(self.db)
                    if mem.version is None:
                        mem.state = "no_schema"
                        if not self._warned_schema:
                            log.warning("workflows: no workflow tables in the database yet "
                                        "(`svc schema apply`, `svc workflows apply` or `svc "
                                        "migrate` installs them); schedules are idle")
                            self._warned_schema = True
                        await self._sleep(self.cfg.definitions_poll_secs)
                        continue
                    await self.loading.reload_definitions()
                if mem.resync:
                    if self._resyncs_in_row:
                        # something keeps failing: do not spin on it
                        await self._sleep(delay(self._resyncs_in_row + 1, 0.2, cap=5.0))
                    self._resyncs_in_row += 1
                    await self.loading.recover()
                await self._pass()
                if not mem.resync:
                    self._resyncs_in_row = 0
                if time.monotonic() >= self._next_prune:
                    self._next_prune = time.monotonic() + 3600
                    await self._prune()
            except DbError as e:
                log.warning("workflows: database error (%s); state is read again", e)
                mem.resync = True
                await self._sleep(1.0)
                continue
            except Exception:
                log.exception("workflows: pass failed; state is read again")
                mem.resync = True
                await self._sleep(1.0)
                continue
            idle = self._idle_secs()
            if idle > AHEAD_MIN_IDLE_SECS:
                await self.firing.plan_ahead(time.monotonic() + idle - AHEAD_MARGIN_SECS)
                idle = self._idle_secs()
            await self._sleep(idle)

    def _idle_secs(self) -> float:
        mem = self.memory
        now = mem.now()
        wait = float(self.cfg.definitions_poll_secs)
        if self.following.busy():
            wait = min(wait, self.cfg.poll_ms / 1000)
        for s in mem.schedules.values():
            if not s.active:
                continue
            if s.next_due is not None:
                wait = min(wait, (s.next_due - now).total_seconds())
            if s.trigger_at is not None or s.pending or s.missed:
                wait = 0.0
        for r in mem.runs.values():
            if r.deadline is not None:
                wait = min(wait, (r.deadline - now).total_seconds())
        return max(0.0, wait)

    async def _sleep(self, secs: float) -> None:
        wake = self.memory.wake
        if secs > 0:
            try:
                await asyncio.wait_for(wake.wait(), secs)
            except TimeoutError:
                pass
        wake.clear()

    async def _pass(self) -> None:
        async with self.memory.lock:
            self.memory.stats["passes"] += 1
            await self.following.observe(recovery=False)
            await self.settler.settle()

    async def _prune(self) -> None:
        """Retention: finished runs, fires and rollups older than `retention_days`."""
        cutoff = self.memory.now() - timedelta(days=self.cfg.retention_days)
        n = 0
        while True:
            old = await select(
                self.db, "SELECT id FROM _00_workflow_run WHERE status IN ['completed', "
                "'failed', 'killed'] AND finished_at < $t LIMIT 500", {"t": cutoff})
            if not old:
                break
            ids = [r["id"] for r in old]
            await self.db.query("DELETE _00_step_run WHERE run IN $ids RETURN NONE; "
                                "DELETE $ids RETURN NONE", {"ids": ids})
            n += len(ids)
        await self.db.query(
            "DELETE _00_schedule_run WHERE status IN ['completed', 'failed', 'killed', "
            "'skipped'] AND finished_at < $t RETURN NONE; DELETE _00_run_rollup WHERE "
            "day < $t RETURN NONE", {"t": cutoff})
        if n:
            log.info("workflows: %d finished runs older than %d days deleted", n,
                     self.cfg.retention_days)
