"""Soak: steady update-only writes through the cluster stack; memory per process over time and
write-to-edge latency per window.

    .venv/bin/python loadtests/soak_stack.py [--minutes 10] [--rate 500] [--rows 20000]
        [--users 1000] [--view-users 200] [--views-per-user 10] [--ssps 2] [--window 60]
        [--ref-mode dedicated|single] [--data DIR] [--stack-root PATH] [--memory-log PATH]
    .venv/bin/python loadtests/soak_stack.py --short          # a 20-second smoke run

What runs: `python -m stack --memory --ssps 2` (database host, `svc schema apply`, the
scheduler, two SSPs in scheduler mode, changefeed transport), exactly as `ops/run` starts them,
on free loopback ports. The benchmark seeds `user` (`--users`, `active` flags) and `post`
(`--rows`, each with an `author` link, a `category` c0..c9 and a `score` 0..99), hooks them
with `svc schema apply`, waits for the scheduler's replica to hold them, registers
`--views-per-user` views for each of `--view-users` users through the scheduler (`SHAPES`:
mostly the user's own posts, plus a linked-author filter like the issue's
`author.active = true AND category = 'c4' AND score >= 95` and a category leaderboard that
every user of a category shares) and waits until every view is `ready`. Then, for `--minutes`, it writes `--rate` single-row UPDATEs per second
through the database (each changes `score`; every 50th flips an author's `active`): no
creates, no deletes, so the data stays the same size and so should every process.

Per window (`--window` seconds) it prints:
- writes/s the database accepted (paced open loop; below `--rate` means the stack pushed back),
- write-to-edge latency p50/p99 (ms): a probe flips a probe post in and out of a probe view
  every 0.5 s and times each flip from its commit to the LIVE notification that shows its
  edge arriving (or retired, or deleted) in the probe user's edge table, as a client
  subscribed to that table hears of it; this covers the changefeed tail, the scheduler, the
  SSP, publication and the host's LIVE delivery. `poll p99` times the same flips as a reader
  polling the table every 10 ms sees them; each poll is an ordinary request that waits in the
  host behind the application's writes, so that figure adds up to one poll's round trip,
- the SSPs' own publication p99 (hub arrival to edge commit, `/debug/memory`) and backlog
  (unpublished edge operations, the oldest one's age),
- the retired edges the SSPs' reapers hold in memory (`reaper q`, bounded by
  `SVC_SSP_REAPER_MAX_QUEUED` each; with `--memory-log PATH` every SSP's whole `/debug/memory`
  and every process's RSS go to PATH, one JSON line per window),
- resident memory (MB) of every process: the database host, the scheduler, and per SSP its
  hub, its shards and its gateway workers; and the size of the stack's temporary directory
  (the scheduler's WAL and replica with --memory).

At the end, after the backlog drained, every view's edges are compared with SurrealDB's own
answer to its query. Verdict (exit 1 unless all hold, `--short` checks only convergence):
every process's RSS at the end within 10% of its RSS at minute 2, p99 write-to-edge in every
window from minute 2 on at most `--p99-ms` (default 300 plus the throttle), every view's edges
equal to SurrealDB's answer. For the database host it also prints its growth per minute and
when its engine's first memtable flush comes (`dbhost.scratch.memtable_bytes`); a flush does
not bound it (`loadtests/probe_host_memtable.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from surrealdb import RecordID  # noqa: E402

from dbclient import Database, DbConfig, DbError  # noqa: E402
from dbhost import scratch  # noqa: E402
from loadtests.bench_ssp import cpu_secs  # noqa: E402
from ssp.naming import edge_table, view_record  # noqa: E402
from tests.support import lifeline
from tests.support.procs import free_port, free_ports  # noqa: E402

NS, DB = "soak", "soak"
CATEGORIES = 10
# Select permissions as a forum's would be: every signed-in user reads every post and user
# (the shared views need them), a post is written by its author only. Views honour them
# (SVC_SSP_VIEW_PERMISSIONS=enforce, the default); a table without them would refuse views.
SCHEMA = """
DEFINE TABLE user SCHEMAFULL PERMISSIONS FOR select FULL;
DEFINE FIELD name ON user TYPE string;
DEFINE FIELD active ON user TYPE bool;
DEFINE TABLE post SCHEMAFULL PERMISSIONS FOR select FULL,
    FOR create, update, delete WHERE author = $auth.id;
