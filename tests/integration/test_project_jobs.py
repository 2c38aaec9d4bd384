"""A backend declared in `project.yml` gets its outbox jobs run with no hand-written
`SVC_JOB_CONFIG` and no hand-applied outbox table (issue 17, part 1): `svc schema apply` with
the project file applies the app's `method.schema`; the SSP and the scheduler started with
`SVC_PROJECT_FILE` read the app's `method` (outbox table, concurrency), `deploy.timeout`,
`baseUrl` and `auth.token` (`${NAME}` from the environment, else the app's own env sources),
and take the root's `refMode` / `sync.transport` where the variables are unset. Real database
host, SSPs, scheduler and a backend HTTP server; everything stopped afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from surrealdb import RecordID

from tests.support import admin_stack
from tests.support.job_stack import Backend
from tests.support.procs import ROOT, DbHost, base_env
from tests.support.ssp_stack import APP_SCHEMA, db_env, root_db, start_ssp, unique_db, wait_for

TOKEN = "project-backend-token-3c2b1a"  # reaches the SSP only as ${API_TOKEN}
SECRET = "project-ssp-secret-4d5e6f"
JOB_SCHEMA = ("-- the outbox of app api\nDEFINE TABLE api_job SCHEMALESS;\n"
              "DEFINE INDEX api_job_status ON api_job FIELDS status;\n")


def write_project(tmp: Path, backend_url: str, *, transport: str, ref_mode: str,
                  dotenv_token: str) -> Path:
    """A root file with one backend (an external one: the test's server) and a container;
    the backend's `.env` (its `env` source) sets API_TOKEN to `dotenv_token`."""
    (tmp / "proj" / "api").mkdir(parents=True)
    (tmp / "proj" / "project.yml").write_text(
        "apps:\n  api: {path: api}\n  cache: {path: cache.yml}\n"
        f"sync: {{transport: {transport}}}\nrefMode: {ref_mode}\n")
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
        "deploy: {timeout: 2}\n"
        "env: [.env]\n")
    (api / ".env").write_text(f"API_TOKEN={dotenv_token}\n")
    return tmp / "proj" / "project.yml"


def schema_apply(host: DbHost, ns: str, db: str, project: Path,
                 *flags: str) -> subprocess.CompletedProcess[str]:
    """`svc schema apply` as a real command with `SVC_PROJECT_FILE` (no transport variable)."""
    r = subprocess.run([sys.executable, "-m", "svccli", "schema", "apply", *flags],
                       env=base_env(**db_env(host, ns, db), SVC_PROJECT_FILE=str(project)),
                       cwd=str(ROOT), capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr + r.stdout
    return r


async def test_backend_in_project_file_runs_its_outbox_jobs_on_a_standalone_ssp(
        host: DbHost, tmp_path: Path) -> None:
    ns, db = unique_db()
    root = await root_db(host, ns, db)
    backend = Backend()
    await backend.start()
    # the token only in the app's .env: the SSP resolves ${API_TOKEN} from the app's sources
    project = write_project(tmp_path, backend.url, transport="changefeed", ref_mode="single",
                            dotenv_token=TOKEN)
    await root.query(APP_SCHEMA)
    # the project file gives the transport (changefeed) and the outbox table (api_job)
    r = schema_apply(host, ns, db, project)
    assert "transport: changefeed" in r.stdout and "(sync.transport)" in r.stdout
    assert "outbox api: api/jobs.surql (2 definitions): api_job created" in r.stdout
    assert "synced api_job: created" in r.stdout
    again = schema_apply(host, ns, db, project)
    assert "outbox api: api/jobs.surql (2 definitions): api_job unchanged" in again.stdout
    assert "0 object(s) created or updated" in again.stdout
    info = await root.query_one("INFO FOR TABLE api_job")
    assert set(info["indexes"]) == {"api_job_status"}
    assert TOKEN not in r.stdout + r.stderr + again.stdout + again.stderr
    # no SVC_INGEST_TRANSPORT nor SVC_SSP_REF_MODE: the SSP takes both from the project file
    # (jobs reach a standalone SSP only through the changefeed it then tails)
    ssp = start_ssp(tmp_path, host, ns, db, SVC_PROJECT_FILE=str(project),
                    SVC_INGEST_TRANSPORT="", SVC_AUTH_SECRET=SECRET, SVC_SSP_JOB_SWEEP_SECS="1")
    try:
        await ssp.wait_ready()
        async with aiohttp.ClientSession() as http, \
                http.get(f"http://127.0.0.1:{ssp.port}/info") as resp:
            [me] = await resp.json()
        assert me["ref_mode"] == "single"

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
    # the .env holds a stale token: the process environment's API_TOKEN wins
    project = write_project(tmp_path, backend.url, transport="http", ref_mode="dedicated",
                            dotenv_token="stale-token-in-dotenv")
    await root.query(APP_SCHEMA + "DEFINE TABLE other_job SCHEMALESS;")
    # the embedded host has no http::* functions: the flag wins over the file's http; the
    # outbox table comes from the project file. The test posts the row change itself.
    r = schema_apply(host, ns, ns, project, "--transport", "changefeed")
    assert "api_job created" in r.stdout
    # SVC_INGEST_TRANSPORT blank: the scheduler's transport is the file's http (its own
    # default would be changefeed), so its changefeed tail is off
    sched = admin_stack.start_scheduler(tmp_path, host, ns, env={
        "SVC_PROJECT_FILE": str(project), "SVC_INGEST_TRANSPORT": ""})
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
            async with http.get(sched.url + "/health") as r:
                assert (await r.json())["changefeed"]["enabled"] is False

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
