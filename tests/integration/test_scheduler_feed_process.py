"""The changefeed transport and drift repair through the real `svc-scheduler` process.

A write in the database reaches the replica (`/health/snapshot` counts) through the changefeed
tail; a replica row altered while the scheduler is stopped is found and repaired in place
after the restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from surrealdb import RecordID

from dbclient import Database, DbConfig
from engine.hashing import hash_text
from engine.hashing import table_hash as rows_hash
from scheduler.replica import Replica
from svccli.schema import apply_schema
from svccli.settings import resolve_settings
from tests.support.procs import DbHost, ManagedProcess, base_env, free_port

SCRIPT = str(Path(sys.executable).parent / "svc-scheduler")
_ns = itertools.count()


def get_json(url: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return dict(json.loads(r.read()))
    except urllib.error.HTTPError as e:  # /health is 503 without SSPs; the body still counts
        return dict(json.loads(e.read() or b"{}"))
    except OSError:  # not listening yet
        return {}


async def until(pred: Any, what: str, proc: ManagedProcess, deadline: float = 60.0) -> Any:
    """Wait for a condition; the deadline only bounds a hung test, it measures nothing."""
    end = time.monotonic() + deadline
    while True:
        got = await asyncio.to_thread(pred)
        if got:
            return got
        assert proc.alive(), proc.log_text()[-3000:]
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}:\n{proc.log_text()[-3000:]}")
        await asyncio.sleep(0.1)


@pytest.fixture
async def app(shared_db_host: DbHost) -> AsyncIterator[tuple[Database, dict[str, str]]]:
    n = next(_ns)
    env = {"SVC_DB_URL": shared_db_host.ws_url, "SVC_DB_USER": shared_db_host.user,
           "SVC_DB_PASS": shared_db_host.password, "SVC_DB_NS": f"feedproc{n}",
           "SVC_DB_NAME": f"app{n}"}
    db = Database(DbConfig.from_env(env))
    await db.connect()
    await db.query("DEFINE TABLE post SCHEMALESS")
    await apply_schema(db, resolve_settings(env, transport_flag="changefeed", project_flag=None,
                                            ingest_url_flag=None, retention_flag=None,
                                            cwd=Path("/nonexistent")))
    try:
        yield db, env
    finally:
        await db.close()


def launch(tmp: Path, host: DbHost, env: dict[str, str], port: int,
           transport: str = "changefeed", **extra_env: str) -> ManagedProcess:
    """A real `svc-scheduler` over `env`'s database on `port` (config written under `tmp`)."""
    config = tmp / "scheduler.yml"
    config.write_text(yaml.safe_dump({
        "db": {"url": host.ws_url, "namespace": env["SVC_DB_NS"],
               "database": env["SVC_DB_NAME"], "username": host.user,
               "password": host.password},
        "ingest_host": "127.0.0.1", "ingest_port": port,
        "replica_db_path": "data/replica.sqlite3", "wal_path": "data/wal",
        "snapshot_update_interval_secs": 1,
    }))
    return ManagedProcess("svc-scheduler", [SCRIPT, "--config", str(config)],
                          base_env(SVC_INGEST_TRANSPORT=transport, SVC_ADMIN_HOST="127.0.0.1",
                                   SVC_ADMIN_PORT=str(free_port()), **extra_env),
                          tmp / f"scheduler-{port}.log").start()


@contextlib.contextmanager
def stopped_after(proc: ManagedProcess) -> Iterator[ManagedProcess]:
    """Run the body against ``proc``, then stop it: quietly when the body failed, else
    asserting a clean exit (0)."""
    try:
        yield proc
    except BaseException:
        proc.stop()
        raise
    assert proc.stop() == 0, proc.log_text()[-3000:]


async def launch_ready(tmp: Path, host: DbHost, env: dict[str, str], port: int
                       ) -> ManagedProcess:
    """`launch`, then until `/health` says the scheduler is ready (stopped if it never is)."""
    proc = launch(tmp, host, env, port)
    try:
        await until(lambda: get_json(f"http://127.0.0.1:{port}/health").get(
            "scheduler", {}).get("state") == "ready", "the scheduler to be ready", proc)
    except BaseException:
        proc.stop()
        raise
    return proc


def tamper_replica(tmp: Path, keys: Iterable[int]) -> None:
    """Change `post:<key>` rows in the stopped scheduler's replica, with no event anywhere."""
    with Replica.open(tmp / "data" / "replica.sqlite3") as rep:
        for key in keys:
            row = rep.get("post", RecordID("post", key))
            assert row is not None
            rep.apply([(rep.applied_seq + 1, {"table": "post", "op": "UPDATE",
                                              "id": RecordID("post", key),
                                              "record": {**row, "t": "tampered"}})])


def table_hash(rows: list[dict[str, Any]]) -> str:
    return hash_text(rows_hash(rows))  # the /health/snapshot wire text