DEFINE FIELD author ON post TYPE record<user>;
DEFINE FIELD category ON post TYPE string;
DEFINE FIELD score ON post TYPE int;
DEFINE FIELD title ON post TYPE string;
DEFINE INDEX post_author ON post FIELDS author;
DEFINE INDEX post_category ON post FIELDS category;
"""
# The view shapes, one per view slot of a user (cycled), parameters drawn per view. Most are
# about the user's own posts, as an application's per-user lists are; the linked-author filter
# (the issue's `author.active = true AND category = 'c4' AND score >= 95`) and the category
# leaderboard are shared by every user of a category, so one write can reach dozens of views
# (each reached view rewrites the post's edge: its `rv` changed).
SHAPES = [
    "SELECT id, title, score FROM post WHERE author = $auth.id ORDER BY score DESC LIMIT 10",
    "SELECT id, score FROM post WHERE author = $auth.id AND category = $cat",
    "SELECT id FROM post WHERE author.active = true AND category = $cat AND score >= $min",
    "SELECT id, title FROM post WHERE author = $auth.id AND score >= $min",
    "SELECT id, score FROM post WHERE author = $auth.id AND category = $cat "
    "ORDER BY score DESC LIMIT 3",
    "SELECT id, author.name AS who FROM post WHERE author = $auth.id AND score < $max",
    "SELECT id FROM post WHERE author = $auth.id AND category = $cat AND score >= $min",
    "SELECT id, score FROM post WHERE category = $cat ORDER BY score DESC LIMIT 5",
    "SELECT id, title, score FROM post WHERE author = $auth.id ORDER BY score ASC LIMIT 5",
    "SELECT id FROM post WHERE author = $auth.id",
]
PROBE_USER = "probe"
PROBE_VIEW = "query:soak_probe"
PROBE_SURQL = "SELECT id FROM post WHERE category = 'probe'"
PROBE_POSTS = 20
# Reads of a view found differing at the end, 2 s apart, before it counts as differing.
RECHECKS = 5


@dataclass
class Proc:
    """One process of the stack whose memory is sampled."""

    pid: int
    label: str


@dataclass
class Window:
    """What one window measured."""

    minute: float
    writes_per_s: float
    e2e: list[float]
    e2e_poll: list[float]
    ssp_p99: list[float | None]
    backlog: list[int]
    oldest_ms: list[float]
    rss: dict[str, float]
    tmp_mb: float
    queued: list[int] = field(default_factory=list)  # each SSP's reaper queue (edges)
    memory: list[dict[str, Any]] = field(default_factory=list)  # each SSP's `/debug/memory`
    statements: dict[str, Any] = field(default_factory=dict)  # the host's `/debug/statements`
    db_memory: dict[str, Any] = field(default_factory=dict)  # the host's `/debug/memory`
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds per process group
    seconds: float = 0.0  # the window's length


@dataclass
class Run:
    """The stack under test and what the benchmark learnt about it."""

    args: argparse.Namespace
    tmp: Path
    env: dict[str, str]
    db_port: int
    scheduler_port: int
    admin_port: int
    ssp_ports: list[int]
    stack: subprocess.Popen[bytes] | None = None
    windows: list[Window] = field(default_factory=list)
    writes: int = 0
    # views that differed at the end's first read and converged: (id, extra, missing, reads)
    transient: list[tuple[str, set[str], set[str], int]] = field(default_factory=list)
    write_errors: int = 0
    e2e: list[float] = field(default_factory=list)  # flips heard through LIVE (`prober`)
    e2e_poll: list[float] = field(default_factory=list)  # flips seen by polling
    probe_timeouts: int = 0

    @property
    def log_path(self) -> Path:
        return self.tmp / "stack.log"

    def db_config(self) -> DbConfig:
        return DbConfig.from_env({"SVC_DB_URL": f"ws://127.0.0.1:{self.db_port}/rpc",
                                  "SVC_DB_USER": "root", "SVC_DB_PASS": self.env["SVC_DB_PASS"],
                                  "SVC_DB_NS": NS, "SVC_DB_NAME": DB})


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def rss_mb(pid: int) -> float:
    """Resident set of `pid` in MB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, IndexError, ValueError):
        return 0.0


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def stack_processes(stack_pid: int) -> list[Proc]:
    """Every process under the stack, labelled: `db`, `scheduler`, and per SSP (its listen
    port) `ssp-P hub`, `ssp-P shard i`, `ssp-P gateway` (gunicorn master and workers)."""
    found: list[Proc] = []

    def walk(pid: int, owner: str | None) -> None:
        for child in _children(pid):
            argv = _cmdline(child)
            text = " ".join(argv)
            label, next_owner = None, owner
            if "-m dbhost" in text:
                label = "db"
            elif "-m scheduler" in text:
                label = "scheduler"
            elif argv[-2:-1] == ["-m"] and argv[-1] == "ssp" or text.endswith("-m ssp"):
                port = _ssp_port(child)
                next_owner = f"ssp-{port}"
                label = f"{next_owner} hub"
            elif "ssp.shard" in text and owner:
                idx = argv[argv.index("--index") + 1] if "--index" in argv else "?"
                label = f"{owner} shard {idx}"
            elif "gunicorn" in text and owner:
                label = f"{owner} gateway"
            if label is not None:
                found.append(Proc(child, label))
            walk(child, next_owner)

    walk(stack_pid, None)
    return found


def _ssp_port(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(b"SVC_SSP_LISTEN_ADDR="):
                    return item.split(b":")[-1].decode()
    except OSError:
        pass
    return str(pid)


def group_cpu(procs: list[Proc], before: dict[int, float]) -> tuple[dict[str, float],
                                                                    dict[int, float]]:
    """CPU seconds per label since `before` (per pid), shards and gateway workers summed as
    in `group_rss`, and the new per-pid totals; the soak's own process is `driver`."""
    now = {p.pid: cpu_secs(p.pid) for p in procs}
    now[os.getpid()] = time.process_time()
    out: dict[str, float] = {}
    for p in [*procs, Proc(os.getpid(), "driver")]:
        key = group_label(p.label)
        out[key] = out.get(key, 0.0) + now[p.pid] - before.get(p.pid, 0.0)
    return out, now


def group_label(label: str) -> str:
    """The label a process's figures are summed under: one SSP's shards share one."""
    return label.rsplit(" ", 1)[0] + " shards" if " shard " in label else label


def group_rss(procs: list[Proc]) -> dict[str, float]:
    """RSS per label, gateway workers and shards of one SSP summed under one label each."""
    out: dict[str, float] = {}
    for p in procs:
        key = group_label(p.label)
        out[key] = out.get(key, 0.0) + rss_mb(p.pid)
    return out


def dir_mb(path: Path) -> float:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(dirpath, name)).st_blocks * 512
    return total / 1e6


def pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * p))]


# ----------------------------------------------------------------------- the stack


