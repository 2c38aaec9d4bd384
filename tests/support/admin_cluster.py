"""A whole admin cluster for the dashboard and MCP tests: a database with the app's schema,
`svc-scheduler` with its admin listener (the shipped dashboard), two SSPs under ops/run's
supervisor, a backend whose health check the test switches, and a break-glass session.
Built once per module (:func:`admin_cluster`), always stopped.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.admin_stack import (
    ACCESS_SCHEMA,
    BREAKGLASS,
    AdminScheduler,
    SupervisedSsp,
    start_scheduler,
    start_ssp,
)
from tests.support.procs import DbHost
from tests.support.ssp_stack import apply_schema, root_db


def run_async(coro: Any) -> Any:
    """Run a coroutine to completion in a thread of its own: callable where an event loop
    already runs in this thread (Playwright's sync API keeps one)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


class SwitchableBackend:
    """A health-check target on a loopback port: 200 while ``healthy``, else 500."""

    def __init__(self) -> None:
        self.healthy = True
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = json.dumps({"ok": outer.healthy}).encode()
                self.send_response(200 if outer.healthy else 500)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/health"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class AdminCluster:
    host: DbHost
    ns: str
    sched: AdminScheduler
    ssps: list[SupervisedSsp]
    backend: SwitchableBackend
    token: str  # a break-glass session (scope full)

    @property
    def admin(self) -> str:
        return self.sched.admin

    def api(self, method: str, path: str, body: Any = None, token: str | None = None,
            source: str | None = None) -> tuple[int, Any]:
        """One admin API call (blocking), the JSON answer decoded."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.admin + path, data=data, method=method, headers={
            "Authorization": f"Bearer {token or self.token}",
            **({"Content-Type": "application/json"} if data is not None else {})})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            raw = e.read()
            return e.code, json.loads(raw) if raw else None

    def mint(self, scope: str, label: str = "test") -> str:
        status, body = self.api("POST", "/admin/api/tokens",
                                {"label": label, "scope": scope, "ttl_days": 1})
        assert status == 201, body
        return str(body["token"])

    def register_view(self, key: str, surql: str, client_id: str,
                      user: str = "user:alice") -> dict[str, Any]:
        """Register a view as a client does: POST /view/register on the scheduler."""
        body = json.dumps({"id": f"query:{key}", "surql": surql, "clientId": client_id,
                           "ttl": "10m", "params": {"auth_id": user}}).encode()
        req = urllib.request.Request(self.sched.url + "/view/register", data=body,
                                     method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.status == 200
            return json.loads(r.read())  # type: ignore[no-any-return]

    def write_post(self, key: str, n: int) -> None:
        """A row written to the database and its event posted to the scheduler (http)."""
        async def go() -> None:
            root = await root_db(self.host, self.ns, self.ns)
            try:
                await root.query("UPSERT type::record('post', $k) SET owner = user:alice, "
                                 "title = 't', n = $n", {"k": key, "n": n})
            finally:
                await root.close()

        run_async(go())
        rec = {"id": f"post:{key}", "owner": "user:alice", "title": "t", "n": n}
        body = json.dumps({"table": "post", "op": "UPDATE", "id": rec["id"],
                           "record": rec}).encode()
        req = urllib.request.Request(self.sched.url + "/ingest", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.status == 200

    def ready_ssps(self) -> set[str]:
        _, ov = self.api("GET", "/admin/api/overview")
        return {s["id"] for s in ov["ssps"] if s["state"] == "ready" and not s["flagged"]}


# the job rows `prepare_admin_db` writes by default: j0..j3 with these statuses
JOB_STATUSES = ("completed", "failed", "pending", "completed")


async def prepare_admin_db(host: DbHost, ns: str, *, job_statuses: Sequence[str] = JOB_STATUSES,
                           more: Callable[[Any], Awaitable[None]] | None = None) -> None:
    """The admin plane tests' database: record access, the app schema, user:alice (password
    `alice-pw`), ten posts, the job tables `job` and `mail` (the latter from _00_retention) and
    one `job` row per status in `job_statuses` (`job:j<i>`, path `/send/<i>`); `more` adds
    to it over the same root connection."""
    root = await root_db(host, ns, ns)
    try:
        await root.query(ACCESS_SCHEMA)
        apply_schema(host, ns, ns)
        await root.query("CREATE user:alice SET name = 'alice', email = 'alice@example.com', "
                         "pass = crypto::argon2::generate('alice-pw')")
        for i in range(10):
            await root.query("CREATE type::record('post', $k) SET owner = user:alice, "
                             "title = 't', n = $n", {"k": f"p{i}", "n": i})
        # no SSP runs these job tables (no SVC_JOB_CONFIG): their rows stay as written
        await root.query("DEFINE TABLE job SCHEMALESS; DEFINE TABLE mail SCHEMALESS; "
                         "CREATE _00_retention:main SET job_tables = ['mail']")
        for i, status in enumerate(job_statuses):
            await root.query("CREATE type::record('job', $k) SET status = $s, path = $p, "
                             "payload = {n: $i}, created_at = time::now(), "
                             "finished_at = IF $s = 'pending' THEN NONE ELSE time::now() END",
                             {"k": f"j{i}", "i": i, "p": f"/send/{i}", "s": status})
        if more is not None:
            await more(root)
    finally:
        await root.close()


def wait_until(pred: Any, timeout: float, what: str) -> Any:
    """Poll a blocking predicate (timeout only stops a hang)."""
    import time

    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached; last value {last!r}")


@contextmanager
def admin_cluster(host: DbHost, tmp: Path, prefix: str, *,
                  ssp_env: dict[str, str] | None = None,
                  job_statuses: Sequence[str] = JOB_STATUSES,
                  **env: str) -> Iterator[AdminCluster]:
    """The module's cluster: prepared, started, both SSPs Ready, signed in; always stopped.
    `ssp_env`: more variables for the SSPs (`SVC_JOB_CONFIG`: they run the job table)."""
    ns = prefix + uuid.uuid4().hex[:8]
    run_async(prepare_admin_db(host, ns, job_statuses=job_statuses))
    backend = SwitchableBackend()
    backends = json.dumps([{"name": "pay", "url": backend.url,
                            "env": {"PAY_KEY": "very-secret-value"}}])
    sched = start_scheduler(tmp, host, ns, job_tables=["job"], env={
        "SVC_BACKENDS": backends, "SVC_HEALTH_CHECK_INTERVAL_SECS": "1",
        "SVC_BACKEND_DOWN_AFTER_SECS": "2", **env})
    ssps: list[SupervisedSsp] = []
    try:
        ssps.extend(start_ssp(tmp, host, ns, sched, **(ssp_env or {})) for _ in range(2))
        req = urllib.request.Request(sched.admin + "/admin/api/session",
                                     data=json.dumps({"password": BREAKGLASS}).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            token = json.loads(r.read())["token"]
        c = AdminCluster(host, ns, sched, ssps, backend, token)
        wait_until(lambda: c.ready_ssps() == {s.ssp_id for s in ssps}, 120, "both SSPs ready")
        yield c
    finally:
        for s in ssps:
            s.process.stop()
        sched.process.stop()
        backend.stop()
