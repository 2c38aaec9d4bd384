"""The scheduler's memory and disk while it folds its WAL into the replica.

    .venv/bin/python loadtests/probe_scheduler_fold.py [--events 150000] [--folds 6]
        [--rows 20000] [--root PATH]

What it does: opens the scheduler's own `Wal` and `Replica` in a temporary directory (no
process around them), then `--folds` times appends `--events` UPDATE events over `--rows`
rows (the events 300 s of a 500 writes/s load put in the WAL between two folds) and folds them
exactly as the scheduler does (`CoordinatorState.apply_wal`: replay the WAL into the
replica, truncate the WAL). After each fold it prints the process's resident memory, the replica's
SQLite files and the WAL directory. `--root` runs another checkout's scheduler modules (a
"before" figure; the probe stays this checkout's).

Flat means: the RSS after fold 2 is the RSS after the last fold (within a few MB), and the
replica's `-wal` file does not keep the size of the largest fold.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def size_mb(path: Path) -> float:
    if path.is_dir():
        return sum(f.stat().st_size for f in path.iterdir() if f.is_file()) / 1e6
    return path.stat().st_size / 1e6 if path.exists() else 0.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=150_000)
    p.add_argument("--folds", type=int, default=6)
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--root", type=Path, default=ROOT)
    p.add_argument("--retain", type=int, default=100_000,
                   help="events the fold keeps after the replica absorbed them (the "
                        "scheduler's SVC_WAL_RETAIN_EVENTS default; 0: truncated to the replica)")
    p.add_argument("--thread", action="store_true",
                   help="fold in a worker thread, as the scheduler does (asyncio.to_thread)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(args.root))
    from engine.values import RecordID
    from scheduler.replica import Replica
    from scheduler.state import CoordinatorState
    from scheduler.wal import Wal

    tmp = Path(tempfile.mkdtemp(prefix="probe-fold-"))
    wal = Wal.open(tmp / "wal")
    replica = Replica.open(tmp / "replica.sqlite3")
    # The fold as the scheduler runs it, on a stand-in that has only what it reads.
    fold = CoordinatorState.apply_wal
    host: Any = type("Host", (), {})()
    host.wal, host.replica = wal, replica
    # the fold keeps this many absorbed events for warm SSP restarts (an older checkout
    # reads no setting); 0 measures the fold as it was, the log truncated to the replica
    host.cfg = type("Cfg", (), {"wal_retain_events": args.retain})()
    rng = random.Random(1)
    body = "x" * 120

    def event(i: int) -> dict[str, Any]:
        k = rng.randrange(args.rows)
        return {"table": "post", "op": "UPDATE", "id": f"post:{k}",
                "record": {"id": RecordID("post", k), "author": RecordID("user", k % 1000),
                           "category": f"c{k % 10}", "score": rng.randrange(100),
                           "title": body, "_00_rv": i}}

    print(f"scheduler modules from {args.root}; {args.events:,} events per fold over "
          f"{args.rows:,} rows")
    print(f"{'fold':>4} {'RSS MB':>8} {'replica MB':>11} {'replica-wal MB':>15} "
          f"{'WAL dir MB':>11} {'fold s':>7}")
    n = 0
    for f in range(args.folds):
        for start in range(0, args.events, 500):
            wal.append_many([event(n + i) for i in range(min(500, args.events - start))])
            n += min(500, args.events - start)
        wal_dir = size_mb(tmp / "wal")
        if f == 0:
            print(f"{'0':>4} {rss_mb():>8.1f} {'(before the first fold)':>35}", flush=True)
        t = time.perf_counter()
        if args.thread:
            asyncio.run(asyncio.to_thread(fold, host))
        else:
            fold(host)
        took = time.perf_counter() - t
        print(f"{f + 1:>4} {rss_mb():>8.1f} {size_mb(tmp / 'replica.sqlite3'):>11.1f} "
              f"{size_mb(tmp / 'replica.sqlite3-wal'):>15.1f} {wal_dir:>11.1f} {took:>7.1f}",
              flush=True)
    replica.close()
    wal.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
