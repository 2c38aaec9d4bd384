"""Memory of 1,000 views over the full tables (issue 33: under 1.5 GB), and who owns it.

    python loadtests/probe_memory.py [--mix forum|shop|random] [--seed 21] [--writes 5000]
                                     [--views 1000] [--trace [--pure]] [--top 15]
                                     [--per-shape]

One engine, one process: the rows of ``bench_mixes``' full sizes (20k threads, 100k comments,
20k products, 50k orders, ...) loaded bare, then the mix's views registered (``--views``,
drawn as ``bench_mixes`` draws them), then ``--writes`` writes fed one by one; RSS after
each stage.

RSS after the load is not a clean baseline for the views: memory the generator freed is
reused by what registration allocates. ``--views 0`` runs the same process without views
(the same generator, load and writes): its final RSS is the baseline. ``--trace`` runs under
``tracemalloc`` (slower; its own bookkeeping inflates RSS) and gives the exact Python heap
per stage (``traced``) and the source lines that own the most of what registration and the
writes added; with ``--pure`` (the engine from its sources), since a compiled module's
allocations are billed to its Python caller.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT), str(ROOT / "loadtests")):
    if p not in sys.path:
        sys.path.insert(0, p)

import bench_mixes as bm  # noqa: E402


def top_owners(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, n: int) -> None:
    """The ``n`` source lines whose live allocations grew most between two snapshots."""
    keep = [tracemalloc.Filter(False, tracemalloc.__file__)]
    stats = after.filter_traces(keep).compare_to(before.filter_traces(keep), "lineno")
    total = sum(s.size_diff for s in stats)
    print(f"    {'MiB':>8} {'blocks':>10}  owner (net {total / 2**20:,.1f} MiB)")
    for s in stats[:n]:
        fr = s.traceback[0]
        name = "/".join(Path(fr.filename).parts[-2:])
        print(f"    {s.size_diff / 2**20:8.1f} {s.count_diff:10,}  {name}:{fr.lineno}")


def register_per_shape(eng: Any, shapes: list[Any], views: list[Any], trace: bool,
                       ) -> tuple[list[float], str]:
    """Register the views shape by shape; print each shape's views' RSS (and traced heap)
    growth, with its query (RSS deltas under-count when freed memory is reused)."""
    reg: list[float] = []
    rejected = ""
    print(f"\n  {'shape':<6} {'views':>5} {'+ RSS MiB':>9}"
          + (f" {'+ traced':>9}" if trace else "") + "  query")
    for sh in shapes:
        mine = [v for v in views if v[0].split("-")[0] == sh.name]
        gc.collect()
        r0, t0 = bm.rss_mib(), tracemalloc.get_traced_memory()[0] if trace else 0
        ms, _, rej = bm.register_all(eng, mine)
        reg += ms
        rejected = rejected or rej
        gc.collect()
        t = f" {(tracemalloc.get_traced_memory()[0] - t0) / 2**20:9.1f}" if trace else ""
        print(f"  {sh.name:<6} {len(mine):5} {bm.rss_mib() - r0:9.1f}{t}  {sh.surql[:110]}")
    return reg, rejected


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mix", default="forum", choices=["random", "forum", "shop"])
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--views", type=int, default=bm.FULL.views)
    ap.add_argument("--writes", type=int, default=bm.FULL.writes)
    ap.add_argument("--trace", action="store_true", help="tracemalloc owners per stage")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--per-shape", action="store_true",
                    help="register shape by shape, printing what each one's views added")
    ap.add_argument("--pure", action="store_true",
                    help="the engine from its sources (tracemalloc sees no compiled lines)")
    args = ap.parse_args(argv)
    if args.pure:
        # the compiled build is looked up under sys.prefix (engine.native.home): pointing
        # it elsewhere, in this process only and before the first import, hides it
        sys.prefix = "/nonexistent"
    from engine import ViewEngine, native

    with open("/proc/loadavg", encoding="ascii") as f:
        load_avg = " ".join(f.read().split()[:3])
    print(f"probe_memory: mix {args.mix}, seed {args.seed}, full sizes, engine "
          f"{'compiled' if native.compiled() else 'pure Python'}, "
          f"{'tracemalloc on, ' if args.trace else ''}load average {load_avg}")
    rss0 = bm.rss_mib()
    shapes = (bm.forum_shapes() if args.mix == "forum" else bm.shop_shapes()
              if args.mix == "shop" else bm.random_shapes(args.seed, 12))
    d = bm.make_data(bm.FULL, args.seed)
    base: dict[str, Any] | None = bm.snapshot(d)
    assert base is not None
    assigned = bm.assign_views(shapes, args.views, d)
    views = [v for sh in shapes for v in assigned[sh.name]][:args.views]
    events = bm.make_writes(d, args.writes, bm.write_weights(shapes), args.seed + 1)
    rows = ", ".join(f"{t} {len(r):,}" for t, r in base.items())
    del d
    if args.trace:
        tracemalloc.start(1)
    eng = ViewEngine()
    bm.load(eng, base)
    base = None
    gc.collect()
    snap0 = tracemalloc.take_snapshot() if args.trace else None
    rss_rows = bm.rss_mib()
    print(f"rows: {rows}; {len(views):,} views of {len(shapes)} shapes; "
          f"{len(events):,} writes")
    def traced() -> str:
        return f" {tracemalloc.get_traced_memory()[0] / 2**20:9.0f}" if args.trace else ""

    print(f"\n{'stage':<34} {'RSS MiB':>8} {'+ MiB':>8} {'CPU s':>7}"
          + (f" {'traced MiB':>9}" if args.trace else ""))
    print(f"{'interpreter + modules':<34} {rss0:8.0f} {'':>8} {'':>7}")
    print(f"{'bare rows loaded (baseline)':<34} {rss_rows:8.0f} {rss_rows - rss0:8.0f} {'':>7}"
          + traced())
    c = time.process_time()
    if args.per_shape:
        reg, rejected = register_per_shape(eng, shapes, views, args.trace)
    else:
        reg, _, rejected = bm.register_all(eng, views)
    reg_s = time.process_time() - c
    if rejected:
        print(f"rejected: {rejected}")
        return 1
    gc.collect()
    snap1 = tracemalloc.take_snapshot() if args.trace else None
    rss_reg = bm.rss_mib()
    mats = len({id(m) for m in eng.views.values()})
    print(f"{f'{len(reg):,} views registered ({mats} mats)':<34} {rss_reg:8.0f} "
          f"{rss_reg - rss_rows:8.0f} {reg_s:7.1f}" + traced())
    cpu, _, changes, _ = bm.feed(eng, events)
    gc.collect()
    snap2 = tracemalloc.take_snapshot() if args.trace else None
    rss_w = bm.rss_mib()
    print(f"{f'after {len(events):,} writes':<34} {rss_w:8.0f} {rss_w - rss_reg:8.0f} "
          f"{cpu:7.1f}" + traced())
    reg = reg or [0.0]
    print(f"\nviews cost {rss_w - rss_rows:,.0f} MiB over the bare rows; process "
          f"{rss_w:,.0f} MiB against the 1,536 MiB target ({1536 - rss_w:+,.0f} MiB); "
          f"register p50/p99/max {bm.pct(reg, 0.5):.1f}/{bm.pct(reg, 0.99):.1f}/"
          f"{max(reg):.1f} ms CPU; {changes / max(1, len(events)):.1f} changes/write")
    if snap0 is not None and snap1 is not None and snap2 is not None:
        print("\n  registration: owners of what it kept")
        top_owners(snap0, snap1, args.top)
        print(f"\n  {len(events):,} writes: owners of what they added")
        top_owners(snap1, snap2, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
