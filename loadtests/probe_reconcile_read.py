"""What one slice of the SSP's reconciler (`ssp.hub.reconcile`) costs the database, next to the
publisher's own work on the same edges, measured in the same run on the embedded engine.

    .venv/bin/python loadtests/probe_reconcile_read.py [--users 100] [--views-per-user 10]
        [--edges-per-view 10] [--rounds 5]

Edge tables as the SSP defines them (mode `dedicated`: one per user with its select rule and a
changefeed; mode `single`: one `_00_list_ref` indexed on `in`), filled with `users x views x
edges` edges. Then, per mode, median of `--rounds`:

- `slice read`: the reconciler's request for one slice (at most 200 views and 2,000 edges:
  `SELECT id, out, removed FROM <table> WHERE in = $q<i>` per view, plus the views' `_00_query`
  rows), the baseline;
- `upsert`: the publisher writing the same edges again (`RELATE` over their ids, its flat
  statement), what a slice read competes with.

The reconciler reads one slice per `SVC_SSP_RECONCILE_MS` (1000 by default), so its share of
the database's time is `slice read` ms per second.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from surrealdb import RecordID  # noqa: E402
from surrealdb.data import cbor  # noqa: E402
from surrealdb_embedded import AsyncEmbeddedDB  # noqa: E402

from dbclient.cbor import install  # noqa: E402
from ssp.hub.reconcile import SLICE_EDGES, SLICE_VIEWS  # noqa: E402
from ssp.naming import edge_table  # noqa: E402
from ssp.publisher import UPSERT_FLAT, UPSERT_FLAT_SINGLE  # noqa: E402

_ids = iter(range(1, 1 << 60))


async def q(db: AsyncEmbeddedDB, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
    raw = await db.execute(cbor.encode({"id": next(_ids), "method": "query",
                                        "params": [sql, params or {}]}))
    res = cbor.decode(raw)
    if "error" in res:
        raise RuntimeError(res["error"])
    for st in res["result"]:
        if st["status"] != "OK":
            raise RuntimeError(f"{sql[:80]}: {st['result']}")
    return [st["result"] for st in res["result"]]


async def fill(db: AsyncEmbeddedDB, mode: str, args: argparse.Namespace
               ) -> list[tuple[str, RecordID, list[RecordID]]]:
    """The edge tables and edges; returns (table, view record, members) per view."""
    views = []
    if mode == "single":
        await q(db, "DEFINE TABLE _00_list_ref TYPE RELATION SCHEMALESS CHANGEFEED 1h "
                    "INCLUDE ORIGINAL; DEFINE INDEX _00_list_ref_in ON _00_list_ref FIELDS in")
    for u in range(args.users):
        auth = RecordID("user", f"u{u}")
        table = edge_table(auth, mode)
        if mode == "dedicated":
            await q(db, f"DEFINE TABLE {table} TYPE RELATION SCHEMALESS CHANGEFEED 1h INCLUDE "
                        f"ORIGINAL PERMISSIONS FOR select WHERE $auth = user:u{u} "
                        "FOR create, update, delete NONE")
        rows = []
        for v in range(args.views_per_user):
            rec = RecordID("_00_query", f"u{u}v{v}")
            members = [RecordID("post", f"u{u}v{v}m{m}") for m in range(args.edges_per_view)]
            views.append((table, rec, members))
            for m in members:
                rows.append([table, rec, m, 1, auth] if mode == "single" else [table, rec, m, 1])
        await q(db, UPSERT_FLAT_SINGLE if mode == "single" else UPSERT_FLAT,
                {"rows": rows, "seq": 1})
        await q(db, "FOR $v IN $vs { UPSERT $v CONTENT {state: 'ready', rowCount: $n} }",
                {"vs": [rec for _t, rec, _m in views[-args.views_per_user:]],
                 "n": args.edges_per_view})
    return views


def one_slice(views: list[tuple[str, RecordID, list[RecordID]]]
              ) -> list[tuple[str, RecordID, list[RecordID]]]:
    out: list[tuple[str, RecordID, list[RecordID]]] = []
    edges = 0
    for v in views:
        if len(out) >= SLICE_VIEWS or (out and edges + len(v[2]) > SLICE_EDGES):
            break
        out.append(v)
        edges += len(v[2])
    return out


async def slice_read(db: AsyncEmbeddedDB, part: list[tuple[str, RecordID, list[RecordID]]]
                     ) -> float:
    sql = "; ".join(f"SELECT id, out, removed FROM {t} WHERE in = $q{i}"
                    for i, (t, _r, _m) in enumerate(part))
    params: dict[str, Any] = {f"q{i}": rec for i, (_t, rec, _m) in enumerate(part)}
    params["rows"] = [rec for _t, rec, _m in part]
    t0 = time.perf_counter()
    await q(db, sql + "; SELECT id, state, rowCount FROM $rows", params)
    return time.perf_counter() - t0


async def upsert(db: AsyncEmbeddedDB, mode: str,
                 part: list[tuple[str, RecordID, list[RecordID]]], seq: int) -> float:
    rows = [[t, rec, m, 2, RecordID("user", "x")] if mode == "single" else [t, rec, m, 2]
            for t, rec, ms in part for m in ms]
    t0 = time.perf_counter()
    await q(db, UPSERT_FLAT_SINGLE if mode == "single" else UPSERT_FLAT,
            {"rows": rows, "seq": seq})
    return time.perf_counter() - t0


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--users", type=int, default=100)
    p.add_argument("--views-per-user", type=int, default=10)
    p.add_argument("--edges-per-view", type=int, default=10)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    install()
    print(f"{args.users} users x {args.views_per_user} views x {args.edges_per_view} edges; "
          f"a slice: at most {SLICE_VIEWS} views, {SLICE_EDGES} edges")
    print(f"{'mode':<10} {'views':>6} {'edges':>6} {'slice read ms':>14} {'upsert ms':>10} "
          f"{'read / upsert':>14} {'db share at 1 s':>16}")
    for mode in ("dedicated", "single"):
        db = AsyncEmbeddedDB("mem://")
        await db.connect()
        await db.execute(cbor.encode({"id": 0, "method": "use", "params": ["p", mode]}))
        views = await fill(db, mode, args)
        part = one_slice(views)
        reads, ups = [], []
        for r in range(args.rounds):  # interleaved: the two see the same engine state
            reads.append(await slice_read(db, part))
            ups.append(await upsert(db, mode, part, 10 + r))
        read_ms = statistics.median(reads) * 1000
        up_ms = statistics.median(ups) * 1000
        edges = sum(len(m) for _t, _r, m in part)
        print(f"{mode:<10} {len(part):>6} {edges:>6} {read_ms:>14.1f} {up_ms:>10.1f} "
              f"{read_ms / up_ms:>14.2f} {read_ms / 10:>15.1f}%")
        await db.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
