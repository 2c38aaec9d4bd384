"""Job runner benchmark: jobs/s through a no-op backend at concurrency 1, 8 and 32, in one run.

    .venv/bin/python loadtests/bench_jobs.py [--jobs 1000] [--concurrency 1,8,32] [--shards 1]

What runs: a database host (`python -m dbhost --memory`), a no-op backend (aiohttp in this
process, answers `{}` at once) and, per concurrency level, a fresh database with one job table
and a real `python -m ssp` (changefeed transport) whose `SVC_JOB_CONFIG` gives that table the
concurrency. Once the SSP is ready, `--jobs` pending rows are written in one INSERT; the SSP
learns of them through its changefeed and runs them (claim UPDATE, POST, completion UPDATE).

- jobs/s: jobs / (time from the INSERT until every row reads `completed`); the claim,
  the call and the outcome write of every job are inside that window.
- max in flight: the most concurrent calls the backend saw (must not exceed the level).
- ratio: jobs/s against concurrency 1 of the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aiohttp import web

from dbclient import Database, DbConfig
from tests.support.procs import free_port, start_db_host
from tests.support.ssp_stack import apply_schema, db_env, start_ssp


class NoopBackend:
    def __init__(self) -> None:
        self.port = free_port()
        self.calls = 0
        self.inflight = 0
        self.max_inflight = 0
        self.runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.Response:
        self.calls += 1
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            await request.read()
            return web.json_response({})
        finally:
            self.inflight -= 1

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


async def one_level(host, tmp: Path, backend: NoopBackend, level: int, jobs: int,
                    shards: int) -> dict[str, float]:
    ns, db = "bench", "jobs_" + uuid.uuid4().hex[:8]
    root = Database(DbConfig.from_env(db_env(host, ns, db)))
    await root.connect()
    await root.query("DEFINE TABLE job SCHEMALESS")
    apply_schema(host, ns, db)
    cfg = {"job_tables": {"bench": {"name": "job", "base_url": f"http://127.0.0.1:{backend.port}",
                                    "auth_token": "bench-token", "concurrency": level}}}
    ssp = start_ssp(tmp, host, ns, db, SVC_JOB_CONFIG=json.dumps(cfg),
                    SVC_SSP_SHARDS=str(shards), SVC_AUTH_SECRET="bench-secret")
    try:
        await ssp.wait_ready()
        backend.max_inflight = 0
        rows = [{"id": f"j{i:06d}", "status": "pending", "path": "/noop",
                 "payload": {"i": i}, "created_at": i} for i in range(jobs)]
        t0 = time.perf_counter()
        await root.query("INSERT INTO job $rows RETURN NONE", {"rows": rows})
        while True:
            got = await root.query_one(
                "SELECT count() AS n FROM job WHERE status = 'completed' GROUP ALL")
            done = got[0]["n"] if got else 0
            if done >= jobs:
                break
            await asyncio.sleep(0.02)
        secs = time.perf_counter() - t0
        return {"level": level, "jobs": jobs, "secs": secs, "rate": jobs / secs,
                "max_inflight": backend.max_inflight}
    finally:
        ssp.stop()
        await root.close()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--shards", type=int, default=1)
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        host = start_db_host(tmp, memory=True)
        backend = NoopBackend()
        await backend.start()
        try:
            results = [await one_level(host, tmp, backend, lv, args.jobs, args.shards)
                       for lv in levels]
        finally:
            await backend.stop()
            host.process.stop()
    base = results[0]["rate"]
    print(f"\njobs through a no-op backend ({args.jobs} jobs per level, one SSP process)\n")
    print(f"{'concurrency':>11} {'seconds':>8} {'jobs/s':>8} {'ratio':>6} {'max in flight':>14}")
    for r in results:
        print(f"{r['level']:>11} {r['secs']:>8.2f} {r['rate']:>8.1f} {r['rate'] / base:>6.2f} "
              f"{r['max_inflight']:>14}")


if __name__ == "__main__":
    asyncio.run(main())
