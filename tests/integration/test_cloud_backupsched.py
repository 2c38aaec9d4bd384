"""Scheduled backups (``cloud.backupsched``) against the platform's real store on a real
database host; the deployed scheduler behind the forwarder is an in-process fake (the seam:
``BackupForwarder.call``). The whole path through real processes, a backup taken on a
one-minute schedule by a running platform, is in ``test_cloud_deploy.py``; here the rules a
minute-long test cannot show: one backup per due time, no catching up, retention in days,
failures kept on the project."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from cloud.backupfwd import BackupForwarder
from cloud.backupsched import BackupScheduler
from cloud.errors import CloudError, Conflict, NotFound
from cloud.store import Store, now, rid
from dbclient import Database, DbConfig
from tests.support.procs import DbHost

_n = itertools.count()


class FakeForwarder:
    """Records the calls the schedule makes to a deployed scheduler."""

    backup_path = staticmethod(BackupForwarder.backup_path)

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.fail: CloudError | None = None
        self.gone: set[str] = set()

    async def call(self, project: dict[str, Any], method: str, path: str,
                   body: Any = None) -> Any:
        self.calls.append((method, path, body))
        if self.fail is not None:
            raise self.fail
        if method == "DELETE" and path.rsplit("/", 1)[-1] in self.gone:
            raise NotFound("the project's scheduler: no such backup")
        return {"backup_id": f"bk_{len(self.calls)}"}


@pytest.fixture
async def store(host: DbHost) -> AsyncIterator[Store]:
    n = next(_n)
    db = Database(DbConfig.from_env({
        "SVC_DB_URL": host.ws_url, "SVC_DB_USER": host.user, "SVC_DB_PASS": host.password,
        "SVC_DB_NS": f"bsched{n}", "SVC_DB_NAME": "control"}))
    await db.connect()
    s = Store(db)
    await s.apply_schema()
    try:
        yield s
    finally:
        await db.close()


async def project(store: Store, slug: str, **config: Any) -> None:
    await store.tx([("CREATE $id CONTENT $c RETURN NONE", {
        "id": rid("project", slug),
        "c": {"slug": slug, "tenant": "ten_x", "created_at": now() - timedelta(days=30),
              "backup_config": config}})])


async def test_a_due_project_gets_one_backup_and_old_scheduled_ones_go(store: Store) -> None:
    fwd = FakeForwarder()
    sched = BackupScheduler(store, fwd)  # type: ignore[arg-type]
    # written 3 hours ago, every hour: 3 times missed, one backup taken
    await project(store, "due", enabled=True, schedule="0 * * * *", retention=2,
                  updated_at=now() - timedelta(hours=3))
    await project(store, "off", enabled=False, schedule="* * * * *", retention=1,
                  updated_at=now() - timedelta(hours=3))
    await project(store, "later", enabled=True, schedule="0 0 1 1 *",
                  updated_at=now() - timedelta(minutes=1))
    await store.tx([("CREATE $id CONTENT $c RETURN NONE", {
        "id": rid("scheduled_backup", f"due.{b}"),
        "c": {"project": "due", "backup_id": b, "at": now() - timedelta(days=days)}})
        for b, days in (("bk_old", 3), ("bk_gone", 5), ("bk_new", 1))])
    fwd.gone.add("bk_gone")
    assert await sched.tick() == 1
    posts = [c for c in fwd.calls if c[0] == "POST"]
    assert len(posts) == 1 and posts[0][2]["name"].startswith("scheduled ")
    assert sorted(c[1] for c in fwd.calls if c[0] == "DELETE") == [
        "/backups/bk_gone", "/backups/bk_old"]
    left = await store.one("SELECT VALUE backup_id FROM scheduled_backup WHERE "
                           "deleted_at IS NONE ORDER BY backup_id")
    assert left == ["bk_1", "bk_new"]  # the one just taken is recorded too
    # the next tick within the hour: nothing is due, nothing left to delete
    fwd.calls.clear()
    assert await sched.tick() == 0
    assert fwd.calls == []


async def test_a_failed_backup_is_kept_on_the_project_and_not_retried_at_once(
        store: Store) -> None:
    fwd = FakeForwarder()
    fwd.fail = Conflict("project p has no running deployment", code="not_running")
    sched = BackupScheduler(store, fwd)  # type: ignore[arg-type]
    await project(store, "p", enabled=True, schedule="0 * * * *",
                  updated_at=now() - timedelta(hours=2))
    assert await sched.tick() == 0
    row = await store.get("project", "p")
    assert row is not None
    assert "no running deployment" in row["backup_schedule"]["last_error"]["message"]
    assert await sched.tick() == 0
    assert len(fwd.calls) == 1  # the next attempt waits for the next time the schedule gives
