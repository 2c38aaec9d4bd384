"""Where a shard's part of a warm start goes: its rows from the hub's arena, then its views
built on them, profiled in one process (the `ssp.shard.Shard` a shard process runs, without
the socket).

    .venv/bin/python loadtests/probe_shard_warm_load.py [--rows 20000] [--users 1000]
        [--views 1000] [--top 25]

The data is `loadtests/bench_ssp_start.py`'s (posts over users, one view per user,
`SELECT * FROM post WHERE owner = $auth.id ORDER BY n DESC LIMIT 5`). Loads arrive as the
hub sends them (`load_handles`, LOAD_CHUNK handles a message), views as the hub registers
them (`register`, one message each). Prints each phase's wall time and cProfile's top
functions by own time for each phase.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import random
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from surrealdb import RecordID  # noqa: E402

from engine import gcpolicy  # noqa: E402
from engine.values import canonical_bytes  # noqa: E402
from ssp.hub import LOAD_CHUNK  # noqa: E402
from ssp.rowarena import HubRows, pack_handles  # noqa: E402
from ssp.shard import Shard, encode_request  # noqa: E402

VIEW = "SELECT * FROM post WHERE owner = $auth.id ORDER BY n DESC LIMIT 5"


def profiled(fn: Callable[[], None], top: int) -> tuple[float, str]:
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    fn()
    prof.disable()
    took = time.perf_counter() - t0
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return took, out.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--views", type=int, default=1000)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    gcpolicy.configure()  # as a shard process does
    rows = HubRows(None, 64)
    try:
        rng = random.Random(7)
        ns = list(range(args.rows))
        rng.shuffle(ns)
        ids = []
        for i in range(args.rows):
            rid = f"post:p{i}"
            rows.store.put_bytes("post", rid, canonical_bytes({
                "id": RecordID("post", f"p{i}"), "owner": RecordID("user", f"u{i % args.users}"),
                "n": ns[i]}))
            ids.append(rid)
        for profile in (False, True):  # plain times first: cProfile inflates small calls
            shard = Shard(0, str(rows.dir))
            replies: list[dict[str, Any]] = []

            def load(shard: Shard = shard, replies: list[dict[str, Any]] = replies) -> None:
                with rows.reading():
                    for i in range(0, len(ids), LOAD_CHUNK):
                        raw = pack_handles(h for r in ids[i:i + LOAD_CHUNK]
                                           if (h := rows.store.handle("post", r)) is not None)
                        msg = encode_request("load_handles", {"tables": {"post": raw}})
                        replies.append(shard._handle(msg))

            def register(shard: Shard = shard,
                         replies: list[dict[str, Any]] = replies) -> None:
                for u in range(args.views):
                    msg = encode_request("register", {
                        "view_id": f"query:v{u}", "surql": VIEW,
                        "params": {"auth": {"id": RecordID("user", f"u{u}")}}})
                    replies.append(shard._handle(msg))

            for name, fn in (("load (rows from the arena)", load),
                             ("register (views on the rows)", register)):
                if profile:
                    took, text = profiled(fn, args.top)
                else:
                    t0 = time.perf_counter()
                    fn()
                    took, text = time.perf_counter() - t0, ""
                bad = [r for r in replies if not r.get("ok")]
                if bad:
                    raise SystemExit(f"{name}: a request failed: {bad[0]}")
                replies.clear()
                print(f"\n## {name}, {'profiled' if profile else 'plain'}: {took:.3f} s\n")
                if text:
                    print(text)
    finally:
        rows.close()
        shutil.rmtree(rows.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
