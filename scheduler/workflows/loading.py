"""The engine's memory read from the database: the stored definitions of workflows and
schedules (reloaded when `svc workflows apply` changed them) and, at start and after any
database error, the active runs, steps and fires (`recover`)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from surrealdb import RecordID

from dbclient import Database
from engine.values import record_id_text
from project.workflows import (
    DefinitionError,
    Workflow,
    load_schedule,
    load_workflow,
)
from scheduler.workflows import errors, runs
from scheduler.workflows.commits import READ_CHUNK, select
from scheduler.workflows.errors import run_error
from scheduler.workflows.following import Following
from scheduler.workflows.ids import key_of as _key
from scheduler.workflows.jobcalls import JobCalls
from scheduler.workflows.quarantine import Quarantines
from scheduler.workflows.state import Fire, Memory, Run, Sched, Step

log = logging.getLogger("scheduler.workflows")

__all__ = ["Loading"]


class Loading:
    """Definitions and recovery. Recovery follows every job once (`Following.observe` in
    recovery mode) and re-sends the pokes and kills a crash may have lost."""

    def __init__(self, db: Database, memory: Memory, following: Following, jobcalls: JobCalls,
                 quarantines: Quarantines) -> None:
        self.db = db
        self.memory = memory
        self.following = following
        self.jobcalls = jobcalls
        self.quarantines = quarantines
        self._defs_seen: tuple[Any, ...] | None = None

    async def reload_definitions(self) -> None:
        # Both tables in one transaction: `svc workflows apply` writes them in one, and a
        # schedule read after it with its workflow read before it would fire as
        # `no_target_table` (a trigger right after an apply did).
        got = await self.db.transaction([
            ("SELECT record::id(id) AS name, spec, hash FROM _00_workflow", None),
            ("SELECT *, record::id(id) AS name FROM _00_schedule", None)])
        wrows, srows = got[0] or [], got[1] or []
        seen = (tuple(sorted((str(r["name"]), r.get("hash")) for r in wrows)),
                tuple(sorted((str(r["name"]), r.get("hash")) for r in srows)))
        if seen == self._defs_seen:
            return
        mem = self.memory
        async with mem.lock:
            self._defs_seen = seen
            workflows: dict[str, tuple[Workflow | None, str | None, str]] = {}
            for r in wrows:
                name = str(r["name"])
                try:
                    workflows[name] = (load_workflow(name, r.get("spec") or {}), None,
                                       str(r.get("hash")))
                except DefinitionError as e:
                    workflows[name] = (None, str(e), str(r.get("hash")))
                    log.warning("workflow %s: stored definition refused: %s", name, e)
            mem.workflows = workflows
            now = mem.now()
            keep: dict[str, Sched] = {}
            for r in srows:
                name = str(r["name"])
                have = mem.schedules.get(name)
                if have is not None and have.hash == str(r.get("hash")):
                    keep[name] = have
                    continue
                keep[name] = self._sched_from_row(name, r, have, now)
            gone = set(mem.schedules) - set(keep)
            mem.schedules = keep
            if gone:
                log.info("schedules removed from the definitions: %s", ", ".join(sorted(gone)))
        mem.changed()

    def _sched_from_row(self, name: str, r: dict[str, Any], have: Sched | None,
                        now: datetime) -> Sched:
        spec, problem = None, None
        try:
            spec = load_schedule(name, r.get("spec") or {})
        except DefinitionError as e:
            problem = str(e)
            log.warning("schedule %s: stored definition refused: %s", name, e)
        applied = r.get("applied_at") if isinstance(r.get("applied_at"), datetime) else None
        s = Sched(name, spec, problem, str(r.get("hash")), applied)
        if have is None:  # first load: the runtime fields as the database has them
            s.paused = bool(r.get("paused"))
            q = r.get("quarantined")
            s.quarantined = q if isinstance(q, dict) else None
            s.failures = int(r.get("failures") or 0)
            s.trigger_at = r.get("trigger_requested_at") \
                if isinstance(r.get("trigger_requested_at"), datetime) else None
            s.last_fired_at = r.get("last_fired_at") \
                if isinstance(r.get("last_fired_at"), datetime) else None
            last = r.get("last_due_at") if isinstance(r.get("last_due_at"), datetime) else None
            # Never fired: due times since the definition was applied count (a fire due
            # while the scheduler was down is caught up, not silently forgotten).
            s.cursor = max(x for x in (last, applied, None) if x is not None) \
                if (last or applied) else now
            if s.quarantined is not None:
                self.quarantines.opened(s, restarted=True)
        else:  # the definition changed: it applies from when it was applied
            s.paused, s.quarantined, s.failures = have.paused, have.quarantined, have.failures
            s.trigger_at, s.last_fired_at = have.trigger_at, have.last_fired_at
            s.cursor = max(have.cursor, applied or now)
        s.plan_next()
        return s

    async def recover(self) -> None:
        """Rebuild the active state from the database (start, and after any database error),
        then follow every job once in recovery mode (a dispatched step's missing job is
        `lost_dispatch`) and ask the SSPs to admit the tables of pending jobs."""
        mem = self.memory
        run_rows = await select(self.db, "SELECT * FROM _00_workflow_run WHERE status = 'running'")
        step_rows: list[dict[str, Any]] = []
        ids = [r["id"] for r in run_rows]
        for i in range(0, len(ids), READ_CHUNK):
            step_rows += await select(self.db, "SELECT * FROM _00_step_run WHERE run IN $ids",
                                      {"ids": ids[i:i + READ_CHUNK]})
        fire_rows = await select(
            self.db, "SELECT * FROM _00_schedule_run WHERE status IN ['running', 'queued']")
        async with mem.lock:
            by_run: dict[str, list[dict[str, Any]]] = {}
            for row in step_rows:
                by_run.setdefault(_key(row.get("run")), []).append(row)
            mem.runs = {}
            for r in run_rows:
                run = self.run_from_rows(r, by_run.get(_key(r["id"]), []))
                if run is not None:
                    mem.runs[run.key] = run
            mem.fires = {}
            for f in fire_rows:
                fire = self.fire_from_row(f)
                if fire is not None:
                    mem.fires[fire.key] = fire
            mem.resync = False
            mem.state = "ready"
            mem.stats["resyncs"] += 1
            log.info("workflows: %d running runs, %d active fires", len(mem.runs),
                     len(mem.fires))
            await self.following.observe(recovery=True)
            for run in mem.runs.values():
                for st in run.steps.values():
                    if st.status == runs.RUNNING and st.job is not None:
                        self.jobcalls.poke(st.job)
                if run.kill_requested:  # the kill may not have gone out before a crash
                    self.jobcalls.kill([st.job for st in run.steps.values()
                                        if st.status == runs.RUNNING and st.job is not None])
            for fire in mem.fires.values():
                if fire.job is not None and fire.status == "running":
                    self.jobcalls.poke(fire.job)
        mem.changed()

    def run_from_rows(self, r: dict[str, Any], step_rows: list[dict[str, Any]]) -> Run | None:
        dag = r.get("dag") or {}
        specs = dag.get("steps") if isinstance(dag, dict) else None
        if not isinstance(specs, dict):
            log.warning("run %s has no DAG; left as it is", record_id_text(r["id"]))
            return None
        rows = {str(s.get("step")): s for s in step_rows}
        steps: dict[str, Step] = {}
        for name, sp in specs.items():
            row: dict[str, Any] = rows.get(name, {})
            steps[name] = Step(
                name, str(sp.get("table")), sp, list(sp.get("depends_on") or []),
                status=str(row.get("status") or runs.BLOCKED),
                attempt=int(row.get("attempt") or 0),
                job=row.get("job") if isinstance(row.get("job"), RecordID) else None,
                kill_sent=bool(r.get("kill_requested")) and row.get("status") == runs.RUNNING,
                halt=run_error(errors.KILLED, "killed by an operator",
                               run=record_id_text(r["id"]))
                if r.get("kill_requested") else None)
        created_at = r.get("created_at")
        created = created_at if isinstance(created_at, datetime) else self.memory.now()
        deadline = r.get("deadline_at") if isinstance(r.get("deadline_at"), datetime) else None
        return Run(_key(r["id"]), str(r.get("workflow")), steps, str(r.get("trigger")),
                   r.get("schedule"), _key(r["schedule_run"]) if r.get("schedule_run") else None,
                   created, r.get("deadline_secs"), deadline,
                   retry_count=r.get("retry_count") or None,
                   kill_requested=bool(r.get("kill_requested")))

    def fire_from_row(self, f: dict[str, Any]) -> Fire | None:
        due = f.get("due_at")
        if not isinstance(due, datetime):
            return None
        return Fire(_key(f["id"]), str(f.get("schedule")), str(f.get("status")), due,
                    str(f.get("trigger") or "schedule"),
                    job=f.get("job") if isinstance(f.get("job"), RecordID) else None,
                    run=_key(f["run"]) if f.get("run") else None,
                    retried=bool(f.get("retried")))
