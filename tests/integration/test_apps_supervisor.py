"""The apps of a project.yml as real processes (apps.Supervisor) and `svc dev`.

A temporary project: `db`, a container app run locally by its `dev` shell command (an HTTP
server with a readiness path, which also leaves a background grandchild in its process
group), and `api`, a python backend that depends on it, refuses to start when `db` does not
answer, and serves `/health`. Every test runs real processes and checks that no live
process of any app's group is left.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from apps import (
    AppFailed,
    HealthCheck,
    LogLine,
    Supervisor,
    alive,
    descendants,
    group_members,
    marked,
    resolve_env,
    sweep,
)
from project.rootconfig import load_project
from tests.support import lifeline
from tests.support.procs import free_port

ROOT = Path(__file__).resolve().parents[2]

API_SERVER = """\
import os, sys, urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer

# a dependency that is not ready yet is a failed start, not a retry: the order is tested
urllib.request.urlopen(f"http://127.0.0.1:{os.environ['DB_PORT']}/ready", timeout=2).read()
print(f"api: db answered; GREETING={os.environ.get('GREETING')} MODE={os.environ.get('MODE')} "
      f"FROM_FILE={os.environ.get('FROM_FILE')}", flush=True)
for i in range(int(os.environ.get("NOISE", "0"))):
    print(f"noise {i}", flush=True)
if os.environ.get("BREAK"):
    print("ERROR api: giving up", file=sys.stderr, flush=True)
    sys.exit(3)

class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path == "/health" and not os.environ.get("FAIL_HEALTH")
        self.send_response(200 if ok else 500)
        self.end_headers()

    def log_message(self, fmt, *args):
        sys.stderr.write("request " + fmt % args + "\\n")

HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Health).serve_forever()
"""


def make_project(tmp: Path) -> tuple[Path, int, int]:
    db_port, api_port = free_port(), free_port()
    (tmp / "db").mkdir()
    (tmp / "api").mkdir()
    (tmp / "db" / "ready").write_text("ok\n")
    (tmp / "project.yml").write_text("apps:\n  api: {path: api}\n  db: {path: db}\n"
                                     "  later: {path: later}\n")
    # the grandchild (`sleep`) stays in db's process group: stopping must reach it too
    db_cmd = (f"echo db booting >&2; sleep 300 & exec {sys.executable} -m http.server $PORT "
              "--bind 127.0.0.1")
    (tmp / "db" / "project.yml").write_text(textwrap.dedent(f"""\
        type: container
        image: example/db:1
        ports: [{db_port}]
        healthcheck: /ready
        dev: "{db_cmd}"
        """))
    (tmp / "api" / "server.py").write_text(API_SERVER)
    (tmp / "api" / "cloud.env").write_text("FROM_FILE=from-dotenv\n")
    (tmp / "api" / "project.yml").write_text(textwrap.dedent(f"""\
        type: backend
        scope: devOnly
        dependsOn: [db]
        dev: {{type: python, script: server.py}}
        deploy: {{port: {api_port}, healthcheck: /health}}
        env:
          - {{GREETING: hello, DB_PORT: {db_port}}}
          - dev: {{MODE: dev-side}}
            cloud: [{{MODE: cloud-side}}, cloud.env]
        """))
    (tmp / "later").mkdir()
    (tmp / "later" / "project.yml").write_text(textwrap.dedent("""\
        type: container
        scope: cloudOnly
        image: example/later:1
        dev: "echo MODE=$MODE FROM_FILE=$FROM_FILE; exec sleep 300"
        env:
          - dev: {MODE: dev-side}
            cloud: [{MODE: cloud-side}, cloud.env]
        """))
    (tmp / "later" / "cloud.env").write_text("FROM_FILE=later-dotenv\n")
    return tmp / "project.yml", db_port, api_port


def pids(sup: Supervisor) -> dict[str, int]:
    return {s.name: s.pid for s in sup.status() if s.pid is not None}


def assert_all_gone(groups: dict[str, int]) -> None:
    left = {name: group_members(pgid) for name, pgid in groups.items()}
    assert not any(left.values()), f"processes left behind: {left}"


def texts(lines: list[LogLine]) -> list[str]:
    return [ln.text for ln in lines]


async def printed_once_up(sup: Supervisor, app: str, pattern: str) -> list[str]:
    """Start `sup` (its `app` ready once it printed `pattern`), return the stdout lines of
    `app` holding `pattern`, stop everything and check nothing is left."""
    await sup.start()
    try:
        lines, _ = sup.logs(app, text=pattern)
        return [ln.text for ln in lines if ln.stream == "stdout"]
    finally:
        await sup.stop()
        assert_all_gone(pids(sup))


def until_printed(app: str, pattern: str) -> dict[str, HealthCheck]:
    return {app: HealthCheck("log", pattern=pattern, interval=0.1, retries=100)}


async def test_dependency_order_health_logs_and_stop(tmp_path: Path) -> None:
    path, db_port, api_port = make_project(tmp_path)
    project = load_project(path)
    env = resolve_env(project, "dev")
    env["api"]["NOISE"] = "300"
    seen: list[LogLine] = []
    sup = Supervisor.for_project(project, "dev", env=env, sink=seen.append, log_lines=50,
                                 grace=3.0)
    # cloudOnly `later` is not in the dev scope; db before api
    assert sup.names == ["db", "api"]
    await sup.start()
    try:
        status = {s.name: s for s in sup.status()}
        assert status["db"].state == status["api"].state == "ready"
        assert status["db"].ready_at is not None and status["api"].started_at is not None
        assert status["db"].ready_at <= status["api"].started_at
        # each in a process group of its own, the db's grandchild in the db's group
        groups = pids(sup)
        for name, pid in groups.items():
            assert os.getpgid(pid) == pid, name
        assert len(group_members(groups["db"])) >= 2
        # the api's environment: inline + the dev side of the split, PORT = its deploy port
        # (the line left the ring of 50 already: the sink saw it)
        assert sup.logs("api", text="db answered") == ([], True)
        assert [ln.text for ln in seen if "db answered" in ln.text] == ["api: db answered; GREETING=hello MODE=dev-side "
                                    "FROM_FILE=None"]
        # bounded: 300 noise lines and more went through a ring of 50
        every, truncated = sup.logs("api", limit=500)
        assert len(every) == 50 and truncated
        assert every[-1].seq > every[0].seq
        assert sum(1 for ln in seen if ln.app == "api" and ln.text.startswith("noise")) == 300
        page, more = sup.logs("api", limit=10, text="noise")
        assert len(page) == 10 and more and page[-1].text == "noise 299"
        # the db's stderr line, its level guessed, the supervisor's notes
        db_lines, _ = sup.logs("db", limit=100)
        assert ("stderr", "db booting") in [(ln.stream, ln.text) for ln in db_lines]
        assert any(ln.stream == "supervisor" and ln.text == "ready" for ln in db_lines)
        warned, _ = sup.logs("api", level="error")
        assert warned == []
        # the health endpoints really answer
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import urllib.request,sys;"
            f"sys.exit(urllib.request.urlopen('http://127.0.0.1:{api_port}/health').status!=200)")
        assert await proc.wait() == 0
    finally:
        await sup.stop()
    assert {s.name: s.state for s in sup.status()} == {"db": "stopped", "api": "stopped"}
    assert_all_gone(groups)


async def test_failing_health_check_raises_with_reason_and_tail(tmp_path: Path) -> None:
    path, _, _ = make_project(tmp_path)
    project = load_project(path)

    # the api's check is pointed at a server that is listening before the start and always
    # answers 500: every attempt fails the same way, however slowly the api itself starts
    async def answer_500(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b"HTTP/1.0 500 Internal Server Error\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer_500, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    quick = HealthCheck("http", port=port, path="/health", interval=0.05, retries=4)
    sup = Supervisor.for_project(project, "dev", health={"api": quick}, grace=3.0)
    try:
        with pytest.raises(AppFailed) as caught:
            await sup.start()
    finally:
        server.close()
    err = caught.value
    assert err.app == "api"
    assert err.reason.startswith(f"health check failed: GET http://127.0.0.1:{port}/health "
                                 "did not pass in 4 attempts")
    assert err.reason.endswith("(last: HTTP 500)")
    assert [ln.text for ln in err.tail if ln.stream == "supervisor"][-1] == err.reason
    assert "last 1" not in err.report() and err.reason in err.report()
    # everything it started is stopped again, the db's grandchild included
    status = {s.name: s for s in sup.status()}
    assert status["api"].state == "failed" and status["db"].state == "stopped"
    assert_all_gone(pids(sup))


async def test_early_exit_raises_with_exit_code_and_last_lines(tmp_path: Path) -> None:
    path, _, _ = make_project(tmp_path)
    project = load_project(path)
    env = resolve_env(project, "dev")
    env["api"]["BREAK"] = "1"
    sup = Supervisor.for_project(project, "dev", env=env, grace=3.0)
    with pytest.raises(AppFailed) as caught:
        await sup.start()
    assert caught.value.app == "api"
    assert caught.value.reason == "exited with code 3 before it was ready"
    last = [(ln.stream, ln.level, ln.text) for ln in caught.value.tail]
    assert ("stderr", "error", "ERROR api: giving up") in last
    assert_all_gone(pids(sup))


async def test_env_split_per_scope_reaches_the_process(tmp_path: Path) -> None:
    path, _, _ = make_project(tmp_path)
    project = load_project(path)
    # cloud: the cloud side of the split, its dotenv file; devOnly `api` is left out
    cloud = Supervisor.for_project(project, "cloud", health=until_printed("later", "MODE="),
                                   grace=3.0)
    assert cloud.names == ["db", "later"]
    assert await printed_once_up(cloud, "later", "MODE=") == [
        "MODE=cloud-side FROM_FILE=later-dotenv"]
    # the same app with the dev side (run by hand: its scope keeps it out of `dev`)
    dev_env = resolve_env(project, "dev")
    assert dev_env["later"] == {"MODE": "dev-side"}
    assert resolve_env(project, "cloud")["api"]["MODE"] == "cloud-side"


async def test_a_dependency_outside_the_scope_is_refused_before_anything_starts(
        tmp_path: Path) -> None:
    path, _, _ = make_project(tmp_path)
    text = (tmp_path / "api" / "project.yml").read_text()
    (tmp_path / "api" / "project.yml").write_text(text.replace("dependsOn: [db]",
                                                               "dependsOn: [db, later]"))
    project = load_project(path)
    with pytest.raises(AppFailed) as caught:
        Supervisor.for_project(project, "dev")
    assert caught.value.app == "api"
    assert "depends on later, which scope dev does not run (its scope is cloudOnly)" in str(
        caught.value)


# ---------------------------------------------------------------------------- svc dev


def _svc_dev(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "svccli", "dev", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lifeline.adopt(proc.pid)  # dies with this run, killed or not
    return proc


def _read_until(proc: subprocess.Popen[str], marker: str, budget: float = 60.0) -> list[str]:
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + budget
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if marker in line:
            return lines
    proc.kill()
    _, err = proc.communicate()
    raise AssertionError(f"no {marker!r} in svc dev's output:\n" + "\n".join(lines) + err)


def _started_pids(lines: list[str]) -> dict[str, int]:
    found = {}
    for line in lines:
        m = re.match(r"\[(\w+)\]\s+-- started \(pid (\d+)\)", line)
        if m:
            found[m.group(1)] = int(m.group(2))
    return found


@dataclass
class Interrupted:
    """`svc dev` run until `marker`, then sent SIGINT: what it printed, its process groups
    (from its `started (pid N)` lines) and every process under it just before the signal."""

    lines: list[str]
    groups: dict[str, int]
    children: set[int]
    out: str
    err: str
    returncode: int

    def assert_clean_exit(self) -> None:
        assert self.returncode == 0, self.err
        assert_all_gone(self.groups)
        assert alive(self.children) == set()


def run_then_interrupt(args: list[str], cwd: Path, marker: str,
                       budget: float = 60.0) -> Interrupted:
    proc = _svc_dev(args, cwd)
    try:
        lines = _read_until(proc, marker, budget)
        groups = _started_pids(lines)
        assert all(group_members(pgid) for pgid in groups.values())
        children = descendants(proc.pid)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return Interrupted(lines, groups, children, out, err, proc.returncode)


def test_svc_dev_runs_the_apps_prefixed_and_sigint_stops_all(tmp_path: Path) -> None:
    path, _, _ = make_project(tmp_path)
    run = run_then_interrupt(["--no-stack", "--project", str(path)], tmp_path,
                             "running; Ctrl-C stops everything")
    assert set(run.groups) == {"db", "api"}
    assert any(re.match(r"\[api\]\s+api: db answered; GREETING=hello MODE=dev-side", ln)
               for ln in run.lines)
    assert len(run.children) == 3  # the two apps and the db's grandchild
    run.assert_clean_exit()
    assert "[api] -- stopped" in run.out.replace("  ", " ")


def test_svc_dev_refuses_a_bad_project_before_anything_starts(tmp_path: Path) -> None:
    path, _, _ = make_project(tmp_path)
    (tmp_path / "api" / "project.yml").write_text("type: backend\nscope: devOnly\n"
                                                  "dependsOn: [nowhere]\nport: 1\n")
    proc = _svc_dev(["--project", str(path)], tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "dependsOn" in err or "port" in err
    assert "problem" in err
    assert "started" not in out and "[stack]" not in out
    # the same messages as `svc project validate`
    check = subprocess.run([sys.executable, "-m", "svccli", "project", "validate", "--project",
                            str(path)], capture_output=True, text=True, cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert check.returncode == 2 and check.stderr == err


def test_svc_dev_starts_the_stack_first_and_stops_it(tmp_path: Path) -> None:
    path, _, _ = make_project(tmp_path)
    db_bind = f"127.0.0.1:{free_port()}"
    run = run_then_interrupt(["--project", str(path), "--", "--memory", "--no-ssp",
                              "--db-bind", db_bind], tmp_path,
                             "running; Ctrl-C stops everything", budget=120)
    assert list(run.groups) == ["stack", "db", "api"]
    up = next(i for i, ln in enumerate(run.lines) if "service is up:" in ln)
    db_started = next(i for i, ln in enumerate(run.lines) if ln.startswith("[db]"))
    assert up < db_started
    assert any(db_bind in ln and ln.startswith("[stack]") for ln in run.lines)
    # the stack's own children run in sessions of their own: counted from the process tree
    assert len(run.children) > len(run.groups) + 1
    run.assert_clean_exit()


async def test_a_node_app_runs_with_its_script(tmp_path: Path) -> None:
    (tmp_path / "web").mkdir()
    (tmp_path / "project.yml").write_text("apps:\n  web: {path: web}\n")
    (tmp_path / "web" / "project.yml").write_text(
        "type: frontend\ndev: {type: node, script: main.js}\nenv: {WHO: node-app}\n")
    (tmp_path / "web" / "main.js").write_text(
        "console.log(`hello from ${process.env.WHO} on ${process.env.PORT}`);\n"
        "setInterval(() => {}, 1000);\n")
    project = load_project(tmp_path / "project.yml")
    sup = Supervisor.for_project(project, "dev", health=until_printed("web", "hello from"))
    assert await printed_once_up(sup, "web", "hello from") == ["hello from node-app on 3000"]


def test_svc_dev_sigint_while_an_app_is_still_starting_stops_all(tmp_path: Path) -> None:
    path, _, _ = make_project(tmp_path)
    # the api never answers its health check: svc dev is still starting when Ctrl-C comes
    text = (tmp_path / "api" / "project.yml").read_text()
    (tmp_path / "api" / "project.yml").write_text(text.replace("healthcheck: /health",
                                                               "healthcheck: /never"))
    run = run_then_interrupt(["--no-stack", "--project", str(path)], tmp_path,
                             "api: db answered")
    assert set(run.groups) == {"db", "api"}
    run.assert_clean_exit()
    assert "running; Ctrl-C" not in run.out


RUN_AND_HANG = """\
import asyncio, sys
from pathlib import Path
from apps import Supervisor
from project.rootconfig import load_project

async def main():
    sup = Supervisor.for_project(load_project(Path(sys.argv[1])), "dev", run_id=sys.argv[2])
    await sup.start()
    print("up", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def test_sweep_finds_what_a_killed_supervisor_left(tmp_path: Path) -> None:
    path, _, _ = make_project(tmp_path)
    run_id = f"test-{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.Popen([sys.executable, "-c", RUN_AND_HANG, str(path), run_id],
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"
        assert len(marked(run_id)) == 3  # both apps and the db's grandchild
        proc.kill()
        proc.wait()
        # the apps get SIGTERM from their lifeline; the db's background child gets nothing
        deadline = time.monotonic() + 10
        while len(marked(run_id)) > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        left = marked(run_id)
        assert len(left) == 1
        assert Path(f"/proc/{left[0]}/comm").read_text().strip() == "sleep"
        assert sweep(run_id) == left
        deadline = time.monotonic() + 10
        while marked(run_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marked(run_id) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        sweep(run_id)
