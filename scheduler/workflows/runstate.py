"""The run state machine: steps start when every dependency completed (the step row and its
job row in one unit), a failed step dooms its dependants (`upstream_failed`), a kill or a
deadline halts the run, and a run ends once every step is terminal (with its rollup and the
owning fire)."""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from surrealdb import RecordID

from dbclient import DbQueryError
from engine.values import record_id_text
from jobs import rows
from project.workflows import (
    Workflow,
    topological_order,
)
from scheduler.workflows import errors, rollups, runs
from scheduler.workflows.commits import Committer, already_exists
from scheduler.workflows.endings import Endings
from scheduler.workflows.errors import run_error
from scheduler.workflows.ids import ms as _ms
from scheduler.workflows.ids import rid as _rid
from scheduler.workflows.ids import step_rid as _step_rid
from scheduler.workflows.jobcalls import JobCalls
from scheduler.workflows.state import Memory, Run, Step, Unit

log = logging.getLogger("scheduler.workflows")

__all__ = ["RunStates"]

_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"
_run_seq = itertools.count()


def _b36(n: int) -> str:
    out = ""
    while n:
        n, r = divmod(n, 36)
        out = _B36[r] + out
    return out or "0"


def _run_key(now: datetime) -> str:
    """A short unique run key: base-36 milliseconds, a per-process sequence (a thousand fires
    share one `now`: random bits alone would collide) and 8 random bits."""
    return f"{_b36(_ms(now))}{_b36(next(_run_seq) % 46656).rjust(3, '0')}{secrets.token_hex(1)}"


