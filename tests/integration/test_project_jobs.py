"""A backend declared in `project.yml` gets its outbox jobs run with no hand-written
`SVC_JOB_CONFIG` (issue 17, part 1): the SSP and the scheduler started with
`SVC_PROJECT_FILE` read the app's `method` (outbox table, concurrency), `deploy.timeout`,
`baseUrl` and `auth.token` (`${NAME}` from the environment). Real database host, SSPs,
scheduler and a backend HTTP server; everything stopped afterwards."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from surrealdb import RecordID

from tests.support import admin_stack
from tests.support.job_stack import Backend
from tests.support.procs import DbHost
from tests.support.ssp_stack import (
    APP_SCHEMA,
    apply_schema,
    root_db,
    start_ssp,
    unique_db,
    wait_for,
)

TOKEN = "project-backend-token-3c2b1a"  # reaches the SSP only as ${API_TOKEN}
SECRET = "project-ssp-secret-4d5e6f"
JOB_SCHEMA = "DEFINE TABLE api_job SCHEMALESS;\n"


def write_project(tmp: Path, backend_url: str) -> Path:
    """A root file with one backend (an external one: the test's server) and a container."""
    (tmp / "proj" / "api").mkdir(parents=True)
    (tmp / "proj" / "project.yml").write_text(
        "apps:\n  api: {path: api}\n  cache: {path: cache.yml}\nsync: {transport: changefeed}\n")
    (tmp / "proj" / "cache.yml").write_text("type: container\nimage: redis:7\nports: [6379]\n")
    api = tmp / "proj" / "api"
    (api / "openapi.yml").write_text("openapi: 3.0.3\ninfo: {title: api, version: '1'}\n"
                                     "paths: {}\n")
    (api / "jobs.surql").write_text(JOB_SCHEMA)
    (api / "project.yml").write_text(
        "type: backend\nspec: openapi.yml\nhosting: external\n"
        f"baseUrl: {backend_url}\n"
        "auth: {type: token, token: '${API_TOKEN}'}\n"
        "method: {type: outbox, schema: jobs.surql, concurrency: 2}\n"
        "dependsOn: [cache]\n"
        "deploy: {timeout: 2}\n")
    return tmp / "proj" / "project.yml"


async def test_backend_in_project_file_runs_its_outbox_jobs_on_a_standalone_ssp(
        host: DbHost, tmp_path: Path) -> None:
    ns, db = unique_db()
    root = await root_db(host, ns, db)
    backend = Backend()
    await backend.start()
    project = write_project(tmp_path, backend.url)
    # what `svc migrate` does with the app's method.schema: the outbox table exists
    await root.query(APP_SCHEMA + (project.parent / "api" / "jobs.surql").read_text())
    apply_schema(host, ns, db)
    ssp = start_ssp(tmp_path, host, ns, db, SVC_PROJECT_FILE=str(project), API_TOKEN=TOKEN,
                    SVC_AUTH_SECRET=SECRET, SVC_SSP_JOB_SWEEP_SECS="1")
    try:
        await ssp.wait_ready()

        async def add(key: str, path: str, **fields: Any) -> RecordID:
            rid = RecordID("api_job", key)
            await root.query("CREATE $id CONTENT $c", {"id": rid, "c": {
                "status": "pending", "path": path, "payload": {"key": key}, **fields}})
            return rid

        async def row_in(rid: RecordID, *states: str) -> dict[str, Any]:
            async def reached() -> Any:
                row = await root.query_one("SELECT * FROM ONLY $id", {"id": rid})
                return row if row and row.get("status") in states else None
            return await wait_for(reached, 60.0, f"{rid} in {states}")  # type: ignore[no-any-return]

        # The job runs against baseUrl with the token substituted from the environment.
        row = await row_in(await add("a1", "/ok"), "completed")
        assert row["result"] == {"ok": True, "echo": {"key": "a1"}}
        [call] = backend.calls_of("api_job:a1")
        assert call.auth == f"Bearer {TOKEN}" and call.body == {"key": "a1"}

        # method.concurrency 2: two calls at once, never three.
        held = [await add(f"h{i}", "/hold") for i in range(3)]

        async def two_in_flight() -> bool:
            return backend.inflight == 2
        await wait_for(two_in_flight, 60.0, "two held calls")
        backend.release.set()
        for rid in held:
            await row_in(rid, "completed")
        assert backend.max_inflight == 2

        # deploy.timeout 2 is the call's timeout.
        row = await row_in(await add("t1", "/hang", max_retries=0), "failed")
        assert [e["error"] for e in row["errors"]] == ["backend timed out after 2s"]
        assert TOKEN not in ssp.process.log_text()
    finally:
        code = ssp.stop()
        await backend.stop()
        await root.close()
    assert code == 0, ssp.process.log_text()[-3000:]


def _admin(url: str, token: str | None = None, body: Any = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 method="POST" if body is not None else "GET", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


async def test_scheduler_and_its_ssp_take_the_job_tables_from_the_project_file(
        shared_db_host: DbHost, tmp_path: Path) -> None:
    host = shared_db_host
    ns = "proj_" + uuid.uuid4().hex[:8]
    root = await root_db(host, ns, ns)
    backend = Backend()
    await backend.start()
    project = write_project(tmp_path, backend.url)
    await root.query(APP_SCHEMA + JOB_SCHEMA + "DEFINE TABLE other_job SCHEMALESS;")
    apply_schema(host, ns, ns)  # the test posts the row change to /ingest itself
    sched = admin_stack.start_scheduler(tmp_path, host, ns,
                                        env={"SVC_PROJECT_FILE": str(project)})
    ssp = None
    try:
        ssp = admin_stack.start_ssp(tmp_path, host, ns, sched, SVC_PROJECT_FILE=str(project),
                                    API_TOKEN=TOKEN)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            async def ready() -> bool:
                async with http.get(sched.url + "/metrics") as r:
                    m = await r.json()
                return any(x["state"] == "ready" for x in m["ssps"])
            await wait_for(ready, 120.0, "the SSP ready in the scheduler's pool")

            rec = {"status": "pending", "path": "/ok", "payload": {"key": "s1"}}
            await root.query("CREATE api_job:s1 CONTENT $c", {"c": rec})
            async with http.post(sched.url + "/ingest", json={
                    "table": "api_job", "op": "CREATE", "id": "api_job:s1",
                    "record": {"id": "api_job:s1", **rec}},
                    headers={"Authorization": f"Bearer {admin_stack.AUTH_SECRET}"}) as r:
                assert r.status == 200, await r.text()

            async def done() -> Any:
                row = await root.query_one("SELECT * FROM ONLY api_job:s1")
                return row if row and row.get("status") == "completed" else None
            row = await wait_for(done, 60.0, "api_job:s1 completed")
            assert row["assignee"] == ssp.ssp_id
            assert backend.calls_of("api_job:s1")[0].auth == f"Bearer {TOKEN}"

        # The scheduler's admin plane knows api_job as a job table (from the project file
        # alone: no YAML job_tables, no _00_retention row) and not other_job.
        status, body = _admin(sched.admin + "/admin/api/session",
                              body={"password": admin_stack.BREAKGLASS})
        assert status == 200
        tok = body["token"]
        status, body = _admin(sched.admin + "/admin/api/jobs/api_job:s1", tok)
        assert status == 200, body
        assert body["status"] == "completed"
        status, body = _admin(sched.admin + "/admin/api/jobs?table=api_job", tok)
        assert status == 200 and [j["id"] for j in body["jobs"]] == ["api_job:s1"]
        status, body = _admin(sched.admin + "/admin/api/jobs/other_job:1", tok)
        assert status == 404 and "not a job table" in json.dumps(body)
    finally:
        if ssp is not None:
            ssp.process.stop()
        sched.process.stop()
        await backend.stop()
        await root.close()
