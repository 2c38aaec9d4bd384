"""What registering a large view with a correlated top-k subquery costs, and what a columnar
path would cost (issue 19's registration target: 10,000 qualifying rows in <= 50 ms).

    .venv/bin/python loadtests/probe_columnar_topk.py [--rows 10000] [--repeat 3]

The view is the issue's class: ``SELECT *, (SELECT id, votes FROM comment WHERE thread =
$parent.id ORDER BY votes DESC LIMIT 5) AS cs FROM thread WHERE score > $min`` over
``2 * rows`` threads (half qualify) and ``10 * rows`` comments. Lines of the table:

* ``engine``: the first registration of the shape in :class:`engine.ViewEngine` (builds the
  projection: every qualifying thread's subquery, output, member tree, dependencies), the
  baseline;
* ``columns from dicts``: read the comments' ``thread``, ``votes`` and ``id`` into numpy
  arrays from the stored row dicts (what a columnar path pays when the store keeps dicts);
* ``top-k from arrays``: ``lexsort`` by (thread, votes desc, id) and the first 5 per thread
  (what it pays when the store keeps these columns as arrays);
* ``member texts``: the record-id texts of the threads and comments the view shows (the
  registration answers with them).

A line outside the columnar total shows why the arrays must be kept by the store rather than
read at registration in the engine's order:

* ``top-k, rows gathered per thread``: the same ``lexsort`` ranking over columns read from the
  rows each qualifying thread's index entry names (the order a subquery reads them in). On a
  2-core VM (2026-11-26): 92 ms, against 27 ms for reading the columns in the store's order
  and ranking them. The reads land on rows scattered over the heap (about 0.3 us each,
  against 0.05 us in order); they, not the sorting, are the cost. An engine path built this
  way (tried the same day: this ranking plus the subquery's output rows and member trees, in
  place of one subquery run per thread) took 190 ms against 191 ms for the runs it replaced,
  and was not kept.

The columnar lines compute only the members, not the projected rows the engine keeps to
maintain the view incrementally; they bound from below what a columnar registration costs.
They are checked against the engine: the same members.

The engine now registers such a view this way (``engine.lazy``): two last lines time it, the
first registration over the table (its columns built) and one with the columns kept, on an
engine of their own (the baseline runs with lazy rows off).
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

import numpy as np  # noqa: E402
from surrealdb import RecordID  # noqa: E402

import engine.lazy  # noqa: E402
from engine import ViewEngine  # noqa: E402
from engine.gcpolicy import configure  # noqa: E402

LARGE = ("SELECT *, (SELECT id, votes FROM comment WHERE thread = $parent.id "
         "ORDER BY votes DESC LIMIT 5) AS cs FROM thread WHERE score > $min")


def make_engine(rows: int, seed: int) -> ViewEngine:
    """Threads with scores 0..999 and comments with random threads and votes 0..50."""
    r = random.Random(seed)
    eng = ViewEngine()
    eng.load("thread", [{"id": RecordID("thread", i), "title": f"t{i}", "score": i % 1000}
                        for i in range(rows * 2)])
    eng.load("comment", [{"id": RecordID("comment", i),
                          "thread": RecordID("thread", r.randrange(rows * 2)),
                          "votes": r.randint(0, 50), "body": f"comment {i}"}
                         for i in range(rows * 10)])
    return eng


def columnar(eng: ViewEngine, low: int) -> tuple[dict[str, float], set[str]]:
    """The view's members computed column-wise; seconds per step."""
    took: dict[str, float] = {}
    threads = eng.store.table("thread").rows
    comments = eng.store.table("comment").rows
    n = len(comments)
    t = time.perf_counter()
    th = np.fromiter((row["thread"].id for row in comments.values()), np.int64, count=n)
    votes = np.fromiter((row["votes"] for row in comments.values()), np.int64, count=n)
    ids = np.fromiter((row["id"].id for row in comments.values()), np.int64, count=n)
    score = np.fromiter((row["score"] for row in threads.values()), np.int64,
                        count=len(threads))
    tids = np.fromiter((row["id"].id for row in threads.values()), np.int64,
                       count=len(threads))
    took["columns from dicts"] = time.perf_counter() - t
    t = time.perf_counter()
    shown = tids[score > low]
    keep = np.isin(th, shown)
    order = np.flatnonzero(keep)[np.lexsort((ids[keep], -votes[keep], th[keep]))]
    grouped = th[order]
    starts = np.r_[0, np.flatnonzero(np.diff(grouped)) + 1]
    rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    top = order[rank < 5]
    took["top-k from arrays"] = time.perf_counter() - t
    t = time.perf_counter()
    ckeys = list(comments)
    tkeys = {row["id"].id: k for k, row in threads.items()}
    members = {ckeys[i] for i in top.tolist()}
    members.update(tkeys[i] for i in shown.tolist())
    took["member texts"] = time.perf_counter() - t
    return took, members


