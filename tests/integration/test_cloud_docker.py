"""The hosted platform's Docker executor through a real daemon: a private ``dockerd``
(tests/support/dockerd.py; no bridge, no iptables, containers on the host network), one
``svc-cloud`` with ``SVC_CLOUD_EXECUTOR=docker`` and one project for the module. Each test
builds on the one before: deploy; ``kill -9`` of the platform in the middle of a redeploy
and restart; a pushed ``project.yml`` with a container app and a python app, redeployed;
the python app broken (the deployment fails, the running one serves on); a backup taken and
restored through the platform (an object store on loopback, named from the first deployment
on); then an app built from a Containerfile and a static site, and a build that needs the
network; a cancel while building and a second build (old images removed, the previous
one's kept); ``kill -9`` of the platform while building, restarted; stop; the same platform restarted on the local executor with the daemon,
resuming the running deployment.

Containers are counted by their labels through the SDK, the way an operator finds orphans.
When no daemon can be started here the module fails with the reason (never skipped)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from apps import AppFailed, Supervisor
from apps.container import container_argv
from cloud.docker_executor import (
    DEFAULT_IMAGE,
    DockerExecutor,
    DockerSettings,
    LocalWithContainers,
    import_hostroot_image,
)
from cloud.executor import ExecutorError, Handle, LocalExecutor, Role
from cloud.imagebuild import BuildFailed, ImageBuild, build_image
from project.appconfig import AppConfig
from project.rootconfig import LoadedApp
from tests.integration.test_cloud_deploy import (
    Project,
    Repo,
    admin_call,
    admin_session,
    deployed_db,
    next_deployment,
    running_detail,
    wait_restore,
    wait_until,
)
from tests.support.cloud_stack import Cloud, make_cloud
from tests.support.dockerd import Dockerd, start_dockerd
from tests.support.objstore import S3Server, running_s3
from tests.support.procs import DbHost, base_env, free_port, http_status
from tests.support.ssp_stack import wait_for

pytestmark = pytest.mark.slow

MEMORY_MB = 768
CPUS = 0.75


@pytest.fixture(scope="module")
def dockerd() -> Iterator[Dockerd]:
    d = start_dockerd()
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture(scope="module")
def cloud(host: DbHost, dockerd: Dockerd, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Cloud]:
    tmp = tmp_path_factory.mktemp("cloud-docker")
    c = make_cloud(host, tmp, SVC_CLOUD_RUN_DIR=str(tmp / "run"), SVC_CLOUD_EXECUTOR="docker",
                   SVC_CLOUD_REPO_POLL_SECS="0.3", SVC_CLOUD_USAGE_SAMPLE_SECS="1",
                   SVC_CLOUD_DOCKER_HOST=dockerd.url,
                   SVC_CLOUD_DOCKER_MEMORY_MB=str(MEMORY_MB), SVC_CLOUD_DOCKER_CPUS=str(CPUS))
    c.start()
    try:
        yield c
    finally:
        if c.process.alive():
            c.stop()


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with running_s3(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture(scope="module")
def project(cloud: Cloud, s3: S3Server) -> Project:
    p = Project(cloud)
    p.env({**s3.env()})  # every role, from the first deployment: the scheduler's backup storage
    return p


class Box:
    """One container as the daemon lists it (a list entry: nothing is fetched after it, so a
    container removed meanwhile cannot fail the count)."""

    def __init__(self, entry: dict[str, Any]) -> None:
        self.id: str = entry["Id"]
        self.labels: dict[str, str] = dict(entry.get("Labels") or {})
        self.status: str = entry.get("State") or ""


def containers(d: Dockerd, cloud: Cloud, **labels: str) -> list[Box]:
    """Every container (running or not) of this platform with these labels."""
    filters = [f"svc.platform=127.0.0.1:{cloud.port}"]
    filters += [f"svc.{k}={v}" for k, v in labels.items()]
    return [Box(e) for e in d.client().api.containers(all=True, filters={"label": filters})]


def live_instances(detail: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {i["id"]: i for i in detail["instances"] if i["status"] == "healthy"}


def test_a_deployment_runs_in_containers_with_limits_and_labels(
        project: Project, dockerd: Dockerd) -> None:
    first = project.deploy()
    done = project.wait(first["deployment"]["version"], ("running", "failed"))
    dep = done["deployment"]
    assert dep["status"] == "running", dep["error"]
    assert [i["role"] for i in done["instances"]] == ["db", "schema", "scheduler", "ssp-1"]
    assert all(i["executor"] == "docker" for i in done["instances"]), done["instances"]
    # the deployed scheduler answers on the host network and is linked to the platform
    admin = project.url_of(done, "scheduler")
    status, body = admin_call(admin, admin_session(admin), "GET", "/cloud/deployment")
    assert status == 200 and body["deployment"]["id"] == dep["id"], body
    # one running container per long-lived instance; the finished schema step is removed
    found = containers(dockerd, project.cloud, deployment=dep["id"])
    live = live_instances(done)
    assert {c.labels["svc.instance"] for c in found} == set(live), \
        [(c.labels, c.status) for c in found]
    for box in found:
        c = dockerd.client().containers.get(box.id)
        inst = live[c.labels["svc.instance"]]
        assert c.status == "running" and inst["pid"] == c.attrs["State"]["Pid"]
        assert c.labels["svc.role"] == inst["role"]
        assert c.labels["svc.project"] == project.slug
        hc = c.attrs["HostConfig"]
        assert hc["NetworkMode"] == "host"
        assert hc["Memory"] == MEMORY_MB * 1024 * 1024 and hc["NanoCpus"] == int(CPUS * 1e9)
    # the containers' output reaches the platform's per-instance logs
    logs = project.cloud.ok("GET", f"{project.base}/deployments/{dep['version']}/logs",
                            project.s, params={"instance": "scheduler", "limit": 50})
    assert logs["lines"] and {ln["role"] for ln in logs["lines"]} == {"scheduler"}


def test_kill_9_mid_redeploy_leaves_no_orphan_container_after_restart(
        project: Project, dockerd: Dockerd) -> None:
    c = project.cloud
    v1 = project.get(1)["deployment"]
    project.env({"FEATURE_X": "on"})
    dep = project.deploy()["deployment"]
    wait_until(lambda: containers(dockerd, c, deployment=dep["id"]), 120,
               "the new deployment's first container")
    before = {x.id for x in containers(dockerd, c)}
    assert len(before) >= 3, "v1's containers and v2's first were not all running"
    c.process.kill9()
    c.http.close()
    c.http = httpx.Client(timeout=30)
    # the daemon owns the containers, yet they do not outlive the platform: its executor's
    # watcher (cloud.dockerwatch) removes them once the kernel signals the platform's death,
    # with no restart of the platform
    wait_until(lambda: not containers(dockerd, c), 60,
               "the containers of the killed platform removed by its watcher")
    c.start()
    # v1 (running when it died) comes back first, then v2 supersedes it
    done = project.wait(dep["version"], ("running", "failed"), timeout=300)
    assert done["deployment"]["status"] == "running", done["deployment"]["error"]
    assert project.get(1)["deployment"]["status"] == "superseded"
    live = set(live_instances(done))

    def converged() -> bool:
        # once the superseded v1 is stopped: exactly v2's live instances have a container,
        # and of v1's labels only the database host's (adopted by v2) is left
        found = containers(dockerd, c)
        return ({x.labels["svc.instance"] for x in found} == live
                and {x.labels["svc.role"] for x in found
                     if x.labels["svc.deployment"] == v1["id"]} <= {"db"})
    try:
        wait_until(converged, 60, "only v2's containers left")
    except AssertionError:
        raise AssertionError([(x.labels, x.status) for x in containers(dockerd, c)]) from None
    db = [i for i in done["instances"] if i["role"] == "db"][0]
    assert db["status"] == "healthy"
    assert all(x.status == "running" for x in containers(dockerd, c))


BOX_SECRET = "box-vault-value-7d1f9c"
BOX_CODE = ("import os, http.server, hashlib; "
            "print('box up', os.environ.get('GREETING'), 'PYTHONPATH' in os.environ, "
            "hashlib.sha256(os.environ.get('BOX_SECRET', '').encode()).hexdigest()[:12], "
            "flush=True); "
            "http.server.test(http.server.SimpleHTTPRequestHandler, "
            "port=int(os.environ['PORT']), bind='127.0.0.1')")
PY_APP = """\
import os
from http.server import BaseHTTPRequestHandler, HTTPServer

