"""The endings every part of the engine records: a step's (its job ended, was lost or never
claimed, or was refused) and a fire's (with its rollup and, for first endings, the schedule's
`last_run_*` fields, failure count and quarantine). The run state machine, the schedule clock
and the job follower all end steps and fires; they share these units, kept below all three."""

from __future__ import annotations

import logging
from typing import Any

from dbclient import DbQueryError
from scheduler.workflows import rollups
from scheduler.workflows.ids import ms as _ms
from scheduler.workflows.ids import step_rid as _step_rid
from scheduler.workflows.quarantine import Quarantines
from scheduler.workflows.state import Fire, Memory, Run, Step, Unit

log = logging.getLogger("scheduler.workflows")

__all__ = ["Endings"]


class Endings:
    def __init__(self, memory: Memory, quarantines: Quarantines) -> None:
        self.memory = memory
        self.quarantines = quarantines

    def fire_end_unit(self, fire: Fire, status: str, err: dict[str, Any] | None) -> Unit:
        """A fire's ending: its record, the rollup, and (first endings only, not a retried
        run's: spec note) the schedule's `last_run_*` fields, failure count, quarantine."""
        mem = self.memory
        now = mem.now()
        stmts: list[tuple[str, dict[str, Any] | None]] = [
            ("UPDATE $f SET status = $st, error = $e, finished_at = time::now() RETURN NONE",
             {"f": fire.rid, "st": status, "e": err}),
            rollups.increment(fire.schedule, now, "success" if status == "completed"
                              else "failure"),
        ]
        s = mem.schedules.get(fire.schedule)
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
            mem.fires.pop(fire.key, None)
            if s is not None and not fire.retried:
                s.failures = failures
                if quarantine is not None:
                    s.quarantined = quarantine
                    self.quarantines.opened(s)
        return Unit(f"fire {fire.key} {status}", stmts, ok)

    def step_end_unit(self, run: Run, st: Step, status: str, error: dict[str, Any] | None,
                      guard: list[tuple[str, dict[str, Any] | None]] | None = None) -> Unit:
        """A step's ending; `guard` statements go first (a never-claimed job failed only
        while it is still pending: `claimed meanwhile` refuses the unit)."""
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
            self.memory.resync = True
        return Unit(f"step {run.key}/{st.name} {status}", stmts, ok, fail)
