"""The `workflows:` and `schedules:` sections of the root `project.yml` (pydantic v2 models).

```yaml
workflows:
  nightly_report:
    deadline: 30m                 # optional: the run fails `deadline_exceeded` after this
    steps:
      extract:   {table: job, path: /extract, payload: {day: today}, retries: 2, timeout: 60s}
      transform: {table: job, path: /transform, depends_on: [extract]}
      load:      {table: job, path: /load, depends_on: [transform]}
schedules:
  nightly:
    cron: "0 3 * * *"             # 5 fields, or 6 with seconds first ("*/10 * * * * *")
    timezone: Europe/Berlin       # IANA name, default UTC
    workflow: nightly_report      # the target: a workflow ...
  cleanup:
    cron: "*/15 * * * *"
    table: job                    # ... or one outbox job in a job table (path, payload,
    path: /cleanup                #     retries, timeout as for a step)
    concurrency: skip             # skip (default) | queue | allow
    catch_up: 1                   # missed fires run after downtime, newest first (default 1)
    quarantine_after: 5           # consecutive failed fires before quarantine (0: never)
    enabled: true
```

Rules (refused at load, every problem listed with a `code` and the key path):

* a step's `depends_on` naming no step of its workflow, a step depending on itself, or a cycle
  (found with :mod:`graphlib`): `bad_dag`;
* a schedule with neither `table` nor `workflow`, or naming a workflow that is not defined:
  `no_target_table`; both at once: `invalid`;
* anything else malformed (unknown key, bad cron, unknown timezone, bad duration, a table name
  that is not an identifier or is a `_00_` service table): `invalid`.

Only these two sections are read; the root file's other keys are left to their own models
(:func:`load_section` ignores them). Durations are seconds (a number) or text such as `90s`,
`5m`, `1h30m`, `2d`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from graphlib import CycleError, TopologicalSorter
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

__all__ = [
    "AD_HOC", "CONCURRENCY", "DefinitionError", "DefinitionIssue", "Schedule", "Step",
    "Workflow", "WorkflowsSection", "definition_hash", "load_schedule", "load_section",
    "load_workflow", "parse_duration", "topological_order",
]

#: the rollup bucket of runs no schedule owns (reruns, manual runs)
AD_HOC = "(ad-hoc)"
CONCURRENCY = ("skip", "queue", "allow")
MAX_STEPS = 200

_NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_NOT_A_DURATION = "a duration: seconds or text such as 30s, 5m, 1h30m"
_UNIT_SECS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

Name = Annotated[str, StringConstraints(pattern=_NAME)]


def parse_duration(value: Any) -> float:
    """Seconds from a number or duration text (`90s`, `5m`, `1h30m`, `2d`, `250ms`);
    ValueError when it is neither or not positive."""
    if isinstance(value, bool):
        raise ValueError(_NOT_A_DURATION)  # noqa: TRY004 - pydantic reports ValueError
    if isinstance(value, (int, float)):
        secs = float(value)
    elif isinstance(value, str):
        text = value.strip()
        pos, secs = 0, 0.0
        while pos < len(text):
            m = _DURATION.match(text, pos)
            if m is None:
                raise ValueError(f"{value!r} is not a duration such as 30s, 5m, 1h30m")
            secs += float(m.group(1)) * _UNIT_SECS[m.group(2)]
            pos = m.end()
        if not text:
            raise ValueError("an empty duration")
    else:
        raise ValueError(_NOT_A_DURATION)  # noqa: TRY004 - pydantic reports ValueError
    if not secs > 0 or secs > 366 * 86400:
        raise ValueError(f"{value!r}: a duration must be positive and at most a year")
    return secs


def _duration(value: Any) -> float | None:
    return None if value is None else parse_duration(value)


Duration = Annotated[float | None, BeforeValidator(_duration)]


def _table(value: str) -> str:
    if not _TABLE.match(value):
        raise ValueError(f"{value[:80]!r} is not a table name (letters, digits, _)")
    if value.startswith("_00_"):
        raise ValueError(f"{value} is a service table, not a job table")
    return value


class _Job(BaseModel):
    """What one outbox job row gets: where to call and with what (steps and table targets)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(default="/", max_length=2000)
    payload: dict[str, Any] = Field(default_factory=dict)
    #: the step's retry budget: the job row's `max_retries` (attempts after the first)
    retries: int = Field(default=3, ge=0, le=100)
    #: one backend call's timeout (the job row's `timeout_secs`); the table's own otherwise
    timeout: Duration = None


class Step(_Job):
    """One step of a workflow: an outbox job in `table`, started when `depends_on` completed."""

    table: str
    depends_on: list[Name] = Field(default_factory=list, max_length=MAX_STEPS)

    @field_validator("table")
    @classmethod
    def _step_table(cls, v: str) -> str:
        return _table(v)


