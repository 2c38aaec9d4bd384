"""The grammar of issue 33 through a real SSP: a grouped view, a SELECT VALUE view over a
semi-join and a graph traversal register (200 with their members), and writes through
SurrealDB's change feed keep each view's edges equal to its members as SurrealDB answers
them (engine/README, "Members": the rows a group aggregates, the rows behind VALUE rows,
the records in a traversal's rows)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.values import record_id_text
from tests.engine.judge import iter_record_ids
from tests.support.procs import DbHost
from tests.support.ssp_stack import edges, open_stack, view_body, wait_for

TABLES = ("DEFINE TABLE thread SCHEMALESS PERMISSIONS FULL CHANGEFEED 1h INCLUDE ORIGINAL; "
          "DEFINE TABLE person SCHEMALESS PERMISSIONS FULL CHANGEFEED 1h INCLUDE ORIGINAL; "
          "DEFINE TABLE likes TYPE RELATION SCHEMALESS PERMISSIONS FULL "
          "CHANGEFEED 1h INCLUDE ORIGINAL;")
EDGES = "_00_list_ref_user_alice"

GROUPED = ("SELECT status, count() AS n, math::max(score) AS top FROM thread WHERE score > 0 "
           "GROUP BY status")
VALUES = ("SELECT VALUE title FROM thread WHERE author IN (SELECT VALUE id FROM person WHERE "
          "active = true) ORDER BY title")
GRAPH = "SELECT id, ->likes->thread.* AS liked FROM person WHERE active = true"


async def _members(db: Any) -> dict[str, set[str]]:
    """Each view's members from SurrealDB's own answers."""
    grouped = await db.query_one("SELECT VALUE id FROM thread WHERE score > 0")
    values = await db.query_one("SELECT VALUE id FROM thread WHERE author IN "
                                "(SELECT VALUE id FROM person WHERE active = true)")
    graph = await db.query_one(GRAPH)
    return {"grouped": {record_id_text(r) for r in grouped or []},
            "values": {record_id_text(r) for r in values or []},
            "graph": {record_id_text(r) for r in iter_record_ids(graph or [])}}


async def test_grouped_value_and_graph_views_publish_their_members(
        host: DbHost, tmp_path: Path) -> None:
    async def setup(root: Any) -> None:
        await root.query(TABLES)
        await root.query("CREATE user:alice SET name = 'alice', pass = 'x'")
        for i in range(1, 4):
            await root.query(f"CREATE person:{i} SET active = {str(i != 2).lower()}")
        for i in range(1, 9):
            await root.query(f"CREATE thread:{i} SET title = 't{i}', score = {i % 4}, "
                             f"status = '{'open' if i % 2 else 'closed'}', "
                             f"author = person:{i % 3 + 1}")
        await root.query("RELATE person:1->likes:1->thread:2; RELATE person:1->likes:2->thread:5;"
                         "RELATE person:3->likes:3->thread:5")

    async with open_stack(host, tmp_path, before_start=setup, SVC_SSP_SHARDS="1") as st:
        want = await _members(st.root)
        for key, surql in (("grouped", GROUPED), ("values", VALUES), ("graph", GRAPH)):
            r = await st.ssp.call("POST /view/register", view_body(key, surql))
            assert r["status"] == 200, r
            assert set(r["body"]["records"]) == want[key], key
        assert len(want["grouped"]) == 6 and want["graph"] >= {"thread:5", "person:3"}

        # writes through the change feed: a row moving between groups and leaving the
        # WHERE, an author turning active (a value entering the semi-join's set), a new
        # edge, a deleted edge
        await st.root.query(
            "UPDATE thread:1 SET status = 'closed'; UPDATE thread:3 SET score = 0;"
            "UPDATE person:2 SET active = true; RELATE person:2->likes:4->thread:8;"
            "DELETE likes:2; UPDATE thread:5 SET title = 'renamed';")
        want = await _members(st.root)
        assert "person:2" in want["graph"] and "thread:3" not in want["grouped"]

        async def all_match() -> bool:
            for key in ("grouped", "values", "graph"):
                if await edges(st.root, EDGES, key) != want[key]:
                    return False
            return True
        await wait_for(all_match, what="the views' edges equal their members in SurrealDB")
