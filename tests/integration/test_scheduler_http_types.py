"""Transport http through the real `svc-scheduler`: an event's row arrives as JSON (record links
and datetimes as text); the scheduler types it again from the table's field definitions before
the WAL, so the replica hashes like the database and the drift check finds nothing to repair."""

from __future__ import annotations

import itertools
import json
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from surrealdb import RecordID

from dbclient import Database, DbConfig
from scheduler.replica import Replica
from tests.integration.test_scheduler_feed_process import get_json, launch, table_hash, until
from tests.support.procs import DbHost, free_port

_ns = itertools.count()

SCHEMA = """
DEFINE TABLE user SCHEMALESS;
DEFINE TABLE post SCHEMAFULL;
DEFINE FIELD owner ON post TYPE record<user>;
DEFINE FIELD editor ON post TYPE option<record<user>>;
DEFINE FIELD at ON post TYPE datetime;
DEFINE FIELD title ON post TYPE string;
"""


@pytest.fixture
async def app(shared_db_host: DbHost) -> AsyncIterator[tuple[Database, dict[str, str]]]:
    n = next(_ns)
    env = {"SVC_DB_URL": shared_db_host.ws_url, "SVC_DB_USER": shared_db_host.user,
           "SVC_DB_PASS": shared_db_host.password, "SVC_DB_NS": f"httptypes{n}",
           "SVC_DB_NAME": f"app{n}"}
    db = Database(DbConfig.from_env(env))
    await db.connect()
    await db.query(SCHEMA)
    await db.query("CREATE user:alice SET name = 'alice'")
    try:
        yield db, env
    finally:
        await db.close()


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return dict(json.loads(r.read()))


async def test_http_rows_with_links_and_datetimes_hash_like_the_database_and_never_drift(
        app: tuple[Database, dict[str, str]], shared_db_host: DbHost, tmp_path: Path) -> None:
    db, env = app
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = launch(tmp_path, shared_db_host, env, port, "http", SVC_DRIFT_CHECK="true",
                  SVC_DRIFT_CONFIRM_TICKS="2")
    try:
        await until(lambda: get_json(url + "/health").get("scheduler", {}).get("state")
                    == "ready", "the scheduler to be ready", proc)
        # What the database holds, and what its http event posts (JSON: links and datetimes
        # as text), as the `_00_post_mutation` event would send it.
        post(url + "/ingest", {"table": "post", "op": "CREATE", "id": "post:1", "record": {
            "id": "post:1", "owner": "user:alice", "editor": "user:alice",
            "at": "2025-01-31T12:00:00Z", "title": "x"}})
        post(url + "/ingest", {"table": "post", "op": "CREATE", "id": "post:2", "record": {
            "id": "post:2", "owner": "user:alice", "at": "2025-02-01T08:30:00.123456Z",
            "title": "y"}})
        # The events go first: a drift check between a database write and its event (which
        # in production share one transaction) would see the table empty in the replica but
        # not upstream and act at once; the other way round it waits for a second check.
        await db.query("CREATE post:1 SET owner = user:alice, editor = user:alice, "
                       "at = d'2025-01-31T12:00:00Z', title = 'x'; "
                       "CREATE post:2 SET owner = user:alice, "
                       "at = d'2025-02-01T08:30:00.123456Z', title = 'y'")
        rows = await db.query_one("SELECT * FROM post ORDER BY id")
        assert isinstance(rows[0]["owner"], RecordID)
        snap = await until(lambda: (s := get_json(url + "/health/snapshot")).get(
            "tables", {}).get("post") == 2 and s, "both posts drained into the replica", proc)
        assert snap["hashes"]["post"] == table_hash(rows)
        # Several drift checks after the drain: none sees a difference, none repairs.
        first = snap["drift"]["checked_at"] or 0.0
        seen: set[float] = set()

        def checks() -> dict[str, Any] | None:
            d = get_json(url + "/health/snapshot").get("drift") or {}
            at = d.get("checked_at")
            if at is not None and at > first:
                seen.add(at)
            return d if len(seen) >= 3 else None

        drift = await until(checks, "three drift checks after the drain", proc)
        assert drift["mismatched"] == [] and drift["auto_repairs"] == 0
        assert drift["auto_reclones"] == 0
        assert drift["tables"]["post"] == {"upstream": 2, "replica": 2}
        assert get_json(url + "/health/snapshot")["hashes"]["post"] == table_hash(rows)
    except BaseException:
        proc.stop()
        raise
    assert proc.stop() == 0, proc.log_text()[-3000:]
    with Replica.open(tmp_path / "data" / "replica.sqlite3") as rep:
        assert list(rep.rows("post")) == rows
