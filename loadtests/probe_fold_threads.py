"""Probe: the scheduler's memory across WAL folds, with the fold's parts on the default thread
pool (as before) or on the replica's one thread (`CoordinatorState.in_replica_thread`).

    .venv/bin/python loadtests/probe_fold_threads.py [--folds 4] [--events 60000] [--runs 2]

What it does: per run, a child process opens a `Wal` and a `Replica` in a temporary directory
and, `--folds` times, appends `--events` UPDATE events over 20,000 rows from three writers
that each append 50 events per `asyncio.to_thread` call (the scheduler's WAL appends keep the
default pool's threads busy like that), then folds them with the scheduler's own
`Scheduler._fold` (parts of `FOLD_CHUNK` events, resting between parts). Policy `pool` runs
each part with `asyncio.to_thread`, policy `one` on a single dedicated thread, `pinned` on
one thread with glibc's mmap threshold pinned (`scheduler.malloctune`, as the scheduler
starts). The runs alternate `pool`, `one`, `pinned`, ... so a shared machine's load falls
on all alike.

After each fold it prints the child's RSS and the resident part of its malloc thread arenas
(anonymous mappings aligned to glibc's 64 MiB heap size: where a worker thread's
allocations live). Flat means: the RSS after the last fold is the RSS after the first.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HEAP_ALIGN = 64 << 20  # glibc's HEAP_MAX_SIZE on 64-bit: a thread arena's heaps are aligned to it


def memory_mb() -> tuple[float, float]:
    """(RSS, resident bytes of the thread arenas) of this process, in MB."""
    rss = arenas = 0
    aligned = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(" ", 1)[0]
            if "-" in head and not line.startswith(("Rss", "Size")) and ":" not in head:
                start = int(head.split("-")[0], 16)
                parts = line.split()
                aligned = len(parts) < 6 and start % HEAP_ALIGN == 0
            elif line.startswith("Rss:"):
                kb = int(line.split()[1])
                rss += kb
                if aligned:
                    arenas += kb
    return rss / 1024, arenas / 1024


def child(policy: str, folds: int, per_fold: int) -> None:
    sys.path.insert(0, str(ROOT))
    from engine.values import RecordID
    from scheduler.core import Scheduler
    from scheduler.replica import Replica
    from scheduler.state import CoordinatorState
    from scheduler.wal import Wal

    tmp = Path(tempfile.mkdtemp(prefix="probe-fold-threads-"))
    host: Any = type("Host", (), {})()
    host.wal, host.replica = Wal.open(tmp / "wal"), Replica.open(tmp / "replica.sqlite3")
    host.cfg = type("Cfg", (), {"wal_retain_events": 100_000})()
    host.apply_wal = CoordinatorState.apply_wal.__get__(host)
    one = ThreadPoolExecutor(1, thread_name_prefix="replica")

    async def on_one(fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(one, fn, *args)

    if policy == "pinned":
        from scheduler.malloctune import pin_mmap_threshold

        pin_mmap_threshold()  # as `python -m scheduler` does at start
    host.in_replica_thread = on_one if policy in ("one", "pinned") else asyncio.to_thread
    rng = random.Random(1)
    written = [0]

    def event() -> dict[str, Any]:
        written[0] += 1
        k = rng.randrange(20_000)
        return {"table": "post", "op": "UPDATE", "id": f"post:{k}",
                "record": {"id": RecordID("post", k), "author": RecordID("user", k % 1000),
                           "category": f"c{k % 10}", "score": rng.randrange(100),
                           "title": "x" * 120, "_00_rv": written[0]}}

    async def run() -> None:
        rss, arenas = memory_mb()
        print(f"{policy:>6} {0:>5} {rss:>8.1f} {arenas:>15.1f}  (before any event)", flush=True)
        for f in range(folds):
            goal = (f + 1) * per_fold

            async def writer(goal: int) -> None:
                while written[0] < goal:
                    await asyncio.to_thread(host.wal.append_many, [event() for _ in range(50)])

            await asyncio.gather(*(writer(goal) for _ in range(3)))
            await Scheduler._fold(host)
            rss, arenas = memory_mb()
            print(f"{policy:>6} {f + 1:>5} {rss:>8.1f} {arenas:>15.1f}", flush=True)

    asyncio.run(run())
    one.shutdown()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folds", type=int, default=4)
    p.add_argument("--events", type=int, default=60_000, help="events per fold")
    p.add_argument("--runs", type=int, default=2, help="runs of each policy, alternating")
    p.add_argument("--child", choices=["pool", "one", "pinned"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.folds, args.events)
        return 0
    print(f"{args.events:,} events per fold over 20,000 rows, {args.folds} folds; load "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'policy':>6} {'fold':>5} {'RSS MB':>8} {'thread arenas MB':>15}")
    for _ in range(args.runs):
        for policy in ("pool", "one", "pinned"):
            subprocess.run([sys.executable, __file__, "--child", policy, "--folds",
                            str(args.folds), "--events", str(args.events)], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
