"""The workflow engine's memory: what is active (steps of running runs, fires, schedules) and
the unit of decision (`Unit`: the statements recording one decision and what memory becomes
once they committed). Plain data; the engine (`scheduler.workflows.engine`) owns every change."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from surrealdb import RecordID

from dbclient import Database, DbQueryError
from project.workflows import Schedule, Workflow
from scheduler.workflows import clock, runs
from scheduler.workflows.config import WorkflowConfig
from scheduler.workflows.ids import rid as _rid

__all__ = ["EngineState", "Fire", "Run", "Sched", "Step", "Unit"]


@dataclass
class Step:
    name: str
    table: str
    spec: dict[str, Any]  # path, payload, retries, timeout (frozen with the run)
    depends_on: list[str]
    status: str = runs.BLOCKED
    attempt: int = 0
    job: RecordID | None = None
    kill_sent: bool = False
    halt: dict[str, Any] | None = None  # the error a killed step ends with


@dataclass
class Run:
    key: str
    workflow: str
    steps: dict[str, Step]
    trigger: str
    schedule: str | None
    fire: str | None  # schedule run key
    created: datetime
    deadline_secs: float | None
    deadline: datetime | None
    retry_count: int | None = None
    kill_requested: bool = False
    status: str = "running"

    @cached_property
    def rid(self) -> RecordID:  # built once: a fire pass asks for thousands
        return _rid("_00_workflow_run", self.key)


@dataclass
class Fire:
    key: str
    schedule: str
    status: str  # running | queued
    due: datetime
    trigger: str
    job: RecordID | None = None  # table targets
    run: str | None = None  # workflow targets
    retried: bool = False

    @cached_property
    def rid(self) -> RecordID:
        return _rid("_00_schedule_run", self.key)


@dataclass
class Sched:
    name: str
    spec: Schedule | None
    problem: str | None  # why the stored definition is unusable
    hash: str
    applied_at: datetime | None
    paused: bool = False
    quarantined: dict[str, Any] | None = None
    failures: int = 0
    cursor: datetime = field(default_factory=lambda: datetime.now(UTC))
    trigger_at: datetime | None = None
    next_due: datetime | None = None
    following: datetime | None = None  # the due time after next_due, when already computed
    #: (next_due, the due time after it), computed while nothing was due (`_plan_ahead`), so
    #: that a fire does not run the cron at its due time; stale once next_due moved
    ahead: tuple[datetime, datetime] | None = None
    last_fired_at: datetime | None = None
    # due times to fire, oldest first, each with whether it is a catch-up (not the clock's
    # newest on-time due time)
    pending: deque[tuple[datetime, bool]] = field(default_factory=deque)
    missed: clock.CatchUp | None = None

    @property
    def active(self) -> bool:
        return (self.spec is not None and self.spec.enabled and not self.paused
                and self.quarantined is None)

    @cached_property
    def rid(self) -> RecordID:
        return _rid("_00_schedule", self.name)

    @cached_property
    def job_spec(self) -> dict[str, Any]:
        """The definition as JSON (a table target's job fields), dumped once per definition
        (a reload makes a new Sched): pydantic's dump costs ~0.3 ms per fire otherwise."""
        assert self.spec is not None
        return self.spec.model_dump(mode="json")


@dataclass
class Unit:
    """Statements recording one decision; `ok` applies it to memory once committed; `fail`
    handles a refusal of this unit alone (the database's message)."""

    label: str
    statements: list[tuple[str, dict[str, Any] | None]]
    ok: Callable[[], None] | None = None
    fail: Callable[[DbQueryError], Awaitable[None]] | None = None
    #: a schedule's cursor move (`last_due_at`): written with the unit, grouped per due time
    #: across the units of one transaction (one UPDATE of many schedules, not one each)
    cursor: tuple[RecordID, datetime] | None = None


class EngineState:
    """The state the workflow engine's parts (its mixins: `loading`, `commits`, `following`,
    `runstate`, `firing`, `actions`) work on, declared once; `WorkflowEngine.__init__` sets it.
    (The parts also call each other's methods, which mypy cannot see from one part alone: the
    override in pyproject.toml.)"""

    db: Database
    cfg: WorkflowConfig
    lock: asyncio.Lock
    now: Callable[[], datetime]
    #: name -> (definition, or None when refused; why it was refused; the stored hash)
    workflows: dict[str, tuple[Workflow | None, str | None, str]]
    schedules: dict[str, Sched]
    runs: dict[str, Run]
    fires: dict[str, Fire]
    stats: dict[str, int]
    incidents: Any
    state: str  # starting | no_schema | ready | disabled
    version: int | None
    _resync: bool
    _last_full: float
    _dirty: set[str]
    _defs_seen: tuple[Any, ...] | None
    _wake: asyncio.Event
    _poking: dict[str, bool]
    _by_schedule: dict[str, list[Fire]]
    _job_plane: Callable[[], Any]
    _ssps_ready: Callable[[], bool]
    run_end_hooks: list[Callable[[str, str, dict[str, Any] | None], None]]
