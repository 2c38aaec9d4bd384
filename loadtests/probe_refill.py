"""Windows whose rows leave: what a write costs when ordered windows refill.

    python loadtests/probe_refill.py [--rows 100000] [--views 20] [--writes 2000]
                                     [--naive 20]

A feed (`ORDER BY id DESC LIMIT 10`) loses its newest rows to deletes, a leaderboard over a
field of five values (`ORDER BY k LIMIT 10`) loses its first rows to updates that move them
to another value, and new rows arrive. Each window keeps a few dozen rows beyond what it
shows, so every few writes one refills: it walks on through the lists its registration made
(engine.rangescan.walk_keys, engine.window._walk), which outlive the writes. Printed: the
engine's CPU per write (mean, p50, p99, max over the stream, wall clock per call), and the
naive baseline measured in the same run: SurrealDB (embedded, in this process) re-running
every view of the table after a write, sampled over ``--naive`` writes and extrapolated.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

QUERIES = {
    "feed": "SELECT id, k, v FROM comment WHERE v >= $lo ORDER BY id DESC LIMIT 10",
    "board": "SELECT id, k, v FROM comment WHERE v >= $lo ORDER BY k LIMIT 10",
}


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--views", type=int, default=20, help="views of each query")
    ap.add_argument("--writes", type=int, default=2_000)
    ap.add_argument("--naive", type=int, default=20, help="writes the baseline samples")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    from surrealdb import RecordID

    from engine import ViewEngine, native
    from engine.store import rid_text

    r = random.Random(args.seed)
    rows = {i: {"id": RecordID("comment", i), "k": i % 5, "v": r.randint(0, 6)}
            for i in range(args.rows)}
    eng = ViewEngine()
    eng.load("comment", list(rows.values()))
    views: list[tuple[str, str, dict[str, Any]]] = []
    for j in range(args.views):
        for name, q in QUERIES.items():
            views.append((f"{name}{j}", q, {"lo": j % 4}))
    t = time.process_time()
    for vid, q, p in views:
        eng.register(vid, q, p)
    reg_ms = 1000 * (time.process_time() - t) / len(views)

    # the stream: deletes of a feed's newest row, moves of a board's first row, creates
    writes: list[tuple[str, Any, dict[str, Any] | None]] = []
    nxt = args.rows
    cpu: list[float] = []
    wall: list[float] = []
    for n in range(args.writes):
        x = r.random()
        if x < 0.4:
            shown = eng.result(f"feed{n % args.views}")
            rid = shown[0]["id"] if shown else RecordID("comment", r.randrange(nxt))
            op, text, row = "DELETE", rid_text(rid), None
        elif x < 0.8:
            shown = eng.result(f"board{n % args.views}")
            rid = shown[0]["id"] if shown else RecordID("comment", r.randrange(nxt))
            row = {"id": rid, "k": r.randint(1, 4), "v": r.randint(0, 6)}
            op, text = "UPDATE", rid_text(rid)
        else:
            row = {"id": RecordID("comment", nxt), "k": r.randint(0, 4), "v": r.randint(0, 6)}
            op, text = "CREATE", rid_text(row["id"])
            nxt += 1
        c = time.process_time()
        w = time.perf_counter()
        eng.ingest("comment", op, text, row)
        wall.append(1e3 * (time.perf_counter() - w))
        cpu.append(1e3 * (time.process_time() - c))
        writes.append((op, rid if row is None else row["id"], row))

    naive_ms = float("nan")
    if args.naive:
        naive_ms = _naive(rows, writes, views, args.naive, args.rows)
    mean = sum(cpu) / len(cpu)
    print(f"probe_refill: {args.rows:,} comments, {len(views)} views ({args.views} feeds, "
          f"{args.views} boards), {args.writes:,} writes, engine "
          f"{'compiled' if native.compiled() else 'pure Python'}; registration "
          f"{reg_ms:.1f} ms CPU a view")
    print(f"{'':<28} {'ms/write':>10} {'p50':>8} {'p99':>8} {'max':>8} {'x engine':>9}")
    print(f"{'engine (CPU)':<28} {mean:>10.3f} {pct(cpu, .5):>8.3f} {pct(cpu, .99):>8.3f} "
          f"{max(cpu):>8.2f} {1.0:>9.1f}")
    print(f"{'engine (wall per call)':<28} {sum(wall) / len(wall):>10.3f} {pct(wall, .5):>8.3f} "
          f"{pct(wall, .99):>8.3f} {max(wall):>8.2f} {'':>9}")
    print(f"{'naive: SurrealDB re-runs':<28} {naive_ms:>10.1f} {'':>8} {'':>8} {'':>8} "
          f"{naive_ms / mean:>9.0f}")
    return 0


def _naive(rows: dict[int, dict[str, Any]], writes: list[Any],
           views: list[tuple[str, str, dict[str, Any]]], n: int, total: int) -> float:
    """CPU ms per write of SurrealDB re-running every view after a write: the base rows
    loaded into an embedded database, the first ``n`` writes applied, each followed by
    two of the views (one of each query), scaled to all views."""
    from tests.engine.judge import Judge

    j = Judge(tables=["comment"])
    try:
        vals = list(rows.values())[:total]
        for i in range(0, len(vals), 1000):  # one INSERT of >1,000 rows degrades on mem://
            j.run("INSERT INTO comment $rows", {"rows": vals[i:i + 1000]})
        spent = 0.0
        for op, rid, row in writes[:n]:
            j.write("comment", op, rid, row)
            t = time.process_time()
            for _vid, q, p in views[:2]:
                j.query(q, p)
            spent += time.process_time() - t
        return 1e3 * spent / n * (len(views) / 2)
    finally:
        j.close()


if __name__ == "__main__":
    sys.exit(main())
