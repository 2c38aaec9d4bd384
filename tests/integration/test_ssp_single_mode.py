"""Ref mode `single` end to end: every view's edges go to the shared `_00_list_ref` with the
owner's `auth_id`, and its permission rule `auth_id = $auth.id` keeps users apart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from surrealdb import RecordID

from tests.integration.test_ssp_edges import Stack, register_body, user_id
from tests.support.procs import DbHost
from tests.support.ssp_stack import (
    APP_SCHEMA,
    apply_schema,
    live_stream,
    record_user,
    root_db,
    start_ssp,
    unique_db,
    wait_for,
)


@pytest.fixture
async def stack(host: DbHost, tmp_path: Path) -> AsyncIterator[Stack]:
    ns, db = unique_db()
    root = await root_db(host, ns, db)
    await root.query(APP_SCHEMA)
    apply_schema(host, ns, db)
    ssp = start_ssp(tmp_path, host, ns, db, SVC_SSP_REF_MODE="single")
    try:
        await ssp.wait_ready()
        yield Stack(host, ns, db, ssp, root)
    finally:
        code = ssp.stop()
        await root.close()
        assert code == 0, ssp.process.log_text()[-3000:]


async def test_single_mode_edges_carry_auth_id_and_stay_private(stack: Stack) -> None:
    alice = await record_user(stack.host, stack.ns, stack.dbname, "alice")
    bob = await record_user(stack.host, stack.ns, stack.dbname, "bob")
    try:
        alice_id = await user_id(stack.root, "alice")
        bob_id = await user_id(stack.root, "bob")
        await stack.root.query("CREATE post:early SET owner = $o, title = 'before'",
                               {"o": alice_id})
        surql = "SELECT * FROM post WHERE owner = $auth.id"
        for key, who in (("sa", alice_id), ("sb", bob_id)):
            r = await stack.ssp.call("POST /view/register", register_body(key, surql, who))
            assert r["status"] == 200, r
        qa = live_stream(alice, await alice.live("_00_list_ref"))
        await stack.root.query("CREATE post:a1 SET owner = $o, title = 'a'", {"o": alice_id})
        await stack.root.query("CREATE post:b1 SET owner = $o, title = 'b'", {"o": bob_id})
        note = await asyncio.wait_for(qa.get(), 30)
        assert note["result"]["out"] in (RecordID("post", "a1"), RecordID("post", "early"))
        assert note["result"]["auth_id"] == alice_id

        async def all_edges() -> list[dict] | None:
            rows = await stack.root.query_one("SELECT * FROM _00_list_ref")
            return rows if len(rows) == 3 else None

        rows = await wait_for(all_edges, what="three edges in _00_list_ref")
        owner = {str(r["out"]): r["auth_id"] for r in rows}
        assert owner == {"post:early": alice_id, "post:a1": alice_id, "post:b1": bob_id}
        assert all(isinstance(r["rv"], int) for r in rows)
        seen_by_bob = await bob.query("SELECT * FROM _00_list_ref")
        assert [r["out"] for r in seen_by_bob] == [RecordID("post", "b1")]
        # an UPDATE re-writes alice's edge in place (same id, newer rv), never a second edge
        before = next(r for r in rows if r["out"] == RecordID("post", "a1"))
        await stack.root.query("UPDATE post:a1 SET title = 'a2'")

        async def bumped() -> dict | None:
            got = await stack.root.query_one("SELECT * FROM _00_list_ref WHERE out = post:a1")
            return got[0] if len(got) == 1 and got[0]["rv"] != before["rv"] else None

        after = await wait_for(bumped, what="edge rv bumped in place")
        assert after["id"] == before["id"] and after["auth_id"] == alice_id
    finally:
        await alice.close()
        await bob.close()
