"""Write-to-callback latency of the Python app client (`viewclient`) with many live views in one
process, next to a plain LIVE SELECT on the same table, over each ingest transport.

For each transport (`--transports`, default both) a database host and a standalone SSP (edge
mode dedicated) start on free loopback ports: `changefeed` on the embedded build (3.2.4), `http`
on SurrealDB's Node build (3.0.2, `svc-db --engine node`: its events post each change to the
SSP's /ingest inside the write). One record user opens VIEWS views in one Client (one
connection), each `SELECT id, n FROM post WHERE slot = $slot ORDER BY n DESC LIMIT 3` with its
own slot. Then WRITES writes, each to a random slot, are made as root one at a time; for each,
the time from the write's start to the callback of the view of that slot showing the new
value, and to the notification of a plain `LIVE SELECT * FROM post` (SDK, same process) for
the same write. The plain LIVE of the same transport's run is each run's baseline.

Registration: the VIEWS views register by their rows (the clients' default: the user creates
the `_00_query` row, the SSP reads it from the changefeed, or its event posts it, and answers
on the row). Then REG more views are registered one at a time, alternating a row-registering
Client and a bearer-registering one (`POST /view/register` with the service's secret) of the
same user, each timed from the call to the view's first rows; the bearer path is the baseline.

    .venv/bin/python loadtests/bench_clients.py [--views 1000] [--writes 200] [--reg 100]
        [--transports changefeed,http]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from surrealdb import AsyncSurreal

from tests.support.procs import free_port, start_db_host
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


@dataclass
class Run:
    """One transport's figures (ms)."""

    transport: str
    reg_secs: float
    live_ms: list[float]
    view_ms: list[float]
    reg_ms: dict[str, list[float]]


async def measure(transport: str, views: int, writes: int, reg: int) -> Run:
    tmp = Path(tempfile.mkdtemp(prefix="bench-clients-"))
    http = transport == "http"
    host = (start_db_host(tmp, engine="node", extra_args=["--allow-net", "127.0.0.1"]) if http
            else start_db_host(tmp, memory=True))
    ns, db = unique_db()
    root = await root_db(host, ns, db)
    await root.query(SCHEMA)
    await root.query("FOR $i IN 0..$n { CREATE type::record('post', $i) SET slot = $i, n = 0 }",
                     {"n": views})
    port = free_port()
    if http:  # the events name the SSP's /ingest and carry the bearer derived from the secret
        apply_schema(host, ns, db, "http", f"http://127.0.0.1:{port}/ingest", auth_secret=SECRET)
    else:
        apply_schema(host, ns, db)
    ssp = start_ssp(tmp, host, ns, db, SVC_SSP_QUERY_UPDATE_THROTTLE_MS="5",
                    SVC_AUTH_SECRET=SECRET, SVC_SSP_SHARDS="2",  # as measured before
                    SVC_INGEST_TRANSPORT=transport, SVC_SSP_LISTEN_ADDR=f"127.0.0.1:{port}",
                    # one user holds them all (the default limit, 100, is per user)
                    SVC_ROW_VIEWS_PER_USER=str(views + 2 * reg + 10))
    ssp.process.wait_http(f"http://127.0.0.1:{port}/health", timeout=120)
    creds = {"access": "account", "variables": {"name": "bench", "pass": "pw"}}
    probe = AsyncSurreal(host.ws_url)
    await probe.signup({"namespace": ns, "database": db, **creds})
    await probe.close()
    service = f"http://127.0.0.1:{port}"
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
        return Run(transport, reg_secs, live_ms, view_ms, reg_ms)
    finally:
        await by_row.close()
        await by_bearer.close()
        await client.close()
        await plain.close()
        await root.close()
        ssp.stop()
        host.process.stop()


def row(name: str, xs: list[float], base: float) -> str:
    return (f"| {name} | {statistics.median(xs):.1f} | {pct(xs, 0.99):.1f} | "
            f"{statistics.mean(xs):.1f} | {statistics.median(xs) / base:.2f}x |")


async def main(views: int, writes: int, reg: int, transports: list[str]) -> None:
    runs = []
    for transport in transports:
        runs.append(await measure(transport, views, writes, reg))
        print(f"{transport}: done, load {os.getloadavg()[0]:.2f}", file=sys.stderr)
    load = os.getloadavg()
    print(f"views {views}, writes {writes}, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for r in runs:
        print(f"registration by rows ({r.transport}): {r.reg_secs:.1f} s "
              f"({r.reg_secs / views * 1000:.1f} ms/view)")
    print()
    print("| transport | path | p50 ms | p99 ms | mean ms | vs its LIVE SELECT (p50) |")
    print("|---|---|---|---|---|---|")
    for r in runs:
        base = statistics.median(r.live_ms)
        for name, xs in (("plain LIVE SELECT on post (baseline)", r.live_ms),
                         (f"viewclient view callback ({views} views)", r.view_ms)):
            print(f"| {r.transport} " + row(name, xs, base))
    if reg:
        print()
        print(f"registration, {reg} views per path, alternating")
        print()
        print("| transport | path | p50 ms | p99 ms | mean ms | vs bearer (p50) |")
        print("|---|---|---|---|---|---|")
        for r in runs:
            base = statistics.median(r.reg_ms["bearer"])
            for name, xs in (("POST /view/register with the bearer (baseline)",
                              r.reg_ms["bearer"]),
                             ("_00_query row created by the user", r.reg_ms["row"])):
                print(f"| {r.transport} " + row(name, xs, base))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--views", type=int, default=1000)
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--reg", type=int, default=100)
    ap.add_argument("--transports", default="changefeed,http",
                    help="comma-separated: changefeed (embedded build), http (Node build)")
    a = ap.parse_args()
    asyncio.run(main(a.views, a.writes, a.reg, a.transports.split(",")))
