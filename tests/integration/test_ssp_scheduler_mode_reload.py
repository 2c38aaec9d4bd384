"""`POST /admin/reload` on an SSP in scheduler mode rebuilds from the scheduler's snapshot,
like its bootstrap: it registers again (the scheduler freezes the replica at a `snapshot_seq`
and buffers what comes after), loads through `/proxy/query`, checks integrity, and the
scheduler replays the buffer once it is ready. Reading the database instead would give rows at
no position of the event stream: under transport http an event whose transaction has not
committed yet (already applied, never sent again) would vanish from the SSP for good."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import aiohttp

from tests.integration.test_scheduler_process import launch, write_config
from tests.support.procs import DbHost, free_port
from tests.support.ssp_stack import (
    APP_SCHEMA,
    apply_schema,
    edges,
    root_db,
    start_ssp,
    wait_for,
)


async def test_reload_in_scheduler_mode_rebuilds_from_the_scheduler_not_the_database(
        tmp_path: Path, shared_db_host: DbHost) -> None:
    name = "rl_" + uuid.uuid4().hex[:8]
    host = shared_db_host
    root = await root_db(host, name, name)
    await root.query(APP_SCHEMA)
    apply_schema(host, name, name)
    await root.query("CREATE user:alice SET name = 'alice', pass = 'x'; "
                     "CREATE post:p1 SET owner = user:alice, title = 't', n = 1")
    port = free_port()
    s = launch(tmp_path, write_config(tmp_path, host, name, port, ssp_poll_interval_ms=100,
                                      snapshot_update_interval_secs=1), port, name)
    ssp = start_ssp(tmp_path, host, name, name, SVC_SCHEDULER_URL=s.url, SVC_SSP_ID="ssp-0",
                    SVC_INGEST_TRANSPORT="http", SVC_SSP_SHARDS="1", HEARTBEAT_INTERVAL_MS="200")
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            async def metrics() -> dict[str, Any]:
                async with http.get(s.url + "/metrics") as r:
                    return dict(await r.json())

            async def ready() -> bool:
                return [x["state"] for x in (await metrics())["ssps"]] == ["ready"]

            await wait_for(ready, timeout=60, what="the SSP ready")
            body = {"id": "query:all", "surql": "SELECT * FROM post", "clientId": "c1",
                    "ttl": "10m", "params": {"auth_id": "user:alice"}}
            async with http.post(s.url + "/view/register", json=body) as r:
                assert r.status == 200, await r.text()
            # An http event whose transaction has not committed (yet): in the scheduler's
            # stream, not in the database.
            async with http.post(s.url + "/ingest", json={
                    "table": "post", "op": "CREATE", "id": "post:inflight", "record": {
                        "id": "post:inflight", "owner": "user:alice", "title": "t", "n": 2}}) as r:
                assert r.status == 200
            want = {"post:p1", "post:inflight"}

            async def edges_are_want() -> bool:
                return await edges(root, "_00_list_ref_user_alice", "all") == want

            await wait_for(edges_are_want, what="both posts in the view")
            r = await ssp.call("POST /admin/reload", timeout=60)
            assert r["status"] == 200 and r["body"] == {"status": "ready"}, r
            # The scheduler saw a new registration: the entry went through bootstrap again.
            await wait_for(ready, timeout=60, what="the SSP ready again")
            # Events after the reload still arrive, once.
            await root.query("CREATE post:p3 SET owner = user:alice, title = 't', n = 3")
            async with http.post(s.url + "/ingest", json={
                    "table": "post", "op": "CREATE", "id": "post:p3", "record": {
                        "id": "post:p3", "owner": "user:alice", "title": "t", "n": 3}}) as r:
                assert r.status == 200
            want = {"post:p1", "post:inflight", "post:p3"}
            await wait_for(edges_are_want, what="the view after the reload, with the "
                                                "in-flight post and the later one")
            dbg = await ssp.call("GET /debug/heartbeat")
            assert dbg["body"]["last_seq"] == 2, dbg
    finally:
        code = ssp.stop()
        s.process.stop()
        await root.close()
    assert code == 0
