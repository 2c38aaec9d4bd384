"""View metrics (SVC_SSP_VIEW_METRICS_FLUSH_MS) through a real SSP and database host: each
view's publication figures land in `_00_view_metrics`, which record users cannot read."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from surrealdb import RecordID

from dbclient import DbQueryError
from tests.integration.test_ssp_edges import Stack, register_body, user_id
from tests.support.procs import DbHost
from tests.support.ssp_stack import (
    APP_SCHEMA,
    apply_schema,
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
    ssp = start_ssp(tmp_path, host, ns, db, SVC_SSP_VIEW_METRICS_FLUSH_MS="100")
    try:
        await ssp.wait_ready()
        yield Stack(host, ns, db, ssp, root)
    finally:
        code = ssp.stop()
        await root.close()
        assert code == 0, ssp.process.log_text()[-3000:]


async def metrics_row(stack: Stack, key: str) -> dict[str, Any] | None:
    try:
        rows = await stack.root.query_one("SELECT * FROM $id",
                                          {"id": RecordID("_00_view_metrics", key)})
    except DbQueryError as e:
        if "does not exist" in str(e):
            return None  # the SSP defines the table at its first write
        raise
    return rows[0] if rows else None


async def test_view_metrics_are_flushed_per_view_and_hidden_from_users(stack: Stack) -> None:
    alice = await record_user(stack.host, stack.ns, stack.dbname, "alice")
    try:
        alice_id = await user_id(stack.root, "alice")
        surql = "SELECT * FROM post WHERE owner = $auth.id"
        r = await stack.ssp.call("POST /view/register", register_body("vm0", surql, alice_id))
        assert r["status"] == 200, r
        await stack.root.query("CREATE post:m1 SET owner = $o, title = 'x'", {"o": alice_id})

        async def has_rows(key: str, n: int) -> dict[str, Any] | None:
            row = await metrics_row(stack, key)
            return row if row and row["rows"] == n else None

        # vm0 was empty at registration: its first figures come from the incremental update
        first0 = await wait_for(lambda: has_rows("vm0", 1), what="vm0 metrics after one row")
        assert first0["view"] == RecordID("_00_query", "vm0")
        assert first0["view_id"] == "query:vm0" and first0["ssp_id"]
        assert first0["updates"] >= 1 and first0["edge_ops"] >= 1
        assert "materialize_ms" not in first0  # nothing was materialised

        # vm1 registers over one existing row: its initial edges give materialize_ms
        r = await stack.ssp.call("POST /view/register", register_body("vm1", surql, alice_id))
        assert r["status"] == 200 and r["body"]["rowCount"] == 1, r
        first = await wait_for(lambda: has_rows("vm1", 1), what="vm1 metrics")
        assert first["materialize_ms"] >= 0

        for i in range(3):
            await stack.root.query(f"CREATE post:m{i + 2} SET owner = $o, title = 't'",
                                   {"o": alice_id})
        # `rows` follows the engine and `edge_ops` the publisher, so a row written between
        # the two shows 4 rows with the last edges still unpublished: wait for both
        async def published() -> dict[str, Any] | None:
            row = await has_rows("vm1", 4)
            return row if row and row["edge_ops"] >= first["edge_ops"] + 3 else None

        later = await wait_for(published, what="vm1 metrics after 3 more rows and their edges")
        assert later["updates"] > first["updates"]
        pm = later["publish_ms"]
        assert pm["samples"] == later["updates"]
        assert 0 <= pm["p50"] <= pm["p99"] <= pm["max"]

        # record users never read operator metrics
        assert await alice.query("SELECT * FROM _00_view_metrics") == []

        r = await stack.ssp.call("POST /view/unregister", {"id": "query:vm1"})
        assert r["status"] == 200, r

        async def gone() -> bool:
            return await metrics_row(stack, "vm1") is None

        await wait_for(gone, what="metrics row removed with the view")
        assert await metrics_row(stack, "vm0") is not None
    finally:
        await alice.close()
