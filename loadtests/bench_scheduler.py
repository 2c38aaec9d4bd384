"""Scheduler benchmark: events/s from writes through the scheduler to two SSPs, for both ingest
transports, next to direct SSP ingest, in one run.

    .venv/bin/python loadtests/bench_scheduler.py [--events 20000] [--concurrency 64]
        [--users 200] [--views-per-user 5] [--only changefeed] [--feed-timeout 600]

What runs (all real processes on loopback): a database host (`--memory`), then per scenario a
fresh database seeded with `users` x 5 posts and `users` x `views-per-user` views
(`SELECT * FROM post WHERE owner = $auth.id AND cat = $cat`, so every event changes about one
view's edges):

- direct: one standalone SSP (transport http); `POST /ingest` to its HTTP gateway.
  accepted/s = delivered/s (a 200 means the SSP applied the event in memory).
- scheduler http: `svc-scheduler` + 2 SSPs in scheduler mode; `POST /ingest` to the scheduler.
  accepted/s counts the scheduler's 200s (each fsync'ed to its WAL, group commit);
  delivered/s is events / time until BOTH SSPs report the last sequence applied
  (`GET /debug/heartbeat` `last_seq`).
- scheduler changefeed: the same, but the events are written into the database (one
  CREATE/UPDATE/DELETE statement per event, `concurrency` in flight) and the scheduler tails the
  changefeed; accepted/s counts the database's commits, delivered/s runs until the tail
  finished a catch-up that started after the last commit and both SSPs applied every event up
  to there (on a timeout, `--feed-timeout`, it prints what the feed holds and what the
  scheduler read).

With `--node`, two more rows on a database host running SurrealDB's Node build
(`svc-db --engine node`), the same writes into the database both times:

- node changefeed: as "scheduler changefeed", on the Node build (so the next row has a fair
  baseline: the two builds differ in speed);
- node http events: the spec's default transport for real: `svc schema apply --transport http`
  defines events that post each change to the scheduler's `/ingest` inside the writing
  transaction; accepted/s is the database's commit rate (each commit waits for the
  scheduler's WAL), delivered/s runs until both SSPs applied the scheduler's last sequence.
  Run twice: without the commit check (`SVC_COMMIT_CHECK=false`, the baseline) and with it
  (`dbclient.commitcheck` reads every changed record back); the last line gives the ratio
  and the reads it made.

The event mix is 70 % UPDATE, 20 % CREATE, 10 % DELETE of posts. Edge publication into the
database runs behind all of this in every scenario (it is the SSP's own benchmark's subject).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from surrealdb import RecordID

from dbclient import Database, DbConfig, DbQueryError
from dbclient.feed import read_round
from tests.integration.test_scheduler_process import (
    SCRIPT,
    SchedulerProc,
    wait_ready,
    write_config,
)
from tests.support.procs import ManagedProcess, base_env, free_port, start_db_host
from tests.support.ssp_stack import apply_schema, db_env, start_ssp

SCHEMA = """
DEFINE TABLE user SCHEMALESS;
DEFINE TABLE post SCHEMALESS;
DEFINE INDEX post_owner_cat ON post FIELDS owner, cat;
"""
SURQL = "SELECT * FROM post WHERE owner = $auth.id AND cat = $cat"
POSTS_PER_USER = 5


class Workload:
    """The event stream: the same mix for every scenario (seeded)."""

    def __init__(self, users: int, seed: int) -> None:
        self.users = users
        self.rng = random.Random(seed)
        self.live = [(f"p{u}_{k}", u) for u in range(users) for k in range(POSTS_PER_USER)]
        self.n = 0

    def next(self) -> tuple[str, str, int, int]:
        roll = self.rng.random()
        if roll < 0.2 or len(self.live) < 10:
            self.n += 1
            key, u = f"n{self.n}", self.rng.randrange(self.users)
            self.live.append((key, u))
            op = "CREATE"
        elif roll < 0.3:
            key, u = self.live.pop(self.rng.randrange(len(self.live)))
            op = "DELETE"
        else:
            key, u = self.live[self.rng.randrange(len(self.live))]
            op = "UPDATE"
        return op, key, u, self.rng.randrange(5)

    def event(self) -> dict[str, Any]:
        op, key, u, cat = self.next()
        return {"table": "post", "op": op, "id": f"post:{key}",
                "record": {"id": f"post:{key}", "owner": f"user:u{u}", "cat": cat,
                           "n": self.rng.randrange(100)}}


async def seed(db: Database, users: int) -> None:
    await db.query(SCHEMA)
    await db.query("INSERT INTO user $rows", {"rows": [
        {"id": RecordID("user", f"u{u}"), "name": f"u{u}"} for u in range(users)]})
    rng = random.Random(1)
    rows = [{"id": RecordID("post", f"p{u}_{k}"), "owner": RecordID("user", f"u{u}"),
             "cat": rng.randrange(5), "n": rng.randrange(100)}
            for u in range(users) for k in range(POSTS_PER_USER)]
    for i in range(0, len(rows), 1000):
        await db.query("INSERT INTO post $rows", {"rows": rows[i:i + 1000]})


def view_body(u: int, c: int) -> dict[str, Any]:
    return {"id": f"query:u{u}c{c}", "surql": SURQL, "clientId": "bench", "ttl": "1h",
            "params": {"auth_id": f"user:u{u}", "cat": c}}


async def register_views(http: aiohttp.ClientSession, url: str, args: argparse.Namespace) -> None:
    sem = asyncio.Semaphore(16)

    async def one(u: int, c: int) -> None:
        async with sem, http.post(url + "/view/register", json=view_body(u, c)) as r:
            if r.status != 200:
                raise RuntimeError(f"register {u}/{c}: {r.status} {await r.text()}")

    await asyncio.gather(*(one(u, c) for u in range(args.users)
                           for c in range(args.views_per_user)))


async def post_events(http: aiohttp.ClientSession, url: str, w: Workload, n: int,
                      concurrency: int) -> tuple[int, float]:
    """POST n events with `concurrency` in flight; returns (answered 200, seconds)."""
    ok = [0]
    left = [n]

    async def sender() -> None:
        while left[0] > 0:
            left[0] -= 1
            ev = w.event()
            while True:
                async with http.post(url + "/ingest", json=ev) as r:
                    await r.read()
                    if r.status == 200:
                        ok[0] += 1
                        break
                    if r.status != 503:
                        raise RuntimeError(f"ingest answered {r.status}")
                await asyncio.sleep(0.01)  # not ready or publication slots full: resend

    t = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(concurrency)))
    return ok[0], time.perf_counter() - t


async def write_events(db_cfg: DbConfig, w: Workload, n: int, concurrency: int) -> float:
    """Write n row changes into the database, `concurrency` connections in flight."""
    conns = [Database(db_cfg) for _ in range(min(concurrency, 16))]
    for c in conns:
        await c.connect()
    left = [n]
    conflicts = [0]

    async def writer(c: Database) -> None:
        while left[0] > 0:
            left[0] -= 1
            op, key, u, cat = w.next()
            rid = RecordID("post", key)
            while True:
                try:
                    if op == "DELETE":
                        await c.query("DELETE $id", {"id": rid})
                    else:
                        await c.query("UPSERT $id CONTENT $c", {"id": rid, "c": {
                            "owner": RecordID("user", f"u{u}"), "cat": cat,
                            "n": w.rng.randrange(100)}})
                    break
                except DbQueryError as e:
                    # optimistic transactions: concurrent writers conflict and retry, as an
                    # application would
                    if "conflict" not in str(e).lower():
                        raise
                    conflicts[0] += 1

    t = time.perf_counter()
    try:
        await asyncio.gather(*(writer(c) for c in conns))
    finally:
        for c in conns:
            await c.close()
    if conflicts[0]:
        print(f"  ({conflicts[0]} write conflicts retried)")
    return time.perf_counter() - t


async def ssp_last_seq(http: aiohttp.ClientSession, port: int) -> int:
    async with http.get(f"http://127.0.0.1:{port}/debug/heartbeat",
                        headers={"Authorization": "Bearer bench"}) as r:
        body = await r.json()
    return int(body.get("last_seq") or 0)


async def wait_delivered(http: aiohttp.ClientSession, sched_url: str, ports: list[int],
                         timeout: float = 900) -> None:
    """Until every SSP applied the scheduler's last sequence."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        async with http.get(sched_url + "/health/snapshot") as r:
            latest = (await r.json())["latest_seq"]
        seqs = [await ssp_last_seq(http, p) for p in ports]
        if latest > 0 and all(s >= latest for s in seqs):
            return
        await asyncio.sleep(0.05)
    raise RuntimeError("SSPs did not catch up with the scheduler")


