"""A view registered through the scheduler sees every row the database holds when it is
accepted (issue 31, case 3): the README quickstart's steps run back to back (rows written,
`svc schema apply` hooks their table, the view registered at once) give the view its rows in
its initial set and its `_00_query` row, not `rowCount` 0 with the rows arriving later.

Deterministic: the scheduler's own schema watch is set to look only at start
(`SVC_SCHEMA_POLL_SECS=0`), so nothing but the registration itself can backfill the table.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import aiohttp

from tests.integration.test_scheduler_process import launch, write_config
from tests.support.procs import DbHost, free_port
from tests.support.ssp_stack import apply_schema, edges, root_db, start_ssp, wait_for


async def test_a_view_registered_right_after_schema_apply_counts_the_rows_written_before(
        tmp_path: Path, shared_db_host: DbHost) -> None:
    host = shared_db_host
    name = "rs" + uuid.uuid4().hex[:8]
    root = await root_db(host, name, name)
    apply_schema(host, name, name)  # the service's tables, no app table yet (ops/run's step)
    port = free_port()
    sched = launch(tmp_path, write_config(tmp_path, host, name, port), port, name,
                   SVC_INGEST_TRANSPORT="changefeed", SVC_SCHEMA_POLL_SECS="0")
    ssp = start_ssp(tmp_path, host, name, name, SVC_SCHEDULER_URL=sched.url,
                    SVC_SSP_ID="ssp-q", SVC_SSP_SHARDS="1", HEARTBEAT_INTERVAL_MS="200")
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            async def ready() -> bool:
                async with http.get(sched.url + "/metrics") as r:
                    m = await r.json()
                return any(x["state"] == "ready" for x in m["ssps"])
            await wait_for(ready, timeout=60, what="the SSP ready")

            await root.query("DEFINE TABLE thread SCHEMALESS; "
                             "CREATE thread:1 SET title = 'hello', score = 5; "
                             "CREATE thread:2 SET title = 'low', score = 1; "
                             "CREATE thread:4 SET title = 'also', score = 7")
            apply_schema(host, name, name)
            body = {"id": "query:top", "clientId": "c1", "ttl": "10m",
                    "surql": "SELECT * FROM thread WHERE score > 3 ORDER BY score DESC LIMIT 10",
                    "params": {"auth_id": "user:alice"}}
            async with http.post(sched.url + "/view/register", json=body) as r:
                assert r.status == 200, await r.text()

            async def row() -> dict[str, Any] | None:
                got = await root.query_one("SELECT state, rowCount FROM ONLY _00_query:top")
                return got if got and got.get("state") == "ready" else None
            published = await wait_for(row, what="the view's row ready")
            assert published["rowCount"] == 2, published
            want = {"thread:1", "thread:4"}
            assert await edges(root, "_00_list_ref_user_alice", "top") == want

            # and the table is followed from then on
            await root.query("CREATE thread:3 SET title = 'new', score = 9; "
                             "UPDATE thread:1 SET score = 0")

            async def moved() -> bool:
                got = await edges(root, "_00_list_ref_user_alice", "top")
                return got == {"thread:3", "thread:4"}
            await wait_for(moved, what="edges follow later writes")
    finally:
        code = ssp.stop()
        sched.process.stop()
        await root.close()
    assert code == 0, ssp.process.log_text()[-3000:]
