"""`svc schema apply` against the real database host."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from surrealdb import AsyncSurreal, RecordID

from dbclient import Database, DbConfig
from svccli.schema import apply_schema, query_cleanup_sql, synced_table_sql
from svccli.settings import SchemaSettings, resolve_settings
from tests.support.procs import ROOT, DbHost, base_env

_names = itertools.count()


def env_for(host: DbHost, **extra: str) -> dict[str, str]:
    n = next(_names)
    return {
        "SVC_DB_URL": host.ws_url,
        "SVC_DB_USER": host.user,
        "SVC_DB_PASS": host.password,
        "SVC_DB_NS": f"schema{n}",
        "SVC_DB_NAME": f"app{n}",
        **extra,
    }


def settings_for(env: dict[str, str], transport: str = "changefeed",
                 **kw: Any) -> SchemaSettings:
    return resolve_settings(env, transport_flag=transport, project_flag=None,
                            ingest_url_flag=kw.get("ingest_url"), retention_flag=None,
                            cwd=Path("/nonexistent"))


@pytest.fixture
async def env(shared_db_host: DbHost) -> dict[str, str]:
    return env_for(shared_db_host)


@pytest.fixture
async def db(env: dict[str, str]) -> AsyncIterator[Database]:
    database = Database(DbConfig.from_env(env))
    await database.connect()
    try:
        yield database
    finally:
        await database.close()


APP_SCHEMA = """
DEFINE TABLE user SCHEMALESS PERMISSIONS FOR select, update WHERE id = $auth.id;
DEFINE ACCESS account ON DATABASE TYPE RECORD
    SIGNUP (CREATE user SET name = $name) SIGNIN (SELECT * FROM user WHERE name = $name)
    DURATION FOR SESSION 1h;
DEFINE TABLE post SCHEMAFULL COMMENT 'blog posts'
    PERMISSIONS FOR select WHERE true FOR create, update, delete WHERE author = $auth.id;
