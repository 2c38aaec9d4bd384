"""How long the platform takes to bring a project's stack up, next to the same stack started
directly by ``ops/run``.

    .venv/bin/python loadtests/bench_cloud_deploy.py [--rounds 3]

What runs (all on loopback): a database host (``--memory``) for the platform's own state,
one ``svc-cloud`` per executor (``--executors local,docker``: the local executor's processes,
and the Docker executor's containers on a private ``dockerd``, tests/support/dockerd.py).
Rows, each ``--rounds`` times, alternating so a noisy machine hits all of them alike:

* ``ops/run`` (baseline): ``python -m stack --memory`` (database host, schema, scheduler, one
  SSP) from start until it prints ``service is up``;
* first deploy: ``POST /deployments`` until the deployment is ``running`` (a database host of
  its own, schema, scheduler, one SSP; a fresh project each round);
* redeploy: an env change and ``POST /deployments`` until ``running`` (the database host kept;
  schema, scheduler and SSP new, beside the old ones; the old ones stopped after);
* restart: ``POST /restart`` until ``running``;
* push (two apps): a local bare repository is linked (its first commit, without
  ``project.yml``, deployed untimed), then a commit adding ``project.yml`` with two apps (a
  python HTTP server and a shell command, both with readiness checks) is pushed: from the push
  until the deployment with the apps is ``running`` (the link is polled every 0.3 s);
* restart (with apps): ``POST /restart`` of that deployment until ``running``;
* push (built image, static site), Docker executor only: the same link and push, of an app
  built from a Containerfile (busybox on the host-root image, no network; a file of the
  round's copied before the RUN steps, so each round runs them) and a static site with a
  build command: from the push until ``running`` (the build is in the timed span);
* restart (built image, static site): ``POST /restart`` of that deployment (the image is
  not rebuilt) until ``running``.

Prints a table: median and max seconds per executor, each median against the baseline, and
the Docker column against the local one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support import lifeline
from tests.support.cloud_stack import Cloud, running_cloud  # noqa: E402
from tests.support.procs import base_env, free_port, start_db_host  # noqa: E402


def ops_run_once(tmp: Path) -> float:
    ports = {k: free_port() for k in ("db", "sched", "admin", "ssp")}
    argv = [sys.executable, "-m", "stack", "--memory", "--db-bind", f"127.0.0.1:{ports['db']}",
            "--scheduler-bind", f"127.0.0.1:{ports['sched']}",
            "--admin-bind", f"127.0.0.1:{ports['admin']}",
            "--ssp-bind", f"127.0.0.1:{ports['ssp']}"]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=base_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True,
                            cwd=str(Path(__file__).resolve().parent.parent))
    lifeline.adopt(proc.pid)  # dies with this run, killed or not
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "service is up" in line:
                return time.monotonic() - t0
        raise RuntimeError("ops/run exited before it was up")
    finally:
        proc.terminate()
        proc.wait(60)


def wait_running(c: Cloud, s: str, slug: str, dep: str) -> None:
    while True:
        d = c.ok("GET", f"/v1/projects/{slug}/deployments/{dep}", s)["deployment"]
        if d["status"] == "running":
            return
        if d["status"] in ("failed", "cancelled"):
            raise RuntimeError(f"deployment {dep} {d['status']}: {d['error']}")
        time.sleep(0.1)


def deploy_time(c: Cloud, s: str, slug: str, route: str) -> float:
    """Seconds from the request on ``route`` until its deployment runs."""
    t0 = time.monotonic()
    dep = c.ok("POST", f"/v1/projects/{slug}{route}", s, {})["deployment"]["id"]
    wait_running(c, s, slug, dep)
    return time.monotonic() - t0


WEB = ("import os\nfrom http.server import BaseHTTPRequestHandler, HTTPServer\n"
       "class H(BaseHTTPRequestHandler):\n"
       "    def do_GET(self):\n        self.send_response(200)\n        self.end_headers()\n"
       "HTTPServer(('127.0.0.1', int(os.environ['PORT'])), H).serve_forever()\n")
GIT = ["git", "-c", "user.email=b@example.test", "-c", "user.name=b"]


def commit(work: Path, bare: Path, files: dict[str, str] | dict[str, str | bytes]) -> None:
    for name, text in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):  # a binary: an executable (busybox)
            (work / name).write_bytes(text)
            (work / name).chmod(0o755)
        else:
            (work / name).write_text(text)
    subprocess.run([*GIT, "-C", str(work), "add", "."], check=True)
    subprocess.run([*GIT, "-C", str(work), "commit", "-qm", "bench"], check=True)
    subprocess.run(["git", "-C", str(work), "push", "-q", str(bare), "main"], check=True)


def newest(c: Cloud, s: str, slug: str) -> dict[str, object]:
    return dict(c.ok("GET", f"/v1/projects/{slug}/deployments", s)["items"][0])


TWO_APPS = {
    "project.yml": "apps:\n  web: {path: web}\n  sh: {path: sh}\n",
    "web/web.py": WEB,
    "web/project.yml": "type: frontend\ndependsOn: [sh]\n"
                       "dev: {type: python, script: web.py}\n",
    "sh/project.yml": "type: container\nimage: bench/sh:1\nports: [8000]\n"
                      "healthcheck: /\ndev: \"exec python3 -m http.server $PORT "
                      "--bind 127.0.0.1\"\n"}
#: an app built from a Containerfile on the executor's host-root image (busybox's shell and
#: HTTP server, no network), the round's file copied before the RUN steps so every round
#: runs them (the daemon's layer cache would skip them otherwise), and a static site
CONTAINERFILE = """\
FROM svc-hostroot:1
COPY busybox /usr/bin/busybox
COPY round.txt /round.txt
RUN ["/usr/bin/busybox", "--install", "-s", "/usr/bin"]
RUN mkdir -p /www && cp /round.txt /www/index.html
CMD ["/bin/sh", "-c", "exec httpd -f -p 127.0.0.1:$PORT -h /www"]
"""


def built_apps(round_id: str) -> dict[str, str | bytes]:
    return {
        "project.yml": "apps:\n  img: {path: img}\n  site: {path: site}\n",
        "img/Containerfile": CONTAINERFILE,
        "img/busybox": Path("/bin/busybox").read_bytes(),
        "img/round.txt": round_id + "\n",
        "img/project.yml": "type: frontend\ndeploy: {containerfile: Containerfile, "
                           "context: img, port: 3000}\n",
        "site/project.yml": "type: frontend\ndeploy: {port: 3000, static: {build: 'mkdir -p "
                            "out && echo site > out/index.html', dir: out}}\n"}


def push_time(c: Cloud, s: str, slug: str, tmp: Path,
              files: dict[str, str | bytes]) -> float:
    """Link a repository, then time a push of ``files`` until their deployment runs."""
    bare, work = tmp / f"{slug}.git", tmp / f"{slug}-work"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    commit(work, bare, {"README": "bench\n"})
    before = int(str(newest(c, s, slug)["version"]))
    c.ok("POST", f"/v1/projects/{slug}/links", s, {"url": str(bare)})
    while int(str(newest(c, s, slug)["version"])) == before:
        time.sleep(0.1)
    linked = newest(c, s, slug)
    wait_running(c, s, slug, str(linked["id"]))
    t0 = time.monotonic()
    commit(work, bare, files)
    while int(str(newest(c, s, slug)["version"])) == int(str(linked["version"])):
        time.sleep(0.05)
    wait_running(c, s, slug, str(newest(c, s, slug)["id"]))
    return time.monotonic() - t0
ROWS = ("first deploy", "redeploy (env change)", "restart")
# the apps rows run on the local executor only (a container app needs its image on the daemon)
APP_ROWS = ("push (two apps)", "restart (with apps)")
# the built-image rows on the Docker executor only (building needs the daemon)
BUILD_ROWS = ("push (built image, static site)", "restart (built image, static site)")


def platform_round(c: Cloud, s: str, slug: str, rows: dict[str, list[float]],
                   tmp: Path | None, executor: str) -> None:
    c.ok("POST", "/v1/projects", s, {"slug": slug})
    base = f"/v1/projects/{slug}"
    c.ok("PATCH", base + "/env", s, {"vars": {"SVC_ADMIN_PASSWORD": "bench-pw"}})
    rows["first deploy"].append(deploy_time(c, s, slug, "/deployments"))
    c.ok("PATCH", base + "/env", s, {"vars": {"ROUND": str(time.time())}})
    rows["redeploy (env change)"].append(deploy_time(c, s, slug, "/deployments"))
    rows["restart"].append(deploy_time(c, s, slug, "/restart"))
    if tmp is not None and executor == "local":
        rows["push (two apps)"].append(push_time(c, s, slug, tmp, dict(TWO_APPS)))
        rows["restart (with apps)"].append(deploy_time(c, s, slug, "/restart"))
    if tmp is not None and executor == "docker":
        rows["push (built image, static site)"].append(
            push_time(c, s, slug, tmp, built_apps(slug)))
        rows["restart (built image, static site)"].append(deploy_time(c, s, slug, "/restart"))
    # each round's stack keeps running until the platform stops (there is no scale-to-zero
    # yet): later rounds run beside earlier stacks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--executors", default="local,docker",
                    help="comma-separated: local, docker (a private dockerd is started)")
    a = ap.parse_args()
    executors = [e.strip() for e in a.executors.split(",") if e.strip()]
    baseline_rows: list[float] = []
    rows: dict[str, dict[str, list[float]]] = {e: {r: [] for r in ROWS + APP_ROWS + BUILD_ROWS}
                                              for e in executors}
    with tempfile.TemporaryDirectory() as d, contextlib.ExitStack() as stack:
        tmp = Path(d)
        host = start_db_host(tmp)
        stack.callback(host.process.stop)
        clouds: dict[str, Cloud] = {}
        for e in executors:
            extra = {}
            if e == "docker":
                from tests.support.dockerd import start_dockerd

                dockerd = start_dockerd()
                stack.callback(dockerd.stop)
                extra = {"SVC_CLOUD_DOCKER_HOST": dockerd.url}
            clouds[e] = stack.enter_context(running_cloud(
                host, tmp, SVC_CLOUD_RUN_DIR=str(tmp / f"run-{e}"), SVC_CLOUD_EXECUTOR=e,
                SVC_CLOUD_REPO_POLL_SECS="0.3", **extra))
        sessions = {e: c.user("bench")[1] for e, c in clouds.items()}
        for r in range(a.rounds):
            # alternating, so a noisy machine hits every column alike
            baseline_rows.append(ops_run_once(tmp))
            for e, c in clouds.items():
                slug = f"bench-{e}-{r}-{os.getpid() % 10000}"
                try:
                    platform_round(c, sessions[e], slug, rows[e], tmp, e)
                except RuntimeError:
                    print(f"executor {e}, round {r}: a deployment failed; its logs:")
                    deps = c.ok("GET", f"/v1/projects/{slug}/deployments", sessions[e])
                    logs = c.ok("GET", f"/v1/projects/{slug}/deployments/"
                                f"{deps['items'][0]['id']}/logs", sessions[e],
                                params={"limit": 200})
                    for line in logs["lines"]:
                        print(f"  {line['role']}: {line['text'][:300]}")
                    raise
    load = os.getloadavg()
    baseline = statistics.median(baseline_rows)
    print(f"\nrounds: {a.rounds}; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n")
    head = "| to healthy | " + " | ".join(f"{e} median s | {e} max s | {e} vs ops/run"
                                         for e in executors)
    if {"local", "docker"} <= set(executors):
        head += " | docker vs local"
    print(head + " |")
    print("|---" * (head.count("|")) + "|")
    ncells = head.count("|")
    base_cells = [f"{baseline:.1f}", f"{max(baseline_rows):.1f}", "1.00x"]
    print("| ops/run (baseline) | "
          + " | ".join(base_cells + [""] * (ncells - 1 - len(base_cells))) + " |")
    for name in ROWS + APP_ROWS + BUILD_ROWS:
        cells = []
        for e in executors:
            vals = rows[e][name]
            if not vals:
                cells.append(" | | ")
                continue
            med = statistics.median(vals)
            cells.append(f"{med:.1f} | {max(vals):.1f} | {med / baseline:.2f}x")
        if "docker vs local" in head and name in ROWS:
            ratio = (statistics.median(rows["docker"][name])
                     / statistics.median(rows["local"][name]))
            cells.append(f"{ratio:.2f}x")
        elif "docker vs local" in head:
            cells.append("")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
