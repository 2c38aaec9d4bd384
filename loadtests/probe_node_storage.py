"""Does the database host's memory stay flat under an update-only load, per engine build and
storage? Resident memory of the engine's process over a run of single-row UPDATEs.

    .venv/bin/python loadtests/probe_node_storage.py [--writes 60000] [--rows 2000]
        [--samples 6] [--only NAME,...]

Why: with the embedded build (surrealdb-embedded, core 3.2.4) on surrealkv the host keeps
~0.74 KB per UPDATE until a memtable sized from the machine's memory (1 GiB here) flushes,
and that binding passes no storage settings (issue 31; `probe_host_storage.py`). SurrealDB's
Node build (`svc-db --engine node`, @surrealdb/node, core 3.0.x) also has RocksDB, and that
core reads its storage settings from `SURREAL_ROCKSDB_*` / `SURREAL_SURREALKV_*` environment
variables, which the host passes on to the Node engine's process. Each configuration runs in
a fresh engine (the Node ones in their own process, measured there) over a scratch directory:
`--rows` rows of a table with the changefeed synced tables get (`CHANGEFEED 1h INCLUDE
ORIGINAL`), then `--writes` single-row UPDATE transactions of a 200-byte field; RSS is
sampled `--samples` times. Printed per configuration: RSS after the rows, at each sample, KB
kept per write over the whole run and over its second half (flat: ~0 there).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import string
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dbhost.engine import Engine  # noqa: E402

MB = 1024 * 1024
# name -> (build, URL scheme, extra environment for the engine's process)
CONFIGS: dict[str, tuple[str, str, dict[str, str]]] = {
    "embedded surrealkv": ("embedded", "surrealkv", {}),
    "node surrealkv": ("node", "surrealkv", {}),
    "node rocksdb": ("node", "rocksdb", {}),
    "node rocksdb small-buffers": ("node", "rocksdb", {
        "SURREAL_ROCKSDB_WRITE_BUFFER_SIZE": str(8 * MB),
        "SURREAL_ROCKSDB_MAX_WRITE_BUFFER_NUMBER": "2",
        "SURREAL_ROCKSDB_BLOCK_CACHE_SIZE": str(32 * MB)}),
}


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


async def measure(name: str, scratch: Path, writes: int, rows: int, samples: int
                  ) -> dict[str, Any]:
    build, scheme, extra = CONFIGS[name]
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)  # the Node engine's process inherits the host's environment
    eng = Engine(f"{scheme}://{scratch / name.replace(' ', '_').replace(',', '')}",
                 node=build == "node")
    try:
        await eng.start()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    pid = eng._db._proc.pid if build == "node" else os.getpid()  # type: ignore[union-attr]
    try:
        await eng.call("use", ["p", "p"])
        await eng.query("DEFINE TABLE post SCHEMALESS CHANGEFEED 1h INCLUDE ORIGINAL")
        await eng.query(f"FOR $i IN 0..{rows} {{ CREATE type::record('post', $i) SET n = 0, "
                        "body = '' }")
        rng = random.Random(1)
        start = rss_mb(pid)
        marks = [start]
        t0 = time.perf_counter()
        step = max(1, writes // samples)
        for w in range(1, writes + 1):
            body = "".join(rng.choices(string.ascii_letters, k=200))
            await eng.query("UPDATE type::record('post', $i) SET n += 1, body = $b RETURN NONE",
                            {"i": rng.randrange(rows), "b": body})
            if w % step == 0:
                marks.append(rss_mb(pid))
        secs = time.perf_counter() - t0
    finally:
        await eng.close()
    half = marks[len(marks) // 2]
    later = writes - (len(marks) // 2) * step
    return {"name": name, "marks": marks, "per_write_kb": (marks[-1] - start) * 1e3 / writes,
            "second_half_kb": (marks[-1] - half) * 1e3 / max(later, 1),
            "writes_s": writes / secs}


async def main_async(args: argparse.Namespace) -> int:
    names = args.only.split(",") if args.only else list(CONFIGS)
    scratch = Path(tempfile.mkdtemp(prefix="probe-node-storage-"))
    try:
        results = [await measure(n, scratch, args.writes, args.rows, args.samples)
                   for n in names]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{args.writes:,} single-row UPDATEs (200-byte field) over {args.rows:,} rows, "
          f"changefeed 1h INCLUDE ORIGINAL; load {os.getloadavg()[0]:.1f}")
    print(f"{'configuration':<30} {'RSS MB at each sample (0 = after the rows)':<52} "
          f"{'KB/write':>9} {'2nd half':>9} {'writes/s':>9}")
    for r in results:
        marks = " ".join(f"{m:.0f}" for m in r["marks"])
        print(f"{r['name']:<30} {marks:<52} {r['per_write_kb']:>9.3f} "
              f"{r['second_half_kb']:>9.3f} {r['writes_s']:>9.0f}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--writes", type=int, default=60_000)
    p.add_argument("--rows", type=int, default=2_000)
    p.add_argument("--samples", type=int, default=6)
    p.add_argument("--only", default="", help="comma-separated configuration names")
    return asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
