"""Admin-plane benchmark: what the admin listener costs the ingest path, and how fast its two
busiest pages answer, in one run against real processes.

    .venv/bin/python loadtests/bench_admin.py [--events 3000] [--rounds 5] [--concurrency 32]
        [--views 10000] [--users 1000] [--requests 500]

What runs (all on loopback): a database host (`--memory`), `svc-scheduler` with its admin
listener (transport http, job table `job` with 1,000 terminal rows so the job sampler reads
something) and two SSPs in scheduler mode.

1. Views: 500 real views (100 users x 5, registered through the scheduler) plus `_00_query`
   rows written directly up to `--views` in total over `--users` users; the presence sampler
   must have read them all before the latency phase.
2. Latency: `--requests` sequential GETs of `/admin/api/overview` and of
   `/admin/api/views?limit=100` (keep-alive, bearer): p50, p99, max. Target p99 <= 50 ms.
3. Ingest: `--events` row-change events POSTed to the scheduler's `/ingest` (`--concurrency`
   in flight), delivered when both SSPs applied the last one; alternately with the admin plane
   idle (no viewer: presence every 15 s, job sampler every 15 s) and with five SSE viewers
   open and read continuously (scheduler logs twice, one SSP's relayed logs, jobs stream,
   operations stream), which puts the presence and job samplers at their live cadence (2 s,
   or 20 x a sample's duration when that is longer). `--rounds` of each, alternating, each
   round started once both SSPs published every edge of the one before; medians compared.
   Target ratio (viewers / idle) >= 0.95.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "loadtests"))

from bench_scheduler import Workload, post_events, register_views, seed  # noqa: E402
from surrealdb import RecordID  # noqa: E402

from tests.support.admin_stack import (  # noqa: E402
    AUTH_SECRET,
    BREAKGLASS,
    start_scheduler,
    start_ssp,
)
from tests.support.procs import start_db_host  # noqa: E402
from tests.support.ssp_stack import apply_schema, root_db  # noqa: E402

REAL_USERS = 100
REAL_VIEWS_PER_USER = 5


async def write_query_rows(root: Any, n: int, users: int) -> None:
    """`n` `_00_query` rows as SSPs write them, for `users` users, fresh `lastActiveAt`."""
    rng = random.Random(7)
    now = datetime.now(UTC)
    rows = []
    for i in range(n):
        u = i % users
        rows.append({
            "id": RecordID("_00_query", f"direct{i}"),
            "surql": f"SELECT * FROM post WHERE owner = $auth.id AND cat = {i % 5}",
            "params": {"auth_id": f"user:b{u}"}, "clientId": f"tab-{u}-{i % 3}",
            "auth_id": RecordID("user", f"b{u}"), "lastActiveAt": now, "ttl": "1h",
            "subscribers": 1, "rowCount": rng.randrange(0, 2000), "state": "ready"})
    for k in range(0, len(rows), 1000):
        await root.query("INSERT INTO _00_query $rows RETURN NONE", {"rows": rows[k:k + 1000]})


async def write_jobs(root: Any, n: int) -> None:
    await root.query("DEFINE TABLE job SCHEMALESS")
    rows = [{"id": RecordID("job", f"j{i}"), "status": "completed" if i % 4 else "failed",
             "path": f"/work/{i % 17}", "payload": {"i": i}, "attempts": 1,
             "created_at": datetime.now(UTC), "finished_at": datetime.now(UTC)}
            for i in range(n)]
    for k in range(0, len(rows), 1000):
        await root.query("INSERT INTO job $rows RETURN NONE", {"rows": rows[k:k + 1000]})


async def timed_gets(http: aiohttp.ClientSession, url: str, token: str, n: int) -> list[float]:
    out = []
    headers = {"Authorization": f"Bearer {token}"}
    for _ in range(n):
        t = time.perf_counter()
        async with http.get(url, headers=headers) as r:
            await r.read()
            assert r.status == 200, r.status
        out.append((time.perf_counter() - t) * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


async def delivered(http: aiohttp.ClientSession, sched_url: str, ssp_urls: list[str],
                    timeout: float = 600) -> None:
    async with http.get(sched_url + "/health/snapshot") as r:
        latest = (await r.json())["latest_seq"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seqs = []
        for u in ssp_urls:
            async with http.get(u + "/debug/heartbeat",
                                headers={"Authorization": f"Bearer {AUTH_SECRET}"}) as r:
                seqs.append(int((await r.json()).get("last_seq") or 0))
        if all(s >= latest for s in seqs):
            return
        await asyncio.sleep(0.02)
    raise RuntimeError("the SSPs did not catch up")


async def settle(http: aiohttp.ClientSession, ssp_urls: list[str], timeout: float = 600) -> None:
    """Until both SSPs published every edge of the previous round: a round's database work
    must not run into the next one's measurement."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pending = 0
        for u in ssp_urls:
            async with http.get(u + "/debug/memory",
                                headers={"Authorization": f"Bearer {AUTH_SECRET}"}) as r:
                pending += int((await r.json())["publication"]["pending_operations"] or 0)
        if pending == 0:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("the SSPs did not finish publishing")


