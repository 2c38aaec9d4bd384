"""CPU per write when one row moves inside subquery windows that many parents show.

Issue 33: a parent whose window moved is patched from the window's edit (engine.proj
``_patch``), so a write should cost the rows it changes, not the windows' sizes. Two views:
``unc`` shows every thread with one uncorrelated window of ``--window`` comments, ``cor``
ten threads each with its own window of the comments linked to it. Each write moves one
comment's votes. Run it with another checkout's interpreter for a before/after pair.

    python loadtests/probe_window_patch.py --parents 40 --window 2000 --writes 200
"""

from __future__ import annotations

import argparse
import random
import time

from surrealdb import RecordID


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parents", type=int, default=40)
    ap.add_argument("--window", type=int, default=2000)
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    from engine import ViewEngine, native

    e = ViewEngine()
    e.load("thread", [{"id": RecordID("thread", i), "score": i} for i in range(args.parents)])
    e.load("comment", [{"id": RecordID("comment", i), "thread": RecordID("thread", i % 10),
                        "votes": i} for i in range(args.window)])
    e.register("unc", "SELECT *, (SELECT id, votes FROM comment WHERE votes >= $a ORDER BY "
               "votes DESC, id) AS top FROM thread WHERE score >= $c", {"a": 0, "c": 0})
    e.register("cor", "SELECT *, (SELECT id, votes FROM comment WHERE thread = $parent.id "
               "ORDER BY votes DESC, id) AS cs FROM thread WHERE score < 10", {})
    r = random.Random(args.seed)
    changes = 0
    cpu = time.process_time()
    for _ in range(args.writes):
        i = r.randrange(args.window)
        d = e.ingest("comment", "UPDATE", f"comment:{i}", {
            "id": RecordID("comment", i), "thread": RecordID("thread", i % 10),
            "votes": r.randrange(args.window)})
        changes += sum(len(x.added) + len(x.removed) + len(x.updated) for x in d.values())
    cpu = time.process_time() - cpu
    with open("/proc/loadavg", encoding="ascii") as f:
        load = " ".join(f.read().split()[:3])
    print(f"engine {'compiled' if native.compiled() else 'pure Python'}, load {load}: "
          f"parents {args.parents}, window {args.window}: "
          f"{1e6 * cpu / args.writes:,.0f} us/write, {changes / args.writes:.1f} changes/write, "
          f"{1e6 * cpu / max(1, changes):.2f} us/change")


if __name__ == "__main__":
    main()
