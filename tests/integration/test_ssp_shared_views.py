"""Register rule 3 on a real SSP (2 shards): a registration with another view id but the same
identity, query and parameters joins the existing view's graph (same shard, one engine
materialisation), and every `_00_query` row of the group counts the group's subscribers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ssp.shards import shard_of
from tests.support.procs import DbHost
from tests.support.ssp_stack import edges, open_stack, view_body, wait_for

OWN = "SELECT * FROM post WHERE owner = $auth.id"


def ids_on_two_shards() -> tuple[str, str]:
    """Two view keys whose ids alone would place them on different shards."""
    first = "share0"
    for i in range(1, 100):
        if shard_of(f"query:share{i}", 2) != shard_of(f"query:{first}", 2):
            return first, f"share{i}"
    raise AssertionError("no pair found")


async def test_a_merged_subscriber_joins_the_existing_view(host: DbHost,
                                                           tmp_path: Path) -> None:
    a, b = ids_on_two_shards()

    async def rows(root: Any) -> None:
        await root.query("CREATE user:alice SET name = 'alice', pass = 'x'; "
                         "CREATE post:1 SET owner = user:alice, title = 'a'")

    async with open_stack(host, tmp_path, before_start=rows, SVC_SSP_SHARDS="2") as st:
        async def subscribers(key: str) -> Any:
            row = await st.root.query_one(f"SELECT subscribers FROM ONLY _00_query:{key}")
            return row["subscribers"] if row else None

        async def counts_are(n_a: int | None, n_b: int) -> bool:
            return (await subscribers(a), await subscribers(b)) == (n_a, n_b)

        r = await st.ssp.call("POST /view/register", dict(view_body(a, OWN), clientId="tab1"))
        assert r["status"] == 200, r
        assert await subscribers(a) == 1
        r = await st.ssp.call("POST /view/register", dict(view_body(b, OWN), clientId="tab2"))
        assert r["status"] == 200, r
        assert r["body"]["records"] == ["post:1"]
        # joined: the same shard, one materialisation for both ids
        va = (await st.ssp.call("GET /debug/view/{view_id}", params={"view_id": f"query:{a}"}))
        vb = (await st.ssp.call("GET /debug/view/{view_id}", params={"view_id": f"query:{b}"}))
        assert va["body"]["shard"] == vb["body"]["shard"]
        mem = (await st.ssp.call("GET /debug/memory"))["body"]
        shards = mem["shards"]
        assert sum(s["views"] for s in shards) == 2 and sum(s["circuits"] for s in shards) == 1
        # every row of the group counts the group's clients
        assert await counts_are(2, 2)
        await wait_for(lambda: _is(edges(st.root, "_00_list_ref_user_alice", b), {"post:1"}),
                       what="b's own edges")
        # a third client re-registering b: both rows follow
        r = await st.ssp.call("POST /view/register", dict(view_body(b, OWN), clientId="tab3"))
        assert r["status"] == 200, r
        assert await counts_are(3, 3)
        # another identity or another query is another graph: not counted
        r = await st.ssp.call("POST /view/register",
                              dict(view_body("other", OWN + " AND n > 0"), clientId="tab9"))
        assert r["status"] == 200 and await subscribers("other") == 1
        assert await counts_are(3, 3)
        # a leaves: b keeps its own clients only; the shared graph keeps serving b
        r = await st.ssp.call("POST /view/unregister", {"id": f"query:{a}"})
        assert r["status"] == 200
        await wait_for(lambda: _is(subscribers(b), 2), what="b's count without a's client")
        await st.root.query("CREATE post:2 SET owner = user:alice, title = 'b'")
        await wait_for(lambda: _is(edges(st.root, "_00_list_ref_user_alice", b),
                                   {"post:1", "post:2"}), what="b still maintained")


async def _is(coro: Any, expected: Any) -> bool:
    return (await coro) == expected