async def scheduler_latest(http: aiohttp.ClientSession, url: str) -> int:
    async with http.get(url + "/health/snapshot") as r:
        return int((await r.json())["latest_seq"])


async def changefeed_status(http: aiohttp.ClientSession, sched_url: str) -> dict[str, Any]:
    async with http.get(sched_url + "/health") as r:
        return dict((await r.json())["changefeed"])


async def feed_diagnostics(http: aiohttp.ClientSession, sched_url: str, db: Database) -> None:
    """What the database's feed holds vs what the scheduler read (printed on a timeout).

    The feed is counted with the paged database-wide reader: a plain `SHOW CHANGES FOR TABLE
    post` answers at most 1,000 entries of EVERY table, so it undercounts."""
    async with http.get(sched_url + "/health") as r:
        health = await r.json()
    cursors = {"post": 1 << 16}
    seen: dict[str, set[int]] = {}
    n = 0
    while True:
        rnd = await read_round(db, cursors, seen, limit=100_000, overlap_vs=0)
        n += sum(len(s.get("changes") or []) for _vs, _t, s in rnd.sets)
        for vs, t, _s in rnd.sets:
            seen.setdefault(t, set()).add(vs)
        if rnd.horizon is not None:
            cursors["post"] = rnd.horizon
        if not rnd.more:
            break
    print(f"  feed post: {n} changes")
    print(f"  scheduler: {health.get('scheduler')}")
    print(f"  changefeed: {health.get('changefeed')}")


