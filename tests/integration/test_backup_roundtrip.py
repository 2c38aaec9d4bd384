"""Backup and restore of the main database through the backup service, against the real
database host and a real S3 server (``rclone serve s3``): what comes back is what was there.

The scheduler and SSP sides (Restoring, re-clone, re-bootstrap, crashes) are in
``test_backup_scheduler.py`` and ``test_backup_standalone.py``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from surrealdb import Duration, RecordID

from backup.config import objstore_from_env
from backup.dumpformat import DumpError, read_dump
from backup.objstore import ObjectStore
from backup.schema import escape_ident
from backup.service import BackupInvalid, BackupService, NoObjectStorage, catalog_key
from dbclient import Database, DbConfig
from dbclient.clock import now_ms
from dbclient.feedfloor import FLOOR_TABLE, read_floor
from tests.support.objstore import BUCKET, S3Server, running_s3, start_s3
from tests.support.procs import DbHost

_names = itertools.count()

SCHEMA = """
DEFINE ANALYZER words TOKENIZERS BLANK FILTERS LOWERCASE;
DEFINE FUNCTION fn::greet($name: string) { RETURN 'Hello, ' + $name; };
DEFINE PARAM $site VALUE 'example';
DEFINE ACCESS account ON DATABASE TYPE RECORD
    SIGNIN (SELECT * FROM user WHERE name = $username) DURATION FOR SESSION 1h;
DEFINE TABLE user SCHEMAFULL CHANGEFEED 1h INCLUDE ORIGINAL;
DEFINE FIELD name ON user TYPE string;
DEFINE FIELD touched ON user VALUE time::now();
DEFINE FIELD note ON user TYPE option<string | null>;
DEFINE FIELD small ON user TYPE option<int> ASSERT $value < 100;
DEFINE INDEX user_name ON user FIELDS name UNIQUE;
DEFINE EVENT audit ON user WHEN $event = 'CREATE' THEN { CREATE audit SET who = $after.id };
DEFINE TABLE audit SCHEMALESS;
DEFINE TABLE follows TYPE RELATION IN user OUT user;
DEFINE TABLE user_count AS SELECT count() AS n FROM user GROUP ALL;
DEFINE TABLE free SCHEMALESS;
DEFINE TABLE `odd-name` SCHEMALESS;
"""


def config_for(host: DbHost) -> DbConfig:
    n = next(_names)
    return DbConfig.from_env({"SVC_DB_URL": host.ws_url, "SVC_DB_USER": host.user,
                              "SVC_DB_PASS": host.password, "SVC_DB_NS": f"bk{n}",
                              "SVC_DB_NAME": f"bk{n}", "SVC_SSP_DB_TIMEOUT_SECS": "60"})


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with running_s3(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture
async def db(shared_db_host: DbHost) -> AsyncIterator[Database]:
    database = Database(config_for(shared_db_host))
    await database.connect()
    try:
        yield database
    finally:
        await database.close()


class Recorder:
    """A restore target that only records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def hold(self, reason: str) -> None:
        self.calls.append("hold")

    async def rebuild(self, reason: str) -> None:
        self.calls.append("rebuild")

    async def blocked(self, reason: str) -> None:
        self.calls.append("blocked")


async def seed(db: Database) -> None:
    await db.query(SCHEMA)
    users = [{"id": RecordID("user", f"u{i}"), "name": f"user {i}",
              "note": None if i % 2 else f"note {i}"} for i in range(30)]
    await db.query("INSERT INTO user $rows", {"rows": users})
    await db.query("UPDATE user:u1 SET note = NULL")
    await db.query("FOR $i IN 1..20 { RELATE (type::record('user', 'u' + <string> $i))"
                   "->follows->(type::record('user', 'u' + <string> ($i - 1))) SET w = $i }")
    await db.query("RELATE user:u0->free->user:u1 SET k = 1")
    await db.query(
        "CREATE free:typed SET at = $at, d = $d, dur = $dur, "
        "u = u'0190d1e2-0000-7000-8000-000000000001', link = user:u3, "
        "b = <bytes> 'binary', geo = (1.5, 2.5), nested = {a: [1, NULL, 'x'], o: {z: 1.5f}}, "
        "nul = NULL, big = 9007199254740993",
        {"at": datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC), "d": Decimal("12.3400"),
         "dur": Duration.parse("1h30m")})
    await db.query("CREATE free:looks_like_edge SET in = user:u1, out = user:u2")
    await db.query("CREATE `odd-name`:1 SET v = 'x'")
    await db.query("CREATE _00_version:user SET v = 7")


