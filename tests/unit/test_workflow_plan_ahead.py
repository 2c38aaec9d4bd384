"""The schedule clock's work done ahead of a due time (`Firing.plan_ahead`): each active
schedule's due time after its next one is computed while nothing is due, the fire uses it
only while it still belongs to that next due time, and the planning yields to a wake. No
database: only the in-memory planning and the building of fire units are exercised."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from project.workflows import load_schedule
from scheduler.workflows.config import WorkflowConfig
from scheduler.workflows.engine import WorkflowEngine
from scheduler.workflows.state import Sched

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def engine_with(n: int, now: datetime) -> tuple[WorkflowEngine, list[Sched]]:
    db: Any = None  # never reached: nothing here commits
    eng = WorkflowEngine(db, WorkflowConfig(), now=lambda: now)
    scheds = []
    for i in range(n):
        spec = load_schedule(f"s{i}", {"cron": "* * * * *", "table": "job", "path": "/ok"})
        s = Sched(f"s{i}", spec, None, "h", T0, cursor=T0, next_due=T0 + MINUTE)
        eng.schedules[s.name] = s
        scheds.append(s)
    return eng, scheds


def test_the_due_time_after_the_next_is_planned_ahead_and_used_by_the_fire() -> None:
    eng, (s,) = engine_with(1, T0 + MINUTE + timedelta(milliseconds=5))
    asyncio.run(eng.firing.plan_ahead(time.monotonic() + 60))
    assert s.ahead == (T0 + MINUTE, T0 + 2 * MINUTE)
    s.ahead = (T0 + MINUTE, T0 + 7 * MINUTE)  # a marker: the fire must take this value
    units = eng.firing.schedule_units(T0 + MINUTE + timedelta(milliseconds=5))
    assert [u.label for u in units] == [f"fire s0_{int((T0 + MINUTE).timestamp() * 1000)}"]
    assert s.following == T0 + 7 * MINUTE
    assert s.job_spec is s.job_spec and s.job_spec["path"] == "/ok"  # dumped once


def test_a_value_planned_for_another_next_due_is_not_used() -> None:
    eng, (s,) = engine_with(1, T0 + MINUTE)
    s.ahead = (T0, T0 + 9 * MINUTE)  # planned before next_due moved
    eng.firing.schedule_units(T0 + MINUTE)
    assert s.following == T0 + 2 * MINUTE  # computed from the cron at the fire
    asyncio.run(eng.firing.plan_ahead(time.monotonic() + 60))
    assert s.ahead is not None and s.ahead[0] == s.next_due


def test_planning_ahead_yields_to_a_wake_and_skips_inactive_schedules() -> None:
    eng, scheds = engine_with(120, T0)
    scheds[0].paused = True

    async def woken() -> None:
        eng.memory.wake.set()  # a job result arrived: the loop must run its pass, not plan
        await eng.firing.plan_ahead(time.monotonic() + 60)
    asyncio.run(woken())
    planned = [s for s in scheds if s.ahead is not None]
    assert 0 < len(planned) < len(scheds) - 1
    assert scheds[0].ahead is None
    eng.memory.wake.clear()  # (the loop clears it when it sleeps next)
    asyncio.run(eng.firing.plan_ahead(time.monotonic() + 60))  # no wake: all active ones
    assert all(s.ahead == (T0 + MINUTE, T0 + 2 * MINUTE) for s in scheds[1:])
    assert scheds[0].ahead is None
