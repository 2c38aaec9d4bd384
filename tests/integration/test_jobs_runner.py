"""Outbox jobs on a real SSP process: a pending row is claimed, the backend (a real HTTP server
the test runs) is called, the outcome is written to the row (spec "Job records", issue 6).

The tests share one SSP and one backend (`shared`), each with job keys of its own and reading
only its own jobs' calls, so their order does not matter; the job tables `job_short` (timeout
0.5 s) and `job_api` (base URL with a path) serve the tests that once configured an SSP of
their own. Only the test that starts with the backend down starts its own."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from tests.support.job_stack import (
    JOB_SCHEMA,
    SECRET,
    TOKEN,
    JobStack,
    job_config,
    job_stack,
)
from tests.support.procs import DbHost
from tests.support.ssp_stack import (
    APP_SCHEMA,
    Ssp,
    apply_schema,
    root_db,
    start_ssp,
    unique_db,
    wait_for,
)
from tests.support.workflow_stack import ThreadedBackend

ERROR_KEYS = {"at", "attempt", "kind", "status", "error"}  # every `errors` entry


@dataclass
class Shared:
    ns: str
    db: str
    ssp: Ssp
    backend: ThreadedBackend
    env: dict[str, str]
    tmp: Path


def _shared_config(url: str) -> str:
    config = json.loads(job_config(url))
    tables = config["job_tables"]
    tables["short"] = {**tables["main"], "name": "job_short", "timeout_secs": 0.5}
    tables["api"] = {**tables["main"], "name": "job_api", "base_url": url + "/api"}
    return json.dumps(config)


@pytest.fixture(scope="module")
def shared(host: DbHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    tmp = tmp_path_factory.mktemp("jobs")
    ns, db = unique_db()
    backend = ThreadedBackend().start()
    env = {"SVC_JOB_CONFIG": _shared_config(backend.url), "SVC_AUTH_SECRET": SECRET,
           "SVC_SSP_JOB_SWEEP_SECS": "1", "SVC_SSP_SHARDS": "1"}
    ssp: Ssp | None = None
    try:
        async def prepare() -> None:
            root = await root_db(host, ns, db)
            await root.query(APP_SCHEMA + JOB_SCHEMA
                             + "DEFINE TABLE job_short SCHEMALESS; DEFINE TABLE job_api SCHEMALESS;")
            apply_schema(host, ns, db)
            await root.close()

        asyncio.run(prepare())
        ssp = start_ssp(tmp, host, ns, db, **env)
        shared = Shared(ns, db, ssp, backend, env, tmp)

        async def ready() -> None:
            async with _stack(host, shared) as st:
                await st.ssp.wait_ready()
                await wait_for(lambda: _http_up(st), 30.0, "the SSP's HTTP listener")

        asyncio.run(ready())
        yield shared
    finally:
        code = ssp.stop() if ssp is not None else 0
        backend.stop()
        assert code == 0, ssp.process.log_text()[-3000:] if ssp is not None else ""


class _stack:
    """A JobStack over the shared SSP and backend, with a root connection, an HTTP session and
    a hub client of the current event loop."""

    def __init__(self, host: DbHost, shared: Shared) -> None:
        self.host, self.shared = host, shared

    async def __aenter__(self) -> JobStack:
        s = self.shared
        root = await root_db(self.host, s.ns, s.db)
        self.st = JobStack(self.host, s.ns, s.db, s.ssp, root, s.backend.backend,
                           aiohttp.ClientSession(), s.env, s.tmp)
        return self.st

    async def __aexit__(self, *exc: object) -> None:
        self.st.ssp.close_client()
        await self.st.http.close()
        await self.st.root.close()


async def _http_up(st: JobStack) -> bool:
    try:
        status, _ = await st.get("/health")
        return status == 200
    except aiohttp.ClientError:
        return False


@pytest.fixture
async def st(host: DbHost, shared: Shared) -> AsyncIterator[JobStack]:
    async with _stack(host, shared) as stack:
        yield stack


def _paths(st: JobStack, *jobs: str) -> list[str]:
    return [c.path for c in st.backend.calls if c.job in jobs]


async def test_pending_row_is_called_with_bearer_and_completes_with_result(
        st: JobStack) -> None:
    rid = await st.add_job("job", "a1", "/ok", max_retries=2)
    row = await st.wait_status(rid, "completed")
    assert row["result"] == {"ok": True, "echo": {"key": "a1"}}
    assert row.get("errors") in (None, [])
    assert row["assignee"] and row["attempts"] == 1
    calls = st.backend.calls_of("job:a1")
    assert len(calls) == 1
    assert calls[0].auth == f"Bearer {TOKEN}" and calls[0].body == {"key": "a1"}


async def test_failure_is_retried_until_the_budget_is_spent_with_every_attempt_in_errors(
        st: JobStack) -> None:
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


async def test_backend_timeout_is_a_failed_attempt(st: JobStack) -> None:
    rid = await st.add_job("job_short", "t1", "/hang", max_retries=1)  # timeout_secs 0.5
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
        st: JobStack) -> None:
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
    assert _paths(st, "job:x1", "job:m1") == ["/reject", "/redirect"]  # not followed


async def test_429_is_retried_after_the_backends_retry_after(st: JobStack) -> None:
    # backoff_ms 50: Retry-After (1 s) is longer
    rid = await st.add_job("job", "b1", "/busy-once", max_retries=1)
    row = await st.wait_status(rid, "completed")
    assert [(e["kind"], e["status"]) for e in row["errors"]] == [("http", 429)]
    first, second = (c.at for c in st.backend.calls_of("job:b1"))
    assert second - first >= 0.95


async def test_kill_in_flight_cancels_the_call_and_fails_the_job(
        st: JobStack) -> None:
    rid = await st.add_job("job", "k1", "/hang")
    await st.wait_calls("job:k1")
    status, body = await st.post("/job/kill", {"id": "job:k1"})
    assert status == 200 and body == {"id": "job:k1", "action": "cancelled",
                                      "status": "failed"}
    row = await st.row(rid)
    assert row["status"] == "failed" and row["errors"][-1]["error"] == "killed"
    assert row["errors"][-1]["kind"] == "killed" and row["errors"][-1]["status"] is None
    await _call_cancelled(st, "job:k1")


async def test_a_kill_flagged_on_the_row_by_another_ssp_cancels_the_call_here(
        st: JobStack) -> None:
    # An SSP that misses the scheduler's kill broadcast still kills its job: the SSPs that got
    # it flag the row, and the owner's next lease renewal (every lease_secs / 3) acts on it.
    rid = await st.add_job("job", "kf1", "/hang")
    await st.wait_calls("job:kf1")
    flagged = await st.root.query_one(
        "UPDATE $id SET kill_requested = true WHERE status = 'processing' RETURN id",
        {"id": rid})
    assert flagged, "the job should be processing"
    row = await st.wait_status(rid, "failed")
    assert row["errors"][-1]["error"] == "killed" and row["errors"][-1]["kind"] == "killed"
    assert len(st.backend.calls_of("job:kf1")) == 1
    await _call_cancelled(st, "job:kf1")


async def test_recover_of_one_job_admits_it_now_and_answers_its_row(
        st: JobStack) -> None:
    # The scheduler's dispatch: `/job/recover {id}` claims a row written without an ingest
    # event in the admission round it starts, and reports who holds it.
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
        st: JobStack) -> None:
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
        st: JobStack) -> None:
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
        st: JobStack) -> None:
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


async def _call_cancelled(st: JobStack, job: str) -> None:
    """Until the backend has seen the job's in-flight call go away (the SSP cancelled it)."""
    async def backend_saw_disconnect() -> bool:
        return st.backend.inflight_by_job.get(job) == 0
    await wait_for(backend_saw_disconnect, 30.0, "the backend call cancelled")


async def test_a_job_path_that_leaves_the_base_path_fails_without_a_call(st: JobStack) -> None:
    """Issue 32: a row's `path` with `../` or `%2e%2e` reached the backend outside its base
    path, still carrying the backend's bearer. It now fails at once (`rejected`), uncalled."""
    # table job_api: base URL `<backend>/api`
    bad = [await st.add_job("job_api", f"esc{i}", path, max_retries=3)
           for i, path in enumerate(("../admin", "%2e%2e/admin", "x/../../admin"))]
    good = await st.add_job("job_api", "in1", "/ok", max_retries=0)
    for rid in bad:
        row = await st.wait_status(rid, "failed")
        assert [e["kind"] for e in row["errors"]] == ["rejected"]
        assert "base path" in row["errors"][0]["error"]
    await st.wait_status(good, "completed")
    ours = [c for c in st.backend.calls if (c.job or "").startswith("job_api:")]
    assert [c.path for c in ours] == ["/api/ok"]
    assert all(c.auth == f"Bearer {TOKEN}" for c in ours)
