"""Registration cost per shape at full table sizes (20k threads, products), nothing else.

    python loadtests/probe_register.py [--mix random|forum|shop] [--seeds 21,22]
                                       [--views N] [--only S03] [--profile FILE]

``bench_mixes.py`` registers each shape's views and then feeds writes; this probe only
registers, so the full sizes of issue 33's registration target (any view over 20k rows in at
most 50 ms, p99) take seconds, not minutes. Per shape: the views registered in one engine of
their own (the shape's views as ``bench_mixes`` draws them, at most ``--views``), their
CPU ms p50 / p99 / max, the first view's cost (a new materialisation) and the rest's; then
every seed's worst. ``--profile FILE`` writes a cProfile of the registrations of the
``--only`` shapes (run it on the pure-Python engine for a readable profile).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT), str(ROOT / "loadtests")):
    if p not in sys.path:
        sys.path.insert(0, p)

import bench_mixes as bm  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mix", default="random", choices=["random", "forum", "shop"])
    ap.add_argument("--seeds", default="21,22,23,53190,71975")
    ap.add_argument("--views", type=int, default=40, help="views per shape at most")
    ap.add_argument("--only", default="")
    ap.add_argument("--profile", default="")
    args = ap.parse_args(argv)
    import engine  # noqa: F401
    from engine import QueryRejected, ViewEngine, native

    with open("/proc/loadavg", encoding="ascii") as f:
        load_avg = " ".join(f.read().split()[:3])
    print(f"probe_register: mix {args.mix}, full sizes, engine "
          f"{'compiled' if native.compiled() else 'pure Python'}, load average {load_avg}")
    only = set(args.only.split(",")) if args.only else None
    # CPU time, not wall: other processes on a shared machine would be billed to whatever
    # function was running when the scheduler switched away
    prof = cProfile.Profile(time.process_time) if args.profile else None
    worst: list[tuple[float, int, str]] = []
    for seed in (int(x) for x in args.seeds.split(",")):
        shapes = (bm.forum_shapes() if args.mix == "forum" else bm.shop_shapes()
                  if args.mix == "shop" else bm.random_shapes(seed, 12))
        d = bm.make_data(bm.FULL, seed)
        base = bm.snapshot(d)
        assigned = bm.assign_views(shapes, bm.FULL.views, d)
        print(f"\n=== seed {seed}: rows " + ", ".join(f"{t} {len(r):,}" for t, r in base.items()))
        print(f"{'shape':<6} {'views':>5} {'first ms':>9} {'p50':>7} {'p99':>7} {'max':>7}  kind")
        seed_worst = (0.0, seed, "")
        for sh in shapes:
            if only and sh.name not in only:
                continue
            eng = ViewEngine()
            bm.load(eng, base)
            gc.collect()
            ms: list[float] = []
            err = ""
            for vid, (surql, params) in assigned[sh.name][:args.views]:
                if prof is not None:
                    prof.enable()
                c = time.process_time()
                try:
                    eng.register(vid, surql, params)
                except QueryRejected as exc:
                    err = str(exc)
                    break
                finally:
                    if prof is not None:
                        prof.disable()
                ms.append(1000 * (time.process_time() - c))
            if err:
                print(f"{sh.name:<6} rejected: {err[:80]}")
                continue
            print(f"{sh.name:<6} {len(ms):5} {ms[0]:9.1f} {bm.pct(ms, 0.5):7.1f} "
                  f"{bm.pct(ms, 0.99):7.1f} {max(ms):7.1f}  {sh.kind}")
            sys.stdout.flush()
            if max(ms) > seed_worst[0]:
                seed_worst = (max(ms), seed, f"{sh.name} [{sh.kind}]")
            del eng
            gc.collect()
        worst.append(seed_worst)
    print("\n=== worst registration per seed (CPU ms)")
    for ms_, seed, what in worst:
        print(f"{seed:<6} {ms_:8.1f}  {what}")
    if prof is not None:
        prof.dump_stats(args.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
