"""Appends per second to the scheduler WAL: one fsync per append next to group commit of 10 and
100 events per fsync, and the async GroupCommitter under concurrent callers, in one run.

    python loadtests/bench_scheduler_wal.py [--seconds N] [--dir PATH]

Every case appends the same realistic row-change event (a dozen typed fields, ~300 bytes) to a
fresh WAL in a temporary directory (``--dir`` to measure another disk) for N seconds (default
3, split over interleaved rounds, median shown). The ratio column is against the fsync-per-append baseline. Also printed: the replica's
apply rate for the events of one drain (one SQLite transaction per 1,000 events).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from surrealdb import RecordID

from scheduler.replica import Replica
from scheduler.wal import GroupCommitter, Wal


def event(i: int) -> dict[str, Any]:
    """A thread UPDATE with the kinds of values real rows carry."""
    return {
        "table": "thread", "op": "UPDATE", "id": f"thread:{i % 5000}",
        "record": {
            "id": RecordID("thread", i % 5000), "title": f"Thread number {i}",
            "body": "lorem ipsum dolor sit amet " * 4, "author": RecordID("user", i % 97),
            "score": i % 1000, "ratio": i / 7, "price": Decimal("12.50"),
            "created": datetime(2024, 5, 1, tzinfo=UTC), "uid": uuid.UUID(int=i),
            "tags": ["a", "b", i % 3], "meta": {"pinned": False, "views": i}, "_00_rv": i,
        },
    }


def run_batches(path: Path, batch: int, seconds: float) -> float:
    with Wal.open(path) as wal:
        n = 0
        start = time.perf_counter()
        end = start + seconds
        while time.perf_counter() < end:
            if batch == 1:
                wal.append(event(n))
            else:
                wal.append_many([event(n + j) for j in range(batch)])
            n += batch
        return n / (time.perf_counter() - start)


async def run_committer(path: Path, callers: int, seconds: float) -> tuple[float, float]:
    with Wal.open(path) as wal:
        gc = GroupCommitter(wal)
        count = 0
        end = time.perf_counter() + seconds

        async def caller(k: int) -> None:
            nonlocal count
            i = k
            while time.perf_counter() < end:
                await gc.submit(event(i))
                i += callers
                count += 1

        start = time.perf_counter()
        await asyncio.gather(*(caller(k) for k in range(callers)))
        elapsed = time.perf_counter() - start
        return count / elapsed, count / max(1, gc.batches)


def replica_apply_rate(tmp: Path, n: int = 20_000) -> float:
    with Wal.open(tmp / "wal-rep") as wal:
        for s in range(0, n, 1000):
            wal.append_many([event(i) for i in range(s, s + 1000)])
        with Replica.open(tmp / "replica.db") as rep:
            start = time.perf_counter()
            while rep.applied_seq < wal.last_seq:
                batch = []
                for pair in wal.replay(rep.applied_seq):
                    batch.append(pair)
                    if len(batch) == 1000:
                        break
                rep.apply(batch)
            return n / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="per case, over all rounds")
    ap.add_argument("--rounds", type=int, default=3,
                    help="cases run interleaved this many times; the median is shown")
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    each = args.seconds / args.rounds
    names = ["fsync per append", "group commit of 10", "group commit of 100",
             "GroupCommitter, 10 callers", "GroupCommitter, 100 callers"]
    rates: dict[str, list[float]] = {n: [] for n in names}
    per_fsync: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        tmp = Path(d)
        # Interleaved rounds: a shared machine's disk speed drifts; every case sees the drift.
        for r in range(args.rounds):
            rates[names[0]].append(run_batches(tmp / f"b1-{r}", 1, each))
            for b, name in ((10, names[1]), (100, names[2])):
                rates[name].append(run_batches(tmp / f"b{b}-{r}", b, each))
            for callers, name in ((10, names[3]), (100, names[4])):
                rate, per = asyncio.run(run_committer(tmp / f"gc{callers}-{r}", callers, each))
                rates[name].append(rate)
                per_fsync[name].append(per)
        apply_rate = replica_apply_rate(tmp)
    base = statistics.median(rates[names[0]])
    print(f"{'case':<34}{'appends/s':>12}{'ratio':>9}  note (median of {args.rounds} rounds)")
    for name in names:
        rate = statistics.median(rates[name])
        note = f"{statistics.median(per_fsync[name]):.1f} events/fsync" if per_fsync[name] else ""
        print(f"{name:<34}{rate:>12,.0f}{rate / base:>8.1f}x  {note}")
    print(f"{'replica apply (1,000/txn)':<34}{apply_rate:>12,.0f}{'':>9}  events/s into SQLite")


if __name__ == "__main__":
    main()
