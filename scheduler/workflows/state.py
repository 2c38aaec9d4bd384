"""The workflow engine's memory: what is active (steps of running runs, fires, schedules), the
unit of decision (`Unit`: the statements recording one decision and what memory becomes once
they committed) and `Memory`, the one store of it that every part of the engine is handed
(the lowest piece of the engine: it calls none of them)."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from surrealdb import RecordID

from dbclient import DbQueryError
from project.workflows import Schedule, Workflow
from scheduler.workflows import clock, runs
from scheduler.workflows.ids import rid as _rid

log = logging.getLogger("scheduler.workflows")

__all__ = ["Fire", "Memory", "Run", "Sched", "Step", "Unit"]


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
    #: (next_due, the due time after it), computed while nothing was due (`Firing.plan_ahead`), so
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

    def plan_next(self) -> None:
        """`next_due` from the cursor (the value planned with the last fire when it is for
        this cursor)."""
        if self.spec is None:
            self.next_due = None
            return
        if self.following is not None and self.next_due is not None \
                and self.cursor == self.next_due:
            self.next_due, self.following = self.following, None  # computed with the fire
            return
        self.following = None
        try:
            self.next_due = clock.next_due(self.spec.cron, self.spec.timezone, self.cursor)
        except Exception as e:  # noqa: BLE001 - a cron cronsim accepted but cannot iterate
            log.warning("schedule %s: no next fire (%s)", self.name, e)
            self.next_due = None

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


class Memory:
    """What the engine knows and believes (written before believed: a `Unit`'s `ok`), its lock,
    its wake and its hooks. Every part of the engine is handed this one store; the parts never
    hold each other's state."""

    def __init__(self, now: Callable[[], datetime]) -> None:
        self.now = now
        #: operator actions and the loop's pass take it: one decision maker at a time
        self.lock = asyncio.Lock()
        #: name -> (definition, or None when refused; why it was refused; the stored hash)
        self.workflows: dict[str, tuple[Workflow | None, str | None, str]] = {}
        self.schedules: dict[str, Sched] = {}
        self.runs: dict[str, Run] = {}
        self.fires: dict[str, Fire] = {}
        self.state = "starting"  # starting | no_schema | ready | disabled
        self.version: int | None = None
        #: memory may be wrong (a refusal without a handler, a database error): the loop
        #: reads it again from the database before deciding anything more
        self.resync = True
        #: set when the loop must run its pass now (a job result, an operator action)
        self.wake = asyncio.Event()
        self.stats = {"fires": 0, "skipped_fires": 0, "runs_started": 0, "steps_started": 0,
                      "runs_ended": 0, "passes": 0, "resyncs": 0}
        self.change_hooks: list[Callable[[], None]] = []
        self.run_end_hooks: list[Callable[[str, str, dict[str, Any] | None], None]] = []

    def changed(self) -> None:
        """Tell the change hooks (the admin plane's event stream) that something moved."""
        for fn in list(self.change_hooks):
            try:
                fn()
            except Exception:
                log.exception("workflow change hook failed")

    def run_ended(self, key: str, status: str, err: dict[str, Any] | None) -> None:
        for fn in list(self.run_end_hooks):
            try:
                fn(key, status, err)
            except Exception:
                log.exception("run end hook failed")