async def content(db: Database) -> dict[str, Any]:
    """Every table's rows and the schema texts that a restore must bring back."""
    info = await db.query_one("INFO FOR DB")
    out: dict[str, Any] = {"tables": dict(info["tables"])}
    for kind in ("analyzers", "functions", "params", "accesses"):
        out[kind] = sorted(info[kind])
    for t in sorted(info["tables"]):
        out[f"rows:{t}"] = await db.query_one(f"SELECT * FROM {escape_ident(t)} ORDER BY id")
        tinfo = await db.query_one(f"INFO FOR TABLE {escape_ident(t)}")
        out[f"def:{t}"] = {k: dict(tinfo[k]) for k in ("fields", "indexes", "events")}
    out["graph"] = await db.query_one("SELECT id, ->follows->user AS f, <-follows<-user AS b, "
                                      "->free->user AS x FROM user ORDER BY id")
    return out


async def wait_for(svc: BackupService, kind: str, job_id: str, timeout: float = 120
                   ) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        rec = (svc.registry.backups if kind == "backup" else svc.registry.restores)[job_id]
        if rec.get("status") in ("done", "failed") or rec.get("stage") in ("done", "failed"):
            return rec
        assert asyncio.get_running_loop().time() < deadline, rec
        await asyncio.sleep(0.05)


def service(db: Database, s3: S3Server, tmp_path: Path, target: Any = None,
            bucket: str = BUCKET) -> BackupService:
    return BackupService(db.config, objstore_from_env(s3.env(bucket)), tmp_path,
                         prefix="proj", target=target or Recorder())


async def test_restore_brings_back_rows_types_edges_schema_and_views(
        db: Database, s3: S3Server, tmp_path: Path) -> None:
    await seed(db)
    before = await content(db)
    target = Recorder()
    svc = service(db, s3, tmp_path, target)
    await svc.start()
    try:
        rec = svc.create_backup(name="first")
        done = await wait_for(svc, "backup", rec["backup_id"])
        assert done["status"] == "done", done
        assert done["rows"] == sum(len(v) for k, v in before.items()
                                   if k.startswith("rows:") and k != "rows:user_count")
        store = ObjectStore(objstore_from_env(s3.env()))
        entry = store.get_json(catalog_key("proj", rec["backup_id"]))
        assert entry["sha256"] == done["sha256"] and entry["storage_path"] == done["storage_path"]
        assert store.size(done["storage_path"]) == done["bytes"]
        # Another service on the bucket (an empty registry) knows the backup by its catalog.
        other = service(db, s3, tmp_path / "other")
        assert await other.known(rec["backup_id"]) is True
        assert await other.known("bk-none") is False
        with pytest.raises(BackupInvalid):
            await other.known("not an id")

        # More writes, a schema change, a table dropped and one added: all undone.
        await db.query("UPDATE user SET name = name + ' changed' WHERE id < user:u5")
        await db.query("DELETE follows WHERE w > 10; DELETE user:u29; CREATE user:new SET "
                       "name = 'new'; REMOVE TABLE audit; DEFINE TABLE extra SCHEMALESS; "
                       "CREATE extra:1; REMOVE FUNCTION fn::greet; DEFINE PARAM $late VALUE 1")
        assert await content(db) != before

        wiped_after = now_ms() << 16
        r = await svc.start_restore(rec["backup_id"])
        res = await wait_for(svc, "restore", r["restore_id"])
        assert res["stage"] == "done", res
        assert [s["stage"] for s in res["stages"]] == ["queued", "running", "main_db",
                                                       "replica", "done"]
        assert target.calls == ["hold", "rebuild"]
        # The restore recorded where the replaced database's feed ends (dbclient.feedfloor).
        floor = await read_floor(db)
        assert wiped_after <= floor <= now_ms() << 16
        after = await content(db)
        assert after["tables"].pop(FLOOR_TABLE).startswith(f"DEFINE TABLE {FLOOR_TABLE}")
        after.pop(f"rows:{FLOOR_TABLE}")
        after.pop(f"def:{FLOOR_TABLE}")
        for key in before:
            assert after[key] == before[key], key
        assert after.keys() == before.keys()
        # Events are back and fire again for new writes; views keep computing.
        await db.query("CREATE user:later SET name = 'later'")
        assert await db.query_one("SELECT VALUE who FROM audit WHERE who = user:later") == [
            RecordID("user", "later")]
        assert (await db.query_one("SELECT VALUE n FROM user_count"))[0] == 31

        # A backup of the restored database holds that floor; restoring it writes its own.
        again = svc.create_backup(name="second")
        assert (await wait_for(svc, "backup", again["backup_id"]))["status"] == "done"
        r = await svc.start_restore(again["backup_id"])
        assert (await wait_for(svc, "restore", r["restore_id"]))["stage"] == "done"
        assert await read_floor(db) > floor
    finally:
        await svc.stop()