def start_stack(run: Run) -> None:
    argv = [sys.executable, "-m", "stack", "--ssps", str(run.args.ssps),
            "--db-bind", f"127.0.0.1:{run.db_port}",
            "--scheduler-bind", f"127.0.0.1:{run.scheduler_port}",
            "--admin-bind", f"127.0.0.1:{run.admin_port}",
            "--ssp-bind", f"127.0.0.1:{run.ssp_ports[0]}"]
    argv += ["--data", str(run.args.data)] if run.args.data else ["--memory"]
    log = open(run.log_path, "ab")
    run.stack = subprocess.Popen(argv, env=run.env, cwd=str(run.args.stack_root or ROOT),
                                 stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    lifeline.adopt(run.stack.pid)  # dies with this run, killed or not
    log.close()


def stop_stack(run: Run) -> None:
    if run.stack is None or run.stack.poll() is not None:
        return
    run.stack.send_signal(signal.SIGTERM)
    try:
        run.stack.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(run.stack.pid, signal.SIGKILL)
        run.stack.wait(timeout=10)


async def wait_http(http: aiohttp.ClientSession, run: Run, url: str, timeout: float,
                    ok: Any = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if run.stack is not None and run.stack.poll() is not None:
            raise RuntimeError("the stack exited:\n" + run.log_path.read_text()[-4000:])
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            async with http.get(url, timeout=aiohttp.ClientTimeout(total=3)) as r:
                body = await r.json(content_type=None)
                if (ok(r.status, body) if ok else r.status == 200):
                    return body
        await asyncio.sleep(0.25)
    raise RuntimeError(f"{url} not ready in {timeout:.0f}s:\n"
                       + run.log_path.read_text()[-4000:])


def _schema_apply(run: Run) -> None:
    env = dict(run.env, SVC_DB_URL=f"ws://127.0.0.1:{run.db_port}/rpc",
               SVC_INGEST_TRANSPORT="changefeed")
    r = subprocess.run([sys.executable, "-m", "svccli", "schema", "apply"], env=env,
                       cwd=str(run.args.stack_root or ROOT), capture_output=True, text=True, timeout=120, check=False)
    if r.returncode != 0:
        raise RuntimeError("svc schema apply failed:\n" + r.stderr + r.stdout)


# ----------------------------------------------------------------------- data and views


def view_specs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The registrations: `--views-per-user` per view user, shapes cycled, parameters drawn."""
    rng = random.Random(11)
    specs = []
    for u in range(args.view_users):
        for k in range(args.views_per_user):
            shape = SHAPES[k % len(SHAPES)]
            params: dict[str, Any] = {"auth_id": f"user:u{u}"}
            if "$cat" in shape:
                params["cat"] = f"c{rng.randrange(CATEGORIES)}"
            if "$min" in shape:
                params["min"] = rng.randrange(90, 99)
            if "$max" in shape:
                params["max"] = rng.randrange(10, 50)
            specs.append({"id": f"query:soak_u{u}_{k}", "surql": shape, "clientId": "soak",
                          "ttl": "2h", "params": params})
    specs.append({"id": PROBE_VIEW, "surql": PROBE_SURQL, "clientId": "soak", "ttl": "2h",
                  "params": {"auth_id": f"user:{PROBE_USER}"}})
    return specs


async def seed(db: Database, args: argparse.Namespace) -> None:
    await db.query(SCHEMA)
    rng = random.Random(5)
    users = [{"id": RecordID("user", f"u{i}"), "name": f"user {i}", "active": rng.random() < 0.7}
             for i in range(args.users)]
    users.append({"id": RecordID("user", PROBE_USER), "name": "probe", "active": True})
    for i in range(0, len(users), 1000):
        await db.query("INSERT INTO user $rows", {"rows": users[i:i + 1000]})
    posts = [{"id": RecordID("post", i), "author": RecordID("user", f"u{rng.randrange(args.users)}"),
              "category": f"c{rng.randrange(CATEGORIES)}", "score": rng.randrange(100),
              "title": f"post {i}"} for i in range(args.rows)]
    posts += [{"id": RecordID("post", f"probe{i}"), "author": RecordID("user", PROBE_USER),
               "category": "off", "score": 0, "title": "probe"} for i in range(PROBE_POSTS)]
    for i in range(0, len(posts), 1000):
        await db.query("INSERT INTO post $rows", {"rows": posts[i:i + 1000]})


async def register(http: aiohttp.ClientSession, run: Run, specs: list[dict[str, Any]]) -> None:
    url = f"http://127.0.0.1:{run.scheduler_port}/view/register"
    sem = asyncio.Semaphore(16)

    async def one(spec: dict[str, Any]) -> None:
        async with sem:
            for attempt in range(20):
                async with http.post(url, json=spec,
                                     timeout=aiohttp.ClientTimeout(total=120)) as r:
                    if r.status == 200:
                        return
                    text = await r.text()
                    if r.status != 503:
                        raise RuntimeError(f"register {spec['id']}: {r.status} {text}")
                await asyncio.sleep(0.5 * (attempt + 1))
            raise RuntimeError(f"register {spec['id']}: still 503")

    await asyncio.gather(*(one(s) for s in specs))


async def wait_views_ready(db: Database, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = await db.query_one("SELECT count() AS n FROM _00_query WHERE state = 'ready' "
                                  "GROUP ALL")
        if rows and rows[0]["n"] >= n:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"views not ready in {timeout:.0f}s")


async def member_edges(db: Database, table: str, view: RecordID) -> set[str]:
    """The members the edge table shows for `view` (retired edges excluded)."""
    rows = await db.query_one(f"SELECT VALUE out FROM {table} WHERE in = $q AND !removed",
                              {"q": view})
    return {str(r) for r in rows or []}


def edge_table_of(run: Run, auth: str) -> str:
    return edge_table(RecordID("user", auth.split(":", 1)[1]), run.args.ref_mode)


# ----------------------------------------------------------------------- load and probes


async def writer(run: Run, stop: asyncio.Event) -> None:
    """`--rate` single-row UPDATE transactions per second, open loop, over a few connections."""
    conns = [Database(run.db_config()) for _ in range(4)]
    for c in conns:
        await c.connect()
    rng = random.Random(3)
    tick = 0.05
    per_tick = run.args.rate * tick
    carry = 0.0
    next_at = time.monotonic()
    inflight: set[asyncio.Task[None]] = set()

    async def one(c: Database, i: int) -> None:
        try:
            if i % 50 == 0:
                await c.query("UPDATE type::record('user', $u) SET active = !active RETURN NONE",
                              {"u": f"u{rng.randrange(run.args.users)}"})
            else:
                await c.query("UPDATE type::record('post', $k) SET score = (score + $d) % 100 "
                              "RETURN NONE", {"k": rng.randrange(run.args.rows),
                                              "d": rng.randrange(1, 100)})
            run.writes += 1
        except DbError:
            run.write_errors += 1

    try:
        i = 0
        while not stop.is_set():
            carry += per_tick
            n, carry = int(carry), carry - int(carry)
            for _ in range(n):
                i += 1
                if len(inflight) < 256:  # beyond that the database is not keeping up
                    t = asyncio.create_task(one(conns[i % len(conns)], i))
                    inflight.add(t)
                    t.add_done_callback(inflight.discard)
            next_at += tick
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        if inflight:
            await asyncio.wait(inflight)
    finally:
        for c in conns:
            await c.close()


async def prober(run: Run, stop: asyncio.Event) -> None:
    """Flip probe posts in and out of the probe view; time each flip from its commit to its
    edge state, twice: as a client subscribed to the probe user's edge table hears of it (a
    LIVE notification, `run.e2e`), and as a reader polling that table every 10 ms sees it
    (`run.e2e_poll`; each poll is an ordinary request that queues in the host behind the
    application's writes, so this figure adds up to one poll's round trip)."""
    db = Database(run.db_config())
    await db.connect()
    table = edge_table_of(run, f"user:{PROBE_USER}")
    view = view_record(PROBE_VIEW)
    inside = [False] * PROBE_POSTS
    # the flip a LIVE notification may settle: (post, state expected, commit time or None)
    awaited: dict[str, Any] = {"post": None, "inside": False, "t0": None, "heard": None}

    def heard(item: dict[str, Any]) -> None:
        res = item.get("result")
        if not isinstance(res, dict) or awaited["post"] is None or awaited["heard"] is not None:
            return
        if res.get("out") != awaited["post"] or res.get("in") != view:
            return
        action = item.get("action")
        shown = action in ("CREATE", "UPDATE") and not res.get("removed")
        if shown == awaited["inside"]:
            awaited["heard"] = time.monotonic()

    sub = await db.live(table, heard)
    i = 0
    try:
        while not stop.is_set():
            k = i % PROBE_POSTS
            i += 1
            inside[k] = not inside[k]
            rid = RecordID("post", f"probe{k}")
            awaited.update(post=rid, inside=inside[k], t0=None, heard=None)
            await db.query("UPDATE $p SET category = $c RETURN NONE",
                           {"p": rid, "c": "probe" if inside[k] else "off"})
            t0 = time.monotonic()
            deadline = t0 + 120
            polled = False
            while time.monotonic() < deadline:
                if not polled:
                    rows = await db.query_one(
                        f"SELECT VALUE out FROM {table} WHERE in = $q AND out = $p AND !removed",
                        {"q": view, "p": rid})
                    if bool(rows) == inside[k]:
                        run.e2e_poll.append((time.monotonic() - t0) * 1000)
                        polled = True
                if polled and awaited["heard"] is not None:
                    run.e2e.append((max(awaited["heard"], t0) - t0) * 1000)
                    break
                await asyncio.sleep(0.01)
            else:
                run.probe_timeouts += 1
            await asyncio.sleep(0.5)
    finally:
        with contextlib.suppress(DbError):
            await sub.kill()
        await db.close()


async def ssp_memory(http: aiohttp.ClientSession, run: Run, reset: bool = False
                     ) -> list[dict[str, Any]]:
    """Each SSP's `/debug/memory` (`reset`: then start a new latency window; the figures
    returned are those before the reset)."""
    out = []
    for port in run.ssp_ports:
        try:
            objects = (f"?objects={run.args.objects}&holders={run.args.holders}"
                       if run.args.objects else "")
            async with http.get(f"http://127.0.0.1:{port}/debug/memory{objects}",
                                headers={"Authorization": "Bearer soak"},
                                timeout=aiohttp.ClientTimeout(total=10)) as r:
                body = await r.json(content_type=None)
                out.append(body if isinstance(body, dict) else {})
            if reset:
                async with http.get(f"http://127.0.0.1:{port}/debug/memory?reset_latency=1",
                                    headers={"Authorization": "Bearer soak"},
                                    timeout=aiohttp.ClientTimeout(total=10)) as r:
                    await r.read()
        except (TimeoutError, aiohttp.ClientError, ValueError):
            out.append({})
    return out


def db_auth(run: Run) -> dict[str, str]:
    """The database host's root credentials (its debug routes take HTTP Basic)."""
    return {"Authorization": aiohttp.encode_basic_auth("root", run.env["SVC_DB_PASS"])}


