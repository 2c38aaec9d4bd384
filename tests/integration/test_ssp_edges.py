"""The SSP end to end (changefeed transport): database host + `python -m ssp`, views
registered through the hub contract, edges read back through the database and through a
record user's LIVE subscription on its own edge table."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from surrealdb import RecordID

from dbclient import Database
from engine.values import record_id_text
from tests.support.procs import DbHost
from tests.support.ssp_stack import (
    APP_SCHEMA,
    Ssp,
    edges,
    live_stream,
    module_ssp,
    record_user,
    root_db,
    wait_for,
)


class Stack:
    def __init__(self, host: DbHost, ns: str, db: str, ssp: Ssp, root: Database) -> None:
        self.host, self.ns, self.dbname, self.ssp, self.root = host, ns, db, ssp, root
        # the module's tests share one database: each signs up users of its own
        tag = uuid.uuid4().hex[:8]
        self.alice, self.bob = f"alice_{tag}", f"bob_{tag}"


@pytest.fixture(scope="module")
def shared(host: DbHost, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[str, str, Ssp]]:
    """One database and SSP for the module: starting them was most of each test's time.
    Tests use users, posts and view ids of their own, and counts relative to what is
    there."""
    with module_ssp(host, tmp_path_factory.mktemp("edges"), APP_SCHEMA) as shared:
        yield shared


@pytest.fixture
async def stack(host: DbHost, shared: tuple[str, str, Ssp]) -> AsyncIterator[Stack]:
    ns, db, ssp = shared
    root = await root_db(host, ns, db)
    try:
        yield Stack(host, ns, db, ssp, root)
    finally:
        ssp.close_client()
        await root.close()


async def user_id(root: Database, name: str) -> RecordID:
    [rid] = await root.query_one("SELECT VALUE id FROM user WHERE name = $n", {"n": name})
    assert isinstance(rid, RecordID)
    return rid


def register_body(key: str, surql: str, auth: RecordID | None, **extra: Any) -> dict[str, Any]:
    params = {"auth_id": record_id_text(auth)} if auth is not None else {}
    params.update(extra.pop("params", {}))
    return {"id": f"query:{key}", "surql": surql, "clientId": "c1", "ttl": "10m",
            "params": params, **extra}


async def test_record_user_sees_edges_appear_and_disappear(stack: Stack) -> None:
    alice = await record_user(stack.host, stack.ns, stack.dbname, stack.alice)
    try:
        alice_id = await user_id(stack.root, stack.alice)
        r = await stack.ssp.call("POST /view/register", register_body(
            "a1", "SELECT * FROM post WHERE owner = $auth.id", alice_id))
        assert r["status"] == 200, r
        assert r["body"]["state"] == "ready" and r["body"]["rowCount"] == 0
        table = f"_00_list_ref_user_{alice_id.id}"
        q = live_stream(alice, await alice.live(table))
        await stack.root.query("CREATE post:p1 SET owner = $o, title = 'hello'", {"o": alice_id})
        note = await asyncio.wait_for(q.get(), 30)
        assert note["action"] == "CREATE"
        assert note["result"]["out"] == RecordID("post", "p1")
        assert note["result"]["in"] == RecordID("_00_query", "a1")
        await stack.root.query("UPDATE post:p1 SET title = 'changed'")
        note = await asyncio.wait_for(q.get(), 30)
        assert note["action"] == "UPDATE" and note["result"]["out"] == RecordID("post", "p1")
        await stack.root.query("DELETE post:p1")
        note = await asyncio.wait_for(q.get(), 30)
        assert note["action"] == "DELETE"
        assert await edges(stack.root, table, "a1") == set()
    finally:
        await alice.close()


async def test_initial_members_are_published_and_the_row_becomes_ready(stack: Stack) -> None:
    alice = await record_user(stack.host, stack.ns, stack.dbname, stack.alice)
    await alice.close()
    alice_id = await user_id(stack.root, stack.alice)
    for i in range(5):
        await stack.root.query("CREATE type::record('post', $k) SET owner = $o, title = 't'",
                               {"k": f"x{i}", "o": alice_id})
    await wait_for(lambda: _all_loaded(stack, "post"), what="posts loaded")
    r = await stack.ssp.call("POST /view/register", register_body(
        "init", "SELECT * FROM post WHERE owner = $auth.id ORDER BY id LIMIT 3", alice_id))
    assert r["status"] == 200, r
    assert r["body"]["state"] == "materializing" and r["body"]["rowCount"] == 3
    table = f"_00_list_ref_user_{alice_id.id}"
    async def ready() -> Any:
        row = await stack.root.query_one("SELECT * FROM ONLY _00_query:init")
        return row if row and row.get("state") == "ready" else None
    row = await wait_for(ready, what="state ready")
    assert row["rowCount"] == 3 and row["auth_id"] == alice_id
    assert await edges(stack.root, table, "init") == {"post:x0", "post:x1", "post:x2"}
    await stack.root.query("DELETE post:x1")
    async def refilled() -> Any:
        return await edges(stack.root, table, "init") == {"post:x0", "post:x2", "post:x3"}
    await wait_for(refilled, what="window refilled from below")


async def _info_count(stack: Stack, table: str, n: int) -> bool:
    r = await stack.ssp.call("GET /info")
    return bool(r["body"][0]["circuit_tables"].get(table) == n)


async def _all_loaded(stack: Stack, table: str) -> bool:
    """The SSP's circuit holds as many rows of `table` as the database (the module's other
    tests wrote some too)."""
    rows = await stack.root.query_one(f"SELECT count() AS n FROM {table} GROUP ALL")
    return await _info_count(stack, table, rows[0]["n"] if rows else 0)


async def test_another_user_never_sees_the_edges(stack: Stack) -> None:
    alice = await record_user(stack.host, stack.ns, stack.dbname, stack.alice)
    bob = await record_user(stack.host, stack.ns, stack.dbname, stack.bob)
    try:
        alice_id = await user_id(stack.root, stack.alice)
        bob_id = await user_id(stack.root, stack.bob)
        for key, who in (("va", alice_id), ("vb", bob_id)):
            r = await stack.ssp.call("POST /view/register", register_body(
                key, "SELECT * FROM post WHERE owner = $auth.id", who))
            assert r["status"] == 200, r
        a_table = f"_00_list_ref_user_{alice_id.id}"
        b_table = f"_00_list_ref_user_{bob_id.id}"
        qa = live_stream(alice, await alice.live(a_table))
        await stack.root.query("CREATE post:secret SET owner = $o, title = 'alice only'",
                               {"o": alice_id})
        await stack.root.query("CREATE post:bobs SET owner = $o, title = 'bob'", {"o": bob_id})
        note = await asyncio.wait_for(qa.get(), 30)
        assert note["result"]["out"] == RecordID("post", "secret")
        # Bob cannot read alice's edge table, nor subscribe to anything in it.
        assert await bob.query(f"SELECT * FROM {a_table}") == []
        # Bob's post is a later change than alice's note: wait for its edge, not assume it.
        async def bobs_edge() -> bool:
            return await edges(stack.root, b_table, "vb") == {"post:bobs"}

        await wait_for(bobs_edge, what="bob's edge")
        rows = await bob.query(f"SELECT * FROM {b_table}")
        assert [r["out"] for r in rows] == [RecordID("post", "bobs")]
        # Alice's stream got nothing of bob's: a later change of hers arrives next.
        await stack.root.query("UPDATE post:secret SET n = 2")
        note = await asyncio.wait_for(qa.get(), 30)
        assert note["result"]["out"] == RecordID("post", "secret")
    finally:
        await alice.close()
        await bob.close()


async def test_re_registration_under_another_identity_is_409(stack: Stack) -> None:
    await (await record_user(stack.host, stack.ns, stack.dbname, stack.alice)).close()
    await (await record_user(stack.host, stack.ns, stack.dbname, stack.bob)).close()
    alice_id = await user_id(stack.root, stack.alice)
    bob_id = await user_id(stack.root, stack.bob)
    body = register_body("mine", "SELECT * FROM post WHERE owner = $auth.id", alice_id)
    assert (await stack.ssp.call("POST /view/register", body))["status"] == 200
    r = await stack.ssp.call("POST /view/register", register_body(
        "mine", "SELECT * FROM post WHERE owner = $auth.id", bob_id))
    assert r["status"] == 409 and r["body"]["error"] == "auth_mismatch", r
    row = await stack.root.query_one("SELECT * FROM ONLY _00_query:mine")
    assert row["auth_id"] == alice_id


async def test_refused_query_is_400_rejected_before_any_write(stack: Stack) -> None:
    await (await record_user(stack.host, stack.ns, stack.dbname, stack.alice)).close()
    alice_id = await user_id(stack.root, stack.alice)
    r = await stack.ssp.call("POST /view/register", register_body(
        "bad", "SELECT * FROM post WHERE owner = $auth.id SPLIT title LIMIT 2", alice_id))
    assert r["status"] == 400 and r["body"]["error"] == "rejected", r
    assert "SPLIT" in r["body"]["message"].upper()
    assert await stack.root.query_one("SELECT * FROM ONLY _00_query:bad") is None


async def test_unregister_removes_edges_and_row(stack: Stack) -> None:
    await (await record_user(stack.host, stack.ns, stack.dbname, stack.alice)).close()
    alice_id = await user_id(stack.root, stack.alice)
    await stack.root.query("CREATE post:u1 SET owner = $o, title = 't'", {"o": alice_id})
    await wait_for(lambda: _all_loaded(stack, "post"), what="post loaded")
    r = await stack.ssp.call("POST /view/register", register_body(
        "gone", "SELECT * FROM post WHERE owner = $auth.id", alice_id))
    assert r["status"] == 200
    table = f"_00_list_ref_user_{alice_id.id}"
    await wait_for(lambda: _has_edges(stack, table, "gone", {"post:u1"}), what="edge")
    r = await stack.ssp.call("POST /view/unregister", {"id": "query:gone"})
    assert r["status"] == 200
    async def cleared() -> bool:
        row = await stack.root.query_one("SELECT * FROM ONLY _00_query:gone")
        return row is None and await edges(stack.root, table, "gone") == set()
    await wait_for(cleared, what="edges and row removed")
    assert (await stack.ssp.call("GET /debug/view/{view_id}",
                                 params={"view_id": "query:gone"}))["status"] == 404


async def test_deleting_the_query_row_unregisters_the_view(stack: Stack) -> None:
    await (await record_user(stack.host, stack.ns, stack.dbname, stack.alice)).close()
    alice_id = await user_id(stack.root, stack.alice)
    await stack.root.query("CREATE post:d1 SET owner = $o, title = 't'", {"o": alice_id})
    await wait_for(lambda: _all_loaded(stack, "post"), what="post loaded")
    assert (await stack.ssp.call("POST /view/register", register_body(
        "rowdel", "SELECT * FROM post WHERE owner = $auth.id", alice_id)))["status"] == 200
    table = f"_00_list_ref_user_{alice_id.id}"
    await wait_for(lambda: _has_edges(stack, table, "rowdel", {"post:d1"}), what="edge")
    await stack.root.query("DELETE _00_query:rowdel")
    async def gone() -> bool:
        r = await stack.ssp.call("GET /debug/view/{view_id}", params={"view_id": "query:rowdel"})
        return r["status"] == 404 and await edges(stack.root, table, "rowdel") == set()
    await wait_for(gone, what="view unregistered from the feed")


async def test_only_users_owning_a_view_get_an_edge_table_and_it_goes_with_the_user(
        stack: Stack) -> None:
    # A defined table makes every DELETE in the database slower (ssp/README.md, "Edge
    # tables"): a `user` CREATE alone defines none; the user's first view does.
    users = await stack.root.query_one("SELECT count() AS n FROM user GROUP ALL")
    before = users[0]["n"] if users else 0
    await stack.root.query("CREATE user:carol SET name = 'carol', pass = 'x'; "
                           "CREATE user:dave SET name = 'dave', pass = 'x'")
    await wait_for(lambda: _info_count(stack, "user", before + 2), what="users ingested")
    assert not {"_00_list_ref_user_carol", "_00_list_ref_user_dave"} & set(
        await stack.root.tables())
    assert (await stack.ssp.call("POST /view/register", register_body(
        "carols", "SELECT * FROM post WHERE owner = $auth.id",
        RecordID("user", "carol"))))["status"] == 200
    tables = set(await stack.root.tables())
    assert "_00_list_ref_user_carol" in tables and "_00_list_ref_user_dave" not in tables
    await stack.root.query("DELETE user:carol")
    async def dropped() -> bool:
        return "_00_list_ref_user_carol" not in await stack.root.tables()
    await wait_for(dropped, what="edge table dropped")
    # carol comes back while her view is still held: her table is defined again
    await stack.root.query("CREATE user:carol SET name = 'carol', pass = 'x'")
    async def defined() -> bool:
        return "_00_list_ref_user_carol" in await stack.root.tables()
    await wait_for(defined, what="edge table defined again")


async def _has_edges(stack: Stack, table: str, key: str, want: set[str]) -> bool:
    return await edges(stack.root, table, key) == want


async def test_a_member_that_leaves_is_retired_then_reaped_and_a_live_client_sees_both(
        stack: Stack) -> None:
    # Mode dedicated (ssp/README.md, "Edge removal"): the flush retires the edge (an UPDATE
    # with `removed: true` the subscriber sees at once), the reaper deletes it afterwards, and
    # a member coming back gets an edge without `removed`.
    alice = await record_user(stack.host, stack.ns, stack.dbname, stack.alice)
    try:
        alice_id = await user_id(stack.root, stack.alice)
        assert (await stack.ssp.call("POST /view/register", register_body(
            "pos", "SELECT * FROM post WHERE owner = $auth.id AND n > 0", alice_id)))[
            "status"] == 200
        table = f"_00_list_ref_user_{alice_id.id}"
        notes = live_stream(alice, await alice.live(table))
        await stack.root.query("CREATE post:r1 SET owner = $o, title = 't', n = 1",
                               {"o": alice_id})
        note = await asyncio.wait_for(notes.get(), 30)
        assert note["action"] == "CREATE" and note["result"]["out"] == RecordID("post", "r1")
        assert not note["result"].get("removed")
        # the SSP is the module's: its reaper count is read before, not assumed zero
        reaped_before = (await stack.ssp.call("GET /debug/memory"))["body"]["reaper"]["reaped"]
        await stack.root.query("UPDATE post:r1 SET n = 0")  # leaves the view
        note = await asyncio.wait_for(notes.get(), 30)
        assert note["action"] == "UPDATE" and note["result"]["removed"] is True
        assert await edges(stack.root, table, "pos") == set()
        note = await asyncio.wait_for(notes.get(), 30)  # the reaper's delete
        assert note["action"] == "DELETE" and note["result"]["out"] == RecordID("post", "r1")
        assert await stack.root.query_one(f"SELECT * FROM {table}") == []
        memory = (await stack.ssp.call("GET /debug/memory"))["body"]
        assert memory["reaper"]["reaped"] >= reaped_before + 1
        # the embedded build (3.2.4) logs the edges a DELETE takes along: removals need not
        # write the edge retired first (the Node build's 3.0.2 does not: test_http_transport)
        assert memory["publication"]["unlogged_cascades"] is False
        await stack.root.query("UPDATE post:r1 SET n = 5")  # back in the view
        note = await asyncio.wait_for(notes.get(), 30)
        assert note["action"] == "CREATE" and not note["result"].get("removed")
        assert await edges(stack.root, table, "pos") == {"post:r1"}
    finally:
        await alice.close()


async def test_retired_edges_do_not_pile_up_while_members_keep_leaving(stack: Stack) -> None:
    # Mode dedicated: each round members leave two ways, by an UPDATE out of the filter (the
    # flush retires the edge, the reaper deletes it) and by a DELETE of their row (SurrealDB
    # deletes the row's edges in that transaction, so the flush finds nothing to retire and
    # the reaper nothing to delete: at ~7 ms per deleted edge with 1,000 per-user tables,
    # deleting what is gone is what made the reaper fall behind). After every round the edge
    # table holds no row and the reaper has deleted exactly the edges it retired.
    await stack.root.query("CREATE user:erin SET name = 'erin', pass = 'x'")
    erin = RecordID("user", "erin")
    assert (await stack.ssp.call("POST /view/register", register_body(
        "erins", "SELECT * FROM post WHERE owner = $auth.id AND n > 0", erin)))[
        "status"] == 200
    table = "_00_list_ref_user_erin"

    async def settled() -> Any:
        # the module's earlier tests' retired edges reaped: the count is read from here on
        reaper = (await stack.ssp.call("GET /debug/memory"))["body"]["reaper"]
        return reaper if reaper["queued"] == 0 else None
    base = (await wait_for(settled, what="the reaper idle"))["reaped"]
    churned = 0
    for r in range(3):
        moved = [f"post:m{r}_{i}" for i in range(3)]
        gone = [f"post:g{r}_{i}" for i in range(3)]
        await stack.root.query(
            "FOR $k IN $keys { CREATE type::record('post', $k) SET owner = $o, title = 't', "
            "n = 1 }", {"keys": [k.split(":")[1] for k in moved + gone], "o": erin})
        members = set(moved + gone)
        await wait_for(lambda want=members: _has_edges(stack, table, "erins", want),
                       what=f"round {r}: members in")
        await stack.root.query(
            "FOR $k IN $moved { UPDATE type::record('post', $k) SET n = 0 }; "
            "FOR $k IN $gone { DELETE type::record('post', $k) }",
            {"moved": [k.split(":")[1] for k in moved], "gone": [k.split(":")[1] for k in gone]})
        churned += len(moved)
        await wait_for(lambda: _has_edges(stack, table, "erins", set()),
                       what=f"round {r}: members out")

        async def reaped(want: int = base + churned) -> bool:
            rows = await stack.root.query_one(f"SELECT VALUE id FROM {table}")
            reaper = (await stack.ssp.call("GET /debug/memory"))["body"]["reaper"]
            return not rows and reaper["queued"] == 0 and reaper["reaped"] >= want
        await wait_for(reaped, what=f"round {r}: retired edges reaped")
        reaper = (await stack.ssp.call("GET /debug/memory"))["body"]["reaper"]
        assert reaper["reaped"] == base + churned, reaper  # deleted rows' edges cost nothing
        assert reaper["failures"] == 0 and reaper["overflowed"] == 0, reaper