DEFINE FIELD title ON post TYPE string;
DEFINE FIELD author ON post TYPE record<user>;
DEFINE INDEX post_author ON post FIELDS author;
DEFINE EVENT app_audit ON post WHEN $event = 'CREATE' THEN { CREATE audit SET post = $after.id };
DEFINE TABLE audit SCHEMALESS COMMENT 'audit trail @nosync';
DEFINE TABLE post_count AS SELECT count() AS n FROM post GROUP ALL;
"""


async def info_snapshot(db: Database) -> dict[str, Any]:
    """INFO FOR DB plus INFO FOR TABLE of every table (LIVE registrations left out)."""
    out: dict[str, Any] = {"db": await db.query_one("INFO FOR DB")}
    for t in await db.tables():
        info = await db.table_info(t)
        info.pop("lives", None)
        out[t] = info
    return out


async def test_applying_twice_leaves_exactly_the_same_schema(db: Database,
                                                             env: dict[str, str]) -> None:
    await db.query(APP_SCHEMA)
    first = await apply_schema(db, settings_for(env))
    snapshot = await info_snapshot(db)
    state = await db.query_one("SELECT * FROM _00_schema_state ORDER BY id")
    second = await apply_schema(db, settings_for(env))
    assert await info_snapshot(db) == snapshot
    assert await db.query_one("SELECT * FROM _00_schema_state ORDER BY id") == state
    assert set(first.meta.values()) == {"created"}
    assert first.synced == {"post": "updated", "user": "updated"}
    assert set(second.meta.values()) == {"unchanged"}
    assert set(second.synced.values()) == {"unchanged"}
    assert second.updated_state == [] and second.removed_state == []


async def test_meta_tables_are_created_with_their_permissions(db: Database,
                                                              env: dict[str, str]) -> None:
    await apply_schema(db, settings_for(env))
    defs = await db.table_definitions()
    for name in ("_00_query", "_00_version", "_00_list_ref", "_00_schema_state",
                 "_00_query_allowlist", "_00_admin"):
        assert name in defs
    assert "TYPE RELATION" in defs["_00_list_ref"]
    assert "FOR select WHERE auth_id = $auth.id" in defs["_00_list_ref"]
    for name in ("_00_version", "_00_schema_state", "_00_query_allowlist", "_00_admin"):
        assert defs[name].endswith("PERMISSIONS NONE"), defs[name]
    for name in ("_00_query", "_00_version", "_00_list_ref"):
        assert "CHANGEFEED 1h INCLUDE ORIGINAL" in defs[name]
    # The shared edge table is indexed on `in` (a view's prior edges are found by it).
    info = (await db.query("INFO FOR TABLE _00_list_ref"))[0]
    assert "_00_list_ref_in" in info["indexes"], info["indexes"]
    plan = (await db.query("SELECT * FROM _00_list_ref WHERE in = _00_query:x EXPLAIN"))[0]
    assert "_00_list_ref_in" in str(plan), plan


async def test_existing_table_definitions_survive(db: Database, env: dict[str, str]) -> None:
    await db.query(APP_SCHEMA)
    before_def = (await db.table_definitions())["post"]
    before = await db.table_info("post")
    await apply_schema(db, settings_for(env))
    after_def = (await db.table_definitions())["post"]
    after = await db.table_info("post")
    assert after_def == before_def.replace(
        "COMMENT 'blog posts'", "COMMENT 'blog posts' CHANGEFEED 1h INCLUDE ORIGINAL")
    for section in ("fields", "indexes", "events"):
        for name, text in before[section].items():
            assert after[section][name] == text
    assert set(after["fields"]) == set(before["fields"]) | {"_00_rv"}
    assert set(after["events"]) == set(before["events"]) | {"_00_post_version",
                                                            "_00_post_version_gone"}


async def test_nosync_and_view_tables_are_left_alone(db: Database, env: dict[str, str]) -> None:
    await db.query(APP_SCHEMA)
    report = await apply_schema(db, settings_for(env))
    assert "audit" in report.skipped and "post_count" in report.skipped
    assert "audit" not in report.synced and "post_count" not in report.synced
    defs = await db.table_definitions()
    assert "CHANGEFEED" not in defs["audit"]
    assert "_00_rv" not in (await db.table_info("audit"))["fields"]


async def test_writes_bump_rv_and_version_and_show_in_the_changefeed(
    db: Database, env: dict[str, str]
) -> None:
    await db.query(APP_SCHEMA)
    await apply_schema(db, settings_for(env))
    start = await current_stamp(db)
    await db.query("CREATE user:alice SET name = 'alice'")
    await db.query("CREATE post:p1 SET title = 't0', author = user:alice")
    n_updates = 4
    for i in range(n_updates):
        # A client cannot set _00_rv: the engine computes it.
        await db.query("UPDATE post:p1 SET title = $t, _00_rv = 1000", {"t": f"t{i + 1}"})
    row = await db.query_one("SELECT * FROM ONLY post:p1")
    assert row["_00_rv"] == n_updates + 1
    version = await db.query_one("SELECT * FROM ONLY type::record('_00_version', ['post', 'p1'])")
    assert version["rv"] == n_updates + 1 and version["deleted"] is False

    post_feed = await db.changes("post", start, 100)
    rvs = [c.get("current", c.get("update"))["_00_rv"] for s in post_feed for c in s["changes"]]
    assert rvs == list(range(1, n_updates + 2))
    version_feed = await db.changes("_00_version", start, 100)
    version_rvs = [c.get("current", c.get("update"))["rv"] for s in version_feed
                   for c in s["changes"] if c.get("current", c.get("update"))["id"]
                   == RecordID("_00_version", ["post", "p1"])]
    assert version_rvs == rvs

    await db.query("DELETE post:p1")
    version = await db.query_one("SELECT * FROM ONLY type::record('_00_version', ['post', 'p1'])")
    assert version == {"id": RecordID("_00_version", ["post", "p1"]),
                       "rv": n_updates + 2, "deleted": True}
    last = (await db.changes("post", start, 100))[-1]["changes"][0]
    assert last["delete"]["original"]["_00_rv"] == n_updates + 1


async def current_stamp(db: Database) -> int:
    """A versionstamp at or before any write that happens after this call."""
    await db.query("DEFINE TABLE IF NOT EXISTS _stamp CHANGEFEED 1h; UPSERT _stamp:x SET n = 1")
    feed = await db.changes("_stamp", 0, 1000)
    return int(feed[-1]["versionstamp"])


async def test_schema_state_tracks_fingerprints(db: Database, env: dict[str, str]) -> None:
    await db.query(APP_SCHEMA)
    report = await apply_schema(db, settings_for(env))
    rows = {r["id"].id: r for r in await db.query_one("SELECT * FROM _00_schema_state")}
    assert set(rows) == {"post", "user"}
    assert rows["post"]["fingerprint"] == report.fingerprints["post"]
    assert rows["post"]["transport"] == "changefeed"

    await db.query("DEFINE FIELD body ON post TYPE option<string>; "
                   "ALTER TABLE user COMMENT 'now @nosync'")
    report2 = await apply_schema(db, settings_for(env))
    assert report2.synced == {"post": "unchanged"}  # apply itself changed nothing on post
    assert report2.updated_state == ["post"]
    assert report2.removed_state == ["user"]
    rows2 = {r["id"].id: r for r in await db.query_one("SELECT * FROM _00_schema_state")}
    assert set(rows2) == {"post"}
    assert rows2["post"]["fingerprint"] != rows["post"]["fingerprint"]


async def test_record_users_see_only_their_own_list_ref_edges_and_no_meta(
    db: Database, env: dict[str, str], shared_db_host: DbHost
) -> None:
    await db.query(APP_SCHEMA)
    await apply_schema(db, settings_for(env))
    client = AsyncSurreal(shared_db_host.ws_url)
    await client.connect()
    try:
        await client.use(env["SVC_DB_NS"], env["SVC_DB_NAME"])
        await client.signup({"namespace": env["SVC_DB_NS"], "database": env["SVC_DB_NAME"],
                             "access": "account", "variables": {"name": "bob"}})
        me = await client.query("RETURN $auth.id")
        assert isinstance(me, RecordID)
        await db.transaction([
            ("RELATE $v->_00_list_ref->$row SET auth_id = $me",
             {"v": RecordID("_00_query", "v1"), "row": RecordID("post", "x"), "me": me}),
            ("RELATE $v->_00_list_ref->$row SET auth_id = $other",
             {"v": RecordID("_00_query", "v2"), "row": RecordID("post", "y"),
              "other": RecordID("user", "someone_else")}),
            ("CREATE _00_query:v1 SET auth_id = $me, surql = 'SELECT * FROM post'", {"me": me}),
            ("CREATE _00_query:v2 SET auth_id = $o", {"o": RecordID("user", "someone_else")}),
        ])
        mine = await client.query("SELECT out, auth_id FROM _00_list_ref")
        assert mine == [{"out": RecordID("post", "x"), "auth_id": me}]
        queries = await client.query("SELECT VALUE id FROM _00_query")
        assert queries == [RecordID("_00_query", "v1")]
        for meta in ("_00_version", "_00_schema_state", "_00_admin", "_00_query_allowlist"):
            assert await client.query(f"SELECT * FROM {meta}") == []
        # Record users cannot write edges.
        await client.query("RELATE _00_query:v1->_00_list_ref->post:z SET auth_id = $auth.id")
        assert len(await db.query_one("SELECT * FROM _00_list_ref")) == 2

        # A client refreshes lastActiveAt on its own view row, and nothing else (never to a
        # date in the future: test_security).
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        await client.query("UPDATE _00_query:v1 SET lastActiveAt = $t, surql = 'x', "
                           "auth_id = user:someone_else", {"t": now})
        await client.query("UPDATE _00_query:v2 SET lastActiveAt = $t", {"t": now})
        rows = {r["id"].id: r for r in await db.query_one("SELECT * FROM _00_query")}
        assert rows["v1"]["lastActiveAt"] == now
        assert rows["v1"]["surql"] == "SELECT * FROM post" and rows["v1"]["auth_id"] == me
        assert "lastActiveAt" not in rows["v2"]
        await client.query("DELETE _00_query:v2; DELETE _00_query:v1")
        assert [r["id"].id for r in await db.query_one("SELECT id FROM _00_query")] == ["v2"]

        # A record user creates its own view row (a registration request): `auth_id` is its
        # own whatever it sends, and the service's fields stay unset.
        await client.query("CREATE _00_query:v3 SET surql = 'SELECT * FROM post', ttl = '1m', "
                           "params = {}, clientId = 'c', lastActiveAt = time::now(), "
                           "auth_id = user:someone_else, state = 'ready', rowCount = 3, "
                           "subscribers = 9, error = {error: 'x'}")
        v3 = await db.query_one("SELECT * FROM ONLY _00_query:v3")
        assert v3["auth_id"] == me and v3["surql"] == "SELECT * FROM post"
        assert all(k not in v3 for k in ("state", "rowCount", "subscribers", "error")), v3
        # ...and never changes what it asked for afterwards (the service registered that).
        await client.query("UPDATE _00_query:v3 SET surql = 'SELECT * FROM user', ttl = '9h'")
        v3 = await db.query_one("SELECT * FROM ONLY _00_query:v3")
        assert v3["surql"] == "SELECT * FROM post" and v3["ttl"] == "1m"
        # A system user (the service) writes `auth_id` as given.
        await db.query("UPSERT _00_query:v4 SET auth_id = user:someone_else")
        assert (await db.query_one("SELECT VALUE auth_id FROM ONLY _00_query:v4")) == \
            RecordID("user", "someone_else")
        await db.query("DELETE _00_query:v3; DELETE _00_query:v4")

        # A record user's write bumps _00_rv and _00_version (events run as the schema owner).
        for title in ("a", "b", "c"):
            await client.query("UPSERT post:mine SET title = $t, author = $auth.id", {"t": title})
        assert (await db.query_one("SELECT VALUE _00_rv FROM ONLY post:mine")) == 3
        assert (await db.query_one(
            "SELECT VALUE rv FROM ONLY type::record('_00_version', ['post', 'mine'])")) == 3
    finally:
        await client.close()


async def test_http_hook_definitions_are_accepted_by_the_engine(db: Database) -> None:
    # The host cannot *run* http::post, but the definitions must parse and be storable.
    await db.query("DEFINE TABLE post; DEFINE TABLE _00_query")
    for sql in synced_table_sql("post", "http", "1h", None) + [query_cleanup_sql("http")]:
        await db.query(sql)
    events = (await db.table_info("post"))["events"]
    assert set(events) == {"_00_post_mutation", "_00_post_delete"}
    assert "http::post($_00_ingest_url" in events["_00_post_mutation"]


async def test_http_transport_on_a_database_without_http_functions_fails_clearly(
    db: Database, env: dict[str, str]
) -> None:
    from svccli.schema import HttpTransportUnsupported

    with pytest.raises(HttpTransportUnsupported, match="--transport changefeed"):
        await apply_schema(db, settings_for(env, "http",
                                            ingest_url="http://127.0.0.1:9/ingest"))
    assert [t for t in await db.tables() if t.startswith("_00_")] == []


def run_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "svccli", *args],
        check=False,
        env=base_env(PYTHONPATH=str(ROOT), **env),
        cwd=str(cwd), capture_output=True, text=True, timeout=120,
    )


async def test_cli_subprocess_applies_with_transport_from_the_project_file(
    shared_db_host: DbHost, tmp_path: Path
) -> None:
    env = env_for(shared_db_host, SVC_AUTH_SECRET="bearer-secret-123")
    (tmp_path / "project.yml").write_text("apps: {}\nsync:\n  transport: changefeed\n")
    r = run_cli(["schema", "apply"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "transport: changefeed" in r.stdout
    assert "project file" in r.stdout
    assert "meta   _00_query: created" in r.stdout
    r2 = run_cli(["schema", "apply"], env, tmp_path)
    assert r2.returncode == 0, r2.stderr
    assert "0 object(s) created or updated" in r2.stdout
    for out in (r.stdout + r.stderr, r2.stdout + r2.stderr):
        assert shared_db_host.password not in out
        assert "bearer-secret-123" not in out


async def test_cli_http_on_the_host_exits_nonzero_without_leaking_secrets(
    shared_db_host: DbHost, tmp_path: Path
) -> None:
    env = env_for(shared_db_host, SVC_AUTH_SECRET="bearer-secret-123",
                  SVC_INGEST_URL="http://127.0.0.1:9/ingest")
    r = run_cli(["schema", "apply"], env, tmp_path)  # default transport: http
    assert r.returncode == 2
    assert "Remote HTTP request functions are not enabled" in r.stderr
    assert "bearer-secret-123" not in r.stdout + r.stderr


async def test_cli_exit_codes_for_configuration_and_database_errors(
    shared_db_host: DbHost, tmp_path: Path
) -> None:
    good = env_for(shared_db_host)
    no_url = {k: v for k, v in good.items() if k != "SVC_DB_URL"}
    r = run_cli(["schema", "apply", "--transport", "changefeed"], no_url, tmp_path)
    assert r.returncode == 2 and "SVC_DB_URL" in r.stderr

    r = run_cli(["schema", "apply"], {**good, "SVC_INGEST_TRANSPORT": "carrier-pigeon"}, tmp_path)
    assert r.returncode == 2 and "carrier-pigeon" in r.stderr

    r = run_cli(["schema", "apply", "--transport", "http"], good, tmp_path)
    assert r.returncode == 2 and "SVC_INGEST_URL" in r.stderr

    bad_pass = {**good, "SVC_DB_PASS": "not-the-password-77"}
    r = run_cli(["schema", "apply", "--transport", "changefeed"], bad_pass, tmp_path)
    assert r.returncode == 1
    assert "database error" in r.stderr and "not-the-password-77" not in r.stderr


async def test_changing_the_retention_updates_every_feed_and_nothing_else(
    db: Database, env: dict[str, str]
) -> None:
    await db.query(APP_SCHEMA)
    await apply_schema(db, settings_for(env))
    before = await info_snapshot(db)
    report = await apply_schema(db, settings_for({**env, "SVC_CHANGEFEED_RETENTION": "2h"}))
    after = await info_snapshot(db)
    assert report.synced == {"post": "updated", "user": "updated"}
    assert report.meta["_00_query"] == "updated" and report.meta["_00_admin"] == "unchanged"
    for name, text in before["db"]["tables"].items():
        expected = text.replace("CHANGEFEED 1h", "CHANGEFEED 2h")
        assert after["db"]["tables"][name] == expected
    for name in before:
        if name != "db":
            assert after[name] == before[name]


async def test_a_feed_added_by_someone_else_on_a_meta_table_is_kept(
    db: Database, env: dict[str, str]
) -> None:
    await apply_schema(db, settings_for(env))
    # e.g. the embedded host adds a feed to a table it serves LIVE on.
    await db.query("ALTER TABLE _00_admin CHANGEFEED 3h INCLUDE ORIGINAL")
    report = await apply_schema(db, settings_for(env))
    assert report.meta["_00_admin"] == "unchanged"
    assert "CHANGEFEED 3h INCLUDE ORIGINAL" in (await db.table_definitions())["_00_admin"]


def _outbox_project(tmp: Path, schema: str) -> Path:
    (tmp / "api").mkdir(exist_ok=True)
    (tmp / "api" / "openapi.yml").write_text("openapi: 3.0.3\n")
    (tmp / "api" / "jobs.surql").write_text(schema)
    (tmp / "api" / "project.yml").write_text(
        "type: backend\nspec: openapi.yml\nmethod: {type: outbox, schema: jobs.surql, "
        "table: mail_job}\n")
    (tmp / "project.yml").write_text("apps: {api: {path: api}}\nsync: {transport: changefeed}\n")
    return tmp / "project.yml"


OUTBOX = """
-- the outbox of app api; an event keeps an audit trail
DEFINE TABLE mail_job SCHEMALESS;
DEFINE FIELD status ON mail_job TYPE string DEFAULT 'pending';
DEFINE INDEX mail_job_status ON mail_job FIELDS status;
DEFINE TABLE mail_audit SCHEMALESS COMMENT '@nosync';
DEFINE EVENT audit ON mail_job WHEN $event = 'CREATE' THEN {
    CREATE mail_audit SET job = $after.id; -- a statement inside the block
};
"""


async def test_cli_applies_each_backends_outbox_schema_idempotently(
    shared_db_host: DbHost, tmp_path: Path, db: Database, env: dict[str, str]
) -> None:
    project = _outbox_project(tmp_path, OUTBOX)
    env = {**env, "SVC_PROJECT_FILE": str(project)}
    r = run_cli(["schema", "apply"], env, tmp_path / "api")
    assert r.returncode == 0, r.stderr
    assert ("outbox api: api/jobs.surql (5 definitions): mail_job created, mail_audit created"
            in r.stdout)
    # applied before the sync hooks: the outbox table is synced in the same run, and its
    # changefeed (transport from the project file) is there
    assert "synced mail_job: created" in r.stdout
    assert "skip   mail_audit: comment has @nosync" in r.stdout
    definitions = await db.table_definitions()
    assert "CHANGEFEED 1h" in definitions["mail_job"]
    info = await db.query_one("INFO FOR TABLE mail_job")
    assert set(info["fields"]) >= {"status", "_00_rv"}
    assert set(info["indexes"]) == {"mail_job_status"}
    assert "audit" in info["events"]
    await db.query("CREATE mail_job:1 SET to = 'a@b'")
    assert [row["job"] for row in await db.query_one("SELECT job FROM mail_audit")] == [
        RecordID("mail_job", 1)]

    r2 = run_cli(["schema", "apply"], env, tmp_path)
    assert r2.returncode == 0, r2.stderr
    assert "mail_job unchanged, mail_audit unchanged" in r2.stdout
    assert "0 object(s) created or updated" in r2.stdout
    assert (await db.table_definitions())["mail_job"] == definitions["mail_job"]

    # a changed field takes effect on the next run; the table is reported updated
    _outbox_project(tmp_path, OUTBOX.replace("DEFAULT 'pending'", "DEFAULT 'queued'"))
    r3 = run_cli(["schema", "apply"], env, tmp_path)
    assert r3.returncode == 0, r3.stderr
    assert "mail_job updated, mail_audit unchanged" in r3.stdout
    info = await db.query_one("INFO FOR TABLE mail_job")
    assert "'queued'" in info["fields"]["status"]


async def test_cli_refuses_an_outbox_schema_with_data_changes_before_writing_anything(
    shared_db_host: DbHost, tmp_path: Path, db: Database, env: dict[str, str]
) -> None:
    project = _outbox_project(tmp_path, "DEFINE TABLE mail_job;\nDELETE mail_job;\n")
    r = run_cli(["schema", "apply"], {**env, "SVC_PROJECT_FILE": str(project)}, tmp_path)
    assert r.returncode == 2
    assert "statement 2: DELETE is not a DEFINE statement" in r.stderr
    assert await db.table_definitions() == {}
