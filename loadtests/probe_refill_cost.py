"""What the reaper's refill read costs: `SELECT id, in FROM <edge table> WHERE removed = true
LIMIT n`, per table size and share of retired rows, with 1,000 SSP-like tables defined.

    .venv/bin/python loadtests/probe_refill_cost.py [--tables 1000] [--rows 0,100,1000,10000]

Why: the reaper (`ssp/reaper.py`) keeps at most `MAX_QUEUED` retired edges in memory; the rest
wait in the database and a refill lists one overflowed table's retired rows at a time (and,
after a start, every edge table once). The edge tables have no index on `removed`, so a read
scans the table until it has `n` rows: this measures what that costs in the embedded engine's
CPU time (process time: other load on the machine matters less than for wall time), against
the DELETE of one edge (~5 ms with 1,000 tables, `probe_edge_removal.py`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from loadtests.probe_edge_removal import EDGE_TABLE, Engine  # noqa: E402

READ = "SELECT id, in FROM e WHERE removed = true LIMIT {n}"


def prepare(tables: int, rows: int, retired: float) -> Engine:
    """`tables` SSP-like tables and the edge table `e` with `rows` edges of 10 views, the
    first `retired` share of them retired."""
    eng = Engine()
    eng.call("use", ["t", "t"])
    stmts = [EDGE_TABLE.format(i=i) for i in range(tables)]
    for i in range(0, len(stmts), 250):
        eng.run("; ".join(stmts[i:i + 250]))
    eng.run("DEFINE TABLE q SCHEMALESS; DEFINE TABLE m SCHEMALESS; "
            "DEFINE TABLE e TYPE RELATION SCHEMALESS")
    cut = int(rows * retired)
    if rows:
        eng.run(f"FOR $i IN 0..{rows} {{ LET $q = type::record('q', $i % 10); "
                "LET $m = type::record('m', $i); "
                "RELATE $q->(type::record('e', [$q, $m]))->$m "
                f"SET seq = 1, removed = IF $i < {cut} {{ true }} ELSE {{ NONE }} }}")
    return eng


def cpu_ms(eng: Engine, text: str, reps: int = 5) -> float:
    start = time.process_time()
    for _ in range(reps):
        eng.run(text)
    return (time.process_time() - start) / reps * 1000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tables", type=int, default=1000)
    p.add_argument("--rows", default="0,100,1000,10000")
    p.add_argument("--limit", type=int, default=2000)
    args = p.parse_args(argv)
    print(f"{'rows':>7} {'retired':>8} {'read ms (CPU)':>14} {'us per row':>11} "
          f"{'found':>6}   ({args.tables} tables, LIMIT {args.limit})")
    for rows in (int(x) for x in args.rows.split(",")):
        for retired in (0.0, 0.01, 0.5) if rows else (0.0,):
            eng = prepare(args.tables, rows, retired)
            try:
                ms = cpu_ms(eng, READ.format(n=args.limit))
                found = len(eng.call("query", [READ.format(n=args.limit), {}])[0]["result"])
            finally:
                eng.close()
            print(f"{rows:>7} {retired:>8.0%} {ms:>14.2f} {ms * 1000 / max(rows, 1):>11.1f} "
                  f"{found:>6}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
