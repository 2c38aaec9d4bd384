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
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from surrealdb import RecordID

from dbclient import Database, DbError, DbQueryError
from engine.values import record_id_text
from project.workflows import (
    DefinitionError,
    Workflow,
    load_schedule,
    load_workflow,
    topological_order,
)
from scheduler.workflows import clock, errors, rollups, runs
from scheduler.workflows.actions import OperatorActions
from scheduler.workflows.config import WorkflowConfig
from scheduler.workflows.errors import run_error
from scheduler.workflows.ids import key_of as _key
from scheduler.workflows.ids import ms as _ms
from scheduler.workflows.ids import rid as _rid
from scheduler.workflows.ids import step_rid as _step_rid
from scheduler.workflows.state import Fire, Run, Sched, Step, Unit
from scheduler.workflows.tables import schema_version

log = logging.getLogger("scheduler.workflows")

__all__ = ["WorkflowEngine"]

BATCH_STATEMENTS = 600
IN_FLIGHT = 2
ROUNDS_MAX = 10_000  # a bug must not spin the loop forever
READ_CHUNK = 500
JOB_FIELDS = ("id, status, created_at, finished_at, kill_requested, "
              "array::last(errors ?? []) AS last_error")
# One `errors` entry as the SSPs write it (ssp.jobs.ERROR_ENTRY): same keys, status NULL.
# A schedule run record stamped with the database's clock when the fire commits (lateness).
_CREATE_FIRED = "CREATE $f CONTENT object::extend($c, {fired_at: time::now()}) RETURN NONE"
_CREATE_FIRED_DONE = ("CREATE $f CONTENT object::extend($c, {fired_at: time::now(), "
                      "finished_at: time::now()}) RETURN NONE")
_ERROR_ENTRY = "{ at: time::now(), attempt: 0, kind: $kind, status: NULL, error: $text }"





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


def _already_exists(e: DbQueryError) -> bool:
    return "already exists" in e.engine_message


#: times a transaction that met a write conflict is sent again before giving up
CONFLICT_RETRIES = 6


def retryable(e: DbQueryError) -> bool:
    """A write conflict: the engine says so, or only knock-on errors came back (the
    transaction failed as a whole, no statement of it was refused)."""
    m = e.engine_message
    return "can be retried" in m or m.startswith(
        ("The query was not executed due to a failed transaction",
         "The query was not executed due to a cancelled transaction", "Cannot COMMIT")) \
        or "COMMIT failed" in str(e)


# ---------------------------------------------------------------------------- engine


