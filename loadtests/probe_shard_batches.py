"""The shard's ingest path over the view mix, one write at a time against batches.

    .venv/bin/python loadtests/probe_shard_batches.py [--quick] [--sizes 1,100,2000]

An SSP shard takes what the hub's sequencer gathered (up to its `BATCH_MAX` = 2,000 events
under load), applies it with `ViewEngine.ingest_batch_groups`, turns the groups of views
sharing a delta into the reply (`engine.worker.groups_to_wire`: one wire delta per group)
and sends it as msgpack. This probe runs that path in-process over `bench_engine.py`'s view
mix (1,000 views, a fifth of them large range views with a correlated top-5 subquery) and its
20,000 writes, once per batch size, each size on an engine of its own registered the same
way. Batch size 1 (every write its own call and reply) is the baseline of the ratio column.
CPU time of the process. The reply bytes are what the hub decodes: a batch gives each view
one net delta, but materialisations that share one delta per write get deltas of their own
in a batch (2026-11-26: 9.2 MB one write per call, 13.1 MB in batches of 100, 25.9 MB in
batches of 2,000).
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_engine as bench  # noqa: E402
import msgpack  # noqa: E402

from engine import ViewEngine  # noqa: E402
from engine.gcpolicy import configure  # noqa: E402
from engine.values import record_id_text  # noqa: E402
from engine.worker import groups_to_wire  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the mix's quick sizes")
    ap.add_argument("--sizes", default="1,100,2000", help="batch sizes, comma-separated")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    configure()
    sizes = [int(x) for x in args.sizes.split(",")]
    s = bench.QUICK if args.quick else bench.FULL
    r = random.Random(args.seed + 6)
    data = bench.make_mix_data(s, r)
    views = bench.mix_views(s, r)
    work = bench.Data({t: list(rows) for t, rows in data.rows.items()}, dict(data.next_id))
    events = bench.make_writes(work, s.mix_writes, r, record_id_text)
    rows = []
    for size in sizes:
        eng = ViewEngine()
        for table, table_rows in data.rows.items():
            eng.load(table, table_rows)
        for i, (_, surql, params) in enumerate(views):
            eng.register(f"m{i}", surql, params)
        gc.collect()
        engine_cpu = 0.0
        cpu = time.process_time()
        nbytes = 0
        for i in range(0, len(events), size):
            t = time.process_time()
            groups = eng.ingest_batch_groups(events[i:i + size])
            engine_cpu += time.process_time() - t
            nbytes += len(msgpack.packb({"ok": True, "groups": groups_to_wire(groups)}))
        rows.append((size, time.process_time() - cpu, engine_cpu, nbytes))
        del eng
    base = rows[0][1]
    print(f"{len(views):,} views, {len(events):,} writes; CPU seconds of this process")
    print(f"| {'batch size':>10} | {'shard path s':>12} | {'writes/s':>9} | {'x size ' + str(sizes[0]):>9} "
          f"| {'engine s':>8} | {'reply MB':>8} |")
    print(f"|{'-' * 12}|{'-' * 14}|{'-' * 11}|{'-' * 11}|{'-' * 10}|{'-' * 10}|")
    for size, total, engine_cpu, nbytes in rows:
        print(f"| {size:>10,} | {total:12.3f} | {len(events) / total:9,.0f} | {base / total:9.2f} "
              f"| {engine_cpu:8.3f} | {nbytes / 1e6:8.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
