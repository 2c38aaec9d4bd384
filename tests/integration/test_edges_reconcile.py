"""Anti-entropy (issue 31, case 1's last clause): an application that may write edge tables or
`_00_query` rows (root here) changes them behind the SSP's back, and the SSP's reconciler
(`ssp.hub.reconcile`, a slice of views read back every `SVC_SSP_RECONCILE_MS`) puts each view's
edges and row back to what the view holds, in both edge modes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from dbclient import Database
from tests.support.procs import DbHost
from tests.support.ssp_stack import (
    Ssp,
    apply_schema,
    edges,
    root_db,
    start_ssp,
    unique_db,
    wait_for,
)

OWNER = "user:owner"


class Cluster:
    def __init__(self, host: DbHost, ns: str, db: str, ssp: Ssp, mode: str) -> None:
        self.host, self.ns, self.db, self.ssp, self.mode = host, ns, db, ssp, mode
        self.table = "_00_list_ref" if mode == "single" else "_00_list_ref_user_owner"


async def _prepare(host: DbHost, ns: str, db: str) -> None:
    root = await root_db(host, ns, db)
    try:
        await root.query("DEFINE TABLE comment SCHEMALESS PERMISSIONS FULL; "
                         "DEFINE TABLE user SCHEMALESS; "
                         f"CREATE {OWNER} SET name = 'owner'")
    finally:
        await root.close()


@pytest.fixture(scope="module", params=["dedicated", "single"])
def cluster(request: pytest.FixtureRequest, host: DbHost,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    ns, db = unique_db()
    asyncio.run(_prepare(host, ns, db))
    apply_schema(host, ns, db)
    ssp = start_ssp(tmp_path_factory.mktemp(f"reconcile-{request.param}"), host, ns, db,
                    SVC_SSP_REF_MODE=request.param, SVC_SSP_RECONCILE_MS="200")
    try:
        ssp.process.wait_http(f"http://127.0.0.1:{ssp.port}/health", timeout=60)
        yield Cluster(host, ns, db, ssp, request.param)
    finally:
        code = ssp.stop()
        assert code == 0, ssp.process.log_text()[-3000:]


@pytest.fixture
async def root(cluster: Cluster) -> AsyncIterator[Database]:
    db = await root_db(cluster.host, cluster.ns, cluster.db)
    try:
        yield db
    finally:
        cluster.ssp.close_client()
        await db.close()


async def view_with_edges(cluster: Cluster, root: Database, key: str, n: int) -> set[str]:
    """A view over `n` new comments of its own, once its edges and row are published."""
    await root.query("FOR $i IN 0..$n { CREATE type::record('comment', $k + <string>$i) "
                     "SET tag = $k }", {"k": key, "n": n})
    total = len(await root.query_one("SELECT VALUE id FROM comment"))

    async def loaded() -> bool:  # the SSP read the new rows from the feed
        info = (await cluster.ssp.call("GET /info"))["body"][0]
        return bool(info["circuit_tables"].get("comment", 0) >= total)
    await wait_for(loaded, what="rows ingested")
    r = await cluster.ssp.call("POST /view/register", {
        "id": f"query:{key}", "surql": f"SELECT id FROM comment WHERE tag = '{key}'",
        "clientId": "c", "ttl": "10m", "params": {"auth_id": OWNER}})
    assert r["status"] == 200 and r["body"]["rowCount"] == n, r
    want = set(r["body"]["records"])
    await wait_for(lambda: _equal(root, cluster, key, want, n), what=f"{key} published")
    return want


async def _equal(root: Database, cluster: Cluster, key: str, want: set[str], n: int) -> bool:
    row = await root.query_one("SELECT state, rowCount FROM ONLY type::record('_00_query', $k)",
                               {"k": key})
    return (await edges(root, cluster.table, key) == want and row is not None
            and row.get("state") == "ready" and row.get("rowCount") == n)


async def reconcile_stats(cluster: Cluster) -> dict[str, Any]:
    return dict((await cluster.ssp.call("GET /debug/memory"))["body"]["reconcile"])


async def test_an_edge_the_application_deleted_is_written_again(cluster: Cluster,
                                                                 root: Database) -> None:
    want = await view_with_edges(cluster, root, "del", 3)
    marked = (await reconcile_stats(cluster))["edges_marked"]
    victim = sorted(want)[0]
    await root.query("DELETE type::record($t, [_00_query:del, type::record($m)])",
                     {"t": cluster.table, "m": victim})
    assert await edges(root, cluster.table, "del") == want - {victim}
    await wait_for(lambda: _equal(root, cluster, "del", want, 3), what="edge written again")
    assert (await reconcile_stats(cluster))["edges_marked"] > marked


async def test_an_edge_the_application_added_is_removed(cluster: Cluster,
                                                        root: Database) -> None:
    want = await view_with_edges(cluster, root, "add", 2)
    await root.query("CREATE comment:stray SET tag = 'elsewhere'")
    auth = ", auth_id = user:owner" if cluster.mode == "single" else ""
    # one under the id the SSP would give it, one under an id of the writer's own
    await root.query("RELATE _00_query:add->(type::record($t, [_00_query:add, comment:stray]))"
                     "->comment:stray SET seq = 0" + auth, {"t": cluster.table})
    await root.query("RELATE _00_query:add->(type::record($t, 'mine'))->comment:add0 "
                     "SET seq = 0" + auth, {"t": cluster.table})
    assert "comment:stray" in await edges(root, cluster.table, "add")

    async def removed() -> bool:
        n = await root.query_one("SELECT VALUE id FROM type::table($t) WHERE in = _00_query:add"
                                 " AND !removed", {"t": cluster.table})
        return len(n) == 2 and await _equal(root, cluster, "add", want, 2)
    await wait_for(removed, what="both stray edges removed")


async def test_a_query_row_the_application_changed_is_written_again(cluster: Cluster,
                                                                    root: Database) -> None:
    want = await view_with_edges(cluster, root, "row", 2)
    await root.query("UPDATE _00_query:row SET state = 'materializing', rowCount = 99")
    await wait_for(lambda: _equal(root, cluster, "row", want, 2), what="row written again")
    assert (await reconcile_stats(cluster))["rows_repaired"] >= 1
    # and a view nobody touched is left alone
    repaired = await reconcile_stats(cluster)
    quiet = await view_with_edges(cluster, root, "quiet", 2)
    passes = repaired["passes"]
    await wait_for(lambda: _passes_after(cluster, passes + 2), what="two more passes")
    after = await reconcile_stats(cluster)
    assert (after["edges_marked"], after["rows_repaired"]) == (
        repaired["edges_marked"], repaired["rows_repaired"]), after
    assert await edges(root, cluster.table, "quiet") == quiet


async def _passes_after(cluster: Cluster, n: int) -> bool:
    return bool((await reconcile_stats(cluster))["passes"] >= n)