async def db_memory(http: aiohttp.ClientSession, run: Run) -> dict[str, Any]:
    """The database host's `/debug/memory` (`dbhost.memory`): its RSS beside its Python heap,
    which tells the engine's growth from the host's own."""
    try:
        async with http.get(f"http://127.0.0.1:{run.db_port}/debug/memory", headers=db_auth(run),
                            timeout=aiohttp.ClientTimeout(total=10)) as r:
            body = await r.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


async def db_statements(http: aiohttp.ClientSession, run: Run) -> dict[str, Any]:
    """The database host's engine time per statement shape since the last call (`dbhost.stats`;
    the counters start again after each read), or {} without `--statements`."""
    if not run.args.statements:
        return {}
    url = f"http://127.0.0.1:{run.db_port}/debug/statements"
    auth = db_auth(run)
    try:
        async with http.get(f"{url}?limit=12", headers=auth,
                            timeout=aiohttp.ClientTimeout(total=10)) as r:
            body = await r.json(content_type=None)
        async with http.delete(url, headers=auth, timeout=aiohttp.ClientTimeout(total=10)) as r:
            await r.read()
    except (TimeoutError, aiohttp.ClientError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def print_statements(report: dict[str, Any]) -> None:
    """One window's top statement shapes (engine seconds per second, then per shape)."""
    if not report.get("statements"):
        return
    print(f"      db: {report['requests'] / max(report['elapsed_s'], 1e-9):,.0f} requests/s, "
          f"{report['engine_s'] / max(report['elapsed_s'], 1e-9):.2f} engine-s/s", flush=True)
    for row in report["statements"][:8]:
        print(f"      {row['share'] * 100:5.1f}% {row['per_s']:7.1f}/s {row['mean_ms']:7.2f} ms "
              f"{row.get('reply_kb_per_s', 0):7.0f} KB/s  {row['shape'][:80]}", flush=True)


async def sampler(run: Run, http: aiohttp.ClientSession, stop: asyncio.Event,
                  started: float, stack_tmp: Path | None) -> None:
    assert run.stack is not None
    last_writes, last_at = run.writes, time.monotonic()
    _, cpu_before = group_cpu(stack_processes(run.stack.pid), {})
    await ssp_memory(http, run, reset=True)  # start the SSPs' latency windows
    await db_statements(http, run)  # and the host's statement counters
    while not stop.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), run.args.window)
        now = time.monotonic()
        mems = await ssp_memory(http, run, reset=True)
        pubs = [m.get("publication") or {} for m in mems]
        e2e, run.e2e = run.e2e, []
        e2e_poll, run.e2e_poll = run.e2e_poll, []
        procs = stack_processes(run.stack.pid)
        cpu, cpu_before = group_cpu(procs, cpu_before)
        w = Window(minute=(now - started) / 60,
                   writes_per_s=(run.writes - last_writes) / max(1e-9, now - last_at),
                   e2e=e2e, e2e_poll=e2e_poll,
                   ssp_p99=[p.get("latency_p99_ms") for p in pubs],
                   backlog=[int(p.get("pending_operations") or 0) for p in pubs],
                   oldest_ms=[float(p.get("oldest_age_ms") or 0) for p in pubs],
                   rss=group_rss(procs), cpu=cpu, seconds=now - last_at,
                   tmp_mb=dir_mb(stack_tmp) if stack_tmp else 0.0,
                   queued=[int((m.get("reaper") or {}).get("queued") or 0) for m in mems],
                   memory=mems, statements=await db_statements(http, run),
                   db_memory=await db_memory(http, run))
        last_writes, last_at = run.writes, now
        run.windows.append(w)
        print_window(run, w)


