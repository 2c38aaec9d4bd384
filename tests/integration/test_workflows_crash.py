"""The workflow engine across `kill -9` of the scheduler, with real processes (database host,
`svc-scheduler`, one SSP running the jobs, a backend): runs in the middle of their steps and
schedules in the middle of their fires. After the restart every run continues or ends with the
code that says why, no step's job is created twice for one attempt, and every due time of a
schedule is accounted for exactly once: fired (on time or as a catch-up) or recorded
`not_started` (beyond the catch-up bound).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from surrealdb import RecordID

from scheduler.workflows import clock
from tests.integration.test_workflows import NEVER, ok_step, on_demand, run_in, steps_of
from tests.integration.test_workflows import trigger_run as _trigger
from tests.support.procs import DbHost
from tests.support.ssp_stack import root_db, wait_for
from tests.support.workflow_stack import WorkflowStack, prepare, start_stack

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(shared_db_host: DbHost, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[WorkflowStack]:
    ns = "wfc_" + uuid.uuid4().hex[:8]
    asyncio.run(prepare(shared_db_host, ns))
    s = start_stack(tmp_path_factory.mktemp("wfc"), shared_db_host, ns)
    try:
        yield s
    finally:
        s.stop()


async def _sql(stack: WorkflowStack, sql: str, vars: dict[str, Any] | None = None) -> Any:
    root = await root_db(stack.host, stack.ns, stack.ns)
    try:
        return await root.query_one(sql, vars)
    finally:
        await root.close()


async def kill_and_restart(stack: WorkflowStack, down_secs: float,
                           while_down: Any = None) -> None:
    stack.sched.process.kill9()
    if while_down is not None:
        await while_down()
    await asyncio.sleep(down_secs)  # the outage itself: due times pass meanwhile
    await asyncio.to_thread(stack.restart_scheduler)
    await asyncio.to_thread(stack.wait_ssp_ready)


async def test_kill9_in_the_middle_of_runs_every_run_continues_and_no_job_is_doubled(
        stack: WorkflowStack) -> None:
    stack.backend.backend.work_secs = 0.3  # each step takes a while: the kill lands mid-run
    chain = {f"s{i}": ok_step(*([f"s{i - 1}"] if i else []), path="/work") for i in range(6)}
    stack.apply(workflows={"chain6": {"steps": chain},
                           "diamond": {"steps": {"a": ok_step(path="/work"),
                                                 "b": ok_step("a", path="/work"),
                                                 "c": ok_step("a", path="/work"),
                                                 "d": ok_step("b", "c", path="/work")}}},
                schedules={"c1": on_demand("chain6"), "c2": on_demand("chain6"),
                           "d1": on_demand("diamond")})
    keys = list(await asyncio.gather(_trigger(stack, "c1"), _trigger(stack, "c2"),
                                     _trigger(stack, "d1")))

    async def midway() -> bool:  # every run has a completed step, none has ended
        for key in keys:
            _, body = await stack.call("GET", f"/workflows/runs/{key}")
            run = body["run"]
            if run["status"] != "running" or not any(s["status"] == "completed"
                                                     for s in run["steps"]):
                return False
        return True
    await wait_for(midway, 60.0, "every run midway")
    await kill_and_restart(stack, 1.0)
    for key in keys:
        run = await run_in(stack, key, "completed", "failed", "killed", timeout=120)
        assert run["status"] == "completed", run
        for s in run["steps"]:
            assert s["job"] == f"job:wf_{key}_{s['name']}" and s["jobs"] == [s["job"]]
            assert len(stack.backend.calls_of(s["job"])) == 1, s
        rows = await _sql(stack, "SELECT VALUE id FROM job WHERE workflow_run = $r",
                          {"r": RecordID("_00_workflow_run", key)})
        assert len(rows) == len(run["steps"])  # no attempt's job was created twice
    stack.backend.backend.work_secs = 0.02


async def test_kill9_during_fires_loses_and_doubles_no_due_time(stack: WorkflowStack) -> None:
    every = "* * * * * *"
    table = {f"t{i}": {"cron": every, "table": "job", "path": "/ok", "catch_up": i % 3,
                       "concurrency": "allow"} for i in range(6)}
    flows = {f"w{i}": {"cron": every, "workflow": "pair", "catch_up": 2,
                       "concurrency": "allow"} for i in range(2)}
    stack.apply(workflows={"pair": {"steps": {"a": ok_step(), "b": ok_step("a")}}},
                schedules={**table, **flows})
    names = sorted(table) + sorted(flows)

    async def fired(n: int = 3) -> bool:
        got = await _sql(stack, "SELECT schedule, count() AS n FROM _00_schedule_run GROUP BY "
                         "schedule")
        by = {r["schedule"]: r["n"] for r in got}
        return all(by.get(name, 0) >= n for name in names)
    await wait_for(fired, 60.0, "three fires of every schedule")
    # Due times found within `clock.ON_TIME` of a pass are on time, not missed (a busy clock
    # is not an outage): only the ones older than that are catch-ups or `not_started`. The
    # outage lasts at least this sleep (the restart and its first pass only add to it), so
    # every schedule's cursor (<= the kill) is followed by due times in (kill, kill + 4 s)
    # that the first pass finds stale: at least 3, more than the largest bound here (2).
    await kill_and_restart(stack, clock.ON_TIME.total_seconds() + 4.0)
    before = {r["schedule"]: r["n"] for r in await _sql(
        stack, "SELECT schedule, count() AS n FROM _00_schedule_run GROUP BY schedule")}

    async def fired_after() -> bool:
        got = await _sql(stack, "SELECT schedule, count() AS n FROM _00_schedule_run GROUP BY "
                         "schedule")
        return all(r["n"] >= before.get(r["schedule"], 0) + 3 for r in got
                   if r["schedule"] in names)
    await wait_for(fired_after, 60.0, "fires after the restart")
    for name in names:
        assert (await stack.call("POST", f"/schedules/{name}/pause"))[0] == 200

    async def quiet() -> bool:
        return not await _sql(stack, "SELECT id FROM _00_schedule_run WHERE status IN "
                              "['running', 'queued'] LIMIT 1")
    await wait_for(quiet, 60.0, "every fire ended")
    spec = {**table, **flows}
    for name in names:
        rows = await _sql(stack, "SELECT * FROM _00_schedule_run WHERE schedule = $n",
                          {"n": name})
        fires = [r for r in rows if r.get("error", {}).get("code") != "not_started"]
        missed = [r["error"] for r in rows if r.get("error", {}).get("code") == "not_started"]
        dues = sorted(r["due_at"] for r in fires)
        assert len(dues) == len(set(dues)), f"{name}: a due time fired twice"
        covered = {d.replace(microsecond=0) for d in dues}
        for m in missed:
            since = datetime.fromtimestamp(m["since"] / 1000, tz=dues[0].tzinfo)
            until = datetime.fromtimestamp(m["until"] / 1000, tz=dues[0].tzinfo)
            assert m["missed"] == int((until - since).total_seconds()) + 1
            at = since
            while at <= until:
                assert at not in covered, f"{name}: {at} both fired and missed"
                covered.add(at)
                at += timedelta(seconds=1)
        first, last = min(covered), max(covered)
        expected = int((last - first).total_seconds()) + 1
        assert len(covered) == expected, f"{name}: due times lost between {first} and {last}"
        late = [r for r in fires if r.get("catch_up")]
        bound = spec[name]["catch_up"]
        # the outage held more stale due times than any bound: each bound was used in full,
        # and the rest were recorded
        assert len(late) == bound, f"{name}: {len(late)} catch-up fires, bound {bound}"
        assert len(missed) == 1 and missed[0]["missed"] >= 1, f"{name}: {missed}"
        assert all(r["status"] == "completed" for r in fires), [
            r for r in fires if r["status"] != "completed"]
        for r in fires:
            if r.get("job") is not None:
                assert len(stack.backend.calls_of(f"job:{r['job'].id}")) == 1
        if late:  # the catch-ups are the newest stale due times, right after the missed ones
            until = datetime.fromtimestamp(missed[0]["until"] / 1000, tz=dues[0].tzinfo)
            assert min(r["due_at"] for r in late).replace(microsecond=0) \
                == until + timedelta(seconds=1), name


async def test_after_a_restart_a_vanished_job_is_lost_dispatch_and_an_unclaimed_one_never_dispatched(
        stack: WorkflowStack) -> None:
    stack.backend.hold()
    stack.apply(workflows={"held": {"steps": {"a": ok_step(path="/hold"), "b": ok_step("a")}},
                           "orphan": {"steps": {"a": {"table": "job_unserved"}}}},
                schedules={"held_now": on_demand("held"), "orphan_now": on_demand("orphan"),
                           "idle": {"cron": NEVER, "table": "job"}})
    held, orphan = await asyncio.gather(_trigger(stack, "held_now"),
                                        _trigger(stack, "orphan_now"))

    async def called() -> bool:
        return bool(stack.backend.calls_of(f"job:wf_{held}_a"))
    await wait_for(called, 60.0, "the held step's call")

    async def remove_job() -> None:  # e.g. terminal rows cleared while the scheduler is down
        await _sql(stack, "DELETE $j", {"j": RecordID("job", f"wf_{held}_a")})
    await kill_and_restart(stack, 0.5, remove_job)
    run = await run_in(stack, held, "failed", "completed", timeout=120)
    a, b = steps_of(run)["a"], steps_of(run)["b"]
    assert a["status"] == "failed" and a["error"]["code"] == "lost_dispatch"
    assert a["error"]["job"] == f"job:wf_{held}_a"
    assert b["status"] == "skipped" and b["error"]["code"] == "upstream_failed"
    assert run["error"]["code"] == "step_failed"
    run = await run_in(stack, orphan, "failed", "completed", timeout=120)
    assert steps_of(run)["a"]["error"]["code"] == "never_dispatched"
    stack.backend.release()
