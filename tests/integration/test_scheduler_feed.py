"""The scheduler's changefeed tail against a real database host, feeding a real Replica.

`submit` here is what the scheduler core's `ingest_many` does to the replica in the end: apply
each event with the next sequence number (the WAL and the broadcast are not this module's).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from surrealdb import RecordID

from dbclient import Database, DbConfig
from scheduler.feed import ChangefeedTail
from scheduler.replica import Replica
from svccli.schema import apply_schema
from svccli.settings import resolve_settings
from tests.support.procs import DbHost, free_port, start_db_host

_names = itertools.count()

SCHEMA = """
DEFINE TABLE post SCHEMALESS;
DEFINE TABLE user SCHEMALESS;
"""


def env_for(host: DbHost) -> dict[str, str]:
    n = next(_names)
    return {"SVC_DB_URL": host.ws_url, "SVC_DB_USER": host.user, "SVC_DB_PASS": host.password,
            "SVC_DB_NS": f"feed{n}", "SVC_DB_NAME": f"app{n}"}


async def hook_schema(db: Database, env: dict[str, str]) -> None:
    await db.query(SCHEMA)
    settings = resolve_settings(env, transport_flag="changefeed", project_flag=None,
                                ingest_url_flag=None, retention_flag=None,
                                cwd=Path("/nonexistent"))
    await apply_schema(db, settings)


async def until(pred: Callable[[], Any], what: str, deadline: float = 60.0) -> None:
    """Wait for a condition; the deadline only bounds a hung test, it measures nothing."""
    end = time.monotonic() + deadline
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.05)


class Sink:
    """Applies submitted events to a replica with increasing sequence numbers."""

    def __init__(self, replica: Replica) -> None:
        self.replica = replica
        self.events: list[dict[str, Any]] = []
        self.seq = replica.applied_seq

    async def __call__(self, events: list[dict[str, Any]]) -> list[int]:
        seqs = []
        pairs = []
        for ev in events:
            self.seq += 1
            seqs.append(self.seq)
            pairs.append((self.seq, ev))
        res = self.replica.apply(pairs)
        assert not res.rejected, res.rejected
        self.events += events
        return seqs

    def ops(self) -> list[tuple[str, str, str]]:
        return [(e["op"], e["id"], e["record"].get("t", "")) for e in self.events]


async def synced() -> list[str]:
    return ["post", "user"]


@pytest.fixture
async def env(shared_db_host: DbHost) -> dict[str, str]:
    return env_for(shared_db_host)


@pytest.fixture
async def db(env: dict[str, str]) -> AsyncIterator[Database]:
    database = Database(DbConfig.from_env(env))
    await database.connect()
    await hook_schema(database, env)
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[Replica]:
    rep = Replica.open(tmp_path / "replica.sqlite")
    try:
        yield rep
    finally:
        rep.close()


async def upstream_rows(db: Database, table: str) -> list[dict[str, Any]]:
    return list(await db.query_one(f"SELECT * FROM {table} ORDER BY id"))


async def tail_for(db: Database, sink: Sink, path: Path, **kw: Any) -> ChangefeedTail:
    tail = ChangefeedTail(db, sink, path, synced, **kw)
    await tail.start()
    return tail


async def test_tail_delivers_creates_updates_and_deletes_in_commit_order(
        db: Database, replica: Replica, tmp_path: Path) -> None:
    sink = Sink(replica)
    tail = await tail_for(db, sink, tmp_path / "cursor.json")
    try:
        await db.query("CREATE post:1 SET t = 'a'")
        await db.query("CREATE user:1 SET t = 'u'")
        await db.query("UPDATE post:1 SET t = 'b'")
        await db.query("CREATE post:2 SET t = 'c'")
        await db.query("DELETE post:1")
        await until(lambda: len(sink.events) >= 5, "five events")
        assert sink.ops() == [("CREATE", "post:1", "a"), ("CREATE", "user:1", "u"),
                              ("UPDATE", "post:1", "b"), ("CREATE", "post:2", "c"),
                              ("DELETE", "post:1", "b")]
        deleted = sink.events[-1]["record"]
        assert deleted["id"] == RecordID("post", 1) and deleted["_00_rv"] == 2
        assert replica.rows("post") and [r["id"] for r in replica.rows("post")] == [
            RecordID("post", 2)]
        assert list(replica.rows("post")) == await upstream_rows(db, "post")
        st = tail.status()
        assert st["enabled"] is True and st["gap"] is False and st["stalled"] is False
        assert st["records_1m"] == 5 and st["doorbell"] == "connected"
        assert st["last_error"] is None and isinstance(st["cursor_ms"], int)
        # the cursor file is written after `submit` returned (the sink has the events first)

        def saved_past_base() -> bool:
            path = tmp_path / "cursor.json"
            if not path.exists():
                return False
            saved = json.loads(path.read_text())
            return bool(saved["cursors"].get("post", 0) > saved["base"])
        await until(saved_past_base, "the cursor file past the base")
    finally:
        await tail.stop()


async def test_restart_resumes_from_the_saved_cursor_without_loss_or_repeats(
        db: Database, replica: Replica, tmp_path: Path) -> None:
    state = tmp_path / "cursor.json"
    sink = Sink(replica)
    tail = await tail_for(db, sink, state)
    try:
        for i in range(20):
            await db.query("CREATE type::record('post', $i) SET t = 'first'", {"i": i})
        await until(lambda: len(sink.events) == 20, "the first twenty events")
    finally:
        await tail.stop()
    # Written while no tail runs.
    for i in range(10):
        await db.query("UPDATE type::record('post', $i) SET t = 'second'", {"i": i})
    await db.query("DELETE post:19")
    sink2 = Sink(replica)
    tail2 = await tail_for(db, sink2, state)
    try:
        await until(lambda: len(sink2.events) >= 11, "the eleven later events")
        await tail2.catch_up()  # nothing else is waiting
    finally:
        await tail2.stop()
    assert [e["op"] for e in sink2.events] == ["UPDATE"] * 10 + ["DELETE"]
    assert list(replica.rows("post")) == await upstream_rows(db, "post")
    assert replica.count("post") == 19


async def test_the_doorbell_wakes_the_tail_without_polling(
        db: Database, replica: Replica, tmp_path: Path) -> None:
    sink = Sink(replica)
    # A poll interval longer than any test: only the LIVE doorbell on _00_version can wake it.
    tail = await tail_for(db, sink, tmp_path / "cursor.json", poll_secs=3600)
    try:
        await until(lambda: tail.rounds >= 1, "the first catch-up")
        await db.query("CREATE post:rung SET t = 'ding'")
        await until(lambda: len(sink.events) == 1, "the event the doorbell announced")
        assert tail.status()["doorbell"] == "connected"
        assert replica.get("post", "post:rung") == (await upstream_rows(db, "post"))[0]
    finally:
        await tail.stop()


async def test_polling_carries_on_when_live_is_unavailable(tmp_path: Path) -> None:
    port = free_port()
    env = env_for_port(port)
    database = Database(DbConfig.from_env(env))
    rep = Replica.open(tmp_path / "replica.sqlite")
    sink = Sink(rep)
    # Nothing listens yet: LIVE cannot be subscribed; no retry of it during the test.
    tail = ChangefeedTail(database, sink, tmp_path / "cursor.json", synced, poll_secs=0.2,
                          doorbell_retry_secs=3600)
    await tail.start()
    host = None
    try:
        await until(lambda: tail.status()["doorbell"] == "unavailable", "the failed LIVE")
        host = start_db_host(tmp_path / "late", memory=True, port=port)
        admin = Database(DbConfig.from_env(env))
        await admin.connect()
        try:
            await hook_schema(admin, env)
            await admin.query("CREATE post:1 SET t = 'polled'; UPDATE post:1 SET t = 'again'")
            await until(lambda: len(sink.events) == 2, "two polled events")
            assert [e["op"] for e in sink.events] == ["CREATE", "UPDATE"]
            assert tail.status()["doorbell"] == "unavailable"
            assert list(rep.rows("post")) == await upstream_rows(admin, "post")
        finally:
            await admin.close()
    finally:
        await tail.stop()
        await database.close()
        rep.close()
        if host is not None:
            host.process.stop()


def env_for_port(port: int) -> dict[str, str]:
    n = next(_names)
    return {"SVC_DB_URL": f"ws://127.0.0.1:{port}/rpc", "SVC_DB_USER": "root",
            "SVC_DB_PASS": "root-test-pass", "SVC_DB_NS": f"late{n}", "SVC_DB_NAME": f"app{n}",
            "SVC_SSP_DB_TIMEOUT_SECS": "2"}


async def test_a_cursor_older_than_the_retention_is_a_gap_until_reset(
        db: Database, replica: Replica, tmp_path: Path) -> None:
    state = tmp_path / "cursor.json"
    two_hours_ago = int(time.time() * 1000) - 2 * 3_600_000
    state.write_text(json.dumps({"version": 1, "base": two_hours_ago << 16, "cursors": {},
                                 "seen": {}, "synced_ms": two_hours_ago}))
    gaps: list[int] = []

    async def on_gap() -> None:
        gaps.append(1)

    await db.query("CREATE post:1 SET t = 'missed?'")
    sink = Sink(replica)
    tail = ChangefeedTail(db, sink, state, synced, on_gap=on_gap)
    assert await tail.catch_up() == 0
    st = tail.status()
    assert st["gap"] is True and "retention" in (st["last_error"] or "")
    assert sink.events == []
    await tail.start()
    try:
        await until(lambda: gaps == [1], "on_gap")
        # The scheduler re-clones, then restarts the cursor from the clone's start.
        clone_started = int(time.time() * 1000)
        await replica.clone_from(db, tables=["post", "user"])
        await tail.reset(clone_started)
        await db.query("CREATE post:2 SET t = 'after the clone'")
        # At least once: post:1 may come again from the re-read window before the clone.
        await until(lambda: any(e["id"] == "post:2" for e in sink.events),
                    "the event after the clone")
        assert tail.status()["gap"] is False
        assert list(replica.rows("post")) == await upstream_rows(db, "post")
    finally:
        await tail.stop()


# --------------------------------------------------------------- pages of the engine's feed
#
# `SHOW CHANGES ... LIMIT n` scans at most min(n, 1000) entries of the DATABASE's feed (one
# entry per table per transaction, in versionstamp order) and filters by table afterwards (proof
# against the bare engine: scheduler/README.md). A table read can therefore come back short or
# empty while its own changes wait behind other tables' entries.


async def test_a_synced_write_behind_more_than_a_page_of_other_tables_changes_arrives(
        db: Database, replica: Replica, tmp_path: Path) -> None:
    # An unsynced table with a feed (edge tables, _00_version... in a real database).
    await db.query("DEFINE TABLE noise CHANGEFEED 1h")
    sink = Sink(replica)
    tail = ChangefeedTail(db, sink, tmp_path / "cursor.json", synced)
    # 1,100 transactions of the other table, then one synced write behind them.
    await db.query("; ".join(f"CREATE noise:{i}" for i in range(1100)))
    await db.query("CREATE post:behind SET t = 'late'")
    assert await tail.catch_up() == 1
    assert sink.ops() == [("CREATE", "post:behind", "late")]
    # Nothing is read twice, and the cursor moved past the other table's entries.
    assert await tail.catch_up() == 0
    assert list(replica.rows("post")) == await upstream_rows(db, "post")


async def test_interleaved_writes_arrive_complete_and_in_commit_order_across_pages(
        db: Database, replica: Replica, tmp_path: Path) -> None:
    await db.query("DEFINE TABLE noise CHANGEFEED 1h")
    sink = Sink(replica)
    tail = ChangefeedTail(db, sink, tmp_path / "cursor.json", synced)
    # 1,500 synced writes, each with two other tables' entries around it (3,000 of them), and
    # transactions touching both synced tables (one versionstamp, two feed entries).
    for chunk in range(5):
        stmts = []
        for i in range(chunk * 300, chunk * 300 + 300):
            stmts.append(f"CREATE noise:a{i}")
            if i % 10 == 0:
                stmts.append(f"BEGIN; CREATE post:{i} SET t = 'p{i}'; "
                             f"CREATE user:{i} SET t = 'u{i}'; COMMIT")
            else:
                stmts.append(f"CREATE post:{i} SET t = 'p{i}'")
            stmts.append(f"CREATE noise:b{i}")
        await db.query("; ".join(stmts))
    while await tail.catch_up():
        pass
    want: list[tuple[str, str, str]] = []
    for i in range(1500):
        want.append(("CREATE", f"post:{i}", f"p{i}"))
        if i % 10 == 0:
            want.append(("CREATE", f"user:{i}", f"u{i}"))
    assert sink.ops() == want
    assert replica.count("post") == 1500 and replica.count("user") == 150
