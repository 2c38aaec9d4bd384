"""The database host's memory under `--memory` across its engine's memtable flushes.

    .venv/bin/python loadtests/probe_host_memtable.py [--txns 0] [--every 20]

Why: `svc-db --memory` runs the embedded engine on `surrealkv://<scratch>?sync=never`. Every
write lands in surrealkv's memtable, an arena that grows until it reaches a size the engine
takes from the machine's (or the cgroup's) memory and that nothing the host can pass changes
(`dbhost.scratch`). This probe shows what happens when it is full: it runs the engine
in-process and writes transactions of 1,000 UPSERTs of 3.5 KB rows (below the 4 KB value-log
threshold, so the values stay in the memtable) over the same 1,000 ids, so the data stays the
same size, and prints the process's RSS and the SST files on disk every `--every`
transactions. Measured (session 9, 1 GiB memtable): RSS rose ~3.65 MB per transaction to
1,103 MB, dipped to 432-665 MB at the first flush, was back at 1,385 MB 40 transactions
later and kept its slope through a second flush (2,845 MB after 2,660 MB written): the
flush does not give the memory back for good.
`--txns 0` (default) writes 1.6 times the memtable's size.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dbhost import scratch  # noqa: E402
from loadtests.probe_host_storage import Engine, rss_mb  # noqa: E402

ROW_BYTES = 3500
ROWS_PER_TXN = 1000


def sst_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.sst") if p.is_file()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--txns", type=int, default=0)
    p.add_argument("--every", type=int, default=20)
    args = p.parse_args(argv)
    bound = scratch.memtable_bytes()
    txns = args.txns or int(bound * 1.6 / (ROW_BYTES * ROWS_PER_TXN)) + 1
    work = Path(tempfile.mkdtemp(prefix="probe-memtable-"))
    try:
        eng = Engine(f"surrealkv://{work / 'db'}?sync=never")
        eng.run("DEFINE TABLE post SCHEMALESS")
        blob = "y" * ROW_BYTES
        print(f"memtable on this machine: {bound / 2**20:.0f} MiB "
              f"({scratch.machine_memory() / 2**30:.1f} GiB); {txns} transactions of "
              f"{ROWS_PER_TXN:,} x {ROW_BYTES:,} B")
        print(f"{'txn':>5} {'MB written':>10} {'RSS MB':>8} {'SST files':>9} {'s':>6}")
        start, peak, low_after = time.monotonic(), 0.0, None
        for k in range(txns + 1):
            if k % args.every == 0 or k == txns:
                rss, ssts = rss_mb(), len(sst_files(work))
                peak = max(peak, rss)
                if ssts:
                    low_after = rss if low_after is None else min(low_after, rss)
                print(f"{k:>5} {k * ROW_BYTES * ROWS_PER_TXN / 1e6:>10.0f} {rss:>8.1f} "
                      f"{ssts:>9} {time.monotonic() - start:>6.1f}", flush=True)
            if k < txns:
                eng.run("FOR $i IN 0..1000 { UPSERT type::record('post', $i) SET s = $s, "
                        "k = $k RETURN NONE }", {"s": blob, "k": k})
        eng.db.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"peak RSS {peak:.0f} MB; lowest once flushed {low_after or float('nan'):.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
