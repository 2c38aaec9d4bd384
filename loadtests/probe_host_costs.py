"""What each kind of request in issue 31's soak costs the database host's engine, in CPU.

    .venv/bin/python loadtests/probe_host_costs.py [--tables 200] [--posts 4000] [--n 200]

Why: the host's `/debug/statements` times requests by wall clock inside the engine. Under load
most of that is the request's wait behind the others (the soak: ~50-100 requests inside the
engine at once), so "the reaper's DELETE takes 58 ms" says little about what it costs. This
probe builds the soak's schema in one embedded `mem://` engine (a hooked `post` and `user`
table as `svc schema apply` leaves them with transport `changefeed`: feed, `_00_rv` field,
`_00_version` event; `--tables` per-user edge tables as the SSP defines them; one view's
edges) and measures the engine's CPU (process time: all its threads, little moved by other
load on the machine) per request and per row for each statement the soak sends, in the form
the stack sends it (`ssp.publisher`, `ssp.reaper`, `ssp.viewmetrics`, `dbhost.live`).

Each row prints CPU us per request and per row, from requests of 1 row and of `--n` rows:
`fixed` is what a request costs whatever its size (parse, transaction, commit), `per row`
what each further row adds. Multiply by the soak's rates (`soak_stack.py --statements`) for
the host's CPU per second per shape.

Measured (2026-11-30, load 8-10 from other work, 200 tables, 4,000 posts; CPU us):

| statement | a 1-row request | each further row |
|---|---:|---:|
| application UPDATE (`_00_rv` field, `_00_version` event, feed) | 304-408 | |
| the same UPDATE, table with a feed only / nothing | 137 / 115 | |
| flush: RELATE upsert of an existing edge | 319-343 | 85-95 |
| flush: RETIRE | 376 | 62 |
| reaper: DELETE | 4,201 | 1,404 (20 a request: 1,568 each) |
| view metrics: UPSERT CONTENT | 313-360 | 105-108 |
| SHOW CHANGES FOR DATABASE | 47 | 52 per application write |

A reaper request of one edge costs ten application UPDATEs; the soak sent ~10 of them a
second: under load the reaper sizes its transactions from their wall time, which is mostly
the request's wait, and takes one edge each (`/debug/memory` `reaper`: 1.1-1.5 edges a
transaction). The application's UPDATE costs ~300 us where the same UPDATE on a table with a
feed only costs ~140: `svc schema apply`'s `_00_rv` field and `_00_version` event are more
than half of it.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from surrealdb import RecordID  # noqa: E402

from dbclient.database import build_transaction  # noqa: E402
from dbhost.live import now_versionstamp  # noqa: E402
from loadtests.probe_host_storage import Engine as StorageEngine  # noqa: E402
from ssp.publisher import RETIRE, UPSERT_FLAT  # noqa: E402
from ssp.reaper import REAP  # noqa: E402
from ssp.viewmetrics import DEFINE as METRICS_DEFINE  # noqa: E402
from ssp.viewmetrics import WRITE as METRICS_WRITE  # noqa: E402
from svccli.schema import synced_table_sql  # noqa: E402

APP_UPDATE = "UPDATE type::record('post', $k) SET score = (score + $d) % 100 RETURN NONE"
EDGE_TABLE = ("DEFINE TABLE IF NOT EXISTS {t} TYPE RELATION SCHEMALESS CHANGEFEED 1h "
              "INCLUDE ORIGINAL PERMISSIONS FOR select WHERE $auth.id = user:{u} "
              "FOR create, update, delete NONE")
TABLE = "_00_list_ref_user_u0"
VIEW = RecordID("_00_query", "v0")


class Engine(StorageEngine):
    """One embedded engine on `mem://`, database t/t (`probe_host_storage.Engine`)."""

    def __init__(self) -> None:
        super().__init__("mem://")

    def txn(self, stmts: list[tuple[str, dict[str, Any] | None]]) -> list[Any]:
        sql, merged = build_transaction(stmts)
        return self.run(sql, merged)


def cpu_us(fn: Callable[[], object], repeat: int) -> float:
    """CPU microseconds per call of `fn`, over `repeat` calls."""
    start = time.process_time()
    for _ in range(repeat):
        fn()
    return (time.process_time() - start) / repeat * 1e6


def prepare(eng: Engine, tables: int, posts: int) -> None:
    eng.run("DEFINE TABLE user SCHEMALESS; DEFINE TABLE post SCHEMALESS; "
            "DEFINE TABLE _00_version SCHEMALESS CHANGEFEED 1h INCLUDE ORIGINAL; "
            + METRICS_DEFINE)
    for t in ("user", "post"):
        for stmt in synced_table_sql(t, "changefeed", "1h", None):
            eng.run(stmt)
    defs = [EDGE_TABLE.format(t=f"_00_list_ref_user_u{i}", u=f"u{i}") for i in range(tables)]
    for i in range(0, len(defs), 100):
        eng.run("; ".join(defs[i:i + 100]))
    eng.run("FOR $i IN 0..$n { CREATE type::record('user', 'u' + <string> $i) SET active = true }",
            {"n": tables})
    eng.run("FOR $i IN 0..$n { CREATE type::record('post', $i) SET score = $i % 100, "
            "category = 'c' + <string> ($i % 10), author = type::record('user', 'u0') }",
            {"n": posts})
    eng.run("CREATE $v SET state = 'ready'", {"v": VIEW})


def _updater(eng: Engine, text: str, rng: random.Random, posts: int) -> Callable[[], object]:
    return lambda: eng.run(text, {"k": rng.randrange(posts), "d": rng.randrange(1, 30)})


def edge_rows(members: list[int], rv: int) -> list[list[Any]]:
    return [[TABLE, VIEW, RecordID("post", m), rv] for m in members]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tables", type=int, default=200, help="per-user edge tables defined")
    p.add_argument("--posts", type=int, default=4000)
    p.add_argument("--n", type=int, default=200, help="rows in a large request")
    args = p.parse_args(argv)
    n = args.n
    eng = Engine()
    prepare(eng, args.tables, args.posts)
    rng = random.Random(7)
    seq = itertools.count(10)
    results: list[tuple[str, float, float]] = []  # (shape, us per 1-row request, per row at n)

    def app_update() -> None:
        eng.run(APP_UPDATE, {"k": rng.randrange(args.posts), "d": rng.randrange(1, 30)})

    # the members of the view: n * 8 edges, created once (RELATE of new edges)
    pool = list(range(n * 8))
    eng.txn([(UPSERT_FLAT, {"rows": edge_rows(pool, 1), "seq": next(seq)})])
    cursor = itertools.cycle(range(0, len(pool), n))

    def batch(k: int) -> list[int]:
        start = next(cursor)
        return pool[start:start + k]

    def upsert(k: int) -> Callable[[], object]:
        return lambda: eng.txn([(UPSERT_FLAT, {"rows": edge_rows(batch(k), next(seq)),
                                               "seq": next(seq)})])

    def step_us(k: int, repeat: int, timed: str) -> float:
        """CPU us of the `timed` step ("retire" or "reap") of k edges: retire them, delete
        them, create them again; only the named step is timed."""
        total = 0.0
        for _ in range(repeat):
            ms = batch(k)
            ids = [RecordID(TABLE, [VIEW, RecordID("post", m)]) for m in ms]
            t0 = time.process_time()
            eng.txn([(RETIRE, {"ids": ids, "seq": next(seq)})])
            t1 = time.process_time()
            eng.txn([(REAP, {"ids": ids})])
            t2 = time.process_time()
            eng.txn([(UPSERT_FLAT, {"rows": edge_rows(ms, next(seq)), "seq": next(seq)})])
            total += (t1 - t0) if timed == "retire" else (t2 - t1)
        return total / repeat * 1e6

    def metrics(k: int) -> Callable[[], None]:
        def go() -> None:
            rows = [{"id": RecordID("_00_view_metrics", f"v{i}"), "view": VIEW,
                     "view_id": f"query:v{i}", "ssp_id": "ssp-1", "rows": 10,
                     "updates": next(seq), "edge_ops": 5,
                     "publish_ms": {"p50": 1.5, "p99": 9.5, "max": 12.0, "samples": 256},
                     "materialize_ms": 3.0, "flushed_at": "2026-11-30T00:00:00Z",
                     "last_publish_at": "2026-11-30T00:00:00Z"} for i in range(k)]
            eng.run(METRICS_WRITE, {"rows": rows, "gone": []})
        return go

    small = max(20, n // 4)
    results.append(("app UPDATE (1 row, no transaction)", cpu_us(app_update, n * 5), 0.0))
    # the same UPDATE on tables without the service's hooks: what `svc schema apply` adds
    for table, ddl in (("bare", "DEFINE TABLE bare SCHEMALESS"),
                       ("fed", "DEFINE TABLE fed SCHEMALESS CHANGEFEED 1h INCLUDE ORIGINAL")):
        eng.run(ddl)
        eng.run(f"FOR $i IN 0..$n {{ CREATE type::record('{table}', $i) SET score = $i % 100 }}",
                {"n": args.posts})
        text = APP_UPDATE.replace("'post'", f"'{table}'")
        what = "a feed only" if table == "fed" else "no feed, no hook"
        results.append((f"  (the same on a table with {what})", cpu_us(
            _updater(eng, text, rng, args.posts), n * 5), 0.0))
    for name, make in (("flush: RELATE upsert of existing edges", upsert),
                       ("metrics: UPSERT CONTENT rows", metrics)):
        one = cpu_us(make(1), small)
        many = cpu_us(make(n), 5)
        results.append((name, one, (many - one) / (n - 1)))
    for name, timed in (("flush: RETIRE (UPDATE ... SET removed = true)", "retire"),
                        ("reaper: DELETE $ids WHERE removed = true", "reap")):
        one, few, many = step_us(1, small, timed), step_us(20, 10, timed), step_us(n, 5, timed)
        results.append((name, one, (many - one) / (n - 1)))
        results.append((f"  (the same, 20 rows a request: us per row {few / 20:.0f})",
                        few, (many - few) / (n - 20)))

    # the host's LIVE loop: one read of the database's feed holding n app writes, and one
    # that finds nothing new
    vs_before = now_versionstamp()
    for _ in range(n):
        app_update()
    t_read = cpu_us(lambda: eng.run(f"SHOW CHANGES FOR DATABASE SINCE {vs_before} "
                                    "LIMIT 1000"), 20)
    vs_after = now_versionstamp() + (1 << 16)
    t_empty = cpu_us(lambda: eng.run(f"SHOW CHANGES FOR DATABASE SINCE {vs_after} "
                                     "LIMIT 1000"), 20)
    results.append(("SHOW CHANGES FOR DATABASE (a read; per app write in it)", t_empty,
                    (t_read - t_empty) / n))

    print(f"engine CPU, {args.tables} per-user edge tables, {args.posts} posts "
          f"(large request: {n} rows)")
    print(f"{'statement':<58}{'1-row req':>12}{'per row':>10}")
    for name, fixed, per_row in results:
        print(f"{name:<58}{fixed:>12.0f}{per_row:>10.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
