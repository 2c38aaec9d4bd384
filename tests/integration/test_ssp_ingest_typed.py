"""`POST /ingest` in the typed encoding (`ipc.typed`) through a real SSP (gunicorn gateway, hub,
shard) beside a real database host: links and datetimes in SCHEMALESS fields arrive as record
ids and datetimes, so views comparing them answer like SurrealDB and the table hashes like the
database's rows; the hub refuses malformed values with a 400 and applies nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest
from surrealdb import RecordID

from dbclient import Database
from engine import wire
from engine.hashing import hash_text, table_hash
from engine.values import pack_wire, record_id_text
from ipc import typed
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

SECRET = "test-bearer-not-a-real-secret"
SCHEMA = """
DEFINE TABLE user SCHEMALESS;
DEFINE TABLE thread SCHEMALESS;
DEFINE TABLE comment SCHEMALESS;
CREATE user:u1 SET name = 'u1';
CREATE thread:t1 SET author = user:u1, score = 5;
CREATE thread:t2 SET author = user:u1, score = 1;
CREATE comment:c1 SET thread = thread:t1, created = d'2026-01-05T00:00:00Z';
CREATE comment:c2 SET thread = thread:t2, created = d'2025-12-01T00:00:00Z';
"""
VIEWS = {
    "by_thread": "SELECT * FROM comment WHERE thread = thread:t1",
    "hot": "SELECT * FROM comment WHERE thread.score > 3",
    "recent": "SELECT * FROM comment WHERE created > d'2026-01-01T00:00:00Z'",
    "mine": "SELECT * FROM comment WHERE thread.author = $auth.id",
}


class TypedStack:
    def __init__(self, ssp: Ssp, root: Database) -> None:
        self.ssp, self.root = ssp, root
        self.http = httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{ssp.port}", timeout=30,
            headers={"Authorization": f"Bearer {SECRET}", "Content-Type": typed.CONTENT_TYPE})

    async def write(self, sql: str, vars: dict[str, Any] | None = None) -> dict[str, Any]:
        """A write to the database; the row as the database returns it (typed)."""
        [row] = await self.root.query_one(sql, vars)
        return dict(row)

    async def post(self, body: bytes) -> httpx.Response:
        return await self.http.post("/ingest", content=body)

    async def state(self) -> tuple[int, str]:
        [info] = (await self.http.get("/info")).json()
        return info["circuit_tables"].get("comment", 0), info["circuit_hashes"].get("comment")


def event(op: str, row: dict[str, Any], seq: int | None = None) -> bytes:
    return wire.encode_event({"table": "comment", "op": op, "id": record_id_text(row["id"]),
                               "record": row}, seq)


@pytest.fixture
async def stack(host: DbHost, tmp_path: Path) -> AsyncIterator[TypedStack]:
    ns, db = unique_db()
    root = await root_db(host, ns, db)
    await root.query(SCHEMA)
    apply_schema(host, ns, db, "changefeed")  # _00_version for the visibility probes
    ssp = start_ssp(tmp_path, host, ns, db, SVC_INGEST_TRANSPORT="http", SVC_AUTH_SECRET=SECRET,
                    SVC_SSP_SHARDS="1")
    s = TypedStack(ssp, root)
    try:
        ssp.process.wait_http(f"http://127.0.0.1:{ssp.port}/health", timeout=60)
        for key, surql in VIEWS.items():
            r = await s.http.post("/view/register", headers={"Content-Type": "application/json"},
                                  json={"id": f"query:{key}", "surql": surql, "clientId": "c1",
                                        "ttl": "10m", "params": {"auth_id": "user:u1"}})
            assert r.status_code == 200, r.text
        yield s
    finally:
        await s.http.aclose()
        code = ssp.stop()
        await root.close()
        assert code == 0, ssp.process.log_text()[-3000:]


async def converged(s: TypedStack) -> dict[str, Any] | None:
    diff = {}
    for key, surql in VIEWS.items():
        rows = await s.root.query_one(surql.replace("$auth.id", "user:u1"))
        want = {record_id_text(r["id"]) for r in rows}
        got = await edges(s.root, "_00_list_ref_user_u1", key)
        if want != got:
            diff[key] = (sorted(want), sorted(got))
    return diff or None


async def test_typed_events_keep_schemaless_links_and_datetimes(stack: TypedStack) -> None:
    s = stack
    at = datetime(2026, 2, 3, 4, 5, 6, 789000, tzinfo=UTC)
    row = await s.write("CREATE comment:c3 SET thread = thread:t1, created = $at", {"at": at})
    r = await s.post(event("CREATE", row))
    assert r.status_code == 200, r.text

    # A batch (the scheduler's form, with seq), then the same batch again: a redelivery.
    moved = await s.write("UPDATE comment:c2 SET thread = thread:t1, created = $at", {"at": at})
    added = await s.write("CREATE comment:c4 SET thread = thread:t2, created = $at, "
                          "tags = [thread:t1], meta = {by: user:u1}", {"at": at})
    batch = typed.encode_batch([event("UPDATE", moved, 1), event("CREATE", added, 2)])
    r = await s.post(batch)
    assert r.status_code == 200 and r.json() == {"accepted": 2}, r.text
    r = await s.post(batch)
    assert r.status_code == 200 and r.json() == {"accepted": 0}, r.text

    async def ok() -> bool:
        return await converged(s) is None
    try:
        await wait_for(ok, 60, "edges equal SurrealDB's answers")
    except AssertionError:
        raise AssertionError(f"views differ: {await converged(s)}") from None
    want = hash_text(table_hash(await s.root.query_one("SELECT * FROM comment")))
    assert await s.state() == (4, want)


def _with_ext(code: int, data: bytes) -> bytes:
    """An otherwise valid event whose record holds one raw ext value."""
    return msgpack.packb({"table": "comment", "op": "CREATE", "id": "comment:x",
                          "record": {"v": msgpack.ExtType(code, data)}})


async def test_the_hub_refuses_malformed_typed_values_and_applies_nothing(
        stack: TypedStack) -> None:
    s = stack
    before = await s.state()
    good = pack_wire({"table": "comment", "op": "CREATE", "id": "comment:x", "record": {"n": 1}})
    cases: list[tuple[bytes, list[str]]] = [
        (_with_ext(42, b""), ["unknown msgpack ext type 42"]),
        (_with_ext(3, b"\x01"), ["malformed msgpack ext type 3"]),
        (_with_ext(4, b"1.2.3"), ["malformed msgpack ext type 4"]),
        (_with_ext(2, msgpack.packb([5, 1])), ["record id"]),
        (typed.encode_batch([good, _with_ext(6, b"\x00")]), ["malformed msgpack ext type 6"]),
        (typed.encode_batch([good, pack_wire(
            {"table": "comment", "op": "CREATE", "id": "comment:y",
             "record": {"id": RecordID("user", "u1")}})]), ["[1]", "not in table comment"]),
        (pack_wire({"table": "comment", "op": "CREATE", "id": "comment:y",
                    "record": {"deep": _nested(900)}}), ["record", "nested too deeply"]),
    ]
    for body, words in cases:
        r = await s.post(body)
        assert r.status_code == 400, (words, r.status_code, r.text)
        assert r.json()["error"] == "invalid"
        for word in words:
            assert word in r.json()["message"], (word, r.json()["message"])
    assert await s.state() == before  # nothing of any refused body was applied
    assert "Traceback" not in s.ssp.process.log_text()


def _nested(depth: int) -> Any:
    v: Any = 1
    for _ in range(depth):
        v = [v]
    return v
