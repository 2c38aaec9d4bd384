"""A restore killed at each stage, and an S3 server that stops, with real processes: the
outcome is the documented state, never a half-imported database reported as done.

``svc-scheduler`` runs with the crash-test failpoint ``SVC_BACKUP_PAUSE_AT`` (``backup.service``):
at that point the job creates ``<data>/backup-work/paused-<point>`` and waits, so the test
acts at exactly that stage (``kill -9``, or stopping the S3 server and letting it go on).
``main_db`` pauses with half of the rows imported.

Documented outcomes (scheduler/README.md, "Backups and restore"):

* killed while ``queued`` or ``running``: nothing was replaced; after the restart the restore
  is ``failed`` (interrupted) and the scheduler Ready;
* killed at ``main_db`` or ``replica``: after the restart the scheduler is Restoring (ingest,
  reclone and SSP registration 503), across further restarts too, until a new restore or
  ``POST /admin/api/restore/release``;
* the S3 server stops during a restore's download: ``failed`` at ``running``, the database
  untouched, the scheduler Ready; during a backup's upload: ``failed``, no dump, no catalog
  entry, a ``backup_failed`` incident.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dbclient import Database
from tests.integration.test_admin_mcp import mcp_client, payload
from tests.support.admin_stack import (
    AUTH_SECRET,
    BREAKGLASS,
    SCHEDULER,
    AdminScheduler,
    start_scheduler,
)
from tests.support.backup_helpers import digests, jreq, seed
from tests.support.objstore import S3Server, start_s3
from tests.support.procs import DbHost, ManagedProcess
from tests.support.ssp_stack import app_write, apply_schema, root_db, wait_for

pytestmark = pytest.mark.slow

USERS, POSTS, LIKES = 50, 4000, 50


@dataclass
class Rig:
    host: DbHost
    ns: str
    root: Database
    s3: S3Server
    sched: AdminScheduler
    http: aiohttp.ClientSession
    tmp: Path

    @property
    def admin(self) -> str:
        return self.sched.admin

    @property
    def work(self) -> Path:
        return self.sched.data / "backup-work"

    async def token(self) -> str:
        st, body = await jreq(self.http, "POST", self.sched.admin + "/admin/api/session",
                              body={"password": BREAKGLASS})
        assert st == 200, body
        return str(body["token"])

    async def health(self) -> dict[str, Any]:
        _, body = await jreq(self.http, "GET", self.sched.url + "/health")
        return body if isinstance(body, dict) else {}

    async def state(self) -> str | None:
        try:
            return (await self.health()).get("scheduler", {}).get("state")
        except aiohttp.ClientError:
            return None

    async def paused(self, point: str) -> None:
        flag = self.work / f"paused-{point}"

        async def there() -> bool:
            assert self.sched.process.alive(), self.sched.process.log_text()[-3000:]
            return flag.exists()

        await wait_for(there, 120, f"the failpoint {point}")

    def go_on(self) -> None:
        (self.work / "continue").touch()

    async def restart(self, *, pause: str | None = None) -> None:
        """kill -9 happened (or not): start the same scheduler, failpoint changed. A process
        still alive is stopped first (else it kept the port, answered for the new one, and
        outlived the test)."""
        if self.sched.process.alive():
            self.sched.process.stop()
        env = dict(self.sched.env)
        env.pop("SVC_BACKUP_PAUSE_AT", None)
        if pause:
            env["SVC_BACKUP_PAUSE_AT"] = pause
        self.sched.env = env
        self.sched.process = ManagedProcess(
            "svc-scheduler", [SCHEDULER, "--config", str(self.sched.config)], env,
            self.tmp / f"scheduler-{self.sched.port}-{time.monotonic_ns()}.log").start()

        async def up() -> bool:
            assert self.sched.process.alive(), self.sched.process.log_text()[-3000:]
            return await self.state() in ("ready", "restoring")

        await wait_for(up, 120, "the scheduler back")

    async def backup(self) -> dict[str, Any]:
        st, rec = await jreq(self.http, "POST", self.sched.url + "/backup/create",
                             token=AUTH_SECRET,
                             body={"backup_id": "bk-" + uuid.uuid4().hex[:8]})
        assert st == 202, rec
        return rec

    async def job(self, kind: str, job_id: str, *, until: tuple[str, ...] = ("done", "failed")
                  ) -> dict[str, Any]:
        path = (f"/backup/status/{job_id}" if kind == "backup"
                else f"/backup/restore/status/{job_id}")

        async def finished() -> dict[str, Any] | None:
            st, rec = await jreq(self.http, "GET", self.sched.url + path, token=AUTH_SECRET)
            assert st == 200, rec
            key = "status" if kind == "backup" else "stage"
            return rec if rec[key] in until else None

        return await wait_for(finished, 180, f"{kind} {job_id}")

    async def restore(self, backup_id: str) -> dict[str, Any]:
        st, rec = await jreq(self.http, "POST", self.sched.url + "/backup/restore",
                             token=AUTH_SECRET,
                             body={"backup_id": backup_id})
        assert st == 202, rec
        return rec


@contextlib.asynccontextmanager
async def open_rig(host: DbHost, tmp_path: Path, pause: str | None) -> AsyncIterator[Rig]:
    """Seeded database, S3 server, scheduler paused at ``pause``; everything stopped after."""
    ns = "crash_" + uuid.uuid4().hex[:8]
    root = await root_db(host, ns, ns)
    await seed(root, USERS, POSTS, LIKES)
    apply_schema(host, ns, ns)
    s3 = start_s3(tmp_path)
    env = {"SVC_INGEST_TRANSPORT": "changefeed", "SVC_BOOTSTRAP_PAGE_SIZE": "2000", **s3.env()}
    if pause is not None:
        env["SVC_BACKUP_PAUSE_AT"] = pause
    sched = start_scheduler(tmp_path, host, ns, env=env)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        r = Rig(host, ns, root, s3, sched, http, tmp_path)
        try:
            yield r
        finally:
            r.sched.process.stop()
            r.s3.stop()
            await root.close()


async def backed_up_then_changed(rig: Rig) -> tuple[str, dict[str, Any]]:
    """A backup (the failpoint must not be `upload`), then writes; (backup id, digests at
    backup time)."""
    at_backup = await digests(rig.root)
    rec = await rig.backup()
    done = await rig.job("backup", rec["backup_id"])
    assert done["status"] == "done", done
    # One write per call, each retried on a write conflict with the SSP's edge writes.
    await app_write(rig.root, "DELETE post WHERE n > 50000")
    await app_write(rig.root, "UPDATE user SET name = 'renamed'")
    await app_write(rig.root, "RELATE user:u1->likes->post:2")
    assert await digests(rig.root) != at_backup
    return rec["backup_id"], at_backup


async def assert_held(rig: Rig) -> None:
    """Restoring: ingest, reclone, rehash and SSP registration refused with 503."""
    assert await rig.state() == "restoring"
    st, body = await jreq(rig.http, "POST", rig.sched.url + "/ingest", body={
        "table": "post", "op": "CREATE", "id": "post:x", "record": {"id": "post:x"}})
    assert st == 503 and body["error"] == "restoring", body
    st, body = await jreq(rig.http, "POST", rig.sched.url + "/admin/resync",
                          token=AUTH_SECRET, body={})
    assert st == 503 and body["error"] == "restoring", body
    st, body = await jreq(rig.http, "POST", rig.sched.url + "/ssp/register", token=AUTH_SECRET,
                          body={"ssp_id": "s1", "url": "http://127.0.0.1:1"})
    assert st == 503, body
    token = await rig.token()
    for mode in ("reclone", "rehash"):  # spec: both 503 while cloning or restoring
        st, body = await jreq(rig.http, "POST",
                              rig.sched.admin + "/admin/api/scheduler/restart",
                              token=token, body={"mode": mode})
        assert st == 503 and body["code"] == "restoring", (mode, body)
    _, incidents = await jreq(rig.http, "GET", rig.sched.admin
                              + "/admin/api/incidents?state=open", token=token)
    assert any(i["kind"] == "restore_failed" for i in incidents["incidents"]), incidents


async def test_kill9_mid_import_keeps_the_scheduler_restoring_until_a_new_restore(
        host: DbHost, tmp_path: Path) -> None:
    async with open_rig(host, tmp_path, "main_db") as rig:
        backup_id, at_backup = await backed_up_then_changed(rig)
        rec = await rig.restore(backup_id)
        await rig.paused("main_db")
        posts = await rig.root.query_one("SELECT count() AS n FROM post GROUP ALL")
        assert 0 < posts[0]["n"] < POSTS  # half imported right now
        rig.sched.process.kill9()

        await rig.restart()
        status = await rig.job("restore", rec["restore_id"])
        assert status["stage"] == "failed" and status["failed_stage"] == "main_db"
        assert "interrupted" in status["error"]
        await assert_held(rig)
        await rig.restart()  # the hold survives another restart
        await assert_held(rig)

        # The way out: a new restore (accepted while held), through the admin API.
        token = await rig.token()
        st, r = await jreq(rig.http, "POST",
                           f"{rig.sched.admin}/admin/api/backups/{backup_id}/restore", token=token)
        assert st == 202, r
        again = await rig.job("restore", r["restore_id"])
        assert again["stage"] == "done", again
        assert await rig.state() == "ready"
        assert await digests(rig.root) == at_backup
        _, snap = await jreq(rig.http, "GET", rig.sched.url + "/health/snapshot")
        assert snap["tables"]["post"] == at_backup["post"][0]
        assert snap["hashes"]["post"] == at_backup["post"][1]
        st, body = await jreq(rig.http, "POST", rig.sched.url + "/ingest", body={
            "table": "post", "op": "UPDATE", "id": "post:1",
            "record": {"id": "post:1", "owner": "user:u1", "title": "t", "n": 1}})
        assert st == 200, body
        token = await rig.token()
        _, incidents = await jreq(rig.http, "GET", rig.sched.admin + "/admin/api/incidents",
                                  token=token)
        kinds = {(i["kind"], i["state"]) for i in incidents["incidents"]}
        assert ("restore_failed", "recovered") in kinds


async def test_kill9_before_the_rebuild_then_an_operator_release(
        host: DbHost, tmp_path: Path) -> None:
    async with open_rig(host, tmp_path, "replica") as rig:
        backup_id, at_backup = await backed_up_then_changed(rig)
        rec = await rig.restore(backup_id)
        await rig.paused("replica")
        rig.sched.process.kill9()
        await rig.restart()
        status = await rig.job("restore", rec["restore_id"])
        assert status["stage"] == "failed" and status["failed_stage"] == "replica"
        await assert_held(rig)

        token = await rig.token()
        st, op = await jreq(rig.http, "POST", rig.sched.admin + "/admin/api/restore/release",
                            token=token, body={})
        assert st == 202 and op["kind"] == "restore_release", op

        async def released() -> dict[str, Any] | None:
            _, ops = await jreq(rig.http, "GET", rig.sched.admin + "/admin/api/operations",
                                token=token)
            found = next(o for o in ops["operations"] if o["id"] == op["id"])
            return found if found["status"] != "running" else None

        done = await wait_for(released, 120, "the release")
        assert done["status"] == "done", done
        assert await rig.state() == "ready"
        # main_db had completed before the kill: the database is the backup's, and the replica
        # was re-cloned from it.
        assert await digests(rig.root) == at_backup
        _, snap = await jreq(rig.http, "GET", rig.sched.url + "/health/snapshot")
        assert (snap["tables"]["post"], snap["hashes"]["post"]) == at_backup["post"]
        st, body = await jreq(rig.http, "POST", rig.sched.admin + "/admin/api/restore/release",
                              token=token, body={})
        assert st == 409 and body["code"] == "not_restoring", body


async def test_kill9_before_the_download_replaces_nothing(host: DbHost, tmp_path: Path) -> None:
    async with open_rig(host, tmp_path, "running") as rig:
        backup_id, _ = await backed_up_then_changed(rig)
        now = await digests(rig.root)
        rec = await rig.restore(backup_id)
        await rig.paused("running")
        rig.sched.process.kill9()
        await rig.restart()
        status = await rig.job("restore", rec["restore_id"])
        assert status["stage"] == "failed" and status["failed_stage"] == "running"
        assert await rig.state() == "ready"
        assert await digests(rig.root) == now


async def test_kill9_with_a_restore_queued_behind_a_backup(host: DbHost, tmp_path: Path) -> None:
    async with open_rig(host, tmp_path, "upload") as rig:
        first = await rig.backup()  # pauses before its upload completes
        await rig.paused("upload")
        now = await digests(rig.root)
        st, rec = await jreq(rig.http, "POST", rig.sched.url + "/backup/restore",
                             token=AUTH_SECRET, body={
            "backup_id": "any", "storage_path": "default/any/dump.cbor.gz"})
        assert st == 202 and rec["stage"] == "queued", rec  # behind the paused backup
        rig.sched.process.kill9()
        await rig.restart()
        status = await rig.job("restore", rec["restore_id"])
        assert status["stage"] == "failed" and status["failed_stage"] == "queued"
        backup = await rig.job("backup", first["backup_id"])
        assert backup["status"] == "failed" and "interrupted" in backup["error"]
        assert await rig.state() == "ready"
        assert await digests(rig.root) == now


async def test_s3_stopping_during_the_download_fails_before_anything_is_replaced(
        host: DbHost, tmp_path: Path) -> None:
    async with open_rig(host, tmp_path, "running") as rig:
        backup_id, _ = await backed_up_then_changed(rig)
        now = await digests(rig.root)
        rec = await rig.restore(backup_id)
        await rig.paused("running")
        rig.s3.kill9()
        rig.go_on()
        status = await rig.job("restore", rec["restore_id"])
        assert status["stage"] == "failed" and status["failed_stage"] == "running"
        assert "unreachable" in status["error"]
        assert await rig.state() == "ready"
        assert await digests(rig.root) == now
        _, st = await jreq(rig.http, "GET", rig.sched.url + "/backup/status", token=AUTH_SECRET)
        assert st["storage"]["reachable"] is False and st["held"] is None


async def test_s3_stopping_during_the_upload_leaves_no_backup(host: DbHost, tmp_path: Path) -> None:
    async with open_rig(host, tmp_path, "upload") as rig:
        rec = await rig.backup()
        await rig.paused("upload")
        rig.s3.kill9()
        rig.go_on()
        done = await rig.job("backup", rec["backup_id"])
        assert done["status"] == "failed" and "unreachable" in done["error"]
        assert "test-secret-key" not in str(done)
        rig.s3 = start_s3(rig.tmp, port=rig.s3.port, root=rig.s3.root)
        assert not [p for p in rig.s3.files() if rec["backup_id"] in str(p)]
        token = await rig.token()
        _, listing = await jreq(rig.http, "GET", rig.sched.admin + "/admin/api/backups",
                                token=token)
        assert listing["catalog"] == [] and listing["storage"]["reachable"] is True
        _, incidents = await jreq(rig.http, "GET", rig.sched.admin + "/admin/api/incidents",
                                  token=token)
        assert any(i["kind"] == "backup_failed" for i in incidents["incidents"])
        assert "test-secret-key" not in rig.sched.process.log_text()




async def test_backup_and_restore_through_the_mcp_tools(host: DbHost, tmp_path: Path) -> None:
    async with open_rig(host, tmp_path, None) as rig:
        at_backup = await digests(rig.root)
        token = await rig.token()
        async with mcp_client(rig, token, "legacy") as client:
            made = payload(await client.call_tool("backup_create", {"name": "by mcp"}))
            assert made["operation"]["kind"] == "backup"

            seen: dict[str, Any] = {}

            async def op_done(op_id: str) -> Any:
                body = payload(await client.call_tool("operations_list",
                                                      {"operation_id": op_id}))
                got = seen[op_id] = body["operations"][0]
                return got if got["status"] != "running" else None

            op = await wait_for(lambda: op_done(made["operation"]["id"]), 120, "backup op")
            assert op["status"] == "done" and op["progress"]["status"] == "done", op
            listing = payload(await client.call_tool("backups_list", {}))
            assert [e["backup_id"] for e in listing["catalog"]] == [made["backup_id"]]
            # About 400 posts: deleting nearly all 4,000 (each with its edges) can outlast
            # the client's timeout on a loaded machine.
            await app_write(rig.root, "DELETE post WHERE n > 90000")
            assert await digests(rig.root) != at_backup
            r = payload(await client.call_tool("backup_restore",
                                               {"backup_id": made["backup_id"]}))
            try:
                op = await wait_for(lambda: op_done(r["operation"]["id"]), 120, "restore op")
            except AssertionError as e:  # say where it stood (stage, progress, note)
                raise AssertionError(f"{e}: {seen.get(r['operation']['id'])}; scheduler log, last lines: "
                                     f"{rig.sched.process.log_text()[-3000:]}") from None
            assert op["status"] == "done", op
            st = payload(await client.call_tool("backup_restore_status",
                                                {"backup_id": made["backup_id"]}))
            assert st["stage"] == "done" and st["local"]["restore_id"] == r["restore_id"]
        assert await digests(rig.root) == at_backup
