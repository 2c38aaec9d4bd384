"""`svc-scheduler` with two real SSPs in scheduler mode (`svc-ssp`, `SVC_SCHEDULER_URL`):
they register, bootstrap through the proxy, receive events from the scheduler, and the views
the scheduler spreads over them materialise edges equal to SurrealDB's own answer; after a
`kill -9` of one SSP while writes flow, its views move to the other and converge again.

Transport `http` with events posted to the scheduler by the test (the embedded host has no
`http::*` functions): every row is written to the database and its event sent to `/ingest`.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from tests.integration.test_scheduler_process import SchedulerProc, launch, write_config
from tests.support.procs import DbHost, free_port
from tests.support.ssp_stack import (
    APP_SCHEMA,
    app_write,
    apply_schema,
    edges,
    root_db,
    start_ssp,
    wait_for,
)


async def _ready_ssps(http: aiohttp.ClientSession, s: SchedulerProc) -> set[str]:
    async with http.get(s.url + "/metrics") as r:
        m = await r.json()
    return {x["id"] for x in m["ssps"] if x["state"] == "ready"}


async def _app_db(host: DbHost, prefix: str, posts: int) -> tuple[str, Any]:
    """A fresh namespace with the app schema hooked for the changefeed transport (the embedded
    host has no http:: functions), user:alice and posts p0..p<posts-1> with n = i."""
    name = prefix + uuid.uuid4().hex[:8]
    root = await root_db(host, name, name)
    await root.query(APP_SCHEMA)
    apply_schema(host, name, name)
    await root.query("CREATE user:alice SET name = 'alice', pass = 'x'")
    for i in range(posts):
        await root.query("CREATE type::record('post', $k) SET owner = user:alice, title = 't', "
                         "n = $n", {"k": f"p{i}", "n": i})
    return name, root


async def write_post(root: Any, http: aiohttp.ClientSession, s: SchedulerProc, i: int) -> None:
    """A row written to the database and its event sent to the scheduler."""
    rec = {"id": f"post:p{i}", "owner": "user:alice", "title": "t", "n": i}
    await root.query("CREATE type::record('post', $k) SET owner = user:alice, title = 't', "
                     "n = $n", {"k": f"p{i}", "n": i})
    async with http.post(s.url + "/ingest", json={
            "table": "post", "op": "CREATE", "id": rec["id"], "record": rec}) as r:
        assert r.status == 200


async def test_two_real_ssps_bootstrap_receive_events_and_materialise_views(
        tmp_path: Path, shared_db_host: DbHost) -> None:
    host = shared_db_host
    name, root = await _app_db(host, "e2e_", posts=10)
    port = free_port()
    s = launch(tmp_path, write_config(tmp_path, host, name, port, ssp_poll_interval_ms=100,
                                      load_balance="least_queries", heartbeat_timeout_ms=2000), port, name)
    ssps = [start_ssp(tmp_path, host, name, name, SVC_SCHEDULER_URL=s.url,
                      SVC_SSP_ID=f"ssp-{k}", SVC_INGEST_TRANSPORT="http", SVC_SSP_SHARDS="1",
                      HEARTBEAT_INTERVAL_MS="200") for k in range(2)]
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            async def both_ready() -> bool:
                return await _ready_ssps(http, s) == {"ssp-0", "ssp-1"}

            await wait_for(both_ready, timeout=60, what="both SSPs ready")
            placed: dict[str, str] = {}
            for k in range(4):
                body = {"id": f"query:v{k}", "surql": f"SELECT * FROM post WHERE n >= {k * 3}",
                        "clientId": "c1", "ttl": "10m", "params": {"auth_id": "user:alice"}}
                async with http.post(s.url + "/view/register", json=body) as r:
                    reply = await r.json()
                    assert r.status == 200, reply
                placed[f"v{k}"] = reply["ssp_id"]
            assert sorted(placed.values()) == ["ssp-0", "ssp-0", "ssp-1", "ssp-1"]

            # Writes: each row to the database and its event to the scheduler.
            for i in range(10, 30):
                await write_post(root, http, s, i)
            await app_write(root, "DELETE post:p5")
            async with http.post(s.url + "/ingest", json={
                    "table": "post", "op": "DELETE", "id": "post:p5", "record": {}}) as r:
                assert r.status == 200

            async def converged() -> bool:
                for k in range(4):
                    rows = await root.query_one("SELECT id FROM post WHERE n >= $m",
                                                {"m": k * 3})
                    want = {f"post:{r['id'].id}" for r in rows}
                    if await edges(root, "_00_list_ref_user_alice", f"v{k}") != want:
                        return False
                return True

            await wait_for(converged, timeout=60, what="edges equal SurrealDB's answer")
            async with http.get(s.url + "/health") as r:
                health = await r.json()
                assert r.status == 200 and health["status"] == "healthy"

            async def acknowledged() -> bool:  # heartbeats report the last applied seq
                async with http.get(s.url + "/metrics") as r:
                    m = await r.json()
                return all(x["last_seq"] == 21 for x in m["ssps"])

            await wait_for(acknowledged, what="both SSPs report last_seq 21")

            # kill -9 one SSP while writes flow: its views move to the other one.
            ssps[0].process.kill9()
            for i in range(30, 40):
                await write_post(root, http, s, i)

            async def moved() -> bool:
                async with http.get(s.url + "/metrics") as r:
                    m = await r.json()
                return [(x["id"], x["query_count"]) for x in m["ssps"]] == [("ssp-1", 4)]

            await wait_for(moved, timeout=60, what="views moved to ssp-1")
            await wait_for(converged, timeout=60, what="edges equal SurrealDB's answer again")
    finally:
        codes = [x.stop() for x in ssps]
        s.process.stop()
        await root.close()
    assert codes[1] == 0


async def test_ssp_registering_while_events_flow_converges(tmp_path: Path,
                                                           shared_db_host: DbHost) -> None:
    host = shared_db_host
    name, root = await _app_db(host, "e2e_", posts=0)
    port = free_port()
    s = launch(tmp_path, write_config(tmp_path, host, name, port, ssp_poll_interval_ms=100),
               port, name)
    ssp = None
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            stop = asyncio.Event()
            written: list[int] = []

            async def writer() -> None:
                i = 0
                while not stop.is_set():
                    await write_post(root, http, s, i)
                    written.append(i)
                    i += 1

            task = asyncio.create_task(writer())
            await wait_for(lambda: _at_least(written, 50), what="writes before the SSP")
            ssp = start_ssp(tmp_path, host, name, name, SVC_SCHEDULER_URL=s.url,
                            SVC_SSP_ID="late", SVC_INGEST_TRANSPORT="http",
                            SVC_SSP_SHARDS="1", HEARTBEAT_INTERVAL_MS="200")

            async def ready() -> bool:
                return await _ready_ssps(http, s) == {"late"}

            await wait_for(ready, timeout=60, what="the SSP ready while writes flow")
            body = {"id": "query:all", "surql": "SELECT * FROM post WHERE n >= 0",
                    "clientId": "c1", "ttl": "10m", "params": {"auth_id": "user:alice"}}
            async with http.post(s.url + "/view/register", json=body) as r:
                assert r.status == 200, await r.text()
            target = len(written) + 30
            await wait_for(lambda: _at_least(written, target), what="more writes")
            stop.set()
            await task

            async def converged() -> bool:
                want = {f"post:p{i}" for i in written}
                return await edges(root, "_00_list_ref_user_alice", "all") == want

            await wait_for(converged, timeout=60, what="edges equal every written row")
    finally:
        code = ssp.stop() if ssp is not None else 0
        s.process.stop()
        await root.close()
    assert code == 0


async def _at_least(items: list[int], n: int) -> bool:
    return len(items) >= n


async def test_changefeed_transport_two_real_ssps_follow_database_writes(
        tmp_path: Path, shared_db_host: DbHost) -> None:
    """The default transport with the embedded host: nothing is posted to `/ingest`; the
    scheduler tails the database's changefeeds and broadcasts what it reads to both SSPs."""
    host = shared_db_host
    name, root = await _app_db(host, "cf_", posts=6)
    port = free_port()
    s = launch(tmp_path, write_config(tmp_path, host, name, port, ssp_poll_interval_ms=100,
                                      load_balance="round_robin"), port, name,
               SVC_INGEST_TRANSPORT="changefeed")
    ssps = [start_ssp(tmp_path, host, name, name, SVC_SCHEDULER_URL=s.url,
                      SVC_SSP_ID=f"ssp-{k}", SVC_INGEST_TRANSPORT="http", SVC_SSP_SHARDS="1",
                      HEARTBEAT_INTERVAL_MS="200") for k in range(2)]
    queries = {"lo": "SELECT * FROM post WHERE n < 10",
               "top": "SELECT id, n FROM post ORDER BY n DESC LIMIT 3"}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            async def both_ready() -> bool:
                return await _ready_ssps(http, s) == {"ssp-0", "ssp-1"}

            await wait_for(both_ready, timeout=60, what="both SSPs ready")
            placed = set()
            for view, surql in queries.items():
                body = {"id": f"query:{view}", "surql": surql, "clientId": "c1", "ttl": "10m",
                        "params": {"auth_id": "user:alice"}}
                async with http.post(s.url + "/view/register", json=body) as r:
                    reply = await r.json()
                    assert r.status == 200, reply
                placed.add(reply["ssp_id"])
            assert placed == {"ssp-0", "ssp-1"}  # round robin: one view on each
            # The SSP's verdicts come back verbatim: 400 rejected, 409 auth_mismatch.
            bad = {"id": "query:bad", "surql": "SELECT count() FROM post GROUP ALL LIMIT 1",
                   "clientId": "c1", "ttl": "10m", "params": {"auth_id": "user:alice"}}
            async with http.post(s.url + "/view/register", json=bad) as r:
                reply = await r.json()
                assert r.status == 400 and reply["error"] == "rejected", reply
            other = {"id": "query:lo", "surql": queries["lo"], "clientId": "c2", "ttl": "10m",
                     "params": {"auth_id": "user:bob"}}
            async with http.post(s.url + "/view/register", json=other) as r:
                reply = await r.json()
                assert r.status == 409 and reply["error"] == "auth_mismatch", reply

            # Writes through the database only: rows enter, leave by UPDATE and by DELETE.
            for i in range(6, 14):
                await root.query("CREATE type::record('post', $k) SET owner = user:alice, "
                                 "title = 't', n = $n", {"k": f"p{i}", "n": i})
            await app_write(root, "UPDATE post:p1 SET n = 50")
            await app_write(root, "DELETE post:p2")
            await app_write(root, "DELETE post:p13")

            async def converged() -> bool:
                for view, surql in queries.items():
                    rows = await root.query_one(surql)
                    want = {f"post:{r['id'].id}" for r in rows}
                    if await edges(root, "_00_list_ref_user_alice", view) != want:
                        return False
                return True

            await wait_for(converged, timeout=60, what="edges equal SurrealDB's answer")
            async with http.get(s.url + "/health") as r:
                health = await r.json()
            assert health["changefeed"]["enabled"] is True, health["changefeed"]
    finally:
        codes = [x.stop() for x in ssps]
        s.process.stop()
        await root.close()
    assert codes == [0, 0]