class RunStates:
    """Units that move runs and steps along; a new run's rows (`new_run`)."""

    def __init__(self, memory: Memory, committer: Committer, endings: Endings,
                 jobcalls: JobCalls) -> None:
        self.memory = memory
        self.committer = committer
        self.endings = endings
        self.jobcalls = jobcalls

    def run_units(self, now: datetime) -> list[Unit]:
        units: list[Unit] = []
        for run in list(self.memory.runs.values()):
            if run.status != "running":
                continue
            if run.deadline is not None and now >= run.deadline and not run.kill_requested:
                units.append(self._halt_unit(run, run_error(
                    errors.DEADLINE_EXCEEDED, f"the run passed its deadline of "
                    f"{run.deadline_secs:g}s", since=_ms(run.deadline))))
                continue
            doomed = runs.doomed(run.steps)
            if doomed:
                units.append(self._skip_unit(run, doomed))
            ready = [] if run.kill_requested else runs.ready(run.steps)
            for name in ready:
                units.append(self._dispatch_unit(run, run.steps[name], now))
            if not doomed and not ready:
                end = runs.outcome(run.steps, run.kill_requested)
                if end is not None:
                    units.append(self._finish_unit(run, *end))
        return units

    def _skip_unit(self, run: Run, doomed: dict[str, list[str]]) -> Unit:
        stmts: list[tuple[str, dict[str, Any] | None]] = []
        for name, blocked_by in doomed.items():
            err = run_error(errors.UPSTREAM_FAILED, f"not run: {', '.join(blocked_by)} did "
                            "not complete", blocked_by=blocked_by)
            stmts.append((("UPDATE $s SET status = 'skipped', error = $e, finished_at = "
                          "time::now() RETURN NONE"),
                          {"s": _step_rid(run.key, name), "e": err}))

        def ok() -> None:
            for name in doomed:
                run.steps[name].status = runs.SKIPPED
        return Unit(f"run {run.key}: skip {len(doomed)}", stmts, ok)

    def _dispatch_unit(self, run: Run, st: Step, now: datetime) -> Unit:
        job = RecordID(st.table, runs.job_key(run.key, st.name, st.attempt))
        step_rid = _step_rid(run.key, st.name)
        mark = (("UPDATE $s SET status = 'running', job = $j, started_at = time::now(), "
                "jobs += $j RETURN NONE"), {"s": step_rid, "j": job})
        create = ("CREATE $j CONTENT $c RETURN NONE",
                  {"j": job, "c": rows.new_row(st.spec, now, workflow_run=run.rid,
                                                    step=st.name, attempt=st.attempt)})

        def ok() -> None:
            st.status, st.job = runs.RUNNING, job
            self.memory.stats["steps_started"] += 1
            self.jobcalls.poke(job)

        async def fail(e: DbQueryError) -> None:
            if already_exists(e):
                # This attempt's job exists (a decision recorded twice): follow it, never
                # create a second one.
                await self.committer.commit_chunk([Unit(f"adopt {record_id_text(job)}", [mark], ok)])
                return
            log.warning("run %s step %s: job %s refused: %s", run.key, st.name,
                        record_id_text(job), e)
            err = run_error(errors.SPAWN_FAILED, f"the database refused the job row "
                            f"{record_id_text(job)}: {e.engine_message}"[:400],
                            job=record_id_text(job))
            await self.committer.commit_chunk(
                [self.endings.step_end_unit(run, st, runs.FAILED, err)])
        return Unit(f"start {run.key}/{st.name}", [mark, create], ok, fail)

    def _halt_unit(self, run: Run, err: dict[str, Any]) -> Unit:
        """The run ends now (deadline): running steps killed, blocked ones skipped."""
        stmts: list[tuple[str, dict[str, Any] | None]] = []
        to_kill: list[RecordID] = []
        for st in run.steps.values():
            if st.status == runs.RUNNING:
                stmts.append((("UPDATE $s SET status = 'killed', error = $e, finished_at = "
                              "time::now() RETURN NONE"),
                              {"s": _step_rid(run.key, st.name), "e": err}))
                if st.job is not None:
                    to_kill.append(st.job)
            elif st.status == runs.BLOCKED:
                stmts.append((("UPDATE $s SET status = 'skipped', error = $e, finished_at = "
                              "time::now() RETURN NONE"),
                              {"s": _step_rid(run.key, st.name), "e": run_error(
                                  errors.RUN_HALTED, "not run: the run ended first",
                                  run_error=err["code"])}))
        failed = [n for n, s in run.steps.items() if s.status in (runs.RUNNING, runs.FAILED,
                                                                  runs.KILLED)]
        u = self._finish_unit(run, "failed", failed, err)
        u.statements[:0] = stmts
        inner = u.ok

        def ok() -> None:
            for st in run.steps.values():
                if st.status == runs.RUNNING:
                    st.status = runs.KILLED
                elif st.status == runs.BLOCKED:
                    st.status = runs.SKIPPED
            if inner is not None:
                inner()
            self.jobcalls.kill(to_kill)
        u.ok = ok
        return u

    def _finish_unit(self, run: Run, status: str, failed: list[str],
                     err: dict[str, Any] | None = None) -> Unit:
        if err is None and status == "killed":
            err = run_error(errors.KILLED, "cancelled by an operator", run=record_id_text(run.rid))
        elif err is None and status == "failed":
            err = run_error(errors.STEP_FAILED, f"steps did not complete: {', '.join(failed)}"
                            if failed else "steps were skipped", failed_steps=failed)
        counts: dict[str, int] = {}
        for st in run.steps.values():
            counts[st.status] = counts.get(st.status, 0) + 1
        mem = self.memory
        now = mem.now()
        stmts: list[tuple[str, dict[str, Any] | None]] = [
            (("UPDATE $r SET status = $st, error = $e, finished_at = time::now(), "
             "step_counts = $c RETURN NONE"), {"r": run.rid, "st": status, "e": err, "c": counts}),
        ]
        fire = mem.fires.get(run.fire) if run.fire else None
        after: Callable[[], None] | None = None
        if fire is not None:
            fu = self.endings.fire_end_unit(fire, status, err)
            stmts += fu.statements
            after = fu.ok
        else:
            stmts.append(rollups.increment(run.schedule, now,
                                           "success" if status == "completed" else "failure"))

        def ok() -> None:
            run.status = status
            mem.runs.pop(run.key, None)
            mem.stats["runs_ended"] += 1
            if after is not None:
                after()
            mem.run_ended(run.key, status, err)
            log.info("run %s (%s) %s%s", run.key, run.workflow, status,
                     f": {err['code']}" if err else "")
        return Unit(f"end {run.key} {status}", stmts, ok)

    def new_run(self, name: str, wf: Workflow | None, now: datetime, *, trigger: str,
                 schedule: str | None = None, fire: str | None = None,
                 rerun_of: RecordID | None = None, dag: dict[str, Any] | None = None
                 ) -> tuple[Run, list[tuple[str, dict[str, Any] | None]], Callable[[], None]]:
        """A new run of `wf` (or of a frozen `dag`: a rerun of a workflow no longer defined,
        `wf` None): its rows, and memory once committed."""
        key = _run_key(now)
        if dag is None:
            assert wf is not None, "a run needs a workflow or a frozen DAG"
            dag = wf.model_dump(mode="json")["steps"]
        specs = dag
        order = topological_order(specs)
        deadline_secs = wf.deadline if wf is not None else None
        deadline = now + timedelta(seconds=deadline_secs) if deadline_secs else None
        run = Run(key, name, {n: Step(n, str(specs[n]["table"]), specs[n],
                                      list(specs[n].get("depends_on") or []))
                              for n in specs},
                  trigger, schedule, fire, now, deadline_secs, deadline)
        stmts: list[tuple[str, dict[str, Any] | None]] = [
            ("CREATE $r CONTENT $c RETURN NONE", {"r": run.rid, "c": {
                "workflow": name, "status": "running", "trigger": trigger,
                "schedule": schedule, "schedule_run": _rid("_00_schedule_run", fire)
                if fire else None, "rerun_of": rerun_of, "kill_requested": False,
                "created_at": now, "deadline_at": deadline, "deadline_secs": deadline_secs,
                "dag": {"steps": specs, "order": order}}}),
        ]
        for n in order:
            st = run.steps[n]
            stmts.append(("CREATE $s CONTENT $c RETURN NONE", {"s": _step_rid(key, n), "c": {
                "run": run.rid, "step": n, "table": st.table, "depends_on": st.depends_on,
                "status": runs.BLOCKED, "attempt": 0, "created_at": now, "jobs": []}}))

        def ok() -> None:
            self.memory.runs[key] = run
            self.memory.stats["runs_started"] += 1
        return run, stmts, ok
