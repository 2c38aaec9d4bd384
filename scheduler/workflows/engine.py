"""The workflow engine: the one owner of the schedule clock and of every run's state.

It lives in the scheduler process (one per cluster), works only through the database and the
job plane, and keeps in memory only what is active (running runs, running or queued fires,
schedules), which it rebuilds from the database at start and after any database error
(`Loading.recover`). Everything it decides is written before it is believed:

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

One loop (`loop`) does everything in order: definitions, the clock, the job rows, the
consequences (`settle`: rounds of units until nothing is left to decide). Operator actions
take the same lock.

This module is the engine's composition root: it builds the parts and hands each the few
others it calls, lowest first, so that no part calls back up:

* `Memory` (`state`): what the engine knows, its lock, wake and hooks; every part shares it;
* `Committer` (`commits`): units to transactions; `JobCalls` (`jobcalls`): pokes and kills
  through the job plane; `Quarantines` (`quarantine`): the quarantine incidents;
* `Endings` (`endings`): step and fire endings, which the three parts above them all record;
* `RunStates` (`runstate`): the run state machine and a new run's rows;
* `Firing` (`firing`): the schedule clock and fires (a workflow fire starts a run);
* `Following` (`following`): job rows to endings; `Loading` (`loading`): definitions and
  recovery (which follows every job once);
* `Settler` (`settle`): rounds of decisions; `OperatorActions` (`actions`); `Loop` (`loop`).

`WorkflowEngine` is what the scheduler and the admin plane hold: the lifecycle, the job
plane's result hook, the operator actions, and the memory they read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from dbclient import Database
from dbclient.tasks import cancel_and_wait
from project.workflows import Workflow
from scheduler.workflows.actions import OperatorActions
from scheduler.workflows.commits import Committer
from scheduler.workflows.config import WorkflowConfig
from scheduler.workflows.endings import Endings
from scheduler.workflows.firing import Firing
from scheduler.workflows.following import Following
from scheduler.workflows.jobcalls import JobCalls
from scheduler.workflows.loading import Loading
from scheduler.workflows.loop import Loop
from scheduler.workflows.quarantine import Quarantines
from scheduler.workflows.runstate import RunStates
from scheduler.workflows.settle import Settler
from scheduler.workflows.state import Fire, Memory, Run, Sched

__all__ = ["WorkflowEngine"]


class WorkflowEngine:
    """See the module docstring. `job_plane` gives the scheduler's job plane (or None),
    `ready` whether the scheduler is ready, `ssps_ready` whether some SSP is; `incidents` is
    the admin plane's incident store (or None); `now` is the clock (tests may inject one)."""

    def __init__(self, db: Database, cfg: WorkflowConfig, *,
                 job_plane: Callable[[], Any] = lambda: None,
                 ready: Callable[[], bool] = lambda: True, incidents: Any = None,
                 ssps_ready: Callable[[], bool] = lambda: True,
                 now: Callable[[], datetime] | None = None) -> None:
        self.db = db
        self.cfg = cfg
        self.memory = memory = Memory(now or (lambda: datetime.now(UTC)))
        committer = Committer(db, memory)
        self.jobcalls = jobcalls = JobCalls(db, job_plane, memory.wake)
        quarantines = Quarantines(incidents)
        endings = Endings(memory, quarantines)
        runstates = RunStates(memory, committer, endings, jobcalls)
        self.firing = firing = Firing(memory, committer, endings, runstates, jobcalls)
        self.following = following = Following(db, cfg, memory, committer, endings, jobcalls,
                                               ssps_ready)
        loading = Loading(db, memory, following, jobcalls, quarantines)
        settler = Settler(memory, committer, firing, runstates)
        self.actions = actions = OperatorActions(db, memory, loading, runstates, settler,
                                                 jobcalls, quarantines)
        self.loop = Loop(db, cfg, memory, loading, following, firing, settler, ready)
        self._task: asyncio.Task[None] | None = None
        # the admin API's actions, as the engine's own verbs
        self.cancel = actions.cancel
        self.rerun = actions.rerun
        self.retry = actions.retry
        self.pause = actions.pause
        self.trigger = actions.trigger
        self.release = actions.release
        self.schedule_state = actions.schedule_state

    # ------------------------------------------------------------------ what is read
    @property
    def state(self) -> str:
        return self.memory.state

    @property
    def workflows(self) -> dict[str, tuple[Workflow | None, str | None, str]]:
        return self.memory.workflows

    @property
    def schedules(self) -> dict[str, Sched]:
        return self.memory.schedules

    @property
    def runs(self) -> dict[str, Run]:
        return self.memory.runs

    @property
    def fires(self) -> dict[str, Fire]:
        return self.memory.fires

    @property
    def stats(self) -> dict[str, int]:
        return self.memory.stats

    @property
    def change_hooks(self) -> list[Callable[[], None]]:
        return self.memory.change_hooks

    @property
    def run_end_hooks(self) -> list[Callable[[str, str, dict[str, Any] | None], None]]:
        return self.memory.run_end_hooks

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if not self.cfg.enabled:
            self.memory.state = "disabled"
            return
        self._task = asyncio.get_running_loop().create_task(self.loop.run(), name="workflows")

    async def stop(self) -> None:
        # the loop's wake wait (wait_for) may lose a cancel (dbclient.tasks)
        await cancel_and_wait(*(t for t in [self._task, *self.jobcalls.tasks()]
                                if t is not None))

    def wake(self) -> None:
        self.memory.wake.set()

    def job_result(self, job_id: str, status: str) -> None:
        """Hook on the job plane's `/job/result`: a followed job moved, read it now (only
        the reported ones: every followed job is read each `SVC_WORKFLOW_POLL_MS`)."""
        self.following.reported(job_id, status)
