"""A real cluster for the workflow tests and the workflow benchmark: a database host (the
caller's), `svc-scheduler` with its admin listener, one SSP in scheduler mode running the job
tables, and a backend HTTP server the jobs call (the job tests' `Backend`, served from its own
thread so that one stack serves every test of a module). Everything on free loopback ports,
always stopped.

Job tables: `job` (served by the SSP, concurrency 8), `job_one` (concurrency 1), `job_unserved` (a job table no SSP
serves: its jobs stay pending), `job_refuse` (its CREATE event throws: the database refuses
every job row).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.admin_stack import (
    BREAKGLASS,
    AdminScheduler,
    SupervisedSsp,
    db_env,
    start_scheduler,
    start_ssp,
)
from tests.support.job_stack import TOKEN, Backend
from tests.support.procs import ROOT, DbHost, base_env

JOB_TABLES = ["job", "job_one", "job_unserved", "job_refuse"]
SCHEMA = """
DEFINE TABLE job SCHEMALESS;
DEFINE TABLE job_one SCHEMALESS;
DEFINE TABLE job_unserved SCHEMALESS;
DEFINE TABLE job_refuse SCHEMALESS;
DEFINE EVENT refuse ON job_refuse WHEN $event = 'CREATE' THEN { THROW 'job_refuse takes no jobs' };
"""
SCHEDULER_ENV = {
    "SVC_WORKFLOW_POLL_MS": "200", "SVC_WORKFLOW_DEFINITIONS_POLL_SECS": "1",
    "SVC_WORKFLOW_DISPATCH_TIMEOUT_SECS": "3", "SVC_JOB_SWEEP_SECS": "1",
}


class ThreadedBackend:
    """`tests.support.job_stack.Backend` on an event loop of its own thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.backend = Backend()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> ThreadedBackend:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.backend.start(), self.loop).result(30)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.backend.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return self.backend.url

    def calls_of(self, job: str) -> list[Any]:
        return [c for c in list(self.backend.calls) if c.job == job]

    def calls_to(self, prefix: str) -> list[Any]:
        return [c for c in list(self.backend.calls) if (c.job or "").startswith(prefix)]

    def set_toggle(self, ok: bool) -> None:
        self.backend.toggle_ok = ok

    def release(self) -> None:
        self.loop.call_soon_threadsafe(self.backend.release.set)

    def hold(self) -> None:
        def renew() -> None:
            self.backend.release = asyncio.Event()
        self.loop.call_soon_threadsafe(renew)


def job_config(base_url: str) -> str:
    return json.dumps({"job_tables": {
        "main": {"name": "job", "base_url": base_url, "auth_token": TOKEN, "concurrency": 8,
                 "timeout_secs": 30, "lease_secs": 3, "backoff_ms": 50},
        "one": {"name": "job_one", "base_url": base_url, "auth_token": TOKEN, "concurrency": 1,
                "timeout_secs": 30, "lease_secs": 3, "backoff_ms": 50},
        "refuse": {"name": "job_refuse", "base_url": base_url, "auth_token": TOKEN},
    }})


@dataclass
class WorkflowStack:
    host: DbHost
    ns: str
    tmp: Path
    backend: ThreadedBackend
    sched: AdminScheduler
    ssp: SupervisedSsp
    token: str = ""
    applied: dict[str, Any] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return db_env(self.host, self.ns)

    def svc(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "svccli", *args], cwd=str(cwd or ROOT),
                              env=base_env(**self.env), capture_output=True, text=True,
                              timeout=120, check=False)

    def apply(self, workflows: dict[str, Any] | None = None,
              schedules: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
        """Write a project file with these sections and run `svc workflows apply`."""
        path = self.tmp / "project.yml"
        path.write_text(yaml.safe_dump({"sync": {"transport": "changefeed"},
                                        "workflows": workflows or {},
                                        "schedules": schedules or {}}))
        r = self.svc("workflows", "apply", "--project", str(path))
        assert r.returncode == 0, r.stderr + r.stdout
        self.applied = {"workflows": workflows or {}, "schedules": schedules or {}}
        return r

    def api(self, method: str, path: str, body: Any = None, *, token: str | None = None
            ) -> tuple[int, Any]:
        """A blocking admin API call (run it in a thread from async tests)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.sched.admin + "/admin/api" + path, data=data,
                                     method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        tok = self.token if token is None else token
        if tok:
            req.add_header("Authorization", f"Bearer {tok}")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw) if raw else None
            except ValueError:
                return e.code, raw.decode(errors="replace")

    async def call(self, method: str, path: str, body: Any = None, *,
                   token: str | None = None) -> tuple[int, Any]:
        return await asyncio.to_thread(self.api, method, path, body, token=token)

    async def call_ingest(self, path: str, body: Any) -> tuple[int, Any]:
        """POST to the scheduler's ingest listener (job routes)."""
        def go() -> tuple[int, Any]:
            req = urllib.request.Request(self.sched.url + path, data=json.dumps(body).encode(),
                                         method="POST",
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    return r.status, json.loads(r.read() or b"null")
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode(errors="replace")
        return await asyncio.to_thread(go)

    def sign_in(self) -> None:
        status, body = self.api("POST", "/session", {"password": BREAKGLASS}, token="")
        assert status == 200, body
        self.token = body["token"]

    def restart_scheduler(self) -> None:
        self.sched.restart()
        self.sign_in()

    def wait_ssp_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.sched.url + "/metrics", timeout=2) as r:
                    m = json.loads(r.read())
                if any(x["state"] == "ready" for x in m["ssps"]):
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("no SSP ready:\n" + self.ssp.process.log_text()[-3000:])

    def stop(self) -> None:
        self.ssp.process.stop()
        self.sched.process.stop()
        self.backend.stop()


async def prepare(host: DbHost, ns: str, *, version: int | None = None) -> None:
    """The app schema (job tables), `svc schema apply`, and the workflow tables at `version`
    (default: current)."""
    from tests.support.ssp_stack import APP_SCHEMA, apply_schema, root_db

    root = await root_db(host, ns, ns)
    try:
        await root.query(APP_SCHEMA + SCHEMA)  # APP_SCHEMA: record access `account`
    finally:
        await root.close()
    args = ["migrate"] + (["--to", str(version)] if version else [])
    r = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "svccli", *args], cwd=str(ROOT),
        env=base_env(**db_env(host, ns)), capture_output=True, text=True, timeout=120,
        check=False)
    assert r.returncode == 0, r.stderr + r.stdout
    apply_schema(host, ns, ns)


def start_stack(tmp: Path, host: DbHost, ns: str, *, scheduler_env: dict[str, str] | None = None
                ) -> WorkflowStack:
    """Scheduler, SSP and backend over a prepared database (see `prepare`)."""
    backend = ThreadedBackend().start()
    sched = None
    try:
        sched = start_scheduler(tmp, host, ns, env={**SCHEDULER_ENV, **(scheduler_env or {})},
                                job_tables=JOB_TABLES)
        ssp = start_ssp(tmp, host, ns, sched, SVC_JOB_CONFIG=job_config(backend.url))
    except BaseException:
        if sched is not None:
            sched.process.stop()
        backend.stop()
        raise
    stack = WorkflowStack(host, ns, tmp, backend, sched, ssp)
    try:
        stack.sign_in()
        stack.wait_ssp_ready()
    except BaseException:
        stack.stop()
        raise
    return stack
