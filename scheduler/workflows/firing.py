"""The schedule clock: due times from cron and time zone, fires (each one unit: the schedule
run, its run or job, the cursor), the concurrency policy (`concurrency_skip` or queued),
catch-up after an outage (`clock.catch_up`: the newest fire, the rest recorded as missed),
the start of queued fires. (A fire's ending, with its rollup and quarantine, is in
`endings`: runs end fires too.)"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from surrealdb import RecordID

from dbclient import DbQueryError
from engine.values import record_id_text
from jobs import rows
from scheduler.workflows import clock, errors, rollups
from scheduler.workflows.commits import Committer, already_exists
from scheduler.workflows.endings import Endings
from scheduler.workflows.errors import run_error
from scheduler.workflows.ids import ms as _ms
from scheduler.workflows.ids import rid as _rid
from scheduler.workflows.jobcalls import JobCalls
from scheduler.workflows.runstate import RunStates
from scheduler.workflows.state import Fire, Memory, Sched, Unit

log = logging.getLogger("scheduler.workflows")

__all__ = ["Firing"]

AHEAD_CHUNK = 50  # schedules planned ahead between yields to the loop

# A schedule run record stamped with the database's clock when the fire commits (lateness).
_CREATE_FIRED = "CREATE $f CONTENT object::extend($c, {fired_at: time::now()}) RETURN NONE"
_CREATE_FIRED_DONE = ("CREATE $f CONTENT object::extend($c, {fired_at: time::now(), "
                      "finished_at: time::now()}) RETURN NONE")

class Firing:
    """Units that fire schedules and start queued fires. A workflow target's fire starts a
    run (`RunStates.new_run`)."""

    def __init__(self, memory: Memory, committer: Committer, endings: Endings,
                 runstates: RunStates, jobcalls: JobCalls) -> None:
        self.memory = memory
        self.committer = committer
        self.endings = endings
        self.runstates = runstates
        self.jobcalls = jobcalls
        #: the active fires of each schedule as the round began (`index_fires`): a round's
        #: units are decided against one picture, whatever they change once committed
        self._by_schedule: dict[str, list[Fire]] = {}

    def index_fires(self) -> None:
        """The active fires by schedule, once per round of decisions."""
        out: dict[str, list[Fire]] = {}
        for f in self.memory.fires.values():
            out.setdefault(f.schedule, []).append(f)
        self._by_schedule = out

    def schedule_units(self, now: datetime) -> list[Unit]:
        units: list[Unit] = []
        for s in list(self.memory.schedules.values()):
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
                after = None
                if now - s.next_due <= clock.ON_TIME and s.cursor < s.next_due:
                    after = s.ahead[1] if s.ahead is not None and s.ahead[0] == s.next_due \
                        else clock.next_due(s.spec.cron, s.spec.timezone, s.next_due)
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
                    s.plan_next()
            if s.missed is not None:
                units.append(self._missed_unit(s, s.missed))
            elif s.pending:
                due, late = s.pending[0]
                units.append(self._fire_unit(s, due, "schedule", now, late=late))
        return units

    async def plan_ahead(self, until: float) -> None:
        """While nothing is due: compute each active schedule's due time after its next one
        (`Sched.ahead`), until monotonic time `until` or a wake. At a due time shared by many
        schedules (1,000 `* * * * *`) this cron work (~0.3 ms each) would otherwise delay
        the fires' commit. Yields to the loop every `AHEAD_CHUNK` schedules; a value computed
        for a next_due that has moved since is ignored by the fire."""
        n = 0
        for s in list(self.memory.schedules.values()):
            if not s.active or s.spec is None or s.next_due is None \
                    or (s.ahead is not None and s.ahead[0] == s.next_due):
                continue
            due = s.next_due
            try:
                s.ahead = (due, clock.next_due(s.spec.cron, s.spec.timezone, due))
            except Exception:  # noqa: BLE001 - the fire computes it again and logs why
                s.ahead = None
            n += 1
            if n % AHEAD_CHUNK == 0:
                await asyncio.sleep(0)
                if self.memory.wake.is_set() or time.monotonic() >= until:
                    return

    def _missed_unit(self, s: Sched, p: clock.CatchUp) -> Unit:
        assert p.missed_until is not None and p.missed_since is not None
        key = f"{s.name}_missed_{_ms(p.missed_until)}"
        n = f"at least {p.missed_count}" if p.count_truncated else str(p.missed_count)
        err = run_error(errors.NOT_STARTED, f"{n} fires were due while the scheduler could not "
                        f"fire them; beyond the catch-up bound ({s.spec.catch_up if s.spec else 0}"
                        ") they are not run", since=_ms(p.missed_since),
                        until=_ms(p.missed_until), missed=p.missed_count)
        stmts: list[tuple[str, dict[str, Any] | None]] = [
            ("CREATE $f CONTENT $c RETURN NONE", {"f": _rid("_00_schedule_run", key), "c": {
                "schedule": s.name, "due_at": p.missed_until, "fired_at": self.memory.now(),
                "trigger": "schedule", "status": "skipped", "error": err,
                "finished_at": self.memory.now()}}),
            rollups.increment(s.name, self.memory.now(), "skipped"),
            ("UPDATE $s SET last_due_at = $d RETURN NONE", {"s": s.rid, "d": p.missed_until}),
        ]

        def ok() -> None:
            s.missed = None
            if p.missed_until is not None:
                s.cursor = max(s.cursor, p.missed_until)
            self.memory.stats["skipped_fires"] += 1
            log.warning("schedule %s: %s", s.name, err["message"])

        async def fail(e: DbQueryError) -> None:
            if already_exists(e):
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
                s.plan_next()
            s.last_fired_at = self.memory.now()

        def ok() -> None:
            recorded()
            if mode == "skip":
                self.memory.stats["skipped_fires"] += 1
                log.info("schedule %s: fire %s skipped (%s)", s.name, key, blocked_by)
                return
            self.memory.fires[key] = fire
            self.memory.stats["fires"] += 1
            if start_ok is not None:
                start_ok()

        async def fail(e: DbQueryError) -> None:
            if already_exists(e) and "_00_schedule_run" in e.engine_message:
                log.info("schedule %s: fire %s was recorded already", s.name, key)
                self.memory.resync = True  # read it (and its run) from the database
                if manual:
                    s.trigger_at = None
                elif s.pending and s.pending[0][0] == due:
                    s.pending.popleft()
                    s.cursor = max(s.cursor, due)
                    s.plan_next()
                return
            # The job (table target) was refused: the fire is recorded as failed.
            err = run_error(errors.SPAWN_FAILED, f"the database refused the fire's records: "
                            f"{e.engine_message}"[:400])
            log.warning("schedule %s: fire %s failed (spawn_failed): %s", s.name, key,
                        e.engine_message[:300])
            fire.status = "running"
            fail_unit = self.endings.fire_end_unit(fire, "failed", err)
            fail_unit.statements[:0] = [(_CREATE_FIRED, {"f": fire.rid, "c": {
                **base, "status": "running"}})]
            fail_unit.statements += clear
            fail_unit.cursor = cursor
            inner = fail_unit.ok

            def failed_ok() -> None:
                recorded()
                self.memory.fires[key] = fire
                if inner is not None:
                    inner()  # the fire's end: out of the active fires, tallied
            fail_unit.ok = failed_ok
            fail_unit.fail = None
            await self.committer.commit_chunk([fail_unit])
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
            spec = s.job_spec
            link = {"job": job}
            stmts.append(("CREATE $j CONTENT $c RETURN NONE", {"j": job, "c": rows.new_row(
                spec, now, schedule=s.name, schedule_run=fire.rid)}))
            fire.job = job
        else:
            wf, why, _ = self.memory.workflows.get(s.spec.workflow or "", (None, None, ""))
            if wf is None:
                code = errors.BAD_DAG if why else errors.NO_TARGET_TABLE
                problem = run_error(code, why or f"workflow {s.spec.workflow} is not defined "
                                    "(svc workflows apply)", workflow=s.spec.workflow)
            else:
                run, run_stmts, run_ok = self.runstates.new_run(
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
            end = self.endings.fire_end_unit(fire, "failed", problem)
            stmts += end.statements[1:]
            fire.status = "running"

            def ok() -> None:  # logged once recorded (a decision may be made again)
                log.warning("schedule %s: fire %s failed (%s): %s", s.name, fire.key,
                            problem["code"], problem["message"])
                if end.ok is not None:
                    end.ok()
            return stmts, ok

        def started() -> None:
            fire.status = "running"
            if run_ok is not None:
                run_ok()
            if fire.job is not None:
                self.jobcalls.poke(fire.job)
        return stmts, started

    def queue_units(self, now: datetime) -> list[Unit]:
        units = []
        for name, mine in self._by_schedule.items():
            s = self.memory.schedules.get(name)
            if s is None or s.spec is None:
                continue
            queued = sorted((f for f in mine if f.status == "queued"), key=lambda f: f.due)
            if not queued or any(f.status == "running" for f in mine):
                continue
            fire = queued[0]
            stmts, started = self._start_fire(s, fire, now, create=None)
            units.append(Unit(f"start queued {fire.key}", stmts, started))
        return units
