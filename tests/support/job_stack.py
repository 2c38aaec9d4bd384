"""Helpers for the job runner's integration tests: a real backend HTTP server (aiohttp on a
free loopback port, run by the test) that records every call, and an SSP stack with job tables.
No tests here."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from surrealdb import RecordID

from dbclient import Database
from tests.support.procs import DbHost, free_port
from tests.support.ssp_stack import (
    APP_SCHEMA,
    Ssp,
    apply_schema,
    root_db,
    start_ssp,
    unique_db,
    wait_for,
)

TOKEN = "backend-token-9f8e7d6c5b4a"  # the job config's auth_token: must never be shown
SECRET = "ssp-shared-secret-0a1b2c3d"  # SVC_AUTH_SECRET
JOB_SCHEMA = """
DEFINE TABLE job SCHEMALESS;
DEFINE TABLE job_one SCHEMALESS;
DEFINE TABLE job_c3 SCHEMALESS;
"""


@dataclass
class Call:
    """One request the backend received."""

    path: str
    job: str | None
    auth: str | None
    body: Any
    at: float = field(default_factory=time.monotonic)


@dataclass
class Backend:
    """A backend the tests control. Paths:

    `/ok` 200 `{ok, echo}`; `/fail` 500; `/hang` never answers (until the caller gives up);
    `/hang-once` hangs on the first call of a job, answers 200 afterwards; `/hold` hangs until
    `release.set()`, then answers 200; `/work` answers 200
    after a short pause (concurrency counting); `/toggle` 503 until `toggle_ok`; `/health` 200;
    `/reject` 400 echoing the Authorization header it got; `/busy-once` 429 with
    `Retry-After: 1` on the first call of a job, 200 afterwards; `/redirect` 307 to `/ok`.
    """

    port: int = field(default_factory=free_port)
    calls: list[Call] = field(default_factory=list)
    inflight: int = 0
    max_inflight: int = 0
    inflight_by_job: dict[str, int] = field(default_factory=dict)  # a shared backend's tests
    toggle_ok: bool = False
    work_secs: float = 0.02
    release: asyncio.Event = field(default_factory=asyncio.Event)
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def calls_of(self, job: str) -> list[Call]:
        return [c for c in self.calls if c.job == job]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path == "/health":
            return web.json_response({"status": "ok"})
        raw = await request.read()
        call = Call(path, request.headers.get("X-Job-Id"), request.headers.get("Authorization"),
                    json.loads(raw) if raw else None)
        seen_before = len(self.calls_of(call.job or ""))
        self.calls.append(call)
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        job = call.job or ""
        self.inflight_by_job[job] = self.inflight_by_job.get(job, 0) + 1
        try:
            if path == "/ok":
                return web.json_response({"ok": True, "echo": call.body})
            if path == "/fail":
                return web.Response(status=500, text="boom")
            if path == "/reject":
                return web.Response(status=400, text=f"bad request; you sent {call.auth}")
            if path == "/busy-once" and seen_before == 0:
                return web.Response(status=429, text="slow down", headers={"Retry-After": "1"})
            if path == "/redirect":
                return web.Response(status=307, headers={"Location": "/ok"})
            if path == "/hang" or (path == "/hang-once" and seen_before == 0):
                await asyncio.Event().wait()
            if path == "/hold":
                await self.release.wait()
            if path == "/work":
                await asyncio.sleep(self.work_secs)
            if path == "/toggle" and not self.toggle_ok:
                return web.Response(status=503, text="not yet")
            return web.json_response({"ok": True, "path": path})
        finally:
            self.inflight -= 1
            self.inflight_by_job[job] -= 1


def job_config(base_url: str, **per_table: dict[str, Any]) -> str:
    """`SVC_JOB_CONFIG` with tables `job`, `job_one`, `job_c3` (overrides per table key; in a
    text, `{backend}` stands for `base_url`)."""
    tables = {
        "main": {"name": "job", "base_url": base_url, "auth_token": TOKEN, "concurrency": 4,
                 "timeout_secs": 5, "lease_secs": 3, "backoff_ms": 50},
        "one": {"name": "job_one", "base_url": base_url, "auth_token": TOKEN, "concurrency": 1,
                "timeout_secs": 30, "lease_secs": 3, "backoff_ms": 50},
        "c3": {"name": "job_c3", "base_url": base_url, "auth_token": TOKEN, "concurrency": 3,
               "timeout_secs": 30, "lease_secs": 3, "backoff_ms": 50},
    }
    for key, extra in per_table.items():
        tables[key].update({k: v.replace("{backend}", base_url) if isinstance(v, str) else v
                            for k, v in extra.items()})
    return json.dumps({"job_tables": tables})


class JobStack:
    """A database with job tables, a running SSP (HTTP gateway), a backend, a root client."""

    def __init__(self, host: DbHost, ns: str, db: str, ssp: Ssp, root: Database,
                 backend: Backend, http: aiohttp.ClientSession, env: dict[str, str],
                 tmp: Path) -> None:
        self.host, self.ns, self.dbname, self.ssp, self.root = host, ns, db, ssp, root
        self.backend, self.http, self.env, self.tmp = backend, http, env, tmp
        self.bodies: list[str] = []  # every response body the tests read (secret checks)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.ssp.port}"

    async def post(self, path: str, body: Any = None) -> tuple[int, Any]:
        """POST to the SSP's HTTP listener with the bearer; (status, JSON body)."""
        return await self.request("POST", path, body)

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with self.http.request(method, self.base + path, json=body,
                                     headers={"Authorization": f"Bearer {SECRET}"}) as r:
            text = await r.text()
            self.bodies.append(text)
            return r.status, json.loads(text) if text else None

    async def get(self, path: str) -> tuple[int, Any]:
        async with self.http.get(self.base + path) as r:
            text = await r.text()
            self.bodies.append(text)
            return r.status, json.loads(text) if text else None

    async def add_job(self, table: str, key: str, path: str, **fields: Any) -> RecordID:
        rid = RecordID(table, key)
        await self.root.query("CREATE $id CONTENT $c", {"id": rid, "c": {
            "status": "pending", "path": path, "payload": {"key": key}, **fields}})
        return rid

    async def row(self, rid: RecordID) -> dict[str, Any]:
        got = await self.root.query_one("SELECT * FROM ONLY $id", {"id": rid})
        assert isinstance(got, dict), f"no row {rid}"
        return got

    async def wait_status(self, rid: RecordID, *statuses: str, timeout: float = 60.0
                          ) -> dict[str, Any]:
        async def reached() -> dict[str, Any] | None:
            row = await self.row(rid)
            return row if row.get("status") in statuses else None
        return await wait_for(reached, timeout, f"{rid} in {statuses}")  # type: ignore[no-any-return]

    async def wait_calls(self, job: str, n: int = 1) -> None:
        async def called() -> bool:
            return len(self.backend.calls_of(job)) >= n
        await wait_for(called, 60.0, f"{n} backend calls of {job}")

    def restart_ssp(self, **extra: str) -> Ssp:
        self.ssp = start_ssp(self.tmp, self.host, self.ns, self.dbname, **{**self.env, **extra})
        return self.ssp