class Workflow(BaseModel):
    """A DAG of steps; `deadline` bounds a run from its start (and from each retry)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: dict[Name, Step] = Field(min_length=1, max_length=MAX_STEPS)
    deadline: Duration = None
    description: str | None = Field(default=None, max_length=2000)

    @model_validator(mode="after")
    def _dag(self) -> Workflow:
        for name, step in self.steps.items():
            for dep in step.depends_on:
                if dep == name:
                    raise PydanticCustomError("bad_dag", "step {step} depends on itself",
                                              {"step": name})
                if dep not in self.steps:
                    raise PydanticCustomError(
                        "bad_dag", "step {step} depends on {dep}, which is not a step of this "
                        "workflow", {"step": name, "dep": dep})
        try:
            topological_order(self.steps)
        except CycleError as e:
            cycle = " -> ".join(str(x) for x in e.args[1])
            raise PydanticCustomError("bad_dag", "the steps form a cycle: {cycle}",
                                      {"cycle": cycle}) from None
        return self


class Schedule(_Job):
    """A cron schedule firing one outbox job (`table`) or one run of a `workflow`."""

    cron: str = Field(max_length=200)
    timezone: str = "UTC"
    table: str | None = None
    workflow: Name | None = None
    concurrency: Literal["skip", "queue", "allow"] = "skip"
    catch_up: int = Field(default=1, ge=0, le=100)
    quarantine_after: int = Field(default=5, ge=0, le=10_000)
    enabled: bool = True
    description: str | None = Field(default=None, max_length=2000)

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str) -> str:
        text = " ".join(v.split())
        if len(text.split(" ")) not in (5, 6) and not text.startswith("@"):
            raise ValueError("cron: 5 fields (minute hour day month weekday), or 6 with "
                             "seconds first")
        try:
            CronSim(text, datetime(2000, 1, 1))
        except CronSimError as e:
            raise ValueError(f"cron {text!r}: {e}") from None
        return text

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{v[:80]!r} is not an IANA time zone such as UTC or "
                             "Europe/Berlin") from None
        return v

    @field_validator("table")
    @classmethod
    def _target_table(cls, v: str | None) -> str | None:
        return None if v is None else _table(v)

    @model_validator(mode="after")
    def _target(self) -> Schedule:
        if self.table is None and self.workflow is None:
            raise PydanticCustomError("no_target_table", "the schedule has no target: set "
                                      "`table` (one job) or `workflow`", {})
        if self.table is not None and self.workflow is not None:
            raise ValueError("set `table` or `workflow`, not both")
        return self


class WorkflowsSection(BaseModel):
    """The two sections together (a schedule may name a workflow of the same file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workflows: dict[Name, Workflow] = Field(default_factory=dict)
    schedules: dict[Name, Schedule] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _targets(self) -> WorkflowsSection:
        for name, s in self.schedules.items():
            if s.workflow is not None and s.workflow not in self.workflows:
                raise PydanticCustomError(
                    "no_target_table", "schedule {name} targets workflow {workflow}, which is "
                    "not defined", {"name": name, "workflow": s.workflow})
        return self


def topological_order(steps: Mapping[str, Any]) -> list[str]:
    """Step names, each after its dependencies (ties in definition order); CycleError."""
    ts: TopologicalSorter[str] = TopologicalSorter()
    for name, step in steps.items():
        deps = step.depends_on if hasattr(step, "depends_on") else step.get("depends_on", [])
        ts.add(name, *deps)
    position = {n: i for i, n in enumerate(steps)}
    ts.prepare()
    out: list[str] = []
    while ts.is_active():
        ready = sorted(ts.get_ready(), key=lambda n: position.get(n, len(position)))
        out.extend(ready)
        ts.done(*ready)
    return out


def definition_hash(model: BaseModel) -> str:
    """A stable fingerprint of a definition (what `svc workflows apply` compares)."""
    text = json.dumps(model.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class DefinitionIssue:
    """One problem: `code` (`bad_dag`, `no_target_table`, `invalid`), key path, sentence."""

    code: str
    path: str
    message: str

    def public(self) -> dict[str, str]:
        return {"code": self.code, "path": self.path, "message": self.message}


class DefinitionError(ValueError):
    """The sections are refused; `issues` lists every problem found."""

    def __init__(self, issues: list[DefinitionIssue]) -> None:
        super().__init__("; ".join(f"{i.path}: {i.message} ({i.code})" for i in issues))
        self.issues = issues

    @property
    def codes(self) -> set[str]:
        return {i.code for i in self.issues}


def _issues(err: ValidationError, prefix: str = "") -> list[DefinitionIssue]:
    out = []
    for e in err.errors(include_url=False):
        code = e["type"] if e["type"] in ("bad_dag", "no_target_table") else "invalid"
        loc: tuple[Any, ...] = tuple(e["loc"])
        ctx = e.get("ctx") or {}
        if not loc and code == "no_target_table" and "name" in ctx:
            loc = ("schedules", ctx["name"], "workflow")  # the cross-section check
        path = ".".join(str(p) for p in (prefix, *loc) if p != "")
        message = str(e["msg"]).removeprefix("Value error, ")
        out.append(DefinitionIssue(code, path or "(root)", message))
    return out


def load_section(doc: Mapping[str, Any] | None) -> WorkflowsSection:
    """The `workflows` and `schedules` of a parsed root project file (other keys ignored);
    DefinitionError listing every problem."""
    if doc is None:
        doc = {}
    if not isinstance(doc, Mapping):
        raise DefinitionError([DefinitionIssue("invalid", "(root)",
                                               "the project file must be a mapping")])
    part = {k: doc[k] for k in ("workflows", "schedules") if doc.get(k) is not None}
    try:
        return WorkflowsSection.model_validate(part)
    except ValidationError as e:
        raise DefinitionError(_issues(e)) from None


def load_workflow(name: str, spec: Mapping[str, Any]) -> Workflow:
    """One stored workflow definition (a `_00_workflow` row's `spec`); DefinitionError."""
    try:
        return Workflow.model_validate(spec)
    except ValidationError as e:
        raise DefinitionError(_issues(e, f"workflows.{name}")) from None


def load_schedule(name: str, spec: Mapping[str, Any]) -> Schedule:
    """One stored schedule definition (a `_00_schedule` row's `spec`); DefinitionError."""
    try:
        return Schedule.model_validate(spec)
    except ValidationError as e:
        raise DefinitionError(_issues(e, f"schedules.{name}")) from None
