"""Write-to-callback latency of the Python app client (`viewclient`) with many live views in one
process, next to a plain LIVE SELECT on the same table.

A database host and a standalone SSP (changefeed transport, edge mode dedicated) start on free
loopback ports. One record user opens VIEWS views in one Client (one connection), each
`SELECT id, n FROM post WHERE slot = $slot ORDER BY n DESC LIMIT 3` with its own slot. Then
WRITES writes, each to a random slot, are made as root one at a time; for each, the time from
the write's start to the callback of the view of that slot showing the new value, and to the
notification of a plain `LIVE SELECT * FROM post` (SDK, same process) for the same write.

Registration: the VIEWS views register by their rows (the clients' default: the user creates
the `_00_query` row, the SSP reads it from the changefeed and answers on the row). Then REG
more views are registered one at a time, alternating a row-registering Client and a
bearer-registering one (`POST /view/register` with the service's secret) of the same user,
each timed from the call to the view's first rows; the bearer path is the baseline.

    .venv/bin/python loadtests/bench_clients.py [--views 1000] [--writes 200] [--reg 100]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from surrealdb import AsyncSurreal

from tests.support.procs import start_db_host
from tests.support.ssp_stack import apply_schema, root_db, start_ssp, unique_db
from viewclient import connect

SCHEMA = """
DEFINE TABLE user SCHEMAFULL PERMISSIONS FOR select WHERE id = $auth.id;
DEFINE FIELD name ON user TYPE string;
DEFINE FIELD pass ON user TYPE string;
DEFINE ACCESS account ON DATABASE TYPE RECORD
    SIGNUP (CREATE user SET name = $name, pass = $pass)
    SIGNIN (SELECT * FROM user WHERE name = $name AND pass = $pass)
    DURATION FOR SESSION 1h;
DEFINE TABLE post SCHEMALESS PERMISSIONS FULL;
"""
QUERY = "SELECT id, n FROM post WHERE slot = $slot ORDER BY n DESC LIMIT 3"


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


SECRET = "bench-clients-secret-3f1e"


async def main(views: int, writes: int, reg: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-clients-"))
    host = start_db_host(tmp, memory=True)
    ns, db = unique_db()
    root = await root_db(host, ns, db)
    await root.query(SCHEMA)
    await root.query("FOR $i IN 0..$n { CREATE type::record('post', $i) SET slot = $i, n = 0 }",
                     {"n": views})
    apply_schema(host, ns, db)
    ssp = start_ssp(tmp, host, ns, db, SVC_SSP_QUERY_UPDATE_THROTTLE_MS="5",
                    SVC_AUTH_SECRET=SECRET, SVC_SSP_SHARDS="2")  # as measured before
    ssp.process.wait_http(f"http://127.0.0.1:{ssp.port}/health", timeout=120)
    creds = {"access": "account", "variables": {"name": "bench", "pass": "pw"}}
    probe = AsyncSurreal(host.ws_url)
    await probe.signup({"namespace": ns, "database": db, **creds})
    await probe.close()
    service = f"http://127.0.0.1:{ssp.port}"
    client = await connect(host.ws_url, ns, db, creds, service_url=service)
    by_row = await connect(host.ws_url, ns, db, creds, service_url=service)
    by_bearer = await connect(host.ws_url, ns, db, creds, service_url=service,
                              registration="bearer", service_token=SECRET)
    plain = AsyncSurreal(host.ws_url)
    await plain.signin({"username": host.user, "password": host.password})
    await plain.use(ns, db)
    try:
        t0 = time.perf_counter()
        handles = []
        for slot in range(views):
            handles.append(await client.view(QUERY, {"slot": slot}))
        reg_secs = time.perf_counter() - t0
        reg_ms: dict[str, list[float]] = {"row": [], "bearer": []}
        for i in range(reg):
            for path, c in (("row", by_row), ("bearer", by_bearer)):
                started = time.perf_counter()
                extra = await c.view(QUERY, {"slot": i % views})
                reg_ms[path].append((time.perf_counter() - started) * 1000)
                await extra.close()
        waiting: dict[tuple[int, int], asyncio.Future[float]] = {}
        plain_waiting: dict[tuple[int, int], asyncio.Future[float]] = {}

        def on_step(slot: int) -> Any:
            def cb(step: Any) -> None:
                for r in step.rows:
                    f = waiting.get((slot, r.get("n")))
                    if f is not None and not f.done():
                        f.set_result(time.perf_counter())
            return cb

        for slot, v in enumerate(handles):
            v.subscribe(on_step(slot))
        live_id = await plain.live("post")
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        plain.live_queues.setdefault(str(live_id), []).append(q)

        async def plain_reader() -> None:
            while True:
                note = await q.get()
                row = note.get("result") or {}
                f = plain_waiting.get((row.get("slot"), row.get("n")))
                if f is not None and not f.done():
                    f.set_result(time.perf_counter())

        reader = asyncio.create_task(plain_reader())
        import random
        rng = random.Random(7)
        view_ms: list[float] = []
        live_ms: list[float] = []
        loop = asyncio.get_running_loop()
        for i in range(writes):
            slot = rng.randrange(views)
            n = i + 1
            fv, fl = loop.create_future(), loop.create_future()
            waiting[(slot, n)] = fv
            plain_waiting[(slot, n)] = fl
            start = time.perf_counter()
            await root.query("UPDATE type::record('post', $s) SET n = $n", {"s": slot, "n": n})
            done_v = await asyncio.wait_for(fv, 30)
            done_l = await asyncio.wait_for(fl, 30)
            view_ms.append((done_v - start) * 1000)
            live_ms.append((done_l - start) * 1000)
        reader.cancel()
        load = os.getloadavg()
        print(f"views {views}, writes {writes}, registration {reg_secs:.1f} s "
              f"({reg_secs / views * 1000:.1f} ms/view), load {load[0]:.2f}")
        print()
        print("| path | p50 ms | p99 ms | mean ms | vs LIVE SELECT (p50) |")
        print("|---|---|---|---|---|")
        base = statistics.median(live_ms)
        for name, xs in (("plain LIVE SELECT on post (baseline)", live_ms),
                         (f"viewclient view callback ({views} views)", view_ms)):
            print(f"| {name} | {statistics.median(xs):.1f} | {pct(xs, 0.99):.1f} | "
                  f"{statistics.mean(xs):.1f} | {statistics.median(xs) / base:.2f}x |")
        if reg:
            print()
            print(f"registration, {reg} views per path, alternating")
            print()
            print("| path | p50 ms | p99 ms | mean ms | vs bearer (p50) |")
            print("|---|---|---|---|---|")
            base = statistics.median(reg_ms["bearer"])
            for name, xs in (("POST /view/register with the bearer (baseline)",
                              reg_ms["bearer"]),
                             ("_00_query row created by the user", reg_ms["row"])):
                print(f"| {name} | {statistics.median(xs):.1f} | {pct(xs, 0.99):.1f} | "
                      f"{statistics.mean(xs):.1f} | {statistics.median(xs) / base:.2f}x |")
    finally:
        await by_row.close()
        await by_bearer.close()
        await client.close()
        await plain.close()
        await root.close()
        ssp.stop()
        host.process.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--views", type=int, default=1000)
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--reg", type=int, default=100)
    a = ap.parse_args()
    asyncio.run(main(a.views, a.writes, a.reg))
