"""Outbox jobs on a real SSP process: a pending row is claimed, the backend (a real HTTP server
the test runs) is called, the outcome is written to the row (spec "Job records", issue 6)."""

from __future__ import annotations

from pathlib import Path

from tests.support.job_stack import SECRET, TOKEN, JobStack, job_stack
from tests.support.procs import DbHost
from tests.support.ssp_stack import wait_for

ERROR_KEYS = {"at", "attempt", "kind", "status", "error"}  # every `errors` entry


async def test_pending_row_is_called_with_bearer_and_completes_with_result(
        host: DbHost, tmp_path: Path) -> None:
    async with job_stack(host, tmp_path) as st:
        rid = await st.add_job("job", "a1", "/ok", max_retries=2)
        row = await st.wait_status(rid, "completed")
        assert row["result"] == {"ok": True, "echo": {"key": "a1"}}
        assert row.get("errors") in (None, [])
        assert row["assignee"] and row["attempts"] == 1
        calls = st.backend.calls_of("job:a1")
        assert len(calls) == 1
        assert calls[0].auth == f"Bearer {TOKEN}" and calls[0].body == {"key": "a1"}


async def test_failure_is_retried_until_the_budget_is_spent_with_every_attempt_in_errors(
        host: DbHost, tmp_path: Path) -> None:
    async with job_stack(host, tmp_path) as st:
        rid = await st.add_job("job", "f1", "/fail", max_retries=2)
        row = await st.wait_status(rid, "failed")
        assert len(st.backend.calls_of("job:f1")) == 3  # the first call + 2 retries
        assert [(e["attempt"], e["kind"], e["status"]) for e in row["errors"]] == [
            (1, "http", 500), (2, "http", 500), (3, "http", 500)]
        assert all(set(e) == ERROR_KEYS for e in row["errors"])
        assert all("boom" in e["error"] and e["at"] for e in row["errors"])
        assert row["attempts"] == 3
        dflt = await st.add_job("job", "f2", "/fail")  # no max_retries: default 3
        row = await st.wait_status(dflt, "failed")
        assert len(row["errors"]) == 4 and len(st.backend.calls_of("job:f2")) == 4


async def test_backend_timeout_is_a_failed_attempt(host: DbHost, tmp_path: Path) -> None:
    async with job_stack(host, tmp_path, tables={"main": {"timeout_secs": 0.5}}) as st:
        rid = await st.add_job("job", "t1", "/hang", max_retries=1)
        row = await st.wait_status(rid, "failed")
        assert [e["error"] for e in row["errors"]] == ["backend timed out after 0.5s"] * 2
        # No HTTP answer: the same keys as any entry, status null.
        assert all(set(e) == ERROR_KEYS for e in row["errors"])
        assert [(e["kind"], e["status"]) for e in row["errors"]] == [("timeout", None)] * 2


async def test_backend_down_then_up_completes_after_failed_attempts(
        host: DbHost, tmp_path: Path) -> None:
    async with job_stack(host, tmp_path, backend_up=False,
                         tables={"main": {"backoff_ms": 200}}) as st:
        rid = await st.add_job("job", "d1", "/ok", max_retries=50)

        async def failed_once() -> bool:
            return bool((await st.row(rid)).get("errors"))
        await wait_for(failed_once, 60.0, "a failed attempt while the backend is down")
        await st.backend.start()
        row = await st.wait_status(rid, "completed")
        assert row["result"]["ok"] is True
        assert row["errors"] and all("unreachable" in e["error"] for e in row["errors"])
        assert {(e["kind"], e["status"]) for e in row["errors"]} == {("unreachable", None)}
        assert all(set(e) == ERROR_KEYS for e in row["errors"])