class Web(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"py app")

print("py app up", flush=True)
HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Web).serve_forever()
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    r = Repo(tmp_path_factory.mktemp("repo"))
    w = r.work
    (w / "box").mkdir()
    (w / "py").mkdir()
    (w / "project.yml").write_text("apps:\n  box: {path: box}\n  py: {path: py}\n")
    (w / "box" / "project.yml").write_text(
        f"type: container\nimage: {json.dumps(DEFAULT_IMAGE)}\nports: [8000]\n"
        "healthcheck: /\nvolumes: ['/usr:/usr:ro']\n"
        f"args: {json.dumps(['/usr/bin/python3', '-c', BOX_CODE])}\n"
        "deploy: {resources: {memory: 256, vcpus: 1}}\nenv: {vault: [BOX_SECRET]}\n")
    (w / "py" / "py.py").write_text(PY_APP)
    (w / "py" / "project.yml").write_text(
        "type: frontend\ndependsOn: [box]\ndev: {type: python, script: py.py}\n"
        "deploy: {port: 3000}\n")
    r.commit("a container app and a python app")
    return r


def app_boxes(dockerd: Dockerd, project: Project, role: str) -> list[Box]:
    return [b for b in containers(dockerd, project.cloud, role=role) if b.status == "running"]


def test_a_container_app_and_a_python_app_deploy_from_project_yml(
        project: Project, dockerd: Dockerd, repo: Repo) -> None:
    c = project.cloud
    c.ok("PATCH", project.base + "/env", project.s, {"vars": {"GREETING": "ahoy"},
                                                      "app": "box"})
    c.ok("PUT", project.base + "/vault/BOX_SECRET", project.s, {"value": BOX_SECRET})
    before = c.ok("GET", project.base + "/deployments", project.s)["items"][0]
    c.ok("POST", project.base + "/links", project.s, {"url": str(repo.bare)})
    dep = next_deployment(project, before["version"])
    done = project.wait(dep["version"], ("running", "failed"), timeout=240)
    assert done["deployment"]["status"] == "running", done["deployment"]["error"]
    roles = [i["role"] for i in done["instances"]]
    assert roles[-2:] == ["app-box", "app-py"], roles
    box = [i for i in done["instances"] if i["role"] == "app-box"][0]
    # the container app is a container of its own image, labelled, limited, on the host
    # network; its health check answers on the port the platform gave it
    found = app_boxes(dockerd, project, "app-box")
    assert [b.labels["svc.instance"] for b in found] == [box["id"]], found
    ct = dockerd.client().containers.get(found[0].id)
    assert ct.image.tags == [DEFAULT_IMAGE]
    assert ct.labels["svc.deployment"] == dep["id"] and ct.labels["svc.project"] == project.slug
    hc = ct.attrs["HostConfig"]
    assert hc["NetworkMode"] == "host" and hc["Memory"] == 256 * 1024 * 1024
    assert http_status(box["url"] + "/") == 200
    assert http_status(project.url_of(done, "app-py") + "/") == 200
    logs = c.ok("GET", f"{project.base}/deployments/{dep['version']}/logs", project.s,
                params={"instance": "app-box", "q": "box up", "limit": 10})
    # the app's own variables reach it; the host's PYTHONPATH (the platform's code) does not
    # (and the vault secret it asked for, shown by a digest only)
    secret_sha = hashlib.sha256(BOX_SECRET.encode()).hexdigest()[:12]
    assert [ln["text"] for ln in logs["lines"]] == [f"box up ahoy False {secret_sha}"], logs
    everything = c.ok("GET", f"{project.base}/deployments/{dep['version']}/logs", project.s,
                      params={"limit": 500})
    assert BOX_SECRET not in json.dumps(everything) + json.dumps(done) + c.log_text()
    # a redeploy replaces the container: a new one serves, the old one is removed
    c.ok("PATCH", project.base + "/env", project.s, {"vars": {"GREETING": "ahoy-2"},
                                                      "app": "box"})
    again = project.deploy()["deployment"]
    done2 = project.wait(again["version"], ("running", "failed"), timeout=240)
    assert done2["deployment"]["status"] == "running", done2["deployment"]["error"]
    box2 = [i for i in done2["instances"] if i["role"] == "app-box"][0]

    def replaced() -> bool:
        # the superseded deployment's instances stop after the new one runs (all but the
        # database host, which the new one keeps)
        return [b.labels["svc.instance"] for b in app_boxes(dockerd, project, "app-box")] \
            == [box2["id"]] and not [b for b in containers(dockerd, c, deployment=dep["id"])
                                     if b.labels["svc.role"] != "db"]
    try:
        wait_until(replaced, 60, "only the new deployment's containers")
    except AssertionError:
        raise AssertionError([(x.labels, x.status) for x in containers(dockerd, c)]) from None
    assert http_status(box2["url"] + "/") == 200

    # the containers' time is in the usage report (the stopped ones' rows at their stop)
    def machine_seconds() -> Any:
        out = c.ok("GET", "/v1/usage", project.s, params={"project": project.slug})
        ms = [t for t in out["totals"] if t["metric"] == "machine_seconds"][0]
        return ms if ms["measured"] and (ms["quantity"] or 0) > 1 else None
    assert wait_until(machine_seconds, 30, "machine seconds in the usage report")


