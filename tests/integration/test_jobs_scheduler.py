"""Job routes of a real `svc-scheduler` over two real SSPs in scheduler mode: dispatch,
result, kill broadcast, retry forwarded to one SSP (404 / 409 relayed), the recovery sweep
after an SSP is killed mid-job, 503 `no_ssp`, and the backend health list."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from surrealdb import RecordID

from tests.integration.test_scheduler_process import SchedulerProc, launch, write_config
from tests.support.job_stack import JOB_SCHEMA, SECRET, TOKEN, Backend, job_config
from tests.support.procs import DbHost, free_port
from tests.support.ssp_stack import (
    APP_SCHEMA,
    apply_schema,
    root_db,
    start_ssp,
    wait_for,
)

ENV_SECRET = "scheduler-backend-env-value-77aa"


async def _post(http: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    # the job routes need the secret once it is set (SECURITY.md); /ingest takes it too
    async with http.post(url, json=body, headers={"Authorization": f"Bearer {SECRET}"}) as r:
        text = await r.text()
        return r.status, json.loads(text) if text else None


async def test_scheduler_routes_jobs_to_ready_ssps(tmp_path: Path, shared_db_host: DbHost) -> None:
    host = shared_db_host
    name = "jobs_" + uuid.uuid4().hex[:8]
    root = await root_db(host, name, name)
    await root.query(APP_SCHEMA + JOB_SCHEMA)
    apply_schema(host, name, name)
    backend = Backend()
    await backend.start()
    port = free_port()
    backends = [{"name": "api", "url": f"{backend.url}/health", "env": {"KEY": ENV_SECRET}}]
    s: SchedulerProc = launch(tmp_path, write_config(tmp_path, host, name, port,
                                                     heartbeat_timeout_ms=600_000), port, name,
                              SVC_JOB_SWEEP_SECS="1", SVC_AUTH_SECRET=SECRET,
                              SVC_BACKENDS=json.dumps(backends),
                              SVC_HEALTH_CHECK_INTERVAL_SECS="1",
                              SVC_BACKEND_DOWN_AFTER_SECS="1")
    ssps = []
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            async with http.post(s.url + "/job/kill", json={"id": "job:x"}) as r:
                assert r.status == 401  # anyone on the network killing jobs: no more
            status, body = await _post(http, s.url + "/job/kill", {"id": "job:x"})
            assert status == 503 and body["error"] == "no_ssp"
            status, body = await _post(http, s.url + "/job/dispatch",
                                       {"job_id": "job:x", "table": "job", "payload": {}})
            assert status == 503 and body["error"] == "no_ssp"
            assert (await _post(http, s.url + "/job/retry", {"id": "job:x"}))[0] == 503

            env = {"SVC_JOB_CONFIG": job_config(backend.url, main={"lease_secs": 2}),
                   "SVC_AUTH_SECRET": SECRET, "SVC_SCHEDULER_URL": s.url,
                   "SVC_INGEST_TRANSPORT": "http", "SVC_SSP_SHARDS": "1",
                   "HEARTBEAT_INTERVAL_MS": "200"}
            ssps = [start_ssp(tmp_path, host, name, name, SVC_SSP_ID=f"ssp-{k}", **env)
                    for k in range(2)]

            async def both_ready() -> bool:
                async with http.get(s.url + "/metrics") as r:
                    m = await r.json()
                return {x["id"] for x in m["ssps"] if x["state"] == "ready"} == {"ssp-0",
                                                                                   "ssp-1"}
            await wait_for(both_ready, 60.0, "both SSPs ready")

            async def add(key: str, path: str, **fields: Any) -> RecordID:
                rec = {"status": "pending", "path": path, "payload": {"key": key}, **fields}
                await root.query("CREATE $id CONTENT $c", {"id": RecordID("job", key), "c": rec})
                status, _ = await _post(http, s.url + "/ingest", {
                    "table": "job", "op": "CREATE", "id": f"job:{key}",
                    "record": {"id": f"job:{key}", **rec}})
                assert status == 200
                return RecordID("job", key)

            async def row_in(rid: RecordID, *states: str) -> dict[str, Any]:
                async def reached() -> Any:
                    row = await root.query_one("SELECT * FROM ONLY $id", {"id": rid})
                    return row if row and row.get("status") in states else None
                return await wait_for(reached, 60.0, f"{rid} in {states}")  # type: ignore[no-any-return]

            # An ingested pending row is run by exactly one SSP.
            ok = await add("s1", "/ok")
            row = await row_in(ok, "completed")
            assert row["assignee"] in ("ssp-0", "ssp-1")
            assert len(backend.calls_of("job:s1")) == 1
            assert backend.calls_of("job:s1")[0].auth == f"Bearer {TOKEN}"

            # Dispatch names the SSP that admits the table now; a row written without an
            # ingest event is found that way.
            await root.query("CREATE job:s2 SET status = 'pending', path = '/ok'")
            status, body = await _post(http, s.url + "/job/dispatch",
                                       {"job_id": "job:s2", "table": "job", "payload": {}})
            assert status == 200 and body in ("ssp-0", "ssp-1")
            row = await row_in(RecordID("job", "s2"), "completed")
            assert row["assignee"] == body  # the SSP that holds the job, read from its row
            status, body = await _post(http, s.url + "/job/dispatch",
                                       {"job_id": "job:none", "table": "job", "payload": {}})
            assert status == 404 and body["error"] == "not_found"  # no such job row
            status, body = await _post(http, s.url + "/job/dispatch",
                                       {"job_id": "post:1", "table": "job", "payload": {}})
            assert status == 400 and "not a record of table job" in body["message"]
            # The SSPs post each status change to /job/result: nothing is left running.
            await wait_for(_running_jobs(http, s.url, 0), 30.0, "running_jobs back to 0")
            assert (await _post(http, s.url + "/job/dispatch", {"table": "job"}))[0] == 400
            status, body = await _post(http, s.url + "/job/dispatch",
                                       {"job_id": "post:1", "table": "post", "payload": {}})
            assert status == 404 and body["error"] == "not_found"  # the SSP's verdict

            # Anyone may report a result; the latest status per job counts.
            status, body = await _post(http, s.url + "/job/result",
                                       {"job_id": "ext:1", "status": "running"})
            assert status == 200
            await wait_for(_running_jobs(http, s.url, 1), 5.0, "an external running job")
            status, body = await _post(http, s.url + "/job/result",
                                       {"job_id": "ext:1", "status": "completed",
                                        "result": {"n": 1}})
            assert status == 200
            await wait_for(_running_jobs(http, s.url, 0), 5.0, "the result closed it")
            assert (await _post(http, s.url + "/job/result",
                                {"job_id": "job:s2", "status": "done"}))[0] == 400

            # Kill is broadcast; the owner cancels the call.
            hung = await add("k1", "/hang")
            await wait_for(_called(backend, "job:k1"), 60.0, "the call of job:k1")
            status, body = await _post(http, s.url + "/job/kill", {"id": "job:k1"})
            assert status == 200 and body["dispatched"] == 2
            assert sorted(body["ssps"]) == ["ssp-0", "ssp-1"] and body["id"] == "job:k1"
            row = await row_in(hung, "failed")
            assert row["errors"][-1]["error"] == "killed"

            # Retry goes to one SSP; its 409 and 404 are relayed.
            status, body = await _post(http, s.url + "/job/retry", {"id": "job:k1"})
            assert status == 200 and body["status"] == "pending"
            assert body["assigned_to"] in ("ssp-0", "ssp-1") and body["id"] == "job:k1"
            await wait_for(_called(backend, "job:k1", 2), 60.0, "job:k1 called again")
            status, body = await _post(http, s.url + "/job/retry", {"id": "job:k1"})
            assert status == 409 and body["error"] == "not_terminal"
            status, body = await _post(http, s.url + "/job/retry", {"id": "job:missing"})
            assert status == 404
            assert (await _post(http, s.url + "/job/retry", {"id": "nocolon"}))[0] == 400
            await _post(http, s.url + "/job/kill", {"id": "job:k1"})
            await row_in(hung, "failed")
            # A kill of no job is refused by every SSP: their 404, as retry relays it.
            status, body = await _post(http, s.url + "/job/kill", {"id": "job:missing"})
            assert status == 404 and body["error"] == "not_found", body
            status, body = await _post(http, s.url + "/job/kill", {"id": "post:1"})
            assert status == 404 and "not a job table" in body["message"], body

            # An SSP killed mid-job: the scheduler's sweep has the other one reclaim it.
            held = await add("h1", "/hold")
            await wait_for(_called(backend, "job:h1"), 60.0, "the call of job:h1")
            owner = (await root.query_one("SELECT assignee FROM ONLY job:h1"))["assignee"]
            victim = ssps[int(owner.rsplit("-", 1)[1])]
            victim.close_client()
            victim.process.kill9()
            backend.release.set()
            row = await row_in(held, "completed")
            assert row["assignee"] != owner
            assert len(backend.calls_of("job:h1")) == 2  # at-least-once: called again
            await wait_for(_running_jobs(http, s.url, 0), 30.0, "no job left running")

            # Backend health on the scheduler, env masked.
            async with http.get(s.url + "/health") as r:
                health = await r.json()
            listed = health["backends"]["list"]
            assert listed[0]["env"] == {"KEY": "***"}
            async with http.put(s.url + "/backends", json=[]) as r:
                assert r.status == 401  # the backend list is the secret holder's to change
            auth = {"Authorization": f"Bearer {SECRET}"}
            async with http.put(s.url + "/backends", json=[{"name": "x", "url": 3}],
                                headers=auth) as r:
                assert r.status == 400
            # A list replaced at run time: one backend up, one where nothing listens. The
            # aggregate says degraded, and the dead one becomes a backend_down incident
            # (SVC_BACKEND_DOWN_AFTER_SECS=1) in the scheduler's data dir.
            dead = f"http://127.0.0.1:{free_port()}/health"
            async with http.put(s.url + "/backends", headers=auth, json=[
                    {"name": "api", "url": f"{backend.url}/health", "env": {"KEY": ENV_SECRET}},
                    {"name": "dead", "url": dead}]) as r:
                assert r.status == 200

            async def degraded() -> Any:
                async with http.get(s.url + "/health") as r:
                    b = (await r.json()).get("backends") or {}
                return b if b.get("counts", {}).get("unhealthy") == 1 and \
                    b["counts"]["healthy"] == 1 else None
            b = await wait_for(degraded, 30.0, "one backend healthy, one down")
            assert b["status"] == "degraded"

            def down_incident() -> Any:
                # the scheduler's incident store (scheduler.incidents), flushed at
                # most once per second
                path = tmp_path / "data" / "incidents.json"
                if not path.exists():
                    return None
                rows = json.loads(path.read_text())["incidents"]
                return [x for x in rows if x["kind"] == "backend_down"
                        and x["component"] == "dead" and x["state"] == "open"] or None

            async def incident() -> Any:
                return down_incident()
            await wait_for(incident, 30.0, "a backend_down incident for 'dead'")
            async with http.put(s.url + "/backends", json=[], headers=auth) as r:
                assert r.status == 200
            async with http.get(s.url + "/health") as r:  # no list, no `backends`
                assert "backends" not in await r.json()
            logs = s.process.log_text() + "".join(p.process.log_text() for p in ssps) + \
                (tmp_path / "data" / "incidents.json").read_text()
            for secret in (ENV_SECRET, TOKEN, SECRET):
                assert secret not in logs and secret not in json.dumps(health)
    finally:
        for p in ssps:
            p.stop()
        s.process.stop()
        await backend.stop()
        await root.close()


def _running_jobs(http: aiohttp.ClientSession, url: str, n: int) -> Any:
    async def pred() -> bool:
        async with http.get(url + "/metrics") as r:
            return bool((await r.json())["scheduler"]["running_jobs"] == n)
    return pred


def _called(backend: Backend, job: str, n: int = 1) -> Any:
    async def pred() -> bool:
        return len(backend.calls_of(job)) >= n
    return pred
