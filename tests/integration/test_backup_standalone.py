"""The standalone SSP's maintenance plane with real processes: a database host, a local S3
server and ``python -m ssp`` (changefeed transport), through its HTTP gateway (bearer).

A backup and a restore bring the database and every view's edges back; while the restore
replaces the database ``/ingest`` answers 503 (events in the window are rejected); a
re-bootstrap that fails after the main database was replaced leaves the SSP blocked
(``bootstrapping``) until the process restarts.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dbclient import Database
from tests.support.backup_helpers import digests, jreq, seed
from tests.support.objstore import S3Server, start_s3
from tests.support.procs import DbHost, start_db_host
from tests.support.ssp_stack import (
    Ssp,
    app_write,
    apply_schema,
    edges,
    root_db,
    start_ssp,
    view_body,
    wait_for,
)

pytestmark = pytest.mark.slow

SECRET = "standalone-backup-test-secret"
VIEW_SQL = "SELECT * FROM post WHERE owner = $auth.id ORDER BY n DESC LIMIT 5"
USERS = ("u0", "u1", "u2")


class Rig:
    def __init__(self, host: DbHost, ns: str, root: Database, s3: S3Server, ssp: Ssp,
                 http: aiohttp.ClientSession, tmp: Path, env: dict[str, str]) -> None:
        self.host, self.ns, self.root, self.s3, self.ssp = host, ns, root, s3, ssp
        self.http, self.tmp, self.env = http, tmp, env

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ssp.port}"

    @property
    def work(self) -> Path:
        return self.tmp / "ssp-snap" / "backup-work"

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return await jreq(self.http, method, self.url + path, token=SECRET, body=body)

    async def job(self, kind: str, job_id: str) -> dict[str, Any]:
        path = (f"/backup/status/{job_id}" if kind == "backup"
                else f"/backup/restore/status/{job_id}")

        async def finished() -> dict[str, Any] | None:
            st, rec = await self.call("GET", path)
            assert st == 200, rec
            key = "status" if kind == "backup" else "stage"
            return rec if rec[key] in ("done", "failed") else None

        return await wait_for(finished, 180, f"{kind} {job_id}")

    async def views_match(self) -> bool:
        for u in USERS:
            rows = await self.root.query_one(VIEW_SQL.replace("$auth.id", f"user:{u}"))
            want = {f"post:{r['id'].id}" for r in rows}
            if await edges(self.root, f"_00_list_ref_user_{u}", f"v{u}") != want or not want:
                return False
        return True

    async def view_edges(self) -> dict[str, set[str]]:
        return {u: await edges(self.root, f"_00_list_ref_user_{u}", f"v{u}") for u in USERS}


@contextlib.asynccontextmanager
async def open_rig(host: DbHost, tmp: Path, **env: str) -> AsyncIterator[Rig]:
    ns = "sa_" + uuid.uuid4().hex[:8]
    root = await root_db(host, ns, ns)
    await seed(root, 20, 2000, 20)
    apply_schema(host, ns, ns)
    s3 = start_s3(tmp)
    full_env = {"SVC_AUTH_SECRET": SECRET, "SVC_SSP_SNAPSHOT_DIR": str(tmp / "ssp-snap"),
                "SVC_SSP_DB_TIMEOUT_SECS": "5", **s3.env(), **env}
    ssp = start_ssp(tmp, host, ns, ns, **full_env)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        rig = Rig(host, ns, root, s3, ssp, http, tmp, full_env)
        try:
            await ssp.wait_ready()
            for u in USERS:
                r = await ssp.call("POST /view/register", view_body(f"v{u}", VIEW_SQL,
                                                                    auth=f"user:{u}"))
                assert r["status"] == 200, r
            await wait_for(rig.views_match, 60, "the views' edges")
            yield rig
        finally:
            rig.ssp.stop()
            rig.s3.stop()
            await root.close()



async def backed_up_then_changed(rig: Rig) -> tuple[str, dict[str, Any], dict[str, set[str]]]:
    at_backup, edges_at_backup = await digests(rig.root), await rig.view_edges()
    st, rec = await rig.call("POST", "/backup/create", {"backup_id": "bk-sa-1"})
    assert st == 202 and rec["project_slug"] == "default", rec
    done = await rig.job("backup", "bk-sa-1")
    assert done["status"] == "done", done
    # One write per call, each retried on a write conflict (a DELETE also deletes the edges
    # pointing at the post, which the SSP may be writing at the same time).
    await app_write(rig.root, "UPDATE post SET n = n + 300000 WHERE n < 2000")
    await app_write(rig.root, "DELETE post WHERE n > 95000")
    await wait_for(rig.views_match, 60, "edges after the writes")
    assert await rig.view_edges() != edges_at_backup
    return "bk-sa-1", at_backup, edges_at_backup


async def test_backup_routes_need_the_bearer_and_check_bodies(
        host: DbHost, tmp_path: Path) -> None:
    async with open_rig(host, tmp_path) as rig:
        async with rig.http.post(rig.url + "/backup/create", json={}) as r:
            assert r.status == 401
        st, body = await rig.call("POST", "/backup/create", {"backup_id": "../x"})
        assert st == 400 and body["error"] == "invalid", body
        st, body = await rig.call("POST", "/backup/restore", {})
        assert st == 400 and "backup_id" in body["message"], body
        st, body = await rig.call("POST", "/backup/restore", [1])
        assert st == 400, body
        st, body = await rig.call("GET", "/backup/status/nope")
        assert st == 404, body
        st, body = await rig.call("GET", "/backup/restore/status/nope")
        assert st == 404, body
        st, body = await rig.call("GET", "/backup/status")
        assert st == 200 and body["storage"]["configured"] is True, body
        assert body["storage"]["reachable"] is True and body["held"] is None


async def test_restore_rejects_ingest_meanwhile_and_brings_back_data_and_edges(
        host: DbHost, tmp_path: Path) -> None:
    async with open_rig(host, tmp_path, SVC_BACKUP_PAUSE_AT="replica") as rig:
        circuit_at_backup = await circuit(rig)
        backup_id, at_backup, edges_at_backup = await backed_up_then_changed(rig)
        assert await circuit(rig) != circuit_at_backup
        st, rec = await rig.call("POST", "/backup/restore", {"backup_id": backup_id,
                                                            "restore_id": "rs-sa-1"})
        assert st == 202 and rec["stage"] == "queued", rec
        await wait_for(lambda: _exists(rig.work / "paused-replica"), 120, "the replica stage")
        # The database is the backup's now; the SSP takes no event until it re-bootstrapped.
        assert await digests(rig.root) == at_backup
        st, body = await rig.call("POST", "/ingest", {
            "table": "post", "op": "UPDATE", "id": "post:1",
            "record": {"id": "post:1", "owner": "user:u1", "title": "t", "n": 1}})
        assert st == 503 and body["error"] == "SSP_NOT_READY", body
        async with rig.http.get(rig.url + "/health") as r:
            assert r.status == 503 and (await r.json())["status"] == "bootstrapping"
        (rig.work / "continue").touch()
        status = await rig.job("restore", "rs-sa-1")
        assert status["stage"] == "done", status
        await rig.ssp.wait_ready()
        await wait_for(rig.views_match, 60, "edges after the restore")
        assert await rig.view_edges() == edges_at_backup
        assert await digests(rig.root) == at_backup
        assert await circuit(rig) == circuit_at_backup  # the circuit re-bootstrapped
        # Events flow again: a write moves a view.
        await app_write(rig.root, "CREATE post:top SET owner = user:u0, title = 'top', n = 999999")
        await wait_for(rig.views_match, 60, "edges after a new write")
        assert "post:top" in (await rig.view_edges())["u0"]


async def test_a_failed_rebuild_after_the_database_was_replaced_blocks_until_restart(
        tmp_path: Path) -> None:
    host = start_db_host(tmp_path, memory=False, path=tmp_path / "db")
    try:
        async with open_rig(host, tmp_path, SVC_BACKUP_PAUSE_AT="replica") as rig:
            backup_id, at_backup, edges_at_backup = await backed_up_then_changed(rig)
            st, _ = await rig.call("POST", "/backup/restore", {"backup_id": backup_id,
                                                               "restore_id": "rs-sa-2"})
            assert st == 202
            await wait_for(lambda: _exists(rig.work / "paused-replica"), 120, "replica stage")
            host.process.stop()  # the database goes away: the re-bootstrap cannot read it
            (rig.work / "continue").touch()
            status = await rig.job("restore", "rs-sa-2")
            assert status["stage"] == "failed" and status["failed_stage"] == "replica"
            restarted = start_db_host(tmp_path, memory=False, path=tmp_path / "db",
                                      port=host.port)
            host.process = restarted.process
            # The database is back, the SSP stays blocked.
            st, body = await rig.call("POST", "/ingest", {
                "table": "post", "op": "UPDATE", "id": "post:1",
                "record": {"id": "post:1", "owner": "user:u1", "title": "t", "n": 1}})
            assert st == 503, body
            async with rig.http.get(rig.url + "/health") as r:
                assert r.status == 503
            # A new process bootstraps from the restored database.
            assert rig.ssp.stop() == 0, rig.ssp.process.log_text()[-3000:]
            rig.env.pop("SVC_BACKUP_PAUSE_AT")
            rig.ssp = start_ssp(rig.tmp, host, rig.ns, rig.ns, **rig.env)
            await rig.ssp.wait_ready()
            # The blocked process wrote no snapshot on its way out (its rows were of the
            # replaced database): the new one loads every table from the database.
            assert "warm start" not in rig.ssp.process.log_text()
            await rig.root.close()
            rig.root = await root_db(host, rig.ns, rig.ns)
            assert await digests(rig.root) == at_backup
            for u in USERS:
                rig_ok = await rig.ssp.call("POST /view/register", view_body(
                    f"v{u}", VIEW_SQL, auth=f"user:{u}"))
                assert rig_ok["status"] == 200, rig_ok
            await wait_for(rig.views_match, 60, "edges after the restart")
            assert await rig.view_edges() == edges_at_backup
            st, body = await rig.call("GET", "/backup/restore/status/rs-sa-2")
            assert st == 200 and body["stage"] == "failed", body  # the registry kept it
    finally:
        host.process.stop()


async def circuit(rig: Rig) -> dict[str, Any]:
    """The SSP's circuit: row counts and hashes per table (`GET /info`)."""
    async with rig.http.get(rig.url + "/info") as r:
        info = (await r.json())[0]
    return {t: (info["circuit_tables"][t], info["circuit_hashes"][t]) for t in ("user", "post")}


async def _exists(p: Path) -> bool:
    return p.exists()