def print_header(run: Run, labels: list[str]) -> None:
    cols = " ".join(f"{lab[-16:]:>16}" for lab in labels)
    print(f"\n{'min':>5} {'writes/s':>8} {'e2e p50':>8} {'e2e p99':>8} {'poll p99':>8} "
          f"{'ssp p99':>8} "
          f"{'backlog':>8} {'oldest s':>8} {'reaper q':>8} {'tmp MB':>7} {cols}   (RSS MB)", flush=True)


def print_window(run: Run, w: Window) -> None:
    if len(run.windows) == 1:
        print_header(run, sorted(w.rss))
    p99s = [x for x in w.ssp_p99 if x is not None]
    e50, e99 = pct(w.e2e, 0.5), pct(w.e2e, 0.99)
    cols = " ".join(f"{w.rss.get(lab, 0):>16.0f}" for lab in sorted(run.windows[0].rss))
    print(f"{w.minute:>5.1f} {w.writes_per_s:>8.0f} "
          f"{e50 if e50 is not None else float('nan'):>8.0f} "
          f"{e99 if e99 is not None else float('nan'):>8.0f} "
          f"{pct(w.e2e_poll, 0.99) or float('nan'):>8.0f} "
          f"{max(p99s) if p99s else float('nan'):>8.0f} {sum(w.backlog):>8} "
          f"{max(w.oldest_ms) / 1000:>8.1f} {sum(w.queued):>8} {w.tmp_mb:>7.1f} {cols}",
          flush=True)
    pubs = [m.get("publication") or {} for m in w.memory]
    if any(p.get("transaction_p99_ms") is not None for p in pubs):
        def ms(v: Any) -> str:
            return f"{v:.0f}" if isinstance(v, (int, float)) else "-"
        print("      ssps: change to its transaction p99 "
              + " / ".join(ms(p.get("queued_p99_ms")) for p in pubs)
              + " ms; transaction p50 / p99 "
              + ", ".join(f"{ms(p.get('transaction_p50_ms'))} / {ms(p.get('transaction_p99_ms'))}"
                          for p in pubs) + " ms", flush=True)
        slow = sorted((t for p in pubs for t in p.get("slowest_transactions") or []),
                      key=lambda t: -t.get("ms", 0))[:3]
        if slow:
            print("      ssps: slowest transactions "
                  + ", ".join(f"{t['ms']:.0f} ms ({t['operations']} ops, {t['views']} views)"
                              for t in slow)
                  + f"; changes held up by the reaper {sum(p.get('reaper_waits') or 0 for p in pubs)}",
                  flush=True)
        reapers = [m.get("reaper") or {} for m in w.memory]
        if any(reapers):
            print("      reapers so far: reaped " + " / ".join(str(r.get("reaped", 0)) for r in reapers)
                  + ", revived before their turn " + " / ".join(str(r.get("revived", 0))
                                                               for r in reapers)
                  + ", left to the refill " + " / ".join(str(r.get("overflowed", 0))
                                                        for r in reapers), flush=True)
    if w.cpu and w.seconds > 0:
        writes = w.writes_per_s * w.seconds
        print("      cpu, % of a core: " + ", ".join(
            f"{lab} {100 * sec / w.seconds:.0f}" for lab, sec in sorted(
                w.cpu.items(), key=lambda kv: -kv[1]))
              + f"; all {100 * sum(w.cpu.values()) / w.seconds:.0f}"
              + (f", {1000 * sum(w.cpu.values()) / writes:.2f} ms per write" if writes else ""),
              flush=True)
    if w.db_memory:
        print(f"      db: python heap {w.db_memory.get('python_blocks', 0):,} blocks, "
              f"LIVE queries {w.db_memory.get('live_queries')}, feeds "
              f"{w.db_memory.get('live_feeds')} (late sets so far "
              f"{w.db_memory.get('live_late_sets')}, by ms behind "
              f"{w.db_memory.get('live_late_by_ms')}), connections "
              f"{w.db_memory.get('connections')}",
              flush=True)
    print_statements(w.statements)
    if run.args.memory_log is not None:
        with run.args.memory_log.open("a") as f:
            f.write(json.dumps({"minute": round(w.minute, 2), "rss": w.rss, "cpu_s": w.cpu,
                                "ssps": w.memory, "db_statements": w.statements,
                                "db_memory": w.db_memory}) + "\n")


