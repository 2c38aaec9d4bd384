"""The workflow engine: the one owner of the schedule clock and of every run's state.

It lives in the scheduler process (one per cluster), works only through the database and the
job plane, and keeps in memory only what is active (running runs, running or queued fires,
schedules), which it rebuilds from the database at start and after any database error
(`_recover`). Everything it decides is written before it is believed:

* a decision is a *unit*: the statements that record it, and what memory becomes once they
  committed. Units are committed in transactions of up to `BATCH_STATEMENTS` statements (a
  batch that fails is retried unit by unit, so one refused job row fails only its own step);
* a fire is one unit: the schedule run (id `<name>:<due ms>`), its run and steps or its job,
  and the schedule's cursor (`last_due_at`) together, so a crash leaves a fire either wholly
  recorded or not at all, and the deterministic id makes a second recording fail;
* a step starts in one unit: the step row `running` with its job id and `started_at`, and the
  job row itself (id `<table>:wf_<run key>_<step>[_r<n>]`, created with CREATE: never twice);
* an ending (run, step, fire) is one unit with its rollup increment and the schedule's
  `last_run_*` fields, so a tally is never lost or doubled.

Jobs run as ordinary outbox rows on the SSPs. The engine asks an SSP to admit a step's table
at once (the job plane's dispatch) and reads the job rows every `SVC_WORKFLOW_POLL_MS`, and
at once when an SSP posts `/job/result` for one of them (a hook on the job plane).

One loop (`_main`) does everything in order: definitions, the clock, the job rows, the
consequences (`_settle`: rounds of units until nothing is left to decide). Operator actions
take the same lock.

The engine is one object over one state, its jobs in modules of their own (mixins): memory
(`state`), definitions and recovery (`loading`), committing units (`commits`), following job
rows and the job plane calls (`following`), the run state machine (`runstate`), the schedule
clock and fires (`firing`), operator actions (`actions`). This module keeps the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from dbclient import Database, DbError
from dbclient.tasks import cancel_and_wait
from ipc.backoff import delay
from project.workflows import Workflow
from scheduler.workflows.actions import OperatorActions
from scheduler.workflows.commits import Commits
from scheduler.workflows.config import WorkflowConfig
from scheduler.workflows.firing import Firing
from scheduler.workflows.following import Following
from scheduler.workflows.loading import Loading
from scheduler.workflows.runstate import RunStates
from scheduler.workflows.state import Fire, Run, Sched
from scheduler.workflows.tables import schema_version

log = logging.getLogger("scheduler.workflows")

__all__ = ["WorkflowEngine"]

ROUNDS_MAX = 10_000  # a bug must not spin the loop forever
# Cron work done ahead (Firing._plan_ahead) only when this much idle time is left, and it
# stops this long before the next due time.
AHEAD_MIN_IDLE_SECS = 0.2
AHEAD_MARGIN_SECS = 0.1


class WorkflowEngine(OperatorActions, Loading, Commits, Following, RunStates, Firing):
    """See the module docstring. `job_plane` gives the scheduler's job plane (or None),
    `ready` whether the scheduler is ready; `now` is the clock (tests may inject one)."""

    def __init__(self, db: Database, cfg: WorkflowConfig, *,
                 job_plane: Callable[[], Any] = lambda: None,
                 ready: Callable[[], bool] = lambda: True, incidents: Any = None,
                 ssps_ready: Callable[[], bool] = lambda: True,
                 now: Callable[[], datetime] | None = None) -> None:
        self.db = db
        self.cfg = cfg
        self._job_plane = job_plane
        self._ready = ready
        self._ssps_ready = ssps_ready
        # since when at least one SSP has been ready without a break (None: none is): a job
        # counts as unclaimed only for that time (a scheduler restart, an SSP re-bootstrap
        # must not make a pending job `never_dispatched`)
        self._ssps_since: datetime | None = None
        self.incidents = incidents
        self.now = now or (lambda: datetime.now(UTC))
        self.workflows: dict[str, tuple[Workflow | None, str | None, str]] = {}
        self.schedules: dict[str, Sched] = {}
        self.runs: dict[str, Run] = {}
        self.fires: dict[str, Fire] = {}
        self.lock = asyncio.Lock()
        self.state = "starting"  # starting | no_schema | ready | disabled
        self.version: int | None = None
        self.change_hooks: list[Callable[[], None]] = []
        self.run_end_hooks: list[Callable[[str, str, dict[str, Any] | None], None]] = []
        self.stats = {"fires": 0, "skipped_fires": 0, "runs_started": 0, "steps_started": 0,
                      "runs_ended": 0, "passes": 0, "resyncs": 0}
        self._wake = asyncio.Event()
        self._resync = True
        self._recovering = False
        self._task: asyncio.Task[None] | None = None
        self._bg: set[asyncio.Task[Any]] = set()
        self._poking: dict[str, bool] = {}
        self._defs_seen: tuple[Any, ...] | None = None
        self._next_defs = 0.0
        self._next_prune = time.monotonic() + 60
        self._warned_schema = False
        self._resyncs_in_row = 0
        self._by_schedule: dict[str, list[Fire]] = {}
        self._dirty: set[str] = set()  # jobs an SSP reported terminal since the last read
        self._last_full = 0.0

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if not self.cfg.enabled:
            self.state = "disabled"
            return
        self._task = asyncio.get_running_loop().create_task(self._main(), name="workflows")

    async def stop(self) -> None:
        # the loop's wake wait (wait_for) may lose a cancel (dbclient.tasks)
        await cancel_and_wait(*(t for t in [self._task, *self._bg] if t is not None))

    def wake(self) -> None:
        self._wake.set()

    def job_result(self, job_id: str, status: str) -> None:
        """Hook on the job plane's `/job/result`: a followed job moved, read it now (only
        the reported ones: every followed job is read each `SVC_WORKFLOW_POLL_MS`)."""
        if status in ("completed", "failed") and (self.runs or self.fires):
            self._dirty.add(job_id)
            self._wake.set()

    def _changed(self) -> None:
        for fn in list(self.change_hooks):
            try:
                fn()
            except Exception:
                log.exception("workflow change hook failed")

    async def _main(self) -> None:
        while not self._ready():
            await asyncio.sleep(0.2)
        while True:
            try:
                if time.monotonic() >= self._next_defs:
                    self._next_defs = time.monotonic() + self.cfg.definitions_poll_secs
                    self.version = await schema_version(self.db)
                    if self.version is None:
                        self.state = "no_schema"
                        if not self._warned_schema:
                            log.warning("workflows: no workflow tables in the database yet "
                                        "(`svc schema apply`, `svc workflows apply` or `svc "
                                        "migrate` installs them); schedules are idle")
                            self._warned_schema = True
                        await self._sleep(self.cfg.definitions_poll_secs)
                        continue
                    await self._reload_definitions()
                if self._resync:
                    if self._resyncs_in_row:
                        # something keeps failing: do not spin on it
                        await self._sleep(delay(self._resyncs_in_row + 1, 0.2, cap=5.0))
                    self._resyncs_in_row += 1
                    await self._recover()
                await self._pass()
                if not self._resync:
                    self._resyncs_in_row = 0
                if time.monotonic() >= self._next_prune:
                    self._next_prune = time.monotonic() + 3600
                    await self._prune()
            except DbError as e:
                log.warning("workflows: database error (%s); state is read again", e)
                self._resync = True
                await self._sleep(1.0)
                continue
            except Exception:
                log.exception("workflows: pass failed; state is read again")
                self._resync = True
                await self._sleep(1.0)
                continue
            idle = self._idle_secs()
            if idle > AHEAD_MIN_IDLE_SECS:
                await self._plan_ahead(time.monotonic() + idle - AHEAD_MARGIN_SECS)
                idle = self._idle_secs()
            await self._sleep(idle)

    def _idle_secs(self) -> float:
        now = self.now()
        wait = float(self.cfg.definitions_poll_secs)
        if self._following():
            wait = min(wait, self.cfg.poll_ms / 1000)
        for s in self.schedules.values():
            if not s.active:
                continue
            if s.next_due is not None:
                wait = min(wait, (s.next_due - now).total_seconds())
            if s.trigger_at is not None or s.pending or s.missed:
                wait = 0.0
        for r in self.runs.values():
            if r.deadline is not None:
                wait = min(wait, (r.deadline - now).total_seconds())
        return max(0.0, wait)

    async def _sleep(self, secs: float) -> None:
        if secs > 0:
            try:
                await asyncio.wait_for(self._wake.wait(), secs)
            except TimeoutError:
                pass
        self._wake.clear()

    def _spawn(self, coro: Awaitable[Any], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    # ------------------------------------------------------------------ the pass
    async def _pass(self) -> None:
        async with self.lock:
            self.stats["passes"] += 1
            await self._observe(recovery=False)
            await self._settle()

    async def _settle(self) -> None:
        """Rounds of decisions until none is left (a fire makes a run, which makes steps
        ready, ...)."""
        for _ in range(ROUNDS_MAX):
            if self._resync:
                return
            now = self.now()
            self._by_schedule = self._fires_by_schedule()
            t0 = time.perf_counter()
            units = self._schedule_units(now) + self._run_units(now) + self._queue_units(now)
            if not units:
                return
            t1 = time.perf_counter()
            await self._commit(units)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("workflows: %d units (%d statements) decided in %.1f ms, committed "
                          "in %.1f ms", len(units), sum(len(u.statements) for u in units),
                          (t1 - t0) * 1000, (time.perf_counter() - t1) * 1000)
            self._changed()
        log.error("workflows: decisions did not settle in %d rounds", ROUNDS_MAX)

    # ------------------------------------------------------------------ retention
    async def _prune(self) -> None:
        cutoff = self.now() - timedelta(days=self.cfg.retention_days)
        n = 0
        while True:
            old = await self._select(
                "SELECT id FROM _00_workflow_run WHERE status IN ['completed', 'failed', "
                "'killed'] AND finished_at < $t LIMIT 500", {"t": cutoff})
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
