"""SSP benchmark: sustained ingest events/s and ingest-to-edge-committed latency, with 10,000
views over 1,000 users, next to the naive baseline, for 1 and 2 shards, in one run.

    .venv/bin/python loadtests/bench_ssp.py [--users 1000] [--views-per-user 10]
        [--seconds 15] [--shards 1,2] [--throttle-ms 100] [--concurrency 64] [--rate 3000]
        [--ref-modes dedicated,single] [--large-views 0] [--large-kind peers|children]
        [--reconcile-ms 1000] [--ssp-root PATH] [--profile DIR] [--delete-share 0.1]
        [--app-deletes]

Both edge publication modes run: `dedicated` (the default: one edge table per user owning a
view, so 1,000 tables here) and `single` (one shared `_00_list_ref`). In SurrealDB 3.2.4
(surrealdb-embedded) every DELETE pays for every table defined in the database (~2-7 us per
per-user edge table: ~7 ms per deleted edge here; an UPDATE ~70 us; `probe_edge_removal.py`),
so `dedicated` retires the edge of a member that left (an UPDATE) and its reaper deletes
retired edges while publication is quiet (ssp/README.md, "Edge removal"); `single` deletes.
The table also shows flushes and failed flushes (`SVC_SSP_PUBLISH_FLUSHERS` transactions run
at once; a failed one is retried).

What runs: a database host (`python -m dbhost --memory`) and, per shard count, a fresh
database and a real `python -m ssp` (hub + shard processes, transport http so the benchmark
drives the events). Views: user u has 10 views `SELECT * FROM post WHERE owner = $auth.id AND
cat = $cat` (cat 0..9; odd cats add `ORDER BY n DESC LIMIT 5`), so a post change affects the
one view of its (owner, cat). Events are JSON-shaped `POST /ingest` requests sent straight to
the hub over ZeroMQ (the gateway's hop is measured by the gateway's own benchmark), 70 %
UPDATE of an existing post, 20 % CREATE, 10 % DELETE (`--delete-share`), without `_00_rv` (no
commit-visibility probe: the source rows are not written, the SSP path alone is measured).

Deletes and mode `dedicated`: the rows are not written, so a DELETE event leaves in the
database the edges that a real DELETE of the row would have taken along (SurrealDB deletes a
record's edges with it, in the application's transaction). Those edges are retired and left
to the reaper at ~5 ms each: ~97 % of the retired edges of this mix (a model of it: ~300 a
second from deleted rows against ~11 a second from rows leaving a top-5), far more than it
can delete, so 'reaper queued' and 'retired rows' grow with the run. `--app-deletes` makes
each DELETE event do first what the application's DELETE would do in the database (the post
and the edges pointing at it go), so the SSP sees the database a real deployment has; the
database host pays those deletes (at 1,000 per-user tables, ~5 ms per record removed, edges
included: the application's cost in mode `dedicated`, not the SSP's).

- events/s: accepted (200) ingests per second over the run, `concurrency` requests in flight.
- latency: per view and flush, time from the arrival of the oldest change of that view at the
  hub to the commit of the transaction holding its edges (`/debug/memory` publication
  p50/p99), so it includes the throttle window.
- `--large-views N`: N more views of issue 19's class (LARGE below: every post above a
  constant with its owner's top-5 posts, constants 0..99), registered after the others
  ("large s": their registration until their edges are committed). Each post change then
  reaches many views. `--large-kind children` registers instead every user above a level
  with their own top-5 posts (CHILDREN: the shape whose rows `engine.lazy` shows from
  columns). `--ssp-root` runs the SSP of another checkout (say, the commit before
  the shared-projection engine) against the same benchmark, for a before/after pair.
- CPU table: 'reaper queued' and 'reaped' (`/debug/memory`), 'retired rows' (edges with
  `removed = true` still in the database after the drain, counted in the edge tables) and
  'app del/s' (`--app-deletes`: the application's deletes done per second; 'timed out': those
  the database did not answer within the client's timeout).
- `--reconcile-ms 0,1000`: each run again per value of `SVC_SSP_RECONCILE_MS` (the
  anti-entropy reader, `ssp.hub.reconcile`), with the ratio of each against the first
  (0: off), so its cost on the same machine in the same hour is one line.
- `--profile DIR`: a sampling profile (1 ms of CPU) of the main thread of the database
  host, the hub and each shard over the ingest window and its drain only
  (`loadtests/profhook`, toggled by SIGUSR1): per process and run, `.top` (functions by
  share of CPU) and `.folded` (stacks) in DIR; `BENCH_PROFILE_KIND=cprofile` writes
  cProfile's `.prof` instead (call counts; it inflates code making many small calls).
- naive baseline: for each event, write the source row, then re-run the affected view's query
  in SurrealDB and rewrite its edges (delete all, insert all) in one transaction; events/s and
  per-event latency of the re-run + rewrite, same concurrency.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from surrealdb import RecordID

from dbclient import Database, DbConfig, DbError, DbTimeout
from ipc.messages import request
from ipc.rpc import RpcClient
from tests.support.procs import start_db_host
from tests.support.ssp_stack import apply_schema, db_env, start_ssp

SCHEMA = """
DEFINE TABLE user SCHEMALESS;
DEFINE TABLE post SCHEMAFULL;
DEFINE FIELD owner ON post TYPE record<user>;
DEFINE FIELD cat ON post TYPE int;
DEFINE FIELD n ON post TYPE int;
DEFINE INDEX post_owner_cat ON post FIELDS owner, cat;
"""
PLAIN = "SELECT * FROM post WHERE owner = $auth.id AND cat = $cat"
TOP = PLAIN + " ORDER BY n DESC LIMIT 5"
# --large-views: issue 19's class, an unbounded list with a correlated top-5 subquery per row
# over many distinct constants (each view shows about half of the posts and, through the
# subquery, the top posts of their owners)
LARGE = ("SELECT *, (SELECT id, n FROM post WHERE owner = $parent.owner ORDER BY n DESC "
         "LIMIT 5) AS peers FROM post WHERE n > $min")
# --large-kind children: each user above a level with their own top-5 posts (the children of
# the row: engine.lazy shows them from the post columns at registration)
CHILDREN = ("SELECT *, (SELECT id, n FROM post WHERE owner = $parent.id ORDER BY n DESC "
            "LIMIT 5) AS top FROM user WHERE level > $min")
LARGE_KINDS = {"peers": LARGE, "children": CHILDREN}
POSTS_PER_USER = 5


def surql_for(cat: int) -> str:
    return TOP if cat % 2 else PLAIN


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * p))]


async def seed(db: Database, users: int) -> list[tuple[str, int, int]]:
    """Users and initial posts; returns (post key, owner index, cat)."""
    await db.query(SCHEMA)
    for i in range(0, users, 500):
        await db.query("INSERT INTO user $rows",
                       {"rows": [{"id": RecordID("user", f"u{j}"), "name": f"u{j}",
                                  "level": (j * 37) % 100}
                                 for j in range(i, min(users, i + 500))]})
    posts = []
    rng = random.Random(1)
    rows = []
    for u in range(users):
        for k in range(POSTS_PER_USER):
            key = f"p{u}_{k}"
            cat = rng.randrange(10)
            posts.append((key, u, cat))
            rows.append({"id": RecordID("post", key), "owner": RecordID("user", f"u{u}"),
                         "cat": cat, "n": rng.randrange(100)})
    for i in range(0, len(rows), 1000):
        await db.query("INSERT INTO post $rows", {"rows": rows[i:i + 1000]})
    return posts


def cpu_secs(pid: int) -> float:
    """User + system CPU seconds of `pid` so far, all its threads (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def ssp_processes(pid: int) -> dict[int, str]:
    """The SSP's processes by role: `hub` (pid itself), `shards`, `gateway` (gunicorn)."""
    out = {pid: "hub"}

    def walk(p: int) -> None:
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                kids = [int(x) for x in f.read().split()]
        except OSError:
            return
        for k in kids:
            try:
                with open(f"/proc/{k}/cmdline", "rb") as f:
                    text = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            out[k] = "shards" if "ssp.shard" in text else "gateway"
            walk(k)
    walk(pid)
    return out


def cpu_by_role(host_pid: int, procs: dict[int, str]) -> dict[str, float]:
    """CPU seconds so far per role: the database host, the SSP's roles, this client."""
    out = {"db": cpu_secs(host_pid), "client": time.process_time()}
    for pid, role in procs.items():
        out[role] = out.get(role, 0.0) + cpu_secs(pid)
    return out


def toggle_profiles(pids: list[int]) -> None:
    """Start or stop (and write) the profile of each process (loadtests/profhook)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:
            pass


async def hub_call(client: RpcClient, route: str, body: Any = None, **kw: Any) -> dict[str, Any]:
    return dict(await client.call(request(route, body, **kw), timeout=120))


async def run_ssp(host: Any, tmp: Path, shards: int, args: argparse.Namespace,
                  ref_mode: str = "dedicated", reconcile_ms: int = 1000) -> dict[str, Any]:
    ns, dbn = "bench", f"s{shards}_{uuid.uuid4().hex[:6]}"
    db = Database(DbConfig.from_env(db_env(host, ns, dbn)))
    await db.connect()
    posts = await seed(db, args.users)
    apply_schema(host, ns, dbn, "changefeed")
    ssp = start_ssp(tmp, host, ns, dbn, args.ssp_root, SVC_SSP_SHARDS=str(shards),
                    SVC_INGEST_TRANSPORT="http",
                    SVC_SSP_QUERY_UPDATE_THROTTLE_MS=str(args.throttle_ms),
                    SVC_SCHEMA_POLL_SECS="0", SVC_SSP_REF_MODE=ref_mode,
                    SVC_SSP_RECONCILE_MS=str(reconcile_ms))
    client: RpcClient | None = None
    try:
        await ssp.wait_ready(timeout=600)
        client = RpcClient(ssp.hub_endpoint)
        # Register the views, `concurrency` at a time.
        t0 = time.perf_counter()
        todo = [(u, c) for u in range(args.users) for c in range(args.views_per_user)]
        sem = asyncio.Semaphore(32)

        async def reg(u: int, c: int) -> None:
            async with sem:
                r = await hub_call(client, "POST /view/register", {  # type: ignore[arg-type]
                    "id": f"query:u{u}c{c}", "surql": surql_for(c), "clientId": "bench",
                    "ttl": "1h", "params": {"auth_id": f"user:u{u}", "cat": c}})
                assert r["status"] == 200, r
        await asyncio.gather(*(reg(u, c) for u, c in todo))
        reg_secs = time.perf_counter() - t0
        # the large views last (their own timing): constants 0..99 drawn at random
        t_large = time.perf_counter()
        crng = random.Random(7)

        async def reg_large(i: int) -> None:
            async with sem:
                r = await hub_call(client, "POST /view/register", {  # type: ignore[arg-type]
                    "id": f"query:large{i}", "surql": LARGE_KINDS[args.large_kind],
                    "clientId": "bench",
                    "ttl": "1h", "params": {"auth_id": f"user:u{i % args.users}",
                                            "min": crng.randrange(100)}})
                assert r["status"] == 200, r
        await asyncio.gather(*(reg_large(i) for i in range(args.large_views)))
        await drained(client)
        large_secs = time.perf_counter() - t_large
        await hub_call(client, "GET /debug/memory", query={"reset_latency": "1"})
        # Sustained ingest.
        rng = random.Random(shards)
        live = list(posts)
        seq = [0]
        ok = [0]
        busy = [0]
        app_deletes = [0]
        app_timeouts = [0]
        stop_at = time.perf_counter() + args.seconds

        def event() -> dict[str, Any]:
            roll = rng.random()
            if roll < 0.2 or len(live) < 10:
                seq[0] += 1
                key, u, cat = f"n{shards}_{seq[0]}", rng.randrange(args.users), rng.randrange(10)
                live.append((key, u, cat))
                op = "CREATE"
            elif roll < 0.2 + args.delete_share:
                key, u, cat = live.pop(rng.randrange(len(live)))
                op = "DELETE"
            else:
                key, u, cat = live[rng.randrange(len(live))]
                op = "UPDATE"
            return {"table": "post", "op": op, "id": f"post:{key}",
                    "record": {"id": f"post:{key}", "owner": f"user:u{u}", "cat": cat,
                               "n": rng.randrange(100)}}

        # Open-loop pacing when --rate is given: each sender sends every concurrency/rate s.
        interval = args.concurrency / args.rate if args.rate > 0 else 0.0

        async def sender() -> None:
            c = RpcClient(ssp.hub_endpoint)
            next_at = time.perf_counter() + rng.random() * interval
            try:
                while time.perf_counter() < stop_at:
                    if interval:
                        delay = next_at - time.perf_counter()
                        if delay > 0:
                            await asyncio.sleep(delay)
                        next_at += interval
                    ev = event()
                    if args.app_deletes and ev["op"] == "DELETE":
                        # what the application's DELETE of the row does in the database: the
                        # row goes and SurrealDB deletes the edges pointing at it with it
                        # (the benchmark never wrote the rows it creates, so the edges are
                        # named explicitly)
                        app_deletes[0] += 1
                        if not await app_delete(db, RecordID("post", ev["id"].split(":", 1)[1])):
                            app_timeouts[0] += 1
                    r = await hub_call(c, "POST /ingest", ev)
                    if r["status"] == 200:
                        ok[0] += 1
                    else:
                        busy[0] += 1
                        await asyncio.sleep(0.01)
            finally:
                c.close()
        assert ssp.process.proc is not None and host.process.proc is not None
        procs = ssp_processes(ssp.process.proc.pid)
        profiled = [host.process.proc.pid] + [p for p, r in procs.items() if r != "gateway"]
        if args.profile:
            toggle_profiles(profiled)
        cpu0 = cpu_by_role(host.process.proc.pid, procs)
        t1 = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(args.concurrency)))
        elapsed = time.perf_counter() - t1
        t2 = time.perf_counter()
        await drained(client)
        drain_s = time.perf_counter() - t2
        # CPU per 1,000 accepted events over the run and its drain (the reaper may still
        # work after it: its share is in the figures only while the run lasted)
        cpu1 = cpu_by_role(host.process.proc.pid, procs)
        if args.profile:
            toggle_profiles(profiled)
        cpu_k = {role: (cpu1[role] - cpu0.get(role, 0.0)) * 1000 / max(ok[0], 1)
                 for role in cpu1}
        mem = (await hub_call(client, "GET /debug/memory"))["body"]
        pub = mem["publication"]
        mem = (await hub_call(client, "GET /debug/memory"))["body"]
        retired: int | str = "-"
        if ref_mode == "dedicated":
            try:
                retired = await retired_rows(db, args.users)
            except DbTimeout:
                retired = "timed out"  # the database host is still working off the run
        return {"shards": shards, "ref_mode": ref_mode, "views": len(todo),
                "reconcile_ms": reconcile_ms,
                "reconciled": (mem.get("reconcile") or {}).get("views_checked", "-"),
                "register_per_s": len(todo) / reg_secs, "large_s": large_secs,
                "events_per_s": ok[0] / elapsed, "rejected_503": busy[0],
                "p50_ms": pub["latency_p50_ms"], "p99_ms": pub["latency_p99_ms"],
                "flushes": pub["flushes"], "failures": pub["failures"], "drain_s": drain_s,
                "cpu_k": cpu_k, "reaper": mem.get("reaper") or {}, "retired": retired,
                "app_deletes_per_s": app_deletes[0] / elapsed, "app_timeouts": app_timeouts[0]}
    finally:
        if client is not None:
            client.close()
        ssp.stop()
        await db.close()


async def app_delete(db: Database, post: RecordID) -> bool:
    """The application's DELETE of `post` with its edges (`--app-deletes`), retried as an
    application would when it conflicts with a flush writing the same edges; False when it
    timed out (the database host is saturated: the run goes on, the table counts them)."""
    for attempt in range(20):
        try:
            await db.query("DELETE $p<-? RETURN NONE; DELETE $p RETURN NONE", {"p": post})
            return True
        except DbTimeout:
            return False
        except DbError as e:
            if "conflict" not in str(e) or attempt == 19:
                raise
            await asyncio.sleep(0.01 * (attempt + 1))


async def retired_rows(db: Database, users: int) -> int:
    """Retired edges (`removed = true`, mode `dedicated`) still in the database: the rows the
    reaper has yet to delete, read from the edge tables themselves."""
    total = 0
    tables = [f"_00_list_ref_user_u{u}" for u in range(users)]
    for i in range(0, len(tables), 100):
        rows = await db.query_one(f"SELECT count() AS n FROM {', '.join(tables[i:i + 100])} "
                                  "WHERE removed = true GROUP ALL")
        total += rows[0]["n"] if rows else 0
    return total


async def drained(client: RpcClient, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pub = (await hub_call(client, "GET /debug/memory"))["body"]["publication"]
        if pub["pending_operations"] == 0:
            return
        await asyncio.sleep(0.2)
    raise RuntimeError("publication did not drain")


async def run_naive(host: Any, args: argparse.Namespace) -> dict[str, Any]:
    ns, dbn = "bench", f"naive_{uuid.uuid4().hex[:6]}"
    db = Database(DbConfig.from_env(db_env(host, ns, dbn)))
    await db.connect()
    try:
        posts = await seed(db, args.users)
        await db.query("DEFINE TABLE naive_edge TYPE RELATION SCHEMALESS")
        rng = random.Random(99)
        live = list(posts)
        lat: list[float] = []
        stop_at = time.perf_counter() + args.seconds
        done = [0]
        errors = [0]

        async def worker() -> None:
            while time.perf_counter() < stop_at:
                key, u, cat = live[rng.randrange(len(live))]
                owner = RecordID("user", f"u{u}")
                await db.query("UPDATE type::record('post', $k) SET n = $n",
                               {"k": key, "n": rng.randrange(100)})
                t = time.perf_counter()
                q = RecordID("_00_query", f"u{u}c{cat}")
                ids = await db.query_one(surql_for(cat).replace("$auth.id", "$o"),
                                         {"o": owner, "cat": cat})
                rows = [{"id": [q, r["id"]], "in": q, "out": r["id"]} for r in ids]
                stmts: list[tuple[str, dict[str, Any] | None]] = [
                    ("DELETE naive_edge WHERE in = $q AND out NOTINSIDE $outs",
                     {"q": q, "outs": [r["id"] for r in ids]})]
                if rows:
                    stmts.append((("INSERT RELATION INTO naive_edge $rows ON DUPLICATE KEY "
                                   "UPDATE out = $input.out"), {"rows": rows}))
                try:
                    await db.transaction(stmts)
                except DbError:
                    errors[0] += 1  # two workers rewrote one view at once
                    continue
                lat.append((time.perf_counter() - t) * 1000)
                done[0] += 1
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(args.concurrency, 16))))
        elapsed = time.perf_counter() - t0
        large_ms: float | None = 0.0
        if args.large_views:
            # the naive cost of one large view: re-run its query once (the edge rewrite not
            # counted); None when it outlasts the client's timeout
            t = time.perf_counter()
            try:
                await db.query_one(LARGE_KINDS[args.large_kind], {"min": 50})
                large_ms = (time.perf_counter() - t) * 1000
            except DbTimeout:
                large_ms = None
        return {"events_per_s": done[0] / elapsed, "p50_ms": pct(lat, 0.5),
                "p99_ms": pct(lat, 0.99), "mean_ms": statistics.fmean(lat) if lat else 0,
                "large_ms": large_ms, "timeout_s": db.config.timeout_secs}
    finally:
        await db.close()


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--views-per-user", type=int, default=10)
    p.add_argument("--seconds", type=float, default=15)
    p.add_argument("--shards", default="1,2")
    p.add_argument("--throttle-ms", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--ref-modes", default="dedicated,single",
                   help="edge publication modes to run (SVC_SSP_REF_MODE), comma-separated")
    p.add_argument("--rate", type=float, default=0,
                   help="target ingest events/s (0: as fast as the SSP accepts)")
    p.add_argument("--delete-share", type=float, default=0.1,
                   help="share of events that DELETE a post (CREATE 0.2, UPDATE the rest)")
    p.add_argument("--app-deletes", action="store_true",
                   help="before each DELETE event, delete the post and the edges pointing at "
                        "it in the database, as the application's DELETE would (its cost "
                        "lands on the database host: 'app del/s' in the CPU table)")
    p.add_argument("--large-views", type=int, default=0,
                   help="also register this many views of the large class (LARGE: a "
                        "correlated top-5 subquery per row over distinct constants)")
    p.add_argument("--large-kind", choices=sorted(LARGE_KINDS), default="peers",
                   help="peers: every post above a constant with its owner's top-5 posts; "
                        "children: every user above a level with their own top-5 posts")
    p.add_argument("--reconcile-ms", default="1000",
                   help="SVC_SSP_RECONCILE_MS values to run, comma-separated (0: the "
                        "reconciler off, the baseline of its cost)")
    p.add_argument("--ssp-root", type=Path, default=None,
                   help="run the SSP from another checkout (a 'before' figure; the "
                        "benchmark and the database host stay this checkout's)")
    p.add_argument("--profile", type=Path, default=None,
                   help="write profiles of the database host, hub and shards over each "
                        "ingest window into this directory (loadtests/profhook)")
    args = p.parse_args()
    if args.profile:
        # before any process starts: they all inherit it (loadtests/profhook/sitecustomize.py)
        args.profile.mkdir(parents=True, exist_ok=True)
        os.environ["BENCH_PROFILE_DIR"] = str(args.profile.resolve())
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT / "loadtests" / "profhook")]
            + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x])
    tmp = Path(tempfile.mkdtemp(prefix="bench-ssp-"))
    host = start_db_host(tmp, memory=True)
    try:
        results = [await run_ssp(host, tmp, int(s), args, mode, int(rec))
                   for mode in args.ref_modes.split(",") for s in args.shards.split(",")
                   for rec in args.reconcile_ms.split(",")]
        naive = await run_naive(host, args)
    finally:
        host.process.stop()
    views = args.users * args.views_per_user
    rate = f"target {args.rate:.0f}/s" if args.rate else "unpaced"
    root = args.ssp_root or ROOT
    print(f"\nSSP from {root} ({_commit(root)}); {args.large_views} large views "
          f"(`{LARGE_KINDS[args.large_kind]}`)")
    print(f"SSP benchmark: {views} views over {args.users} users, throttle "
          f"{args.throttle_ms} ms, {args.seconds:.0f} s per run, concurrency {args.concurrency}, "
          f"{rate}")
    print(f"{'run':<20} {'events/s':>10} {'p50 ms':>9} {'p99 ms':>9} {'503s':>7} "
          f"{'reg/s':>8} {'large s':>8} {'x naive':>8} {'drain s':>8} {'flushes':>8} "
          f"{'failed':>7} {'reconcile ms':>13} {'views read':>11}")
    for r in results:
        print(f"{'ssp ' + str(r['shards']) + ' sh ' + r['ref_mode']:<20} {r['events_per_s']:>10.0f} "
              f"{r['p50_ms'] or 0:>9.1f} {r['p99_ms'] or 0:>9.1f} {r['rejected_503']:>7} "
              f"{r['register_per_s']:>8.0f} {r['large_s']:>8.1f} "
              f"{r['events_per_s'] / naive['events_per_s']:>8.1f} "
              f"{r['drain_s']:>8.1f} {r['flushes']:>8} {r['failures']:>7} "
              f"{r['reconcile_ms']:>13} {r['reconciled']:>11}")
    print(f"{'naive':<20} {naive['events_per_s']:>10.0f} {naive['p50_ms']:>9.1f} "
          f"{naive['p99_ms']:>9.1f} {'-':>7} {'-':>8} {'-':>8} {1.0:>8.1f}")
    roles = ["db", "hub", "shards", "gateway", "client"]
    print("CPU seconds per 1,000 accepted events (run + drain), per process; reaper queue at "
          "the end")
    print(f"{'run':<20} " + " ".join(f"{r:>8}" for r in roles)
          + f" {'total':>8} {'reaper queued':>14} {'reaped':>8} {'retired rows':>13}"
          + f" {'app del/s':>10} {'timed out':>10}")
    for r in results:
        ck = r["cpu_k"]
        print(f"{'ssp ' + str(r['shards']) + ' sh ' + r['ref_mode']:<20} "
              + " ".join(f"{ck.get(role, 0.0):>8.3f}" for role in roles)
              + f" {sum(ck.values()):>8.3f} {r['reaper'].get('queued', '-'):>14} "
              f"{r['reaper'].get('reaped', '-'):>8} {r['retired']:>13} "
              f"{r['app_deletes_per_s']:>10.0f} {r['app_timeouts']:>10}")
    recs = [int(x) for x in args.reconcile_ms.split(",")]
    if len(recs) > 1:
        # the reconciler's cost: each value against the first (give 0 first: off)
        by_rec = {(r["ref_mode"], r["shards"], r["reconcile_ms"]): r for r in results}
        for mode in args.ref_modes.split(","):
            for sh in args.shards.split(","):
                base = by_rec[(mode, int(sh), recs[0])]
                for rec in recs[1:]:
                    r = by_rec[(mode, int(sh), rec)]
                    print(f"{mode} {sh} sh: reconcile {rec} ms / {recs[0]} ms events/s "
                          f"{r['events_per_s'] / base['events_per_s']:.2f}, p99 "
                          f"{(r['p99_ms'] or 0) / max(base['p99_ms'] or 1, 1e-9):.2f}")
    if args.large_views:
        # a post change moves the post across the constants between its old and new `n` and
        # changes `peers` in every large view showing a post of its owner: most of them
        one = naive["large_ms"]
        took = (f"more than {naive['timeout_s']:.0f} s (the client's timeout)" if one is None
                else f"{one:,.0f} ms")
        print(f"naive with large views: one re-run of the large query takes {took} in "
              f"SurrealDB, and an event reaches most of the {args.large_views} large views "
              f"(the x naive column ignores them)")
    by = {(r["ref_mode"], r["shards"]): r for r in results if r["reconcile_ms"] == recs[-1]}
    for mode in args.ref_modes.split(","):
        one, two = by.get((mode, 1)), by.get((mode, 2))
        if one and two:
            print(f"{mode}: 2 shards / 1 shard events/s "
                  f"{two['events_per_s'] / one['events_per_s']:.2f}, p99 "
                  f"{(two['p99_ms'] or 0) / max(one['p99_ms'] or 1, 1e-9):.2f}")
    return 0


def _commit(root: Path) -> str:
    """The checkout's commit (short hash), or '?' outside git."""
    import subprocess

    try:
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # so the `finally` blocks stop the processes we started


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt)
    sys.exit(asyncio.run(main()))
