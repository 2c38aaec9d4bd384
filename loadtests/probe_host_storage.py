"""Memory kept per write and speed of the embedded engine's two storages, in one run.

    .venv/bin/python loadtests/probe_host_storage.py [--writes 20000] [--rows 20000]

Why: the database host kept ~1.7 KB for every value-changing UPDATE and never gave it back
(issue 31). This probe runs the engine in-process (surrealdb-embedded, core 3.2.4) on each
storage the host can use, `mem://` and `surrealkv://<scratch dir>?sync=never` (what
`svc-db --memory` uses since), and measures per storage:

- RSS kept per write transaction: `--writes` single-row UPDATE transactions on a table with
  the changefeed `svc schema apply` gives synced tables (`CHANGEFEED 1h INCLUDE ORIGINAL`),
  over `--rows` rows, resident memory before and after; the same with one transaction of 1,000
  UPDATEs (per UPDATE), and with reads only (the control);
- CPU (process time) per single-row UPDATE transaction, per 1,000-RELATE transaction (a flush
  of edges), per 1,000-row INSERT and per `SHOW CHANGES` page of 1,000 entries.

`mem://` keeps every version of every key and ~1 KB per write transaction (the Python binding
opens it with no retention, and drops any `?retention=` of a `mem://` URL); surrealkv keeps
writes in a memtable until it reaches a size the engine derives from the machine's (or the
cgroup's) memory (1 GiB with 16-64 GiB) and then flushes it to disk, where RSS drops back.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from surrealdb_embedded import SyncEmbeddedDB  # noqa: E402

from dbclient.cbor import decode, encode  # noqa: E402

_ids = itertools.count()


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


class Engine:
    def __init__(self, url: str) -> None:
        self.db = SyncEmbeddedDB(url)
        self.db.connect()
        self.call("use", ["t", "t"])

    def call(self, method: str, params: list[Any]) -> Any:
        reply = decode(self.db.execute(encode({"id": next(_ids), "method": method,
                                               "params": params})))
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["result"]

    def run(self, text: str, variables: dict[str, Any] | None = None) -> list[Any]:
        out = []
        for st in self.call("query", [text, variables or {}]):
            if st["status"] != "OK":
                raise RuntimeError(st["result"])
            out.append(st["result"])
        return out


def measure(url: str, writes: int, rows: int) -> dict[str, float]:
    eng = Engine(url)
    r: dict[str, float] = {}
    eng.run("DEFINE TABLE post SCHEMALESS CHANGEFEED 1h INCLUDE ORIGINAL; "
            "DEFINE TABLE q SCHEMALESS; DEFINE TABLE e TYPE RELATION SCHEMALESS")
    eng.run(f"FOR $i IN 0..{rows} {{ CREATE type::record('post', $i) SET n = 0, "
            "title = 'some text of the post', author = user:1 }")
    rng = random.Random(1)
    one = "UPDATE type::record('post', $i) SET n += 1 RETURN NONE"
    before, cpu = rss_mb(), time.process_time()
    for _ in range(writes):
        eng.run(one, {"i": rng.randrange(rows)})
    r["cpu_update_us"] = (time.process_time() - cpu) / writes * 1e6
    r["kept_per_txn_b"] = (rss_mb() - before) * 1e6 / writes
    before = rss_mb()
    for _ in range(max(1, writes // 1000)):
        eng.run("FOR $i IN $ids { UPDATE type::record('post', $i) SET n += 1 RETURN NONE }",
                {"ids": [rng.randrange(rows) for _ in range(1000)]})
    r["kept_per_update_in_1000_b"] = (rss_mb() - before) * 1e6 / (max(1, writes // 1000) * 1000)
    before = rss_mb()
    for _ in range(writes):
        eng.run("SELECT * FROM type::record('post', $i)", {"i": rng.randrange(rows)})
    r["kept_per_read_b"] = (rss_mb() - before) * 1e6 / writes
    cpu = time.process_time()
    for k in range(5):
        eng.run("UPSERT q:1; FOR $i IN 0..1000 { RELATE q:1->(type::record('e', [$k, $i]))->"
                "(type::record('post', $i)) SET seq = 1 RETURN NONE }", {"k": k})
    r["cpu_relate_1000_ms"] = (time.process_time() - cpu) / 5 * 1e3
    cpu = time.process_time()
    for k in range(5):
        eng.run("INSERT INTO post $rows RETURN NONE",
                {"rows": [{"id": f"i{k}_{i}", "n": i, "title": "inserted"}
                          for i in range(1000)]})
    r["cpu_insert_1000_ms"] = (time.process_time() - cpu) / 5 * 1e3
    cpu = time.process_time()
    for _ in range(5):
        eng.run("SHOW CHANGES FOR TABLE post SINCE 0 LIMIT 1000")
    r["cpu_changes_1000_ms"] = (time.process_time() - cpu) / 5 * 1e3
    eng.db.close()
    return r


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--writes", type=int, default=20_000)
    p.add_argument("--rows", type=int, default=20_000)
    args = p.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="probe-storage-"))
    try:
        results = {"mem://": measure("mem://", args.writes, args.rows),
                   "surrealkv, sync=never": measure(f"surrealkv://{scratch}/db?sync=never",
                                                    args.writes, args.rows)}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows = [("RSS kept per write transaction (B)", "kept_per_txn_b"),
            ("RSS kept per UPDATE, 1,000 per txn (B)", "kept_per_update_in_1000_b"),
            ("RSS kept per read (B), control", "kept_per_read_b"),
            ("CPU per 1-row UPDATE txn (us)", "cpu_update_us"),
            ("CPU per 1,000-RELATE txn (ms)", "cpu_relate_1000_ms"),
            ("CPU per 1,000-row INSERT (ms)", "cpu_insert_1000_ms"),
            ("CPU per SHOW CHANGES of 1,000 (ms)", "cpu_changes_1000_ms")]
    names = list(results)
    print(f"{args.writes:,} writes over {args.rows:,} rows, changefeed 1h INCLUDE ORIGINAL")
    print(f"{'':<40}" + "".join(f"{n:>24}" for n in names) + f"{'ratio':>8}")
    for label, key in rows:
        vals = [results[n][key] for n in names]
        ratio = vals[1] / vals[0] if abs(vals[0]) > 1e-9 else float("nan")
        print(f"{label:<40}" + "".join(f"{v:>24.1f}" for v in vals) + f"{ratio:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
