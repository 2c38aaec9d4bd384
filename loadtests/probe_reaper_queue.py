"""Bytes the reaper's in-memory queue holds per retired edge (tracemalloc).

    .venv/bin/python loadtests/probe_reaper_queue.py [--edges 50000] [--views 2000]
        [--stack-root PATH]

Queues `--edges` retired edges spread over `--views` views of 200 users (the soak's shape:
edge ids `[_00_query:<view>, post:<n>]` in `_00_list_ref_user_<user>`), as the publisher
does after a flush, and prints the bytes traced per queued edge, how many the queue kept, and
how many went past it (`dropped`, or kept in the database for a refill). `--stack-root` runs
another checkout's reaper (a "before" figure).
"""

from __future__ import annotations

import argparse
import sys
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


class _Quiet:
    """A publisher that never holds a view (the reaper's Publication)."""

    dropped: set[str] = set()

    def quiet(self) -> bool:
        return True

    def claim(self, view_id: str) -> bool:
        return True

    async def unclaim(self, view_ids: Any) -> None:
        return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--edges", type=int, default=50_000)
    p.add_argument("--views", type=int, default=2_000)
    p.add_argument("--stack-root", type=Path, default=ROOT)
    args = p.parse_args()
    sys.path.insert(0, str(args.stack_root.resolve()))
    from surrealdb import RecordID

    from ssp.naming import edge_id, view_record
    from ssp.reaper import EdgeReaper

    # The edges are built first (the publisher holds them while the flush runs anyway), so
    # what is traced is what the queue itself keeps.
    batches: list[tuple[str, list[Any]]] = []
    per_view = max(1, args.edges // args.views)
    for v in range(args.views):
        vid = f"query:soak_{v % 200}_{v}"
        table = f"_00_list_ref_user_u{v % 200}"
        batches.append((vid, [edge_id(table, view_record(vid), RecordID("post", v * per_view + i))
                              for i in range(per_view)]))
    reaper = EdgeReaper(None, _Quiet())
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for vid, edges in batches:
        reaper.add(vid, edges)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    fig = reaper.figures()
    queued = int(fig["queued"])
    over = args.views * per_view - queued
    print(f"{'edges':>8} {'queued':>8} {'past it':>8} {'queue MB':>9} {'B/queued edge':>14}")
    print(f"{args.views * per_view:>8} {queued:>8} {over:>8} {(after - before) / 1e6:>9.2f} "
          f"{(after - before) / max(1, queued):>14.0f}")


if __name__ == "__main__":
    main()