def gathered(eng: ViewEngine, low: int) -> tuple[float, set[str]]:
    """The members ranked column-wise over rows read in index order, per qualifying thread."""
    threads = eng.store.table("thread").rows
    comments = eng.store.table("comment")
    t = time.perf_counter()
    index = comments.index("thread")
    shown = [k for k, row in threads.items() if row["score"] > low]
    rids: list[str] = []
    grp: list[int] = []
    for i, k in enumerate(shown):
        tid = threads[k]["id"]
        cands = index.get(("\0r", tid.table_name, tid.id), ())
        rids.extend(cands)
        grp.extend([i] * len(cands))
    rows = [comments.rows[r] for r in rids]
    votes = np.array([row["votes"] for row in rows], np.int64)
    ids = np.array([row["id"].id for row in rows], np.int64)
    g = np.array(grp, np.int64)
    order = np.lexsort((ids, -votes, g))
    gs = g[order]
    starts = np.r_[0, np.flatnonzero(np.diff(gs)) + 1]
    rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    members = {rids[j] for j in order[rank < 5].tolist()}
    members.update(shown)
    return time.perf_counter() - t, members


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=10_000, help="qualifying threads")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=8)
    args = ap.parse_args(argv)
    configure()
    best: dict[str, float] = {}
    lazy_min = engine.lazy.LAZY_MIN
    for _ in range(args.repeat):
        eng = make_engine(args.rows, args.seed)
        gc.collect()
        engine.lazy.LAZY_MIN = 10**9  # every row projected: the engine before lazy rows
        t = time.perf_counter()
        members = eng.register("big", LARGE, {"min": 499})
        spent = {"engine (baseline)": time.perf_counter() - t}
        engine.lazy.LAZY_MIN = lazy_min
        lz = make_engine(args.rows, args.seed)
        gc.collect()
        for label in ("engine, lazy rows + columns built", "engine, lazy rows, columns kept"):
            lz.unregister("big")
            gc.collect()
            t = time.perf_counter()
            got = lz.register("big", LARGE, {"min": 499})
            spent[label] = time.perf_counter() - t
            if got != members:
                print("the lazy members differ from the projected ones", file=sys.stderr)
                return 1
        steps, col_members = columnar(eng, 499)
        if col_members != members:
            print("the columnar members differ from the engine's", file=sys.stderr)
            return 1
        spent.update(steps)
        took, gat_members = gathered(eng, 499)
        if gat_members != members:
            print("the gathered members differ from the engine's", file=sys.stderr)
            return 1
        spent["top-k, rows gathered per thread"] = took
        for k, v in spent.items():
            best[k] = min(best.get(k, v), v)
    base = best["engine (baseline)"]
    outside = ("engine (baseline)", "top-k, rows gathered per thread",
               "engine, lazy rows + columns built", "engine, lazy rows, columns kept")
    col = sum(v for k, v in best.items() if k not in outside)
    print(f"{args.rows:,} qualifying threads, {args.rows * 10:,} comments, "
          f"{len(members):,} members; best of {args.repeat}")
    print(f"| {'step':<33} | {'ms':>8} | {'x engine':>9} |")
    print(f"|{'-' * 35}|{'-' * 10}|{'-' * 11}|")
    lines = [(k, v) for k, v in best.items() if k not in outside[1:]]
    lines += [("columnar total", col)] + [(k, best[k]) for k in outside[1:]]
    for k, v in lines:
        print(f"| {k:<33} | {v * 1000:8.1f} | {v / base:9.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
