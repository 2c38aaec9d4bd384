"""A standalone SSP tailing the changefeed sees a synced write that sits behind more than a
page (1,000 entries) of other tables' feed entries: the engine's LIMIT counts every table's
entries, so a table-by-table read came back empty and the tail never moved again."""

from __future__ import annotations

from pathlib import Path

from dbclient import Database
from tests.support.procs import DbHost
from tests.support.ssp_stack import edges, open_stack, view_body, wait_for

OWN = "SELECT * FROM post WHERE owner = $auth.id"


async def alice(root: Database) -> None:
    await root.query("CREATE user:alice SET name = 'alice', pass = 'x'; "
                     "DEFINE TABLE noise CHANGEFEED 1h")


async def test_a_write_behind_a_page_of_other_tables_entries_reaches_the_view(
        host: DbHost, tmp_path: Path) -> None:
    async with open_stack(host, tmp_path, before_start=alice) as st:
        r = await st.ssp.call("POST /view/register", view_body("mine", OWN))
        assert r["status"] == 200
        await st.root.query("; ".join(f"CREATE noise:{i}" for i in range(1100)))
        await st.root.query("CREATE post:behind SET owner = user:alice, title = 't'")

        async def arrived() -> bool:
            return await edges(st.root, "_00_list_ref_user_alice", "mine") == {"post:behind"}

        await wait_for(arrived, timeout=20, what="the post behind the other table's entries")
        # Later writes keep flowing.
        await st.root.query("CREATE post:after SET owner = user:alice, title = 't'")

        async def both() -> bool:
            return await edges(st.root, "_00_list_ref_user_alice", "mine") == {
                "post:behind", "post:after"}

        await wait_for(both, timeout=20, what="the next post")