async def compare_edges(run: Run, db: Database, specs: list[dict[str, Any]]
                        ) -> list[tuple[str, set[str], set[str]]]:
    """(view id, extra edges, missing edges) for every view whose edges differ from SurrealDB's
    answer to its query or whose `_00_query` row is not `ready` with a `rowCount` (a view
    the database could not answer for, after retries, counts as differing with nothing
    listed). A view found differing is read again, both sides, every 2 s up to RECHECKS
    times: one that converges was read while a last write was still on its way (a write's
    way to its edges takes seconds under this load, and the SSPs' empty backlog does not say
    the feed delivered everything), and is counted in `run.transient`; only one that differs
    at every read is returned."""
    bad: list[tuple[str, set[str], set[str]]] = []
    sem = asyncio.Semaphore(4)

    async def one(spec: dict[str, Any]) -> None:
        async with sem:
            first: tuple[set[str], set[str]] | None = None
            for check in range(RECHECKS + 1):
                diff = await with_retries(spec)
                if diff is None:
                    if first is not None:
                        run.transient.append((spec["id"], *first, check))
                    return
                first = first or diff
                if check < RECHECKS:
                    await asyncio.sleep(2.0)
            bad.append((spec["id"], *(first or (set(), set()))))

    async def with_retries(spec: dict[str, Any]) -> tuple[set[str], set[str]] | None:
        for attempt in range(5):
            try:
                return await compare_one(spec)
            except DbError as e:
                if attempt == 4:
                    log(f"comparing {spec['id']} failed: {e}")
                    return set(), set()
                await asyncio.sleep(2.0)
        return set(), set()

    async def compare_one(spec: dict[str, Any]) -> tuple[set[str], set[str]] | None:
        params = dict(spec["params"])
        auth = params.pop("auth_id")
        sql = spec["surql"].replace("$auth.id", "$__auth")
        rows = await db.query_one(sql, {**params, "__auth": RecordID("user",
                                                                    auth.split(":")[1])})
        want = {str(r["id"]) for r in rows or []}
        got = await member_edges(db, edge_table_of(run, auth), view_record(spec["id"]))
        row = await db.query_one("SELECT state, rowCount FROM ONLY $q",
                                 {"q": view_record(spec["id"])})
        # (`rowCount` is the size of the initial set, spec: not comparable with the answer now)
        row_ok = isinstance(row, dict) and row.get("state") == "ready" \
            and isinstance(row.get("rowCount"), int)
        if want != got or not row_ok:
            if not row_ok:
                log(f"{spec['id']}: _00_query row {row}")
            return got - want, want - got
        return None

    await asyncio.gather(*(one(s) for s in specs))
    return bad


async def drained(http: aiohttp.ClientSession, run: Run, timeout: float) -> float:
    """Seconds until every SSP has nothing to publish and ingested nothing for a second
    (an empty backlog alone may come before the feed's last events: they are still on
    their way through the changefeed and the scheduler)."""
    t0 = time.monotonic()
    last: list[Any] | None = None
    while time.monotonic() - t0 < timeout:
        mems = await ssp_memory(http, run)
        pubs = [m.get("publication") or {} for m in mems]
        ingested = [m.get("ingested") for m in mems]
        if all(p and not p.get("pending_operations") for p in pubs) and ingested == last:
            return time.monotonic() - t0
        last = ingested
        await asyncio.sleep(1.0)
    return float("inf")


