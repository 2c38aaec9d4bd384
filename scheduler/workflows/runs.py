"""Run and step states, and the pure rules that move them (no I/O: the engine applies them).

Step states:

| state | meaning | moves to |
|---|---|---|
| `blocked` | waiting for its dependencies (every step starts here; retry resets to it) | `running` (all dependencies `completed`), `skipped` (one failed, was skipped or killed: `upstream_failed`; or the run ended: `run_halted`), `failed` (`spawn_failed`) |
| `running` | its job row exists (`started_at` = when it was created) | `completed`, `failed` (`job_failed`, `job_missing`, `lost_dispatch`, `never_dispatched`), `killed` (cancel, deadline) |
| `completed`, `failed`, `skipped`, `killed` | terminal | `blocked` by a retry (all but `completed`) |

Run states: `running` -> `completed` (every step completed), `failed` (`step_failed` with
`failed_steps` once nothing runs any more, or `deadline_exceeded` at once), `killed` (a cancel,
once every killed step's job is terminal). A retry moves `failed`/`killed` back to `running`.

A failed step does not stop independent branches: steps that do not depend on it still run,
so a retry has as little as possible left to re-run; its dependants are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

__all__ = [
    "BAD", "RUN_TERMINAL", "STEP_TERMINAL", "doomed", "job_key", "outcome", "ready",
]

BLOCKED, RUNNING, COMPLETED, FAILED, SKIPPED, KILLED = (
    "blocked", "running", "completed", "failed", "skipped", "killed")
STEP_TERMINAL = frozenset({COMPLETED, FAILED, SKIPPED, KILLED})
#: a dependency in one of these states dooms its dependants
BAD = frozenset({FAILED, SKIPPED, KILLED})
RUN_TERMINAL = frozenset({"completed", "failed", "killed"})


class StepLike(Protocol):
    status: str
    depends_on: list[str]


def job_key(run_key: str, step: str, attempt: int) -> str:
    """A step job's record key: `wf_<run key>_<step>` for the first attempt, `_r<n>` added
    for the run's retry number n (spec: `<table>:wf_<run key>_<step>_r<n>`). Deterministic,
    so a crash can never make the scheduler create a second job for the same attempt."""
    base = f"wf_{run_key}_{step}"
    return f"{base}_r{attempt}" if attempt else base


def ready(steps: Mapping[str, StepLike]) -> list[str]:
    """Blocked steps whose dependencies all completed (definition order)."""
    return [n for n, s in steps.items() if s.status == BLOCKED
            and all(steps[d].status == COMPLETED for d in s.depends_on)]


def doomed(steps: Mapping[str, StepLike]) -> dict[str, list[str]]:
    """Blocked steps that can never run, each with the dependencies that block it (failed,
    skipped or killed ones), found transitively: a step behind a doomed step is doomed."""
    out: dict[str, list[str]] = {}
    changed = True
    while changed:
        changed = False
        for name, s in steps.items():
            if s.status != BLOCKED or name in out:
                continue
            bad = [d for d in s.depends_on if steps[d].status in BAD or d in out]
            if bad:
                out[name] = bad
                changed = True
    return out


def outcome(steps: Mapping[str, StepLike], kill_requested: bool) -> tuple[str, list[str]] | None:
    """The run's end once every step is terminal: (`completed` | `failed` | `killed`, the
    failed steps); None while a step is blocked or running."""
    if any(s.status not in STEP_TERMINAL for s in steps.values()):
        return None
    failed = [n for n, s in steps.items() if s.status in (FAILED, KILLED)]
    if kill_requested:
        return "killed", failed
    if failed or any(s.status == SKIPPED for s in steps.values()):
        return "failed", failed
    return "completed", []
