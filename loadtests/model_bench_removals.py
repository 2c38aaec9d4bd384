"""Why edges are retired in `bench_ssp.py`'s mix: a model of its events and views, no processes.

    .venv/bin/python loadtests/model_bench_removals.py [--users 1000] [--rate 3000]
        [--seconds 60] [--delete-share 0.1]

Draws events as the benchmark does (20 % CREATE, `--delete-share` DELETE, UPDATE the rest,
the same initial posts) against its views (user u, cat c: every post of (u, c) for even cats,
the top 5 by `n` for odd ones) and counts the members that leave a view, by cause: the row was
deleted (a real database deletes that edge with the row, in the application's transaction)
or the row still exists and left the view (an edge only the SSP's reaper deletes), with how
many of the latter came back (revived, not deleted) and how many were still out at the end.

Found (session 9, 1,000 users, 3,000 events/s, 60 s): 18,006 members left with their row and
657 left a top 5 while their row stayed (11 a second); 453 of those came back; 204 were still
out at the end. So in the benchmark, which writes no rows, ~97 % of dedicated's retired edges
are edges a real deployment's database would already have deleted.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from loadtests.bench_ssp import POSTS_PER_USER  # noqa: E402

View = tuple[int, int]  # (user, cat)


def members(posts: dict[str, tuple[int, int, int]], keys: set[str], cat: int) -> set[str]:
    """The view's members among `keys` (its posts): all of them, or the top 5 by `n`."""
    if cat % 2 == 0:
        return set(keys)
    return {k for _, k in sorted(((posts[k][2], k) for k in keys), reverse=True)[:5]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--rate", type=int, default=3000)
    p.add_argument("--seconds", type=int, default=60)
    p.add_argument("--delete-share", type=float, default=0.1)
    args = p.parse_args(argv)
    seed_rng = random.Random(1)  # as bench_ssp.seed
    posts: dict[str, tuple[int, int, int]] = {}  # key -> (user, cat, n)
    for u in range(args.users):
        for i in range(POSTS_PER_USER):
            posts[f"p{u}_{i}"] = (u, seed_rng.randrange(10), seed_rng.randrange(100))
    by_view: dict[View, set[str]] = {}
    for key, (u, c, _) in posts.items():
        by_view.setdefault((u, c), set()).add(key)
    edges = {v: members(posts, keys, v[1]) for v, keys in by_view.items()}
    rng = random.Random(1)  # as bench_ssp.run_ssp with one shard
    live = list(posts)
    created = 0
    with_row = left = came_back = 0
    out: set[tuple[View, str]] = set()
    for _ in range(args.rate * args.seconds):
        roll = rng.random()
        if roll < 0.2 or len(live) < 10:
            created += 1
            key, u, c = f"n_{created}", rng.randrange(args.users), rng.randrange(10)
            posts[key] = (u, c, rng.randrange(100))
            live.append(key)
            by_view.setdefault((u, c), set()).add(key)
        elif roll < 0.2 + args.delete_share:
            key = live.pop(rng.randrange(len(live)))
            u, c, _ = posts.pop(key)
            by_view[(u, c)].discard(key)
        else:
            key = live[rng.randrange(len(live))]
            u, c, _ = posts[key]
            posts[key] = (u, c, rng.randrange(100))
        v = (u, c)
        now = members(posts, by_view[v], c)
        for k in edges.get(v, set()) - now:
            if k in posts:
                left += 1
                out.add((v, k))
            else:
                with_row += 1
        for k in now - edges.get(v, set()):
            if (v, k) in out:
                came_back += 1
                out.discard((v, k))
        edges[v] = now
    print(f"members that left with their row deleted: {with_row:,} "
          f"({with_row / args.seconds:.0f}/s)")
    print(f"members that left a view, row kept:       {left:,} ({left / args.seconds:.0f}/s); "
          f"came back {came_back:,}; still out at the end {len(out):,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