def _stack_tmp(run: Run) -> Path | None:
    """The stack's temporary directory (`svc-stack-*`, found through the scheduler's
    config path on its command line)."""
    assert run.stack is not None
    for p in stack_processes(run.stack.pid):
        if p.label == "scheduler":
            argv = _cmdline(p.pid)
            if "--config" in argv:
                cfg = Path(argv[argv.index("--config") + 1])
                return cfg.parent.parent if run.args.data is None else cfg.parent
    return None


# ----------------------------------------------------------------------- main


async def soak(run: Run) -> int:
    args = run.args
    start_stack(run)
    log(f"stack starting (log {run.log_path})")
    async with aiohttp.ClientSession() as http:
        await wait_http(http, run, f"http://127.0.0.1:{run.scheduler_port}/health", 180,
                        ok=lambda s, b: b.get("scheduler", {}).get("state") == "ready")
        for port in run.ssp_ports:
            await wait_http(http, run, f"http://127.0.0.1:{port}/health", 180)
        db = Database(run.db_config())
        await db.connect()
        t = time.monotonic()
        await seed(db, args)
        _schema_apply(run)
        log(f"seeded and hooked in {time.monotonic() - t:.0f} s")
        total = args.rows + PROBE_POSTS
        # The scheduler backfills the newly hooked tables and sends the rows to the SSPs (its
        # replica shows them only after its next fold, every 300 s): wait for the SSPs.
        for port in run.ssp_ports:
            await wait_http(http, run, f"http://127.0.0.1:{port}/info", 300,
                            ok=lambda s, b: s == 200
                            and b[0].get("circuit_tables", {}).get("post") == total
                            and b[0].get("circuit_tables", {}).get("user") == args.users + 1)
        seeded = time.monotonic() - t
        log(f"the SSPs hold the rows after {seeded:.0f} s")
        specs = view_specs(args)
        t = time.monotonic()
        await register(http, run, specs)
        await wait_views_ready(db, len(specs), 600)
        registered = time.monotonic() - t
        print(f"soak: stack --{'data' if args.data else 'memory'} --ssps {args.ssps}, ref mode "
              f"{args.ref_mode}; {args.rows:,} posts, {args.users:,} users; {len(specs):,} views "
              f"over {args.view_users} users; {args.rate:.0f} updates/s for {args.minutes:g} min "
              f"(seeded in {seeded:.0f} s, views ready in {registered:.0f} s); "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        print(f"the database host's engine flushes its memtable at "
              f"{scratch.memtable_bytes() / 2**20:.0f} MiB on this machine; its RSS grows "
              f"with its writes past flushes too (dbhost.scratch)", flush=True)
        stop = asyncio.Event()
        started = time.monotonic()
        stack_tmp = _stack_tmp(run)
        tasks = [asyncio.create_task(writer(run, stop)),
                 asyncio.create_task(prober(run, stop)),
                 asyncio.create_task(sampler(run, http, stop, started, stack_tmp))]
        try:
            await asyncio.sleep(args.minutes * 60)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
        drain_s = await drained(http, run, 600)
        await asyncio.sleep(3)  # the reaper of retired edges works once publication is idle
        bad = await compare_edges(run, db, specs)
        notes = await explain(http, run, db, bad[:10])
        await db.close()
    return verdict(run, drain_s, bad, len(specs), notes)


async def explain(http: aiohttp.ClientSession, run: Run, db: Database,
                  bad: list[tuple[str, set[str], set[str]]]) -> dict[str, str]:
    """For each differing view: whether the SSP holding it counts the differing records as
    members (`/debug/view`: the engine's answer; if it agrees with the edges, publication is
    right and the view's circuit is wrong, else the edges are), and those records' rows."""
    out: dict[str, str] = {}
    for vid, extra, missing in bad:
        held: list[str] | None = None
        for port in run.ssp_ports:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
                async with http.get(f"http://127.0.0.1:{port}/debug/view/{vid}",
                                    headers={"Authorization": "Bearer soak"},
                                    timeout=aiohttp.ClientTimeout(total=10)) as r:
                    if r.status == 200:
                        held = list((await r.json(content_type=None)).get("cache") or [])
        rows = []
        for rid in sorted(extra | missing)[:3]:
            with contextlib.suppress(DbError):
                row = await db.query_one(
                    "SELECT id, category, score, _00_rv, author, author.active AS author_active "
                    "FROM ONLY type::record($r)", {"r": rid})
                rows.append(str(row))
        in_ssp = ("not held by any SSP" if held is None else
                  f"SSP members: extra held {sorted(extra & set(held))}, "
                  f"missing held {sorted(missing & set(held))}")
        out[vid] = f"{in_ssp}; rows {rows}"
    return out


def host_bound(base: Window, last: Window) -> str:
    """How the database host grew and when its engine's first memtable flush comes (the
    memtable's size follows the machine's memory; nothing the host can pass sets it:
    `dbhost.scratch`). A flush does not bound it: RSS returns and keeps its slope after
    one (`loadtests/probe_host_memtable.py`)."""
    bound = scratch.memtable_bytes() / 1e6
    a, b = base.rss["db"], last.rss.get("db", 0.0)
    minutes = max(1e-9, last.minute - base.minute)
    rate = (b - a) / minutes
    fill = f"{bound / rate:.0f} min at that rate" if rate > 0 else "never at that rate"
    return (f"db: grows {rate:.1f} MB/min from minute 2; its engine's first memtable flush "
            f"comes after {bound:.0f} MB ({fill}; machine {scratch.machine_memory() / 2**30:.1f}"
            f" GiB); a flush does not give the memory back for good "
            f"(probe_host_memtable.py): not bounded")


def verdict(run: Run, drain_s: float, bad: list[tuple[str, set[str], set[str]]],
            views: int, notes: dict[str, str]) -> int:
    args = run.args
    print(f"\nwrites: {run.writes:,} ({run.write_errors} failed); probe flips not seen within "
          f"120 s: {run.probe_timeouts}; backlog drained {drain_s:.1f} s after the load stopped")
    print(f"edges equal SurrealDB's answer for {views - len(bad)}/{views} views")
    if run.transient:
        print(f"  {len(run.transient)} more differed at the first read and converged later "
              f"(a last write still on its way), e.g.:")
        for vid, extra, missing, reads in run.transient[:5]:
            print(f"  {vid}: extra {sorted(extra)[:5]} missing {sorted(missing)[:5]}; "
                  f"equal at read {reads + 1}")
    for vid, extra, missing in bad[:10]:
        print(f"  {vid}: extra {sorted(extra)[:5]} missing {sorted(missing)[:5]}")
        if vid in notes:
            print(f"    {notes[vid]}")
    ok = not bad and drain_s != float("inf")
    if args.short:
        return 0 if ok else 1
    base = next((w for w in run.windows if w.minute >= 2 - 1e-6), None)
    last = run.windows[-1] if run.windows else None
    if base is None or last is None:
        print("too short for the memory verdict (needs a window at minute 2)")
        return 1
    print(f"\n{'process':<24} {'MB at min 2':>12} {'MB at end':>10} {'ratio':>7}  within 10%")
    for label in sorted(base.rss):
        a, b = base.rss[label], last.rss.get(label, 0.0)
        within = a > 0 and b <= a * 1.10
        ok = ok and within
        print(f"{label:<24} {a:>12.0f} {b:>10.0f} {b / a if a else float('nan'):>7.2f}  "
              f"{'yes' if within else 'NO'}")
    if "db" in base.rss:
        print(host_bound(base, last))
        a_py, b_py = (w.db_memory.get("python_blocks") for w in (base, last))
        if a_py and b_py:
            print(f"db: its Python heap {a_py:,} -> {b_py:,} blocks ({b_py / a_py:.2f}x); the "
                  f"rest of its growth is the engine's")
    late = [w for w in run.windows if w.minute >= 2 - 1e-6]
    worst = max((pct(w.e2e, 0.99) or float("inf")) for w in late)
    within_lat = worst <= args.p99_ms
    ok = ok and within_lat
    print(f"worst window p99 write-to-edge from minute 2: {worst:.0f} ms "
          f"(limit {args.p99_ms:.0f} ms): {'yes' if within_lat else 'NO'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--rate", type=float, default=500, help="updates per second")
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--users", type=int, default=1_000)
    p.add_argument("--view-users", type=int, default=200)
    p.add_argument("--views-per-user", type=int, default=10)
    p.add_argument("--ssps", type=int, default=2)
    p.add_argument("--window", type=float, default=60, help="seconds per printed window")
    p.add_argument("--ref-mode", choices=["dedicated", "single"], default="dedicated")
    p.add_argument("--throttle-ms", type=int, default=100)
    p.add_argument("--p99-ms", type=float, default=None,
                   help="write-to-edge p99 limit per window (default 300 + the throttle)")
    p.add_argument("--data", type=Path, default=None,
                   help="run the stack with --data DIR (surrealkv on disk) instead of --memory")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="an extra variable for the stack's processes (repeatable), e.g. "
                        "SVC_SSP_RECONCILE_MS=0")
    p.add_argument("--stack-root", type=Path, default=None,
                   help="run the stack from another checkout (a 'before' figure; the "
                        "benchmark stays this checkout's)")
    p.add_argument("--memory-log", type=Path, default=None,
                   help="append each window's RSS and every SSP's /debug/memory (JSON lines)")
    p.add_argument("--objects", type=int, default=0, metavar="N",
                   help="with --memory-log: each SSP's N most numerous tracked Python types "
                        "per window (/debug/memory?objects=N)")
    p.add_argument("--holders", default="", metavar="TYPE",
                   help="with --objects: what holds the old objects of TYPE (a type name)")
    p.add_argument("--statements", action="store_true",
                   help="print each window's top statement shapes by the database host's "
                        "engine time (GET /debug/statements)")
    p.add_argument("--short", action="store_true",
                   help="smoke run: 20 s, 1,000 posts, 50 views, 100 updates/s, 5 s windows")
    args = p.parse_args(argv)
    # The writer counts its failed writes; the client's own warnings would flood the table.
    logging.basicConfig(level=logging.ERROR)
    if args.short:
        args.minutes, args.rate, args.rows, args.users = 20 / 60, 100, 1000, 100
        args.view_users, args.views_per_user, args.window = 10, 5, 5
    if args.p99_ms is None:
        args.p99_ms = 300 + args.throttle_ms
    tmp = Path(tempfile.mkdtemp(prefix="soak-stack-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_")}
    env.update(PYTHONUNBUFFERED="1", SVC_DB_USER="root", SVC_DB_PASS=secrets.token_hex(8),
               SVC_ADMIN_PASSWORD=secrets.token_hex(8), SVC_DB_NS=NS, SVC_DB_NAME=DB,
               SVC_SSP_REF_MODE=args.ref_mode, SVC_SCHEMA_POLL_SECS="2",
               SVC_SSP_QUERY_UPDATE_THROTTLE_MS=str(args.throttle_ms))
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            p.error(f"--env takes NAME=VALUE, got {item!r}")
        env[name] = value
    base = free_ports(args.ssps)
    run = Run(args, tmp, env, free_port(), free_port(), free_port(),
              [base + i for i in range(args.ssps)])
    try:
        return asyncio.run(soak(run))
    finally:
        stop_stack(run)
        print(f"stack log: {run.log_path}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    sys.exit(main())
