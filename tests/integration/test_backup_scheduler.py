"""Backup and restore of a cluster, for real: a database host, a local S3 server (``rclone
serve s3``), ``svc-scheduler`` with its admin listener (changefeed transport) and an SSP in
scheduler mode under ops/run's supervisor.

A database of 100,000 rows with views and edges is backed up through the admin API; more is
written (the views' edges move); the backup is restored; the database, the replica's hashes,
the SSP's circuit and every view's edges equal the state at backup time.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dbclient import Database
from tests.support.admin_stack import BREAKGLASS, start_scheduler, start_ssp
from tests.support.backup_helpers import jreq, seed, table_digest
from tests.support.objstore import running_s3
from tests.support.procs import DbHost
from tests.support.ssp_stack import app_write, apply_schema, edges, root_db, wait_for

pytestmark = pytest.mark.slow

USERS = 100
POSTS = 99_800
LIKES = 100  # USERS + POSTS + LIKES = 100,000 rows
VIEW_USERS = [f"u{i}" for i in range(8)]
VIEW_SQL = "SELECT * FROM post WHERE owner = $auth.id ORDER BY n DESC LIMIT 5"


async def state(root: Database, http: aiohttp.ClientSession, sched_url: str
                ) -> dict[str, Any]:
    """What must be equal at backup time and after the restore."""
    out: dict[str, Any] = {}
    for t in ("user", "post", "likes"):
        out[f"db:{t}"] = await table_digest(root, t)
    _, snap = await jreq(http, "GET", sched_url + "/health/snapshot")
    for t in ("user", "post", "likes"):
        out[f"replica:{t}"] = (snap["tables"].get(t), snap["hashes"].get(t))
    for u in VIEW_USERS:
        out[f"edges:{u}"] = await edges(root, f"_00_list_ref_user_{u}", f"v{u}")
    return out


async def expected_edges(root: Database, user: str) -> set[str]:
    rows = await root.query_one(VIEW_SQL.replace("$auth.id", f"user:{user}"))
    return {f"post:{r['id'].id}" for r in rows}


async def views_match(root: Database) -> bool:
    for u in VIEW_USERS:
        got = await edges(root, f"_00_list_ref_user_{u}", f"v{u}")
        if not got or got != await expected_edges(root, u):
            return False
    return True


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[Any]:
    with running_s3(tmp_path) as server:
        yield server


async def test_restore_of_100k_rows_brings_back_database_replica_and_edges(
        host: DbHost, tmp_path: Path, s3: Any) -> None:
    ns = "bk_" + uuid.uuid4().hex[:8]
    root = await root_db(host, ns, ns)
    t0 = time.monotonic()
    await seed(root, USERS, POSTS, LIKES)
    seeded = time.monotonic() - t0
    apply_schema(host, ns, ns)
    applied = time.monotonic() - t0 - seeded
    # Pages of 2,000 rows: the replica's clone and the SSP's bootstrap of 100k rows are most
    # of this test's time.
    sched = start_scheduler(tmp_path, host, ns, env={
        "SVC_INGEST_TRANSPORT": "changefeed", "SVC_BOOTSTRAP_PAGE_SIZE": "2000", **s3.env()})
    ssp = start_ssp(tmp_path, host, ns, sched, SVC_SSP_BOOTSTRAP_PAGE_SIZE="2000")
    # Closed before the SSP stops: its gateway waits up to its graceful timeout (5 s) for an
    # open keep-alive connection to end.
    http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
    try:
        status, body = await jreq(http, "POST", sched.admin + "/admin/api/session",
                                  body={"password": BREAKGLASS})
        assert status == 200, body
        token = body["token"]

        async def ssp_ready() -> bool:
            _, m = await jreq(http, "GET", sched.url + "/metrics")
            return any(s["state"] == "ready" for s in m["ssps"])

        await wait_for(ssp_ready, 180, "the SSP ready")
        for u in VIEW_USERS:
            st, b = await jreq(http, "POST", sched.url + "/view/register", body={
                "id": f"query:v{u}", "surql": VIEW_SQL, "clientId": "c", "ttl": "30m",
                "params": {"auth_id": f"user:{u}"}})
            assert st == 200, b
        await wait_for(lambda: views_match(root), 120, "every view's edges")
        t_state = time.monotonic()
        before = await state(root, http, sched.url)
        state_secs = time.monotonic() - t_state
        assert before["db:post"][0] == POSTS and before["replica:post"][0] == POSTS
        assert before["db:post"][1] == before["replica:post"][1]

        t1 = time.monotonic()
        st, made = await jreq(http, "POST", sched.admin + "/admin/api/backups",
                              token=token, body={"name": "before the writes"})
        assert st == 202, made
        backup_id = made["backup_id"]
        op_id = made["operation"]["id"]
        st, never = await jreq(http, "GET",
                               f"{sched.admin}/admin/api/backups/{backup_id}/restore",
                               token=token)
        assert st == 200 and never == {"cloud": None, "local": None, "stage": None}, never
        st, none = await jreq(http, "GET", f"{sched.admin}/admin/api/backups/bk-x/restore",
                              token=token)
        assert st == 404 and none["code"] == "not_found", none

        async def op_done(op: str) -> dict[str, Any] | None:
            _, ops = await jreq(http, "GET", sched.admin + "/admin/api/operations",
                                token=token)
            found = next(o for o in ops["operations"] if o["id"] == op)
            return found if found["status"] != "running" else None

        op = await wait_for(lambda: op_done(op_id), 300, "the backup operation")
        assert op["status"] == "done", op
        backup_secs = time.monotonic() - t1
        _, listing = await jreq(http, "GET", sched.admin + "/admin/api/backups",
                                token=token)
        entry = next(e for e in listing["catalog"] if e["backup_id"] == backup_id)
        assert entry["rows"] >= USERS + POSTS + LIKES and entry["deleted_at_ms"] is None
        assert listing["storage"]["reachable"] is True

        # More writes: every view's edges move.
        await app_write(root, "UPDATE post SET n = 200000 + n WHERE owner = user:u1 AND n < 500")
        await app_write(root, "DELETE post WHERE owner = user:u2 AND n > 90000")
        await app_write(root, "FOR $k IN 0..20 { CREATE type::record('post', 'late' + "
                        "<string> $k) SET owner = type::record('user', 'u' + <string> "
                        "($k % 8)), title = 'late', n = 500000 + $k }")
        await app_write(root, "RELATE user:u5->likes->post:1")
        await wait_for(lambda: views_match(root), 120, "edges after the writes")
        for u in VIEW_USERS:
            now = await edges(root, f"_00_list_ref_user_{u}", f"v{u}")
            assert now != before[f"edges:{u}"], u

        t2 = time.monotonic()
        st, r = await jreq(http, "POST",
                           f"{sched.admin}/admin/api/backups/{backup_id}/restore",
                           token=token)
        assert st == 202, r
        restore_id = r["restore_id"]

        async def restored() -> dict[str, Any] | None:
            _, s = await jreq(http, "GET",
                              f"{sched.admin}/admin/api/backups/{backup_id}/restore",
                              token=token)
            return s if s["stage"] in ("done", "failed") else None

        res = await wait_for(restored, 300, "the restore")
        assert res["stage"] == "done", res
        assert res["cloud"] is None and res["local"]["restore_id"] == restore_id
        stages = [s["stage"] for s in res["local"]["stages"]]
        assert stages == ["queued", "running", "main_db", "replica", "done"]
        op = await wait_for(lambda: op_done(r["operation"]["id"]), 300,
                            "the restore operation (SSPs back)")
        assert op["status"] == "done", op
        await wait_for(lambda: views_match(root), 120, "edges after the restore")
        restore_secs = time.monotonic() - t2
        after = await state(root, http, sched.url)
        assert after == before
        # The SSP re-bootstrapped: its circuit holds the restored rows.
        async with http.get(ssp.url + "/info") as resp:
            info = (await resp.json())[0]
        assert info["circuit_hashes"]["post"] == before["replica:post"][1]
        _, health = await jreq(http, "GET", sched.url + "/health")
        assert health["scheduler"]["state"] == "ready"
        print(f"\n100k: seed {seeded:.1f}s, schema apply {applied:.1f}s, state read "
              f"{state_secs:.1f}s, backup "
              f"{backup_secs:.1f}s, restore (SSPs back) {restore_secs:.1f}s")
    finally:
        await http.close()
        ssp.process.stop()
        sched.process.stop()
        await root.close()
