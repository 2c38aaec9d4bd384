"""How the shape of the SSP's edge rows changes the cost of publishing them.

    .venv/bin/python loadtests/probe_edge_rows.py [--edges 1000] [--repeat 3]

The SSP publishes view membership as `RELATE` upserts in one `FOR` statement over a list
parameter (`ssp.publisher`). The database host decodes a request's parameters before the
engine runs it, and the engine decodes them again, so the number of CBOR items per edge
counts as much as the writes themselves. This probe starts a memory-only database host
(`python -m dbhost`), defines edge tables as the SSP does (`TYPE RELATION`, `CHANGEFEED 1h
INCLUDE ORIGINAL`) and times one transaction of `--edges` upserts, for three spreads of the
edges over views (one view; 100 views of 10 edges; one edge per view), in three forms:

* ``maps``: one map per edge with its full id, `in`, `out`, `rv`, `seq`, `auth_id` (~25 CBOR
  items per edge; the SSP's form before 2026-11-26), the baseline;
* ``flat``: `[table, view, member, rv, auth]` per edge, the id built in the database with
  `type::record`, `seq` one parameter;
* ``grouped``: `[table, view, auth, [[member, rv], ...]]` per view, the group's fields read
  into LET variables once (reading `$g[i]` inside the inner loop copies the whole group).

Every form writes the same rows (checked at the end). The SSP sends views with at least
`GROUP_MIN` edges grouped and the others flat.

Then a view is materialised again over edges it already has (half of them no longer
members), as the SSP does after a restart or a re-registration: the prior edges that are not
members go, either by ``out NOTINSIDE $members`` before the upserts (the form before
2026-11-26; the engine copies the array for every edge it tests) or by ``seq != $seq`` after
the upserts stamped the members with the flush's seq.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from surrealdb import RecordID  # noqa: E402

from dbclient import Database, DbConfig  # noqa: E402
from ssp.publisher import UPSERT_FLAT_SINGLE, UPSERT_GROUPS_SINGLE  # noqa: E402
from tests.support.procs import start_db_host  # noqa: E402

MAPS = ("FOR $r IN $rows { RELATE ($r.in)->($r.id)->($r.out) SET rv = $r.rv, seq = $r.seq, "
        "auth_id = $r.auth_id RETURN NONE }")
FORMS = ("maps", "flat", "grouped")
SPREADS = (1, 100, None)  # views per transaction (None: one per edge)


def statements(form: str, table: str, views: list[RecordID], per: int, auth: RecordID,
               seq: int) -> tuple[str, dict[str, Any]]:
    """One upsert statement of ``per`` edges for each of ``views`` in ``form``."""
    outs = [RecordID("post", i) for i in range(per)]
    if form == "maps":
        return MAPS, {"rows": [{"id": RecordID(table, [q, o]), "in": q, "out": o, "rv": 1,
                                "seq": seq, "auth_id": auth} for q in views for o in outs]}
    if form == "flat":
        return UPSERT_FLAT_SINGLE, {"rows": [[table, q, o, 1, auth] for q in views
                                             for o in outs], "seq": seq}
    return UPSERT_GROUPS_SINGLE, {"groups": [[table, q, auth, [[o, 1] for o in outs]]
                                             for q in views], "seq": seq}


async def run(edges: int, repeat: int) -> None:
    tmp = Path(tempfile.mkdtemp())
    host = start_db_host(tmp, memory=True)
    try:
        db = Database(DbConfig.from_env({
            "SVC_DB_URL": host.ws_url, "SVC_DB_USER": host.user, "SVC_DB_PASS": host.password,
            "SVC_DB_NS": "probe", "SVC_DB_NAME": "probe", "SVC_SSP_DB_TIMEOUT_SECS": "600"}))
        await db.connect()
        for form in FORMS:
            await db.query(f"DEFINE TABLE e_{form} TYPE RELATION SCHEMALESS CHANGEFEED 1h "
                           "INCLUDE ORIGINAL")
        await db.query("DEFINE TABLE e_again TYPE RELATION SCHEMALESS CHANGEFEED 1h "
                       "INCLUDE ORIGINAL")
        auth = RecordID("user", "u1")
        print(f"{edges:,} edge upserts in one transaction, ms (mean of {repeat}); ratio vs maps")
        print(f"{'spread':>22} " + " ".join(f"{f:>10}" for f in FORMS) + f" {'flat x':>8} "
              f"{'grouped x':>9}")
        n = 0
        for nviews in SPREADS:
            views_n = nviews or edges
            per = edges // views_n
            spent = {f: 0.0 for f in FORMS}
            for _ in range(repeat):
                n += 1
                views = [RecordID("_00_query", f"r{n}v{v}") for v in range(views_n)]
                for form in FORMS:
                    stmt = statements(form, f"e_{form}", views, per, auth, n)
                    t = time.perf_counter()
                    await db.transaction([stmt])
                    spent[form] += time.perf_counter() - t
            ms = {f: spent[f] / repeat * 1000 for f in FORMS}
            label = f"{views_n:,} view(s) x {per:,}"
            print(f"{label:>22} " + " ".join(f"{ms[f]:>10.0f}" for f in FORMS)
                  + f" {ms['maps'] / ms['flat']:>7.2f}x {ms['maps'] / ms['grouped']:>8.2f}x")
        print("\nmaterialising a view again over its edges (half no longer members), ms")
        print(f"{'edges':>8} {'NOTINSIDE':>10} {'seq':>8} {'x':>7}")
        for size in (1000, 5000, 10000):
            took = {}
            for how in ("notinside", "seq"):
                q = RecordID("_00_query", f"again{size}{how}")
                table = "e_again"
                members = [RecordID("post", i) for i in range(size)]
                first = statements("grouped", table, [q], size, auth, 1)
                await db.transaction([first])
                kept = members[: size // 2]
                group = {"groups": [[table, q, auth, [[o, 2] for o in kept]]], "seq": 2}
                if how == "notinside":
                    stmts = [(f"DELETE {table} WHERE in = $q AND out NOTINSIDE $outs",
                              {"q": q, "outs": kept}), (UPSERT_GROUPS_SINGLE, group)]
                else:
                    stmts = [(UPSERT_GROUPS_SINGLE, group),
                             (f"DELETE {table} WHERE in = $q AND seq != $seq",
                              {"q": q, "seq": 2})]
                t = time.perf_counter()
                await db.transaction(stmts)
                took[how] = (time.perf_counter() - t) * 1000
                left = await db.query_one(f"SELECT VALUE out FROM {table} WHERE in = $q",
                                          {"q": q})
                if sorted(str(o) for o in left) != sorted(str(o) for o in kept):
                    raise SystemExit(f"{how}: the view's edges are not its members")
            print(f"{size:>8,} {took['notinside']:>10.0f} {took['seq']:>8.0f} "
                  f"{took['notinside'] / took['seq']:>6.1f}x")
        rows = {}
        for form in FORMS:
            rows[form] = await db.query_one(
                f"SELECT in, out, rv, seq, auth_id, record::id(id) AS k FROM e_{form} ORDER BY k")
        same = rows["maps"] == rows["flat"] == rows["grouped"]
        print(f"rows written: {len(rows['maps']):,} per form, identical across forms: {same}")
        await db.close()
        if not same:
            raise SystemExit("the forms wrote different rows")
    finally:
        host.process.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--edges", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    asyncio.run(run(args.edges, args.repeat))


if __name__ == "__main__":
    main()
