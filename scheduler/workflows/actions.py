"""Operator actions on runs and schedules (the admin API's cancel, rerun, retry, pause,
resume, trigger, release), a part of :class:`~.engine.WorkflowEngine`.

Each takes the memory's lock, so it never interleaves with a pass of the clock or of the job
follower; refusals are :class:`~.errors.OpError` (status, code, sentence).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from surrealdb import RecordID

from dbclient import Database
from engine.values import record_id_text
from scheduler.workflows import errors, runs
from scheduler.workflows.commits import select
from scheduler.workflows.errors import NotFound, OpError, Unavailable, run_error
from scheduler.workflows.ids import key_of as _key
from scheduler.workflows.ids import ms as _ms
from scheduler.workflows.ids import rid as _rid
from scheduler.workflows.ids import step_rid as _step_rid
from scheduler.workflows.jobcalls import JobCalls
from scheduler.workflows.loading import Loading
from scheduler.workflows.quarantine import Quarantines
from scheduler.workflows.runstate import RunStates
from scheduler.workflows.settle import Settler
from scheduler.workflows.state import Memory, Run, Sched
from scheduler.workflows.tables import CURRENT, schema_version

__all__ = ["OperatorActions"]


class OperatorActions:
    """Each action takes the memory's lock, records its change, then settles (a cancelled
    run with nothing running ends at once; a rerun's first steps start)."""

    def __init__(self, db: Database, memory: Memory, loading: Loading, runstates: RunStates,
                 settler: Settler, jobcalls: JobCalls, quarantines: Quarantines) -> None:
        self.db = db
        self.memory = memory
        self.loading = loading
        self.runstates = runstates
        self.settler = settler
        self.jobcalls = jobcalls
        self.quarantines = quarantines

    def _require_ready(self) -> None:
        if self.memory.state == "disabled":
            raise Unavailable("workflows are disabled (SVC_WORKFLOWS_ENABLED)", "disabled")
        if self.memory.state != "ready":
            raise Unavailable("the workflow engine is not ready (no workflow tables yet, or "
                              "the database is unreachable); try again", "not_ready")

    async def _require_migrated(self) -> None:
        version = self.memory.version = await schema_version(self.db)
        if version is None or version < CURRENT:
            raise OpError(f"the workflow tables are at schema version {version or 0}, "
                          f"this scheduler needs {CURRENT}: run `svc migrate` first",
                          "migration_required")

    async def cancel(self, run_key: str) -> dict[str, Any]:
        """Spec: 202 `{run, status: killed | kill_requested}`; 409 unless running."""
        self._require_ready()
        async with self.memory.lock:
            run = self.memory.runs.get(run_key)
            if run is None:
                row = await self._run_row(run_key)
                raise OpError(f"run {run_key} is {row.get('status')}, not running: only a "
                              "running run can be cancelled", "not_running")
            if run.kill_requested:
                return {"run": record_id_text(run.rid), "status": "kill_requested"}
            err = run_error(errors.KILLED, "cancelled by an operator",
                            run=record_id_text(run.rid))
            stmts: list[tuple[str, dict[str, Any] | None]] = [
                ("UPDATE $r SET kill_requested = true RETURN NONE", {"r": run.rid})]
            to_kill = []
            for st in run.steps.values():
                if st.status == runs.BLOCKED:
                    stmts.append((("UPDATE $s SET status = 'skipped', error = $e, finished_at = "
                                  "time::now() RETURN NONE"),
                                  {"s": _step_rid(run.key, st.name), "e": run_error(
                                      errors.RUN_HALTED, "not run: the run was cancelled",
                                      run_error=errors.KILLED)}))
                elif st.status == runs.RUNNING and st.job is not None:
                    to_kill.append(st)

            def ok() -> None:
                run.kill_requested = True
                for st in run.steps.values():
                    if st.status == runs.BLOCKED:
                        st.status = runs.SKIPPED
                    elif st.status == runs.RUNNING:
                        st.kill_sent, st.halt = True, err
            await self.db.transaction(stmts)
            ok()
            self.jobcalls.kill([st.job for st in to_kill if st.job is not None])
            if not to_kill:
                await self.settler.settle()  # nothing runs: the run ends killed now
            self.memory.changed()
            status = "kill_requested" if run_key in self.memory.runs else self._ended_status(run)
            return {"run": record_id_text(run.rid), "status": status}

    @staticmethod
    def _ended_status(run: Run) -> str:
        return "killed" if run.status == "killed" else run.status

    async def _run_row(self, run_key: str) -> dict[str, Any]:
        row = await self.db.query_one("SELECT * FROM ONLY $r",
                                      {"r": _rid("_00_workflow_run", run_key)}, idempotent=True)
        if not isinstance(row, dict):
            raise NotFound(f"no workflow run {run_key[:80]}")
        return row

    async def rerun(self, run_key: str) -> dict[str, Any]:
        """Spec: 201 `{run, rerun_of}`: a new ad-hoc run (trigger `manual`) of the same
        workflow, from any source status. The workflow's current definition when it still
        exists, else the source run's own DAG."""
        self._require_ready()
        await self._require_migrated()
        async with self.memory.lock:
            src = await self._run_row(run_key)
            name = str(src.get("workflow"))
            wf, _, _ = self.memory.workflows.get(name, (None, None, ""))
            dag = None
            if wf is None:
                dag = (src.get("dag") or {}).get("steps")
                if not isinstance(dag, dict):
                    raise OpError(f"run {run_key} has no DAG to run again", "no_dag")
            run, stmts, ok = self.runstates.new_run(name, wf, self.memory.now(), trigger="manual",
                                           rerun_of=src["id"], dag=dag)
            await self.db.transaction(stmts)
            ok()
            await self.settler.settle()
            self.memory.changed()
            return {"run": record_id_text(run.rid), "rerun_of": record_id_text(src["id"])}

    async def retry(self, run_key: str) -> dict[str, Any]:
        """Spec: 200 `{run, retry_count, reset, kept}`; failed or killed runs only; 409 while
        a killed step's job has not gone terminal; 409 before `svc migrate`."""
        self._require_ready()
        await self._require_migrated()
        async with self.memory.lock:
            row = await self._run_row(run_key)
            if row.get("status") not in ("failed", "killed"):
                raise OpError(f"run {run_key} is {row.get('status')}: only a failed or killed "
                              "run can be retried", "not_retryable")
            step_rows = await select(self.db, "SELECT * FROM _00_step_run WHERE run = $r",
                                           {"r": row["id"]})
            killed_jobs = [s["job"] for s in step_rows if s.get("status") == runs.KILLED
                           and isinstance(s.get("job"), RecordID)]
            if killed_jobs:
                live = await select(self.db, "SELECT id FROM $ids WHERE status IN ['pending', "
                                          "'processing']", {"ids": killed_jobs})
                if live:
                    raise OpError(
                        f"the job {record_id_text(live[0]['id'])} of a killed step has not "
                        "gone terminal yet: wait for the kill to settle, then retry",
                        "kill_pending")
            n = int(row.get("retry_count") or 0) + 1
            now = self.memory.now()
            deadline_secs = row.get("deadline_secs")
            deadline = now + timedelta(seconds=deadline_secs) if deadline_secs else None
            reset = sorted(str(s["step"]) for s in step_rows
                           if s.get("status") in (runs.FAILED, runs.SKIPPED, runs.KILLED))
            kept = sorted(str(s["step"]) for s in step_rows if s.get("status") == runs.COMPLETED)
            stmts: list[tuple[str, dict[str, Any] | None]] = [
                (("UPDATE $r SET status = 'running', retry_count = $n, last_retry_at = $t, "
                 "error = NONE, finished_at = NONE, kill_requested = false, deadline_at = $d, "
                 "step_counts = NONE RETURN NONE"),
                 {"r": row["id"], "n": n, "t": now, "d": deadline}),
            ]
            for name in reset:
                stmts.append((("UPDATE $s SET status = 'blocked', error = NONE, job = NONE, "
                              "started_at = NONE, finished_at = NONE, attempt = $n RETURN NONE"),
                              {"s": _step_rid(run_key, name), "n": n}))
            fire_key = _key(row["schedule_run"]) if row.get("schedule_run") else None
            if fire_key:
                stmts.append((("UPDATE $f SET status = 'running', error = NONE, finished_at = "
                              "NONE, retried = true RETURN NONE"),
                              {"f": _rid("_00_schedule_run", fire_key)}))
            await self.db.transaction(stmts)
            row.update(status="running", retry_count=n, kill_requested=False,
                       deadline_at=deadline)
            for s in step_rows:
                if s["step"] in reset:
                    s.update(status=runs.BLOCKED, attempt=n, job=None)
            run = self.loading.run_from_rows(row, step_rows)
            if run is not None:
                self.memory.runs[run.key] = run
            if fire_key:
                f = await select(self.db, "SELECT * FROM $f", {"f": _rid("_00_schedule_run",
                                                                      fire_key)})
                fire = self.loading.fire_from_row(f[0]) if f else None
                if fire is not None:
                    self.memory.fires[fire.key] = fire
            await self.settler.settle()
            self.memory.changed()
            return {"run": record_id_text(row["id"]), "retry_count": n, "reset": reset,
                    "kept": kept}

    def schedule_state(self, name: str) -> Sched:
        s = self.memory.schedules.get(name)
        if s is None:
            raise NotFound(f"no schedule {name[:80]} (svc workflows apply defines them)")
        return s

    async def _fresh(self, name: str) -> None:
        """Definitions just applied may not be loaded yet: read them before saying 404."""
        if name not in self.memory.schedules:
            await self.loading.reload_definitions()

    async def pause(self, name: str, paused: bool) -> dict[str, Any]:
        """Spec: `{name, paused}`. Resuming does not catch up the fires of the pause."""
        self._require_ready()
        await self._fresh(name)
        async with self.memory.lock:
            s = self.schedule_state(name)
            now = self.memory.now()
            if paused:
                await self.db.query("UPDATE $s SET paused = true RETURN NONE", {"s": s.rid})
            else:
                await self.db.query("UPDATE $s SET paused = false, last_due_at = $t "
                                    "RETURN NONE", {"s": s.rid, "t": now})
                if s.paused:
                    s.cursor = max(s.cursor, now)
            s.paused = paused
            s.plan_next()
        self.memory.wake.set()
        self.memory.changed()
        return {"name": name, "paused": paused}

    async def trigger(self, name: str) -> dict[str, Any]:
        """Spec: `{name, triggered_at}`; 409 when paused or disabled in config. Recorded on
        the schedule (`trigger_requested_at`) and fired by the clock at once, so a trigger
        survives a crash."""
        self._require_ready()
        await self._fresh(name)
        async with self.memory.lock:
            s = self.schedule_state(name)
            if s.spec is None:
                raise OpError(f"schedule {name}'s definition is refused: {s.problem}",
                              "invalid_definition")
            if not s.spec.enabled:
                raise OpError(f"schedule {name} is disabled in the configuration "
                              "(enabled: false)", "disabled")
            if s.paused:
                raise OpError(f"schedule {name} is paused: resume it first", "paused")
            now = self.memory.now().replace(microsecond=self.memory.now().microsecond // 1000 * 1000)
            await self.db.query("UPDATE $s SET trigger_requested_at = $t RETURN NONE",
                                {"s": s.rid, "t": now})
            s.trigger_at = now
        self.memory.wake.set()
        return {"name": name, "triggered_at": _ms(now)}

    async def release(self, name: str, who: str = "operator") -> dict[str, Any]:
        """Lift a quarantine: the failure count restarts at 0, fires resume from now."""
        self._require_ready()
        await self._fresh(name)
        async with self.memory.lock:
            s = self.schedule_state(name)
            if s.quarantined is None:
                raise OpError(f"schedule {name} is not quarantined", "not_quarantined")
            now = self.memory.now()
            await self.db.query("UPDATE $s SET quarantined = NONE, failures = 0, last_due_at "
                                "= $t RETURN NONE", {"s": s.rid, "t": now})
            q = s.quarantined
            s.quarantined, s.failures = None, 0
            s.cursor = max(s.cursor, now)
            s.plan_next()
            self.quarantines.released(name, q, who)
        self.memory.wake.set()
        self.memory.changed()
        return {"name": name, "quarantined": False, "released": True}