async def test_4xx_other_than_408_425_429_and_redirects_fail_at_once_without_retries(
        host: DbHost, tmp_path: Path) -> None:
    async with job_stack(host, tmp_path) as st:
        rid = await st.add_job("job", "x1", "/reject", max_retries=5)
        row = await st.wait_status(rid, "failed")
        assert len(st.backend.calls_of("job:x1")) == 1  # the budget is not spent on repeats
        [err] = row["errors"]
        assert (err["attempt"], err["kind"], err["status"]) == (1, "rejected", 400)
        assert row["attempts"] == 1
        # The backend echoed the bearer; the stored text shows it masked.
        assert TOKEN not in err["error"] and "Bearer ***" in err["error"]

        moved = await st.add_job("job", "m1", "/redirect", max_retries=5)
        row = await st.wait_status(moved, "failed")
        assert [(e["kind"], e["status"]) for e in row["errors"]] == [("rejected", 307)]
        assert [c.path for c in st.backend.calls] == ["/reject", "/redirect"]  # not followed


async def test_429_is_retried_after_the_backends_retry_after(host: DbHost, tmp_path: Path
                                                              ) -> None:
    async with job_stack(host, tmp_path) as st:  # backoff_ms 50: Retry-After (1 s) is longer
        rid = await st.add_job("job", "b1", "/busy-once", max_retries=1)
        row = await st.wait_status(rid, "completed")
        assert [(e["kind"], e["status"]) for e in row["errors"]] == [("http", 429)]
        first, second = (c.at for c in st.backend.calls_of("job:b1"))
        assert second - first >= 0.95


async def test_kill_in_flight_cancels_the_call_and_fails_the_job(
        host: DbHost, tmp_path: Path) -> None:
    async with job_stack(host, tmp_path) as st:
        rid = await st.add_job("job", "k1", "/hang")
        await st.wait_calls("job:k1")
        status, body = await st.post("/job/kill", {"id": "job:k1"})
        assert status == 200 and body == {"id": "job:k1", "action": "cancelled",
                                          "status": "failed"}
        row = await st.row(rid)
        assert row["status"] == "failed" and row["errors"][-1]["error"] == "killed"
        assert row["errors"][-1]["kind"] == "killed" and row["errors"][-1]["status"] is None
        await _call_cancelled(st)


async def test_a_kill_flagged_on_the_row_by_another_ssp_cancels_the_call_here(
        host: DbHost, tmp_path: Path) -> None:
    # An SSP that misses the scheduler's kill broadcast still kills its job: the SSPs that got
    # it flag the row, and the owner's next lease renewal (every lease_secs / 3) acts on it.
    async with job_stack(host, tmp_path) as st:
        rid = await st.add_job("job", "f1", "/hang")
        await st.wait_calls("job:f1")
        flagged = await st.root.query_one(
            "UPDATE $id SET kill_requested = true WHERE status = 'processing' RETURN id",
            {"id": rid})
        assert flagged, "the job should be processing"
        row = await st.wait_status(rid, "failed")
        assert row["errors"][-1]["error"] == "killed" and row["errors"][-1]["kind"] == "killed"
        assert len(st.backend.calls_of("job:f1")) == 1
        await _call_cancelled(st)


async def test_recover_of_one_job_admits_it_now_and_answers_its_row(
        host: DbHost, tmp_path: Path) -> None:
    # The scheduler's dispatch: `/job/recover {id}` claims a row written without an ingest
    # event in the admission round it starts, and reports who holds it.
    async with job_stack(host, tmp_path) as st:
        await st.add_job("job", "d1", "/hang")
        status, body = await st.post("/job/recover", {"id": "job:d1"})
        assert status == 200, body
        assert body["job"] == {"id": "job:d1", "status": "processing",
                               "assignee": body["ssp_id"]}
        await st.wait_calls("job:d1")
        status, body = await st.post("/job/recover", {"id": "job:absent"})
        assert status == 404 and body["error"] == "not_found"
        status, body = await st.post("/job/recover", {"id": "post:1"})
        assert status == 404 and "not a job table" in body["message"]
        await st.post("/job/kill", {"id": "job:d1"})


