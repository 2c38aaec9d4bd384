"""Transport http end to end through real HTTP: database host + `python -m ssp` (hub, shards,
gunicorn + the Falcon gateway). Row changes arrive as JSON on `POST /ingest`, so record links
and datetimes come as strings and are typed again from the table's field definitions."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
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

SECRET = "test-bearer-not-a-real-secret"


class HttpStack:
    def __init__(self, host: DbHost, ns: str, db: str, ssp: Ssp, root: Database) -> None:
        self.host, self.ns, self.dbname, self.ssp, self.root = host, ns, db, ssp, root
        self.base = f"http://127.0.0.1:{ssp.port}"
        self.http = httpx.AsyncClient(base_url=self.base, timeout=30,
                                      headers={"Authorization": f"Bearer {SECRET}"})

    async def ingest_row(self, table: str, op: str, row: dict[str, Any]) -> httpx.Response:
        """POST the row as the database's http event would: JSON, links as strings."""
        body = {"table": table, "op": op, "id": record_id_text(row["id"]),
                "record": _jsonable(row)}
        return await self.http.post("/ingest", json=body)


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, RecordID):
        return record_id_text(v)
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return v


@pytest.fixture(scope="module")
def shared(host: DbHost, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[str, str, Ssp]]:
    """One database and SSP for the module: starting them was most of each test's time.
    The tests use users, posts and view ids of their own."""
    # The host cannot run http::post, so the database events are played by the test; the
    # changefeed schema still mirrors every row's version into _00_version.
    with module_ssp(host, tmp_path_factory.mktemp("ingest-http"), APP_SCHEMA,
                    SVC_INGEST_TRANSPORT="http", SVC_AUTH_SECRET=SECRET) as shared:
        shared[2].process.wait_http(f"http://127.0.0.1:{shared[2].port}/health", timeout=60)
        yield shared


@pytest.fixture
async def stack(host: DbHost, shared: tuple[str, str, Ssp]) -> AsyncIterator[HttpStack]:
    ns, db, ssp = shared
    root = await root_db(host, ns, db)
    s = HttpStack(host, ns, db, ssp, root)
    try:
        yield s
    finally:
        await s.http.aclose()
        await root.close()


async def test_ingest_over_http_publishes_edges_a_user_sees_live(stack: HttpStack) -> None:
    alice = await record_user(stack.host, stack.ns, stack.dbname, "alice")
    try:
        [alice_id] = await stack.root.query_one("SELECT VALUE id FROM user WHERE name='alice'")
        r = await stack.http.post("/view/register", json={
            "id": "query:h1", "surql": "SELECT * FROM post WHERE owner = $auth.id",
            "clientId": "c1", "ttl": "10m", "params": {"auth_id": record_id_text(alice_id)}})
        assert r.status_code == 200, r.text
        table = f"_00_list_ref_user_{alice_id.id}"
        q = live_stream(alice, await alice.live(table))
        [row] = await stack.root.query_one(
            "CREATE post:h SET owner = $o, title = 'hi', at = time::now()", {"o": alice_id})
        r = await stack.ingest_row("post", "CREATE", row)
        assert r.status_code == 200, r.text
        note = await asyncio.wait_for(q.get(), 30)
        assert note["action"] == "CREATE" and note["result"]["out"] == RecordID("post", "h")
        assert note["result"]["rv"] == row["_00_rv"]
        [gone] = await stack.root.query_one("DELETE post:h RETURN BEFORE")
        r = await stack.ingest_row("post", "DELETE", gone)
        assert r.status_code == 200, r.text
        note = await asyncio.wait_for(q.get(), 30)
        assert note["action"] == "DELETE"
    finally:
        await alice.close()


async def test_an_uncommitted_version_is_published_after_the_deadline(stack: HttpStack) -> None:
    [alice_id] = await stack.root.query_one(
        "CREATE user:al SET name = 'al', pass = 'x' RETURN VALUE id")
    r = await stack.http.post("/view/register", json={
        "id": "query:late", "surql": "SELECT * FROM post WHERE owner = $auth.id",
        "clientId": "c1", "ttl": "10m", "params": {"auth_id": "user:al"}})
    assert r.status_code == 200, r.text
    # A version that never becomes visible (as if its transaction were still open).
    row = {"id": RecordID("post", "never"), "owner": alice_id, "title": "x", "n": 0,
           "_00_rv": 99}
    r = await stack.ingest_row("post", "CREATE", row)
    assert r.status_code == 200
    async def published() -> bool:
        return await edges(stack.root, "_00_list_ref_user_al", "late") == {"post:never"}
    await wait_for(published, what="fallback publication")


async def test_public_routes_and_bearer(stack: HttpStack) -> None:
    async with httpx.AsyncClient(base_url=stack.base, timeout=10) as anon:
        assert (await anon.get("/health")).json() == {"status": "ready"}
        v = (await anon.get("/version")).json()
        assert v == {"version": "0.1.0", "mode": "standalone"}
        [info] = (await anon.get("/info")).json()
        for key in ("entity", "id", "status", "views", "ref_mode", "version", "uptime_seconds",
                    "circuit_tables", "circuit_hashes", "bootstrap_warnings", "query_allowlist"):
            assert key in info
        assert info["entity"] == "ssp" and info["ref_mode"] == "dedicated"
        # The scheduler's /health/snapshot wire text (engine.hashing.hash_text): 16 hex digits.
        assert info["circuit_hashes"] and all(
            re.fullmatch(r"[0-9a-f]{16}", h) for h in info["circuit_hashes"].values())
        assert "ref_mode: dedicated" in (await anon.get("/info/text")).text
        assert (await anon.post("/ingest", json={})).status_code == 401
        assert (await anon.get("/debug/deps")).status_code == 401
    r = await stack.http.get("/debug/deps")
    assert r.status_code == 200 and set(r.json()) >= {"dependency_map", "tables_in_store",
                                                     "view_count"}
    r = await stack.http.get("/debug/view/query:nope")
    assert r.status_code == 404


async def test_register_malformed_and_ingest_malformed_are_400(stack: HttpStack) -> None:
    r = await stack.http.post("/ingest", json={"table": "post", "op": "MERGE", "id": "post:1",
                                               "record": {}})
    assert r.status_code == 400
    r = await stack.http.post("/ingest", json={"table": "post", "op": "CREATE",
                                               "id": "not a record id ::", "record": {}})
    assert r.status_code == 400 and r.json()["message"]
    r = await stack.http.post("/ingest", json={"table": "post", "op": "CREATE",
                                               "id": "user:x", "record": {}})
    assert r.status_code == 400 and "post" in r.json()["message"]
    r = await stack.http.post("/view/register", json={
        "id": "query:x", "surql": "SELECT * FROM post", "clientId": "c", "ttl": "10m",
        "params": {"auth_id": 12}})
    assert r.status_code == 400 and r.json()["error"] == "invalid"
