"""Loading rows into a shard worker: arena handles vs the rows themselves over ZeroMQ.

    .venv/bin/python loadtests/bench_shard_load.py [--rows 100000] [--shards 2]

What the SSP does when it bootstraps, finds a new table, warm-starts or rebuilds a restarted
shard: the hub's rows (canonical bytes in its row arena) reach every shard. Both ways run here
against real `python -m ssp.shard` processes over real ZeroMQ, in chunks of the hub's
LOAD_CHUNK, and the time counts the hub's work too:

- baseline (`load_many`, how the SSP loaded shards before the arena): the hub decodes each
  stored row and sends the rows, packed once per chunk, to every shard;
- `load_handles` (now): the hub sends 8-byte arena handles and each shard reads the rows from
  the arena it maps read-only.

Prints rows/s, megabytes sent over the socket, and the ratio against the baseline; one shard's
resident memory is about the same both ways (the decoded rows are the engine's working set).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import zmq.asyncio  # noqa: E402
from surrealdb import RecordID  # noqa: E402

from engine.values import canonical_bytes, unpack_value  # noqa: E402
from ssp.hub import LOAD_CHUNK  # noqa: E402
from ssp.rowarena import HubRows, pack_handles  # noqa: E402
from ssp.shard import encode_request  # noqa: E402
from ssp.shards import ShardHandle  # noqa: E402


def make_rows(rows: HubRows, n: int) -> list[str]:
    ids = []
    for i in range(n):
        rid = f"comment:{i}"
        rows.store.put_bytes("comment", rid, canonical_bytes({
            "id": RecordID("comment", i), "thread": RecordID("thread", i % 2000),
            "author": RecordID("user", f"u{i % 1000}"), "n": i, "score": i * 0.5,
            "text": f"comment number {i} with some words in it"}))
        ids.append(rid)
    return ids


async def run(n: int, shards: int) -> list[tuple[str, float, float]]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-shard-load-"))
    rows = HubRows(None, 64)
    ctx = zmq.asyncio.Context.instance()

    exits: list[int] = []

    async def on_exit(_s: ShardHandle, code: int) -> None:
        exits.append(code)

    out = []
    try:
        ids = make_rows(rows, n)
        for name in ("load_many", "load_handles"):
            procs = [ShardHandle(i, f"ipc://{tmp}/{name}-{i}.sock", ctx, on_exit,
                                 arena_dir=str(rows.dir)) for i in range(shards)]
            for p in procs:
                await p.start()
            sent = 0
            start = time.perf_counter()
            with rows.reading():
                for i in range(0, n, LOAD_CHUNK):
                    chunk = ids[i:i + LOAD_CHUNK]
                    payload: dict[str, Any]
                    if name == "load_many":
                        get = rows.store.get_bytes
                        payload = {"tables": {"comment": [unpack_value(get("comment", r))
                                                          for r in chunk]}}
                    else:
                        handle = rows.store.handle
                        payload = {"tables": {"comment": pack_handles(
                            handle("comment", r) for r in chunk)}}  # type: ignore[misc]
                    msg = encode_request(name, payload)
                    sent += len(msg["data"]) * shards
                    await asyncio.gather(*(p.send(msg) for p in procs))
            elapsed = time.perf_counter() - start
            for p in procs:
                st = await p.call("stats", {})
                assert st["tables"] == {"comment": n}, st
                await p.stop()
            if exits:
                raise SystemExit(f"a shard died during the benchmark: exit codes {exits}")
            out.append((name, n / elapsed, sent / 1e6))
    finally:
        rows.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--shards", type=int, default=2)
    args = p.parse_args(argv)
    results = asyncio.run(run(args.rows, args.shards))
    base = results[0][1]
    print(f"{args.rows:,} rows into {args.shards} shard process(es), chunks of {LOAD_CHUNK}")
    print(f"{'path':<34} {'rows/s':>10} {'MB sent':>9} {'vs baseline':>12}")
    labels = {"load_many": "baseline: rows over the socket",
              "load_handles": "arena handles (load_handles)"}
    for name, rate, mb in results:
        print(f"{labels[name]:<34} {rate:>10,.0f} {mb:>9.1f} {rate / base:>11.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
