"""svc-db speaks SurrealDB's RPC: the official SDK works unchanged over ws and http."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from surrealdb import AsyncSurreal
from surrealdb.errors import NotAllowedError, NotFoundError, SurrealError

from engine.gcpolicy import GEN0_THRESHOLD
from tests.support.dbhost_clients import SCHEMA, close, record_user, root_client, unique_db
from tests.support.procs import DbHost


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        assert r.status == 200
        return json.loads(r.read())


def test_health_and_version_report_the_engine(host: DbHost) -> None:
    health = _get_json(f"{host.http_url}/health")
    assert health["status"] == "ok"
    assert health["engine"].startswith("surrealdb-3.")
    assert _get_json(f"{host.http_url}/version")["version"] == health["engine"]


@pytest.mark.parametrize("transport", ["ws", "http"])
async def test_root_signin_use_and_query(host: DbHost, transport: str) -> None:
    ns, db = unique_db()
    url = host.ws_url if transport == "ws" else host.http_url
    client = await root_client(host, ns, db, url)
    try:
        await client.query("CREATE item:1 SET v = 41")
        await client.query("UPDATE item:1 SET v += 1")
        assert await client.query("SELECT VALUE v FROM item") == [42]
        assert (await client.version()).startswith("surrealdb-3.")
    finally:
        await close(client)


@pytest.mark.parametrize("transport", ["ws", "http"])
async def test_wrong_password_is_refused(host: DbHost, transport: str) -> None:
    client = AsyncSurreal(host.ws_url if transport == "ws" else host.http_url)
    try:
        with pytest.raises(Exception) as info:
            await client.signin({"username": host.user, "password": "not-the-password"})
        assert "not-the-password" not in str(info.value)
    finally:
        await close(client)


async def test_unauthenticated_connection_cannot_query(host: DbHost) -> None:
    ns, db = unique_db()
    client = AsyncSurreal(host.ws_url)
    try:
        await client.use(ns, db)
        with pytest.raises(Exception, match="(?i)not allowed|permission"):
            await client.query("CREATE item:1")
    finally:
        await close(client)


@pytest.mark.parametrize("transport", ["ws", "http"])
async def test_record_user_sees_only_rows_its_permissions_allow(host: DbHost,
                                                                transport: str) -> None:
    ns, db = unique_db()
    url = host.ws_url if transport == "ws" else host.http_url
    root = await root_client(host, ns, db)
    try:
        await root.query(SCHEMA)
        alice = await record_user(host, ns, db, "alice", url=url)
        bob = await record_user(host, ns, db, "bob", url=url)
        # A second sign-in (not sign-up) works too.
        alice2 = await record_user(host, ns, db, "alice", signup=False, url=url)
        try:
            [alice_id] = await root.query("SELECT VALUE id FROM user WHERE name = 'alice'")
            [bob_id] = await root.query("SELECT VALUE id FROM user WHERE name = 'bob'")
            await root.query("CREATE post SET owner = $o, title = 'a1'", {"o": alice_id})
            await root.query("CREATE post SET owner = $o, title = 'a2'", {"o": alice_id})
            await root.query("CREATE post SET owner = $o, title = 'b1'", {"o": bob_id})
            assert sorted(await alice.query("SELECT VALUE title FROM post")) == ["a1", "a2"]
            assert sorted(await alice2.query("SELECT VALUE title FROM post")) == ["a1", "a2"]
            assert await bob.query("SELECT VALUE title FROM post") == ["b1"]
            assert sorted(await root.query("SELECT VALUE title FROM post")) == ["a1", "a2", "b1"]
        finally:
            await close(alice, bob, alice2)
    finally:
        await root.close()


async def test_sessions_of_two_connections_are_isolated(host: DbHost) -> None:
    ns, db = unique_db()
    root = await root_client(host, ns, db)
    other = await root_client(host, ns, "elsewhere_" + db)
    try:
        await root.query("CREATE item:1")
        # `other` uses another database: the table does not exist there.
        with pytest.raises(NotFoundError):
            await other.query("SELECT * FROM item")
        assert len(await root.query("SELECT * FROM item")) == 1
    finally:
        await root.close()
        await other.close()


async def test_sdk_extra_sessions_on_one_connection(host: DbHost) -> None:
    ns, db = unique_db()
    root = await root_client(host, ns, db)
    try:
        await root.query(SCHEMA)
        session = await root.new_session()  # anonymous until it signs in
        with pytest.raises(NotAllowedError):
            await session.query("CREATE item:1")
        await session.signin({"username": host.user, "password": host.password})
        await session.use(ns, db)
        await session.query("CREATE item:2")
        assert len(await root.query("SELECT * FROM item")) == 1
        await session.close_session()
        with pytest.raises(Exception, match="(?i)session"):
            await session.query("RETURN 1")
        assert await root.query("RETURN 7") == 7
    finally:
        await root.close()


async def test_host_refuses_to_start_without_credentials(tmp_path: Path) -> None:
    import sys

    from tests.support.procs import ManagedProcess, base_env, free_port

    mp = ManagedProcess("svc-db", [sys.executable, "-m", "dbhost", "--bind",
                                   f"127.0.0.1:{free_port()}", "--memory"],
                        base_env(), tmp_path / "nocreds.log").start()
    assert mp.proc is not None
    code = mp.proc.wait(timeout=60)
    assert code != 0
    assert "SVC_DB_USER" in mp.log_text()


async def test_live_over_http_is_refused_clearly(host: DbHost) -> None:
    ns, db = unique_db()
    client = await root_client(host, ns, db, host.http_url)
    with pytest.raises(SurrealError, match="WebSocket"):
        await client.query("LIVE SELECT * FROM item")
    assert await client.query("RETURN 2") == 2


def test_an_http_rpc_the_engine_cannot_decode_gets_an_error_frame(host: DbHost) -> None:
    # An integer beyond 64 bits (a CBOR bignum): the engine refuses to decode the request.
    # Over HTTP that is an error reply like over ws, never a 500.
    from surrealdb.data.cbor import decode, encode

    frame = encode({"id": "h1", "method": "query", "params": ["RETURN $a", {"a": 2**70}]})
    req = urllib.request.Request(f"{host.http_url}/rpc", data=frame, method="POST",
                                 headers={"Content-Type": "application/cbor",
                                          "Accept": "application/cbor"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200
        reply = decode(r.read())
    assert reply["id"] == "h1" and reply["error"]["code"] == -32602, reply


def _statements(host: DbHost, *, auth: tuple[str, str] | None, query: str = "",
                method: str = "GET", route: str = "/debug/statements") -> tuple[int, dict]:
    import base64
    import urllib.error
    req = urllib.request.Request(f"{host.http_url}{route}{query}", method=method)
    if auth is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(
            f"{auth[0]}:{auth[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def test_debug_statements_counts_engine_time_per_statement_shape(host: DbHost) -> None:
    ns, db = unique_db()
    client = await root_client(host, ns, db)
    root = (host.user, host.password)
    try:
        assert _statements(host, auth=root, method="DELETE")[0] == 200
        for i in range(7):
            await client.query(f"CREATE probe_stats:{i} SET v = {i}, note = 'secret-{i}'")
        await client.query("SELECT * FROM probe_stats WHERE v > $v", {"v": 2})
        await client.query("RETURN string::repeat('x', $n)", {"n": 300_000})
        status, body = _statements(host, auth=root, query="?limit=500")
        assert status == 200, body
        rows = {r["shape"]: r for r in body["statements"]}
        create = rows["query CREATE probe_stats:? SET v = 0, note = '?'"]
        assert create["count"] == 7 and create["total_ms"] > 0
        assert rows["query SELECT * FROM probe_stats WHERE v > $v"]["count"] == 1
        # reply bytes per shape: a large answer costs the host too (it forwards every byte)
        big = rows["query RETURN string::repeat('?', $n)"]["reply_kb_per_s"]
        assert big > 0 and big > 10 * create["reply_kb_per_s"]
        assert "secret" not in json.dumps(body)
    finally:
        await close(client)
    # the root user's credentials only; a bad limit is a 400 that says why
    assert _statements(host, auth=None)[0] == 401
    status, body = _statements(host, auth=(host.user, "wrong"))
    assert status == 401 and "wrong" not in json.dumps(body)
    status, body = _statements(host, auth=root, query="?limit=zero")
    assert status == 400 and "limit" in body["error"]


async def test_debug_memory_reports_the_process_beside_its_python_heap(host: DbHost) -> None:
    """The resident set, the Python heap's blocks and the host's own structures, so an operator
    can tell the engine's growth from the host's; root credentials only."""
    ns, db = unique_db()
    client = await root_client(host, ns, db)
    root = (host.user, host.password)
    try:
        await client.query("CREATE probe_memory:1 SET v = 1")
        status, body = _statements(host, auth=root, route="/debug/memory")
        assert status == 200, body
        assert body["rss_bytes"] > 10_000_000 and body["python_blocks"] > 10_000
        assert body["connections"] >= 1 and body["statement_shapes"] >= 1
        assert {"live_queries", "live_feeds", "gc_counts"} <= set(body)
        # start-up's objects are out of the collector's reach and collections are rare
        # (dbhost.__main__, engine.gcpolicy): the default 700 made GC ~17% of the loop
        assert body["gc_frozen"] > 10_000
        assert body["gc_threshold"][0] == GEN0_THRESHOLD
    finally:
        await close(client)
    assert _statements(host, auth=None, route="/debug/memory")[0] == 401
    status, body = _statements(host, auth=(host.user, "wrong"), route="/debug/memory")
    assert status == 401 and "wrong" not in json.dumps(body)
