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
from typing import Any

import pytest
from surrealdb import RecordID

from tests.support.procs import DbHost
from tests.support.ssp_stack import root_db, wait_for
from tests.support.workflow_stack import WorkflowStack, prepare, start_stack

pytestmark = pytest.mark.slow

NEVER = "0 0 1 1 *"  # fires on its own once a year: these tests trigger it


@pytest.fixture(scope="module")
def stack(shared_db_host: DbHost, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[WorkflowStack]:
    ns = "wf_" + uuid.uuid4().hex[:8]
    # An older install: the workflow tables at schema version 1 (see the migration test).
    asyncio.run(prepare(shared_db_host, ns, version=1))
    s = start_stack(tmp_path_factory.mktemp("wf"), shared_db_host, ns)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def migrated(stack: WorkflowStack) -> WorkflowStack:
    """The stack with the workflow tables migrated (`svc migrate`, idempotent: after the
    first test's own migration this run changes nothing). Once for the module: a run is a
    process start of a few seconds, and no test moves the schema back."""
    r = stack.svc("migrate")
    assert r.returncode == 0, r.stderr
    return stack


@pytest.fixture
def wf(migrated: WorkflowStack) -> WorkflowStack:
    return migrated


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


async def test_rerun_and_retry_answer_409_until_svc_migrate(stack: WorkflowStack) -> None:
    """Versioning 4: an older schema (version 1, `retry_count` an int) keeps running
    workflows, but rerun and retry ask for the migration; `svc migrate` applies it."""
    root = await root_db(stack.host, stack.ns, stack.ns)
    try:
        # the first test of the module: nothing has migrated the fixture's version 1 yet
        assert (await root.query_one(
            "SELECT VALUE version FROM ONLY _00_workflow_schema:version")) == 1
    finally:
        await root.close()
    stack.apply(workflows={"old": {"steps": {"a": ok_step()}}},
                schedules={"old_now": on_demand("old")})
    key = await trigger_run(stack, "old_now")
    run = await run_in(stack, key, "completed", "failed")
    assert run["status"] == "completed"
    for verb in ("rerun", "retry"):
        status, body = await stack.call("POST", f"/workflows/runs/{key}/{verb}")
        assert status == 409 and body["code"] == "migration_required", body
        assert "svc migrate" in body["message"]
    r = stack.svc("migrate")
    assert r.returncode == 0 and "version 2 (was 1)" in r.stdout, r.stdout + r.stderr
    root = await root_db(stack.host, stack.ns, stack.ns)
    try:
        info = await root.query_one("INFO FOR TABLE _00_workflow_run")
        assert "option<int>" in info["fields"]["retry_count"] or \
            "none | int" in info["fields"]["retry_count"]
        assert (await root.query_one(
            "SELECT VALUE retry_count FROM ONLY $r",
            {"r": RecordID("_00_workflow_run", key)})) is None
    finally:
        await root.close()
    status, body = await stack.call("POST", f"/workflows/runs/{key}/rerun")
    assert status == 201 and body["rerun_of"] == f"_00_workflow_run:{key}", body
    status, body = await stack.call("POST", f"/workflows/runs/{key}/retry")
    assert status == 409 and body["code"] == "not_retryable"  # it completed


async def test_a_diamond_and_a_20_step_chain_run_to_completion(wf: WorkflowStack) -> None:
    stack = wf
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


async def test_a_failing_step_fails_its_dependants_and_retry_reruns_only_what_failed(
        wf: WorkflowStack) -> None:
    stack = wf
    stack.backend.set_toggle(False)  # /toggle answers 503 until set
    stack.apply(workflows={"fragile": {"steps": {
        "a": ok_step(), "b": ok_step("a", path="/toggle", retries=0), "c": ok_step("a"),
        "d": ok_step("b", "c"), "e": ok_step("d")}}},
        schedules={"fragile_now": on_demand("fragile")})
    key = await trigger_run(stack, "fragile_now")
    run = await run_in(stack, key, "failed", "completed")
    assert run["status"] == "failed"
    assert run["error"]["code"] == "step_failed" and run["error"]["failed_steps"] == ["b"]
    steps = steps_of(run)
    assert steps["a"]["status"] == steps["c"]["status"] == "completed"
    assert steps["b"]["status"] == "failed"
    assert steps["b"]["error"]["code"] == "job_failed"
    assert steps["b"]["error"]["job"] == f"job:wf_{key}_b" and "503" in \
        steps["b"]["error"]["message"]
    assert steps["d"]["status"] == "skipped" and steps["e"]["status"] == "skipped"
    assert steps["d"]["error"] == {"code": "upstream_failed", "blocked_by": ["b"],
                                   "message": steps["d"]["error"]["message"]}
    assert steps["e"]["error"]["blocked_by"] == ["d"]
    assert steps["d"]["job"] is None and steps["d"]["started_at"] is None
    _, body = await stack.call("GET", "/schedules/fragile_now")
    sch = body["schedule"]
    assert sch["last_run_status"] == "failed"
    assert sch["last_error"] == run["error"]["message"]  # a bare string
    assert sch["rollup"]["failure"] == 1 and sch["rollup"]["success"] == 0

    stack.backend.set_toggle(True)
    status, body = await stack.call("POST", f"/workflows/runs/{key}/retry")
    assert status == 200, body
    assert body["run"] == f"_00_workflow_run:{key}" and body["retry_count"] == 1
    assert body["reset"] == ["b", "d", "e"] and body["kept"] == ["a", "c"]
    assert body["operation"]["kind"] == "workflow_retry"
    run = await run_in(stack, key, "completed", "failed")
    assert run["status"] == "completed" and run["retry_count"] == 1
    assert isinstance(run["last_retry_at"], int) and run["error"] is None
    steps = steps_of(run)
    assert steps["b"]["job"] == f"job:wf_{key}_b_r1"
    assert steps["b"]["jobs"] == [f"job:wf_{key}_b", f"job:wf_{key}_b_r1"]
    assert steps["d"]["job"] == f"job:wf_{key}_d_r1" and steps["e"]["job"] == f"job:wf_{key}_e_r1"
    assert steps["a"]["job"] == f"job:wf_{key}_a"
    # only what failed ran again
    assert len(stack.backend.calls_of(f"job:wf_{key}_a")) == 1
    assert len(stack.backend.calls_of(f"job:wf_{key}_c")) == 1
    assert len(stack.backend.calls_of(f"job:wf_{key}_b_r1")) == 1
    # spec note: a retry of the latest fire leaves last_run_status failed; the tally counts it
    _, body = await stack.call("GET", "/schedules/fragile_now")
    sch = body["schedule"]
    assert sch["last_run_status"] == "failed"
    assert sch["rollup"]["failure"] == 1 and sch["rollup"]["success"] == 1
    assert sch["recent_fires"][0]["status"] == "completed" and sch["recent_fires"][0]["retried"]

    async def op_done() -> Any:
        _, ops = await stack.call("GET", "/operations")
        mine = [o for o in ops["operations"] if o["kind"] == "workflow_retry"
                and o["target"] == f"_00_workflow_run:{key}"]
        return mine[0] if mine and mine[0]["status"] != "running" else None
    op = await wait_for(op_done, 30.0, "the retry operation done")
    assert op["status"] == "done"

    status, body = await stack.call("POST", f"/workflows/runs/{key}/retry")
    assert status == 409 and body["code"] == "not_retryable"
    # rerun: a new ad-hoc run, trigger manual, tallied in the (ad-hoc) bucket
    status, body = await stack.call("POST", f"/workflows/runs/{key}/rerun")
    assert status == 201 and body["rerun_of"] == f"_00_workflow_run:{key}"
    new = body["run"].split(":", 1)[1]
    rerun = await run_in(stack, new, "completed", "failed")
    assert rerun["status"] == "completed" and rerun["trigger"] == "manual"
    assert rerun["schedule"] is None and rerun["rerun_of"] == f"_00_workflow_run:{key}"
    _, listed = await stack.call("GET", f"/workflows/runs?rerun_of={key}")
    assert [r["key"] for r in listed["runs"]] == [new]
    root = await root_db(stack.host, stack.ns, stack.ns)
    try:
        adhoc = await root.query_one("SELECT VALUE success FROM _00_run_rollup WHERE "
                                     "schedule = '(ad-hoc)'")
        assert sum(adhoc) >= 1
    finally:
        await root.close()
    status, body = await stack.call("POST", "/workflows/runs/nope/retry")
    assert status == 404


async def test_cancel_while_a_step_runs_is_kill_requested_then_killed(wf: WorkflowStack) -> None:
    stack = wf
    stack.backend.hold()
    stack.apply(workflows={"held": {"steps": {"a": ok_step(path="/hold"), "b": ok_step("a")}}},
                schedules={"held_now": on_demand("held")})
    key = await trigger_run(stack, "held_now")

    async def called() -> bool:
        return bool(stack.backend.calls_of(f"job:wf_{key}_a"))
    await wait_for(called, 60.0, "the held step's call")
    status, body = await stack.call("POST", f"/workflows/runs/{key}/cancel")
    assert status == 202, body
    assert body["run"] == f"_00_workflow_run:{key}"
    assert body["status"] in ("kill_requested", "killed")
    assert body["operation"]["kind"] == "workflow_cancel"
    run = await run_in(stack, key, "killed", "failed", "completed")
    assert run["status"] == "killed" and run["kill_requested"] is True
    assert run["error"]["code"] == "killed"
    steps = steps_of(run)
    assert steps["a"]["status"] == "killed" and steps["a"]["error"]["code"] == "killed"
    assert steps["b"]["status"] == "skipped"
    assert steps["b"]["error"]["code"] == "run_halted"
    assert steps["b"]["error"]["run_error"] == "killed"
    root = await root_db(stack.host, stack.ns, stack.ns)
    try:
        job = await root.query_one("SELECT * FROM ONLY $j",
                                   {"j": RecordID("job", f"wf_{key}_a")})
        assert job["status"] == "failed" and job["errors"][-1]["error"] == "killed"
    finally:
        await root.close()
    status, body = await stack.call("POST", f"/workflows/runs/{key}/cancel")
    assert status == 409 and body["code"] == "not_running"

    async def op_done() -> Any:
        _, ops = await stack.call("GET", "/operations")
        mine = [o for o in ops["operations"] if o["kind"] == "workflow_cancel"
                and o["target"] == f"_00_workflow_run:{key}"]
        return mine[0] if mine and mine[0]["status"] != "running" else None
    assert (await wait_for(op_done, 30.0, "the cancel operation done"))["status"] == "done"
    stack.backend.release()


async def _row(stack: WorkflowStack, rid: RecordID) -> Any:
    root = await root_db(stack.host, stack.ns, stack.ns)
    try:
        return await root.query_one("SELECT * FROM ONLY $r", {"r": rid})
    finally:
        await root.close()


async def _sql(stack: WorkflowStack, sql: str, vars: dict[str, Any] | None = None) -> Any:
    root = await root_db(stack.host, stack.ns, stack.ns)
    try:
        return await root.query_one(sql, vars)
    finally:
        await root.close()


async def test_a_deadline_ends_the_run_and_retry_waits_for_the_kill_to_settle(
        wf: WorkflowStack) -> None:
    """`deadline_exceeded` at once; the running step is killed, the blocked one skipped
    (`run_halted`). A job no SSP can cancel (its owner is gone, the lease still valid) stays
    processing: retry answers 409 until it is terminal."""
    stack = wf
    stack.apply(workflows={"late": {"deadline": "2s", "steps": {
        "a": {"table": "job_unserved", "path": "/x"}, "b": ok_step("a")}}},
        schedules={"late_now": on_demand("late")})
    key = await trigger_run(stack, "late_now")
    job = RecordID("job_unserved", f"wf_{key}_a")
    # as if an SSP had claimed it and died, its lease running for an hour
    taken = await _sql(stack, "UPDATE $j SET status = 'processing', assignee = 'ssp-gone', "
                       "lease_until = time::now() + 1h WHERE status = 'pending' RETURN id",
                       {"j": job})
    assert taken, "the step's job was not pending"
    run = await run_in(stack, key, "failed", "completed", "killed")
    assert run["status"] == "failed" and run["error"]["code"] == "deadline_exceeded"
    assert isinstance(run["error"]["since"], int)
    steps = steps_of(run)
    assert steps["a"]["status"] == "killed"
    assert steps["a"]["error"]["code"] == "deadline_exceeded"
    assert steps["b"]["status"] == "skipped" and steps["b"]["error"] == {
        "code": "run_halted", "run_error": "deadline_exceeded",
        "message": steps["b"]["error"]["message"]}

    async def flagged() -> Any:
        row = await _row(stack, job)
        return row if row.get("kill_requested") else None
    row = await wait_for(flagged, 30.0, "the kill flag on the job")
    assert row["status"] == "processing"
    status, body = await stack.call("POST", f"/workflows/runs/{key}/retry")
    assert status == 409 and body["code"] == "kill_pending", body
    assert "wait for the kill to settle" in body["message"]
    await _sql(stack, "UPDATE $j SET status = 'failed', finished_at = time::now()", {"j": job})
    status, body = await stack.call("POST", f"/workflows/runs/{key}/retry")
    assert status == 200 and body["reset"] == ["a", "b"] and body["kept"] == []
    # the retried job is `_r1`, and with nobody to run it the deadline ends the run again
    run = await run_in(stack, key, "failed", "completed", "killed")
    assert run["retry_count"] == 1 and run["error"]["code"] == "deadline_exceeded"
    assert steps_of(run)["a"]["job"] == f"job_unserved:wf_{key}_a_r1"


async def test_a_job_no_ssp_claims_fails_never_dispatched(wf: WorkflowStack) -> None:
    stack = wf
    stack.apply(workflows={"orphan": {"steps": {
        "a": {"table": "job_unserved", "path": "/x"}, "b": ok_step("a")}}},
        schedules={"orphan_now": on_demand("orphan")})
    key = await trigger_run(stack, "orphan_now")
    run = await run_in(stack, key, "failed", "completed")
    a = steps_of(run)["a"]
    assert a["status"] == "failed" and a["error"]["code"] == "never_dispatched"
    assert a["error"]["job"] == f"job_unserved:wf_{key}_a"
    assert isinstance(a["error"]["since"], int)
    assert steps_of(run)["b"]["error"]["code"] == "upstream_failed"
    assert run["error"] == {"code": "step_failed", "failed_steps": ["a"],
                            "message": run["error"]["message"]}
    row = await _row(stack, RecordID("job_unserved", f"wf_{key}_a"))
    # the job itself is failed, so an SSP that serves the table later never runs it
    assert row["status"] == "failed" and row["kill_requested"] is True
    assert row["errors"][-1]["kind"] == "never_dispatched"


async def test_a_job_row_deleted_while_its_step_runs_fails_job_missing(
        wf: WorkflowStack) -> None:
    stack = wf
    stack.backend.hold()
    try:
        stack.apply(workflows={"vanish": {"steps": {"a": ok_step(path="/hold"),
                                                    "b": ok_step("a")}}},
                    schedules={"vanish_now": on_demand("vanish")})
        key = await trigger_run(stack, "vanish_now")

        async def called() -> bool:
            return bool(stack.backend.calls_of(f"job:wf_{key}_a"))
        await wait_for(called, 60.0, "the held step's call")
        # someone deletes the job row the scheduler follows
        await _sql(stack, "DELETE $j", {"j": RecordID("job", f"wf_{key}_a")})
        run = await run_in(stack, key, "failed", "completed", "killed")
    finally:
        stack.backend.release()
    a, b = steps_of(run)["a"], steps_of(run)["b"]
    assert a["status"] == "failed" and a["error"]["code"] == "job_missing", a
    assert a["error"]["job"] == f"job:wf_{key}_a"
    assert b["status"] == "skipped" and b["error"]["code"] == "upstream_failed", b
    assert run["status"] == "failed" and run["error"]["code"] == "step_failed"
    assert run["error"]["failed_steps"] == ["a"]


async def test_a_job_row_the_database_refuses_is_spawn_failed(wf: WorkflowStack) -> None:
    stack = wf
    stack.apply(workflows={"refused": {"steps": {"a": ok_step(),
                                                 "b": {"table": "job_refuse", "path": "/x",
                                                       "depends_on": ["a"]}}}},
                schedules={"refused_now": on_demand("refused"),
                           "refused_table": {"cron": NEVER, "table": "job_refuse"}})
    key = await trigger_run(stack, "refused_now")
    run = await run_in(stack, key, "failed", "completed")
    b = steps_of(run)["b"]
    assert steps_of(run)["a"]["status"] == "completed"
    assert b["status"] == "failed" and b["error"]["code"] == "spawn_failed"
    assert "job_refuse takes no jobs" in b["error"]["message"]
    assert b["error"]["job"] == f"job_refuse:wf_{key}_b" and b["job"] is None
    assert await _row(stack, RecordID("job_refuse", f"wf_{key}_b")) is None
    # a table-target schedule whose job is refused: the fire is recorded failed
    status, _ = await stack.call("POST", "/schedules/refused_table/trigger")
    assert status == 200

    async def fire_failed() -> Any:
        _, body = await stack.call("GET", "/schedules/refused_table")
        fires = body["schedule"]["recent_fires"]
        return fires[0] if fires and fires[0]["status"] == "failed" else None
    fire = await wait_for(fire_failed, 30.0, "the refused fire")
    assert fire["error"]["code"] == "spawn_failed" and fire["trigger"] == "manual"


async def test_a_schedule_without_its_workflow_records_no_target_table(
        wf: WorkflowStack) -> None:
    """The CLI refuses it; a definition written some other way is refused at fire time."""
    stack = wf
    stack.apply(schedules={"lost": {"cron": NEVER, "table": "job"}})
    spec = {"cron": NEVER, "workflow": "missing", "timezone": "UTC"}
    await _sql(stack, "UPDATE _00_schedule:lost SET spec = $s, hash = 'by-hand', "
               "target_table = NONE, workflow = 'missing'", {"s": spec})

    async def known() -> bool:  # `target` is the engine's view (reloaded every second here)
        _, body = await stack.call("GET", "/schedules/lost")
        return body["schedule"]["target"] == {"workflow": "missing"}
    await wait_for(known, 30.0, "the hand-written definition loaded")

    async def triggered() -> Any:
        status, body = await stack.call("POST", "/schedules/lost/trigger")
        return body if status == 200 else None
    await wait_for(triggered, 30.0, "the trigger")

    async def fire_failed() -> Any:
        _, body = await stack.call("GET", "/schedules/lost")
        fires = body["schedule"]["recent_fires"]
        return fires[0] if fires and fires[0]["status"] == "failed" else None
    fire = await wait_for(fire_failed, 30.0, "the fire without a target")
    assert fire["error"]["code"] == "no_target_table" and fire["run"] is None
    _, body = await stack.call("GET", "/schedules/lost")
    assert body["schedule"]["last_run_status"] == "failed"


async def test_schedule_pause_resume_trigger_and_the_409s(wf: WorkflowStack) -> None:
    stack = wf
    stack.apply(workflows={"tiny": {"steps": {"a": ok_step()}}},
                schedules={"p1": on_demand("tiny"),
                           "off": on_demand("tiny", enabled=False)})
    status, body = await stack.call("POST", "/schedules/off/trigger")
    assert status == 409 and body["code"] == "disabled", body
    status, body = await stack.call("POST", "/schedules/p1/pause")
    assert status == 200 and body == {"name": "p1", "paused": True}
    status, body = await stack.call("POST", "/schedules/p1/trigger")
    assert status == 409 and body["code"] == "paused" and "paused" in body["message"]
    _, listed = await stack.call("GET", "/schedules")
    by_name = {s["name"]: s for s in listed["schedules"]}
    assert by_name["p1"]["paused"] is True and by_name["p1"]["next_fire_at"] is None
    assert by_name["off"]["enabled"] is False
    status, body = await stack.call("POST", "/schedules/p1/resume")
    assert status == 200 and body == {"name": "p1", "paused": False}
    key = await trigger_run(stack, "p1")
    assert (await run_in(stack, key, "completed", "failed"))["status"] == "completed"
    _, listed = await stack.call("GET", "/schedules")
    p1 = next(s for s in listed["schedules"] if s["name"] == "p1")
    assert isinstance(p1["next_fire_at"], int) and p1["last_run_status"] == "completed"
    assert p1["trigger_requested_at"] is None and isinstance(p1["last_fire_at"], int)
    for path in ("/schedules/nope", "/schedules/nope/pause", "/schedules/nope/trigger"):
        status, body = await stack.call("GET" if path.count("/") == 2 else "POST", path)
        assert status == 404, (path, body)
    status, body = await stack.call("POST", "/schedules/p1/release")
    assert status == 409 and body["code"] == "not_quarantined"


async def test_concurrency_skip_and_queue_are_recorded_and_visible(wf: WorkflowStack) -> None:
    stack = wf
    stack.backend.hold()
    every = "* * * * * *"  # every second (6 fields, seconds first)
    stack.apply(workflows={"holder": {"steps": {"a": ok_step(path="/hold")}}},
                schedules={"sk": {"cron": every, "workflow": "holder", "concurrency": "skip"},
                           "qu": {"cron": every, "workflow": "holder",
                                  "concurrency": "queue"}})

    async def fires(name: str) -> list[dict[str, Any]]:
        _, body = await stack.call("GET", f"/schedules/{name}")
        return body["schedule"]["recent_fires"]  # type: ignore[no-any-return]

    async def settled() -> bool:
        sk, qu = await fires("sk"), await fires("qu")
        return (sum(f["status"] == "skipped" for f in sk) >= 2
                and sum(f["status"] == "skipped" for f in qu) >= 2
                and any(f["status"] == "queued" for f in qu))
    await wait_for(settled, 60.0, "skipped and queued fires")
    for name in ("sk", "qu"):
        assert (await stack.call("POST", f"/schedules/{name}/pause"))[0] == 200
    sk, qu = await fires("sk"), await fires("qu")
    running = [f for f in sk if f["status"] == "running"]
    assert len(running) == 1
    for f in sk:
        if f["status"] == "skipped":
            assert f["error"]["code"] == "concurrency_skip"
            assert f["error"]["blocked_by"] == running[0]["id"]
    queued = [f for f in qu if f["status"] == "queued"]
    assert len(queued) == 1 and sum(f["status"] == "running" for f in qu) == 1
    for f in qu:
        if f["status"] == "skipped":  # a fire while one already waits
            assert f["error"]["code"] == "concurrency_skip"
    _, listed = await stack.call("GET", "/schedules")
    by_name = {s["name"]: s for s in listed["schedules"]}
    assert by_name["sk"]["skipped_fires"] >= 2 and by_name["qu"]["queued"] == 1
    assert by_name["sk"]["recent"]["skipped"] >= 2
    stack.backend.release()
    # the queued fire starts once the running one ended, and completes
    qid = queued[0]["id"]

    async def queued_done() -> Any:
        # read by id: `recent_fires` shows the newest 20, and on a loaded machine the skips
        # recorded every second before the pause can push the queued fire out of it
        got = await _sql(stack, "SELECT * FROM ONLY type::record($f)", {"f": qid})
        return got if got and got["status"] == "completed" else None
    done = await wait_for(queued_done, 60.0, "the queued fire run")
    assert done["run"] is not None


async def test_repeated_failures_quarantine_a_schedule_until_released(
        wf: WorkflowStack) -> None:
    stack = wf
    stack.apply(schedules={"flaky": {"cron": "* * * * * *", "table": "job", "path": "/fail",
                                     "retries": 0, "quarantine_after": 2}})

    async def quarantined() -> Any:
        _, body = await stack.call("GET", "/schedules/flaky")
        return body["schedule"] if body["schedule"]["quarantined"] else None
    sch = await wait_for(quarantined, 60.0, "the quarantine")
    assert sch["quarantined"]["key"] == "job_failed" and sch["quarantined"]["failures"] == 2
    assert sch["next_fire_at"] is None and sch["last_run_status"] == "failed"
    assert "500" in sch["last_error"]
    _, inc = await stack.call("GET", "/incidents?component=schedule:flaky/job_failed")
    assert [i["kind"] for i in inc["incidents"]] == ["schedule_quarantined"]
    assert inc["incidents"][0]["state"] == "open"
    fired = len([f for f in sch["recent_fires"] if f["status"] != "skipped"])
    await asyncio.sleep(2.5)  # two more due times pass: a quarantined schedule does not fire
    _, body = await stack.call("GET", "/schedules/flaky")
    assert len([f for f in body["schedule"]["recent_fires"] if f["status"] != "skipped"]) \
        == fired
    status, body = await stack.call("POST", "/schedules/flaky/release")
    assert status == 200 and body["quarantined"] is False
    _, inc = await stack.call("GET", "/incidents?component=schedule:flaky/job_failed")
    assert inc["incidents"][0]["state"] == "recovered"

    async def fires_again() -> bool:
        _, body = await stack.call("GET", "/schedules/flaky")
        return len([f for f in body["schedule"]["recent_fires"]
                    if f["status"] != "skipped"]) > fired
    await wait_for(fires_again, 30.0, "fires after the release")
    assert (await stack.call("POST", "/schedules/flaky/pause"))[0] == 200


async def test_no_record_user_can_read_or_write_the_workflow_tables(wf: WorkflowStack) -> None:
    from scheduler.workflows.tables import TABLES
    from tests.support.dbhost_clients import record_user

    stack = wf
    stack.apply(workflows={"tiny": {"steps": {"a": ok_step()}}},
                schedules={"tiny_now": on_demand("tiny")})
    key = await trigger_run(stack, "tiny_now")
    await run_in(stack, key, "completed")
    counts = {t: len(await _sql(stack, f"SELECT id FROM {t}")) for t in TABLES}
    assert all(n > 0 for n in counts.values()), counts  # every table holds rows
    user = await record_user(stack.host, stack.ns, stack.ns, "wf-" + uuid.uuid4().hex[:6])
    try:
        for t in TABLES:
            assert await user.query(f"SELECT * FROM {t}") == [], t
            try:
                await user.query(f"CREATE {t}:by_user SET x = 1")
            except Exception:  # noqa: BLE001, S110 - refused loudly is as good as silently
                pass
            assert await user.query(f"UPDATE {t} SET x = 1") == [], t
        assert await user.query(f"SELECT * FROM _00_workflow_run:{key}") == []
    finally:
        await user.close()
    for t in TABLES:
        assert await _sql(stack, f"SELECT id FROM {t}:by_user") == [], t
        assert await _sql(stack, f"SELECT id FROM {t} WHERE x = 1") == [], t


async def test_runs_stream_jobs_origin_and_auth(wf: WorkflowStack) -> None:
    import aiohttp

    stack = wf
    stack.apply(workflows={"tiny": {"steps": {"a": ok_step()}}},
                schedules={"tiny_now": on_demand("tiny")})
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        async with http.get(stack.sched.admin + "/admin/api/workflows/stream",
                            headers={"Authorization": f"Bearer {stack.token}"}) as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/event-stream")
            first = await _next_event(r)
            assert first[0] == "runs" and "runs" in first[1]
            key = await trigger_run(stack, "tiny_now")
            while True:  # each change publishes the list again
                ev, body = await _next_event(r)
                if ev == "runs" and any(x["key"] == key and x["status"] == "completed"
                                        for x in body["runs"]):
                    break
        async with http.get(stack.sched.admin + "/admin/api/workflows/runs") as r:
            assert r.status == 401
    _, body = await stack.call("GET", "/jobs?origin=workflow&limit=1000")
    mine = [j for j in body["jobs"] if j["id"] == f"job:wf_{key}_a"]
    assert mine and mine[0]["origin"]["kind"] == "workflow"
    assert mine[0]["origin"]["run"] == f"_00_workflow_run:{key}"
    status, minted = await stack.call("POST", "/tokens", {"label": "ro", "scope": "read",
                                                          "ttl_days": 1})
    assert status == 201
    ro = minted["token"]
    assert (await stack.call("GET", "/schedules", token=ro))[0] == 200
    for path in (f"/workflows/runs/{key}/cancel", f"/workflows/runs/{key}/rerun",
                 f"/workflows/runs/{key}/retry", "/schedules/tiny_now/pause",
                 "/schedules/tiny_now/resume", "/schedules/tiny_now/trigger",
                 "/schedules/tiny_now/release"):
        status, body = await stack.call("POST", path, token=ro)
        assert status == 403 and body["code"] == "read_only", (path, body)
    status, body = await stack.call("GET", "/workflows/runs?status=bogus")
    assert status == 400
    status, body = await stack.call("GET", "/workflows/runs?limit=0")
    assert status == 200 and body["limit"] == 1
    status, body = await stack.call("GET", "/workflows/runs/nope")
    assert status == 404 and body["error"] == "not_found"


async def _next_event(r: Any) -> tuple[str, Any]:
    import json

    event, data = "message", []
    while True:
        line = (await asyncio.wait_for(r.content.readline(), 30)).decode().rstrip("\n")
        if not line:
            if data:
                return event, json.loads("\n".join(data))
            continue
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])


