"""SSP lifecycle with real processes: allowlist, TTL sweep, snapshot warm start, schema
changes without restart, database stalls.

The tests that only register views and write rows share one SSP (`shared`, allowlist `warn`,
a TTL sweep every second), each with names of its own and counts taken as deltas, so their
order does not matter; those that restart, reset, stall or configure the SSP otherwise start
their own."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from surrealdb import RecordID

from dbclient import Database
from tests.support.procs import DbHost, start_db_host
from tests.support.ssp_stack import (
    APP_SCHEMA,
    Ssp,
    Stack,
    apply_schema,
    edges,
    module_ssp,
    open_stack,
    root_db,
    start_ssp,
    unique_db,
    view_body,
    wait_for,
)

OWN = "SELECT * FROM post WHERE owner = $auth.id"
SHARED_ENV = {"SVC_SSP_QUERY_ALLOWLIST": "warn", "TTL_CLEANUP_INTERVAL_SECS": "1"}


async def alice(root: Database) -> None:
    await root.query("CREATE user:alice SET name = 'alice', pass = 'x'")


@pytest.fixture(scope="module")
def shared(host: DbHost, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[str, str, Ssp]]:
    """One SSP for the tests that neither restart nor reconfigure it."""
    with module_ssp(host, tmp_path_factory.mktemp("lifecycle"), APP_SCHEMA,
                    after_schema=alice, **SHARED_ENV) as shared:
        yield shared


@pytest.fixture
async def st(host: DbHost, shared: tuple[str, str, Ssp]) -> AsyncIterator[Stack]:
    """The shared SSP with a root connection and a hub client of this test's loop."""
    ns, db, ssp = shared
    root = await root_db(host, ns, db)
    try:
        yield Stack(host, ns, db, ssp, root)
    finally:
        ssp.close_client()
        await root.close()


async def test_allowlist_enforce_refuses_unlisted_shapes_with_403(host: DbHost,
                                                                  tmp_path: Path) -> None:
    async def setup(root: Database) -> None:
        await alice(root)
        await root.query("CREATE _00_query_allowlist:`blog__1` SET app = 'blog', "
                         "version = '1', queries = [$q]", {"q": OWN + " AND n > 3"})

    async with open_stack(host, tmp_path, before_start=setup,
                          SVC_SSP_QUERY_ALLOWLIST="enforce") as st:
        r = await st.ssp.call("POST /view/register", view_body("no", OWN))
        assert r["status"] == 403 and r["body"]["error"] == "not_allowlisted", r
        assert await st.root.query_one("SELECT * FROM ONLY _00_query:no") is None
        # Same shape as the listed query, other constants: admitted.
        r = await st.ssp.call("POST /view/register", view_body("yes", OWN + " AND n > 7"))
        assert r["status"] == 200, r
        r = await st.ssp.call("POST /view/register",
                              view_body("b", "SELECT * FROM _00_app_release"))
        assert r["status"] == 200, r
        info = (await st.ssp.call("GET /info"))["body"][0]["query_allowlist"]
        assert info["mode"] == "enforce" and info["entries"] == 1
        assert info["counters"]["refused"] == 1 and info["counters"]["allowed_static"] == 1
        assert info["counters"]["allowed_builtin"] == 1
        assert info["sources"][0]["app"] == "blog"
        assert info["last_refused"][0]["table"] == "post"


async def test_allowlist_reloads_on_row_change_and_after_admin_reload(
        host: DbHost, tmp_path: Path) -> None:
    async def setup(root: Any) -> None:
        await alice(root)
        await root.query("CREATE _00_query_allowlist:`blog__1` SET app = 'blog', "
                         "version = '1', queries = [$q]", {"q": OWN + " AND n > 3"})

    async with open_stack(host, tmp_path, before_start=setup,
                          SVC_SSP_QUERY_ALLOWLIST="enforce") as st:
        async def allowlist() -> dict[str, Any]:
            return (await st.ssp.call("GET /info"))["body"][0]["query_allowlist"]

        first = await allowlist()
        assert first["entries"] == 1
        # A release written while the SSP runs, with no registration missing it first: the
        # row change alone reloads the allowlist (LIVE on _00_query_allowlist).
        await st.root.query("CREATE _00_query_allowlist:`blog__2` SET app = 'blog', "
                            "version = '2', queries = [$q]", {"q": OWN})

        async def two_entries() -> dict[str, Any] | None:
            a = await allowlist()
            return a if a["entries"] == 2 else None
        got = await wait_for(two_entries, what="the new release loaded")
        assert got["reloads"] > first["reloads"] and got["counters"]["checked"] == 0
        r = await st.ssp.call("POST /view/register", view_body("now", OWN))
        assert r["status"] == 200, r
        assert (await allowlist())["counters"]["allowed_static"] == 1
        # An UPDATE of a row is a change too: the release withdrawn, the shape refused again.
        await st.root.query("UPDATE _00_query_allowlist:`blog__2` SET queries = []")
        await wait_for(lambda: _entries_are(allowlist, 1), what="the withdrawal loaded")
        r = await st.ssp.call("POST /view/register", view_body("later", OWN))
        assert r["status"] == 403, r
        # POST /admin/reload reloads it as well.
        before = (await allowlist())["reloads"]
        r = await st.ssp.call("POST /admin/reload", timeout=60.0)
        assert r["status"] == 200, r
        after = await allowlist()
        assert after["reloads"] > before and after["entries"] == 1


