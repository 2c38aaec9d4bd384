"""The gateway in front of the real hub: `python -m ssp` (hub, shards, gunicorn) beside a
database host, exercised only through HTTP: log streaming, the database's bare-id unregister,
and malformed bodies that must stop at the gateway."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.support.procs import DbHost
from tests.support.ssp_stack import (
    APP_SCHEMA,
    Ssp,
    apply_schema,
    root_db,
    start_ssp,
    unique_db,
)

SECRET = "gw-real-hub-test-bearer"


@pytest.fixture
async def ssp(host: DbHost, tmp_path: Path) -> AsyncIterator[tuple[Ssp, httpx.AsyncClient]]:
    ns, db = unique_db()
    root = await root_db(host, ns, db)
    await root.query(APP_SCHEMA)
    apply_schema(host, ns, db, "changefeed")
    proc = start_ssp(tmp_path, host, ns, db, SVC_AUTH_SECRET=SECRET, SVC_SSP_SHARDS="1")
    base = f"http://127.0.0.1:{proc.port}"
    client = httpx.AsyncClient(base_url=base, timeout=30, headers={"Authorization": f"Bearer {SECRET}"})
    try:
        proc.process.wait_http(f"{base}/health", timeout=90)
        yield proc, client
    finally:
        await client.aclose()
        code = proc.stop()
        await root.close()
        assert code == 0, proc.process.log_text()[-3000:]


def sse_data(text: str) -> list[str]:
    """The `data:` payloads of an SSE text, one per message."""
    out = []
    for block in text.split("\n\n"):
        data = [line[len("data: "):] for line in block.split("\n") if line.startswith("data: ")]
        if data:
            out.append("\n".join(data))
    return out


async def test_client_log_lines_come_back_on_the_log_stream(ssp: tuple[Ssp, httpx.AsyncClient]) -> None:
    _, client = ssp
    marker = "gateway-real-hub-marker"
    r = await client.post("/log", json={"message": marker, "level": "WARN", "data": {"k": 1}})
    assert r.status_code == 200, r.text
    r = await client.get("/logs", params={"tail": "false", "backfill": "500"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    mine = [json.loads(d) for d in sse_data(r.text) if marker in d]
    assert len(mine) == 1
    assert mine[0]["level"] == "warn" and mine[0]["data"] == {"k": 1}
    # a tailing viewer sees a line logged after it connected
    later = "gateway-real-hub-later"
    async with client.stream("GET", "/logs", params={"backfill": "0"}) as stream:
        assert stream.status_code == 200
        assert (await client.post("/log", json={"message": later})).status_code == 200
        seen = ""
        async for chunk in stream.aiter_text():
            seen += chunk
            if later in seen:
                break
    assert any(later in d for d in sse_data(seen))


async def test_the_bare_id_of_the_database_cleanup_event_unregisters_the_view(
    ssp: tuple[Ssp, httpx.AsyncClient],
) -> None:
    _, client = ssp
    r = await client.post("/view/register", json={
        "id": "query:gw1", "surql": "SELECT * FROM post", "clientId": "c1", "ttl": "10m",
        "params": {"auth_id": "user:alice"}})
    assert r.status_code == 200, r.text
    assert (await client.get("/debug/view/query:gw1")).status_code == 200
    # `_00_dbsp_cleanup` posts `record::id($before.id)`: the key without `query:`
    r = await client.post("/view/unregister", json={"id": "gw1"})
    assert r.status_code == 200, r.text
    assert (await client.get("/debug/view/query:gw1")).status_code == 404


MALFORMED = [
    ("/ingest", b'{"table": "post", "op": "MERGE", "id": "post:1", "record": {}}'),
    ("/ingest", b'{"table": "post", "op": "CREATE", "id": "post:1"}'),
    ("/ingest", b"[1, 2, 3]"),
    ("/ingest", b"{broken"),
    ("/view/register", b'{"id": "gw2", "surql": "SELECT * FROM post", "clientId": "c", "ttl": "10m"}'),
    ("/view/register", b'{"id": "query:gw2", "surql": "SELECT * FROM post", "clientId": "c", "ttl": "soon"}'),
    ("/view/unregister", b'{"id": 5}'),
    ("/log", b'{"message": "m", "level": "loud"}'),
    ("/reset", b"[]"),
]


async def test_malformed_bodies_stop_at_the_gateway_with_400(ssp: tuple[Ssp, httpx.AsyncClient]) -> None:
    # one SSP for all cases (starting one per case costs seconds); every case is also a unit test
    _, client = ssp
    for path, body in MALFORMED:
        r = await client.post(path, content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, (path, body, r.text)
        assert r.json()["error"] == "invalid" and r.json()["message"]
    # the SSP is still serving, and no view came out of the bad registrations
    assert (await client.get("/health")).status_code == 200
    assert (await client.get("/debug/view/query:gw2")).status_code == 404
