"""Probe: does the SSP hub's memory stay flat under a steady update-only load, and if not,
what grows? A lighter stand-in for `soak_stack.py`'s hub figures (no scheduler, no changefeed):

    .venv/bin/python loadtests/probe_hub_memory.py [--minutes 6] [--rate 1000] [--users 200]
        [--views-per-user 10] [--window 30] [--trace 8] [--ssp-root PATH] [--env NAME=VALUE]

What runs: a database host (`--memory`) and one standalone `python -m ssp` (transport http, one
shard, mode `dedicated`), `bench_ssp.py`'s data and views (`--users` users with 5 posts each,
`--views-per-user` views per user: `owner = $auth.id AND cat = $cat`, odd cats with `ORDER BY
n DESC LIMIT 5`). Then `--rate` UPDATE events per second straight to the hub (each draws a new
`n` for an existing post: no creates, no deletes, the data stays the same size).

Per window it prints the hub's RSS (anonymous part beside it), the events ingested, and with
`--trace N` (the hub alone traced, `SVC_SSP_HUB_TRACEMALLOC`, from the first window on) the
bytes traced. At the end: RSS at the end / RSS at the second window, and with `--trace` the
tracebacks that grew most between the second window and the end (tracemalloc `compare_to` by
traceback). Traced bytes flat while RSS grows: the allocator's, not a structure's.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dbclient import Database, DbConfig  # noqa: E402
from ipc.messages import request  # noqa: E402
from ipc.rpc import RpcClient  # noqa: E402
from loadtests.bench_ssp import seed, surql_for  # noqa: E402
from tests.support.procs import start_db_host  # noqa: E402
from tests.support.ssp_stack import apply_schema, db_env, start_ssp  # noqa: E402


def rss_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, RssAnon) of `pid` in kB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon"):
                out[k] = int(v.split()[0])
    return out.get("VmRSS", 0), out.get("RssAnon", 0)


async def call(client: RpcClient, route: str, body: Any = None, **kw: Any) -> dict[str, Any]:
    return dict(await client.call(request(route, body, **kw), timeout=120))


async def probe(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="probe-hub-memory-"))
    host = start_db_host(tmp, memory=True)
    ssp = None
    client: RpcClient | None = None
    try:
        ns, dbn = "probe", "hubmem"
        db = Database(DbConfig.from_env(db_env(host, ns, dbn)))
        await db.connect()
        posts = await seed(db, args.users)
        await db.close()
        apply_schema(host, ns, dbn, "changefeed")
        env = dict(SVC_INGEST_TRANSPORT="http", SVC_SSP_QUERY_UPDATE_THROTTLE_MS="100",
                   SVC_SCHEMA_POLL_SECS="0", SVC_SSP_REF_MODE="dedicated")
        if args.trace:
            env["SVC_SSP_HUB_TRACEMALLOC"] = str(args.trace)
        for item in args.env:
            name, _, value = item.partition("=")
            env[name] = value
        ssp = start_ssp(tmp, host, ns, dbn, args.ssp_root, **env)
        await ssp.wait_ready(timeout=600)
        assert ssp.process.proc is not None
        hub = ssp.process.proc.pid
        client = RpcClient(ssp.hub_endpoint)
        sem = asyncio.Semaphore(32)

        async def reg(u: int, c: int) -> None:
            async with sem:
                r = await call(client, "POST /view/register", {
                    "id": f"query:u{u}c{c}", "surql": surql_for(c), "clientId": "probe",
                    "ttl": "2h", "params": {"auth_id": f"user:u{u}", "cat": c}})
                assert r["status"] == 200, r
        await asyncio.gather(*(reg(u, c) for u in range(args.users)
                               for c in range(args.views_per_user)))
        print(f"hub memory probe: SSP from {args.ssp_root or ROOT}; {len(posts)} posts, "
              f"{args.users * args.views_per_user} views; {args.rate:.0f} updates/s for "
              f"{args.minutes:g} min; trace {args.trace} frames", flush=True)
        rng = random.Random(5)
        stop_at = time.monotonic() + args.minutes * 60
        sent = [0]

        async def sender(k: int, senders: int) -> None:
            c = RpcClient(ssp.hub_endpoint)
            interval = senders / args.rate
            next_at = time.monotonic() + k * interval / senders
            try:
                while time.monotonic() < stop_at:
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    next_at += interval
                    key, u, cat = posts[rng.randrange(len(posts))]
                    r = await call(c, "POST /ingest", {
                        "table": "post", "op": "UPDATE", "id": f"post:{key}",
                        "record": {"id": f"post:{key}", "owner": f"user:u{u}", "cat": cat,
                                   "n": rng.randrange(100)}})
                    if r["status"] == 200:
                        sent[0] += 1
            finally:
                c.close()

        rows: list[tuple[float, int, int, int, int | None]] = []
        traced: list[dict[str, Any]] = []
        await call(client, "GET /debug/memory")  # starts the hub's tracing (with --trace)

        async def sampler() -> None:
            t0 = time.monotonic()
            while time.monotonic() < stop_at:
                await asyncio.sleep(min(args.window, max(0.0, stop_at - time.monotonic())))
                mem = (await call(client, "GET /debug/memory"))["body"]
                rss, anon = rss_kb(hub)
                tr = mem.get("traced") or {}
                traced.append(tr)
                rows.append(((time.monotonic() - t0) / 60, rss, anon, sent[0], tr.get("bytes")))
                m, r, a, n, b = rows[-1]
                print(f"  min {m:5.1f}  hub RSS {r / 1024:7.1f} MB  anon {a / 1024:7.1f} MB  "
                      f"events {n:>9,}  traced "
                      f"{'-' if b is None else f'{b / 2**20:.2f} MB'}", flush=True)

        senders = 32
        await asyncio.gather(sampler(), *(sender(k, senders) for k in range(senders)))
        if len(rows) >= 3:
            base, last = rows[1], rows[-1]
            print(f"\nhub RSS from min {base[0]:.1f} to min {last[0]:.1f}: "
                  f"{base[1] / 1024:.1f} -> {last[1] / 1024:.1f} MB (x{last[1] / base[1]:.3f}), "
                  f"{(last[1] - base[1]) / 1024 / max(1e-9, last[0] - base[0]):.2f} MB/min; "
                  f"{(last[3] - base[3]) / max(1e-9, (last[0] - base[0]) * 60):.0f} events/s")
            if base[4] is not None and last[4] is not None:
                print(f"traced: {base[4] / 2**20:.2f} -> {last[4] / 2**20:.2f} MB")
            for where, size, count in (traced[-1].get("grown") or [])[:args.top]:
                print(f"  {size / 1024:+9.1f} KiB {count:+8d} blocks  " + " <- ".join(where[:5]))
        return 0
    finally:
        if client is not None:
            client.close()
        if ssp is not None:
            ssp.stop()
        host.process.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=6)
    p.add_argument("--rate", type=float, default=1000)
    p.add_argument("--users", type=int, default=200)
    p.add_argument("--views-per-user", type=int, default=10)
    p.add_argument("--window", type=float, default=30)
    p.add_argument("--trace", type=int, default=0, help="frames per traced allocation (0: off)")
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--ssp-root", type=Path, default=None)
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    return asyncio.run(probe(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