PY_BROKEN = """\
print("ERROR py app: broken config", flush=True)
raise SystemExit(3)
"""


def test_a_failing_app_fails_its_deployment_and_the_previous_keeps_serving(
        project: Project, dockerd: Dockerd, repo: Repo) -> None:
    """An app whose container exits fails the deployment with the reason and its last log
    lines; none of the failed deployment's containers is left, and the running one serves
    on. (The fix is committed by the next test, with its own apps.)"""
    c = project.cloud
    serving = running_detail(project)
    version = serving["deployment"]["version"]
    urls = [project.url_of(serving, r) + "/" for r in ("app-box", "app-py")]
    (repo.work / "py" / "py.py").write_text(PY_BROKEN)
    repo.commit("break the python app")
    try:
        dep = next_deployment(project, version)
        done = project.wait(dep["version"], ("running", "failed"), timeout=240)
    finally:
        (repo.work / "py" / "py.py").write_text(PY_APP)
    err = done["deployment"]["error"]
    assert done["deployment"]["status"] == "failed" and err["role"] == "app-py", err
    assert "exited" in err["message"], err
    assert any("ERROR py app: broken config" in ln for ln in err["last_lines"]), err
    try:
        wait_until(lambda: not containers(dockerd, c, deployment=dep["id"]), 60,
                   "no container of the failed deployment")
    except AssertionError:
        raise AssertionError([(x.labels, x.status) for x in containers(dockerd, c)]) from None
    assert running_detail(project)["deployment"]["id"] == serving["deployment"]["id"]
    assert [http_status(u) for u in urls] == [200, 200]
    assert {b.labels["svc.deployment"] for b in app_boxes(dockerd, project, "app-box")} == \
        {serving["deployment"]["id"]}