async def run_direct(host: Any, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    if args.only == "changefeed":
        return {"run": "direct (skipped)", "events": 1, "accepted": 1.0, "delivered": 1.0}
    ns, name = "bench", "direct_" + uuid.uuid4().hex[:6]
    db = Database(DbConfig.from_env(db_env(host, ns, name)))
    await db.connect()
    await seed(db, args.users)
    apply_schema(host, ns, name, "changefeed")
    ssp = start_ssp(tmp, host, ns, name, SVC_SSP_SHARDS="1", SVC_INGEST_TRANSPORT="http",
                    SVC_SCHEMA_POLL_SECS="0")
    try:
        await ssp.wait_ready(timeout=600)
        url = f"http://127.0.0.1:{ssp.port}"
        async with aiohttp.ClientSession(headers={"Authorization": "Bearer bench"}) as http:
            await register_views(http, url, args)
            ok, secs = await post_events(http, url, Workload(args.users, 7), args.events,
                                         args.concurrency)
        return {"run": "direct SSP ingest (1 SSP)", "events": ok, "accepted": ok / secs,
                "delivered": ok / secs}
    finally:
        ssp.stop()
        await db.close()


async def run_scheduler(host: Any, tmp: Path, args: argparse.Namespace,
                        transport: str, label: str = "") -> dict[str, Any]:
    # the database's own events post to the scheduler (`-nocheck`: without the commit check)
    events = transport.startswith("http-events")
    check = "false" if transport.endswith("-nocheck") else "true"
    ns, name = "bench", f"sched_{transport.replace('-', '_')}_" + uuid.uuid4().hex[:6]
    env = db_env(host, ns, name)
    db = Database(DbConfig.from_env(env))
    await db.connect()
    await seed(db, args.users)
    port = free_port()
    if events:
        apply_schema(host, ns, name, "http", f"http://127.0.0.1:{port}/ingest")
    else:
        apply_schema(host, ns, name, "changefeed")
    run = tmp / name
    run.mkdir()
    cfg = write_config(run, host, ns, port, ssp_poll_interval_ms=100, heartbeat_interval_ms=1000,
                       heartbeat_timeout_ms=60_000)
    doc = yaml.safe_load(cfg.read_text())
    doc["db"]["database"] = name
    cfg.write_text(yaml.safe_dump(doc))
    # drift checks off: in the http scenario the events have no database rows behind them
    proc = ManagedProcess("svc-scheduler", [SCRIPT, "--config", str(cfg)],
                          base_env(SVC_INGEST_TRANSPORT="http" if events else transport,
                                   SVC_DRIFT_CHECK="false", SVC_COMMIT_CHECK=check,
                                   SVC_ADMIN_HOST="127.0.0.1",
                                   SVC_ADMIN_PORT=str(free_port())),
                          run / "scheduler.log").start()
    sched = SchedulerProc(proc, port, cfg, ns)
    wait_ready(sched, timeout=600)
    ssps = [start_ssp(run, host, ns, name, SVC_SCHEDULER_URL=sched.url, SVC_SSP_ID=f"b{k}",
                      SVC_INGEST_TRANSPORT="http", SVC_SSP_SHARDS="1",
                      SVC_SCHEMA_POLL_SECS="0", HEARTBEAT_INTERVAL_MS="1000")
            for k in range(2)]
    try:
        async with aiohttp.ClientSession() as http:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                async with http.get(sched.url + "/metrics") as r:
                    m = await r.json()
                if sum(1 for s in m["ssps"] if s.get("state") == "ready") == 2:
                    break
                await asyncio.sleep(0.2)
            else:
                raise RuntimeError("SSPs not ready")
            await register_views(http, sched.url, args)
            w = Workload(args.users, 7)
            before = await scheduler_latest(http, sched.url)
            t = time.perf_counter()
            if transport == "http":
                ok, secs = await post_events(http, sched.url, w, args.events, args.concurrency)
            elif events:
                # each commit waited for the scheduler's answer: every event is in its WAL
                secs = await write_events(DbConfig.from_env(env), w, args.events,
                                          args.concurrency)
                ok = args.events
            else:
                secs = await write_events(DbConfig.from_env(env), w, args.events,
                                          args.concurrency)
                ok = args.events
            if transport == "changefeed":
                # Every committed write must be in the scheduler's WAL before "delivered" can
                # count: wait for a complete catch-up of the tail that STARTED after the last
                # commit (its `cursor_ms`), then for the SSPs to apply everything up to there.
                written_ms = int(time.time() * 1000)
                deadline = time.monotonic() + args.feed_timeout
                while (await changefeed_status(http, sched.url))["cursor_ms"] < written_ms:
                    if time.monotonic() > deadline:
                        await feed_diagnostics(http, sched.url, db)
                        raise RuntimeError("the scheduler's changefeed tail did not catch up")
                    await asyncio.sleep(0.05)
                got = await scheduler_latest(http, sched.url) - before
                if got < args.events:
                    await feed_diagnostics(http, sched.url, db)
                    raise RuntimeError(f"the scheduler read {got} events for {args.events} "
                                       "writes")
            await wait_delivered(http, sched.url, [s.port for s in ssps])
            total = time.perf_counter() - t
            async with http.get(sched.url + "/health") as r:
                checked = (await r.json()).get("commit_check") or {}
        return {"run": f"{label}scheduler {transport} -> 2 SSPs", "events": ok, "accepted": ok / secs,
                "delivered": ok / total, "check": checked}
    finally:
        for s in ssps:
            s.stop()
        sched.process.stop()
        await db.close()


def print_table(rows: list[dict[str, Any]]) -> None:
    base = rows[0]["delivered"]
    print(f"{'run':34s} {'events':>8s} {'accepted/s':>11s} {'delivered/s':>12s} "
          f"{'vs direct':>10s}")
    for r in rows:
        print(f"{r['run']:34s} {r['events']:8d} {r['accepted']:11,.0f} {r['delivered']:12,.0f} "
              f"{r['delivered'] / base:9.2f}x")


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--users", type=int, default=200)
    p.add_argument("--views-per-user", type=int, default=5)
    p.add_argument("--only", choices=("changefeed",), default=None)
    p.add_argument("--node", action="store_true",
                   help="also the Node-build host: changefeed and real http events")
    p.add_argument("--feed-timeout", type=float, default=600,
                   help="seconds the scheduler may take to read every write from the feed")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        host = start_db_host(tmp)
        node_host = None
        try:
            rows = [await run_direct(host, tmp, args)]
            if args.only is None:
                rows.append(await run_scheduler(host, tmp, args, "http"))
            rows.append(await run_scheduler(host, tmp, args, "changefeed"))
            if args.node:
                node_host = start_db_host(tmp / "node", engine="node",
                                          extra_args=["--allow-net", "127.0.0.1"])
                for transport in ("changefeed", "http-events-nocheck", "http-events"):
                    rows.append(await run_scheduler(node_host, tmp, args, transport, "node "))
        finally:
            host.process.stop()
            if node_host is not None:
                node_host.process.stop()
    print(f"\nscheduler benchmark: {args.events} events, {args.users * args.views_per_user} "
          f"views over {args.users} users, concurrency {args.concurrency}")
    print_table(rows)
    if args.node:
        cf, bare, ev = rows[-3], rows[-2], rows[-1]
        print(f"node build, http events vs changefeed: accepted {ev['accepted'] / cf['accepted']:.2f}x, "
              f"delivered {ev['delivered'] / cf['delivered']:.2f}x")
        c = ev["check"]
        print(f"commit check (dbclient.commitcheck) vs none: accepted "
              f"{ev['accepted'] / bare['accepted']:.2f}x, delivered "
              f"{ev['delivered'] / bare['delivered']:.2f}x; {c.get('reads', 0)} reads for "
              f"{ev['events']} writes, {c.get('confirmed', 0)} records confirmed, "
              f"{c.get('corrected', 0)} corrected, {c.get('pending', 0)} pending")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
