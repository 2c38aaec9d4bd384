"""Deployments of the hosted platform through real processes: ``svc-cloud`` with its reconcile
worker and the local executor starting a project's stack (database host, schema, scheduler,
SSPs) on free loopback ports; the deployed scheduler's cloud link back to the platform; a
local bare git repository whose new commit deploys; ``kill -9`` of the platform mid-deployment.

One platform and one project for the module: each test builds on the deployments before it
(the order is the story: deploy, redeploy, fail, roll back, cancel, logs, usage, crash)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from dbclient import Database, DbConfig
from tests.support.admin_stack import start_scheduler
from tests.support.cloud_stack import Cloud, make_cloud
from tests.support.objstore import S3Server, running_s3
from tests.support.procs import DbHost, base_env, free_port

pytestmark = pytest.mark.slow

ADMIN_PASSWORD = "deployed-break-glass-pw-1"
BAD_SSP: dict[str, str | None] = {"SVC_SSP_REF_MODE": "no-such-mode"}


def wait_until(fn: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def marked_processes(marker: str) -> list[int]:
    """Live processes whose environment carries ``SVC_CLOUD_DEPLOYMENT=<marker>`` (every
    process of a deployed stack has it)."""
    want = f"SVC_CLOUD_DEPLOYMENT={marker}".encode()
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if want in env and state != "Z":
            found.append(int(d))
    return found


class Project:
    def __init__(self, cloud: Cloud) -> None:
        self.cloud = cloud
        _, self.s, _ = cloud.user("deployer")
        self.slug = f"dep-{os.getpid() % 100000}"
        cloud.ok("POST", "/v1/projects", self.s, {"slug": self.slug})
        self.env({"SVC_ADMIN_PASSWORD": ADMIN_PASSWORD})

    @property
    def base(self) -> str:
        return f"/v1/projects/{self.slug}"

    def env(self, vars: dict[str, str | None]) -> None:
        self.cloud.ok("PATCH", self.base + "/env", self.s, {"vars": vars})

    def deploy(self, **body: Any) -> dict[str, Any]:
        return dict(self.cloud.ok("POST", self.base + "/deployments", self.s, body))

    def get(self, ref: Any) -> dict[str, Any]:
        return dict(self.cloud.ok("GET", f"{self.base}/deployments/{ref}", self.s))

    def wait(self, ref: Any, statuses: tuple[str, ...], timeout: float = 150) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            got = self.get(ref)
            return got if got["deployment"]["status"] in statuses else None
        try:
            return dict(wait_until(done, timeout, f"deployment {ref} in {statuses}"))
        except AssertionError:
            raise AssertionError(json.dumps(self.get(ref))[:3000] + "\n"
                                 + self.cloud.log_text()[-3000:]) from None

    def url_of(self, detail: dict[str, Any], role: str) -> str:
        return next(str(i["url"]) for i in detail["instances"] if i["role"] == role)


@pytest.fixture(scope="module")
def cloud(host: DbHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    tmp = tmp_path_factory.mktemp("cloud-deploy")
    c = make_cloud(host, tmp, SVC_CLOUD_RUN_DIR=str(tmp / "run"), SVC_CLOUD_EXECUTOR="local",
                   SVC_CLOUD_REPO_POLL_SECS="0.3", SVC_CLOUD_USAGE_SAMPLE_SECS="1",
                   SVC_CLOUD_RELAUNCH_BACKOFF_SECS="0.05", SVC_CLOUD_BACKUP_TICK_SECS="1",
                   # a daemon nobody runs: a container app is refused, whatever this host has
                   SVC_CLOUD_DOCKER_HOST="unix:///nonexistent/docker.sock")
    c.start()
    try:
        yield c
    finally:
        if c.process.alive():
            c.stop()


@pytest.fixture(scope="module")
def project(cloud: Cloud) -> Project:
    return Project(cloud)


def admin_session(admin: str) -> str:
    req = urllib.request.Request(admin + "/admin/api/session",
                                 data=json.dumps({"password": ADMIN_PASSWORD}).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return str(json.loads(r.read())["token"])


def admin_call(admin: str, token: str, method: str, path: str, body: Any = None
               ) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(admin + "/admin/api" + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


async def admin_tool(admin: str, token: str, name: str, args: dict[str, Any]) -> Any:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                              timeout=httpx2.Timeout(60))
    async with http, Client(streamable_http_client(admin + "/admin/api/mcp",
                                                   http_client=http)) as client:
        return await client.call_tool(name, args)


# ---------------------------------------------------------------------------- the story
async def test_a_deployment_runs_and_its_scheduler_is_linked(project: Project) -> None:
    first = project.deploy()
    assert first["existing"] is False and first["deployment"]["status"] == "queued"
    assert first["deployment"]["version"] == 1 and first["deployment"]["trigger"] == "api"
    done = project.wait(1, ("running", "failed"))
    assert done["deployment"]["status"] == "running", done["deployment"]["error"]
    roles = [i["role"] for i in done["instances"]]
    assert roles == ["db", "schema", "scheduler", "ssp-1"]
    assert all(i["status"] in ("healthy", "done") for i in done["instances"])
    # the same spec again answers the running deployment, no second one
    again = project.deploy()
    assert again["existing"] is True and again["deployment"]["version"] == 1
    admin = project.url_of(done, "scheduler")
    token = admin_session(admin)
    status, body = admin_call(admin, token, "GET", "/cloud/deployment")
    assert status == 200, body
    assert body["deployment"]["id"] == done["deployment"]["id"]
    assert body["deployment"]["status"] == "running" and body["project"]["slug"] == project.slug
    assert {i["role"] for i in body["instances"]} >= {"scheduler", "ssp-1"}
    res = await admin_tool(admin, token, "cloud_deployment", {})
    assert res.is_error is False
    assert res.structured_content["deployment"]["version"] == 1


async def test_backup_settings_go_through_the_link(project: Project) -> None:
    admin = project.url_of(project.get(1), "scheduler")
    token = admin_session(admin)
    status, body = admin_call(admin, token, "PUT", "/backups/config",
                              {"enabled": True, "schedule": "0 3 * * *", "retention": 14})
    assert status == 200, body
    assert body["config"]["schedule"] == "0 3 * * *" and body["config"]["retention"] == 14
    kept = project.cloud.ok("GET", project.base + "/backups/config", project.s)["config"]
    assert kept["enabled"] is True and kept["updated_by"] == "scheduler (cloud link)"
    status, body = admin_call(admin, token, "PUT", "/backups/config", {"schedule": "nope"})
    assert status == 400 and "cron" in body["message"], body
    status, listing = admin_call(admin, token, "GET", "/backups")
    assert status == 200 and listing["config"]["schedule"] == "0 3 * * *", listing["config"]
    res = await admin_tool(admin, token, "backups_configure", {"enabled": False})
    assert res.is_error is False, res.content
    kept = project.cloud.ok("GET", project.base + "/backups/config", project.s)["config"]
    assert kept["enabled"] is False and kept["schedule"] == "0 3 * * *"


def test_an_env_change_redeploys_and_keeps_the_database(project: Project) -> None:
    v1 = project.get(1)
    old_scheduler = [i for i in v1["instances"] if i["role"] == "scheduler"][0]
    project.env({"FEATURE_X": "on"})
    second = project.deploy()
    assert second["existing"] is False and second["deployment"]["version"] == 2
    assert second["deployment"]["spec_hash"] != v1["deployment"]["spec_hash"]
    done = project.wait(2, ("running", "failed"))
    assert done["deployment"]["status"] == "running", done["deployment"]["error"]
    assert project.get(1)["deployment"]["status"] == "superseded"
    db = [i for i in done["instances"] if i["role"] == "db"]
    assert db and db[0]["id"] == [i for i in v1["instances"] if i["role"] == "db"][0]["id"]
    # the old scheduler and SSP are gone: what is left of v1 is the kept database host
    wait_until(lambda: not marked_pid_alive(old_scheduler["pid"]), 30, "old scheduler stopped")
    wait_until(lambda: all(group_of(p) == db[0]["pid"]
                           for p in marked_processes(v1["deployment"]["id"])), 30,
               "only the database host's group left of v1")


def group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def marked_pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_failing_role_fails_the_deployment_and_the_previous_keeps_serving(
        project: Project) -> None:
    project.env(BAD_SSP)
    try:
        bad = project.deploy()
        v = bad["deployment"]["version"]
        done = project.wait(v, ("running", "failed"))
    finally:
        project.env(dict.fromkeys(BAD_SSP))
    dep = done["deployment"]
    assert dep["status"] == "failed"
    assert dep["error"]["role"] == "ssp-1" and "exited" in dep["error"]["message"]
    assert any("no-such-mode" in line or "REF_MODE" in line
               for line in dep["error"]["last_lines"]), dep["error"]
    assert not marked_processes(dep["id"]), "a failed deployment left processes"
    running = project.get(2)
    assert running["deployment"]["status"] == "running"
    admin = project.url_of(running, "scheduler")
    status, body = admin_call(admin, admin_session(admin), "GET", "/cloud/deployment")
    assert status == 200 and body["deployment"]["version"] == 2


def test_rollback_to_an_earlier_deployment(project: Project) -> None:
    out = project.cloud.ok("POST", f"{project.base}/deployments/1/rollback", project.s)
    dep = out["deployment"]
    assert dep["trigger"] == "rollback" and dep["rollback_of"] == project.get(1)["deployment"]["id"]
    done = project.wait(dep["version"], ("running", "failed"))
    assert done["deployment"]["status"] == "running", done["deployment"]["error"]
    assert done["deployment"]["spec"] == project.get(1)["deployment"]["spec"]
    assert project.get(2)["deployment"]["status"] == "superseded"
    # a deployment that never ran is refused
    failed = project.cloud.ok("GET", project.base + "/deployments", project.s,
                              params={"status": "failed"})["items"][0]
    r = project.cloud.call("POST", f"{project.base}/deployments/{failed['id']}/rollback",
                           project.s)
    assert r.status_code == 409 and r.json()["error"] == "never_ran"


def test_cancel_a_queued_and_an_in_flight_deployment(project: Project) -> None:
    a = project.cloud.ok("POST", project.base + "/scale", project.s, {"ssps": 2})["deployment"]
    b = project.cloud.ok("POST", project.base + "/scale", project.s, {"ssps": 1})["deployment"]
    assert b["version"] == a["version"] + 1
    # the queue is bounded: at most 3 wait (a may still be one of them), the next is 429
    extra = []
    for n in (3, 4, 5):
        r = project.cloud.call("POST", project.base + "/scale", project.s, {"ssps": n})
        if r.status_code == 429:
            break
        extra.append(r.json()["deployment"])
    assert r.status_code == 429 and r.json()["error"] == "queue_full", r.text
    queued = project.cloud.ok("GET", project.base + "/deployments", project.s,
                              params={"status": "queued"})["items"]
    assert len(queued) <= 3 and {d["version"] for d in extra} <= {d["version"] for d in queued}
    for d in extra:
        project.cloud.ok("POST", f"{project.base}/deployments/{d['version']}/cancel", project.s)
    # b waits behind a: cancelled at once
    out = project.cloud.ok("POST", f"{project.base}/deployments/{b['version']}/cancel",
                           project.s)
    assert out["cancelled"] is True and project.get(b["version"])["deployment"]["status"] == \
        "cancelled"
    # a is in flight: 5 roles of several seconds each, the flag is read before each one
    project.wait(a["version"], ("deploying",))
    out = project.cloud.ok("POST", f"{project.base}/deployments/{a['version']}/cancel",
                           project.s)
    assert out["cancelled"] is False and out["deployment"]["cancel_requested"] is True
    done = project.wait(a["version"], ("cancelled", "running", "failed"))
    assert done["deployment"]["status"] == "cancelled", done
    assert all(i["status"] in ("stopped", "done") for i in done["instances"]), done
    assert not marked_processes(done["deployment"]["id"])
    # the one that ran before still runs and serves
    running = project.cloud.ok("GET", project.base + "/deployments", project.s,
                               params={"status": "running"})["items"]
    assert len(running) == 1
    # an unknown deployment, a finished one
    r = project.cloud.call("POST", f"{project.base}/deployments/dep_nope/cancel", project.s)
    assert r.status_code == 404
    r = project.cloud.call("POST", f"{project.base}/deployments/1/cancel", project.s)
    assert r.status_code == 409 and r.json()["error"] == "not_cancellable"


def test_logs_are_bounded_filtered_and_paged_by_cursor(project: Project) -> None:
    c, base = project.cloud, f"{project.base}/deployments/2"
    first = c.ok("GET", base + "/logs", project.s, params={"limit": 5})
    assert len(first["lines"]) == 5 and first["truncated"] is True
    assert first["next_cursor"]
    second = c.ok("GET", base + "/logs", project.s,
                  params={"limit": 5, "cursor": first["next_cursor"]})
    assert second["lines"] and second["lines"][0] != first["lines"][0]
    assert [ln["at"] for ln in first["lines"] + second["lines"]] == sorted(
        ln["at"] for ln in first["lines"] + second["lines"])
    # a cursor of another filter is refused
    r = c.call("GET", base + "/logs", project.s,
               params={"limit": 5, "cursor": first["next_cursor"], "q": "x"})
    assert r.status_code == 400 and r.json()["error"] == "bad_cursor"
    healthy = c.ok("GET", base + "/logs", project.s, params={"q": "is healthy", "limit": 50})
    assert healthy["lines"] and all("is healthy" in ln["text"] for ln in healthy["lines"])
    ssp = c.ok("GET", base + "/logs", project.s, params={"limit": 500, "instance": "ssp-1"})
    assert ssp["lines"] and {ln["role"] for ln in ssp["lines"]} == {"ssp-1"}
    errors = c.ok("GET", f"{project.base}/deployments/3/logs", project.s,
                  params={"level": "error", "limit": 100})
    assert errors["lines"] and all(ln["level"] == "error" for ln in errors["lines"])
    r = c.call("GET", base + "/logs", project.s, params={"limit": 501})
    assert r.status_code == 400


def test_the_cli_lists_reads_logs_and_makes_and_cancels_deployments(
        project: Project, tmp_path: Path) -> None:
    """``svc cloud deployments|logs|scale|restart|rollback|cancel`` against the platform:
    each new deployment is cancelled at once (the verbs' own effects are the REST tests')."""
    c = project.cloud
    env = base_env(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / ".config"),
                   SVC_CLOUD_API_URL=c.url, SVC_CLOUD_TOKEN=project.s)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "svccli", "cloud", *args], env=env,
                              capture_output=True, text=True, timeout=120)
    running = c.ok("GET", project.base + "/deployments", project.s,
                   params={"status": "running"})["items"][0]
    v = str(running["version"])
    out = cli("deployments", "-p", project.slug)
    assert out.returncode == 0 and "running" in out.stdout, out.stderr
    out = cli("--json", "deployments", "-p", project.slug, v)
    assert out.returncode == 0, out.stderr
    assert "scheduler" in {i["role"] for i in json.loads(out.stdout)["instances"]}
    out = cli("logs", "-p", project.slug, v, "--instance", "scheduler", "--limit", "3")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 3 and all(" scheduler " in ln for ln in lines), lines
    assert "(more: --cursor " in out.stderr
    for verb, trigger in ((["scale", "3"], "api"), (["restart", "--role", "scheduler"],
                                                     "restart"), (["rollback", "1"], "rollback")):
        out = cli("--json", verb[0], "-p", project.slug, *verb[1:])
        assert out.returncode == 0, out.stderr
        dep = json.loads(out.stdout)["deployment"]
        assert dep["trigger"] == trigger and dep["status"] == "queued", dep
        out = cli("cancel", "-p", project.slug, str(dep["version"]))
        assert out.returncode == 0, out.stderr
        done = project.wait(dep["version"], ("cancelled", "running", "failed"))
        assert done["deployment"]["status"] == "cancelled", done["deployment"]
    out = cli("cancel", "-p", project.slug, v)
    assert out.returncode != 0 and "409 not_cancellable" in out.stderr, out.stderr
    assert project.get(v)["deployment"]["status"] == "running"


def test_usage_has_machine_seconds_per_instance(project: Project) -> None:
    def report() -> Any:
        out = project.cloud.ok("GET", "/v1/usage", project.s, params={"project": project.slug})
        ms = [t for t in out["totals"] if t["metric"] == "machine_seconds"][0]
        return ms if ms["measured"] and (ms["quantity"] or 0) > 1 else None
    ms = wait_until(report, 60, "machine seconds in the usage report")
    assert ms["unit"] and ms["quantity"] > 1


async def test_deployment_tools_need_their_scopes(project: Project) -> None:
    c = project.cloud
    reader = c.mint(project.s, ["deployments:read"])
    no_logs = c.mint(project.s, ["projects:read"])
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {reader}"},
                              timeout=httpx2.Timeout(60))
    async with http, Client(streamable_http_client(c.url + "/v1/mcp", http_client=http)) as m:
        names = {t.name for t in (await m.list_tools()).tools}
        assert {"deployments_list", "deployment_get"} <= names
        assert "deployment_create" not in names and "deployment_logs" not in names
        listed = await m.call_tool("deployments_list", {"project": project.slug})
        assert listed.is_error is False and listed.structured_content["items"]
        refused = await m.call_tool("deployment_create", {"project": project.slug})
        assert refused.is_error is True
        assert refused.structured_content["error"] == "missing_scope"
    r = c.call("GET", f"{project.base}/deployments/1/logs", no_logs)
    assert r.status_code == 403 and r.json()["error"] == "missing_scope"
    r = c.call("GET", f"{project.base}/deployments", None)
    assert r.status_code == 401
    r = c.call("POST", f"{project.base}/deployments", reader, {})
    assert r.status_code == 403


def test_a_refused_link_is_502_cloud_auth_and_a_down_platform_503(
        project: Project, host: DbHost, tmp_path: Path) -> None:
    wrong = start_scheduler(tmp_path, host, "linkns", env={
        "SVC_CLOUD_API_URL": project.cloud.url, "SVC_CLOUD_PROJECT": project.slug})
    try:
        token = admin_session_with(wrong.admin)
        status, body = admin_call(wrong.admin, token, "GET", "/cloud/deployment")
        assert status == 502 and body["code"] == "cloud_auth", body
        status, body = admin_call(wrong.admin, token, "POST", "/cloud/restart", {"roles": []})
        assert status == 502 and body["code"] == "cloud_auth", body
        status, ops = admin_call(wrong.admin, token, "GET", "/operations")
        assert any(o["kind"] == "cloud_restart" and o["status"] == "failed"
                   for o in ops["operations"]), ops
    finally:
        wrong.process.stop()
    (tmp_path / "down").mkdir()
    down = start_scheduler(tmp_path / "down", host, "linkns2", env={
        "SVC_CLOUD_API_URL": f"http://127.0.0.1:{free_port()}",
        "SVC_CLOUD_PROJECT": project.slug})
    try:
        token = admin_session_with(down.admin)
        status, body = admin_call(down.admin, token, "GET", "/cloud/deployment")
        assert status == 503 and body["code"] == "cloud_unreachable", body
        status, _ = admin_call(down.admin, token, "GET", "/overview")
        assert status == 200  # the cluster keeps serving
    finally:
        down.process.stop()


def admin_session_with(admin: str) -> str:
    from tests.support.admin_stack import BREAKGLASS

    req = urllib.request.Request(admin + "/admin/api/session",
                                 data=json.dumps({"password": BREAKGLASS}).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return str(json.loads(r.read())["token"])


def test_restart_through_the_scheduler_link(project: Project) -> None:
    running = project.cloud.ok("GET", project.base + "/deployments", project.s,
                               params={"status": "running"})["items"][0]
    detail = project.get(running["version"])
    admin = project.url_of(detail, "scheduler")
    token = admin_session(admin)
    status, body = admin_call(admin, token, "POST", "/cloud/restart",
                              {"roles": ["scheduler"]})
    assert status == 202, body
    assert body["operation"]["kind"] == "cloud_restart"
    assert body["operation"]["status"] == "done"
    dep = body["deployment"]
    assert dep["trigger"] == "restart" and dep["spec"]["restart"]["roles"] == ["scheduler"]
    done = project.wait(dep["version"], ("running", "failed"))
    assert done["deployment"]["status"] == "running", done["deployment"]["error"]


WEB_APP = """\
import hashlib, json, os
from http.server import BaseHTTPRequestHandler, HTTPServer

