"""Machine pools through the real path: a real `svc-scheduler` process with a pool of the local
provider, whose agents are real processes (`python -m scheduler.pools.agent`) taking jobs from
the pool listener; job rows in a real database host; a real HTTP backend run by the test.
The admin API (break-glass sign-in) is how the tests look at pools and machines."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from surrealdb import RecordID

from dbclient import Database
from tests.integration.test_scheduler_process import SchedulerProc, launch, write_config
from tests.support.procs import DbHost, free_port
from tests.support.proctable import alive, cmdline
from tests.support.ssp_stack import root_db, wait_for

TOKEN = "pool-backend-token-5e6f7a8b9c"
ADMIN_PASSWORD = "pool-admin-breakglass-1234"
SCHEMA = "DEFINE TABLE pjob SCHEMALESS;"


@dataclass
class Backend:
    """Records every call as (job id, start, end). Paths: `/hold` answers once `release` is
    set; `/hang-once` never answers the first call of a job, 200 afterwards; `/ok` 200."""

    port: int = field(default_factory=free_port)
    calls: list[dict[str, Any]] = field(default_factory=list)
    inflight: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def calls_of(self, job: str) -> list[dict[str, Any]]:
        return [c for c in self.calls if c["job"] == job]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        job = request.headers.get("X-Job-Id")
        call = {"job": job, "path": request.path, "start": time.monotonic(), "end": None,
                "auth": request.headers.get("Authorization")}
        first = not self.calls_of(job or "")
        self.calls.append(call)
        self.inflight += 1
        try:
            if request.path == "/hold":
                await self.release.wait()
            if request.path == "/hang-once" and first:
                await asyncio.Event().wait()
            return web.json_response({"ok": True, "job": job})
        finally:
            self.inflight -= 1
            call["end"] = time.monotonic()


@dataclass
class PoolStack:
    s: SchedulerProc
    admin: str
    http: aiohttp.ClientSession
    token: str
    root: Database
    backend: Backend
    ns: str
    pool_url: str = ""

    async def get(self, path: str) -> Any:
        async with self.http.get(self.admin + path, headers=self._auth()) as r:
            assert r.status == 200, (path, r.status, await r.text())
            return await r.json()

    async def post(self, path: str, body: Any = None) -> tuple[int, Any]:
        async with self.http.post(self.admin + path, json=body, headers=self._auth()) as r:
            return r.status, await r.json(content_type=None)

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def pool(self, name: str = "p1") -> dict[str, Any]:
        pools = (await self.get("/admin/api/pools"))["pools"]
        return next(p for p in pools if p["name"] == name)

    async def machines(self, name: str = "p1") -> list[dict[str, Any]]:
        return (await self.get(f"/admin/api/pools/{name}/machines"))["machines"]

    async def add_jobs(self, n: int, path: str, prefix: str = "j") -> list[str]:
        keys = [f"{prefix}{i:03d}" for i in range(n)]
        for i, k in enumerate(keys):
            await self.root.query("CREATE $id CONTENT $c", {"id": RecordID("pjob", k), "c": {
                "status": "pending", "path": path, "payload": {"n": i},
                "created_at": time.time() + i * 1e-3, "max_retries": 3}})
        return [f"pjob:{k}" for k in keys]

    async def rows(self) -> dict[str, dict[str, Any]]:
        got = await self.root.query_one("SELECT * FROM pjob")
        return {f"pjob:{r['id'].id}": r for r in got or []}

    async def all_completed(self, ids: list[str]) -> bool:
        rows = await self.rows()
        return all(rows.get(i, {}).get("status") == "completed" for i in ids)


def _launch(tmp: Path, host: DbHost, ns: str, backend_url: str, pool: dict[str, Any],
            admin_port: int, pool_port: int) -> SchedulerProc:
    port = free_port()
    jobs = {"job_tables": {"worker": {"name": "pjob", "base_url": backend_url,
                                      "auth_token": TOKEN, "timeout_secs": 60,
                                      "lease_secs": 30, "backoff_ms": 50}}}
    return launch(tmp, write_config(tmp, host, ns, port), port, ns,
                  SVC_BACKENDS=json.dumps([{"name": "worker", "run_on": {"pool": "p1"}}]),
                  SVC_JOB_CONFIG=json.dumps(jobs), SVC_POOLS=json.dumps({"p1": pool}),
                  SVC_POOL_HOST="127.0.0.1", SVC_POOL_PORT=str(pool_port),
                  SVC_POOL_HEARTBEAT_MS="200", SVC_POOL_MACHINE_TIMEOUT_MS="30000",
                  SVC_POOL_TICK_MS="100", SVC_ADMIN_PORT=str(admin_port),
                  SVC_ADMIN_PASSWORD=ADMIN_PASSWORD)


@contextlib.asynccontextmanager
async def pool_stack(tmp: Path, host: DbHost, pool: dict[str, Any]
                     ) -> AsyncIterator[PoolStack]:
    ns = "pools_" + uuid.uuid4().hex[:8]
    root = await root_db(host, ns, ns)
    await root.query(SCHEMA)
    backend = Backend()
    await backend.start()
    admin_port, pool_port = free_port(), free_port()
    s = _launch(tmp, host, ns, backend.url, pool, admin_port, pool_port)
    pids: set[int] = set()
    stack: PoolStack | None = None
    try:
        # force_close: a restarted scheduler must not be reached on a dead keep-alive socket
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60),
                                         connector=aiohttp.TCPConnector(force_close=True)
                                         ) as http:
            admin = f"http://127.0.0.1:{admin_port}"
            async with http.post(admin + "/admin/api/session",
                                 json={"password": ADMIN_PASSWORD}) as r:
                assert r.status == 200, await r.text()
                token = (await r.json())["token"]
            stack = PoolStack(s, admin, http, token, root, backend, ns,
                              f"http://127.0.0.1:{pool_port}/pool/v1")
            stack.relaunch = lambda: _launch(  # type: ignore[attr-defined]
                tmp, host, ns, backend.url, pool, admin_port, pool_port)
            stack.pids = pids  # type: ignore[attr-defined]
            yield stack
            pids.update(m["pid"] for m in await stack.machines() if m.get("pid"))
    finally:
        backend.release.set()
        proc = stack.s if stack is not None else s
        code = proc.process.stop()
        await backend.stop()
        await root.close()
    # The scheduler ends its agents when it stops: none is left behind.
    assert code == 0, proc.process.log_text()[-3000:]
    deadline = time.monotonic() + 30
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not [p for p in pids if alive(p)], "agent processes left behind"


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals],
                   key=lambda e: (e[0], e[1]))
    cur = best = 0
    for _, d in edges:
        cur += d
        best = max(best, cur)
    return best


async def test_jobs_run_on_agent_processes_within_the_slot_limit(
        tmp_path: Path, shared_db_host: DbHost) -> None:
    async with pool_stack(tmp_path, shared_db_host,
                          {"slots": 2, "max_machines": 2, "idle_secs": 600}) as st:
        first = await st.pool()
        assert first["status"] == "idle" and first["machines"] == {}
        assert first["sizing"]["tables"] == ["pjob"]
        ids = await st.add_jobs(10, "/hold")

        # Two machines of two slots: four calls held at the backend, six jobs waiting.
        await wait_for(lambda: _eq(st.backend.inflight, 4), 60, "four calls in flight")

        async def settled() -> bool:
            p = await st.pool()
            return p["busy_slots"] == 4 and p["jobs_waiting"] == 6 \
                and p["machines"].get("ready") == 2
        await wait_for(settled, 30, "pool view: 4 busy slots, 6 waiting, 2 ready")
        p = await st.pool()
        assert p["status"] == "healthy" and p["total_slots"] == 4
        # the overview counts pooled jobs (no SSP reports them): 4 running, 6 pending
        assert (await st.get("/admin/api/overview"))["totals"]["running_jobs"] == 10
        machines = await st.machines()
        assert len(machines) == 2
        for m in machines:
            # a real agent process of its own, not a thread of the scheduler
            assert m["pid"] != st.s.process.proc.pid  # type: ignore[union-attr]
            assert "scheduler.pools.agent" in " ".join(cmdline(m["pid"]))
            assert m["slots"] == 2 and m["slots_in_use"] == 2 and m["state"] == "ready"
        await _listener_refuses_bad_calls(st, machines[0]["id"])
        st.backend.release.set()
        await wait_for(lambda: st.all_completed(ids), 60, "every job completed")

        async def none_running() -> bool:
            return bool((await st.get("/admin/api/overview"))["totals"]["running_jobs"] == 0)
        await wait_for(none_running, 30, "the overview's running_jobs back to 0")
        rows = await st.rows()
        by_machine: dict[str, list[tuple[float, float]]] = {}
        for c in st.backend.calls:
            assert c["auth"] == f"Bearer {TOKEN}"
            by_machine.setdefault(rows[c["job"]]["assignee"], []).append((c["start"], c["end"]))
        assert set(by_machine) == {m["id"] for m in machines}
        assert len(st.backend.calls) == 10  # one call per job: nothing run twice
        for intervals in by_machine.values():
            assert _max_overlap(intervals) <= 2  # a machine's slots
        assert _max_overlap([iv for ivs in by_machine.values() for iv in ivs]) <= 4
        for r in rows.values():
            assert r["result"] == {"ok": True, "job": f"pjob:{r['id'].id}"}
            assert r["attempts"] == 1


async def _listener_refuses_bad_calls(st: PoolStack, machine_id: str) -> None:
    async with st.http.get(st.pool_url + "/health") as r:
        assert r.status == 200 and await r.json() == {"ok": True, "pools": {"p1": "healthy"}}
    cases = [("/machines/m-nope/heartbeat", b"{}", {"Authorization": "Bearer x"}, 404,
              "unknown_machine"),
             (f"/machines/{machine_id}/heartbeat", b"{}", {"Authorization": "Bearer wrong"},
              401, "unauthorized"),
             (f"/machines/{machine_id}/take", b"{}", {}, 401, "unauthorized"),
             (f"/machines/{machine_id}/take", b"{not json", {"Authorization": "Bearer x"}, 400,
              "invalid"),
             (f"/machines/{machine_id}/take", b"[1]", {"Authorization": "Bearer x"}, 400,
              "invalid"),
             # nested past the decoder's recursion limit: a 400, not a 500 with a traceback
             (f"/machines/{machine_id}/take", b"[" * 30_000 + b"]" * 30_000,
              {"Authorization": "Bearer x"}, 400, "invalid"),
             (f"/machines/{machine_id}/result", b"x", {"Content-Type": "text/plain"}, 415,
              "unsupported"),
             (f"/machines/{machine_id}/take", b"{" + b" " * 300_000 + b"}", {}, 413,
              "payload_too_large")]
    for path, data, headers, status, error in cases:
        async with st.http.post(st.pool_url + path, data=data, headers={
                "Content-Type": "application/json", **headers}) as r:
            body = await r.json()
            assert (r.status, body["error"]) == (status, error), (path, body)
            assert body["message"] and "Traceback" not in body["message"]


async def _eq(a: Any, b: Any) -> bool:
    return a == b


async def test_agent_killed_mid_job_is_recovered_elsewhere(tmp_path: Path,
                                                           shared_db_host: DbHost) -> None:
    async with pool_stack(tmp_path, shared_db_host,
                          {"slots": 1, "max_machines": 1, "idle_secs": 600}) as st:
        [job] = await st.add_jobs(1, "/hang-once")
        await wait_for(lambda: _eq(len(st.backend.calls_of(job)), 1), 60, "first call")
        [m1] = await st.machines()
        assert m1["state"] == "ready" and m1["jobs"] == [job]
        assert (await st.rows())[job]["assignee"] == m1["id"]
        st.pids.add(m1["pid"])  # type: ignore[attr-defined]
        os.kill(m1["pid"], signal.SIGKILL)

        await wait_for(lambda: st.all_completed([job]), 60, "the job completed elsewhere")
        row = (await st.rows())[job]
        machines = {m["id"]: m for m in await st.machines()}
        assert row["assignee"] != m1["id"] and row["assignee"] in machines
        assert machines[m1["id"]]["state"] == "lost"
        assert "exited" in machines[m1["id"]]["removal_reason"]
        assert len(st.backend.calls_of(job)) == 2  # at-least-once: the backend saw it twice
        assert row["attempts"] == 1 and row.get("recovered_at") is not None


async def test_drain_under_load_finishes_current_jobs_and_takes_no_new_ones(
        tmp_path: Path, shared_db_host: DbHost) -> None:
    async with pool_stack(tmp_path, shared_db_host,
                          {"slots": 2, "max_machines": 1, "idle_secs": 600}) as st:
        ids = await st.add_jobs(6, "/hold")
        await wait_for(lambda: _eq(st.backend.inflight, 2), 60, "two calls in flight")
        [m1] = await st.machines()
        held = sorted(m1["jobs"])
        assert len(held) == 2
        status, body = await st.post(f"/admin/api/machines/{m1['id']}/drain")
        assert status == 200 and body["machine"]["state"] == "draining"
        # Draining does not count against max_machines: a second machine takes the rest.
        await wait_for(lambda: _eq(st.backend.inflight, 4), 60, "the new machine's calls")
        st.backend.release.set()
        await wait_for(lambda: st.all_completed(ids), 60, "every job completed")

        rows = await st.rows()
        assert sorted(i for i, r in rows.items() if r["assignee"] == m1["id"]) == held
        assert len(st.backend.calls) == 6
        machines = {m["id"]: m for m in await st.machines()}

        async def destroyed() -> bool:
            m = next(m for m in await st.machines() if m["id"] == m1["id"])
            return m["state"] == "destroyed"
        await wait_for(destroyed, 30, "the drained machine destroyed")
        m = next(m for m in await st.machines() if m["id"] == m1["id"])
        assert m["removal_reason"] == "operator drain"
        assert len(machines) == 2
        status, body = await st.post(f"/admin/api/machines/{m1['id']}/drain")
        assert status == 409 and body["error"] == "conflict"
        status, body = await st.post("/admin/api/machines/m-nope/drain")
        assert status == 404


async def test_boot_failures_open_the_breaker_and_an_incident(tmp_path: Path,
                                                              shared_db_host: DbHost) -> None:
    flag = tmp_path / "agent-may-start"
    # The agent command fails until `flag` exists, then runs the real agent.
    command = [sys.executable, "-c",
               ("import os, runpy, sys\n"
                f"if not os.path.exists({str(flag)!r}): sys.exit(3)\n"
                "runpy.run_module('scheduler.pools.agent', run_name='__main__')")]
    async with pool_stack(tmp_path, shared_db_host,
                          {"slots": 1, "max_machines": 1, "breaker_failures": 2,
                           "breaker_cooldown_secs": 2, "command": command}) as st:
        ids = await st.add_jobs(1, "/ok")

        async def opened() -> bool:
            return (await st.pool())["breaker"]["state"] == "open"
        await wait_for(opened, 60, "breaker open")
        p = await st.pool()
        assert p["status"] == "unhealthy"
        assert p["breaker"]["failures"] >= 2 and "code 3" in p["breaker"]["last_error"]
        failed = [m for m in await st.machines() if m["state"] == "failed"]
        assert len(failed) >= 2 and all("exited with code 3" in m["removal_reason"]
                                        for m in failed)
        incidents = (await st.get("/admin/api/incidents?component=pool:p1"))["incidents"]
        [inc] = [i for i in incidents if i["kind"] == "pool_breaker_open"]
        assert inc["state"] == "open" and inc["id"] == p["breaker"]["incident_id"]
        assert (await st.rows())[ids[0]]["status"] == "pending"

        flag.write_text("ok")  # the provider boots again: the trial after the cooldown works
        await wait_for(lambda: st.all_completed(ids), 60, "the job completed")

        async def closed() -> bool:
            return (await st.pool())["breaker"]["state"] == "closed"
        await wait_for(closed, 30, "breaker closed")
        got = (await st.get(f"/admin/api/incidents/{inc['id']}"))["incident"]
        assert got["state"] == "recovered"


async def test_pause_survives_a_restart_and_resume_runs_the_jobs(
        tmp_path: Path, shared_db_host: DbHost) -> None:
    async with pool_stack(tmp_path, shared_db_host,
                          {"slots": 1, "max_machines": 1, "idle_secs": 600}) as st:
        status, body = await st.post("/admin/api/pools/p1/pause")
        assert status == 200 and body["pool"]["paused"] is True
        assert (await st.post("/admin/api/pools/nope/pause"))[0] == 404
        assert st.s.process.stop() == 0
        st.s = st.relaunch()  # type: ignore[attr-defined]
        async with st.http.post(st.admin + "/admin/api/session",
                                json={"password": ADMIN_PASSWORD}) as r:
            st.token = (await r.json())["token"]
        ids = await st.add_jobs(2, "/ok")

        async def waiting() -> bool:
            return (await st.pool())["jobs_waiting"] == 2
        await wait_for(waiting, 30, "jobs seen waiting")
        p = await st.pool()
        assert p["paused"] is True and p["machines"] == {}  # no machine booted while paused
        status, body = await st.post("/admin/api/pools/p1/resume")
        assert status == 200 and body["pool"]["paused"] is False
        await wait_for(lambda: st.all_completed(ids), 60, "jobs completed after resume")


async def test_admin_kill_and_retry_reach_pooled_jobs(tmp_path: Path,
                                                      shared_db_host: DbHost) -> None:
    async with pool_stack(tmp_path, shared_db_host,
                          {"slots": 1, "max_machines": 1, "idle_secs": 600}) as st:
        [job] = await st.add_jobs(1, "/hang-once")
        await wait_for(lambda: _eq(len(st.backend.calls_of(job)), 1), 60, "first call")
        status, body = await st.post(f"/admin/api/jobs/{job}/retry")
        assert status == 409 and body["code"] == "not_terminal"
        status, body = await st.post(f"/admin/api/jobs/{job}/kill")
        assert status == 200 and body["action"] == "flagged", body

        async def failed() -> bool:
            return (await st.rows())[job]["status"] == "failed"
        await wait_for(failed, 60, "the killed job failed")
        row = (await st.rows())[job]
        assert [e["kind"] for e in row["errors"]] == ["killed"]
        await wait_for(lambda: _eq(st.backend.inflight, 0), 60, "the call cancelled")

        status, body = await st.post(f"/admin/api/jobs/{job}/retry")
        assert status == 200 and body["status"] == "pending", body
        await wait_for(lambda: st.all_completed([job]), 60, "the retried job completed")
        assert len(st.backend.calls_of(job)) == 2
        # a pending pooled job killed fails at once, never reaching the backend
        status, _ = await st.post("/admin/api/pools/p1/pause")
        [queued] = await st.add_jobs(1, "/ok", prefix="q")
        status, body = await st.post(f"/admin/api/jobs/{queued}/kill")
        assert status == 200 and body["action"] == "failed", body
        assert (await st.rows())[queued]["status"] == "failed"
        assert st.backend.calls_of(queued) == []
        status, body = await st.post("/admin/api/jobs/pjob:nope/retry")
        assert status == 404


async def test_a_scheduler_killed_mid_job_keeps_its_machines_and_their_jobs(
        tmp_path: Path, shared_db_host: DbHost) -> None:
    async with pool_stack(tmp_path, shared_db_host,
                          {"slots": 1, "max_machines": 1, "idle_secs": 600}) as st:
        [job] = await st.add_jobs(1, "/hold")
        await wait_for(lambda: _eq(st.backend.inflight, 1), 60, "the call in flight")
        [m1] = await st.machines()
        st.pids.add(m1["pid"])  # type: ignore[attr-defined]
        st.s.process.kill9()  # the scheduler's group only: agents run in sessions of their own
        assert alive(m1["pid"])
        st.s = st.relaunch()  # type: ignore[attr-defined]
        async with st.http.post(st.admin + "/admin/api/session",
                                json={"password": ADMIN_PASSWORD}) as r:
            st.token = (await r.json())["token"]

        async def adopted() -> bool:
            ms = await st.machines()
            return [(m["id"], m["state"], m["jobs"]) for m in ms] == [(m1["id"], "ready", [job])]
        await wait_for(adopted, 60, "the running machine and its job known again")
        st.backend.release.set()
        await wait_for(lambda: st.all_completed([job]), 60, "the job completed")
        assert (await st.rows())[job]["assignee"] == m1["id"]
        assert len(st.backend.calls_of(job)) == 1  # not run again: the machine kept it
