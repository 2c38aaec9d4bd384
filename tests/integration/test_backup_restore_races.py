"""A cluster's restore against the writers that keep running meanwhile (issue 31, case 4): it
never fails half way on a row someone wrote, a row lost during the import makes it import
again by itself, and the SSP's periodic writers hold still while it runs.

Real processes: a database host, a local S3 server, `svc-scheduler` (changefeed transport, the
failpoint `SVC_BACKUP_PAUSE_AT=main_db`: each restore waits with half of its rows imported)
and an SSP under ops/run's supervisor whose periodic writers run fast (view metrics every
50 ms, TTL and CRDT sweeps every second, the reconciler every 100 ms). The same backup is
restored three times, each right after the views' edges changed; at each pause the test
plays the writers a restore cannot stop (an application, a writer the heartbeat has not
reached): rows created under ids the import has yet to write, and a row it already wrote
deleted. Each restore must end `done`, the database equal to the backup, every view's edges
equal to SurrealDB's answer and every `_00_query` row ready.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from surrealdb import RecordID

from dbclient import Database
from tests.support.admin_stack import AUTH_SECRET, start_scheduler, start_ssp
from tests.support.backup_helpers import digests, jreq, seed
from tests.support.objstore import start_s3
from tests.support.procs import DbHost
from tests.support.ssp_stack import app_write, apply_schema, edges, root_db, wait_for

pytestmark = pytest.mark.slow

USERS, POSTS = 6, 300
VIEW = "SELECT * FROM post WHERE owner = $auth.id ORDER BY n DESC LIMIT 5"
VIEW_USERS = ("u0", "u1", "u2")


async def views_match(root: Database) -> bool:
    """Every view's edges equal SurrealDB's answer and its row says ready."""
    for u in VIEW_USERS:
        rows = await root.query_one(VIEW.replace("$auth.id", f"user:{u}"))
        want = {f"post:{r['id'].id}" for r in rows}
        row = await root.query_one("SELECT state FROM ONLY type::record('_00_query', $k)",
                                   {"k": f"v{u}"})
        if (not want or await edges(root, f"_00_list_ref_user_{u}", f"v{u}") != want
                or row is None or row.get("state") != "ready"):
            return False
    return True


async def collide(root: Database) -> int:
    """Rows under every id of the backup that is not in the database yet (the import has
    yet to write them): what a writer the restore did not stop would leave there."""
    made = 0
    junk: list[tuple[RecordID, dict[str, Any]]] = [
        (RecordID("user", f"u{i}"), {"name": "junk", "pass": "junk"}) for i in range(USERS)]
    junk += [(RecordID("post", i), {"owner": RecordID("user", "u0"), "title": "junk"})
             for i in range(POSTS)]
    junk += [(RecordID(t, f"v{u}"), {"junk": True}) for u in VIEW_USERS
             for t in ("_00_view_metrics", "_00_query")]
    for rid, content in junk:
        got = await root.query_one("IF record::exists($r) { RETURN false } ELSE "
                                   "{ CREATE $r CONTENT $c RETURN NONE; RETURN true }",
                                   {"r": rid, "c": content})
        made += bool(got)
    return made


async def test_restores_race_the_writers_that_keep_running_and_end_done(
        host: DbHost, tmp_path: Path) -> None:
    ns = "race_" + uuid.uuid4().hex[:8]
    root = await root_db(host, ns, ns)
    await seed(root, USERS, POSTS, 0)
    apply_schema(host, ns, ns)
    started: list[Any] = []
    try:
        s3 = start_s3(tmp_path)
        started.append(s3)
        sched = start_scheduler(tmp_path, host, ns, env={
            "SVC_INGEST_TRANSPORT": "changefeed", "SVC_BACKUP_PAUSE_AT": "main_db",
            **s3.env()})
        started.append(sched.process)
        ssp = start_ssp(tmp_path, host, ns, sched, SVC_SSP_VIEW_METRICS_FLUSH_MS="50",
                        TTL_CLEANUP_INTERVAL_SECS="1", SVC_SSP_RECONCILE_MS="100")
        started.append(ssp.process)
        work = sched.data / "backup-work"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            async def ssp_ready() -> bool:
                _, m = await jreq(http, "GET", sched.url + "/metrics")
                return any(s["state"] == "ready" for s in m["ssps"])
            await wait_for(ssp_ready, 120, "the SSP ready")
            for u in VIEW_USERS:
                st, b = await jreq(http, "POST", sched.url + "/view/register", body={
                    "id": f"query:v{u}", "surql": VIEW, "clientId": "c", "ttl": "30m",
                    "params": {"auth_id": f"user:{u}"}})
                assert st == 200, b
            await wait_for(lambda: views_match(root), 60, "the views published")

            async def metrics_written() -> bool:
                rows = await root.query_one("SELECT VALUE id FROM _00_view_metrics")
                return len(rows or []) == len(VIEW_USERS)
            await wait_for(metrics_written, 60, "view metrics written")
            at_backup = await digests(root, ("user", "post"))
            st, rec = await jreq(http, "POST", sched.url + "/backup/create", token=AUTH_SECRET,
                                 body={"backup_id": "bk-" + uuid.uuid4().hex[:8]})
            assert st == 202, rec
            backup_id = rec["backup_id"]

            async def backed_up() -> bool:
                _, b = await jreq(http, "GET", f"{sched.url}/backup/status/{backup_id}",
                                  token=AUTH_SECRET)
                assert b["status"] != "failed", b
                return bool(b["status"] == "done")
            await wait_for(backed_up, 120, "the backup")

            async def ssp_holds() -> bool:
                auth = {"Authorization": f"Bearer {AUTH_SECRET}"}
                try:
                    async with http.get(ssp.url + "/debug/heartbeat", headers=auth) as resp:
                        hb = await resp.json()
                    async with http.get(ssp.url + "/health") as resp:
                        ready = resp.status == 200
                except aiohttp.ClientConnectionError:
                    return True  # down between its resync exit and its relaunch
                return hb.get("upstream_restoring") is True or not ready

            for k, (junk, lose) in enumerate([(True, False), (False, True), (True, True)]):
                # the views' edges move right before the restore (view metrics follow)
                await app_write(root, "UPDATE post SET n = n + 100000 WHERE owner = "
                                      "type::record('user', $u) AND n < 50000",
                                {"u": VIEW_USERS[k % len(VIEW_USERS)]})
                st, r = await jreq(http, "POST", sched.url + "/backup/restore", token=AUTH_SECRET,
                                   body={"backup_id": backup_id})
                assert st == 202, r
                restore_id = r["restore_id"]
                paused = work / "paused-main_db"

                async def at_pause(rid: str = restore_id, p: Path = paused) -> bool:
                    _, b = await jreq(http, "GET", f"{sched.url}/backup/restore/status/{rid}",
                                      token=AUTH_SECRET)
                    assert b["stage"] != "failed", b  # e.g. a row a writer created collided
                    return p.exists()
                await wait_for(at_pause, 120, f"restore {k} at main_db")

                # The SSP's periodic writers hold still: it heard the scheduler is restoring,
                # or it is not running them at all (the previous restore's re-clone sent it a
                # resync: it exited and is relaunched by its supervisor, or bootstraps again).
                assert await ssp_holds(), "the SSP's writers run during the restore"
                if junk:
                    assert await collide(root) > 0
                if lose:  # a row the import wrote already, deleted by someone meanwhile
                    await root.query("DELETE $r", {"r": await imported_row(root)})
                (work / "continue").touch()

                async def finished(rid: str = restore_id) -> dict[str, Any] | None:
                    _, b = await jreq(http, "GET", f"{sched.url}/backup/restore/status/{rid}",
                                      token=AUTH_SECRET)
                    return b if b["stage"] in ("done", "failed") else None
                res = await wait_for(finished, 180, f"restore {k}")
                assert res["stage"] == "done", res
                # a lost row costs one more import from the wipe, never a failed restore
                assert len(res.get("retries") or []) == int(lose), res
                assert await digests(root, ("user", "post")) == at_backup
                junk_left = await root.query_one(
                    "SELECT VALUE id FROM _00_view_metrics, _00_query WHERE junk = true")
                assert not junk_left, junk_left
                await wait_for(lambda: views_match(root), 120, f"views after restore {k}")
    finally:
        for p in reversed(started):
            p.stop()
        await root.close()


async def imported_row(root: Database) -> RecordID:
    """A row the paused import has written already (its tables go in the database's order:
    the service's `_00_*` tables first)."""
    for table in ("_00_version", "_00_schema_state", "post", "user"):
        got = await root.query_one(f"SELECT VALUE id FROM {table} LIMIT 1")
        if got:
            assert isinstance(got[0], RecordID)
            return got[0]
    raise AssertionError("the import wrote nothing before its halfway pause")