async def test_the_workflow_and_schedule_mcp_tools(wf: WorkflowStack) -> None:
    """The spec's workflow tools on the admin MCP endpoint: annotations and scope, and each
    one answering through its admin route (errors as tool errors with the route's status)."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    stack = wf
    names = {"workflow_runs_list", "workflow_run_get", "workflow_run_cancel",
             "workflow_runs_cancel", "workflow_run_rerun", "workflow_run_retry", "schedules_list", "schedule_get",
             "schedule_pause", "schedule_resume", "schedule_trigger", "schedule_release"}
    reads = {"workflow_runs_list", "workflow_run_get", "schedules_list", "schedule_get"}
    stack.apply(workflows={"tiny": {"steps": {"a": ok_step()}}},
                schedules={"tiny_now": on_demand("tiny")})
    tokens = {}
    for scope in ("full", "read"):
        status, body = await stack.call("POST", "/tokens", {"label": f"mcp-{scope}",
                                                            "scope": scope, "ttl_days": 1})
        assert status == 201
        tokens[scope] = body["token"]

    def client(token: str) -> Any:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                  timeout=httpx2.Timeout(60))
        return http, Client(streamable_http_client(stack.sched.admin + "/admin/api/mcp",
                                                   http_client=http))

    def body(res: Any) -> Any:
        assert res.is_error is False, res.content
        return res.structured_content

    http, c = client(tokens["full"])
    async with http, c as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert names <= set(tools)
        for n in names:
            assert tools[n].annotations.read_only_hint is (n in reads), n
        assert tools["workflow_run_cancel"].annotations.destructive_hint is True
        triggered = body(await mcp.call_tool("schedule_trigger", {"name": "tiny_now"}))
        assert triggered["name"] == "tiny_now"

        async def run_key() -> Any:
            got = body(await mcp.call_tool("workflow_runs_list", {"schedule": "tiny_now"}))
            done = [r for r in got["runs"] if r["status"] == "completed"]
            return done[0]["key"] if done else None
        key = await wait_for(run_key, 60.0, "a completed run through the tools")
        run = body(await mcp.call_tool("workflow_run_get", {"run_id": key}))["run"]
        assert run["steps"][0]["job"] == f"job:wf_{key}_a"
        rerun = body(await mcp.call_tool("workflow_run_rerun", {"run_id": key}))
        assert rerun["rerun_of"] == f"_00_workflow_run:{key}"
        res = await mcp.call_tool("workflow_run_retry", {"run_id": key})
        assert res.is_error and res.structured_content["status"] == 409
        res = await mcp.call_tool("workflow_run_cancel", {"run_id": key})
        assert res.is_error and res.structured_content["status"] == 409
        many = body(await mcp.call_tool("workflow_runs_cancel", {"run_ids": [key, "nope"]}))
        assert [(r["id"], r["ok"], r["status"]) for r in many["results"]] == \
            [(key, False, 409), ("nope", False, 404)] and many["cancelled"] == 0
        assert body(await mcp.call_tool("schedule_pause", {"name": "tiny_now"}))["paused"]
        one = body(await mcp.call_tool("schedule_get", {"name": "tiny_now"}))["schedule"]
        assert one["paused"] is True and one["rollup"]["success"] >= 1
        assert not body(await mcp.call_tool("schedule_resume", {"name": "tiny_now"}))["paused"]
        listed = body(await mcp.call_tool("schedules_list", {}))["schedules"]
        assert [s["name"] for s in listed] == ["tiny_now"]
        res = await mcp.call_tool("schedule_release", {"name": "tiny_now"})
        assert res.is_error and res.structured_content["status"] == 409
    http, c = client(tokens["read"])
    async with http, c as mcp:
        listed_names = {t.name for t in (await mcp.list_tools()).tools}
        assert names & listed_names == reads
        res = await mcp.call_tool("schedule_trigger", {"name": "tiny_now"})
        assert res.is_error and res.structured_content["status"] == 403