async def test_a_backup_is_taken_and_restored_through_the_platform(
        project: Project, s3: S3Server, dockerd: Dockerd) -> None:
    """The running deployment's containers: rows written to its database host, a backup
    through the platform (the scheduler's container writes it to the object store), rows
    changed, the backup restored through the platform: the rows are back as they were."""
    c, base = project.cloud, project.base + "/backups"
    detail = running_detail(project)
    db = [i for i in detail["instances"] if i["role"] == "db"][0]
    assert db["executor"] == "docker", db
    rows = [{"id": f"k{i:02d}", "n": i} for i in range(12)]
    await deployed_db(project, "DEFINE TABLE keepsake SCHEMALESS; "
                      "INSERT INTO keepsake $rows RETURN NONE", {"rows": rows})
    want = await deployed_db(project, "SELECT * FROM keepsake ORDER BY id")
    assert len(want) == 12
    stored = set(s3.files())
    bid = c.ok("POST", base, project.s, {"name": "in containers"})["backup_id"]

    def finished() -> Any:
        local = c.ok("GET", base, project.s)["backups"]["local"]
        rec = [r for r in local if r.get("backup_id") == bid]
        return rec[0] if rec and rec[0]["status"] in ("done", "failed") else None
    rec = wait_until(finished, 120, "the backup")
    assert rec["status"] == "done", rec
    assert set(s3.files()) - stored, "the backup reached the object store"
    await deployed_db(project, "UPDATE keepsake SET n = -1 WHERE n < 6; "
                      "DELETE keepsake:k07; CREATE keepsake:extra SET n = 99")
    assert await deployed_db(project, "SELECT * FROM keepsake ORDER BY id") != want
    out = c.ok("POST", f"{base}/{bid}/restore", project.s, {"confirm": bid})
    assert out["restore_id"], out
    got = wait_restore(project, base, bid, 180)
    assert got["stage"] == "done", got
    assert await deployed_db(project, "SELECT * FROM keepsake ORDER BY id") == want
    # the deployment still runs in its containers
    after = running_detail(project)
    assert after["deployment"]["id"] == detail["deployment"]["id"]
    assert containers(dockerd, c, role="scheduler")


WEB_CONTAINERFILE = """\
FROM svc-hostroot:1
ARG NOTE
COPY busybox /usr/bin/busybox
RUN ["/usr/bin/busybox", "--install", "-s", "/usr/bin"]
RUN mkdir -p /www && echo "built $NOTE" > /www/index.html
{extra}CMD ["/bin/sh", "-c", "echo web up; exec httpd -f -p 127.0.0.1:$PORT -h /www"]
"""


def busybox() -> Path:
    """A static busybox (Debian's busybox-static, which ops/test installs): the shell and
    HTTP server of an image built on the host-root base, which holds no file."""
    path = Path("/bin/busybox")
    assert path.is_file(), ("the image build tests need Debian's busybox-static "
                            "(apt-get install busybox-static; ops/test installs it as root)")
    return path


def deploy_log(project: Project, version: int, q: str) -> list[str]:
    got = project.cloud.ok("GET", f"{project.base}/deployments/{version}/logs", project.s,
                           params={"instance": "deploy", "q": q, "limit": 500})
    return [ln["text"] for ln in got["lines"]]


