"""Helpers for the SSP's integration tests: start `python -m ssp` beside a database host,
talk to its hub over ZeroMQ (the gateway<->hub contract), read edges back. No tests here."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from surrealdb import AsyncSurreal

from dbclient import Database, DbConfig, DbQueryError
from ipc.messages import request
from ipc.rpc import RpcClient, RpcTimeout
from tests.support.dbhost_clients import stream as live_stream  # noqa: F401 - re-exported to the SSP tests
from tests.support.procs import ROOT, DbHost, ManagedProcess, base_env, free_port

APP_SCHEMA = """
DEFINE TABLE user SCHEMAFULL PERMISSIONS FOR select WHERE id = $auth.id;
DEFINE FIELD name ON user TYPE string;
DEFINE FIELD pass ON user TYPE string;
DEFINE ACCESS account ON DATABASE TYPE RECORD
    SIGNUP (CREATE user SET name = $name, pass = crypto::argon2::generate($pass))
    SIGNIN (SELECT * FROM user WHERE name = $name AND crypto::argon2::compare(pass, $pass))
    DURATION FOR SESSION 1h;
DEFINE TABLE post SCHEMAFULL PERMISSIONS FULL;
DEFINE FIELD owner ON post TYPE record<user>;
DEFINE FIELD title ON post TYPE string;
DEFINE FIELD n ON post TYPE int DEFAULT 0;
DEFINE FIELD at ON post TYPE option<datetime>;
"""


def db_env(host: DbHost, ns: str, db: str) -> dict[str, str]:
    """The SVC_DB_* variables for `ns`/`db` on `host`."""
    return {"SVC_DB_URL": host.ws_url, "SVC_DB_USER": host.user,
            "SVC_DB_PASS": host.password, "SVC_DB_NS": ns, "SVC_DB_NAME": db}


def unique_db() -> tuple[str, str]:
    """A namespace/database pair no other test uses."""
    return "ssp", "db_" + uuid.uuid4().hex[:10]


def apply_schema(host: DbHost, ns: str, db: str, transport: str = "changefeed",
                 ingest_url: str | None = None, auth_secret: str | None = None) -> None:
    """Run `svc schema apply` as a real command (transport http: events post to
    `ingest_url`, which needs a host on the Node build, `engine="node"`; with the service's
    `auth_secret` they carry the bearer its `/ingest` then wants)."""
    extra = ["--ingest-url", ingest_url] if ingest_url else []
    env = db_env(host, ns, db)
    if auth_secret:
        env["SVC_AUTH_SECRET"] = auth_secret
    r = subprocess.run([sys.executable, "-m", "svccli", "schema", "apply", "--transport",
                        transport, *extra], env=base_env(**env), cwd=str(ROOT),
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr + r.stdout


@dataclass
class Ssp:
    """A running `python -m ssp` and a client of its hub."""

    process: ManagedProcess
    run_dir: Path
    port: int
    client: RpcClient | None = None

    @property
    def hub_endpoint(self) -> str:
        return f"ipc://{self.run_dir}/hub.sock"

    async def call(self, route: str, body: Any = None, *, params: dict[str, str] | None = None,
                   query: dict[str, str] | None = None, timeout: float = 30.0) -> dict[str, Any]:
        """One contract request to the hub; the reply {status, body}."""
        if self.client is None:
            self.client = RpcClient(self.hub_endpoint)
        return dict(await self.client.call(request(route, body, params=params, query=query,
                                                   timeout_secs=timeout), timeout=timeout))

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until GET /health answers 200 (fails with the process log otherwise)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            if not self.process.alive():
                raise AssertionError("ssp exited:\n" + self.process.log_text()[-4000:])
            try:
                r = await self.call("GET /health", timeout=2.0)
                if r["status"] == 200:
                    return
            except RpcTimeout:
                self.close_client()
            await asyncio.sleep(0.1)
        raise AssertionError("ssp not ready:\n" + self.process.log_text()[-4000:])

    def close_client(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    def stop(self) -> int | None:
        self.close_client()
        return self.process.stop(timeout=40)


def start_ssp(tmp: Path, host: DbHost, ns: str, db: str, root: Path | None = None,
              **extra: str) -> Ssp:
    """Start `python -m ssp` (changefeed transport, one shard unless overridden), from this
    checkout or from ``root``. A test of what two shards do asks for them
    (`SVC_SSP_SHARDS="2"`): each shard is a process of its own, started with every SSP."""
    port = free_port()
    run_dir = tmp / f"ssp-run-{uuid.uuid4().hex[:6]}"
    env = base_env(**db_env(host, ns, db), SVC_SSP_LISTEN_ADDR=f"127.0.0.1:{port}",
                   SVC_SSP_RUN_DIR=str(run_dir), SVC_SSP_SHARDS="1",
                   SVC_INGEST_TRANSPORT="changefeed", SVC_SSP_QUERY_UPDATE_THROTTLE_MS="20",
                   SVC_SCHEMA_POLL_SECS="1")
    env.update(extra)
    mp = ManagedProcess("svc-ssp", [sys.executable, "-m", "ssp"], env,
                        tmp / f"svc-ssp-{port}.log", cwd=root).start()
    return Ssp(mp, run_dir, port)


@contextlib.contextmanager
def module_ssp(host: DbHost, tmp: Path, schema: str = "", *, transport: str = "changefeed",
               after_schema: Callable[[Database], Awaitable[None]] | None = None,
               **env: str) -> Iterator[tuple[str, str, Ssp]]:
    """One database of its own (the app's `schema`, then `svc schema apply` with
    `transport`, then `after_schema` with a root connection) and one SSP on it, ready, for a
    module's tests (a module-scoped fixture: starting them was most of each test's time).
    The SSP's hub client is closed before it is handed over (its socket belongs to this
    set-up's loop; each test opens its own), and the SSP must stop cleanly at the end."""
    ns, db = unique_db()

    async def prepare(after: bool) -> None:
        root = await root_db(host, ns, db)
        try:
            if not after and schema:
                await root.query(schema)
            if after and after_schema is not None:
                await after_schema(root)
        finally:
            await root.close()

    asyncio.run(prepare(False))
    apply_schema(host, ns, db, transport)
    asyncio.run(prepare(True))
    ssp = start_ssp(tmp, host, ns, db, **env)
    try:
        async def ready() -> None:
            await ssp.wait_ready()
            ssp.close_client()

        asyncio.run(ready())
        yield ns, db, ssp
    finally:
        code = ssp.stop()
        assert code == 0, ssp.process.log_text()[-3000:]


