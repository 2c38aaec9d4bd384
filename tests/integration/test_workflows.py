"""Workflow runs against real processes: a database host, `svc-scheduler` (the workflow engine
and the admin API), one SSP in scheduler mode running the outbox jobs, and a backend HTTP
server the jobs call. One stack for the module.

Runs are started the way an operator starts one: a schedule that never fires on its own
(`0 0 1 1 *`) triggered through the admin API; each test applies the definitions it needs
(`svc workflows apply`, which also removes the previous test's).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_ssp_support import root_db, wait_for
from tests.support.procs import DbHost
from tests.support.workflow_stack import WorkflowStack, prepare, start_stack

pytestmark = pytest.mark.slow

NEVER = "0 0 1 1 *"  # fires on its own once a year: these tests trigger it


@pytest.fixture(scope="module")
def stack(shared_db_host: DbHost, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[WorkflowStack]:
    ns = "wf_" + uuid.uuid4().hex[:8]
    asyncio.run(prepare(shared_db_host, ns))
    s = start_stack(tmp_path_factory.mktemp("wf"), shared_db_host, ns)
    try:
        yield s
    finally:
        s.stop()


def on_demand(workflow: str, **extra: Any) -> dict[str, Any]:
    return {"cron": NEVER, "workflow": workflow, **extra}


async def trigger_run(stack: WorkflowStack, schedule: str) -> str:
    """Trigger `schedule` and return the key of the run its fire started."""
    before = {r["key"] for r in (await stack.call("GET", f"/workflows/runs?schedule={schedule}"
                                                         "&limit=500"))[1]["runs"]}
    status, body = await stack.call("POST", f"/schedules/{schedule}/trigger")
    assert status == 200, body
    assert body["name"] == schedule and isinstance(body["triggered_at"], int)

    async def new_run() -> Any:
        _, got = await stack.call("GET", f"/workflows/runs?schedule={schedule}&limit=500")
        fresh = [r for r in got["runs"] if r["key"] not in before]
        return fresh[0]["key"] if fresh else None
    return str(await wait_for(new_run, 60.0, f"a run of {schedule}"))


async def run_in(stack: WorkflowStack, key: str, *statuses: str,
                 timeout: float = 90.0) -> dict[str, Any]:
    async def reached() -> Any:
        status, body = await stack.call("GET", f"/workflows/runs/{key}")
        assert status == 200, body
        return body["run"] if body["run"]["status"] in statuses else None
    return await wait_for(reached, timeout, f"run {key} in {statuses}")  # type: ignore[no-any-return]


def steps_of(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in run["steps"]}


def ok_step(*deps: str, path: str = "/ok", **extra: Any) -> dict[str, Any]:
    return {"table": "job", "path": path, "depends_on": list(deps), **extra}


# ---------------------------------------------------------------------------- tests


async def test_a_diamond_and_a_20_step_chain_run_to_completion(stack: WorkflowStack) -> None:
    chain = {f"s{i:02d}": ok_step(*([f"s{i - 1:02d}"] if i else [])) for i in range(20)}
    stack.apply(
        workflows={"diamond": {"steps": {"a": ok_step(), "b": ok_step("a", path="/work"),
                                         "c": ok_step("a"), "d": ok_step("b", "c")}},
                   "chain": {"steps": chain, "deadline": "10m"}},
        schedules={"diamond_now": on_demand("diamond"), "chain_now": on_demand("chain")})
    diamond, long = await asyncio.gather(trigger_run(stack, "diamond_now"),
                                         trigger_run(stack, "chain_now"))
    run = await run_in(stack, diamond, "completed", "failed")
    assert run["status"] == "completed", run
    steps = steps_of(run)
    assert [s["name"] for s in run["steps"]] == ["a", "b", "c", "d"]
    assert sorted(map(tuple, run["dag"]["edges"])) == [("a", "b"), ("a", "c"), ("b", "d"),
                                                       ("c", "d")]
    for s in steps.values():
        assert s["status"] == "completed" and s["job"] == f"job:wf_{diamond}_{s['name']}"
        assert s["created_at"] == run["created_at"]  # spec: equals run start
        calls = stack.backend.calls_of(s["job"])
        assert len(calls) == 1, s  # one job per step, one call per job
    # a step's job is created only once its dependencies completed
    assert steps["b"]["started_at"] >= steps["a"]["finished_at"]
    assert steps["c"]["started_at"] >= steps["a"]["finished_at"]
    assert steps["d"]["started_at"] >= max(steps["b"]["finished_at"], steps["c"]["finished_at"])
    assert run["trigger"] == "schedule" and run["schedule"] == "diamond_now"
    assert run["error"] is None and run["retry_count"] is None

    run = await run_in(stack, long, "completed", "failed")
    assert run["status"] == "completed", run
    order = [s["name"] for s in run["steps"]]
    assert order == sorted(chain)
    starts = [s["started_at"] for s in run["steps"]]
    ends = [s["finished_at"] for s in run["steps"]]
    assert all(starts[i + 1] >= ends[i] for i in range(19))
    assert len(stack.backend.calls_to(f"job:wf_{long}_")) == 20

    # the schedule records the fire and its outcome; the rollup counts it
    status, body = await stack.call("GET", "/schedules/diamond_now")
    assert status == 200
    sch = body["schedule"]
    assert sch["last_run_status"] == "completed" and sch["last_error"] is None
    assert sch["rollup"]["success"] >= 1 and sch["recent_fires"][0]["trigger"] == "manual"
    assert sch["recent_fires"][0]["run"] == f"_00_workflow_run:{diamond}"