async def test_a_restore_that_cannot_download_changes_nothing(
        db: Database, s3: S3Server, tmp_path: Path) -> None:
    await seed(db)
    before = await content(db)
    target = Recorder()
    svc = service(db, s3, tmp_path, target)
    await svc.start()
    # the bucket is there (whichever test ran before on this server): only the object is not
    ObjectStore(objstore_from_env(s3.env())).ensure_bucket()
    try:
        r = await svc.start_restore("missing", storage_path="proj/missing/dump.cbor.gz")
        res = await wait_for(svc, "restore", r["restore_id"])
        assert res["stage"] == "failed" and res["failed_stage"] == "running"
        assert "NoSuchKey" in res["error"] or "404" in res["error"]
        assert target.calls == []
        assert svc.held is None
        assert await content(db) == before
    finally:
        await svc.stop()


async def test_a_truncated_dump_is_refused_before_anything_is_wiped(
        db: Database, s3: S3Server, tmp_path: Path) -> None:
    await seed(db)
    svc = service(db, s3, tmp_path)
    await svc.start()
    try:
        rec = svc.create_backup()
        done = await wait_for(svc, "backup", rec["backup_id"])
        store = ObjectStore(objstore_from_env(s3.env()))
        whole = tmp_path / "whole.gz"
        store.download(done["storage_path"], whole)
        data = whole.read_bytes()
        cut = tmp_path / "cut.gz"
        cut.write_bytes(data[: len(data) // 2])
        with pytest.raises(DumpError):
            for _ in read_dump(cut):
                pass
        # The same half uploaded under another key and restored by its path: refused.
        key = "proj/cut/dump.cbor.gz"
        up = store.multipart(key)
        up.write(data[: len(data) // 2])
        up.complete()
        await db.query("CREATE free:after_backup")
        before = await content(db)
        r = await svc.start_restore("cut", storage_path=key)
        res = await wait_for(svc, "restore", r["restore_id"])
        assert res["stage"] == "failed" and res["failed_stage"] == "running"
        assert await content(db) == before
        assert await svc.known("cut") is True  # by its restore, though in no catalog
    finally:
        await svc.stop()


async def test_without_object_storage_backups_are_refused(db: Database, tmp_path: Path) -> None:
    svc = BackupService(db.config, objstore_from_env({}), tmp_path, prefix="p")
    with pytest.raises(NoObjectStorage):
        svc.create_backup()
    with pytest.raises(NoObjectStorage):
        await svc.start_restore("x")


async def test_a_server_that_is_down_fails_the_backup_and_leaves_no_object(
        db: Database, tmp_path: Path) -> None:
    await seed(db)
    s3 = start_s3(tmp_path)
    svc = service(db, s3, tmp_path / "reg")
    s3.stop()
    await svc.start()
    try:
        rec = svc.create_backup()
        done = await wait_for(svc, "backup", rec["backup_id"], timeout=180)
        assert done["status"] == "failed"
        assert "unreachable" in done["error"]
        assert "test-secret-key" not in done["error"]
    finally:
        await svc.stop()


async def test_export_pages_grow_to_fit_the_rows_and_keep_every_row(
        db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each page is one query whose cost grows with the table: once rows are encoded the
    # exporter asks for as many as fit PAGE_BYTES (bounded), and no row is lost or doubled.
    from backup import exporter

    monkeypatch.setattr(exporter, "MAX_PAGE_ROWS", 800)
    monkeypatch.setattr(exporter, "PAGE_BYTES", 800 * 40)
    await db.query("DEFINE TABLE bulk SCHEMALESS; "
                   "FOR $i IN 0..3000 { CREATE type::record('bulk', $i) SET n = $i }")
    asked: list[int] = []
    read = db.query_one

    async def spy(sql: str, params: Any = None, **kw: Any) -> Any:
        if isinstance(params, dict) and params.get("t") == "bulk":
            asked.append(params["n"])
        return await read(sql, params, **kw)

    monkeypatch.setattr(db, "query_one", spy)
    path = tmp_path / "dump.gz"
    with open(path, "wb") as f:
        res = await exporter.export_database(db, f.write, backup_id="b1", page_rows=100)
    assert res["tables"]["bulk"] == 3000
    assert asked[0] == 100 and 100 < max(asked) <= 800, asked
    rows = [r["n"] for rec in read_dump(path) if rec["t"] == "rows" and rec["table"] == "bulk"
            for r in rec["rows"]]
    assert sorted(rows) == list(range(3000))
