"""The reconcile worker: the only caller of an executor (``cloud.executor``). It runs in the
service's main process beside ``cloud.worker`` (one per service, never per gunicorn worker).

Each pass: repo commits in state ``new`` become deployments (trigger ``repo_link``); the
oldest queued deployment of each project without one in flight is executed; the instances
of running deployments are checked (an exited one is marked, its machine time accounted,
and relaunched after a back-off: ``RELAUNCH_*``); machine-seconds of live instances are
written every ``ACCOUNT_SECS``.

Executing a deployment: ``building`` (the project's environment resolved, or for a
rollback the value versions the deployment rolled back to recorded; with a repo
commit, the commit fetched into the deployment's directory and its ``project.yml``
validated: a bad one fails the deployment before anything starts, with the validator's
messages), then ``deploying``: the roles one at a time (database host unless an external
URL is given or the previous deployment's host is kept, ``svc schema apply``, scheduler,
SSPs, then the ``project.yml`` apps of the cloud scope in ``dependsOn`` order:
``cloud.approles``), each started and waited on until healthy. The first failure (or a cancel request,
checked before each role) stops the new instances and fails (cancels) the deployment with
the reason and the role's last log lines; the previous deployment was never touched and
keeps serving. When every role is healthy, one transaction marks the new deployment
``running`` and the previous one ``superseded``; then the previous instances stop.

A new stack comes up beside the old one on its own ports (the old one serves until the new
is healthy). The database host is kept (adopted by the new deployment) when neither the
database spec changed nor the restart asked for it (``surreal``): its data lives in it.

Crash safety: an instance row (with its process group) is written before the instance counts
as started. On start the worker kills every group recorded as live (the ``ipc.lifeline``
SIGTERM has normally stopped them when the service died), marks them stopped, and puts the
deployments that were in flight or running back in the queue (resumed from their first
role; after ``MAX_ATTEMPTS`` starts an in-flight one fails instead). No process outlives
the service, and no deployment is left half-way.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import os
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from apps import sweep
from cloud.approles import SETTLE_SECS, AppPlanError, describe, needs_containers, plan_app_roles
from cloud.backupfwd import seal_admin_password
from cloud.deployments import IN_FLIGHT, Deployments, level_of, link_hash
from cloud.executor import (
    Executor,
    ExecutorError,
    Handle,
    LocalExecutor,
    Role,
    free_port,
    reserve_port,
)
from cloud.imagebuild import BuildFailed, ImageBuild
from cloud.secret import Secret
from cloud.store import Store, new_id, now, rid, row_id
from cloud.usage import hour_of
from dbclient.tasks import cancel_and_wait

log = logging.getLogger("cloud.reconcile")

__all__ = ["LogWriter", "Reconciler"]

LINES_PER_INSTANCE = 1000
TAIL_LINES = 20
MAX_ATTEMPTS = 3
ACCOUNT_SECS = 30.0
#: an instance of a running deployment that exits is relaunched after 1, 2, 4 ... seconds;
#: after RELAUNCH_MAX relaunches within RELAUNCH_WINDOW seconds it is left down and the
#: deployment is marked degraded (its status stays running: the rest still serves);
#: the first back-off is ``SVC_CLOUD_RELAUNCH_BACKOFF_SECS``
RELAUNCH_MAX = 3
RELAUNCH_WINDOW = 300.0
RELAUNCH_BACKOFF = 1.0
#: how often a running image build looks whether its deployment's cancel was requested
CANCEL_POLL_SECS = 0.5
#: environment of the platform's own process that a deployed stack may inherit
_INHERIT = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "PYTHONPATH")
_CODE_ROOT = str(Path(__file__).resolve().parent.parent)


class LogWriter:
    """Lines of instances and deploy logs, written in batches into ``log_line``; each
    instance keeps its newest ``LINES_PER_INSTANCE`` (older ones deleted, counted as
    ``lines_dropped`` on the instance, which makes a logs answer ``truncated``)."""

    def __init__(self, store: Store, per_instance: int = LINES_PER_INSTANCE) -> None:
        self.store = store
        self.per_instance = per_instance
        self._buf: list[dict[str, Any]] = []
        self._seqs: dict[str, collections.deque[int]] = {}
        self._cut: dict[str, int] = {}
        self._dropped: collections.Counter[str] = collections.Counter()
        self.tails: dict[str, collections.deque[str]] = {}
        self._last = 0

    def _next_seq(self) -> int:
        # microseconds since the epoch, strictly increasing: ordered across restarts too
        self._last = max(time.time_ns() // 1000, self._last + 1)
        return self._last

    def add(self, deployment: str, instance: str, role: str, stream: str, text: str) -> None:
        text = text[:4000]
        seq = self._next_seq()
        self._buf.append({"id": rid("log_line", f"{instance}.{seq}"), "deployment": deployment,
                          "instance": instance, "role": role, "stream": stream,
                          "level": level_of(text, stream), "text": text,
                          "at": datetime.fromtimestamp(seq / 1e6).astimezone(), "seq": seq})
        tail = self.tails.setdefault(instance, collections.deque(maxlen=TAIL_LINES))
        tail.append(text)
        seqs = self._seqs.setdefault(instance, collections.deque())
        seqs.append(seq)
        if len(seqs) > self.per_instance:
            self._cut[instance] = seqs.popleft()
            self._dropped[instance] += 1

    def sink(self, deployment: str, instance: str, role: str) -> Any:
        return lambda stream, text: self.add(deployment, instance, role, stream, text)

    async def flush(self) -> None:
        rows, self._buf = self._buf, []
        cuts, self._cut = self._cut, {}
        dropped, self._dropped = self._dropped, collections.Counter()
        stmts: list[tuple[str, dict[str, Any]]] = []
        if rows:
            stmts.append(("INSERT INTO log_line $rows RETURN NONE", {"rows": rows}))
        for ins, seq in cuts.items():
            stmts.append(("DELETE log_line WHERE instance = $i AND seq <= $s RETURN NONE",
                          {"i": ins, "s": seq}))
            if ins.startswith("ins_"):
                stmts.append(("UPDATE $id SET lines_dropped = (lines_dropped ?? 0) + $n "
                              "RETURN NONE", {"id": rid("instance", ins), "n": dropped[ins]}))
        if not stmts:
            return
        try:
            await self.store.tx(stmts)
        except Exception:  # noqa: BLE001 - kept for the next flush
            log.exception("log lines not written; retried at the next flush")
            self._buf = rows + self._buf
            for k, v in cuts.items():
                self._cut[k] = max(v, self._cut.get(k, 0))
            self._dropped.update(dropped)

    async def run(self, every: float = 0.3) -> None:
        while True:
            await asyncio.sleep(every)
            await self.flush()


class Failed(Exception):
    def __init__(self, message: str, role: str | None = None, tail: list[str] | None = None,
                 cancelled: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.role = role
        self.tail = tail or []
        self.cancelled = cancelled


def _consecutive_ports(n: int) -> int:
    """A first port with ``n`` free ports from it (SSPs bind consecutive ports)."""
    for _ in range(50):
        base = free_port()
        if base + n >= 65536:
            continue
        ok = True
        for p in range(base + 1, base + n):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok and all(reserve_port(p) for p in range(base + 1, base + n)):
            return base
    raise Failed(f"no {n} consecutive free loopback ports")


def plan_roles(spec: dict[str, Any], env: dict[str, str], workdir: Path,
               adopted_db: str | None) -> list[Role]:
    """The stack's roles in start order, built by the same code as ``ops/run``
    (``stack.__main__.build_children``) on free loopback ports."""
    from stack.__main__ import build_children
    from stack.config import StackConfig

    ssps = int(spec.get("ssps") or 1)
    db_url = spec.get("database_url") or (f"ws://{adopted_db}/rpc" if adopted_db else None)
    cfg = StackConfig(
        db_url=db_url, db_bind=f"127.0.0.1:{free_port()}", data_dir=None,
        ssp_bind=f"127.0.0.1:{_consecutive_ports(ssps)}", start_ssp=True,
        db_user=env.get("SVC_DB_USER") or "root", db_pass=env.get("SVC_DB_PASS") or "root",
        ssps=ssps, scheduler_bind=f"127.0.0.1:{free_port()}",
        admin_bind=f"127.0.0.1:{free_port()}",
        admin_password=env.get("SVC_ADMIN_PASSWORD") or secrets.token_urlsafe(18))
    base = dict(env)
    if db_url:
        base["SVC_DB_URL"] = db_url  # ops/run reads it from the environment too
    if adopted_db and not spec.get("database_url"):
        base["SVC_INGEST_TRANSPORT"] = "changefeed"  # the embedded host has no http::*
    children = build_children(cfg, base, workdir)
    roles = []
    ssp_binds = iter(cfg.ssp_binds())
    for c in children:
        if c.name == "svc-db":
            name, kind, url = "db", "db", f"http://{cfg.db_bind}"
        elif c.name.startswith("svc schema"):
            name, kind, url = "schema", "schema", None
        elif c.name == "svc-scheduler":
            name, kind, url = "scheduler", "scheduler", f"http://{cfg.admin_bind}"
        elif c.name.startswith("svc-ssp"):
            name, kind, url = f"ssp-{c.name.split()[-1]}", "ssp", f"http://{next(ssp_binds)}"
        else:
            continue
        roles.append(Role(name=name, kind=kind, argv=tuple(c.argv), env=c.env,
                          health_url=c.health_url if url else None, oneshot=c.oneshot,
                          ready=c.ready, cwd=str(workdir), url=url))
    if adopted_db:
        roles.insert(0, Role(name="db", kind="db", argv=(), env={}, url=f"http://{adopted_db}"))
    return roles


class Reconciler:
    def __init__(self, store: Store, deployments: Deployments, values: Any, usage: Any,
                 cloud_url: str, run_dir: Path, executor: Executor | None = None,
                 tick: float = 0.5, relaunch_backoff: float = RELAUNCH_BACKOFF) -> None:
        self.store = store
        self.deployments = deployments
        self.values = values
        self.usage = usage
        self.cloud_url = cloud_url
        self.run_dir = run_dir
        self.executor: Executor = executor or LocalExecutor()
        self.tick = tick
        self.relaunch_backoff = relaunch_backoff
        self.logs = LogWriter(store)
        #: instance id -> (handle, role): what this process started and has not stopped
        self.live: dict[str, tuple[Handle, Role]] = {}
        self._last_account = 0.0
        #: (deployment, role) -> monotonic times of its relaunches
        self._relaunched: dict[tuple[str, str], list[float]] = {}
        #: relaunches waiting for their back-off: (due, deployment, role)
        self._due: list[tuple[float, str, Role]] = []
        self._relaunching: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ helpers
    def _deploy_log(self, dep: str, text: str, level: str = "info") -> None:
        self.logs.add(dep, f"deploy.{dep}", "deploy", "stdout" if level != "error" else
                      "stderr", f"{level.upper()} {text}")
        log.info("%s: %s", dep, text)

    async def _set(self, dep: str, **fields: Any) -> None:
        await self.store.tx([("UPDATE $id MERGE $f RETURN NONE",
                              {"id": rid("deployment", dep), "f": fields})])

    async def _account(self, ins: dict[str, Any], until: datetime) -> list[tuple[str, Any]]:
        start = ins.get("accounted_until") or ins.get("started_at")
        if start is None:
            return []
        secs = max(0.0, (until - start).total_seconds())
        iid = row_id(ins)
        row = {"id": rid("usage_event", f"ms_{iid}_{int(start.timestamp() * 1000)}"),
               "tenant": ins["tenant"], "project": ins["project"], "metric": "machine_seconds",
               "quantity": secs, "measured": True, "at": until, "hour": hour_of(until),
               "source": "executor", "instance": iid, "role": ins.get("role")}
        return [("INSERT IGNORE INTO usage_event $row RETURN NONE", {"row": row}),
                ("UPDATE $id SET accounted_until = $u RETURN NONE",
                 {"id": rid("instance", iid), "u": until})]

    async def _stop_instance(self, iid: str, status: str = "stopped") -> None:
        got = self.live.pop(iid, None)
        code = None
        if got is not None and got[0].pid > 0:
            code = await self.executor.stop(got[0])
        row = await self.store.get("instance", iid)
        if row is None:
            return
        at = now()
        await self.store.tx([*await self._account(row, at),
                             ("UPDATE $id SET status = $s, stopped_at = $at, exit_code = $c "
                              "RETURN NONE", {"id": rid("instance", iid), "s": status,
                                              "at": at, "c": code})])

    # ------------------------------------------------------------------ recovery
    async def recover(self) -> None:
        """After a start: reap what a dead predecessor left, requeue its deployments."""
        reaped = await self.executor.sweep()
        rows = await self.store.one("SELECT * FROM instance WHERE status IN $s",
                                    {"s": ["starting", "healthy"]}) or []
        for r in rows:
            h = Handle(r.get("executor") or "local", int(r.get("pid") or 0),
                       int(r.get("pgid") or 0), r.get("ref") or "")
            if h.pgid > 0 and await self.executor.reap(h):
                reaped += 1
            at = now()
            await self.store.tx([*await self._account(dict(r), at),
                                 ("UPDATE $id SET status = 'stopped', stopped_at = $at, "
                                  "error = 'the platform restarted' RETURN NONE",
                                  {"id": r["id"], "at": at})])
        deps = await self.store.one("SELECT * FROM deployment WHERE status IN $s",
                                    {"s": [*IN_FLIGHT, "running"]}) or []
        # apps' processes that left their groups, found by their run id (the deployment's)
        for did in {str(r.get("deployment")) for r in rows} | {row_id(d) for d in deps}:
            if await asyncio.to_thread(sweep, did):
                log.warning("killed processes of deployment %s left outside their groups",
                            did)
        for d in deps:
            did = row_id(d)
            if d["status"] in IN_FLIGHT and int(d.get("attempts") or 0) >= MAX_ATTEMPTS:
                self._deploy_log(did, f"the platform restarted during attempt "
                                 f"{d.get('attempts')}: failed", "error")
                await self._set(did, status="failed", finished_at=now(),
                                error={"message": "interrupted by platform restarts "
                                       f"{MAX_ATTEMPTS} times", "role": None, "last_lines": []})
                continue
            self._deploy_log(did, f"the platform restarted while this deployment was "
                             f"{d['status']}: resuming it from its first role")
            await self._set(did, status="queued", resumed=True,
                            progress={"done": 0, "total": 0, "step": "resuming"})
        if rows or deps:
            log.warning("recovered after a restart: %d instance(s) reaped (%d still alive), "
                        "%d deployment(s) back in the queue", len(rows), reaped, len(deps))

    # ------------------------------------------------------------------ the loop
    async def run(self) -> None:
        await self.recover()
        flusher = asyncio.get_running_loop().create_task(self.logs.run())
        try:
            while True:
                try:
                    await self.pass_once()
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001 - logged; the next pass tries again
                    log.exception("reconcile pass failed; retried")
                await asyncio.sleep(self.tick)
        finally:
            for task in list(self._relaunching):
                await cancel_and_wait(task)
            # every instance stops, all at once, to the end: the service's stop cancels this
            # task again while it waits, and a container (unlike a process with its
            # lifeline) would outlive the service
            stops = asyncio.gather(*(self._stop_instance(i) for i in list(self.live)),
                                   return_exceptions=True)
            while not stops.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(stops)
            # then whatever the executor started without a record (see Executor.release)
            released = asyncio.ensure_future(self.executor.release())
            while not released.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(released)
            if not released.cancelled() and released.exception() is not None:
                log.warning("releasing the executor at the stop failed: %s",
                            type(released.exception()).__name__)
            await cancel_and_wait(flusher)
            await self.logs.flush()

    async def pass_once(self) -> None:
        await self.admit_commits()
        rows = await self.store.one(
            "SELECT * FROM deployment WHERE status = 'queued' ORDER BY version", read=True) or []
        seen: set[str] = set()
        for d in rows:
            if d["project"] in seen:
                continue
            seen.add(d["project"])
            busy = await self.store.one(
                "SELECT VALUE id FROM deployment WHERE project = $p AND status IN $s",
                {"p": d["project"], "s": list(IN_FLIGHT)}, read=True)
            if busy:
                continue
            await self.execute(dict(d))
        await self.watch()

    async def admit_commits(self) -> None:
        rows = await self.store.one("SELECT * FROM repo_commit WHERE status = 'new'",
                                    read=True) or []
        for c in rows:
            project = await self.store.get("project", c["project"])
            if project is None or project.get("deleted_at") is not None:
                await self.store.run("UPDATE $id SET status = 'skipped' RETURN NONE",
                                     {"id": c["id"]})
                continue
            project = {**project, "id": row_id(project)}
            spec = await self.deployments.base_spec(project)
            spec["commit"] = c["sha"]
            spec["link"] = c["link"]
            out = await self.deployments.admit(
                project, spec, "repo_link", f"repo link {c['link']}", [
                    ("UPDATE $id SET status = 'deploying' RETURN NONE", {"id": c["id"]})])
            await self.store.run("UPDATE $id SET status = 'deployed', deployment = $d "
                                 "RETURN NONE", {"id": c["id"], "d": out["deployment"]["id"]})

    async def watch(self) -> None:
        for iid, (h, role) in list(self.live.items()):
            if role.oneshot or h.pid <= 0:
                continue
            if await self.executor.alive(h):
                continue
            row = await self.store.get("instance", iid)
            if row is None or row.get("status") != "healthy":
                continue  # still coming up: the deployment's own wait sees an exit
            dep = str(row["deployment"])
            self._deploy_log(dep, f"instance {role.name} exited unexpectedly", "error")
            await self._stop_instance(iid, "exited")
            await self._exited(dep, role, list(self.logs.tails.get(iid, [])))
        ready = [x for x in self._due if x[0] <= time.monotonic()]
        self._due = [x for x in self._due if x[0] > time.monotonic()]
        for _, dep, role in ready:
            task = asyncio.get_running_loop().create_task(self._relaunch(dep, role))
            self._relaunching.add(task)
            task.add_done_callback(self._relaunching.discard)
        if time.monotonic() - self._last_account >= ACCOUNT_SECS:
            self._last_account = time.monotonic()
            await self.account_live()

    async def _exited(self, dep: str, role: Role, tail: list[str]) -> None:
        """An instance of ``dep`` died: relaunch it after a back-off, or give up."""
        cur = await self.store.get("deployment", dep)
        if cur is None or cur.get("status") != "running":
            return
        t = time.monotonic()
        recent = [x for x in self._relaunched.get((dep, role.name), [])
                  if t - x < RELAUNCH_WINDOW]
        self._relaunched[(dep, role.name)] = recent
        if len(recent) >= RELAUNCH_MAX:
            msg = (f"{role.name} exited {len(recent) + 1} times within "
                   f"{RELAUNCH_WINDOW:.0f}s; not relaunched again (redeploy, restart or roll "
                   "back)")
            self._deploy_log(dep, msg, "error")
            await self._set(dep, degraded=True, error={"message": msg, "role": role.name,
                                                       "last_lines": tail[-TAIL_LINES:]})
            return
        delay = self.relaunch_backoff * 2 ** len(recent)
        recent.append(t + delay)
        self._deploy_log(dep, f"relaunching {role.name} in {delay:g}s (relaunch "
                         f"{len(recent)} of at most {RELAUNCH_MAX})", "warning")
        self._due.append((t + delay, dep, role))

    async def _relaunch(self, dep: str, role: Role) -> None:
        cur = await self.store.get("deployment", dep)
        project = await self.store.get("project", str((cur or {}).get("project")))
        if cur is None or cur.get("status") != "running" or project is None:
            return
        project = {**project, "id": row_id(project)}
        iid = await self._start(dep, project, role)
        err = await self._healthy(iid, role)
        if err is not None:
            await asyncio.sleep(0.2)
            self._deploy_log(dep, f"relaunched {role.name} is not healthy: {err}", "error")
            await self._stop_instance(iid, "failed")
            await self._exited(dep, role, list(self.logs.tails.get(iid, [])))
            return
        cur = await self.store.get("deployment", dep)
        if cur is None or cur.get("status") != "running":
            await self._stop_instance(iid)  # superseded or stopped meanwhile
            return
        await self.store.run("UPDATE $id SET status = 'healthy', healthy_at = $at, "
                             "relaunch = true RETURN NONE",
                             {"id": rid("instance", iid), "at": now()})
        self._deploy_log(dep, f"{role.name} relaunched and healthy"
                         + (f" at {role.url}" if role.url else ""))

    async def account_live(self) -> None:
        at = now()
        stmts: list[tuple[str, Any]] = []
        for iid in list(self.live):
            row = await self.store.get("instance", iid)
            if row is not None:
                stmts += await self._account(row, at)
        if stmts:
            await self.store.tx(stmts)

    # ------------------------------------------------------------------ one deployment
    @staticmethod
    def _base_env() -> dict[str, str]:
        env = {k: os.environ[k] for k in _INHERIT if k in os.environ}
        # the stack runs the platform's own code (its working directory is the deployment's)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_CODE_ROOT, env.get("PYTHONPATH"))
                                            if p)
        return env

    async def _values(self, did: str, d: dict[str, Any], project: dict[str, Any]
                      ) -> dict[str, dict[str, dict[str, Secret]]]:
        """The env and vault values this deployment runs with, recorded on it by reference
        (the ids of their versions, never the values): a rollback runs with the values of
        the deployment it rolls back to, a resumed deployment with those it started with."""
        refs = d.get("env_refs")
        source = None
        if refs is None and d.get("trigger") == "rollback" and d.get("rollback_of"):
            target = await self.store.get("deployment", str(d["rollback_of"]))
            refs = (target or {}).get("env_refs")
            source = (target or {}).get("version")
        if isinstance(refs, list):
            got = await self.values.at_versions(project, refs)
            if source is not None:
                self._deploy_log(did, f"environment: the values v{source} ran with "
                                 f"({len(refs)} value(s))")
        else:
            got, refs = await self.values.pinned(project, "production")
        await self._set(did, env_refs=refs)
        return got

    async def _fetch(self, dep: str, link: dict[str, Any] | None, sha: str, into: Path) -> Path:
        """The commit checked out into ``into``; the project's directory inside it."""
        if link is None:
            raise Failed("the repo link of this commit was removed")
        into.mkdir(parents=True, exist_ok=True)
        gitenv = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
        gitenv.update(GIT_TERMINAL_PROMPT="0", GIT_ALLOW_PROTOCOL="https:ssh:file")
        for argv in (["git", "init", "-q", str(into)],
                     ["git", "-C", str(into), "fetch", "-q", "--depth", "1", "--",
                      link["url"], sha],
                     ["git", "-C", str(into), "checkout", "-q", "FETCH_HEAD"]):
            proc = await asyncio.create_subprocess_exec(
                *argv, env=gitenv, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
            out, _ = await asyncio.wait_for(proc.communicate(), 60)
            if proc.returncode != 0:
                text = out.decode("utf-8", "replace").strip().splitlines()
                raise Failed(f"git {argv[3] if argv[1] == '-C' else argv[1]} failed",
                             "build", text[-TAIL_LINES:])
        self._deploy_log(dep, f"fetched commit {sha[:12]} of {link['url']}")
        return into / (link.get("path") or "")

    def _validate(self, dep: str, src: Path) -> Any:
        root = src / "project.yml"
        if not root.is_file():
            self._deploy_log(dep, "no project.yml at the linked path: the stack only")
            return None
        from project.rootconfig import ProjectInvalid, load_project

        try:
            loaded = load_project(root)
        except ProjectInvalid as e:
            lines = str(e).splitlines()
            for line in lines:
                self._deploy_log(dep, line, "error")
            raise Failed("project.yml is invalid (svc project validate): "
                         + (lines[0] if lines else ""), "build", lines[-TAIL_LINES:]) from None
        self._deploy_log(dep, "project.yml is valid")
        return loaded

    async def execute(self, d: dict[str, Any]) -> None:
        did = row_id(d)
        spec = dict(d.get("spec") or {})
        project = await self.store.get("project", d["project"])
        started: list[str] = []
        adopted: str | None = None
        workdir = self.run_dir / did
        try:
            if project is None or project.get("deleted_at") is not None:
                raise Failed("the project was deleted")
            project = {**project, "id": row_id(project)}
            await self._set(did, status="building", started_at=now(),
                            attempts=int(d.get("attempts") or 0) + 1,
                            progress={"done": 0, "total": 0, "step": "building"})
            self._deploy_log(did, f"building v{d['version']} ({d['trigger']}, started by "
                             f"{d.get('started_by')})")
            if workdir.exists():
                shutil.rmtree(workdir, ignore_errors=True)
            workdir.mkdir(parents=True)
            values = await self._values(did, d, project)
            base_env = self._base_env()
            env = {**base_env, **{k: s.reveal() for k, s in values["env"].get("", {}).items()}}
            loaded = None
            if spec.get("commit"):
                link = await self.store.get("repo_link", spec.get("link") or "")
                src = await self._fetch(did, link, spec["commit"], workdir / "src")
                loaded = self._validate(did, src)
            app_roles: list[Role] = []
            if loaded is not None:
                vault = {k: s for kv in values["vault"].values() for k, s in kv.items()}
                tenant = project["tenant"]
                no_containers = (await self.executor.no_containers()
                                 if needs_containers(loaded) else None)
                try:
                    app_roles = plan_app_roles(
                        loaded, deployment=did,
                        base_env={**base_env, "SVC_CLOUD_DEPLOYMENT": did},
                        platform=values["env"], vault=vault,
                        fingerprint=lambda v: str(self.values.fp.of(tenant, v)),
                        no_containers=no_containers, slug=str(project.get("slug") or ""),
                        tree_of=lambda p: _git_tree(workdir / "src", p))
                except AppPlanError as e:
                    raise Failed(e.message, "app-" + e.app) from None
                for line in describe(app_roles):
                    self._deploy_log(did, line)
                await self._build_images(did, app_roles)
            prev = await self.deployments.latest(d["project"], ("running",))
            restart = spec.get("restart") or {}
            adopt_row = None
            if prev is not None and not spec.get("database_url") \
                    and not (prev.get("spec") or {}).get("database_url") \
                    and "db" not in restart.get("roles", []):
                rows = await self.store.one(
                    "SELECT * FROM instance WHERE deployment = $d AND role = 'db' AND "
                    "status = 'healthy'", {"d": row_id(prev)}) or []
                adopt_row = rows[0] if rows else None
            secret = secrets.token_urlsafe(32)
            # the platform signs in to this scheduler for backups (cloud.backupfwd): the
            # password it runs with is kept sealed on the deployment, never in plaintext
            admin_pw = env.get("SVC_ADMIN_PASSWORD") or secrets.token_urlsafe(18)
            env["SVC_ADMIN_PASSWORD"] = admin_pw
            sealed = await seal_admin_password(self.values.keys, project["tenant"],
                                               project["id"], did, admin_pw)
            env.update(SVC_CLOUD_API_URL=self.cloud_url, SVC_CLOUD_PROJECT=project["slug"],
                       SVC_AUTH_SECRET=secret, SVC_CLOUD_DEPLOYMENT=did)
            roles = plan_roles(spec, env, workdir,
                               adopt_row["addr"] if adopt_row is not None else None)
            roles += app_roles
            built = sorted({r.image for r in app_roles if r.build is not None and r.image})
            await self._set(did, status="deploying", link_hash=link_hash(secret),
                            admin_secret=sealed, images=built,
                            progress={"done": 0, "total": len(roles), "step": "deploying"})
            for i, role in enumerate(roles):
                cur = await self.store.get("deployment", did)
                if cur is not None and cur.get("cancel_requested"):
                    raise Failed("cancelled on request", cancelled=True)
                await self._set(did, progress={"done": i, "total": len(roles),
                                               "step": f"starting {role.name}",
                                               "role": role.name})
                if role.name == "db" and adopt_row is not None:
                    adopted = row_id(adopt_row)
                    self._deploy_log(did, f"keeping the database host {adopted} of v"
                                     f"{prev['version'] if prev else '?'} (its data lives there)")
                    continue
                iid = await self._start(did, project, role)
                started.append(iid)
                err = await self._healthy(iid, role)
                if err is not None:
                    await asyncio.sleep(0.2)  # the pumps read its last words
                    raise Failed(err, role.name, list(self.logs.tails.get(iid, [])))
                if role.oneshot:
                    self.live.pop(iid, None)
                    await self.store.tx([*await self._account(
                        await self.store.get("instance", iid) or {}, now()),
                        ("UPDATE $id SET status = 'done', healthy_at = $at, stopped_at = $at "
                         "RETURN NONE", {"id": rid("instance", iid), "at": now()})])
                else:
                    await self.store.run("UPDATE $id SET status = 'healthy', healthy_at = $at "
                                         "RETURN NONE", {"id": rid("instance", iid),
                                                         "at": now()})
                self._deploy_log(did, f"{role.name} is healthy"
                                 + (f" at {role.url}" if role.url else ""))
            stmts: list[tuple[str, Any]] = [
                ("UPDATE $id SET status = 'running', healthy_at = $at, finished_at = $at, "
                 "progress = $pr RETURN NONE",
                 {"id": rid("deployment", did), "at": now(),
                  "pr": {"done": len(roles), "total": len(roles), "step": "running"}})]
            if prev is not None:
                stmts.append(("UPDATE $id SET status = 'superseded', superseded_by = $d "
                              "RETURN NONE", {"id": prev["id"], "d": did}))
            if adopted is not None:
                stmts.append(("UPDATE $id SET deployment = $d, adopted_from = $o RETURN NONE",
                              {"id": rid("instance", adopted), "d": did,
                               "o": row_id(prev) if prev else None}))
            await self.store.tx(stmts)
            self._deploy_log(did, f"v{d['version']} is running")
            if prev is not None:
                await self._stop_deployment(row_id(prev), keep=adopted)
                self._deploy_log(row_id(prev), f"superseded by v{d['version']}")
            await self._prune_images(did, project, int(d["version"]), built)
        except Failed as f:
            await self._fail(did, d, f, started)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the deployment fails, the loop goes on
            if not isinstance(e, ExecutorError):
                log.exception("deployment %s failed unexpectedly", did)
            await self._fail(did, d, Failed(str(e) if isinstance(e, ExecutorError) else
                                            f"internal error: {type(e).__name__}"), started)

    async def _build_images(self, did: str, roles: list[Role]) -> None:
        """The images of the apps built from a Containerfile, one after the other, still in
        the ``building`` phase: the build's lines go to the deploy log, a failed build
        fails the deployment with the build's error before any role starts."""
        for role in roles:
            if role.build is None:
                continue
            name = role.build.app
            await self._set(did, progress={"done": 0, "total": 0,
                                           "step": f"building the image of {role.name}",
                                           "role": role.name})
            t0 = time.monotonic()

            def emit(line: str, app: str = name) -> None:
                self._deploy_log(did, f"build {app} | {line}")
            try:
                built = await self._build_unless_cancelled(did, role.build, emit)
            except BuildFailed as e:
                await asyncio.sleep(0)  # lines handed over from the build's thread first
                raise Failed(f"app {name}: the image build failed: {e.message}", role.name,
                             e.tail) from None
            if built:
                self._deploy_log(did, f"app {name}: image {role.image} built in "
                                 f"{time.monotonic() - t0:.1f}s")

    async def _prune_images(self, did: str, project: dict[str, Any], version: int,
                            built: list[str]) -> None:
        """Once ``did`` runs: the project's built images that neither it nor the deployment
        before it that ran (the one it superseded, a rollback's first target; found by its
        record, so a resumed deployment keeps it too) uses go. A failure is logged: old
        images never fail a deployment that runs."""
        before = await self.store.one(
            "SELECT images, version FROM deployment WHERE project = $p AND version < $v AND "
            "status IN ['running', 'superseded'] ORDER BY version DESC LIMIT 1",
            {"p": project["id"], "v": version}, read=True) or []
        keep = {*built, *((before[0].get("images") or []) if before else [])}
        try:
            gone = await self.executor.prune_images(str(project.get("slug") or ""), keep)
        except Exception as e:  # noqa: BLE001 - the daemon gone or refusing: try next time
            log.warning("%s: old images not pruned: %s", did, str(e) or type(e).__name__)
            return
        for tag in gone:
            self._deploy_log(did, f"removed the old image {tag} (neither this deployment "
                             "nor the one before runs it)")
        if keep:
            self._deploy_log(did, f"images kept: {', '.join(sorted(keep))}")

    async def _build_unless_cancelled(self, did: str, spec: ImageBuild,
                                      emit: Callable[[str], None]) -> bool:
        """The executor's build, stopped when the deployment's cancel is requested meanwhile
        (a build can take minutes; the roles' own check comes only after it): the executor
        stops it on the daemon, and the deployment ends ``cancelled``."""
        build = asyncio.ensure_future(self.executor.build(spec, emit))
        try:
            while True:
                done, _ = await asyncio.wait([build], timeout=CANCEL_POLL_SECS)
                if done:
                    return build.result()
                cur = await self.store.get("deployment", did)
                if cur is not None and cur.get("cancel_requested"):
                    await cancel_and_wait(build)
                    raise Failed(f"cancelled on request while building the image of app "
                                 f"{spec.app}: the build was stopped", cancelled=True)
        finally:
            await cancel_and_wait(build)

    async def _healthy(self, iid: str, role: Role) -> str | None:
        """Wait until the instance is healthy: None, else why not."""
        handle = self.live[iid][0]
        err = await self.executor.healthy(role, handle, time.monotonic() + role.timeout_secs)
        if err is None and role.kind == "app" and role.health_url is None \
                and not role.oneshot:
            # ready once started (the spec), but an app that dies at once is not
            await asyncio.sleep(SETTLE_SECS)
            if not await self.executor.alive(handle):
                err = f"{role.name} exited within {SETTLE_SECS:g}s of its start"
        return err

    async def _start(self, did: str, project: dict[str, Any], role: Role) -> str:
        iid = new_id("ins")
        url = role.url
        addr = url.split("//", 1)[1] if url else None

        async def record(h: Handle) -> None:
            await self.store.tx([("CREATE $id CONTENT $c RETURN NONE", {
                "id": rid("instance", iid),
                "c": {"deployment": did, "tenant": project["tenant"], "project": project["id"],
                      "role": role.name, "kind": role.kind, "status": "starting",
                      "executor": h.executor, "pid": h.pid, "pgid": h.pgid, "ref": h.ref,
                      "url": url, "addr": addr, "started_at": now(), "lines_dropped": 0}})])
            self.live[iid] = (h, role)

        self._deploy_log(did, f"starting {role.name}")
        role = dataclasses.replace(role, labels={
            **role.labels, "svc.instance": iid, "svc.deployment": did,
            "svc.project": str(project.get("slug") or "")})
        await self.executor.start(role, self.logs.sink(did, iid, role.name), record)
        return iid

    async def _stop_deployment(self, did: str, keep: str | None = None) -> None:
        rows = await self.store.one(
            "SELECT id, started_at FROM instance WHERE deployment = $d AND status IN $s "
            "ORDER BY started_at", {"d": did, "s": ["starting", "healthy"]}) or []
        for r in reversed(rows):  # SSPs before the scheduler before the database
            iid = row_id(r)
            if iid != keep:
                await self._stop_instance(iid)
        # what an app started outside its process group goes too
        await asyncio.to_thread(sweep, did)
        with contextlib.suppress(OSError):
            if keep is None:
                shutil.rmtree(self.run_dir / did, ignore_errors=True)

    async def _fail(self, did: str, d: dict[str, Any], f: Failed, started: list[str]) -> None:
        for iid in reversed(started):
            with contextlib.suppress(Exception):
                await self._stop_instance(iid, "failed" if not f.cancelled else "stopped")
        await asyncio.to_thread(sweep, did)
        status = "cancelled" if f.cancelled else "failed"
        self._deploy_log(did, f"v{d['version']} {status}: {f.message}",
                         "warning" if f.cancelled else "error")
        await self._set(did, status=status, finished_at=now(),
                        error=None if f.cancelled else {"message": f.message, "role": f.role,
                                                        "last_lines": f.tail[-TAIL_LINES:]},
                        progress={"done": 0, "total": 0, "step": status})
        shutil.rmtree(self.run_dir / did, ignore_errors=True)


def _git_tree(checkout: Path, path: Path) -> str:
    """The git tree id of ``path`` in the commit checked out at ``checkout``: what the
    directory holds, whatever the commit (a build's inputs, ``cloud.imagebuild``)."""
    import subprocess

    rel = path.resolve().relative_to(checkout.resolve()).as_posix()
    got = subprocess.run(["git", "-C", str(checkout), "rev-parse",
                          f"HEAD:{rel if rel != '.' else ''}"],
                         capture_output=True, text=True, timeout=30, check=False)
    if got.returncode != 0 or not got.stdout.strip():
        raise Failed(f"the build context {rel} is not a directory of the commit")
    return got.stdout.strip()


def default_run_dir(port: int) -> Path:
    return Path(tempfile.gettempdir()) / f"svc-cloud-{port}-deployments"

