"""`GET /debug/view/:id` and `GET /debug/deps` of a real SSP: the tables come from the query
(subqueries included, a view without rows too), the subquery state from the view's shard, and
`last_hash` is a stable xxh3 of the members (the same in any process)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import xxhash

from tests.support.procs import DbHost
from tests.support.ssp_stack import open_stack, view_body, wait_for

NESTED = ("SELECT *, (SELECT id, title FROM post WHERE owner = $parent.id) AS posts "
          "FROM user WHERE id = $auth.id")


async def test_debug_view_and_deps_report_the_queries(host: DbHost, tmp_path: Path) -> None:
    async def rows(root: Any) -> None:  # loaded by the bootstrap, before any view
        await root.query("CREATE user:alice SET name = 'alice', pass = 'x'; "
                         "CREATE post:1 SET owner = user:alice, title = 'a'; "
                         "CREATE post:2 SET owner = user:alice, title = 'b'")

    async with open_stack(host, tmp_path, before_start=rows) as st:
        r = await st.ssp.call("POST /view/register", view_body("nest", NESTED))
        assert r["status"] == 200, r
        r = await st.ssp.call("POST /view/register", view_body(
            "none", "SELECT * FROM post WHERE title = 'no such title'"))
        assert r["status"] == 200, r

        d = await st.ssp.call("GET /debug/view/{view_id}", params={"view_id": "query:nest"})
        assert d["status"] == 200, d
        v = d["body"]
        assert v["referenced_tables"] == ["post", "user"]
        assert v["subquery_tables"] == ["post"]
        # one parent row (alice) whose subquery scanned post by one correlation key
        assert v["subquery_cache"] == {"post": {"parents": 1, "keys": 1}}
        assert set(v["cache"]) >= {"user:alice"}
        expected = xxhash.xxh3_64_intdigest("\n".join(sorted(v["cache"])).encode())
        assert v["last_hash"] == f"{expected:016x}"

        e = (await st.ssp.call("GET /debug/view/{view_id}",
                               params={"view_id": "query:none"}))["body"]
        assert e["cache"] == [] and e["referenced_tables"] == ["post"]
        assert e["subquery_tables"] == [] and e["subquery_cache"] == {}
        assert e["last_hash"] == f"{xxhash.xxh3_64_intdigest(b''):016x}"

        deps = (await st.ssp.call("GET /debug/deps"))["body"]
        assert deps["view_count"] == 2
        # the empty view depends on post by its query although it has no member there
        assert deps["dependency_map"]["post"] == ["query:nest", "query:none"]
        assert deps["dependency_map"]["user"] == ["query:nest"]

        # a new post of alice's reaches the subquery's output: the members and the hash move
        assert {"post:1", "post:2"} <= set(v["cache"])
        await st.root.query("CREATE post:3 SET owner = user:alice, title = 'c'")

        async def with_post3() -> dict[str, Any] | None:
            b = (await st.ssp.call("GET /debug/view/{view_id}",
                                   params={"view_id": "query:nest"}))["body"]
            return b if "post:3" in b["cache"] else None
        again = await wait_for(with_post3, 30.0, "post:3 in the nested view")
        assert again["last_hash"] != v["last_hash"]