class WorkflowEngine(OperatorActions):
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
        for t in [self._task, *self._bg]:
            if t is not None:
                t.cancel()
        await asyncio.gather(*(t for t in [self._task, *self._bg] if t is not None),
                             return_exceptions=True)

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
                        await self._sleep(min(5.0, 0.2 * 2 ** self._resyncs_in_row))
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
            await self._sleep(self._idle_secs())

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

    # ------------------------------------------------------------------ definitions
    async def _reload_definitions(self) -> None:
        wrows = await self.db.query_one(
            "SELECT record::id(id) AS name, spec, hash FROM _00_workflow", idempotent=True) or []
        srows = await self.db.query_one("SELECT *, record::id(id) AS name FROM _00_schedule",
                                        idempotent=True) or []
        seen = (tuple(sorted((str(r["name"]), r.get("hash")) for r in wrows)),
                tuple(sorted((str(r["name"]), r.get("hash")) for r in srows)))
        if seen == self._defs_seen:
            return
        async with self.lock:
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
            self.workflows = workflows
            now = self.now()
            keep: dict[str, Sched] = {}
            for r in srows:
                name = str(r["name"])
                have = self.schedules.get(name)
                if have is not None and have.hash == str(r.get("hash")):
                    keep[name] = have
                    continue
                keep[name] = self._sched_from_row(name, r, have, now)
            gone = set(self.schedules) - set(keep)
            self.schedules = keep
            if gone:
                log.info("schedules removed from the definitions: %s", ", ".join(sorted(gone)))
        self._changed()

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
            if s.quarantined is not None and self.incidents is not None:
                self._quarantine_incident(s, restarted=True)
        else:  # the definition changed: it applies from when it was applied
            s.paused, s.quarantined, s.failures = have.paused, have.quarantined, have.failures
            s.trigger_at, s.last_fired_at = have.trigger_at, have.last_fired_at
            s.cursor = max(have.cursor, applied or now)
        self._plan_next(s)
        return s

    def _plan_next(self, s: Sched) -> None:
        if s.spec is None:
            s.next_due = None
            return
        if s.following is not None and s.next_due is not None and s.cursor == s.next_due:
            s.next_due, s.following = s.following, None  # computed while planning the fire
            return
        s.following = None
        try:
            s.next_due = clock.next_due(s.spec.cron, s.spec.timezone, s.cursor)
        except Exception as e:  # noqa: BLE001 - a cron cronsim accepted but cannot iterate
            log.warning("schedule %s: no next fire (%s)", s.name, e)
            s.next_due = None

    # ------------------------------------------------------------------ recovery
    async def _recover(self) -> None:
        """Rebuild the active state from the database (start, and after any database error),
        then follow every job once in recovery mode (a dispatched step's missing job is
        `lost_dispatch`) and ask the SSPs to admit the tables of pending jobs."""
        run_rows = await self._select("SELECT * FROM _00_workflow_run WHERE status = 'running'")
        step_rows: list[dict[str, Any]] = []
        ids = [r["id"] for r in run_rows]
        for i in range(0, len(ids), READ_CHUNK):
            step_rows += await self._select("SELECT * FROM _00_step_run WHERE run IN $ids",
                                            {"ids": ids[i:i + READ_CHUNK]})
        fire_rows = await self._select(
            "SELECT * FROM _00_schedule_run WHERE status IN ['running', 'queued']")
        async with self.lock:
            by_run: dict[str, list[dict[str, Any]]] = {}
            for st in step_rows:
                by_run.setdefault(_key(st.get("run")), []).append(st)
            self.runs = {}
            for r in run_rows:
                run = self._run_from_rows(r, by_run.get(_key(r["id"]), []))
                if run is not None:
                    self.runs[run.key] = run
            self.fires = {}
            for f in fire_rows:
                fire = self._fire_from_row(f)
                if fire is not None:
                    self.fires[fire.key] = fire
            self._resync = False
            self.state = "ready"
            self.stats["resyncs"] += 1
            log.info("workflows: %d running runs, %d active fires", len(self.runs),
                     len(self.fires))
            await self._observe(recovery=True)
            for run in self.runs.values():
                for st in run.steps.values():
                    if st.status == runs.RUNNING and st.job is not None:
                        self._poke(st.job)
                if run.kill_requested:  # the kill may not have gone out before a crash
                    self._kill_jobs([st.job for st in run.steps.values()
                                     if st.status == runs.RUNNING and st.job is not None])
            for fire in self.fires.values():
                if fire.job is not None and fire.status == "running":
                    self._poke(fire.job)
        self._changed()

    def _run_from_rows(self, r: dict[str, Any], step_rows: list[dict[str, Any]]) -> Run | None:
        dag = r.get("dag") or {}
        specs = dag.get("steps") if isinstance(dag, dict) else None
        if not isinstance(specs, dict):
            log.warning("run %s has no DAG; left as it is", record_id_text(r["id"]))
            return None
        rows = {str(s.get("step")): s for s in step_rows}
        steps: dict[str, Step] = {}
        for name, sp in specs.items():
            row = rows.get(name, {})
            steps[name] = Step(
                name, str(sp.get("table")), sp, list(sp.get("depends_on") or []),
                status=str(row.get("status") or runs.BLOCKED),
                attempt=int(row.get("attempt") or 0),
                job=row.get("job") if isinstance(row.get("job"), RecordID) else None,
                kill_sent=bool(r.get("kill_requested")) and row.get("status") == runs.RUNNING,
                halt=run_error(errors.KILLED, "killed by an operator",
                               run=record_id_text(r["id"]))
                if r.get("kill_requested") else None)
        created = r.get("created_at") if isinstance(r.get("created_at"), datetime) \
            else self.now()
        deadline = r.get("deadline_at") if isinstance(r.get("deadline_at"), datetime) else None
        return Run(_key(r["id"]), str(r.get("workflow")), steps, str(r.get("trigger")),
                   r.get("schedule"), _key(r["schedule_run"]) if r.get("schedule_run") else None,
                   created, r.get("deadline_secs"), deadline,
                   retry_count=r.get("retry_count") or None,
                   kill_requested=bool(r.get("kill_requested")))

    def _fire_from_row(self, f: dict[str, Any]) -> Fire | None:
        due = f.get("due_at")
        if not isinstance(due, datetime):
            return None
        return Fire(_key(f["id"]), str(f.get("schedule")), str(f.get("status")), due,
                    str(f.get("trigger") or "schedule"),
                    job=f.get("job") if isinstance(f.get("job"), RecordID) else None,
                    run=_key(f["run"]) if f.get("run") else None,
                    retried=bool(f.get("retried")))

    async def _select(self, sql: str, vars: dict[str, Any] | None = None
                      ) -> list[dict[str, Any]]:
        rows = await self.db.query_one(sql, vars, idempotent=True) or []
        return [r for r in rows if isinstance(r, dict)]

    # ------------------------------------------------------------------ committing
    async def _commit(self, units: list[Unit]) -> None:
        """Units of one round (independent of each other by construction) in transactions of
        up to BATCH_STATEMENTS statements, two in flight (the database works on one while this
        process encodes the next)."""
        chunks: list[list[Unit]] = [[]]
        size = 0
        for u in units:
            if chunks[-1] and size + len(u.statements) > BATCH_STATEMENTS:
                chunks.append([])
                size = 0
            chunks[-1].append(u)
            size += len(u.statements)
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(chunk: list[Unit]) -> None:
            async with gate:
                await self._commit_chunk(chunk)
        if len(chunks) == 1:
            await self._commit_chunk(chunks[0])
            return
        got = await asyncio.gather(*(one(c) for c in chunks if c), return_exceptions=True)
        for g in got:
            if isinstance(g, BaseException):
                raise g

    async def _commit_chunk(self, chunk: list[Unit]) -> None:
        statements = [st for u in chunk for st in u.statements]
        by_due: dict[datetime, list[RecordID]] = {}
        for u in chunk:
            if u.cursor is not None:
                by_due.setdefault(u.cursor[1], []).append(u.cursor[0])
        for due, ids in by_due.items():
            statements.append((("UPDATE $ids SET last_due_at = $d, last_fired_at = time::now() "
                               "RETURN NONE"), {"ids": ids, "d": due}))
        refused = await self._transaction(statements)
        if refused is None:
            for u in chunk:
                if u.ok is not None:
                    u.ok()
        elif len(chunk) == 1:
            await self._refused(chunk[0], refused)
        else:
            for u in chunk:  # find the one(s) refused; the rest commit on their own
                await self._commit_chunk([u])

    async def _transaction(self, statements: list[tuple[str, dict[str, Any] | None]]
                           ) -> DbQueryError | None:
        """Commit; the refusal when the database refused a statement (None: committed).
        A write conflict (another writer on the same rows: the CLI applying definitions, an
        SSP on a job row) is no refusal: the transaction is sent again, and a conflict that
        persists raises (the engine then reads its state again)."""
        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                await self.db.transaction(statements)
                return None
            except DbQueryError as e:
                if not retryable(e):
                    return e
                if attempt == CONFLICT_RETRIES:
                    raise
                await asyncio.sleep(0.01 * 2 ** attempt)
        return None

    async def _refused(self, u: Unit, e: DbQueryError) -> None:
        if u.fail is not None:
            await u.fail(e)
        else:
            log.warning("workflows: %s refused by the database: %s", u.label, e)
            self._resync = True

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
            units = self._schedule_units(now) + self._run_units(now) + self._queue_units(now)
            if not units:
                return
            await self._commit(units)
            self._changed()
        log.error("workflows: decisions did not settle in %d rounds", ROUNDS_MAX)

    def _fires_by_schedule(self) -> dict[str, list[Fire]]:
        out: dict[str, list[Fire]] = {}
        for f in self.fires.values():
            out.setdefault(f.schedule, []).append(f)
        return out

    # ------------------------------------------------------------------ following jobs
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
            last = row.get("last_error") if isinstance(row.get("last_error"), dict) else {}
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
                (("LET $n = (UPDATE $j SET status = 'failed', kill_requested = true, "
                 f"finished_at = time::now(), errors += {_ERROR_ENTRY} WHERE status = "
                 "'pending' RETURN VALUE id)"),
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

    # ------------------------------------------------------------------ runs
    def _run_units(self, now: datetime) -> list[Unit]:
        units: list[Unit] = []
        for run in list(self.runs.values()):
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

    def _job_content(self, spec: dict[str, Any], now: datetime, **links: Any) -> dict[str, Any]:
        c: dict[str, Any] = {"status": "pending", "path": spec.get("path") or "/",
                             "payload": spec.get("payload") or {},
                             "max_retries": int(spec.get("retries", 3)), "created_at": now}
        if spec.get("timeout"):
            c["timeout_secs"] = float(spec["timeout"])
        c.update({k: v for k, v in links.items() if v is not None})
        return c

    def _dispatch_unit(self, run: Run, st: Step, now: datetime) -> Unit:
        job = RecordID(st.table, runs.job_key(run.key, st.name, st.attempt))
        step_rid = _step_rid(run.key, st.name)
        mark = (("UPDATE $s SET status = 'running', job = $j, started_at = time::now(), "
                "jobs += $j RETURN NONE"), {"s": step_rid, "j": job})
        create = ("CREATE $j CONTENT $c RETURN NONE",
                  {"j": job, "c": self._job_content(st.spec, now, workflow_run=run.rid,
                                                    step=st.name, attempt=st.attempt)})

        def ok() -> None:
            st.status, st.job = runs.RUNNING, job
            self.stats["steps_started"] += 1
            self._poke(job)

        async def fail(e: DbQueryError) -> None:
            if _already_exists(e):
                # This attempt's job exists (a decision recorded twice): follow it, never
                # create a second one.
                await self._commit_chunk([Unit(f"adopt {record_id_text(job)}", [mark], ok)])
                return
            log.warning("run %s step %s: job %s refused: %s", run.key, st.name,
                        record_id_text(job), e)
            err = run_error(errors.SPAWN_FAILED, f"the database refused the job row "
                            f"{record_id_text(job)}: {e.engine_message}"[:400],
                            job=record_id_text(job))
            await self._commit_chunk([self._step_end_unit(run, st, runs.FAILED, err)])
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
            self._kill_jobs(to_kill)
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
        now = self.now()
        stmts: list[tuple[str, dict[str, Any] | None]] = [
            (("UPDATE $r SET status = $st, error = $e, finished_at = time::now(), "
             "step_counts = $c RETURN NONE"), {"r": run.rid, "st": status, "e": err, "c": counts}),
        ]
        fire = self.fires.get(run.fire) if run.fire else None
        after: Callable[[], None] | None = None
        if fire is not None:
            fu = self._fire_end_unit(fire, status, err)
            stmts += fu.statements
            after = fu.ok
        else:
            stmts.append(rollups.increment(run.schedule, now,
                                           "success" if status == "completed" else "failure"))

        def ok() -> None:
            run.status = status
            self.runs.pop(run.key, None)
            self.stats["runs_ended"] += 1
            if after is not None:
                after()
            for fn in list(self.run_end_hooks):
                try:
                    fn(run.key, status, err)
                except Exception:
                    log.exception("run end hook failed")
            log.info("run %s (%s) %s%s", run.key, run.workflow, status,
                     f": {err['code']}" if err else "")
        return Unit(f"end {run.key} {status}", stmts, ok)

    # ------------------------------------------------------------------ fires
    def _fire_end_unit(self, fire: Fire, status: str, err: dict[str, Any] | None) -> Unit:
        """A fire's ending: its record, the rollup, and (first endings only, not a retried
        run's: spec note) the schedule's `last_run_*` fields, failure count, quarantine."""
        now = self.now()
        stmts: list[tuple[str, dict[str, Any] | None]] = [
            ("UPDATE $f SET status = $st, error = $e, finished_at = time::now() RETURN NONE",
             {"f": fire.rid, "st": status, "e": err}),
            rollups.increment(fire.schedule, now, "success" if status == "completed"
                              else "failure"),
        ]
        s = self.schedules.get(fire.schedule)
        quarantine: dict[str, Any] | None = None
        failures = 0
        if s is not None and not fire.retried:
            failures = 0 if status == "completed" else s.failures + 1
            limit = s.spec.quarantine_after if s.spec is not None else 0
            if limit and failures >= limit and s.quarantined is None:
                quarantine = {"key": (err or {}).get("code") or "failed", "since": _ms(now),
                              "failures": failures}
            stmts.append((
                "UPDATE $s SET last_run_status = $st, last_run_at = time::now(), "
                "last_error = $le, failures = $n" + (", quarantined = $q" if quarantine
                                                      else "") + " RETURN NONE",
                {"s": s.rid, "st": status, "le": (err or {}).get("message"), "n": failures,
                 **({"q": quarantine} if quarantine else {})}))

        def ok() -> None:
            self.fires.pop(fire.key, None)
            if s is not None and not fire.retried:
                s.failures = failures
                if quarantine is not None:
                    s.quarantined = quarantine
                    self._quarantine_incident(s)
        return Unit(f"fire {fire.key} {status}", stmts, ok)

    def _schedule_units(self, now: datetime) -> list[Unit]:
        units: list[Unit] = []
        for s in list(self.schedules.values()):
            if not s.active:
                s.pending.clear()
                s.missed = None
                continue
            assert s.spec is not None
            if s.trigger_at is not None:
                units.append(self._fire_unit(s, s.trigger_at, "manual", now))
                continue
            if not s.pending and s.missed is None and s.next_due is not None \
                    and s.next_due <= now:
                s.following = None
                after = clock.next_due(s.spec.cron, s.spec.timezone, s.next_due) \
                    if now - s.next_due <= clock.ON_TIME and s.cursor < s.next_due else None
                if after is not None and after > now:
                    s.following = after
                    # the usual case: exactly one due time, on time (no catch-up to plan)
                    p = clock.CatchUp(fire=[s.next_due], late=[False])
                else:
                    p = clock.plan(s.spec.cron, s.spec.timezone, s.cursor, now,
                                   s.spec.catch_up)
                s.pending.extend(zip(p.fire, p.late, strict=True))
                s.missed = p if p.missed_count else None
                if not p.fire and not p.missed_count:
                    s.cursor = now
                    self._plan_next(s)
            if s.missed is not None:
                units.append(self._missed_unit(s, s.missed))
            elif s.pending:
                due, late = s.pending[0]
                units.append(self._fire_unit(s, due, "schedule", now, late=late))
        return units

    def _missed_unit(self, s: Sched, p: clock.CatchUp) -> Unit:
        assert p.missed_until is not None and p.missed_since is not None
        key = f"{s.name}_missed_{_ms(p.missed_until)}"
        n = f"at least {p.missed_count}" if p.count_truncated else str(p.missed_count)
        err = run_error(errors.NOT_STARTED, f"{n} fires were due while the scheduler could not "
                        f"fire them; beyond the catch-up bound ({s.spec.catch_up if s.spec else 0}"
                        ") they are not run", since=_ms(p.missed_since),
                        until=_ms(p.missed_until), missed=p.missed_count)
        stmts = [
            ("CREATE $f CONTENT $c RETURN NONE", {"f": _rid("_00_schedule_run", key), "c": {
                "schedule": s.name, "due_at": p.missed_until, "fired_at": self.now(),
                "trigger": "schedule", "status": "skipped", "error": err,
                "finished_at": self.now()}}),
            rollups.increment(s.name, self.now(), "skipped"),
            ("UPDATE $s SET last_due_at = $d RETURN NONE", {"s": s.rid, "d": p.missed_until}),
        ]

        def ok() -> None:
            s.missed = None
            s.cursor = max(s.cursor, p.missed_until)  # type: ignore[type-var]
            self.stats["skipped_fires"] += 1
            log.warning("schedule %s: %s", s.name, err["message"])

        async def fail(e: DbQueryError) -> None:
            if _already_exists(e):
                ok()
                return
            log.warning("schedule %s: missed fires not recorded: %s", s.name, e)
            s.missed = None
        return Unit(f"missed {s.name}", stmts, ok, fail)

    def _fire_unit(self, s: Sched, due: datetime, trigger: str, now: datetime, *,
                   late: bool = False) -> Unit:
        """One fire of `s` due at `due` (manual: the trigger time) under its concurrency
        policy: started, queued, or skipped (`concurrency_skip`)."""
        assert s.spec is not None
        manual = trigger == "manual"
        key = f"{s.name}_m{_ms(due)}" if manual else f"{s.name}_{_ms(due)}"
        mine = self._by_schedule.get(s.name, [])
        running = [f for f in mine if f.status == "running"]
        queued = [f for f in mine if f.status == "queued"]
        policy = s.spec.concurrency
        mode = "start"
        blocked_by: str | None = None
        if running and policy == "skip":
            mode, blocked_by = "skip", record_id_text(running[0].rid)
        elif running and policy == "queue":
            if queued:
                mode, blocked_by = "skip", record_id_text(queued[0].rid)
            else:
                mode = "queue"
        fire = Fire(key, s.name, "running" if mode == "start" else "queued", due, trigger)
        cursor = None if manual else (s.rid, due)
        clear = [(("UPDATE $s SET trigger_requested_at = NONE, last_fired_at = time::now() "
                  "RETURN NONE"), {"s": s.rid})] if manual else []
        base = {"schedule": s.name, "due_at": due, "trigger": trigger,
                "lateness_ms": max(0, _ms(now) - _ms(due)), "catch_up": late}
        stmts: list[tuple[str, dict[str, Any] | None]] = []
        start_ok: Callable[[], None] | None = None
        if mode == "skip":
            err = run_error(errors.CONCURRENCY_SKIP, f"not run: {blocked_by} is still "
                            f"{'waiting' if queued and policy == 'queue' else 'running'} "
                            f"(concurrency {policy})", blocked_by=blocked_by)
            stmts.append((_CREATE_FIRED_DONE, {"f": fire.rid, "c": {**base, "status": "skipped", "error": err}}))
            stmts.append(rollups.increment(s.name, now, "skipped"))
        elif mode == "queue":
            stmts.append(("CREATE $f CONTENT $c RETURN NONE",
                          {"f": fire.rid, "c": {**base, "status": "queued"}}))
        else:
            start_stmts, start_ok = self._start_fire(s, fire, now, create=base)
            stmts += start_stmts
        stmts += clear

        def recorded() -> None:  # the due time is consumed, whatever became of the fire
            if manual:
                if s.trigger_at == due:
                    s.trigger_at = None
            else:
                if s.pending and s.pending[0][0] == due:
                    s.pending.popleft()
                s.cursor = max(s.cursor, due)
                self._plan_next(s)
            s.last_fired_at = self.now()

        def ok() -> None:
            recorded()
            if mode == "skip":
                self.stats["skipped_fires"] += 1
                log.info("schedule %s: fire %s skipped (%s)", s.name, key, blocked_by)
                return
            self.fires[key] = fire
            self.stats["fires"] += 1
            if start_ok is not None:
                start_ok()

        async def fail(e: DbQueryError) -> None:
            if _already_exists(e) and "_00_schedule_run" in e.engine_message:
                log.info("schedule %s: fire %s was recorded already", s.name, key)
                self._resync = True  # read it (and its run) from the database
                if manual:
                    s.trigger_at = None
                elif s.pending and s.pending[0][0] == due:
                    s.pending.popleft()
                    s.cursor = max(s.cursor, due)
                    self._plan_next(s)
                return
            # The job (table target) was refused: the fire is recorded as failed.
            err = run_error(errors.SPAWN_FAILED, f"the database refused the fire's records: "
                            f"{e.engine_message}"[:400])
            fire.status = "running"
            fail_unit = self._fire_end_unit(fire, "failed", err)
            fail_unit.statements[:0] = [(_CREATE_FIRED, {"f": fire.rid, "c": {
                **base, "status": "running"}})]
            fail_unit.statements += clear
            fail_unit.cursor = cursor
            inner = fail_unit.ok

            def failed_ok() -> None:
                recorded()
                self.fires[key] = fire
                if inner is not None:
                    inner()  # the fire's end: out of the active fires, tallied
            fail_unit.ok = failed_ok
            fail_unit.fail = None
            await self._commit_chunk([fail_unit])
        return Unit(f"fire {key}", stmts, ok, fail, cursor=cursor)

    def _start_fire(self, s: Sched, fire: Fire, now: datetime, *,
                    create: dict[str, Any] | None
                    ) -> tuple[list[tuple[str, dict[str, Any] | None]], Callable[[], None]]:
        """Statements starting `fire` (its record created with `create`, or an existing
        queued record updated) and what memory becomes."""
        assert s.spec is not None
        stmts: list[tuple[str, dict[str, Any] | None]] = []
        link: dict[str, Any] = {}
        run_ok: Callable[[], None] | None = None
        problem: dict[str, Any] | None = None
        if s.spec.table is not None:
            job = RecordID(s.spec.table, f"sch_{fire.key}")
            spec = s.spec.model_dump(mode="json")
            link = {"job": job}
            stmts.append(("CREATE $j CONTENT $c RETURN NONE", {"j": job, "c": self._job_content(
                spec, now, schedule=s.name, schedule_run=fire.rid)}))
            fire.job = job
        else:
            wf, why, _ = self.workflows.get(s.spec.workflow or "", (None, None, ""))
            if wf is None:
                code = errors.BAD_DAG if why else errors.NO_TARGET_TABLE
                problem = run_error(code, why or f"workflow {s.spec.workflow} is not defined "
                                    "(svc workflows apply)", workflow=s.spec.workflow)
            else:
                run, run_stmts, run_ok = self._new_run(
                    s.spec.workflow or "", wf, now, trigger="schedule", schedule=s.name,
                    fire=fire.key)
                link = {"run": run.rid}
                stmts += run_stmts
                fire.run = run.key
        status = "failed" if problem else "running"
        if create is not None:
            stmts.insert(0, (_CREATE_FIRED,
                             {"f": fire.rid, "c": {**create, "status": status, **link,
                                                   **({"error": problem, "finished_at": now}
                                                      if problem else {})}}))
        else:
            stmts.insert(0, ("UPDATE $f MERGE $c RETURN NONE", {"f": fire.rid, "c": {
                "status": status, "started_at": now, **link,
                **({"error": problem, "finished_at": now} if problem else {})}}))
        if problem is not None:
            # Recorded as failed at once, counted like any failed fire.
            end = self._fire_end_unit(fire, "failed", problem)
            stmts += end.statements[1:]
            fire.status = "running"

            def ok() -> None:
                if end.ok is not None:
                    end.ok()
            return stmts, ok

        def started() -> None:
            fire.status = "running"
            if run_ok is not None:
                run_ok()
            if fire.job is not None:
                self._poke(fire.job)
        return stmts, started

    def _queue_units(self, now: datetime) -> list[Unit]:
        units = []
        for name, mine in self._by_schedule.items():
            s = self.schedules.get(name)
            if s is None or s.spec is None:
                continue
            queued = sorted((f for f in mine if f.status == "queued"), key=lambda f: f.due)
            if not queued or any(f.status == "running" for f in mine):
                continue
            fire = queued[0]
            stmts, started = self._start_fire(s, fire, now, create=None)
            units.append(Unit(f"start queued {fire.key}", stmts, started))
        return units

    # ------------------------------------------------------------------ new runs
    def _new_run(self, name: str, wf: Workflow, now: datetime, *, trigger: str,
                 schedule: str | None = None, fire: str | None = None,
                 rerun_of: RecordID | None = None, dag: dict[str, Any] | None = None
                 ) -> tuple[Run, list[tuple[str, dict[str, Any] | None]], Callable[[], None]]:
        """A new run of `wf` (or of a frozen `dag`): its rows, and memory once committed."""
        key = _run_key(now)
        specs = dag if dag is not None else wf.model_dump(mode="json")["steps"]
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
            self.runs[key] = run
            self.stats["runs_started"] += 1
        return run, stmts, ok

    # ------------------------------------------------------------------ jobs: poke, kill
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
                    "UPDATE $j SET status = 'failed', kill_requested = true, finished_at = "
                    f"time::now(), errors += {_ERROR_ENTRY} WHERE status = 'pending' "
                    "RETURN NONE; UPDATE $j SET kill_requested = true WHERE status = "
                    "'processing' RETURN NONE",
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

    # ------------------------------------------------------------------ quarantine
    def _quarantine_incident(self, s: Sched, *, restarted: bool = False) -> None:
        if self.incidents is None or s.quarantined is None:
            return
        component = f"schedule:{s.name}/{s.quarantined.get('key')}"
        if self.incidents.find_open(component, "schedule_quarantined") is not None:
            return
        why = ("still quarantined after a scheduler restart" if restarted else
               f"quarantined after {s.quarantined.get('failures')} failed fires in a row "
               f"({s.quarantined.get('key')}); it fires again once released")
        iid = self.incidents.open(component, "schedule_quarantined", why)
        s.quarantined["incident"] = iid
        log.warning("schedule %s %s", s.name, why)

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