async def _entries_are(read: Any, n: int) -> bool:
    return (await read())["entries"] == n


async def test_allowlist_warn_admits_and_counts(st: Stack) -> None:
    async def warned() -> int:
        info = (await st.ssp.call("GET /info"))["body"][0]["query_allowlist"]
        assert info["mode"] == "warn"
        return int(info["counters"]["warned"])

    before = await warned()
    r = await st.ssp.call("POST /view/register", view_body("w", OWN))
    assert r["status"] == 200
    assert await warned() == before + 1


async def test_ttl_sweep_unregisters_expired_views(st: Stack) -> None:
    # the shared SSP sweeps every second (TTL_CLEANUP_INTERVAL_SECS in SHARED_ENV)
    await st.root.query("CREATE post:t SET owner = user:alice, title = 't'")
    r = await st.ssp.call("POST /view/register", dict(view_body("short", OWN), ttl="2s"))
    assert r["status"] == 200
    r = await st.ssp.call("POST /view/register",
                          view_body("long", OWN + " AND id = post:t"))
    assert r["status"] == 200

    async def swept() -> bool:
        row = await st.root.query_one("SELECT * FROM ONLY _00_query:short")
        return row is None and await edges(st.root, "_00_list_ref_user_alice",
                                           "short") == set()
    await wait_for(swept, what="expired view swept")
    assert await st.root.query_one("SELECT * FROM ONLY _00_query:long") is not None
    assert await edges(st.root, "_00_list_ref_user_alice", "long") == {"post:t"}


async def test_re_registration_refreshes_and_republishes_missing_edges(st: Stack) -> None:
    posts = await _table_count(st, "post")
    await st.root.query("CREATE post:r SET owner = user:alice, title = 't'")
    await wait_for(lambda: _count(st, "post", posts + 1), what="loaded")
    own_r = OWN + " AND id = post:r"
    assert (await st.ssp.call("POST /view/register", view_body("re", own_r)))["status"] == 200
    await wait_for(lambda: _edges_are(st.root, "re", {"post:r"}), what="edge")
    await st.root.query("DELETE _00_list_ref_user_alice WHERE in = _00_query:re")
    r = await st.ssp.call("POST /view/register", dict(view_body("re", own_r), clientId="c2"))
    assert r["status"] == 200
    await wait_for(lambda: _edges_are(st.root, "re", {"post:r"}), what="edge republished")
    row = await st.root.query_one("SELECT * FROM ONLY _00_query:re")
    assert row["clientId"] == "c2" and row["subscribers"] == 2 and row["state"] == "ready"


async def test_warm_start_from_snapshot_catches_up_to_the_same_state(
        host: DbHost, tmp_path: Path) -> None:
    snap = tmp_path / "snap"
    async with open_stack(host, tmp_path, before_start=alice, SVC_SSP_SNAPSHOT_DIR=str(snap),
                          SVC_SSP_CHECKPOINT_INTERVAL_SECS="1") as st:
        await st.root.query("CREATE post:s1 SET owner = user:alice, title = 'a'")
        assert (await st.ssp.call("POST /view/register", view_body("snap", OWN)))["status"] == 200
        await wait_for(lambda: _edges_are(st.root, "snap", {"post:s1"}), what="edge")

        async def checkpointed() -> bool:
            # written by the periodic checkpoint while the SSP runs, not only on the way out
            try:
                data = json.loads((snap / "snapshot.json").read_text())
            except (OSError, ValueError):
                return False
            return "post" in data["rows"] and data["cursors"].get("post", 0) > 0

        await wait_for(checkpointed, what="a checkpoint every SVC_SSP_CHECKPOINT_INTERVAL_SECS")
        info_before = (await st.ssp.call("GET /info"))["body"][0]
        st.ssp.stop()
        data = json.loads((snap / "snapshot.json").read_text())
        assert "post" in data["rows"] and data["cursors"]["post"] > 0
        # Written while the SSP is down: the warm start must catch up from the feed.
        await st.root.query("CREATE post:s2 SET owner = user:alice, title = 'b'")
        await st.root.query("DELETE post:s1")
        st.ssp = start_ssp(tmp_path, host, st.ns, st.dbname, SVC_SSP_SNAPSHOT_DIR=str(snap))
        await st.ssp.wait_ready()
        await wait_for(lambda: _edges_are(st.root, "snap", {"post:s2"}), what="caught up")
        info = (await st.ssp.call("GET /info"))["body"][0]
        assert info["circuit_tables"]["post"] == 1
        assert info["circuit_tables"]["user"] == info_before["circuit_tables"]["user"]
        assert "warm start from snapshot" in st.ssp.process.log_text()


