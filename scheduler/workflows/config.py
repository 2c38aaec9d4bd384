"""The workflow engine's settings (parsed once by :mod:`scheduler.config`, field `workflows`).

| variable | default | what |
|---|---|---|
| `SVC_WORKFLOWS_ENABLED` | true | false: no clock, no runs (the admin routes answer 503) |
| `SVC_WORKFLOW_POLL_MS` | 1000 | how often the step and schedule jobs are read; a `/job/result` post for a followed job reads them at once |
| `SVC_WORKFLOW_DEFINITIONS_POLL_SECS` | 5 | how often `_00_workflow` / `_00_schedule` are checked for definitions `svc workflows apply` changed |
| `SVC_WORKFLOW_DISPATCH_TIMEOUT_SECS` | 3600 | a step's or fire's job still `pending` (no SSP claimed it) after this long fails `never_dispatched` and is failed itself; 0: never. A job also waits `pending` for a free concurrency slot of its table, so keep it above the longest queue wait |
| `SVC_WORKFLOW_RETENTION_DAYS` | 30 | finished runs, their steps, schedule runs and rollup days older than this are deleted (hourly) |
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WorkflowConfig"]


@dataclass(frozen=True)
class WorkflowConfig:
    enabled: bool = True
    poll_ms: int = 1000
    definitions_poll_secs: int = 5
    dispatch_timeout_secs: int = 3600
    retention_days: int = 30
