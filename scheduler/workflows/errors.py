"""Structured run failure codes (spec, "Workflow and schedule records") and the `error` object.

Every `error` on a run, a step or a schedule run is `{code, message, ...ids}`: a stable code,
one sentence, and the ids that say what it is about. Where each code comes from:

| code | on | when |
|---|---|---|
| `concurrency_skip` | schedule run | a fire found the schedule's previous run still running (policy `skip`, or `queue` with a fire already waiting); `blocked_by` |
| `upstream_failed` | step (skipped) | a dependency failed, was skipped or was killed; `blocked_by` |
| `run_halted` | step (skipped) | the run ended (cancelled, deadline) before the step could start; `run_error` |
| `not_started` | schedule run (skipped) | fires missed while the scheduler was down, beyond the schedule's `catch_up` bound; `since`, `until`, `missed` |
| `never_dispatched` | step, schedule run | the job stayed `pending`, claimed by no SSP, for `SVC_WORKFLOW_DISPATCH_TIMEOUT_SECS` counted while at least one SSP was ready (no SSP serves its table); the job is failed so a late SSP never runs it; `job`, `since` |
| `lost_dispatch` | step, schedule run | found at scheduler start: the job row of a dispatched step is gone (removed while the scheduler was down): whether it ran is unknown, so it is not run again; `job` |
| `job_failed` | step, schedule run | the job ended `failed` (its last error in the message); `job`, `kind` |
| `job_missing` | step, schedule run | the job row disappeared while the scheduler followed it; `job` |
| `step_failed` | run, schedule run | the run ended with failed steps; `failed_steps` |
| `deadline_exceeded` | run, step | the run passed its deadline: running steps' jobs are killed, the run fails at once; `since` |
| `killed` | run, step | cancelled by an operator; `run` |
| `spawn_failed` | step, schedule run | the job row could not be created (the database refused it: a table event or assertion); `job` |
| `bad_dag` | run, schedule run (and the CLI) | the workflow's stored definition is not a valid DAG |
| `no_target_table` | schedule run (and the CLI) | the schedule's target is missing: no table or workflow, or the workflow is not defined |
"""

from __future__ import annotations

from typing import Any

__all__ = ["CODES", "NotFound", "OpError", "Unavailable", "run_error"]

CONCURRENCY_SKIP = "concurrency_skip"
UPSTREAM_FAILED = "upstream_failed"
RUN_HALTED = "run_halted"
NOT_STARTED = "not_started"
NEVER_DISPATCHED = "never_dispatched"
LOST_DISPATCH = "lost_dispatch"
JOB_FAILED = "job_failed"
JOB_MISSING = "job_missing"
STEP_FAILED = "step_failed"
DEADLINE_EXCEEDED = "deadline_exceeded"
KILLED = "killed"
SPAWN_FAILED = "spawn_failed"
BAD_DAG = "bad_dag"
NO_TARGET_TABLE = "no_target_table"

CODES = (CONCURRENCY_SKIP, UPSTREAM_FAILED, RUN_HALTED, NOT_STARTED, NEVER_DISPATCHED,
         LOST_DISPATCH, JOB_FAILED, JOB_MISSING, STEP_FAILED, DEADLINE_EXCEEDED, KILLED,
         SPAWN_FAILED, BAD_DAG, NO_TARGET_TABLE)

MESSAGE_MAX = 500


def run_error(code: str, message: str, **ids: Any) -> dict[str, Any]:
    """The `error` object: `{code, message, ...ids}` (ids that are None are left out)."""
    assert code in CODES, code
    out: dict[str, Any] = {"code": code, "message": message[:MESSAGE_MAX]}
    out.update({k: v for k, v in ids.items() if v is not None})
    return out


class OpError(Exception):
    """An operator action refused or impossible: an HTTP status, a `code`, a sentence (the
    admin plane maps it to its error body)."""

    status = 409

    def __init__(self, message: str, code: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        if status is not None:
            self.status = status


class NotFound(OpError):
    status = 404

    def __init__(self, message: str) -> None:
        super().__init__(message, "not_found")


class Unavailable(OpError):
    """503: the engine is not running (disabled, no schema yet, database unreachable)."""

    status = 503