async def test_a_table_hooked_after_the_scheduler_started_brings_its_earlier_rows(
        tmp_path: Path, shared_db_host: DbHost) -> None:
    """Rows written before `svc schema apply` hooked their table are in no changefeed: the
    scheduler backfills a newly hooked table at once (not at the next drift check, after a
    drain every snapshot interval), and writes racing the backfill are not rolled back."""
    host = shared_db_host
    name, root = await _app_db(host, "hook_", posts=2)
    port = free_port()
    s = launch(tmp_path, write_config(tmp_path, host, name, port, ssp_poll_interval_ms=100),
               port, name, SVC_INGEST_TRANSPORT="changefeed")
    ssp = start_ssp(tmp_path, host, name, name, SVC_SCHEDULER_URL=s.url, SVC_SSP_ID="ssp-0",
                    SVC_INGEST_TRANSPORT="http", SVC_SSP_SHARDS="1", HEARTBEAT_INTERVAL_MS="200")
    surql = "SELECT * FROM item WHERE score > 3"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            async def ready() -> bool:
                return await _ready_ssps(http, s) == {"ssp-0"}

            await wait_for(ready, timeout=60, what="the SSP ready")
            # A table the scheduler has never seen, filled before any hook exists.
            await root.query("DEFINE TABLE item SCHEMALESS")
            for i in range(40):
                await root.query("CREATE type::record('item', $k) SET score = $s",
                                 {"k": f"i{i}", "s": i % 8})
            body = {"id": "query:items", "surql": surql, "clientId": "c1", "ttl": "10m",
                    "params": {"auth_id": "user:alice"}}
            async with http.post(s.url + "/view/register", json=body) as r:
                assert r.status == 200, await r.text()
            apply_schema(host, name, name)
            # Writes right after the hooks, racing the backfill's reads.
            for i in range(0, 40, 3):
                await app_write(root, "UPDATE type::record('item', $k) SET score = $s",
                                {"k": f"i{i}", "s": 9 if i % 2 else 0})

            async def converged() -> bool:
                rows = await root.query_one(surql)
                want = {f"item:{r['id'].id}" for r in rows}
                return await edges(root, "_00_list_ref_user_alice", "items") == want

            await wait_for(converged, timeout=60, what="the view holds the earlier rows")
            async with http.get(s.url + "/health/snapshot") as r:
                snap = await r.json()
            assert snap["drift"]["last_auto_repair"]["kind"] == "backfill", snap["drift"]
    finally:
        code = ssp.stop()
        s.process.stop()
        await root.close()
    assert code == 0
