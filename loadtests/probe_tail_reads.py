"""What the standalone SSP's changefeed tail reads per application write: every round re-reading
the whole 2 s window (before) against short rounds with sweeps apart (now).

    .venv/bin/python loadtests/probe_tail_reads.py [--rate 500] [--seconds 10] [--doorbell-ms 20]

Why (issue 31): the standalone tail (`ssp.hub.tail`) followed its feed with a cursor that
re-read the whole re-read window (2 s) on every round, so at 500 writes/s each round, woken by
the `_00_version` doorbell, brought back ~1,000 change sets it had already seen. The scheduler's
tail had been changed to read only the last 100 ms each round and to sweep the whole window
apart, at most once a second (`dbclient.feed.SweepWindow`); the SSP's then did the same. Since
2026-12-01 both read 30 ms a round and sweep every 3 s (`ssp.hub.state.FEED_SHORT_VS`,
`FEED_SWEEP_SECS`); the middle row is the 100 ms / 1 s setting.

The probe starts a real database host (`python -m dbhost --memory`), writes `--rate` single-row
UPDATEs a second to a table with a changefeed for `--seconds`, and meanwhile runs the SSP's
`FeedTail` over it (its sequencer only counts), woken every `--doorbell-ms` as the doorbell
would under that load, once with each cursor, the two runs one after the other on fresh data.
It prints per application write: the change sets the reads returned (seen ones included),
the reads, and the CPU of the reading process (the tail and the writer) and of the database
host (the writes and the reads), and the ratios; `missed` counts updates the tail never
applied (0 in both).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dbclient import Database, DbConfig  # noqa: E402
from dbclient.feed import FeedCursor  # noqa: E402
from ssp.hub import state as hub_state  # noqa: E402
from ssp.hub.tail import FeedTail  # noqa: E402
from tests.support.procs import start_db_host  # noqa: E402

ROWS = 2000


def host_cpu_secs(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux `/proc`)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CountingDb:
    """The tail's database: the real one, with the change sets its reads return counted."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.reads = 0
        self.sets = 0

    async def changes(self, table: str | None, since: int, limit: int = 1000) -> list[Any]:
        out = await self.db.changes(table, since, limit)
        self.reads += 1
        self.sets += len(out)
        return out

    async def live(self, table: str, sink: Any) -> Any:
        return await self.db.live(table, sink)


async def one_run(cfg: DbConfig, host_pid: int, table: str, cursor: FeedCursor,
                  rate: float, seconds: float, doorbell: float) -> dict[str, float]:
    db = Database(cfg)
    await db.connect()
    await db.query(f"DEFINE TABLE {table} SCHEMALESS CHANGEFEED 1h INCLUDE ORIGINAL")
    await db.query(f"FOR $i IN 0..{ROWS} {{ CREATE type::record('{table}', $i) SET n = 0 }}")
    # the creates fall out of the re-read window first: the tail then sees only the updates
    await asyncio.sleep(cursor.overlap_vs / (1 << 16) / 1000 + 0.2)
    counted = CountingDb(db)
    applied = 0

    class Sequencer:
        async def submit(self, events: list[Any], *, defer: bool = False) -> None:
            nonlocal applied
            applied += len(events)

    cursor.follow(table, (time.time_ns() // 1_000_000) << 16)
    state = SimpleNamespace(db=counted, views={}, cursor=cursor)
    tail = FeedTail(state, Sequencer(), SimpleNamespace())  # type: ignore[arg-type]
    stop = asyncio.Event()

    async def doorbell_loop() -> None:
        while not stop.is_set():
            await tail.catch_up()
            await asyncio.sleep(doorbell)

    writes = 0

    async def writer() -> None:
        nonlocal writes
        tick = 0.01
        per_tick = rate * tick
        carry = 0.0
        next_at = time.monotonic()
        while not stop.is_set():
            carry += per_tick
            n, carry = int(carry), carry - int(carry)
            for _ in range(n):
                writes += 1
                await db.query(f"UPDATE type::record('{table}', $k) SET n += 1 RETURN NONE",
                               {"k": writes % ROWS})
            next_at += tick
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    cpu0, host0 = time.process_time(), host_cpu_secs(host_pid)
    tasks = [asyncio.create_task(doorbell_loop()),
             asyncio.create_task(tail._sweep_loop(), name="changefeed-sweep"),
             asyncio.create_task(writer())]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(tasks[0], tasks[2])
    await tail.catch_up()
    tasks[1].cancel()
    await asyncio.gather(tasks[1], return_exceptions=True)
    cpu, host = time.process_time() - cpu0, host_cpu_secs(host_pid) - host0
    await db.close()
    return {"writes": writes, "applied": applied, "reads": counted.reads, "sets": counted.sets,
            "cpu_us": cpu / writes * 1e6, "host_us": host / writes * 1e6,
            "sweeps": tail.sweeps}


async def main_async(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="probe-tail-") as tmp:
        host = start_db_host(Path(tmp))
        try:
            cfg = DbConfig.from_env({"SVC_DB_URL": host.ws_url, "SVC_DB_USER": host.user,
                                     "SVC_DB_PASS": host.password, "SVC_DB_NS": "probe",
                                     "SVC_DB_NAME": "tail"})
            assert host.process.proc is not None
            pid = host.process.proc.pid
            before = FeedCursor(0, limit=hub_state.FEED_LIMIT,
                                overlap_vs=hub_state.FEED_OVERLAP_VS)
            runs = {
                "whole window each round (before)": await one_run(
                    cfg, pid, "t_before", before, args.rate, args.seconds,
                    args.doorbell_ms / 1000),
                "100 ms rounds, sweeps each 1 s": await one_run(
                    cfg, pid, "t_mid", FeedCursor(0, limit=hub_state.FEED_LIMIT,
                                                  overlap_vs=hub_state.FEED_OVERLAP_VS,
                                                  short_vs=100 << 16, sweep_secs=1.0),
                    args.rate, args.seconds, args.doorbell_ms / 1000),
                "short rounds, sweeps apart (now)": await one_run(
                    cfg, pid, "t_now", hub_state.feed_cursor(0), args.rate, args.seconds,
                    args.doorbell_ms / 1000),
            }
        finally:
            host.process.stop()
    base = runs["whole window each round (before)"]
    print(f"\nstandalone tail, {args.rate:.0f} writes/s for {args.seconds:.0f} s, woken every "
          f"{args.doorbell_ms} ms; per application write:")
    print(f"{'cursor':<36} {'writes':>7} {'missed':>6} {'sets read':>9} {'reads':>6} "
          f"{'tail CPU us':>11} {'host CPU us':>11} {'x sets':>7} {'x host':>7}")
    for name, r in runs.items():
        print(f"{name:<36} {r['writes']:>7.0f} {r['writes'] - r['applied']:>6.0f} "
              f"{r['sets'] / r['writes']:>9.1f} {r['reads'] / r['writes']:>6.2f} "
              f"{r['cpu_us']:>11.0f} {r['host_us']:>11.0f} "
              f"{(r['sets'] / r['writes']) / (base['sets'] / base['writes']):>7.2f} "
              f"{r['host_us'] / base['host_us']:>7.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=500)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--doorbell-ms", type=int, default=20)
    return asyncio.run(main_async(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
