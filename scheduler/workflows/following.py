"""Following the jobs of steps and of table fires: reading the job rows (all of them every
`SVC_WORKFLOW_POLL_MS`, only those an SSP reported in between), turning a terminal or lost
job into the end of its step or fire. (The job plane's dispatch and kill calls: `jobcalls`.)"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from surrealdb import RecordID

from dbclient import Database
from engine.values import record_id_text
from jobs import rows as jobrows
from scheduler.workflows import errors, runs
from scheduler.workflows.commits import READ_CHUNK, Committer, select
from scheduler.workflows.config import WorkflowConfig
from scheduler.workflows.endings import Endings
from scheduler.workflows.errors import run_error
from scheduler.workflows.ids import ms as _ms
from scheduler.workflows.jobcalls import JobCalls
from scheduler.workflows.state import Memory, Unit

log = logging.getLogger("scheduler.workflows")

__all__ = ["Following"]

JOB_FIELDS = ("id, status, created_at, finished_at, kill_requested, "
              "array::last(errors ?? []) AS last_error")

class Following:
    """Job rows to step and fire endings. `ssps_ready` says whether some SSP is ready (a
    job counts as unclaimed only while one is)."""

    def __init__(self, db: Database, cfg: WorkflowConfig, memory: Memory, committer: Committer,
                 endings: Endings, jobcalls: JobCalls, ssps_ready: Callable[[], bool]) -> None:
        self.db = db
        self.cfg = cfg
        self.memory = memory
        self.committer = committer
        self.endings = endings
        self.jobcalls = jobcalls
        self._ssps_ready = ssps_ready
        # since when at least one SSP has been ready without a break (None: none is): a job
        # counts as unclaimed only for that time (a scheduler restart, an SSP re-bootstrap
        # must not make a pending job `never_dispatched`)
        self._ssps_since: datetime | None = None
        self._dirty: set[str] = set()  # jobs an SSP reported terminal since the last read
        self._last_full = 0.0

    def reported(self, job_id: str, status: str) -> None:
        """An SSP posted `/job/result`: a followed job moved, read it now (only the reported
        ones: every followed job is read each `SVC_WORKFLOW_POLL_MS`)."""
        if status in ("completed", "failed") and (self.memory.runs or self.memory.fires):
            self._dirty.add(job_id)
            self.memory.wake.set()

    def _followed(self) -> dict[str, tuple[RecordID, str, str, str | None]]:
        """job id text -> (job, "step", run key, step) | (job, "fire", fire key, None)."""
        out: dict[str, tuple[RecordID, str, str, str | None]] = {}
        for run in self.memory.runs.values():
            for st in run.steps.values():
                if st.status == runs.RUNNING and st.job is not None:
                    out[record_id_text(st.job)] = (st.job, "step", run.key, st.name)
        for fire in self.memory.fires.values():
            if fire.status == "running" and fire.job is not None:
                out[record_id_text(fire.job)] = (fire.job, "fire", fire.key, None)
        return out

    def busy(self) -> bool:
        """Some job is followed (the loop then reads job rows every poll)."""
        mem = self.memory
        return any(st.status == runs.RUNNING for r in mem.runs.values()
                   for st in r.steps.values()) or \
            any(f.job is not None and f.status == "running" for f in mem.fires.values())

    async def observe(self, *, recovery: bool) -> None:
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
            self._ssps_since = self.memory.now()
            for job, *_ in followed.values():  # pokes sent while none was ready were lost
                self.jobcalls.poke(job)
        if not followed:
            return
        rids = [v[0] for v in followed.values()]
        rows: dict[str, dict[str, Any]] = {}
        for i in range(0, len(rids), READ_CHUNK):
            got = await select(self.db, f"SELECT {JOB_FIELDS} FROM $ids",
                               {"ids": rids[i:i + READ_CHUNK]})
            for row in got:
                rows[record_id_text(row["id"])] = row
        now = self.memory.now()
        units: list[Unit] = []
        for job_text, (job, kind, key, step) in followed.items():
            u = self._job_unit(job, job_text, rows.get(job_text), kind, key, step, now,
                               recovery)
            if u is not None:
                units.append(u)
        if units:
            await self.committer.commit(units)
            self.memory.changed()

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
            fire = self.memory.fires.get(key)
            if fire is None:
                return None
            u = self.endings.fire_end_unit(fire, "completed" if outcome == "completed" else "failed",
                                    error)
            u.statements[:0] = guard
            return u
        run = self.memory.runs.get(key)
        if run is None or step is None:
            return None
        st = run.steps[step]
        new = outcome
        if outcome == "failed" and st.kill_sent and row is not None and status == "failed":
            new, error = runs.KILLED, st.halt
        return self.endings.step_end_unit(run, st, new, error, guard)

    def _unclaimed_secs(self, row: dict[str, Any], now: datetime) -> float:
        """How long a pending job has waited while some SSP was ready to claim it."""
        created = row.get("created_at")
        if not isinstance(created, datetime) or self._ssps_since is None:
            return 0.0
        return (now - max(created, self._ssps_since)).total_seconds()