SECRET = os.environ.get("APP_SECRET", "")
print("INFO web: serving", flush=True)

class Web(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"greeting": os.environ.get("GREETING"),
                           "mode": os.environ.get("MODE"),
                           "secret_sha": hashlib.sha256(SECRET.encode()).hexdigest(),
                           "shell": os.environ.get("SHELL_URL")}).encode()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        print("request " + fmt % args, flush=True)

HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Web).serve_forever()
"""
SHELL_OK = 'echo "shell app up"; exec python3 -m http.server $PORT --bind 127.0.0.1'
SHELL_BROKEN = 'echo "ERROR shell app: broken config" >&2; exit 3'
APP_SECRET = "vault-planted-app-secret-93a1"


class Repo:
    """A local bare repository and a working copy pushing to it."""

    def __init__(self, tmp: Path) -> None:
        self.bare, self.work = tmp / "repo.git", tmp / "work"
        self.git = ["git", "-c", "user.email=t@example.test", "-c", "user.name=t"]
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(self.bare)],
                       check=True)
        subprocess.run(["git", "init", "-q", "-b", "main", str(self.work)], check=True)

    def push(self, shell_cmd: str | None, message: str) -> None:
        """``shell_cmd`` None: the shell app runs its image (no ``dev`` command)."""
        w = self.work
        (w / "web").mkdir(exist_ok=True)
        (w / "shell").mkdir(exist_ok=True)
        (w / "project.yml").write_text("apps:\n  web: {path: web}\n  shell: {path: shell}\n"
                                       "  local: {path: local}\n")
        (w / "web" / "web.py").write_text(WEB_APP)
        (w / "web" / "project.yml").write_text(
            "type: frontend\ndependsOn: [shell]\ndev: {type: python, script: web.py}\n"
            "deploy: {port: 3000}\nenv:\n  - {vault: [APP_SECRET]}\n"
            "  - {dev: {MODE: dev-side}, cloud: {MODE: cloud-side}}\n")
        (w / "shell" / "project.yml").write_text(
            "type: container\nimage: example/shell:1\nports: [8000]\nhealthcheck: /\n"
            + (f"dev: {json.dumps(shell_cmd)}\n" if shell_cmd is not None else ""))
        (w / "local").mkdir(exist_ok=True)
        (w / "local" / "project.yml").write_text(
            "type: frontend\nscope: devOnly\ndev: \"exit 9\"\n")
        self.commit(message)

    def commit(self, message: str) -> None:
        w = self.work
        subprocess.run([*self.git, "-C", str(w), "add", "."], check=True)
        subprocess.run([*self.git, "-C", str(w), "commit", "-qm", message], check=True)
        subprocess.run(["git", "-C", str(w), "push", "-q", str(self.bare), "main"],
                       check=True)


def answer(url: str) -> Any:
    try:
        return get_json(url)
    except (urllib.error.URLError, OSError):
        return None


def serving(url: str) -> Any:
    """The web app's answer once it answers: it has no readiness check (a frontend has
    none), so running is not yet listening."""
    return wait_until(lambda: answer(url), 30, f"an answer from {url}")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def next_deployment(project: Project, after: int) -> Any:
    def deployed() -> Any:
        top = project.cloud.ok("GET", project.base + "/deployments", project.s)["items"][0]
        return top if top["version"] > after else None
    return wait_until(deployed, 30, "a deployment for the commit")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    return Repo(tmp_path_factory.mktemp("repo"))


def test_a_push_deploys_the_apps_of_project_yml(project: Project, repo: Repo) -> None:
    c = project.cloud
    c.ok("PUT", project.base + "/vault/APP_SECRET", project.s, {"value": APP_SECRET})
    c.ok("PATCH", project.base + "/env", project.s, {"vars": {"GREETING": "hello"},
                                                      "app": "web"})
    repo.push(SHELL_OK, "two apps")
    before = c.ok("GET", project.base + "/deployments", project.s)["items"][0]
    c.ok("POST", project.base + "/links", project.s, {"url": str(repo.bare)})
    dep = next_deployment(project, before["version"])
    assert dep["trigger"] == "repo_link" and dep["spec"]["commit"]
    done = project.wait(dep["version"], ("running", "failed"))
    assert done["deployment"]["status"] == "running", done["deployment"]["error"]
    roles = [i["role"] for i in done["instances"]]
    # the stack first, then the apps in dependsOn order; the devOnly app is left out
    assert roles[-2:] == ["app-shell", "app-web"], roles
    got = serving(project.url_of(done, "app-web"))
    assert got["greeting"] == "hello" and got["mode"] == "cloud-side"
    assert got["secret_sha"] == digest(APP_SECRET)
    assert get_json_status(project.url_of(done, "app-shell")) == 200
    logs = c.ok("GET", f"{project.base}/deployments/{dep['version']}/logs", project.s,
                params={"instance": "app-shell", "limit": 10})
    assert any("shell app up" in ln["text"] for ln in logs["lines"]), logs
    fetched = c.ok("GET", f"{project.base}/deployments/{dep['version']}/logs", project.s,
                   params={"q": "fetched commit", "limit": 10})
    assert fetched["lines"]
    # the secret is in the app's environment only: never in a log or a record
    everything = c.ok("GET", f"{project.base}/deployments/{dep['version']}/logs", project.s,
                      params={"limit": 500})
    assert APP_SECRET not in json.dumps(everything) + json.dumps(done)
    assert APP_SECRET not in c.log_text()


def digest(value: str) -> str:
    import hashlib

    return hashlib.sha256(value.encode()).hexdigest()


def get_json_status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as r:
        return int(r.status)


def running_detail(project: Project) -> dict[str, Any]:
    top = project.cloud.ok("GET", project.base + "/deployments", project.s,
                           params={"status": "running"})["items"][0]
    return project.get(top["version"])


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with running_s3(tmp_path_factory.mktemp("s3")) as server:
        yield server


def test_an_env_change_redeploys_the_apps(project: Project, s3: S3Server) -> None:
    project.cloud.ok("PATCH", project.base + "/env", project.s,
                     {"vars": {"GREETING": "hola"}, "app": "web"})
    project.env({**s3.env()})  # every role: the deployed scheduler's backup storage
    dep = project.deploy()["deployment"]
    assert dep["spec"]["commit"]  # the linked commit stays
    done = project.wait(dep["version"], ("running", "failed"))
    assert done["deployment"]["status"] == "running", done["deployment"]["error"]
    assert serving(project.url_of(done, "app-web"))["greeting"] == "hola"


def test_a_failing_app_fails_its_deployment_and_the_previous_keeps_serving(
        project: Project, repo: Repo) -> None:
    serving = running_detail(project)
    web = project.url_of(serving, "app-web")
    repo.push(SHELL_BROKEN, "break the shell app")
    dep = next_deployment(project, serving["deployment"]["version"])
    done = project.wait(dep["version"], ("running", "failed"))
    err = done["deployment"]["error"]
    assert done["deployment"]["status"] == "failed" and err["role"] == "app-shell", err
    assert "exited" in err["message"]
    assert any("broken config" in line for line in err["last_lines"]), err
    assert not marked_processes(dep["id"]), "a failed deployment left processes"
    assert running_detail(project)["deployment"]["id"] == serving["deployment"]["id"]
    assert get_json(web)["greeting"] == "hola"  # the previous apps still serve
    # a project.yml the validator refuses: failed while building, nothing started
    (repo.work / "web" / "project.yml").write_text("type: spaceship\n")
    repo.commit("an invalid app file")
    bad = next_deployment(project, dep["version"])
    done = project.wait(bad["version"], ("running", "failed"))
    err = done["deployment"]["error"]
    assert done["deployment"]["status"] == "failed" and "project.yml is invalid" in \
        err["message"], err
    assert any("type" in line for line in err["last_lines"]), err
    assert done["instances"] == []
    assert get_json(web)["greeting"] == "hola"
    # a container app's image with the local executor and no Docker daemon: refused before
    # anything starts, saying why
    repo.push(None, "run the shell app's image")
    img = next_deployment(project, bad["version"])
    done = project.wait(img["version"], ("running", "failed"))
    err = done["deployment"]["error"]
    assert done["deployment"]["status"] == "failed" and err["role"] == "app-shell", err
    assert "needs a Docker daemon" in err["message"] and "example/shell:1" in err["message"]
    assert done["instances"] == []
    bad = img
    repo.push(SHELL_OK, "fix the shell app")  # admitted behind: the next test waits for it
    fixed = next_deployment(project, bad["version"])
    done = project.wait(fixed["version"], ("running", "failed"))
    assert done["deployment"]["status"] == "running", done["deployment"]["error"]


def test_a_killed_app_instance_is_relaunched(project: Project) -> None:
    detail = running_detail(project)
    web = [i for i in detail["instances"] if i["role"] == "app-web"][0]
    os.killpg(web["pid"], 9)

    def relaunched() -> Any:
        now = project.get(detail["deployment"]["version"])
        new = [i for i in now["instances"] if i["role"] == "app-web"
               and i["status"] == "healthy" and i["id"] != web["id"]]
        return now if new else None
    now = wait_until(relaunched, 60, "the web app relaunched")
    assert [i["status"] for i in now["instances"] if i["id"] == web["id"]] == ["exited"]
    assert now["deployment"]["status"] == "running"
    # the web app has no readiness check (a frontend has none): it serves once it bound
    assert serving(project.url_of(now, "app-web"))["greeting"] == "hola"
    logs = project.cloud.ok("GET", f"{project.base}/deployments/{now['deployment']['version']}"
                            "/logs", project.s, params={"q": "relaunch", "limit": 20})
    assert logs["lines"]


def wait_restore(project: Project, base: str, bid: str, timeout: float) -> Any:
    """The restore status of backup ``bid`` once it ended (``done`` or ``failed``)."""
    def ended() -> Any:
        got = project.cloud.ok("GET", f"{base}/{bid}/restore", project.s)
        return got if got["stage"] in ("done", "failed") else None
    return wait_until(ended, timeout, "the restore")


async def deployed_db(project: Project, sql: str, vars: dict[str, Any] | None = None) -> Any:
    """One query on the running deployment's database host (its own connection: a restore
    in between may drop any)."""
    db = [i for i in running_detail(project)["instances"] if i["role"] == "db"][0]
    addr = str(db["url"]).split("//", 1)[1]
    cfg = DbConfig.from_env({"SVC_DB_URL": f"ws://{addr}/rpc", "SVC_DB_USER": "root",
                             "SVC_DB_PASS": "root", "SVC_SSP_DB_TIMEOUT_SECS": "60"})
    async with Database(cfg) as conn:
        return await conn.query_one(sql, vars)


async def test_backups_through_the_platform(project: Project, s3: S3Server,
                                           tmp_path: Path) -> None:
    c, base = project.cloud, project.base + "/backups"
    # rows in the deployed database before the backup...
    rows = [{"id": f"k{i:02d}", "n": i, "word": f"w{i}", "tags": ["a", str(i)]}
            for i in range(20)]
    await deployed_db(project, "DEFINE TABLE keepsake SCHEMALESS; "
                      "INSERT INTO keepsake $rows RETURN NONE", {"rows": rows})
    want = await deployed_db(project, "SELECT * FROM keepsake ORDER BY id")
    assert len(want) == 20
    out = c.ok("POST", base, project.s, {"name": "through the platform"})
    bid = out["backup_id"]
    assert out["operation"]["kind"] == "backup"

    def finished() -> Any:
        local = c.ok("GET", base, project.s)["backups"]["local"]
        rec = [r for r in local if r.get("backup_id") == bid]
        return rec[0]["status"] if rec and rec[0]["status"] in ("done", "failed") else None
    assert wait_until(finished, 90, "the backup") == "done"
    assert s3.files(), "the backup reached the object store"
    # ...changed and deleted after it...
    await deployed_db(project, "UPDATE keepsake SET n = -1 WHERE n < 10; "
                      "DELETE keepsake:k15; DELETE keepsake:k16; CREATE keepsake:extra SET n = 99")
    changed = await deployed_db(project, "SELECT * FROM keepsake ORDER BY id")
    assert changed != want and len(changed) == 19
    r = c.call("POST", f"{base}/{bid}/restore", project.s, {"confirm": "another"})
    assert r.status_code == 400 and r.json()["error"] == "confirm", r.text
    out = c.ok("POST", f"{base}/{bid}/restore", project.s, {"confirm": bid})
    assert out["restore_id"] and out["operation"]["kind"] == "restore"
    got = wait_restore(project, base, bid, 120)
    assert got["stage"] == "done", got
    # ...are back as they were at the backup, read through the deployed database
    assert await deployed_db(project, "SELECT * FROM keepsake ORDER BY id") == want
    # errors keep the scheduler's status; the scopes are the part-1 rules
    r = c.call("GET", f"{base}/bk_no_such/restore", project.s)
    assert r.status_code == 404, r.text
    reader = c.mint(project.s, ["backups:read"])
    r = c.call("POST", base, reader, {})
    assert r.status_code == 403 and r.json()["error"] == "missing_scope"
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {reader}"},
                              timeout=httpx2.Timeout(60))
    async with http, Client(streamable_http_client(c.url + "/v1/mcp", http_client=http)) as m:
        names = {t.name for t in (await m.list_tools()).tools}
        assert {"backups_list", "backup_restore_status"} <= names
        assert not names & {"backup_create", "backup_restore", "backup_delete"}
        listed = await m.call_tool("backups_list", {"project": project.slug})
        assert listed.is_error is False
        assert bid in json.dumps(listed.structured_content["backups"]["local"])
    out = c.ok("DELETE", f"{base}/{bid}", project.s, params={"confirm": bid})
    assert out["backup_id"] == bid and out["deleted_at_ms"]
    # a project with nothing running: 409, never a 500
    c.ok("POST", "/v1/projects", project.s, {"slug": project.slug + "-idle"})
    r = c.call("GET", f"/v1/projects/{project.slug}-idle/backups", project.s)
    assert r.status_code == 409 and r.json()["error"] == "not_running", r.text
    # the CLI: the same operations
    env = base_env(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / ".config"),
                   SVC_CLOUD_API_URL=c.url, SVC_CLOUD_TOKEN=project.s)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "svccli", "cloud", *args], env=env,
                              capture_output=True, text=True, timeout=120)
    out = cli("--json", "backups", "ls", "-p", project.slug)
    assert out.returncode == 0 and bid in out.stdout, out.stderr
    out = cli("backups", "status", "-p", project.slug, bid)
    assert out.returncode == 0 and '"done"' in out.stdout, out.stderr
    out = cli("backups", "ls", "-p", project.slug + "-idle")
    assert out.returncode != 0 and "not_running" in out.stderr, out.stderr


async def backdate_backup_settings(cloud: Cloud, slug: str) -> datetime:
    """Move the project's backup settings two minutes into the past, in the platform's own
    database; their new time."""
    env = cloud.env
    db = Database(DbConfig.from_env({
        "SVC_DB_URL": env["SVC_CLOUD_DB_URL"], "SVC_DB_USER": env["SVC_CLOUD_DB_USER"],
        "SVC_DB_PASS": env["SVC_CLOUD_DB_PASS"], "SVC_DB_NS": env["SVC_CLOUD_DB_NS"],
        "SVC_DB_NAME": env["SVC_CLOUD_DB_NAME"]}))
    async with db:
        rows = await db.query_one(
            "UPDATE project SET backup_config.updated_at = time::now() - 2m "
            "WHERE slug = $slug AND deleted_at IS NONE RETURN backup_config.updated_at AS at",
            {"slug": slug})
    assert len(rows) == 1, rows
    return rows[0]["at"]


def test_backups_are_taken_on_the_configured_schedule(project: Project, s3: S3Server) -> None:
    """The platform's worker takes a project's backups on its schedule through the running
    deployment's scheduler. Every minute here (cron has no finer unit), with the settings
    written two minutes ago as the platform's database sees it: the schedule's first time
    after them has passed, so the worker's next tick takes that slot's backup (instead of a
    wait of up to a minute for the clock's next one)."""
    c = project.cloud
    base = project.base + "/backups"
    before = {r["backup_id"] for r in c.ok("GET", base, project.s)["backups"]["local"]}
    c.ok("PUT", base + "/config", project.s,
         {"enabled": True, "schedule": "* * * * *", "retention": 7})
    settings_at = asyncio.run(backdate_backup_settings(c, project.slug))
    # the slot the schedule gives after the settings: the minute after them, in the backup's name
    due = (settings_at.astimezone(UTC) + timedelta(minutes=1)).replace(second=0, microsecond=0)
    try:
        def scheduled() -> list[dict[str, Any]]:
            local = c.ok("GET", base, project.s)["backups"]["local"]
            return [r for r in local if r["backup_id"] not in before
                    and str(r.get("name") or "").startswith("scheduled ")
                    and r["status"] in ("done", "failed")]
        try:
            got = wait_until(scheduled, 150, "a backup taken on the schedule")
        except AssertionError:
            raise AssertionError(c.ok("GET", base + "/config", project.s)) from None
        ran = c.ok("GET", base + "/config", project.s)["last_run"]
        # what the schedule did last is shown with the settings
        assert ran["last_backup"] and ran.get("last_error") is None, ran
    finally:
        c.ok("PUT", base + "/config", project.s, {"enabled": False})
    assert [r["status"] for r in got] == ["done"] * len(got), got
    names = [r["name"] for r in got]
    assert f"scheduled {due:%Y-%m-%d %H:%M} UTC" in names, names
    # the next minute had passed too when the worker looked: one backup for both, no catching up
    skipped = due + timedelta(minutes=1)
    assert f"scheduled {skipped:%Y-%m-%d %H:%M} UTC" not in names, names


def test_a_rollback_runs_with_the_env_of_the_deployment_rolled_back_to(
        project: Project) -> None:
    first = [d for d in project.cloud.ok("GET", project.base + "/deployments", project.s,
                                         params={"limit": 100})["items"]
             if d["trigger"] == "repo_link" and d["status"] == "superseded"][-1]
    out = project.cloud.ok("POST", f"{project.base}/deployments/{first['version']}/rollback",
                           project.s)
    done = project.wait(out["deployment"]["version"], ("running", "failed"))
    assert done["deployment"]["status"] == "running", done["deployment"]["error"]
    # GREETING is "hola" now; the deployment rolled back to ran with "hello"
    assert serving(project.url_of(done, "app-web"))["greeting"] == "hello"


def test_an_instance_that_keeps_exiting_is_given_up_and_the_deployment_degraded(
        project: Project) -> None:
    """Relaunches back off (SVC_CLOUD_RELAUNCH_BACKOFF_SECS: 0.05 s here, 1 s by default);
    after 3 within 5 minutes the role is left down: the deployment stays running, with
    `degraded: true` and an error naming the role."""
    detail = running_detail(project)
    version = detail["deployment"]["version"]
    killed: set[str] = set()
    for _ in range(5):  # at most RELAUNCH_MAX relaunches, then one more exit
        now = project.get(version)
        if now["deployment"].get("degraded"):
            break
        web = [i for i in now["instances"] if i["role"] == "app-web"
               and i["status"] == "healthy"][0]
        os.killpg(web["pid"], 9)
        killed.add(web["id"])

        def next_state(gone: str = web["id"]) -> Any:
            got = project.get(version)
            fresh = [i for i in got["instances"] if i["role"] == "app-web"
                     and i["status"] == "healthy" and i["id"] not in killed | {gone}]
            return got if fresh or got["deployment"].get("degraded") else None
        wait_until(next_state, 60, "a relaunch or the give-up")
    now = project.get(version)
    dep = now["deployment"]
    assert dep["degraded"] is True and dep["status"] == "running", dep
    assert dep["error"]["role"] == "app-web" and "not relaunched again" in \
        dep["error"]["message"], dep["error"]
    webs = [i for i in now["instances"] if i["role"] == "app-web"]
    assert not [i for i in webs if i["status"] in ("healthy", "starting")], webs
    assert len([i for i in webs if i["status"] == "exited"]) >= 4, webs
    # the rest still serves
    assert admin_session(project.url_of(now, "scheduler"))
    # the deploy log says so too (written in batches: once the next batch is in)
    wait_until(lambda: project.cloud.ok(
        "GET", f"{project.base}/deployments/{version}/logs", project.s,
        params={"q": "not relaunched again", "limit": 5})["lines"], 30,
        "the give-up in the deploy log")


def test_kill_9_mid_deployment_leaves_no_orphans_and_resumes(project: Project) -> None:
    c = project.cloud
    project.env({"FEATURE_Y": "on"})
    dep = project.deploy()["deployment"]
    project.wait(dep["version"], ("deploying",))
    wait_until(lambda: marked_processes(dep["id"]), 60, "the new stack's first process")
    ids = [d["id"] for d in c.ok("GET", project.base + "/deployments", project.s,
                                 params={"limit": 100})["items"]]
    c.process.kill9()
    c.http.close()
    c.http = httpx.Client(timeout=30)
    # every process of every deployment dies with the platform (SIGTERM from its lifeline)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(marked_processes(d) for d in ids):
        time.sleep(0.2)
    assert not any(marked_processes(d) for d in ids), "processes outlived the platform"
    c.start()
    done = project.wait(dep["version"], ("running", "failed"), timeout=180)
    assert done["deployment"]["status"] == "running", done["deployment"]["error"]
    logs = c.ok("GET", f"{project.base}/deployments/{dep['version']}/logs", project.s,
                params={"q": "restarted", "limit": 10})
    assert logs["lines"], "the resume is in the deploy log"


def test_a_scale_to_two_ssps_runs_both(project: Project) -> None:
    """A scale to 2 SSPs reaches ``running`` with both serving: the deployed scheduler lists
    two Ready SSPs, at the addresses of the deployment's two SSP instances."""
    before = running_detail(project)
    dep = project.cloud.ok("POST", project.base + "/scale", project.s, {"ssps": 2})["deployment"]
    assert dep["spec"]["ssps"] == 2 and dep["status"] == "queued", dep
    done = project.wait(dep["version"], ("running", "failed"), timeout=180)
    assert done["deployment"]["status"] == "running", done["deployment"]["error"]
    assert project.get(before["deployment"]["version"])["deployment"]["status"] == "superseded"
    ssps = {i["role"]: i["url"] for i in done["instances"]
            if i["role"].startswith("ssp-") and i["status"] == "healthy"}
    assert sorted(ssps) == ["ssp-1", "ssp-2"], done["instances"]
    admin = project.url_of(done, "scheduler")
    token = admin_session(admin)

    def two_ready() -> Any:
        status, body = admin_call(admin, token, "GET", "/overview")
        assert status == 200, body
        ready = [s for s in body["ssps"] if s["state"] == "ready"]
        return body if len(ready) == 2 else None
    try:
        overview = wait_until(two_ready, 60, "two Ready SSPs in the deployed scheduler")
    except AssertionError:
        raise AssertionError(admin_call(admin, token, "GET", "/overview")[1]) from None
    assert {s["url"].rstrip("/") for s in overview["ssps"]} == set(ssps.values()), overview
    assert overview["totals"]["ready_ssps"] == 2