@contextlib.asynccontextmanager
async def job_stack(host: DbHost, tmp: Path, *, before_start: Any = None, backend_up: bool = True,
                    tables: dict[str, dict[str, Any]] | None = None, **env: str
                    ) -> AsyncIterator[JobStack]:
    """Schema with job tables + backend + SSP (changefeed, bearer on); stops everything and
    checks the SSP exits 0."""
    ns, db = unique_db()
    root = await root_db(host, ns, db)
    await root.query(APP_SCHEMA + JOB_SCHEMA)
    apply_schema(host, ns, db)
    backend = Backend()
    if backend_up:
        await backend.start()
    full_env = {"SVC_JOB_CONFIG": job_config(backend.url, **(tables or {})),
                "SVC_AUTH_SECRET": SECRET, "SVC_SSP_JOB_SWEEP_SECS": "1",
                "SVC_SSP_SHARDS": "1", **env}
    if before_start is not None:
        await before_start(root)
    http = aiohttp.ClientSession()
    stack = JobStack(host, ns, db, start_ssp(tmp, host, ns, db, **full_env), root, backend, http,
                     full_env, tmp)
    try:
        await stack.ssp.wait_ready()
        await wait_for(_http_up(stack), 30.0, "the SSP's HTTP listener")
        yield stack
    finally:
        code = stack.ssp.stop()
        await http.close()
        await backend.stop()
        await root.close()
        assert code == 0, stack.ssp.process.log_text()[-3000:]


def _http_up(stack: JobStack) -> Any:
    async def up() -> bool:
        try:
            status, _ = await stack.get("/health")
            return status == 200
        except aiohttp.ClientError:
            return False
    return up
