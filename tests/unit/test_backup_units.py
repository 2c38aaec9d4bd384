"""The backup package's pure parts: configuration, the dump format, the schema replay plan,
the registry's crash semantics and the maintenance bodies (the real server, database and
processes are in tests/integration/test_backup_*.py)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from surrealdb import RecordID

from backup import requests
from backup.config import (
    DEFAULT_BUCKET,
    DEFAULT_ENDPOINT,
    ObjectStoreConfig,
    objstore_from_env,
    pause_from_env,
)
from backup.dumpformat import DumpError, DumpWriter, read_dump, verify_dump
from backup.registry import Registry
from backup.schema import SchemaPlan, escape_ident, is_view, overwrite, table_kind
from backup.service import BackupInvalid
from scheduler.config import ConfigError, SchedulerConfig
from ssp.config import SspConfig

# ---------------------------------------------------------------------------- configuration


def test_the_plane_switches_on_with_any_of_the_first_four_variables() -> None:
    assert not objstore_from_env({}).enabled
    assert not objstore_from_env({"OBJSTORE_REGION": "eu"}).enabled
    for var in ("OBJSTORE_ENDPOINT", "OBJSTORE_ACCESS_KEY", "OBJSTORE_SECRET_KEY",
                "OBJSTORE_BUCKET"):
        assert objstore_from_env({var: "x"}).enabled, var


def test_each_missing_variable_falls_back_to_its_local_default() -> None:
    cfg = objstore_from_env({"OBJSTORE_BUCKET": "mine"})
    assert cfg.effective_endpoint == DEFAULT_ENDPOINT
    assert cfg.effective_bucket == "mine"
    assert objstore_from_env({"OBJSTORE_ENDPOINT": "http://s3:9000/"}).effective_bucket \
        == DEFAULT_BUCKET
    assert objstore_from_env({"OBJSTORE_ENDPOINT": "http://s3:9000/"}).effective_endpoint \
        == "http://s3:9000"


def test_keys_never_show_in_repr_or_the_public_view() -> None:
    cfg = objstore_from_env({"OBJSTORE_ACCESS_KEY": "ak-secret", "OBJSTORE_SECRET_KEY": "sk-s3"})
    for text in (repr(cfg), json.dumps(cfg.public())):
        assert "ak-secret" not in text and "sk-s3" not in text


def test_scheduler_and_ssp_parse_the_same_variables_with_one_parser() -> None:
    env = {"SVC_DB_URL": "ws://127.0.0.1:1", "OBJSTORE_ENDPOINT": "http://s3:1",
           "OBJSTORE_SECRET_KEY": "k", "SVC_PROJECT_SLUG": "shop"}
    sched = SchedulerConfig.load(None, env)
    ssp = SspConfig.from_env(env)
    assert sched.admin.objstore == ssp.objstore == objstore_from_env(env)
    assert isinstance(ssp.objstore, ObjectStoreConfig)
    assert sched.admin.project_slug == ssp.project_slug == "shop"


def test_the_failpoint_accepts_only_its_points() -> None:
    assert pause_from_env({}) is None
    assert pause_from_env({"SVC_BACKUP_PAUSE_AT": "main_db"}) == "main_db"
    with pytest.raises(ValueError, match="SVC_BACKUP_PAUSE_AT"):
        pause_from_env({"SVC_BACKUP_PAUSE_AT": "sometimes"})
    with pytest.raises(ConfigError):
        SchedulerConfig.load(None, {"SVC_DB_URL": "ws://h:1", "SVC_BACKUP_PAUSE_AT": "x"})


# ---------------------------------------------------------------------------- dump format


def _dump(path: Path, records: list[dict[str, object]]) -> dict[str, object]:
    with open(path, "wb") as f:
        w = DumpWriter(f.write)
        for r in records:
            w.add(r)
        w.close()
    return {"sha256": w.sha256, "bytes": w.bytes}


HEADER = {"t": "header", "format": "svc-backup", "version": 1}
SCHEMA = {"t": "schema", "db": {}, "tables": {}}


def test_a_dump_reads_back_record_by_record_with_its_types(tmp_path: Path) -> None:
    rows = [{"id": RecordID("post", 1), "owner": RecordID("user", "a"), "n": None}]
    recs = [HEADER, SCHEMA, {"t": "rows", "table": "post", "edge": False, "rows": rows},
            {"t": "end", "tables": {"post": 1}, "rows": 1}]
    meta = _dump(tmp_path / "d.gz", recs)
    back = list(read_dump(tmp_path / "d.gz"))
    assert [r["t"] for r in back] == ["header", "schema", "rows", "end"]
    assert back[2]["rows"][0]["owner"] == RecordID("user", "a")
    assert verify_dump(tmp_path / "d.gz", str(meta["sha256"]), {"post": 1})["rows"] == 1
    assert verify_dump(tmp_path / "d.gz")["tables"] == {"post": 1}
    assert gzip.decompress((tmp_path / "d.gz").read_bytes())  # plain gzip


def test_a_dump_without_its_end_record_is_refused(tmp_path: Path) -> None:
    _dump(tmp_path / "d.gz", [HEADER, SCHEMA,
                              {"t": "rows", "table": "t", "edge": False, "rows": [{"a": 1}]}])
    with pytest.raises(DumpError, match="truncated"):
        verify_dump(tmp_path / "d.gz")
    data = (tmp_path / "d.gz").read_bytes()
    (tmp_path / "cut.gz").write_bytes(data[: len(data) - 5])
    with pytest.raises(DumpError):
        verify_dump(tmp_path / "cut.gz")


def test_counts_or_checksum_that_differ_are_refused(tmp_path: Path) -> None:
    meta = _dump(tmp_path / "d.gz", [HEADER, SCHEMA,
                                     {"t": "rows", "table": "t", "edge": False, "rows": [{}]},
                                     {"t": "end", "tables": {"t": 2}, "rows": 2}])
    with pytest.raises(DumpError, match="row counts"):
        verify_dump(tmp_path / "d.gz")
    with pytest.raises(DumpError, match="checksum"):
        verify_dump(tmp_path / "d.gz", "0" * 64, {"t": 2})
    assert meta["bytes"] == (tmp_path / "d.gz").stat().st_size


def test_something_that_is_not_our_dump_is_refused(tmp_path: Path) -> None:
    _dump(tmp_path / "d.gz", [{"t": "header", "format": "other"}])
    with pytest.raises(DumpError, match="not a backup dump"):
        list(read_dump(tmp_path / "d.gz"))
    (tmp_path / "x.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DumpError, match="damaged"):
        list(read_dump(tmp_path / "x.gz"))


# ---------------------------------------------------------------------------- schema plan


def test_define_statements_are_replayed_with_overwrite() -> None:
    assert overwrite("DEFINE FIELD in ON follows TYPE record<user>") == \
        "DEFINE FIELD OVERWRITE in ON follows TYPE record<user>"
    assert overwrite("DEFINE TABLE OVERWRITE t") == "DEFINE TABLE OVERWRITE t"
    assert overwrite("DEFINE TABLE IF NOT EXISTS t") == "DEFINE TABLE IF NOT EXISTS t"
    assert escape_ident("user") == "user" and escape_ident("odd-name") == "`odd-name`"
    assert is_view("DEFINE TABLE v TYPE ANY SCHEMALESS AS SELECT count() FROM t GROUP ALL")
    assert not is_view("DEFINE TABLE t TYPE NORMAL SCHEMAFULL")
    assert table_kind("DEFINE TABLE e TYPE RELATION IN a OUT b") == "relation"
    assert table_kind("DEFINE TABLE t TYPE NORMAL") == "normal"


DUMP_DB = {
    "tables": {"user": "DEFINE TABLE user TYPE NORMAL SCHEMAFULL",
               "cnt": "DEFINE TABLE cnt TYPE ANY SCHEMALESS AS SELECT count() FROM user GROUP ALL",
               "_00_list_ref_user_a": "DEFINE TABLE _00_list_ref_user_a TYPE RELATION"},
    "functions": {"greet": "DEFINE FUNCTION fn::greet() { RETURN 1 } PERMISSIONS FULL"},
    "accesses": {"account": "DEFINE ACCESS account ON DATABASE TYPE RECORD SIGNIN (SELECT 1) "
                            "WITH JWT ALGORITHM HS512 KEY '[REDACTED]' WITH ISSUER KEY "
                            "'[REDACTED]' DURATION FOR SESSION 1h",
                 "kept": "DEFINE ACCESS kept ON DATABASE TYPE RECORD"},
    "users": {"admin": "DEFINE USER admin ON DATABASE PASSHASH '[REDACTED]' ROLES OWNER"},
}
DUMP_TABLES = {"user": {"fields": {"name": "DEFINE FIELD name ON user TYPE string"},
                        "events": {"e": "DEFINE EVENT e ON user THEN {}"},
                        "indexes": {"i": "DEFINE INDEX i ON user FIELDS name"}}}
CURRENT = {"tables": {"user": "DEFINE TABLE user", "v": "DEFINE TABLE v AS SELECT * FROM user",
                      "late": "DEFINE TABLE late"},
           "functions": {"greet": "x", "a::b": "y"}, "params": {"p": "z"},
           "accesses": {"kept": "DEFINE ACCESS kept ON DATABASE TYPE RECORD"}, "users": {}}


def test_the_wipe_removes_views_first_then_every_table_function_and_param() -> None:
    wipe = SchemaPlan(DUMP_DB, DUMP_TABLES, CURRENT).wipe()
    assert wipe[0] == "REMOVE TABLE IF EXISTS v"  # a table a view reads cannot go first
    assert set(wipe) >= {"REMOVE TABLE IF EXISTS user", "REMOVE TABLE IF EXISTS late",
                         "REMOVE FUNCTION IF EXISTS fn::greet",
                         "REMOVE FUNCTION IF EXISTS fn::a::b", "REMOVE PARAM IF EXISTS $p"}


def test_tables_before_rows_events_and_views_after() -> None:
    plan = SchemaPlan(DUMP_DB, DUMP_TABLES, CURRENT)
    assert plan.data_tables() == ["_00_list_ref_user_a", "user"]
    defs = plan.table_defs()
    assert "DEFINE TABLE OVERWRITE user TYPE NORMAL SCHEMAFULL" in defs
    assert "DEFINE INDEX OVERWRITE i ON user FIELDS name" in defs
    assert not any("EVENT" in d or "AS SELECT" in d for d in defs)
    after = plan.after_rows()
    assert after[0] == "DEFINE EVENT OVERWRITE e ON user THEN {}"
    assert after[-1].startswith("DEFINE TABLE OVERWRITE cnt") and "AS SELECT" in after[-1]


def test_redacted_access_keys_and_user_hashes_are_warned_about() -> None:
    plan = SchemaPlan(DUMP_DB, DUMP_TABLES, CURRENT)
    stmts = plan.database_level()
    account = next(s for s in stmts if "ACCESS OVERWRITE account" in s)
    assert "REDACTED" not in account and "DURATION FOR SESSION 1h" in account
    assert not any("kept" in s for s in stmts)  # the database's own is kept
    assert "DEFINE FUNCTION OVERWRITE fn::greet() { RETURN 1 } PERMISSIONS FULL" in stmts
    assert any("account" in w and "new key" in w for w in plan.warnings)
    assert any("admin" in w and "not restored" in w for w in plan.warnings)


# ---------------------------------------------------------------------------- registry


def _registry_with(tmp_path: Path, stage: str) -> Registry:
    reg = Registry(tmp_path)
    reg.put_restore({"restore_id": "r1", "backup_id": "b1", "stage": stage, "stages": [],
                     "started_at_ms": 1})
    reg.put_backup({"backup_id": "b2", "status": "running", "created_at_ms": 1})
    return Registry(tmp_path)  # what the next process loads


@pytest.mark.parametrize("stage", ["main_db", "replica"])
def test_a_restore_interrupted_after_main_db_began_holds_the_next_process(
        tmp_path: Path, stage: str) -> None:
    reg = _registry_with(tmp_path, stage)
    rec = reg.restores["r1"]
    assert rec["stage"] == "failed" and rec["failed_stage"] == stage
    assert "interrupted" in rec["error"]
    assert reg.held is rec
    assert Registry(tmp_path).held["restore_id"] == "r1"  # and the one after it
    assert reg.backups["b2"]["status"] == "failed"


@pytest.mark.parametrize("stage", ["queued", "running"])
def test_a_restore_interrupted_before_main_db_holds_nothing(tmp_path: Path, stage: str) -> None:
    reg = _registry_with(tmp_path, stage)
    assert reg.restores["r1"]["failed_stage"] == stage and reg.held is None


def test_an_unreadable_registry_starts_empty(tmp_path: Path) -> None:
    (tmp_path / "backups.json").write_text("{not json")
    reg = Registry(tmp_path)
    assert reg.backups == {} and reg.restores == {} and reg.held is None


# ---------------------------------------------------------------------------- bodies


def test_maintenance_bodies_are_checked() -> None:
    assert requests.parse_create(None) == {"backup_id": None, "project_slug": None,
                                           "name": None}
    assert requests.parse_restore({"backup_id": "bk-1", "storage_path": "p/bk-1/d"}) == {
        "backup_id": "bk-1", "restore_id": None, "project_slug": None,
        "storage_path": "p/bk-1/d"}
    for bad in ([], {"backup_id": "../etc"}, {"backup_id": 3}):
        with pytest.raises(BackupInvalid):
            requests.parse_create(bad)
    for bad in ({}, {"backup_id": ""}, {"backup_id": "ok", "restore_id": 5}):
        with pytest.raises(BackupInvalid):
            requests.parse_restore(bad)
