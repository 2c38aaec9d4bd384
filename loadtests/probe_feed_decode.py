"""What a changefeed reader pays to decode the database's feed, whole against lazily.

    .venv/bin/python loadtests/probe_feed_decode.py [--writes 1000] [--edges 3] [--repeat 5]

Why (issue 31): the scheduler's tail reads `SHOW CHANGES FOR DATABASE`, which returns every
table's changes: the synced tables' it keeps, and the SSPs' edge writes (and view metrics) it
drops. In the soak (500 updates/s, ~2.8 edge writes per update) decoding those replies was
~68% of the scheduler's time (py-spy, GIL samples), most of it building record ids of edges.
`dbclient.cbor.decode` now leaves each set's changes shallow (`LazyChanges`) and
`dbclient.feed.read_round` builds only the kept tables' changes.

The probe writes the soak's shape into one embedded engine (`post` rows updated one per
transaction, each followed by a flush transaction that upserts `--edges` edges of a per-user
edge table, as the SSP's publisher does), reads the whole feed in pages of 1,000 entries as
raw reply bytes, and times (process CPU) what a reader does with them, keeping `post` only:

- *whole*: the old decode (every value built) and the old split by table;
- *lazy*: `decode` as installed now and `read_round`'s split (shallow, kept tables built).

It prints CPU us per application write for each, and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import cbor2

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from surrealdb import RecordID  # noqa: E402
from surrealdb_embedded import AsyncEmbeddedDB  # noqa: E402

from dbclient.cbor import LazyChanges, _tag_hook, decode, encode, materialize  # noqa: E402
from dbclient.feed import feed_change, split_by_table  # noqa: E402
from ssp.publisher import UPSERT_FLAT  # noqa: E402

KEEP = "post"


async def build(writes: int, edges: int) -> list[bytes]:
    """The feed's raw pages after `writes` application updates and their edge flushes."""
    db = AsyncEmbeddedDB("memory")
    await db.connect()

    async def q(text: str, params: dict[str, Any] | None = None) -> bytes:
        reply: bytes = await db.execute(encode(
            {"id": "1", "method": "query", "params": [text, params or {}]}))
        return reply

    await q("USE NS t DB t")
    await db.execute(encode({"id": "0", "method": "use", "params": ["t", "t"]}))
    await q("DEFINE TABLE post SCHEMALESS CHANGEFEED 1h INCLUDE ORIGINAL; "
            "DEFINE TABLE _00_list_ref_user_u0 TYPE RELATION SCHEMALESS CHANGEFEED 1h "
            "INCLUDE ORIGINAL")
    await q("FOR $i IN 0..$n { CREATE type::record('post', $i) SET score = $i % 100, "
            "category = 'c' + <string> ($i % 10), author = type::record('user', 'u0'), "
            "title = 'a post title ' + <string> $i }", {"n": writes})
    start = int(time.time() * 1000) << 16
    view = RecordID("_00_query", "v0")
    for i in range(writes):
        await q("UPDATE type::record('post', $k) SET score = (score + 7) % 100 RETURN NONE",
                {"k": i})
        rows = [["_00_list_ref_user_u0", view, RecordID("post", (i + j) % writes), i + 2]
                for j in range(edges)]
        await q(UPSERT_FLAT, {"rows": rows, "seq": i})
    pages: list[bytes] = []
    since = start
    while True:
        data = await q(f"SHOW CHANGES FOR DATABASE SINCE {since} LIMIT 1000")
        sets = cbor2.loads(data)["result"][0]["result"]
        pages.append(data)
        if len(sets) < 2:
            break
        since = int(sets[-1]["versionstamp"]) + 1
    await db.close()
    return pages


def whole(pages: list[bytes]) -> int:
    kept = 0
    for data in pages:
        for s in cbor2.loads(data, tag_hook=_tag_hook)["result"][0]["result"]:
            for table, changes in split_by_table(s["changes"]).items():
                if table == KEEP:
                    kept += sum(1 for ch in changes if feed_change(table, ch) is not None)
    return kept


def lazy(pages: list[bytes]) -> int:
    kept = 0
    for data in pages:
        for s in decode(data)["result"][0]["result"]:
            ch_of = s["changes"]
            assert isinstance(ch_of, LazyChanges)
            for table, changes in split_by_table(ch_of.raw, shallow=True).items():
                if table == KEEP:
                    built = [materialize(c) for c in changes]
                    kept += sum(1 for ch in built if feed_change(table, ch) is not None)
    return kept


def cpu_us(fn: Any, pages: list[bytes], repeat: int) -> tuple[float, int]:
    best = float("inf")
    kept = 0
    for _ in range(repeat):
        t0 = time.process_time()
        kept = fn(pages)
        best = min(best, time.process_time() - t0)
    return best * 1e6, kept


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--writes", type=int, default=1000)
    p.add_argument("--edges", type=int, default=3, help="edges upserted per write's flush")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    pages = asyncio.run(build(args.writes, args.edges))
    size = sum(len(d) for d in pages)
    old, kept_old = cpu_us(whole, pages, args.repeat)
    new, kept_new = cpu_us(lazy, pages, args.repeat)
    if kept_old != kept_new:
        print(f"MISMATCH: whole kept {kept_old} changes, lazy {kept_new}")
        return 1
    n = args.writes
    print(f"feed of {n:,} updates + {args.edges} edges each: {len(pages)} pages, "
          f"{size / 1024:,.0f} KiB; {kept_new:,} post changes kept (best of {args.repeat})")
    print(f"{'reader':<34}{'CPU us / write':>16}{'ratio':>8}")
    print(f"{'whole decode (before)':<34}{old / n:>16.1f}{1.0:>8.2f}")
    print(f"{'lazy decode, kept tables built':<34}{new / n:>16.1f}{new / old:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
