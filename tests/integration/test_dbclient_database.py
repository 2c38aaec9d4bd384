"""The database client against the real database host: queries, transactions, paging,
changefeeds, timeouts, auth and reconnects."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from surrealdb import RecordID

from dbclient import (
    Database,
    DbAuthError,
    DbConfig,
    DbConnectionError,
    DbQueryError,
    DbTimeout,
)
from tests.support.procs import DbHost, free_port, start_db_host

_names = itertools.count()


def config_for(host: DbHost, *, password: str | None = None, timeout: float = 10.0,
               url: str | None = None) -> DbConfig:
    """A DbConfig on a fresh namespace/database of `host` (tests share one host)."""
    n = next(_names)
    return DbConfig.from_env({
        "SVC_DB_URL": url or host.ws_url,
        "SVC_DB_USER": host.user,
        "SVC_DB_PASS": host.password if password is None else password,
        "SVC_DB_NS": f"ns{n}",
        "SVC_DB_NAME": f"db{n}",
        "SVC_SSP_DB_TIMEOUT_SECS": str(timeout),
    })


@pytest.fixture
async def db(shared_db_host: DbHost) -> AsyncIterator[Database]:
    database = Database(config_for(shared_db_host))
    await database.connect()
    try:
        yield database
    finally:
        await database.close()


async def test_query_returns_each_statement_result_with_bound_values(db: Database) -> None:
    results = await db.query("CREATE item:1 SET n = $n, tag = $tag; SELECT * FROM item",
                             {"n": 7, "tag": "x'; REMOVE TABLE item; --"})
    assert len(results) == 2
    assert results[1] == [{"id": RecordID("item", 1), "n": 7, "tag": "x'; REMOVE TABLE item; --"}]
    assert await db.query_one("SELECT VALUE n FROM item; RETURN 42") == 42


async def test_failing_statement_raises_with_its_index_and_engine_message(db: Database) -> None:
    with pytest.raises(DbQueryError) as e:
        await db.query("RETURN 1; SELECT * FROM missing_table; RETURN 3")
    assert e.value.statement_index == 1
    assert "missing_table" in e.value.engine_message


async def test_parse_error_is_a_query_error_without_statement_index(db: Database) -> None:
    with pytest.raises(DbQueryError) as e:
        await db.query("SELEC nonsense")
    assert e.value.statement_index is None
    assert "Parse error" in e.value.engine_message


async def test_transaction_binds_colliding_parameter_names_per_statement(db: Database) -> None:
    results = await db.transaction([
        ("CREATE $id SET n = $n", {"id": RecordID("acct", "a"), "n": 1}),
        ("CREATE $id SET n = $n", {"id": RecordID("acct", "b"), "n": 2}),
        ("SELECT VALUE n FROM acct ORDER BY n", None),
    ])
    assert results[2] == [1, 2]
    rows = await db.query_one("SELECT id, n FROM acct ORDER BY id")
    assert rows == [{"id": RecordID("acct", "a"), "n": 1}, {"id": RecordID("acct", "b"), "n": 2}]


async def test_a_failing_statement_rolls_back_the_whole_transaction(db: Database) -> None:
    await db.query("CREATE acct:keep SET n = 0")
    with pytest.raises(DbQueryError) as e:
        await db.transaction([
            ("UPDATE acct:keep SET n = $n", {"n": 99}),
            ("CREATE acct:new SET n = 1", None),
            ("CREATE acct:keep SET n = 2", None),  # already exists: fails
            ("CREATE acct:after SET n = 3", None),
        ])
    assert e.value.statement_index == 2
    assert "already exists" in e.value.engine_message
    rows = await db.query_one("SELECT id, n FROM acct")
    assert rows == [{"id": RecordID("acct", "keep"), "n": 0}]


async def test_thrown_error_in_a_transaction_names_its_statement(db: Database) -> None:
    with pytest.raises(DbQueryError) as e:
        await db.transaction([("CREATE t1:a", None), ("THROW $m", {"m": "nope"})])
    assert e.value.statement_index == 1
    assert "nope" in e.value.engine_message
    with pytest.raises(DbQueryError):
        await db.query("SELECT * FROM t1")  # the table was never created


async def test_keyset_pages_return_every_row_exactly_once_with_mixed_id_types(
    db: Database,
) -> None:
    ids: list[object] = []
    ids += list(range(-300, 700))  # ints, negative included
    ids += [f"s{i:04d}" for i in range(700)]  # strings
    ids += [[i % 7, f"k{i}"] for i in range(400)]  # arrays
    ids += [{"a": i} for i in range(200)]  # objects
    ids += [uuid.UUID(int=i * 7919 + 1) for i in range(200)]  # uuids
    assert len(ids) == 2500
    for start in range(0, len(ids), 1000):  # batches of 1,000 (see architecture notes)
        batch = [{"id": RecordID("mixed", k), "n": i}
                 for i, k in enumerate(ids[start:start + 1000], start)]
        await db.query("INSERT INTO mixed $rows", {"rows": batch})

    pages = [page async for page in db.keyset_pages("mixed", 300)]
    seen = [row["n"] for page in pages for row in page]
    assert len(seen) == 2500
    assert sorted(seen) == list(range(2500))
    assert all(len(p) == 300 for p in pages[:-1])
    assert len(pages) == 9


async def test_keyset_pages_of_an_empty_table_yield_nothing(db: Database) -> None:
    await db.query("DEFINE TABLE empty_t")
    assert [p async for p in db.keyset_pages("empty_t", 10)] == []


async def test_keyset_pages_refuse_bad_table_names(db: Database) -> None:
    with pytest.raises(ValueError):
        [p async for p in db.keyset_pages("x; REMOVE TABLE y", 10)]


async def test_tables_and_table_info(db: Database) -> None:
    await db.query("DEFINE TABLE person SCHEMAFULL PERMISSIONS FOR select WHERE true; "
                   "DEFINE FIELD name ON person TYPE string; DEFINE TABLE zeta; "
                   "DEFINE TABLE _00_meta")
    assert await db.tables() == ["_00_meta", "person", "zeta"]
    definitions = await db.table_definitions()
    assert definitions["person"].startswith("DEFINE TABLE person")
    assert "SCHEMAFULL" in definitions["person"]
    info = await db.table_info("person")
    assert "DEFINE FIELD name ON person TYPE string" in info["fields"]["name"]
    with pytest.raises(ValueError):
        await db.table_info("person; REMOVE TABLE person")


async def test_changes_tails_the_changefeed_from_an_integer_versionstamp(db: Database) -> None:
    await db.query("DEFINE TABLE feed CHANGEFEED 1h INCLUDE ORIGINAL")
    await db.query("CREATE feed:1 SET v = 1")
    await db.query("UPDATE feed:1 SET v = 2")
    await db.query("DELETE feed:1")
    sets = await db.changes("feed", 0, 100)
    # With INCLUDE ORIGINAL a create is {update}, an update {current, update: patch}.
    kinds = [sorted(change) for s in sets for change in s["changes"]]
    assert kinds[-3:] == [["update"], ["current", "update"], ["delete"]]
    stamps = [s["versionstamp"] for s in sets]
    assert stamps == sorted(stamps)
    # SINCE is inclusive: starting at the last stamp returns exactly the last set.
    tail = await db.changes("feed", stamps[-1], 100)
    assert [s["versionstamp"] for s in tail] == [stamps[-1]]
    assert tail[0]["changes"][0]["delete"]["original"]["v"] == 2
    limited = await db.changes("feed", 0, 1)
    assert len(limited) == 1
    with pytest.raises(ValueError):
        await db.changes("feed", "0", 1)  # type: ignore[arg-type]


async def test_slow_calls_time_out_and_the_count_resets_on_success(
    shared_db_host: DbHost,
) -> None:
    db = Database(config_for(shared_db_host, timeout=0.5))
    await db.connect()
    try:
        for expected in (1, 2):
            with pytest.raises(DbTimeout):
                await db.query("SLEEP 2s")
            assert db.consecutive_timeouts == expected
        assert await db.query_one("RETURN 5") == 5
        assert db.consecutive_timeouts == 0
    finally:
        await db.close()


async def test_wrong_password_is_an_auth_error_that_does_not_echo_it(
    shared_db_host: DbHost,
) -> None:
    db = Database(config_for(shared_db_host, password="wrong-pass-4711"))
    with pytest.raises(DbAuthError) as e:
        await db.connect()
    assert "wrong-pass-4711" not in str(e.value)
    await db.close()


async def test_nothing_listening_is_a_connection_error_after_the_timeout() -> None:
    port = free_port()
    cfg = DbConfig.from_env({"SVC_DB_URL": f"127.0.0.1:{port}", "SVC_DB_PASS": "x",
                             "SVC_SSP_DB_TIMEOUT_SECS": "0.5"})
    db = Database(cfg)
    with pytest.raises(DbConnectionError, match=str(port)):
        await db.query("RETURN 1")
    await db.close()


async def test_a_sign_in_slower_than_the_call_timeout_still_connects(tmp_path: Path) -> None:
    """A connection attempt is given CONNECT_FLOOR_SECS however short the per-call timeout:
    on a loaded machine the server's sign-in (argon2) alone can outlast a 0.3 s timeout, and
    an SSP configured so would never connect (each abandoned attempt costing the server the
    same work again)."""
    host = start_db_host(tmp_path, memory=True)
    pid = host.process.proc.pid  # type: ignore[union-attr]
    db = Database(config_for(host, timeout=0.3))
    try:
        os.kill(pid, signal.SIGSTOP)  # the socket is accepted, nothing answers for 1 s
        try:
            call = asyncio.ensure_future(db.query_one("RETURN 5"))
            await asyncio.sleep(1.0)
            assert not call.done()
        finally:
            os.kill(pid, signal.SIGCONT)
        assert await call == 5
        # once connected, the call timeout is the call's again
        with pytest.raises(DbTimeout):
            await db.query("SLEEP 2s")
    finally:
        await db.close()
        host.process.stop()


async def test_concurrent_calls_share_one_connection(db: Database) -> None:
    results = await asyncio.gather(*(db.query_one("RETURN $i", {"i": i}) for i in range(50)))
    assert results == list(range(50))


async def test_reconnects_transparently_after_the_host_restarts(tmp_path: Path) -> None:
    port = free_port()
    data = tmp_path / "data"
    host = start_db_host(tmp_path, memory=False, path=data, port=port)
    db = Database(config_for(host, timeout=3.0))
    try:
        await db.connect()
        await db.query("CREATE keep:1 SET v = 'before restart'")
        host.process.stop()

        # While the host is down: a clear connection error, not a hang.
        with pytest.raises(DbConnectionError):
            await db.query_one("SELECT * FROM keep", idempotent=True)

        host = start_db_host(tmp_path, memory=False, path=data, port=port)
        rows = await db.query_one("SELECT * FROM keep", idempotent=True)
        assert rows == [{"id": RecordID("keep", 1), "v": "before restart"}]
        assert db.reconnects == 1
        # signin + use were re-applied: writes land in the same namespace/database.
        await db.query("CREATE keep:2")
        assert len(await db.query_one("SELECT * FROM keep")) == 2
    finally:
        await db.close()
        host.process.stop()


async def test_a_read_cut_off_by_a_dropped_connection_is_retried_once(tmp_path: Path) -> None:
    port = free_port()
    data = tmp_path / "data"
    host = start_db_host(tmp_path, memory=False, path=data, port=port)
    db = Database(config_for(host, timeout=20.0))
    try:
        await db.connect()
        await db.query("CREATE keep:1")
        slow_read = asyncio.create_task(
            db.query_one("SLEEP 1s; SELECT VALUE id FROM keep", idempotent=True))
        slow_write = asyncio.create_task(db.query("SLEEP 1s; CREATE keep:2"))
        await asyncio.sleep(0.3)
        host.process.kill9()
        host = start_db_host(tmp_path, memory=False, path=data, port=port)
        assert await slow_read == [RecordID("keep", 1)]
        with pytest.raises(DbConnectionError):
            await slow_write  # writes are never retried: the caller decides
    finally:
        await db.close()
        host.process.stop()


async def test_live_delivers_notifications_to_a_queue_until_killed(db: Database) -> None:
    await db.query("DEFINE TABLE bell CHANGEFEED 1h INCLUDE ORIGINAL")
    inbox: asyncio.Queue[dict[str, object]] = asyncio.Queue()
    sub = await db.live("bell", inbox)
    await db.query("CREATE bell:1 SET n = 1")
    note = await asyncio.wait_for(inbox.get(), 30)  # hang guard, not a timing assertion
    assert note["action"] == "CREATE"
    assert note["result"]["id"] == RecordID("bell", 1)  # type: ignore[index]
    await sub.kill()
    await db.query("CREATE bell:2 SET n = 2")
    await db.query_one("RETURN 1")
    marker = await db.live("bell", inbox)  # a second subscription proves delivery still works
    await db.query("CREATE bell:3")
    note = await asyncio.wait_for(inbox.get(), 30)
    assert note["result"]["id"] == RecordID("bell", 3)  # type: ignore[index]
    await marker.kill()


async def test_live_is_resubscribed_after_a_reconnect(tmp_path: Path) -> None:
    port = free_port()
    data = tmp_path / "data"
    host = start_db_host(tmp_path, memory=False, path=data, port=port)
    db = Database(config_for(host, timeout=5.0))
    seen: list[dict[str, object]] = []
    got = asyncio.Event()

    async def on_note(note: dict[str, object]) -> None:
        seen.append(note)
        got.set()

    try:
        await db.connect()
        await db.query("DEFINE TABLE bell CHANGEFEED 1h INCLUDE ORIGINAL")
        await db.live("bell", on_note)
        host.process.stop()
        host = start_db_host(tmp_path, memory=False, path=data, port=port)
        # The first call reconnects and re-subscribes (a read, so it is retried if it was sent
        # on the old socket before the client noticed the close).
        assert await db.query_one("RETURN 1", idempotent=True) == 1
        await db.query("CREATE bell:after")
        while not any(n.get("action") == "CREATE" for n in seen):
            got.clear()
            await asyncio.wait_for(got.wait(), 30)  # hang guard
        actions = [n["action"] for n in seen]
        assert actions[0] == "RECONNECTED"
        assert seen[-1]["result"]["id"] == RecordID("bell", "after")  # type: ignore[index]
    finally:
        await db.close()
        host.process.stop()


async def test_unencodable_parameters_fail_fast_and_the_connection_stays_usable(
    db: Database,
) -> None:
    with pytest.raises(ValueError, match=r"\$x"):
        await db.query("RETURN $x", {"x": {1, 2}})
    with pytest.raises(ValueError, match=r"\$p0_x"):
        await db.transaction([("RETURN $x", {"x": 2**70})])
    assert await db.query_one("RETURN $x", {"x": [1, "a"]}) == [1, "a"]
    assert db.consecutive_timeouts == 0


async def test_every_concurrent_caller_gets_a_connection_error_while_nothing_listens() -> None:
    cfg = DbConfig.from_env({"SVC_DB_URL": f"127.0.0.1:{free_port()}", "SVC_DB_PASS": "x",
                             "SVC_SSP_DB_TIMEOUT_SECS": "0.5"})
    db = Database(cfg)
    results = await asyncio.gather(*(db.query("RETURN 1", idempotent=True) for _ in range(8)),
                                   return_exceptions=True)
    assert all(isinstance(r, DbConnectionError) for r in results), results
    with pytest.raises(DbConnectionError):
        async with Database(cfg):
            pass
    await db.close()


@pytest.mark.parametrize("form", ["http://127.0.0.1:{port}", "http://127.0.0.1:{port}/",
                                  "ws://127.0.0.1:{port}/rpc", "ws://127.0.0.1:{port}",
                                  "127.0.0.1:{port}"])
async def test_svc_db_url_plain_forms_reach_the_real_host(shared_db_host: DbHost,
                                                          form: str) -> None:
    # http:// is the spec's primary form ("http engine URL"); the client still talks over the
    # WebSocket RPC of the same server (dbclient.config), so every plain form reaches it.
    url = form.format(port=shared_db_host.port)
    cfg = config_for(shared_db_host, url=url)
    assert cfg.ws_url == f"ws://127.0.0.1:{shared_db_host.port}/rpc"
    assert cfg.http_url == shared_db_host.http_url
    async with Database(cfg) as db:
        assert await db.query_one("RETURN 40 + 2") == 42


@pytest.mark.parametrize("scheme,ws", [("https", "wss"), ("wss", "wss")])
async def test_svc_db_url_tls_forms_connect_over_tls(shared_db_host: DbHost, scheme: str,
                                                     ws: str) -> None:
    # No TLS server here: the URL handling is checked (https -> wss, same host and port), and
    # the client does speak TLS to it: a plain-text host refuses the handshake, which is a
    # connection error naming the wss URL (not a hang, not a downgrade to ws).
    port = shared_db_host.port
    cfg = config_for(shared_db_host, url=f"{scheme}://127.0.0.1:{port}", timeout=2.0)
    assert cfg.ws_url == f"{ws}://127.0.0.1:{port}/rpc"
    assert cfg.http_url == f"https://127.0.0.1:{port}"
    db = Database(cfg)
    try:
        with pytest.raises(DbConnectionError, match=f"{ws}://127.0.0.1:{port}/rpc"):
            await db.connect()
    finally:
        await db.close()
