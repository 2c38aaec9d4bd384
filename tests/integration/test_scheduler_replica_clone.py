"""The replica cloned from a real database host: counts, hashes and row order equal to what a
ViewEngine loaded through ``Database.keyset_pages`` holds, and to SurrealDB's own order."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from surrealdb import Duration, RecordID

from dbclient import Database, DbQueryError
from engine import ViewEngine
from scheduler.replica import CloneInProgress, CloneProgress, Replica
from scheduler.wal import Wal


@pytest.fixture
async def db(fresh_db: Database) -> Database:
    return fresh_db


def mixed_ids() -> list[Any]:
    ids: list[Any] = list(range(-200, 900))
    ids += [f"s-{i}" for i in range(600)] + ["", "é", "中文", "10"]
    ids += [uuid.UUID(int=i * 104729 + 3) for i in range(300)]
    ids += [[i % 5, f"k{i}"] for i in range(300)]
    ids += [{"a": i, "b": [i % 3]} for i in range(200)]
    return ids


def value(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "n": i,
        "f": rng.uniform(-1000, 1000),
        "s": f"text {i} é",
        "dec": Decimal(i) / Decimal(8),
        "at": datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=i),
        "u": uuid.UUID(int=i),
        "link": RecordID("user", i % 50),
        "tags": ["a", i % 3, None],
        "obj": {"z": i, "a": {"deep": True}},
        "nul": None,
    }


async def load_tables(db: Database) -> dict[str, int]:
    rng = random.Random(99)
    ids = mixed_ids()
    for start in range(0, len(ids), 500):
        batch = [{"id": RecordID("item", k), **value(rng, start + j)}
                 for j, k in enumerate(ids[start:start + 500])]
        await db.query("INSERT INTO item $rows", {"rows": batch})
    # Durations are set in SurrealQL: the engine refuses the SDK's CBOR for a bound Duration.
    # Never zero: reading a zero duration drops the SDK's WebSocket (reported upstream).
    await db.query("UPDATE item SET dur = duration::from_millis(n + 1) RETURN NONE")
    users = [{"id": RecordID("user", i), "name": f"u{i}"} for i in range(50)]
    await db.query("INSERT INTO user $rows", {"rows": users})
    await db.query("DEFINE TABLE empty SCHEMALESS")
    await db.query("CREATE _00_query:q1 SET state = 'ready', rowCount = 3")
    await db.query("CREATE _00_version:v1 SET v = 1")  # bookkeeping: not replicated
    return {"item": len(ids), "user": 50}


async def test_clone_matches_an_engine_loaded_by_keyset_pages(db: Database,
                                                              tmp_path: Path) -> None:
    sizes = await load_tables(db)
    seen: list[CloneProgress] = []
    with Replica.open(tmp_path / "replica.db") as rep:
        counts = await rep.clone_from(db, page_size=333, applied_seq=42,
                                      progress=seen.append)
        assert counts == {"_00_query": 1, "empty": 0, "item": sizes["item"], "user": 50}
        assert rep.applied_seq == 42
        assert rep.tables() == ["_00_query", "item", "user"]
        assert seen and seen[-1].total_rows == sum(counts.values())
        assert seen[-1].tables_done == seen[-1].tables_total == 4
        eng = ViewEngine()
        for table in ("item", "user", "_00_query"):
            rows: list[dict[str, Any]] = []
            async for page in db.keyset_pages(table, 500):
                rows += page
            eng.load(table, rows)
            assert rep.count(table) == eng.table_count(table) == len(rows)
            assert rep.hash(table) == eng.table_hash(table)
            # Same rows in the same order as SurrealDB's ORDER BY id keyset scan.
            assert list(rep.rows(table, 250)) == rows
        assert rep.count("_00_version") == 0
        sample = rep.get("item", "item:5")
        assert sample is not None
        assert isinstance(sample["dec"], Decimal) and isinstance(sample["u"], uuid.UUID)
        assert isinstance(sample["dur"], Duration)


async def test_events_after_the_clone_keep_hashes_equal(db: Database, tmp_path: Path) -> None:
    await load_tables(db)
    eng = ViewEngine()
    rows: list[dict[str, Any]] = []
    async for page in db.keyset_pages("user", 500):
        rows += page
    eng.load("user", rows)
    with Replica.open(tmp_path / "replica.db") as rep, Wal.open(tmp_path / "wal") as wal:
        await rep.clone_from(db, page_size=100, tables=["user"], applied_seq=wal.last_seq)
        events: list[dict[str, Any]] = [
            {"table": "user", "op": "UPDATE", "id": "user:3",
             "record": {"id": RecordID("user", 3), "name": "renamed"}},
            {"table": "user", "op": "DELETE", "id": "user:4", "record": None},
            {"table": "user", "op": "CREATE", "id": "user:`new-one`",
             "record": {"id": RecordID("user", "new-one"), "name": "n"}},
        ]
        wal.append_many(events)
        rep.apply(wal.replay(rep.applied_seq))
        for e in events:
            eng.ingest(e["table"], e["op"], e["id"], e["record"])
        assert rep.hash("user") == eng.table_hash("user")
        assert rep.count("user") == eng.table_count("user") == 50


async def test_a_failed_clone_leaves_the_replica_unchanged(db: Database, tmp_path: Path) -> None:
    await load_tables(db)
    with Replica.open(tmp_path / "replica.db") as rep:
        await rep.clone_from(db, page_size=100, tables=["user"], applied_seq=7)
        before = (rep.count("user"), rep.hash("user"))
        with pytest.raises(DbQueryError):
            await rep.clone_from(db, page_size=100, tables=["user", "no_such_table"])
        assert (rep.count("user"), rep.hash("user"), rep.applied_seq) == (*before, 7)


async def test_a_second_clone_while_one_runs_is_refused(db: Database, tmp_path: Path) -> None:
    await load_tables(db)
    refused: list[Exception] = []

    with Replica.open(tmp_path / "replica.db") as rep:
        async def on_page(p: CloneProgress) -> None:
            if not refused:
                assert rep.cloning
                try:
                    await rep.clone_from(db, tables=["user"])
                except CloneInProgress as e:
                    refused.append(e)

        counts = await rep.clone_from(db, page_size=10, tables=["user"], progress=on_page)
        assert refused and "already running" in str(refused[0])
        assert counts == {"user": 50} and rep.count("user") == 50
        assert not rep.cloning
        await rep.clone_from(db, page_size=10, tables=["user"])  # allowed again afterwards
