"""Real processes: database host + `svc-scheduler` + two `svc-ssp` in scheduler mode.

The second SSP registers while events flow and after the replica has drained events that
arrived as JSON (transport http: record links and datetimes as text in the replica). It must
bootstrap through the proxy, pass the integrity check, type those rows again (a view on
`owner = $auth.id` and a datetime filter sees them), replay the buffered events without
applying any twice (`seq` dedup), and end with the same rows as the first SSP; views spread
over both and their edges equal SurrealDB's own answer.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from tests.integration.test_scheduler_process import SchedulerProc, launch, write_config
from tests.support.procs import DbHost, free_port
from tests.support.ssp_stack import (
    APP_SCHEMA,
    apply_schema,
    edges,
    root_db,
    start_ssp,
    wait_for,
)

AT = "2026-01-02T03:04:05Z"
VIEW = ("SELECT * FROM post WHERE owner = $auth.id AND at > d'2026-01-01T00:00:00Z' "
        "AND n >= {m}")


async def write_post(root: Any, http: aiohttp.ClientSession, s: SchedulerProc, i: int) -> None:
    """The row written to the database, then its event (JSON, links as text) to the scheduler."""
    await root.query("CREATE type::record('post', $k) SET owner = user:alice, title = 't', "
                     "n = $n, at = <datetime> $at", {"k": f"p{i}", "n": i, "at": AT})
    rec = {"id": f"post:p{i}", "owner": "user:alice", "title": "t", "n": i, "at": AT}
    async with http.post(s.url + "/ingest", json={"table": "post", "op": "CREATE",
                                                   "id": rec["id"], "record": rec}) as r:
        assert r.status == 200, await r.text()


async def jget(http: aiohttp.ClientSession, url: str) -> Any:
    async with http.get(url, headers={"Authorization": "Bearer any"}) as r:
        return json.loads(await r.text())


async def test_an_ssp_joining_mid_stream_after_a_drain_converges(
        tmp_path: Path, shared_db_host: DbHost) -> None:
    name = "h2_" + uuid.uuid4().hex[:8]
    host = shared_db_host
    root = await root_db(host, name, name)
    await root.query(APP_SCHEMA)
    apply_schema(host, name, name)  # changefeed flavour: the embedded host has no http::*
    await root.query("CREATE user:alice SET name = 'alice', pass = 'x'")
    for i in range(5):
        await root.query("CREATE type::record('post', $k) SET owner = user:alice, title = 't', "
                         "n = $n, at = <datetime> $at", {"k": f"p{i}", "n": i, "at": AT})
    port = free_port()
    s = launch(tmp_path, write_config(tmp_path, host, name, port, ssp_poll_interval_ms=100,
                                      load_balance="round_robin",
                                      snapshot_update_interval_secs=1), port, name)
    common = {"SVC_SCHEDULER_URL": s.url, "SVC_INGEST_TRANSPORT": "http", "SVC_SSP_SHARDS": "1",
              "HEARTBEAT_INTERVAL_MS": "200", "SVC_SSP_BOOTSTRAP_PAGE_SIZE": "7"}
    ssps = [start_ssp(tmp_path, host, name, name, SVC_SSP_ID="ssp-a", **common)]
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            async def ready(ids: set[str]) -> bool:
                m = await jget(http, s.url + "/metrics")
                return {x["id"] for x in m["ssps"] if x["state"] == "ready"} == ids

            await wait_for(lambda: ready({"ssp-a"}), 60, "ssp-a ready")
            body = {"id": "query:v0", "surql": VIEW.format(m=0), "clientId": "c1",
                    "ttl": "10m", "params": {"auth_id": "user:alice"}}
            async with http.post(s.url + "/view/register", json=body) as r:
                assert r.status == 200, await r.text()

            for i in range(5, 25):  # JSON events: the replica keeps links/datetimes as text
                await write_post(root, http, s, i)

            async def drained() -> bool:
                h = await jget(http, s.url + "/health")
                return h["scheduler"]["applied_seq"] == h["scheduler"]["latest_seq"] == 20

            await wait_for(drained, 60, "the replica drained the 20 events")

            # ssp-b starts while a writer goes on: the writer stops only once ssp-b is Ready,
            # so events flow during its whole registration, bootstrap and replay.
            async def writer() -> int:
                i = 25
                while i < 65 or not await ready({"ssp-a", "ssp-b"}):
                    await write_post(root, http, s, i)
                    i += 1
                    assert i < 100_000, "ssp-b never became ready"
                return i - 25

            writing = asyncio.create_task(writer())
            ssps.append(start_ssp(tmp_path, host, name, name, SVC_SSP_ID="ssp-b", **common))
            written = await asyncio.wait_for(writing, 120)
            last = 20 + written

            placed = {}
            for k in range(1, 5):
                body = {"id": f"query:v{k}", "surql": VIEW.format(m=k * 10), "clientId": "c1",
                        "ttl": "10m", "params": {"auth_id": "user:alice"}}
                async with http.post(s.url + "/view/register", json=body) as r:
                    reply = await r.json()
                    assert r.status == 200, reply
                placed[f"v{k}"] = reply["ssp_id"]
            assert set(placed.values()) == {"ssp-a", "ssp-b"}  # spread over both

            async def converged() -> bool:
                for k in range(5):
                    rows = await root.query_one(
                        VIEW.format(m=k * 10).replace("$auth.id", "user:alice"))
                    want = {f"post:{r['id'].id}" for r in rows}
                    if await edges(root, "_00_list_ref_user_alice", f"v{k}") != want:
                        return False
                return True

            await wait_for(converged, 60, "every view's edges equal SurrealDB's answer")

            async def same_state() -> bool:
                h = await jget(http, s.url + "/health")
                latest = h["scheduler"]["latest_seq"]
                infos, seqs = [], []
                for p in ssps:
                    base = f"http://127.0.0.1:{p.port}"
                    infos.append((await jget(http, base + "/info"))[0])
                    seqs.append((await jget(http, base + "/debug/heartbeat"))["last_seq"])
                return (latest == last and seqs == [last, last]
                        and infos[0]["circuit_tables"] == infos[1]["circuit_tables"]
                        and infos[0]["circuit_hashes"] == infos[1]["circuit_hashes"]
                        and infos[0]["circuit_tables"]["post"] == 5 + last)

            await wait_for(same_state, 60, "both SSPs hold the same rows and the last seq")
            log = ssps[1].process.log_text()
            snapshot_seq = int(log.split("snapshot_seq ", 1)[1].split()[0])
            assert 20 <= snapshot_seq < last  # registered mid-stream: events were buffered
            assert "integrity check" not in ssps[1].process.log_text()  # passed first time
    finally:
        codes = [p.stop() for p in ssps]
        s.process.stop()
        await root.close()
    assert codes == [0, 0], [p.process.log_text()[-2000:] for p in ssps]
