"""SSP restart in scheduler mode: warm (snapshot + the WAL events it missed) vs cold (bootstrap
through the scheduler's proxy), alternating in one run, under writes, and a check that every
restart ends with the edges SurrealDB answers.

    .venv/bin/python loadtests/bench_ssp_start_linked.py [--rows 100000] [--users 1000]
        [--views 200] [--repeats 3] [--write-rate 200]

What runs: a database host (`python -m dbhost --memory`), one database holding `--rows` posts
over `--users` users (`loadtests/bench_ssp_start.py`'s data), `svc schema apply` (transport
changefeed: the scheduler tails the database's feed), `svc-scheduler` with its admin listener
and one SSP under ops/run's supervisor (`SVC_SSP_SNAPSHOT_DIR`, ref mode `single`, 1 shard),
and `--views` views (one per user, `SELECT * FROM post WHERE owner = $auth.id ORDER BY n
DESC LIMIT 5`) registered through the scheduler.

Each round asks the admin API for an operator restart of the SSP, `restart` (warm: the SSP
writes its snapshot on the way out and offers its position when it registers again) and
`clean` (cold: the snapshot is deleted first), alternating, while a writer changes
`--write-rate` posts a second through the database (60 % UPDATE, 20 % CREATE, 20 % DELETE).
"to Ready" is from the request to the operation's `done` (the SSP stopped, relaunched,
re-registered, loaded, verified and Ready at the scheduler); "load" is the SSP's own
registration-to-verified time (`/debug/heartbeat` `start.secs`); "views back" is from the
request until the scheduler has sent every view to the SSP again and every `_00_query` row
is `ready` (a warm start restores the views from its snapshot, `views.json`, and the
re-sending is a refresh; a cold one builds each view again and rewrites its edges); "edges
written" counts the edges whose publication `seq` is newer than any before the restart
(the writer's own changes included). After each round the writer stops and the published
edges must equal SurrealDB's answer to every view (exit 1 otherwise).

    .venv/bin/python loadtests/bench_ssp_start_linked.py --rows 20000 --views 1000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from dbclient import Database, DbConfig  # noqa: E402
from loadtests.bench_ssp_start import (  # noqa: E402
    VIEW,
    World,
    published_edges,
    seed,
    write_while_down,
)
from tests.support.admin_stack import (  # noqa: E402
    AUTH_SECRET,
    BREAKGLASS,
    start_scheduler,
    start_ssp,
)
from tests.support.procs import start_db_host  # noqa: E402
from tests.support.ssp_stack import apply_schema, db_env  # noqa: E402


async def expected(db: Database, views: int) -> set[tuple[str, str]]:
    """SurrealDB's answer to the first `views` users' view queries."""
    from surrealdb import RecordID

    from engine.values import record_id_text
    out: set[tuple[str, str]] = set()
    for u in range(views):
        rows = await db.query_one(VIEW.replace("$auth.id", "$o"), {"o": RecordID("user", f"u{u}")})
        out.update((f"_00_query:v{u}", record_id_text(r["id"])) for r in rows or [])
    return out


async def jreq(http: aiohttp.ClientSession, method: str, url: str, token: str,
               body: Any = None) -> tuple[int, Any]:
    async with http.request(method, url, json=body,
                            headers={"Authorization": f"Bearer {token}"}) as r:
        text = await r.text()
        return r.status, json.loads(text) if text else None


async def until(pred: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = await pred()
        if got:
            return got
        await asyncio.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--views", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--write-rate", type=int, default=200, help="writes per second")
    args = p.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-ssp-linked-"))
    host = start_db_host(tmp)
    ns = f"linked_{uuid.uuid4().hex[:6]}"
    db = Database(DbConfig.from_env(db_env(host, ns, ns)))
    sched = ssp = None
    ok = True
    rounds: list[dict[str, Any]] = []
    try:
        await db.connect()
        world = World(args.rows, args.users)
        await seed(db, world, args.rows)
        apply_schema(host, ns, ns, "changefeed")
        sched = start_scheduler(tmp, host, ns, env={"SVC_INGEST_TRANSPORT": "changefeed"},
                                snapshot_update_interval_secs=5, bootstrap_timeout_secs=900,
                                ready_timeout=900)  # its first clone reads every row
        ssp = start_ssp(tmp, host, ns, sched, SVC_INGEST_TRANSPORT="changefeed",
                        SVC_SSP_REF_MODE="single", SVC_SCHEMA_POLL_SECS="0",
                        SVC_SSP_QUERY_UPDATE_THROTTLE_MS="100")
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as http:
            _, sess = await jreq(http, "POST", sched.admin + "/admin/api/session", "",
                                 {"password": BREAKGLASS})
            token = sess["token"]

            async def ready() -> bool:
                _, m = await jreq(http, "GET", sched.url + "/metrics", AUTH_SECRET)
                return any(x["id"] == ssp.ssp_id and x["state"] == "ready" for x in m["ssps"])

            await until(ready, 900, "the SSP's first (cold) start")
            sem = asyncio.Semaphore(16)

            async def reg(u: int) -> None:
                async with sem:
                    status, body = await jreq(http, "POST", sched.url + "/view/register", "", {
                        "id": f"query:v{u}", "surql": VIEW, "clientId": "bench",
                        "ttl": "1h", "params": {"auth_id": f"user:u{u}"}})
                    assert status == 200, body
            await asyncio.gather(*(reg(u) for u in range(args.views)))

            async def converge() -> None:
                want = await expected(db, args.views)

                async def same() -> bool:
                    return await published_edges(db) == want
                try:
                    await until(same, 120, "edges equal SurrealDB's answer")
                except SystemExit:
                    nonlocal ok
                    ok = False
                    print("edges differ from SurrealDB's answer after a restart")

            await converge()
            for i in range(args.repeats * 2):
                mode = "restart" if i % 2 == 0 else "clean"
                stop = asyncio.Event()
                written = 0

                async def writer(stop: asyncio.Event = stop) -> None:
                    nonlocal written
                    step = max(1, args.write_rate // 10)
                    while not stop.is_set():
                        await write_while_down(db, world, step)
                        written += step
                        await asyncio.sleep(0.1)

                seq0 = await db.query_one(
                    "SELECT math::max(seq) AS s FROM _00_list_ref GROUP ALL")
                seq0 = seq0[0]["s"] if seq0 else 0
                task = asyncio.create_task(writer())
                await asyncio.sleep(0.5)
                load = os.getloadavg()[0]
                since = datetime.now(UTC)
                t0 = time.perf_counter()
                status, op = await jreq(http, "POST", sched.admin +
                                        f"/admin/api/ssps/{ssp.ssp_id}/restart", token,
                                        {"mode": mode})
                assert status == 202, op

                async def done(op: dict[str, Any] = op) -> dict[str, Any] | None:
                    _, body = await jreq(http, "GET", sched.admin + "/admin/api/operations",
                                         token)
                    o = next(x for x in body["operations"] if x["id"] == op["id"])
                    return o if o["status"] != "running" else None
                finished = await until(done, 900, f"restart {mode}")
                took = time.perf_counter() - t0
                stop.set()
                await task
                _, hb = await jreq(http, "GET", ssp.url + "/debug/heartbeat", AUTH_SECRET)
                start = hb["start"] or {}

                async def resent(since: datetime = since) -> bool:
                    n = await db.query_one(
                        "SELECT count() AS n FROM _00_query WHERE lastActiveAt > $t "
                        "AND state = 'ready' GROUP ALL", {"t": since})
                    return bool(n and n[0]["n"] >= args.views)
                await until(resent, 900, f"every view sent again after restart {mode}")
                back = time.perf_counter() - t0
                rounds.append({"mode": mode, "status": finished["status"], "secs": took,
                               "back": back, "start": start, "load": load,
                               "writes": written})
                if finished["status"] != "done":
                    ok = False
                await converge()
                fresh = await db.query_one("SELECT count() AS n FROM _00_list_ref WHERE "
                                           "seq > $s GROUP ALL", {"s": seq0})
                total = await db.query_one("SELECT count() AS n FROM _00_list_ref GROUP ALL")
                rounds[-1]["edges"] = (fresh[0]["n"] if fresh else 0,
                                       total[0]["n"] if total else 0)
    finally:
        if ssp is not None:
            ssp.process.stop()
        if sched is not None:
            sched.process.stop()
        await db.close()
        host.process.stop()

    print(f"\nSSP restart in scheduler mode: {args.rows:,} rows, {args.views:,} views, "
          f"1 shard, ~{args.write_rate} writes/s during each restart\n")
    print("| round | asked | started | to Ready s | views back s | load s | views restored "
          "| edges written / all | pages read | events caught up | writes during | load avg |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, r in enumerate(rounds, 1):
        s = r["start"]
        print(f"| {n} | {r['mode']} | {s.get('mode')} | {r['secs']:.2f} | {r['back']:.2f} | "
              f"{s.get('secs', float('nan')):.2f} | {s.get('views_restored', 0)} | "
              f"{r['edges'][0]:,} / {r['edges'][1]:,} | {s.get('pages_read', '-')} | "
              f"{s.get('events', '-')} | {r['writes']} | {r['load']:.1f} |")
    for n, r in enumerate(rounds, 1):
        if r["start"].get("phases"):
            print(f"round {n}, the warm start's phases (s): " + ", ".join(
                f"{k} {v:.2f}" for k, v in r["start"]["phases"].items()))
    warm = [r for r in rounds if r["start"].get("mode") == "warm"]
    cold = [r for r in rounds if r["start"].get("mode") == "cold"]
    if len(warm) != args.repeats or len(cold) != args.repeats:
        print("\na restart asked warm did not start warm (or a clean one not cold)")
        ok = False
    if warm and cold:
        wr = statistics.median(r["secs"] for r in warm)
        cr = statistics.median(r["secs"] for r in cold)
        wl = statistics.median(r["start"]["secs"] for r in warm)
        cl = statistics.median(r["start"]["secs"] for r in cold)
        wb = statistics.median(r["back"] for r in warm)
        cb = statistics.median(r["back"] for r in cold)
        we = statistics.median(r["edges"][0] for r in warm)
        ce = statistics.median(r["edges"][0] for r in cold)
        print("\n| median | cold | warm | cold / warm |")
        print("|---|---:|---:|---:|")
        print(f"| to Ready s | {cr:.2f} | {wr:.2f} | {cr / wr:.2f}x |")
        print(f"| views back s | {cb:.2f} | {wb:.2f} | {cb / wb:.2f}x |")
        print(f"| edges written | {ce:,.0f} | {we:,.0f} | "
              f"{ce / we if we else float('inf'):.1f}x |")
        print(f"| load s | {cl:.2f} | {wl:.2f} | {cl / wl:.2f}x |")
    print(f"\nevery restart ended with edges equal to SurrealDB's answer: "
          f"{'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