async def root_db(host: DbHost, ns: str, db: str) -> Database:
    """The project's database client signed in as root."""
    d = Database(DbConfig.from_env(db_env(host, ns, db)))
    await d.connect()
    return d


async def app_write(root: Database, sql: str, vars: dict[str, Any] | None = None,
                    attempts: int = 8) -> list[Any]:
    """A write as an application makes it: retried when SurrealDB reports a retryable write
    conflict. Deleting a record also deletes the edges pointing at it, so an application's
    DELETE can collide with the SSP's transaction writing one of those edges."""
    for i in range(attempts):
        try:
            return await root.query(sql, vars)
        except DbQueryError as e:
            if "can be retried" not in str(e) or i == attempts - 1:
                raise
            await asyncio.sleep(0.01 * (i + 1))
    raise AssertionError("unreachable")


async def record_user(host: DbHost, ns: str, db: str, name: str) -> Any:
    """An SDK client signed up as record user `name` through the `account` access."""
    client = AsyncSurreal(host.ws_url)
    await client.signup({"namespace": ns, "database": db, "access": "account",
                         "variables": {"name": name, "pass": f"{name}-secret"}})
    await client.use(ns, db)
    return client


async def wait_for(pred: Any, timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll the async predicate until it returns a truthy value (timeout only stops a hang)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = None
    while loop.time() < deadline:
        last = await pred()
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} not reached; last value {last!r}")


async def edges(db: Database, table: str, view_key: str, *,
                missing_ok: bool = False) -> set[str]:
    """Record-id texts of the `out` of every edge of view `_00_query:<view_key>` in `table`
    (the members: retired edges, mode `dedicated`, excluded). `missing_ok`: a table not
    defined (yet: a user's edge table comes with its first view) holds no edge."""
    from surrealdb import RecordID

    from engine.values import record_id_text

    try:
        rows = await db.query_one(f"SELECT out FROM {table} WHERE in = $q AND !removed",
                                  {"q": RecordID("_00_query", view_key)})
    except DbQueryError as e:
        if missing_ok and "does not exist" in str(e):
            return set()
        raise
    return {record_id_text(r["out"]) for r in rows or []}


class Stack:
    """A database (ns/db) with the app schema applied, a running SSP and a root client."""

    def __init__(self, host: DbHost, ns: str, db: str, ssp: Ssp, root: Database) -> None:
        self.host, self.ns, self.dbname, self.ssp, self.root = host, ns, db, ssp, root


@contextlib.asynccontextmanager
async def open_stack(host: DbHost, tmp: Path, *, before_start: Any = None,
                     **env: str) -> AsyncIterator[Stack]:
    """Schema + SSP (changefeed unless `env` says otherwise); stops it and checks exit 0."""
    ns, db = unique_db()
    root = await root_db(host, ns, db)
    await root.query(APP_SCHEMA)
    apply_schema(host, ns, db)
    if before_start is not None:
        await before_start(root)
    stack = Stack(host, ns, db, start_ssp(tmp, host, ns, db, **env), root)
    try:
        await stack.ssp.wait_ready()
        yield stack
    finally:
        # The test may have replaced the SSP (a restart): stop the one running now.
        code = stack.ssp.stop()
        await root.close()
        assert code == 0, stack.ssp.process.log_text()[-3000:]


def view_body(key: str, surql: str, auth: str | None = "user:alice", **extra: Any
              ) -> dict[str, Any]:
    """A `/view/register` body for view `query:<key>` of identity `auth`."""
    params = {"auth_id": auth} if auth is not None else {}
    return {"id": f"query:{key}", "surql": surql, "clientId": "c1", "ttl": "10m",
            "params": params, **extra}
