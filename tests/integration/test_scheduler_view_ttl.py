"""A view registered through `svc-scheduler` that expires on its SSP (the SSP's TTL sweep)
leaves the scheduler's view tracker too: the sweep deletes the `_00_query` row, and the
scheduler applies the unregister rule to that delete (read from the changefeed; under http the
`_00_dbsp_cleanup` event posts it to `/view/unregister`). A tracked view would otherwise be
sent again to its SSP after a restart and counted by `least_queries` forever."""

from __future__ import annotations

import uuid
from pathlib import Path

import aiohttp

from tests.integration.test_scheduler_process import launch, write_config
from tests.support.procs import DbHost, free_port
from tests.support.ssp_stack import (
    APP_SCHEMA,
    apply_schema,
    root_db,
    start_ssp,
    wait_for,
)


async def test_a_view_expired_by_the_ssp_sweep_leaves_the_scheduler_tracker(
        tmp_path: Path, shared_db_host: DbHost) -> None:
    name = "ttl_" + uuid.uuid4().hex[:8]
    host = shared_db_host
    root = await root_db(host, name, name)
    await root.query(APP_SCHEMA)
    apply_schema(host, name, name, "changefeed")
    await root.query("CREATE user:alice SET name = 'alice', pass = 'x'; "
                     "CREATE post:1 SET owner = user:alice, title = 't', n = 1")
    port = free_port()
    cfg = write_config(tmp_path, host, name, port, ssp_poll_interval_ms=100)
    s = launch(tmp_path, cfg, port, name, SVC_INGEST_TRANSPORT="changefeed")
    ssp = None
    try:
        ssp = start_ssp(tmp_path, host, name, name, SVC_SCHEDULER_URL=s.url, SVC_SSP_ID="ssp-0",
                        SVC_INGEST_TRANSPORT="http", SVC_SSP_SHARDS="1",
                        HEARTBEAT_INTERVAL_MS="200", TTL_CLEANUP_INTERVAL_SECS="1")
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            async def metrics() -> dict:
                async with http.get(s.url + "/metrics") as r:
                    return dict(await r.json())

            async def ready() -> bool:
                return [x["state"] for x in (await metrics())["ssps"]] == ["ready"]

            await wait_for(ready, timeout=60, what="the SSP ready")
            body = {"id": "query:short", "surql": "SELECT * FROM post", "clientId": "c1",
                    "ttl": "2s", "params": {"auth_id": "user:alice"}}
            async with http.post(s.url + "/view/register", json=body) as r:
                assert r.status == 200, await r.text()
            assert (await metrics())["scheduler"]["total_queries"] == 1

            async def forgotten() -> bool:
                return (await metrics())["scheduler"]["total_queries"] == 0

            await wait_for(forgotten, timeout=30, what="the scheduler to forget the view")
            assert await root.query_one("SELECT * FROM _00_query") == []
            assert [x["query_count"] for x in (await metrics())["ssps"]] == [0]
    finally:
        code = ssp.stop() if ssp is not None else 0
        s.process.stop()
        await root.close()
    assert code == 0