def body_of(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return str(r.read().decode())
    except (urllib.error.URLError, OSError):
        return ""


def plant_image(dockerd: Dockerd, tmp: Path, tag: str, labels: dict[str, str]) -> str:
    """An image tagged like a platform build (``FROM`` the host-root base, ``labels``): what
    an earlier deployment, or another platform on the same daemon, left."""
    import_hostroot_image(dockerd.client())
    ctx = tmp / tag.replace(":", "_")
    ctx.mkdir()
    (ctx / "Containerfile").write_text("FROM svc-hostroot:1\n")
    assert build_image(dockerd.client(), ImageBuild("x", str(ctx), "Containerfile", tag,
                                                    labels=labels), lambda _: None)
    return tag


def tags_of(dockerd: Dockerd, repo_name: str) -> set[str]:
    return {t for e in dockerd.client().api.images(name=repo_name)
            for t in e.get("RepoTags") or []}


def test_apps_built_from_a_containerfile_and_a_static_site_deploy(
        project: Project, dockerd: Dockerd, repo: Repo, tmp_path: Path) -> None:
    """A pushed ``project.yml`` with ``deploy.containerfile`` (built without network from the
    local host-root base, build arguments at build time only) and ``deploy.static`` (its
    build command, then served by the platform); once it runs, an old image this platform
    built for the project is removed, another platform's is not; a Containerfile whose
    build needs the network fails its deployment with the build's error while the previous
    one keeps serving. (That the same inputs are not rebuilt: the last test, where the
    running deployment is resumed.)"""
    c = project.cloud
    w = repo.work
    web_repo = f"svc-build-{project.slug}-web"
    stale = plant_image(dockerd, tmp_path, f"{web_repo}:stale", {
        "svc.platform": f"127.0.0.1:{c.port}", "svc.project": project.slug})
    foreign = plant_image(dockerd, tmp_path, f"{web_repo}:foreign", {
        "svc.platform": "127.0.0.1:1", "svc.project": project.slug})
    (w / "web").mkdir()
    (w / "site").mkdir()
    shutil.copy(busybox(), w / "web" / "busybox")
    (w / "web" / "Containerfile").write_text(WEB_CONTAINERFILE.format(extra=""))
    (w / "web" / "project.yml").write_text(
        "type: frontend\ndeploy: {containerfile: Containerfile, context: web, port: 3000, "
        "build_args: {NOTE: from-args}, resources: {memory: 128, vcpus: 1}}\n")
    (w / "site" / "project.yml").write_text(
        "type: frontend\nenv: {GREETING: hi}\ndeploy: {port: 3000, static: {build: 'mkdir -p "
        "out/sub && echo static-$GREETING > out/index.html', dir: out}}\n")
    (w / "project.yml").write_text("apps:\n  box: {path: box}\n  py: {path: py}\n"
                                   "  web: {path: web}\n  site: {path: site}\n")
    before = c.ok("GET", project.base + "/deployments", project.s)["items"]
    repo.commit("an app built from a Containerfile and a static site")
    if not c.ok("GET", project.base + "/links", project.s)["items"]:  # run on its own
        c.ok("POST", project.base + "/links", project.s, {"url": str(repo.bare)})
    after = before[0]["version"] if before else 0

    def newer() -> Any:
        items = c.ok("GET", project.base + "/deployments", project.s)["items"]
        return items[0] if items and items[0]["version"] > after else None
    dep = wait_until(newer, 30, "a deployment for the commit")
    done = project.wait(dep["version"], ("running", "failed"), timeout=240)
    assert done["deployment"]["status"] == "running", done["deployment"]["error"]
    by_role = {i["role"]: i for i in done["instances"]}
    assert by_role["app-site.build"]["status"] == "done", by_role
    # the build ran in the building phase, its steps in the deploy log
    steps = deploy_log(project, dep["version"], "build web |")
    assert any(t.startswith("INFO build web | Step 4/") and ": RUN" in t for t in steps), \
        "\n".join(steps)
    assert deploy_log(project, dep["version"], "app web: image svc-build-"), steps
    web = by_role["app-web"]
    assert wait_until(lambda: body_of(web["url"] + "/"), 30, "the built app") == \
        "built from-args\n"
    ct = dockerd.client().containers.get(app_boxes(dockerd, project, "app-web")[0].id)
    tag = ct.image.tags[0]
    assert tag.startswith(f"svc-build-{project.slug}-web:"), ct.image.tags
    # a build argument is build-time only: not in the running container's environment
    assert not [e for e in ct.attrs["Config"]["Env"] if e.startswith("NOTE=")]
    # old images: this platform's stale one goes once the deployment runs (right after
    # its status is written), the other platform's stays; the running one is recorded
    assert done["deployment"]["images"] == [tag]
    wait_until(lambda: tags_of(dockerd, web_repo) == {tag, foreign}, 30,
               f"only {tag} and {foreign}: {tags_of(dockerd, web_repo)}")
    wait_until(lambda: deploy_log(project, dep["version"], f"removed the old image {stale}"),
               10, "the removal in the deploy log")
    assert body_of(by_role["app-site"]["url"] + "/") == "static-hi\n"
    assert http_status(by_role["app-site"]["url"] + "/sub/") == 404  # no listing
    # a build that needs the network fails the deployment with the build's error; nothing
    # of it starts and the running deployment keeps serving
    (w / "web" / "Containerfile").write_text(WEB_CONTAINERFILE.format(
        extra="RUN wget -q -O /www/x http://deb.debian.org/\n"))
    repo.commit("a build that needs the network")
    bad = next_deployment(project, dep["version"])
    failed = project.wait(bad["version"], ("running", "failed"), timeout=120)
    err = failed["deployment"]["error"]
    assert failed["deployment"]["status"] == "failed" and err["role"] == "app-web", err
    assert "the image build failed" in err["message"] and "wget" in err["message"], err
    assert "without network" in err["message"], err
    assert any("bad address" in ln for ln in err["last_lines"]), err
    assert failed["instances"] == []
    assert project.get(dep["version"])["deployment"]["status"] == "running"
    assert body_of(web["url"] + "/") == "built from-args\n"


def steps_of_builds(dockerd: Dockerd) -> list[Any]:
    """The daemon's build step containers: a classic build's step runs as a container
    without any label of ours."""
    return [x for x in dockerd.client().api.containers(all=True)
            if "svc.platform" not in (x.get("Labels") or {})]


def start_a_long_build(project: Project, dockerd: Dockerd, repo: Repo, web_repo: str,
                       message: str) -> tuple[Any, set[str], dict[str, Any]]:
    """Push a Containerfile whose last step sleeps ten minutes and wait until that step runs;
    returns the web image's tags and the dangling images before it, and the new deployment."""
    tags_before = tags_of(dockerd, web_repo)
    dangling = {i["Id"] for i in dockerd.client().api.images(filters={"dangling": True})}
    (repo.work / "web" / "Containerfile").write_text(WEB_CONTAINERFILE.format(
        extra='RUN ["/usr/bin/busybox", "sleep", "600"]\n'))
    top = project.cloud.ok("GET", project.base + "/deployments", project.s)["items"][0]["version"]
    repo.commit(message)
    slow = next_deployment(project, top)
    wait_until(lambda: steps_of_builds(dockerd)
               and deploy_log(project, slow["version"], "\"sleep\""),
               120, "the build's long step running")
    return tags_before, dangling, slow


def test_a_cancel_while_building_stops_the_build_then_old_images_go(
        project: Project, dockerd: Dockerd, repo: Repo) -> None:
    """A deployment cancelled while its image builds: the build stops on the daemon (its
    step's container removed, no image tagged), the deployment ends ``cancelled`` and the
    running one serves on. Then a new build runs: the image of the deployment before it
    stays (a rollback's), which also survives the resume in the last test."""
    c = project.cloud
    w = repo.work
    client = dockerd.client()
    web_repo = f"svc-build-{project.slug}-web"

    def build_steps() -> list[Any]:
        return steps_of_builds(dockerd)
    assert not build_steps()
    running = c.ok("GET", project.base + "/deployments", project.s,
                   params={"status": "running"})["items"][0]
    tags_before, dangling, slow = start_a_long_build(project, dockerd, repo, web_repo,
                                                     "a build that takes ten minutes")
    out = c.ok("POST", f"{project.base}/deployments/{slow['version']}/cancel", project.s)
    assert out["cancelled"] is False and out["deployment"]["cancel_requested"] is True
    done = project.wait(slow["version"], ("cancelled", "failed", "running"), timeout=60)
    assert done["deployment"]["status"] == "cancelled", done["deployment"]
    assert done["instances"] == []
    # (the deploy log is written in batches: the line may follow the status)
    wait_until(lambda: deploy_log(project, slow["version"], "the build was stopped"), 10,
               "the stop in the deploy log")
    # the daemon ends a build whose client went: its step's container goes, no tag is made
    wait_until(lambda: not build_steps(), 60, "the build's step container removed")
    assert tags_of(dockerd, web_repo) == tags_before
    assert {i["Id"] for i in client.api.images(filters={"dangling": True})} == dangling
    assert project.get(running["version"])["deployment"]["status"] == "running"
    # a new build: it and the image of the deployment before it are kept
    (w / "web" / "Containerfile").write_text(WEB_CONTAINERFILE.format(extra=""))
    (w / "web" / "project.yml").write_text(
        "type: frontend\ndeploy: {containerfile: Containerfile, context: web, port: 3000, "
        "build_args: {NOTE: second}, resources: {memory: 128, vcpus: 1}}\n")
    repo.commit("a second build of the web app")
    again = next_deployment(project, slow["version"])
    done = project.wait(again["version"], ("running", "failed"), timeout=240)
    assert done["deployment"]["status"] == "running", done["deployment"]["error"]
    [new_tag] = done["deployment"]["images"]
    kept = wait_until(lambda: deploy_log(project, again["version"], "images kept: "), 30,
                      "the images kept once it runs")
    previous = tags_before - {f"{web_repo}:foreign"}
    assert len(previous) == 1 and new_tag not in previous, (previous, new_tag)
    assert kept == [f"INFO images kept: {', '.join(sorted(previous | {new_tag}))}"], kept
    assert tags_of(dockerd, web_repo) == tags_before | {new_tag}
    web = [i for i in done["instances"] if i["role"] == "app-web"][0]
    assert wait_until(lambda: body_of(web["url"] + "/"), 30, "the built app") == \
        "built second\n"


def test_kill_9_while_building_stops_the_build_and_resumes_it_after_restart(
        project: Project, dockerd: Dockerd, repo: Repo) -> None:
    """``kill -9`` of the platform while an image builds: the daemon ends the build whose
    client died (its step's container removed, no image tagged, no dangling one), the
    platform's containers go with it (its watcher); on restart the running deployment comes
    back and the interrupted one resumes from its start, building again; cancelled, it
    stops cleanly."""
    c = project.cloud
    w = repo.work
    client = dockerd.client()
    web_repo = f"svc-build-{project.slug}-web"
    assert not steps_of_builds(dockerd)
    detail = running_detail(project)
    running = detail["deployment"]
    old_ids = {i["id"] for i in detail["instances"]}
    tags_before, dangling, slow = start_a_long_build(
        project, dockerd, repo, web_repo, "a build that takes ten minutes, cut by a kill -9")
    c.process.kill9()
    c.http.close()
    c.http = httpx.Client(timeout=30)
    wait_until(lambda: not steps_of_builds(dockerd), 60,
               "the build's step container removed after its client died")
    wait_until(lambda: not containers(dockerd, c), 60,
               "the containers of the killed platform removed by its watcher")
    assert tags_of(dockerd, web_repo) == tags_before
    assert {i["Id"] for i in client.api.images(filters={"dangling": True})} == dangling
    c.start()
    # the deployment that ran comes back first; then the interrupted one builds again
    def back_again() -> Any:
        got = project.get(running["version"])
        if got["deployment"]["status"] == "failed":
            raise AssertionError(got["deployment"]["error"])
        live = {i["role"] for i in got["instances"]
                if i["status"] == "healthy" and i["id"] not in old_ids}
        return got if got["deployment"]["status"] == "running" and "app-web" in live else None
    back = wait_until(back_again, 240, "the running deployment back after the restart")
    wait_until(lambda: project.get(slow["version"])["deployment"]["status"] == "building"
               and steps_of_builds(dockerd), 120, "the interrupted build running again")
    assert deploy_log(project, slow["version"], "resuming it from its first role")
    c.ok("POST", f"{project.base}/deployments/{slow['version']}/cancel", project.s)
    done = project.wait(slow["version"], ("cancelled", "failed", "running"), timeout=60)
    assert done["deployment"]["status"] == "cancelled", done["deployment"]
    wait_until(lambda: not steps_of_builds(dockerd), 60, "the resumed build's step removed")
    assert tags_of(dockerd, web_repo) == tags_before
    assert {i["Id"] for i in client.api.images(filters={"dangling": True})} == dangling
    web = [i for i in back["instances"] if i["role"] == "app-web"
           and i["status"] == "healthy"][0]
    assert wait_until(lambda: body_of(web["url"] + "/"), 30, "the built app") == \
        "built second\n"
    # the next commit builds the fast Containerfile again (the running one's inputs)
    (w / "web" / "Containerfile").write_text(WEB_CONTAINERFILE.format(extra=""))


def test_a_base_image_missing_from_the_daemon_is_refused_before_the_build(
        dockerd: Dockerd, tmp_path: Path) -> None:
    import_hostroot_image(dockerd.client())
    (tmp_path / "Containerfile").write_text(
        "FROM svc-hostroot:1 AS base\nFROM base\nFROM example/not-here:1.0\n")
    spec = ImageBuild("x", str(tmp_path), "Containerfile", "svc-build-t-x:1")
    lines: list[str] = []
    with pytest.raises(BuildFailed, match="base image example/not-here:1.0 is not on the "
                       "Docker daemon, and the platform pulls nothing"):
        build_image(dockerd.client(), spec, lines.append)
    assert lines == []


def test_the_local_executor_runs_container_images_on_a_daemon(dockerd: Dockerd) -> None:
    """`SVC_CLOUD_EXECUTOR=local` with a daemon: a role with an image becomes a container
    (with the platform's labels), any other role a local process."""
    ex = LocalWithContainers(LocalExecutor(),
                             DockerExecutor(DockerSettings(host=dockerd.url), "mixed-test"))
    image = Role("img", "app", ("/usr/bin/sleep", "600"), env={}, image=DEFAULT_IMAGE,
                 volumes=("/usr:/usr:ro",))
    proc = Role("proc", "app", ("sleep", "600"), env={})

    async def run() -> tuple[list[Handle], list[Any], list[Any]]:
        async def record(_: object) -> None:
            return None
        hs = [await ex.start(r, lambda s, t: None, record) for r in (image, proc)]
        assert await ex.no_containers() is None
        assert [await ex.alive(h) for h in hs] == [True, True]
        mine = {"label": "svc.platform=mixed-test"}
        during = dockerd.client().api.containers(all=True, filters=mine)
        for h in hs:
            await ex.stop(h, timeout=1)
        return hs, during, dockerd.client().api.containers(all=True, filters=mine)

    handles, during, after = asyncio.run(run())
    assert [h.executor for h in handles] == ["docker", "local"]
    assert [c["Labels"]["svc.role"] for c in during] == ["img"]
    assert after == []
    none = LocalWithContainers(LocalExecutor(), DockerExecutor(
        DockerSettings(host="unix:///nonexistent/d.sock"), "mixed-test"))
    assert "no Docker daemon answers" in (asyncio.run(none.no_containers()) or "")


def test_stopping_the_platform_stops_every_container(project: Project,
                                                     dockerd: Dockerd) -> None:
    assert containers(dockerd, project.cloud)
    project.cloud.stop()
    # every container was stopped through its instance record; the executor's release
    # (the safety net for a start cut off by the stop) found nothing left to remove
    released = [ln for ln in project.cloud.log_text().splitlines()
                if "no instance record held" in ln]
    assert not released, released
    left = containers(dockerd, project.cloud)
    if left:
        lines = [ln for ln in project.cloud.log_text().splitlines()
                 if any(x.labels.get("svc.instance", "?") in ln
                        or x.labels.get("svc.role", "?") in ln for x in left)]
        pytest.fail(f"left: {[(x.labels, x.status) for x in left]}\n" + "\n".join(lines[-60:]))


def test_the_local_executor_with_a_daemon_runs_a_whole_deployment(
        project: Project, dockerd: Dockerd) -> None:
    """The same platform restarted with ``SVC_CLOUD_EXECUTOR=local`` (the daemon still
    named): the running deployment resumes with the stack and the python and static apps as
    local processes, the container app and the built app as containers on the daemon (the
    built image reused, not rebuilt); stopping the platform leaves no container."""
    c = project.cloud
    c.process.env["SVC_CLOUD_EXECUTOR"] = "local"
    c.start()
    top = c.ok("GET", project.base + "/deployments", project.s,
               params={"limit": 10})["items"]
    # the one running when the platform stopped (resumed: queued again, or on its way)
    dep = next(d for d in top if d["status"] not in ("failed", "superseded", "cancelled"))

    on_daemon = {"app-box", "app-web"}

    def resumed() -> dict[str, Any] | None:
        got = project.get(dep["version"])
        live = {i["role"]: i["executor"] for i in got["instances"] if i["status"] == "healthy"}
        want = {r: "docker" if r in on_daemon else "local" for r in (
            "db", "scheduler", "ssp-1", "app-box", "app-py", "app-web", "app-site")}
        return got if got["deployment"]["status"] == "running" and live == want else None
    try:
        done = wait_until(resumed, 240, "the deployment resumed on the local executor")
    except AssertionError:
        got = project.get(dep["version"])
        role = (got["deployment"].get("error") or {}).get("role")
        # the failed role's own first lines (its error's last_lines are only the tail, and
        # a traceback can fill them: CI once saw a scheduler exit 3 with no cause in them)
        lines = c.ok("GET", f"{project.base}/deployments/{dep['version']}/logs", project.s,
                     params={"limit": 500, **({"instance": role} if role else {})})["lines"]
        raise AssertionError(json.dumps(got)[:3000] + "\n" + "\n".join(
            f"{ln.get('role')} {ln.get('text')}" for ln in lines)[-6000:]) from None
    by_role = {i["role"]: i for i in done["instances"] if i["status"] == "healthy"}
    assert [b.labels["svc.instance"] for b in app_boxes(dockerd, project, "app-box")] == \
        [by_role["app-box"]["id"]]
    assert http_status(by_role["app-box"]["url"] + "/") == 200
    assert wait_until(lambda: body_of(by_role["app-web"]["url"] + "/"), 30,
                      "the built app") == "built second\n"
    assert body_of(by_role["app-site"]["url"] + "/") == "static-hi\n"
    # the image's inputs did not change: resumed with the image built before, and the
    # image of the deployment it superseded is still kept
    assert deploy_log(project, dep["version"], "not rebuilt")
    assert len(tags_of(dockerd, f"svc-build-{project.slug}-web")) == 3  # + the foreign one
    web = [b for b in containers(dockerd, c, role="app-web") if b.status == "running"]
    assert [b.labels["svc.instance"] for b in web] == [by_role["app-web"]["id"]]
    assert dockerd.client().containers.get(web[0].id).image.tags[0].startswith(
        f"svc-build-{project.slug}-web:")
    assert not containers(dockerd, c, role="db")  # the stack runs as local processes
    c.stop()
    assert containers(dockerd, c) == []


def test_no_daemon_is_a_clear_error(tmp_path: Path) -> None:
    ex = DockerExecutor(DockerSettings(host=f"unix://{tmp_path}/none.sock"), "test")
    role = Role("web", "app", ("true",), env={})

    async def record(_: object) -> None:
        raise AssertionError("nothing may be recorded")

    with pytest.raises(ExecutorError, match="no Docker daemon answers at unix://"):
        asyncio.run(ex.start(role, lambda s, t: None, record))


def test_labels_found_by_the_sweep_are_only_this_platforms(dockerd: Dockerd) -> None:
    """Two platforms on one daemon: a sweep removes its own containers, not the other's."""
    client = dockerd.client()
    ours = DockerExecutor(DockerSettings(host=dockerd.url, memory_mb=128), "sweep-a")
    theirs = DockerExecutor(DockerSettings(host=dockerd.url, memory_mb=128), "sweep-b")
    role = Role("sleeper", "app", ("/bin/sh", "-c", "sleep 600"), env={})

    async def run() -> tuple[int, list[Any]]:
        async def record(_: object) -> None:
            return None
        await ours.start(role, lambda s, t: None, record)
        other = await theirs.start(role, lambda s, t: None, record)
        removed = await DockerExecutor(DockerSettings(host=dockerd.url), "sweep-a").sweep()
        left = client.api.containers(all=True, filters={"label": "svc.role=sleeper"})
        await theirs.stop(other, timeout=1)
        return removed, left

    t = time.monotonic()
    removed, left = asyncio.run(run())
    assert removed == 1
    assert [c["Labels"]["svc.platform"] for c in left] == ["sweep-b"], time.monotonic() - t


async def test_a_container_app_runs_under_the_supervisor_through_the_executor(
        dockerd: Dockerd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`svc dev`'s supervisor runs a `type: container` app's image (here the host-root image
    with the host's /usr as its one volume, serving HTTP with the system Python), health
    checks it on its port, collects its output, and removes the container at stop."""
    client = dockerd.client()
    import_hostroot_image(client)
    monkeypatch.setenv("DOCKER_HOST", dockerd.url)
    port = free_port()
    (tmp_path / "web").mkdir()
    web = LoadedApp("web", tmp_path / "web" / "project.yml", AppConfig.model_validate({
        "type": "container", "image": DEFAULT_IMAGE, "ports": [port], "healthcheck": "/",
        "volumes": ["/usr:/usr:ro"],
        "args": ["/usr/bin/python3", "-c", "import os, http.server; "
                 "print('greeting', os.environ['GREETING'], flush=True); "
                 f"http.server.test(http.server.SimpleHTTPRequestHandler, port={port}, "
                 "bind='127.0.0.1')"]}))
    sup = Supervisor([web], workdir=tmp_path, env={"web": {"GREETING": "hello-from-env"}},
                     base_env={**base_env(), "DOCKER_HOST": dockerd.url}, grace=10)
    await sup.start()
    try:
        mine = {"label": ["svc.platform=svc-dev", "svc.role=web"]}
        running = client.api.containers(filters=mine)
        assert len(running) == 1 and running[0]["HostConfig"]["NetworkMode"] == "host"
        assert http_status(f"http://127.0.0.1:{port}/") == 200
        # the app's output reaches the supervisor through docker's log relay, which may
        # lag the health check: ready does not mean its first line has been read yet
        async def greeted() -> bool:
            lines, _ = sup.logs("web", limit=100, text="greeting hello-from-env")
            return bool(lines)

        await wait_for(greeted, timeout=30.0, what="the app's own output line in its logs")
    finally:
        await sup.stop()
    assert client.api.containers(all=True, filters=mine) == []


def test_a_remapped_port_and_a_missing_image_are_refused(
        dockerd: Dockerd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", dockerd.url)
    (tmp_path / "a").mkdir()
    remap = LoadedApp("a", tmp_path / "a" / "project.yml", AppConfig.model_validate(
        {"type": "container", "image": DEFAULT_IMAGE, "ports": ["8080:80"]}))
    with pytest.raises(AppFailed, match="cannot be remapped"):
        Supervisor([remap], workdir=tmp_path)
    ex = DockerExecutor(DockerSettings(host=dockerd.url), "test")
    role = Role("b", "app", (), env={}, image="no-such-image:1")

    async def record(_: object) -> None:
        raise AssertionError("nothing may be recorded")

    with pytest.raises(ExecutorError, match="not on the daemon .nothing is pulled"):
        asyncio.run(ex.start(role, lambda s, t: None, record))


def test_a_killed_container_app_runner_leaves_no_container(dockerd: Dockerd,
                                                           tmp_path: Path) -> None:
    """`svc dev` runs a container app as `python -m cloud.containerapp`; killed with
    `kill -9` (no chance to stop its container), its watcher removes the container."""
    import_hostroot_image(dockerd.client())
    marker = f"killed-runner-{time.monotonic_ns()}"
    argv = container_argv("killme", DEFAULT_IMAGE, ["/usr/bin/sleep", "600"],
                          ["/usr:/usr:ro"], None, 128, None)
    proc = subprocess.Popen(argv, env={**base_env(), "DOCKER_HOST": dockerd.url,
                                       "SVC_APPS_RUN": marker},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    mine = {"label": [f"svc.run={marker}"]}
    try:
        wait_until(lambda: dockerd.client().api.containers(filters=mine), 60,
                   "the app's container running")
    finally:
        proc.kill()
        proc.wait(10)
    wait_until(lambda: not dockerd.client().api.containers(all=True, filters=mine), 60,
               "the container removed after its runner was killed")