async def test_feed_writes_reach_the_replica_and_tampered_rows_are_repaired(
        app: tuple[Database, dict[str, str]], shared_db_host: DbHost, tmp_path: Path) -> None:
    db, env = app
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = await launch_ready(tmp_path, shared_db_host, env, port)
    with stopped_after(proc):
        for i in range(3):
            await db.query("CREATE type::record('post', $i) SET t = $t", {"i": i, "t": f"t{i}"})
        await until(lambda: get_json(url + "/health/snapshot").get("tables", {}).get("post") == 3,
                    "three posts in the replica via the changefeed", proc)
        health = get_json(url + "/health")
        assert health["changefeed"]["enabled"] is True
        assert health["changefeed"]["doorbell"] == "connected"
        assert health["changefeed"]["gap"] is False
        await db.query("UPDATE post:1 SET t = 'updated'; DELETE post:0")
        rows = await db.query_one("SELECT * FROM post ORDER BY id")
        await until(lambda: get_json(url + "/health/snapshot").get("hashes", {}).get("post")
                    == table_hash(rows), "the update and delete in the replica", proc)

    # Behind the scheduler's back: one replica row changed, no event anywhere.
    tamper_replica(tmp_path, [2])
    with Replica.open(tmp_path / "data" / "replica.sqlite3") as rep:
        assert rep.count("post") == 2

    proc = launch(tmp_path, shared_db_host, env, port)
    with stopped_after(proc):
        snap = await until(
            lambda: (s := get_json(url + "/health/snapshot")).get("drift", {}).get(
                "auto_repairs", 0) >= 1 and s.get("hashes", {}).get("post") == table_hash(rows) and s,
            "the drift repair", proc)
        drift = snap["drift"]
        assert drift["last_auto_repair"]["table"] == "post"
        assert drift["last_auto_repair"]["rows"] == 1 and drift["auto_reclones"] == 0
        assert snap["tables"]["post"] == 2
    with Replica.open(tmp_path / "data" / "replica.sqlite3") as rep:
        assert rep.get("post", RecordID("post", 2)) == rows[1]


async def test_a_divergence_above_the_repair_cap_re_clones_the_replica(
        app: tuple[Database, dict[str, str]], shared_db_host: DbHost, tmp_path: Path) -> None:
    db, env = app
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    await db.query("FOR $i IN 0..30 { CREATE type::record('post', $i) SET t = 'v1' }")
    proc = launch(tmp_path, shared_db_host, env, port)
    with stopped_after(proc):
        await until(lambda: get_json(url + "/health/snapshot").get("tables", {}).get("post")
                    == 30, "thirty posts cloned", proc)

    # Behind the scheduler's back: 12 rows changed in the replica, more than the cap of 5.
    tamper_replica(tmp_path, range(12))

    rows = await db.query_one("SELECT * FROM post ORDER BY id")
    proc = launch(tmp_path, shared_db_host, env, port, SVC_DRIFT_REPAIR_MAX_ROWS="5",
                  SVC_DRIFT_CONFIRM_TICKS="1")
    with stopped_after(proc):
        snap = await until(
            lambda: (s := get_json(url + "/health/snapshot")).get("drift", {}).get(
                "auto_reclones", 0) >= 1 and s.get("hashes", {}).get("post") == table_hash(rows)
            and s, "the re-clone", proc)
        drift = snap["drift"]
        assert drift["auto_repairs"] == 0 and drift["last_auto_reclone"] is not None
        assert snap["tables"]["post"] == 30
    with Replica.open(tmp_path / "data" / "replica.sqlite3") as rep:
        assert [rep.get("post", RecordID("post", i)) for i in range(30)] == rows


async def test_the_feed_resumes_after_kill9_and_loses_no_write(
        app: tuple[Database, dict[str, str]], shared_db_host: DbHost, tmp_path: Path) -> None:
    """kill -9 while writes commit, more writes while it is down: after the restart the replica
    equals the database (the cursor resumes from its last saved stamp; a re-read is
    idempotent in the replica)."""
    db, env = app
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = await launch_ready(tmp_path, shared_db_host, env, port)
    try:
        for i in range(40):
            await db.query("CREATE type::record('post', $i) SET t = $t", {"i": i, "t": "a"})
            if i == 20:
                proc.kill9()
    finally:
        proc.kill9()
    await db.query("UPDATE post SET t = 'b' WHERE id < post:10; DELETE post:39")
    rows = await db.query_one("SELECT * FROM post ORDER BY id")
    # Drift checks off: only the resumed feed can bring the replica level with the database.
    proc = launch(tmp_path, shared_db_host, env, port, SVC_DRIFT_CHECK="false")
    with stopped_after(proc):
        await until(lambda: get_json(url + "/health/snapshot").get("hashes", {}).get("post")
                    == table_hash(rows), "the replica equal to the database", proc)
        snap = get_json(url + "/health/snapshot")
        assert snap["tables"]["post"] == 39
        assert get_json(url + "/health")["changefeed"]["gap"] is False