async def ingest(http: aiohttp.ClientSession, url: str, ssp_urls: list[str], w: Workload,
                 args: argparse.Namespace) -> float:
    """events/s: `--events` accepted by the scheduler and applied by both SSPs."""
    await settle(http, ssp_urls)
    t0 = time.perf_counter()
    ok, _ = await post_events(http, url, w, args.events, args.concurrency)
    assert ok == args.events
    await delivered(http, url, ssp_urls)
    return args.events / (time.perf_counter() - t0)


class Viewers:
    """Five SSE streams read continuously in the background."""

    def __init__(self, admin: str, token: str, ssp_id: str) -> None:
        self.paths = ["/admin/api/logs?source=scheduler&backfill=10",
                      "/admin/api/logs?source=scheduler&backfill=0",
                      f"/admin/api/logs?source=ssp:{ssp_id}&backfill=10",
                      "/admin/api/jobs/stream", "/admin/api/operations/stream"]
        self.admin, self.token = admin, token
        self.bytes = [0] * len(self.paths)
        self.tasks: list[asyncio.Task[None]] = []
        self.http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Viewers:
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        for i, p in enumerate(self.paths):
            self.tasks.append(asyncio.create_task(self._read(i, p)))
        await asyncio.sleep(3.0)  # connected, and the samplers moved to the live cadence
        return self

    async def _read(self, i: int, path: str) -> None:
        assert self.http is not None
        async with self.http.get(self.admin + path,
                                 headers={"Authorization": f"Bearer {self.token}"}) as r:
            assert r.status == 200, (path, r.status)
            async for chunk in r.content.iter_any():
                self.bytes[i] += len(chunk)

    async def __aexit__(self, *exc: object) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        assert self.http is not None
        await self.http.close()


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--views", type=int, default=10_000)
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--requests", type=int, default=500)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-admin-"))
    host = start_db_host(tmp, memory=True)
    ns = "bench_admin_" + uuid.uuid4().hex[:6]
    sched = None
    ssps = []
    try:
        root = await root_db(host, ns, ns)
        await seed(root, REAL_USERS)
        apply_schema(host, ns, ns)
        await write_jobs(root, 1000)
        sched = start_scheduler(tmp, host, ns, job_tables=["job"], env={
            "SVC_ADMIN_PRESENCE_INTERVAL_SECS": "15", "SVC_ADMIN_JOB_INTERVAL_SECS": "15",
            "SVC_ADMIN_JOB_LIVE_INTERVAL_SECS": "2", "SVC_LOG_LEVEL": "INFO"})
        ssps = [start_ssp(tmp, host, ns, sched) for _ in range(2)]
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
            async with http.post(sched.admin + "/admin/api/session",
                                 json={"password": BREAKGLASS}) as r:
                token = (await r.json())["token"]
            hdr = {"Authorization": f"Bearer {token}"}

            async def wait(pred: Any, what: str, timeout: float = 300) -> None:
                deadline = time.monotonic() + timeout
                while not await pred():
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"timed out: {what}")
                    await asyncio.sleep(0.2)

            async def both_ready() -> bool:
                async with http.get(sched.admin + "/admin/api/overview", headers=hdr) as r:
                    ov = await r.json()
                return sum(1 for s in ov["ssps"] if s["state"] == "ready") == 2

            await wait(both_ready, "both SSPs ready")
            ns_args = argparse.Namespace(users=REAL_USERS, views_per_user=REAL_VIEWS_PER_USER)
            t = time.perf_counter()
            await register_views(http, sched.url, ns_args)
            real = REAL_USERS * REAL_VIEWS_PER_USER
            print(f"registered {real} real views in {time.perf_counter() - t:.1f}s")
            await write_query_rows(root, max(0, args.views - real), args.users)

            async def sampled() -> bool:
                async with http.get(sched.admin + "/admin/api/presence", headers=hdr) as r:
                    pr = await r.json()
                return pr["rows_sampled"] >= args.views

            await wait(sampled, "the presence sampler read every view", 60)
            async with http.get(sched.admin + "/admin/api/presence", headers=hdr) as r:
                pr = await r.json()
            print(f"presence: {pr['live']} from {pr['rows_sampled']} rows, one sample took "
                  f"{pr['sample_duration_ms']} ms")

            lat = {}
            for name, path in (("GET /admin/api/overview", "/admin/api/overview"),
                               ("GET /admin/api/views?limit=100",
                                "/admin/api/views?limit=100")):
                await timed_gets(http, sched.admin + path, token, 20)  # warm
                lat[name] = await timed_gets(http, sched.admin + path, token, args.requests)

            ssp_urls = [s.url for s in ssps]
            w = Workload(REAL_USERS, seed=3)
            runs: dict[str, list[float]] = {"idle": [], "5 SSE viewers, live samplers": []}
            viewer_bytes = 0
            for _ in range(args.rounds):
                for mode in runs:
                    if mode == "idle":
                        runs[mode].append(await ingest(http, sched.url, ssp_urls, w, args))
                        continue
                    async with Viewers(sched.admin, token, ssps[0].ssp_id) as v:
                        runs[mode].append(await ingest(http, sched.url, ssp_urls, w, args))
                        viewer_bytes += sum(v.bytes)
            await root.close()

        print()
        print(f"latency, {args.requests} sequential requests, {args.views} views over "
              f"{args.users} users")
        print("| request | p50 ms | p99 ms | max ms | target p99 <= 50 ms |")
        print("|---|---|---|---|---|")
        for name, vals in lat.items():
            p99 = pct(vals, 0.99)
            print(f"| {name} | {pct(vals, 0.5):.1f} | {p99:.1f} | {max(vals):.1f} | "
                  f"{'met' if p99 <= 50 else 'MISSED'} |")
        print()
        print(f"ingest through the scheduler to 2 SSPs, {args.events} events x {args.rounds} "
              f"rounds, concurrency {args.concurrency} (delivered to both SSPs)")
        print("| admin plane | events/s per round | median | vs idle |")
        print("|---|---|---|---|")
        base = statistics.median(runs["idle"])
        for mode, vals in runs.items():
            med = statistics.median(vals)
            print(f"| {mode} | {', '.join(f'{v:,.0f}' for v in vals)} | {med:,.0f} | "
                  f"{med / base:.2f}x |")
        pairs = [b / a for a, b in zip(runs["idle"], runs["5 SSE viewers, live samplers"],
                                       strict=True)]
        print(f"round by round (viewers / the idle round just before): "
              f"{', '.join(f'{x:.2f}' for x in pairs)}; median {statistics.median(pairs):.2f}")
        print(f"(the viewers read {viewer_bytes:,} bytes of events; target ratio >= 0.95)")
    finally:
        for s in ssps:
            s.process.stop()
        if sched is not None:
            sched.process.stop()
        host.process.stop()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
