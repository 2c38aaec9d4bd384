"""The clients' members read: the view's query over `$__members` with its ORDER BY inside
(the form before transport `http` was supported, wrong on SurrealDB 3.0.2) against the query
over the members in a subquery ordered outside (`viewclient.query.members_query`, exact on
3.0.2 and 3.2.4), on one database host, alternating the two forms read by read.

    .venv/bin/python loadtests/probe_members_read.py [--engine embedded|node] [--reads 300]

Each read is one request: the members (a `LET` of an array of record ids, sorted in the new
form) and the rows; MEMBERS ids out of a table of 2,000 posts, projection with a record link.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from surrealdb import AsyncSurreal, RecordID

from tests.support.procs import start_db_host
from viewclient.query import members_query

QUERY = ("SELECT id, title, n, tag.label AS label FROM post WHERE n >= $min "
         "ORDER BY n DESC, title LIMIT 50")


def inner_order(surql: str) -> str:
    """The earlier form: FROM replaced, START/LIMIT dropped, ORDER BY kept inside."""
    head, rest = surql.split(" FROM post ", 1)
    return f"{head} FROM $__members {rest.split(' LIMIT ')[0]}"


async def run(engine: str, reads: int) -> None:
    host = start_db_host(Path(tempfile.mkdtemp()), engine=engine)
    try:
        db = AsyncSurreal(host.ws_url)
        await db.signin({"username": host.user, "password": host.password})
        await db.query("DEFINE NAMESPACE IF NOT EXISTS p; USE NS p; "
                       "DEFINE DATABASE IF NOT EXISTS p")
        await db.use("p", "p")
        await db.query("CREATE tag:a SET label = 'alpha'; CREATE tag:b SET label = 'beta'; "
                       "FOR $i IN 0..2000 { CREATE type::record('post', $i) SET n = $i % 97, "
                       "title = <string> ($i % 13), tag = IF $i % 2 = 0 { tag:a } ELSE "
                       "{ tag:b } }")
        forms = {"ORDER BY inside (earlier)": inner_order(QUERY),
                 "subquery, ORDER BY outside (now)": members_query(QUERY)}
        print(f"engine {engine}, {reads} reads per form and size, alternating")
        print("| members | form | p50 ms | p99 ms | mean ms | vs earlier (mean) |")
        print("|---|---|---|---|---|---|")
        for size in (5, 50, 500):
            ids = [RecordID("post", i * 3 % 2000) for i in range(size)]
            times: dict[str, list[float]] = {k: [] for k in forms}
            for _ in range(reads):
                for name, q in forms.items():
                    sort = "array::sort($m)" if "outside" in name else "$m"
                    t = time.perf_counter()
                    await db.query(f"LET $__members = {sort}; {q}", {"m": ids, "min": 0})
                    times[name].append((time.perf_counter() - t) * 1000)
            base = statistics.mean(times["ORDER BY inside (earlier)"])
            for name, ts in times.items():
                ts.sort()
                print(f"| {size} | {name} | {statistics.median(ts):.2f} | "
                      f"{ts[int(len(ts) * 0.99) - 1]:.2f} | {statistics.mean(ts):.2f} | "
                      f"{statistics.mean(ts) / base:.2f}x |")
        await db.close()
    finally:
        host.process.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--engine", default="embedded", choices=["embedded", "node"])
    p.add_argument("--reads", type=int, default=300)
    a = p.parse_args()
    asyncio.run(run(a.engine, a.reads))


if __name__ == "__main__":
    main()
