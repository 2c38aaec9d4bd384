"""The README's flow end to end: ``ops/run --cloud`` starts the control plane beside the
database host and prints its URL; ``svc cloud`` signs up, signs in, creates a project, sets
variables and vault secrets, resolves an app's ``project.yml`` (``env: vault`` and
``{vault: [KEYS]}``) into a dotenv file, makes an MCP token, shows usage and signs out.
Then a crash of ``svc-cloud`` (``kill -9`` under ops/run's supervisor) loses nothing that was
acknowledged, and the development key ring kept beside the data still opens the vault."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support import lifeline, proctable
from tests.support.cloud_stack import PASSWORD, digest
from tests.support.procs import ROOT, base_env, free_port, http_status

pytestmark = pytest.mark.slow

SECRET = "cli-vault-value-kept-out-of-argv"


class Stack:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.db_port, self.cloud_port = free_port(), free_port()
        self.data = tmp / "data"
        self.log = tmp / "ops-run.log"
        self.home = tmp / "home"
        self.home.mkdir()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.cloud_port}"

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [str(ROOT / "ops" / "run"), "--no-ssp", "--cloud", "--data", str(self.data),
                 "--db-bind", f"127.0.0.1:{self.db_port}",
                 "--cloud-bind", f"127.0.0.1:{self.cloud_port}"],
                env=base_env(SVC_DB_USER="root", SVC_DB_PASS="cloud-cli-test"),
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            lifeline.adopt(self.proc.pid)  # dies with this run, killed or not
        deadline = time.monotonic() + 180
        while "service is up" not in self.log.read_text(errors="replace"):
            assert self.proc.poll() is None, self.log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, self.log.read_text(errors="replace")[-3000:]
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def svc(self, *args: str, stdin: str | None = None, cwd: Path | None = None
            ) -> subprocess.CompletedProcess[str]:
        env = base_env(HOME=str(self.home), XDG_CONFIG_HOME=str(self.home / ".config"),
                       SVC_CLOUD_API_URL=self.api)
        return subprocess.run([sys.executable, "-m", "svccli", "cloud", *args], input=stdin,
                              env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("cloudcli"))
    s.start()
    try:
        yield s
    finally:
        s.stop()


async def _tool_names(api: str, token: str) -> set[str]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with http, Client(streamable_http_client(api + "/v1/mcp", http_client=http),
                            mode="2026-07-28") as mcp:
        return {t.name for t in (await mcp.list_tools()).tools}


def ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, (r.args, r.stdout[-800:], r.stderr[-800:])
    return r.stdout


def test_ops_run_prints_the_cloud_url(stack: Stack) -> None:
    text = stack.log.read_text(errors="replace")
    assert f"http://127.0.0.1:{stack.cloud_port}/v1/mcp" in text
    assert http_status(stack.api + "/v1/health") == 200
    keys = stack.data / "cloud" / "dev-keys.json"
    assert keys.is_file() and keys.stat().st_mode & 0o077 == 0


def test_the_readme_flow(stack: Stack, tmp_path: Path) -> None:
    email = "dev@example.test"
    ok(stack.svc("signup", email, "--password-stdin", stdin=PASSWORD + "\n"))
    out = ok(stack.svc("login", email, "--password-stdin", stdin=PASSWORD + "\n"))
    assert "signed in" in out and PASSWORD not in out
    saved = stack.home / ".config" / "svc" / "cloud.json"
    assert saved.stat().st_mode & 0o077 == 0
    assert "projects" not in ok(stack.svc("whoami"))
    ok(stack.svc("projects", "create", "webshop"))
    assert "webshop" in ok(stack.svc("projects", "ls"))
    out = ok(stack.svc("env", "set", "-p", "webshop", "LOG_LEVEL=info", "REGION=eu"))
    assert "LOG_LEVEL, REGION" in out
    ok(stack.svc("env", "set", "-p", "webshop", "--app", "api", "PORT=8080"))
    ok(stack.svc("vault", "set", "-p", "webshop", "DB_PASSWORD", stdin=SECRET + "\n"))
    gen = ok(stack.svc("vault", "generate", "-p", "webshop", "SESSION_KEY"))
    assert "fp_" in gen
    listed = json.loads(ok(stack.svc("--json", "vault", "ls", "-p", "webshop")))
    assert {i["key"] for i in listed["items"]} == {"DB_PASSWORD", "SESSION_KEY"}
    # an app's project.yml resolved against the platform
    proj = tmp_path / "proj"
    (proj / "api").mkdir(parents=True)
    (proj / "web").mkdir()
    (proj / "project.yml").write_text("apps:\n  api:\n    path: api\n  web:\n    path: web\n")
    (proj / "api" / "project.yml").write_text(
        "type: container\nimage: api:latest\nenv:\n  - vault\n  - {EXTRA: 'yes'}\n")
    (proj / "web" / "project.yml").write_text(
        "type: container\nimage: web:latest\nenv:\n  cloud: {vault: [SESSION_KEY]}\n"
        "  dev: {LOCAL: '1'}\n")
    ok(stack.svc("env", "pull", "-p", "webshop", "--app", "api", "--project-file",
                 str(proj / "project.yml"), "--out", str(tmp_path / "api.env")))
    api_env = dict(line.split("=", 1) for line in (tmp_path / "api.env").read_text().split())
    assert (tmp_path / "api.env").stat().st_mode & 0o077 == 0
    assert set(api_env) == {"LOG_LEVEL", "REGION", "PORT", "DB_PASSWORD", "SESSION_KEY",
                            "EXTRA"}
    assert digest(json.loads(api_env["DB_PASSWORD"])) == digest(SECRET)
    web = ok(stack.svc("env", "pull", "-p", "webshop", "--app", "web", "--project-file",
                       str(proj / "project.yml"), "--out", "-"))
    assert sorted(line.split("=")[0] for line in web.split()) == ["LOG_LEVEL", "REGION",
                                                                  "SESSION_KEY"]
    (proj / "web" / "project.yml").write_text(
        "type: container\nimage: web:latest\nenv: {vault: [MISSING_ONE]}\n")
    r = stack.svc("env", "pull", "-p", "webshop", "--app", "web", "--project-file",
                  str(proj / "project.yml"), "--out", "-")
    assert r.returncode == 1 and "MISSING_ONE" in r.stderr
    # an MCP token, shown once
    token = ok(stack.svc("tokens", "create", "--label", "agent", "--scope", "mcp:read")).strip()
    assert token.startswith("mcp_live_")
    listed = asyncio.run(_tool_names(stack.api, token))
    assert "env_list" in listed and "env_set" not in listed
    assert "api_requests" in ok(stack.svc("usage"))
    r = stack.svc("projects", "rm", "webshop", "--confirm", "nope")
    assert r.returncode == 1 and "confirm" in r.stderr
    # nothing secret in the CLI's output, nor in ops/run's log
    log = stack.log.read_text(errors="replace")
    assert log.count(SECRET) == 0 and log.count(PASSWORD) == 0


def test_a_crash_loses_nothing_acknowledged(stack: Stack) -> None:
    email = "crash@example.test"
    ok(stack.svc("signup", email, "--password-stdin", stdin=PASSWORD + "\n"))
    login = httpx.post(stack.api + "/v1/auth/login", json={"email": email,
                                                           "password": PASSWORD}).json()
    auth = {"Authorization": f"Bearer {login['token']}"}
    httpx.post(stack.api + "/v1/projects", json={"slug": "durable"}, headers=auth,
               timeout=30).raise_for_status()
    assert stack.proc is not None
    cloud_pids = [p for p in proctable.descendants(stack.proc.pid)
                  if b"-m\x00cloud" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert cloud_pids
    acked: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n: int) -> None:
        # writes in flight from 6 clients at once: the kill lands in the middle of some
        with httpx.Client(timeout=10, headers=auth) as h:
            i = 0
            while not stop.is_set():
                key = f"W{n}_{i:04d}"
                i += 1
                try:
                    r = h.patch(stack.api + "/v1/projects/durable/env",
                                json={"vars": {key: "v"}})
                except httpx.TransportError:
                    time.sleep(0.1)  # down until ops/run relaunches it
                    continue
                if r.status_code == 200:
                    with lock:
                        acked.append(key)
                else:
                    time.sleep(0.1)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 150
        while len(acked) < 40:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(cloud_pids[0], signal.SIGKILL)  # the main process: gunicorn follows
        before = len(acked)
        while len(acked) < before + 40:  # ops/run relaunched svc-cloud and writes go on
            assert time.monotonic() < deadline, f"{len(acked) - before} writes after the kill"
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    keys: set[str] = set()
    cursor = None
    while True:
        page = httpx.get(stack.api + "/v1/projects/durable/env", headers=auth, timeout=30,
                         params={"limit": 100, **({"cursor": cursor} if cursor else {})}).json()
        keys |= {i["key"] for i in page["items"]}
        cursor = page["next_cursor"]
        if not cursor:
            break
    lost = sorted(set(acked) - keys)
    assert lost == []
    assert "svc-cloud" in stack.log.read_text(errors="replace")
