"""Following the jobs of steps and of table fires: reading the job rows (all of them every
`SVC_WORKFLOW_POLL_MS`, only those an SSP reported in between), turning a terminal or lost
job into the end of its step or fire, and the job plane's dispatch and kill calls."""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

from surrealdb import RecordID

from dbclient import DbError, DbQueryError
from engine.values import record_id_text
from jobs import rows as jobrows
from scheduler.workflows import errors, runs
from scheduler.workflows.errors import run_error
from scheduler.workflows.ids import ms as _ms
from scheduler.workflows.ids import step_rid as _step_rid
from scheduler.workflows.loading import READ_CHUNK
from scheduler.workflows.state import EngineState, Run, Step, Unit

log = logging.getLogger("scheduler.workflows")

__all__ = ["Following"]

JOB_FIELDS = ("id, status, created_at, finished_at, kill_requested, "
              "array::last(errors ?? []) AS last_error")

# A mixin of `scheduler.workflows.engine.WorkflowEngine`, not a component: the engine is one
# owner of one state (its lock, its memory of runs, fires and schedules) and these methods work
# on that state (`WorkflowEngine.__init__`); the split keeps each job of the engine in its own
# module, as `scheduler.core` does with the scheduler.
class Following(EngineState):
    """Job rows to step and fire endings; poke and kill through the job plane."""

    def _followed(self) -> dict[str, tuple[RecordID, str, str, str | None]]:
        """job id text -> (job, "step", run key, step) | (job, "fire", fire key, None)."""
        out: dict[str, tuple[RecordID, str, str, str | None]] = {}
        for run in self.runs.values():
            for st in run.steps.values():
                if st.status == runs.RUNNING and st.job is not None:
                    out[record_id_text(st.job)] = (st.job, "step", run.key, st.name)
        for fire in self.fires.values():
            if fire.status == "running" and fire.job is not None:
                out[record_id_text(fire.job)] = (fire.job, "fire", fire.key, None)
        return out

    def _following(self) -> bool:
        return any(st.status == runs.RUNNING for r in self.runs.values()
                   for st in r.steps.values()) or \
            any(f.job is not None and f.status == "running" for f in self.fires.values())

    async def _observe(self, *, recovery: bool) -> None:
        followed = self._followed()
        full = recovery or time.monotonic() - self._last_full >= self.cfg.poll_ms / 1000
        if full:
            self._last_full = time.monotonic()
            self._dirty.clear()
        else:
            dirty, self._dirty = self._dirty, set()
            followed = {k: v for k, v in followed.items() if k in dirty}
        ready = self._ssps_ready()
        if not ready:
            self._ssps_since = None
        elif self._ssps_since is None:
            self._ssps_since = self.now()
            for job, *_ in followed.values():  # pokes sent while none was ready were lost
                self._poke(job)
        if not followed:
            return
        rids = [v[0] for v in followed.values()]
        rows: dict[str, dict[str, Any]] = {}
        for i in range(0, len(rids), READ_CHUNK):
            got = await self._select(f"SELECT {JOB_FIELDS} FROM $ids",
                                     {"ids": rids[i:i + READ_CHUNK]})
            for row in got:
                rows[record_id_text(row["id"])] = row
        now = self.now()
        units: list[Unit] = []
        for job_text, (job, kind, key, step) in followed.items():
            u = self._job_unit(job, job_text, rows.get(job_text), kind, key, step, now,
                               recovery)
            if u is not None:
                units.append(u)
        if units:
            await self._commit(units)
            self._changed()

    def _job_unit(self, job: RecordID, job_text: str, row: dict[str, Any] | None, kind: str,
                  key: str, step: str | None, now: datetime, recovery: bool) -> Unit | None:
        status = row.get("status") if row else None
        error: dict[str, Any] | None = None
        outcome: str | None = None
        guard: list[tuple[str, dict[str, Any] | None]] = []
        if row is None:
            code = errors.LOST_DISPATCH if recovery else errors.JOB_MISSING
            why = ("its job row was gone when the scheduler started: whether it ran is "
                   "unknown, so it is not run again" if recovery
                   else "its job row disappeared while it was followed")
            outcome, error = "failed", run_error(code, f"{job_text}: {why}", job=job_text)
        elif status == "completed":
            outcome = "completed"
        elif status == "failed":
            last_error = row.get("last_error")
            last: dict[str, Any] = last_error if isinstance(last_error, dict) else {}
            outcome = "failed"
            error = run_error(errors.JOB_FAILED, str(last.get("error") or "the job failed"),
                              job=job_text, kind=last.get("kind"))
        elif status == "pending" and self._unclaimed_secs(row, now) > \
                self.cfg.dispatch_timeout_secs > 0:
            text = (f"no SSP claimed {job_text} in {self.cfg.dispatch_timeout_secs}s while SSPs "
                    "were ready (is its table served by one?); the job is failed so it never "
                    "runs late")
            outcome = "failed"
            error = run_error(errors.NEVER_DISPATCHED, text, job=job_text,
                              since=_ms(row["created_at"]))
            guard = [
                (f"LET $n = ({jobrows.fail_pending('VALUE id')})",
                 {"j": job, "kind": "never_dispatched", "text": text}),
                ("IF array::len($n) = 0 { THROW 'claimed meanwhile' }", None),
            ]
        if outcome is None:
            return None
        if kind == "fire":
            fire = self.fires.get(key)
            if fire is None:
                return None
            u = self._fire_end_unit(fire, "completed" if outcome == "completed" else "failed",
                                    error)
            u.statements[:0] = guard
            return u
        run = self.runs.get(key)
        if run is None or step is None:
            return None
        st = run.steps[step]
        new = outcome
        if outcome == "failed" and st.kill_sent and row is not None and status == "failed":
            new, error = runs.KILLED, st.halt
        return self._step_end_unit(run, st, new, error, guard)

    def _unclaimed_secs(self, row: dict[str, Any], now: datetime) -> float:
        """How long a pending job has waited while some SSP was ready to claim it."""
        created = row.get("created_at")
        if not isinstance(created, datetime) or self._ssps_since is None:
            return 0.0
        return (now - max(created, self._ssps_since)).total_seconds()

    def _step_end_unit(self, run: Run, st: Step, status: str, error: dict[str, Any] | None,
                       guard: list[tuple[str, dict[str, Any] | None]] | None = None) -> Unit:
        def ok() -> None:
            st.status = status
        stmts = list(guard or [])
        stmts.append((("UPDATE $s SET status = $st, error = $e, finished_at = time::now() "
                      "RETURN NONE"), {"s": _step_rid(run.key, st.name), "st": status,
                                      "e": error}))

        async def fail(e: DbQueryError) -> None:
            if "claimed meanwhile" in e.engine_message:
                return  # an SSP took the job after all: keep following it
            log.warning("run %s step %s: ending refused: %s", run.key, st.name, e)
            self._resync = True
        return Unit(f"step {run.key}/{st.name} {status}", stmts, ok, fail)

    def _poke(self, job: RecordID) -> None:
        """Ask an SSP to admit the job's table now (one request per table at a time; a poke
        arriving meanwhile makes it ask again once the first is answered)."""
        table = job.table_name
        if table in self._poking:
            self._poking[table] = True
            return
        self._poking[table] = False
        self._spawn(self._poke_loop(job), f"poke-{table}")

    async def _poke_loop(self, job: RecordID) -> None:
        table = job.table_name
        try:
            while True:
                plane = self._job_plane()
                if plane is not None:
                    try:
                        out = await plane.dispatch(record_id_text(job), table)
                        if out and out[0] != 200:
                            log.info("dispatch of %s answered %s", record_id_text(job), out[0])
                    except Exception as e:  # noqa: BLE001 - a poke is best effort
                        log.info("dispatch of %s failed: %s", record_id_text(job), e)
                if not self._poking.get(table):
                    return
                self._poking[table] = False
        finally:
            self._poking.pop(table, None)

    def _kill_jobs(self, jobs: list[RecordID]) -> None:
        if jobs:
            self._spawn(self._kill(jobs), "kill-jobs")

    async def _kill(self, jobs: list[RecordID]) -> None:
        """Fail the pending ones outright (no SSP has them), flag the processing ones (the
        owner sees the flag at its next lease renewal) and broadcast the kill (the owner
        cancels the call at once)."""
        for job in jobs:
            try:
                await self.db.query(
                    f"{jobrows.fail_pending('NONE')}; {jobrows.FLAG_PROCESSING_KILL}",
                    {"j": job, "kind": "killed", "text": "killed"})
            except DbError as e:
                log.warning("kill of %s: flagging failed: %s", record_id_text(job), e)
            plane = self._job_plane()
            if plane is not None:
                try:
                    await plane.kill(record_id_text(job))
                except Exception as e:  # noqa: BLE001 - the flag above still stops it
                    log.info("kill broadcast of %s failed: %s", record_id_text(job), e)
        self._wake.set()