async def test_kill_before_dequeue_fails_the_job_without_calling_the_backend(
        host: DbHost, tmp_path: Path) -> None:
    async with job_stack(host, tmp_path) as st:
        blocker = await st.add_job("job_one", "b1", "/hang")
        await st.wait_calls("job_one:b1")
        queued = await st.add_job("job_one", "q1", "/ok")
        status, body = await st.post("/job/kill", {"id": "job_one:q1"})
        assert status == 200 and body["action"] == "flagged" and body["status"] == "pending"
        assert (await st.row(queued))["status"] == "pending"  # the slot is still taken
        await st.post("/job/kill", {"id": "job_one:b1"})
        await st.wait_status(blocker, "failed")
        row = await st.wait_status(queued, "failed")
        assert row["errors"][-1]["error"] == "killed"
        assert st.backend.calls_of("job_one:q1") == []


async def test_retry_of_a_failed_job_resets_it_to_pending_and_it_runs_again(
        host: DbHost, tmp_path: Path) -> None:
    async with job_stack(host, tmp_path) as st:
        rid = await st.add_job("job", "r1", "/toggle", max_retries=0)
        failed = await st.wait_status(rid, "failed")
        assert len(failed["errors"]) == 1
        st.backend.toggle_ok = True
        status, body = await st.post("/job/retry", {"id": "job:r1"})
        assert status == 200 and body == {"id": "job:r1", "status": "pending"}
        row = await st.wait_status(rid, "completed")
        assert len(row["errors"]) == 1  # the earlier failure is kept
        assert row["result"] == {"ok": True, "path": "/toggle"}


async def test_retry_answers_409_while_running_404_unknown_400_malformed(
        host: DbHost, tmp_path: Path) -> None:
    async with job_stack(host, tmp_path) as st:
        await st.add_job("job", "h1", "/hang")
        await st.wait_calls("job:h1")
        status, body = await st.post("/job/retry", {"id": "job:h1"})
        assert status == 409 and body["error"] == "not_terminal"
        assert (await st.post("/job/retry", {"id": "job:nope"}))[0] == 404
        assert (await st.post("/job/retry", {"id": "post:1"}))[0] == 404  # not a job table
        assert (await st.post("/job/kill", {"id": "job:nope"}))[0] == 404
        for bad in ({}, {"id": 3}, {"id": "no-colon"}, [1]):
            assert (await st.post("/job/retry", bad))[0] == 400
            assert (await st.post("/job/kill", bad))[0] == 400
        assert (await st.post("/job/recover", {"table": "1x"}))[0] == 400
        status, body = await st.post("/job/recover", {})
        assert status == 200 and body["reclaimed"] == 0, body
        async with st.http.post(st.base + "/job/kill", json={"id": "job:h1"}) as r:
            assert r.status == 401  # bearer like the other routes
        await st.post("/job/kill", {"id": "job:h1"})
        status, _ = await st.request("GET", "/debug/memory")  # jobs.info() is in there
        assert status == 200
        for secret in (SECRET, TOKEN):
            assert secret not in "".join(st.bodies)
            assert secret not in st.ssp.process.log_text()


async def _call_cancelled(st: JobStack) -> None:
    """Until the backend has seen its in-flight call go away (the SSP cancelled it)."""
    async def backend_saw_disconnect() -> bool:
        return st.backend.inflight == 0
    await wait_for(backend_saw_disconnect, 30.0, "the backend call cancelled")


async def test_a_job_path_that_leaves_the_base_path_fails_without_a_call(
        host: DbHost, tmp_path: Path) -> None:
    """Issue 32: a row's `path` with `../` or `%2e%2e` reached the backend outside its base
    path, still carrying the backend's bearer. It now fails at once (`rejected`), uncalled."""
    st_tables = {"main": {"base_url": "{backend}/api"}}
    async with job_stack(host, tmp_path, tables=st_tables) as st:
        bad = [await st.add_job("job", f"esc{i}", path, max_retries=3)
               for i, path in enumerate(("../admin", "%2e%2e/admin", "x/../../admin"))]
        good = await st.add_job("job", "in1", "/ok", max_retries=0)
        for rid in bad:
            row = await st.wait_status(rid, "failed")
            assert [e["kind"] for e in row["errors"]] == ["rejected"]
            assert "base path" in row["errors"][0]["error"]
        await st.wait_status(good, "completed")
        assert [c.path for c in st.backend.calls] == ["/api/ok"]
        assert all(c.auth == f"Bearer {TOKEN}" for c in st.backend.calls)