async def test_new_and_removed_tables_apply_without_restart(st: Stack) -> None:
    # the schema poll (every second, start_ssp's default) finds the new table unasked
    await st.root.query("DEFINE TABLE note SCHEMALESS; CREATE note:1 SET owner = user:alice")
    await wait_for(lambda: _count(st, "note", 1), what="new table loaded")
    v = await st.ssp.call("POST /view/register",
                          view_body("notes", "SELECT * FROM note WHERE owner = $auth.id"))
    assert v["status"] == 200 and v["body"]["rowCount"] == 1
    await wait_for(lambda: _edges_are(st.root, "notes", {"note:1"}), what="note edge")
    await st.root.query("REMOVE TABLE note")
    await wait_for(lambda: _edges_are(st.root, "notes", set()), what="rows retracted")
    info = (await st.ssp.call("GET /info"))["body"][0]
    assert "note" not in info["circuit_tables"]


async def test_stalled_database_is_reported_and_ingest_fails_fast(tmp_path: Path) -> None:
    own_host = start_db_host(tmp_path / "stall", memory=True)
    try:
        async with open_stack(own_host, tmp_path, before_start=alice,
                              SVC_SSP_DB_TIMEOUT_SECS="0.5",
                              SVC_INGEST_TRANSPORT="http") as st:
            os.kill(own_host.process.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
            try:
                r = await st.ssp.call("POST /view/register", view_body("st", OWN))
                assert r["status"] == 503
                h = await st.ssp.call("GET /health")
                assert h["status"] == 200 and h["body"]["status"] == "ready"
                assert h["body"]["db"]["status"] == "stalled"
                assert h["body"]["db"]["consecutive_timeouts"] >= 1
                r = await st.ssp.call("POST /ingest", {"table": "post", "op": "CREATE",
                                                       "id": "post:z", "record": {}})
                assert r["status"] == 503 and r["body"]["error"] == "SSP_NOT_READY"
                r = await st.ssp.call("POST /job/recover", None)  # spec: fails fast too
                assert r["status"] == 503 and r["body"]["error"] == "SSP_NOT_READY"
            finally:
                os.kill(own_host.process.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
            async def recovered() -> bool:
                r = await st.ssp.call("POST /view/register", view_body("st", OWN))
                h = await st.ssp.call("GET /health")
                return r["status"] == 200 and "db" not in h["body"]
            await wait_for(recovered, what="recovery")
    finally:
        own_host.process.stop()


async def _table_count(st: Stack, table: str) -> int:
    r = await st.ssp.call("GET /info")
    return int(r["body"][0]["circuit_tables"].get(table, 0))


async def _count(st: Stack, table: str, n: int) -> bool:
    return await _table_count(st, table) == n


async def _edges_are(root: Database, key: str, want: set[str]) -> bool:
    return await edges(root, "_00_list_ref_user_alice", key) == want


_ = RecordID


async def test_bootstrapping_answers_503_until_the_database_answers(tmp_path: Path) -> None:
    own_host = start_db_host(tmp_path / "boot", memory=True)
    pid = own_host.process.proc.pid  # type: ignore[union-attr]
    ssp = None
    try:
        ns, db = unique_db()
        root = await root_db(own_host, ns, db)
        await root.query(APP_SCHEMA)
        apply_schema(own_host, ns, db)
        await root.close()
        os.kill(pid, signal.SIGSTOP)
        try:
            ssp = start_ssp(tmp_path, own_host, ns, db, SVC_SSP_DB_TIMEOUT_SECS="0.5")

            async def bootstrapping() -> bool:
                try:
                    r = await ssp.call("GET /health", timeout=2)  # type: ignore[union-attr]
                except Exception:  # noqa: BLE001 - the hub socket may not be bound yet
                    ssp.close_client()  # type: ignore[union-attr]
                    return False
                return r["status"] == 503 and r["body"]["status"] == "bootstrapping"
            await wait_for(bootstrapping, what="503 bootstrapping")
            r = await ssp.call("POST /ingest", {"table": "post", "op": "CREATE",
                                                "id": "post:1", "record": {}})
            assert r["status"] == 503 and r["body"]["error"] == "SSP_NOT_READY"
            r = await ssp.call("POST /view/register", view_body("x", OWN))
            assert r["status"] == 503
        finally:
            os.kill(pid, signal.SIGCONT)
        await ssp.wait_ready()
    finally:
        if ssp is not None:
            assert ssp.stop() == 0, ssp.process.log_text()[-3000:]
        own_host.process.stop()


async def test_reload_rebuilds_and_reset_clears(host: DbHost, tmp_path: Path) -> None:
    async with open_stack(host, tmp_path, before_start=alice) as st:
        await st.root.query("CREATE post:a SET owner = user:alice, title = 't'")
        await wait_for(lambda: _count(st, "post", 1), what="loaded")
        assert (await st.ssp.call("POST /view/register", view_body("rl", OWN)))["status"] == 200
        r = await st.ssp.call("POST /admin/reload")
        assert r == {"status": 200, "body": {"status": "ready"}} or (
            r["status"] == 200 and r["body"] == {"status": "ready"}), r
        await st.root.query("CREATE post:b SET owner = user:alice, title = 't'")
        await wait_for(lambda: _edges_are(st.root, "rl", {"post:a", "post:b"}), what="after reload")
        r = await st.ssp.call("POST /reset")
        assert r["status"] == 200
        info = (await st.ssp.call("GET /info"))["body"][0]
        assert info["views"] == 0
        assert all(n == 0 for n in info["circuit_tables"].values()), info
        assert (await st.ssp.call("GET /debug/view/{view_id}",
                                  params={"view_id": "query:rl"}))["status"] == 404

        async def removed() -> bool:
            # Nobody would maintain them any more: the row and the edges go with the view.
            row = await st.root.query_one("SELECT * FROM ONLY _00_query:rl")
            return row is None and await _edges_are(st.root, "rl", set())
        await wait_for(removed, what="the cleared view's row and edges removed")


async def test_reload_failure_is_500_reload_failed(tmp_path: Path) -> None:
    own_host = start_db_host(tmp_path / "rl", memory=True)
    pid = own_host.process.proc.pid  # type: ignore[union-attr]
    try:
        async with open_stack(own_host, tmp_path, SVC_SSP_DB_TIMEOUT_SECS="0.5",
                              SVC_INGEST_TRANSPORT="http") as st:
            os.kill(pid, signal.SIGSTOP)
            try:
                r = await st.ssp.call("POST /admin/reload")
            finally:
                os.kill(pid, signal.SIGCONT)
            assert r["status"] == 500 and r["body"]["code"] == "reload_failed", r
            assert r["body"]["message"]
            h = await st.ssp.call("GET /health")
            assert h["status"] == 503 and h["body"]["status"] == "failed"
            r = await st.ssp.call("POST /admin/reload")
            assert r["status"] == 200 and r["body"] == {"status": "ready"}
    finally:
        own_host.process.stop()


async def test_view_on_a_table_created_after_start_sees_its_rows(host: DbHost,
                                                                 tmp_path: Path) -> None:
    # The schema poll is off: registering must find the new table by itself.
    async with open_stack(host, tmp_path, before_start=alice, SVC_SCHEMA_POLL_SECS="0") as st:
        await st.root.query("DEFINE TABLE thread SCHEMALESS; "
                            "CREATE thread:1 SET title = 'hello', score = 5; "
                            "CREATE thread:2 SET title = 'low', score = 1")
        apply_schema(st.host, st.ns, st.dbname)
        r = await st.ssp.call("POST /view/register", view_body(
            "top", "SELECT * FROM thread WHERE score > 3 ORDER BY score DESC LIMIT 10"))
        assert r["status"] == 200 and r["body"]["rowCount"] == 1, r
        await wait_for(lambda: _edges_are(st.root, "top", {"thread:1"}), what="edge")
        await st.root.query("CREATE thread:3 SET title = 'new', score = 9; "
                            "UPDATE thread:1 SET score = 0")
        await wait_for(lambda: _edges_are(st.root, "top", {"thread:3"}), what="changes")
