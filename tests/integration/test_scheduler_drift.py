"""Drift detection and repair between a real Replica and a real database host.

`submit` applies events to the replica with increasing sequence numbers (what the scheduler's
ingest and drain do in the end); `reclone` is the real `Replica.clone_from`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from surrealdb import RecordID

from dbclient import Database
from scheduler.config import DriftConfig
from scheduler.drift import DriftChecker, default_tables
from scheduler.feed import ChangefeedTail
from scheduler.replica import Replica


@pytest.fixture
async def db(fresh_db: Database) -> Database:
    return fresh_db


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[Replica]:
    rep = Replica.open(tmp_path / "replica.sqlite")
    try:
        yield rep
    finally:
        rep.close()


class Harness:
    """The checker's collaborators, real where it matters."""

    def __init__(self, replica: Replica, db: Database, **cfg: Any) -> None:
        self.replica = replica
        self.db = db
        self.submitted: list[list[dict[str, Any]]] = []
        self.reclones: list[str] = []
        self.buffer = False
        self.checker = DriftChecker(replica, db, self.submit, self.reclone,
                                    DriftConfig(**cfg), lambda: self.buffer)

    async def submit(self, events: list[dict[str, Any]]) -> list[int]:
        self.submitted.append(events)
        start = self.replica.applied_seq
        pairs = [(start + i + 1, ev) for i, ev in enumerate(events)]
        res = self.replica.apply(pairs)
        assert not res.rejected, res.rejected
        return [s for s, _ in pairs]

    async def reclone(self, reason: str) -> None:
        self.reclones.append(reason)
        await self.replica.clone_from(self.db, applied_seq=self.replica.applied_seq)
        self.checker.note_recloned()

    def events(self) -> list[tuple[str, str]]:
        return [(e["op"], e["id"]) for batch in self.submitted for e in batch]


async def seed(db: Database, n: int = 10) -> None:
    rows = [{"id": RecordID("post", i), "_00_rv": 1, "t": f"t{i}", "n": Decimal(i) / 4,
             "at": datetime(2024, 1, 1, tzinfo=UTC), "u": uuid.UUID(int=i),
             "link": RecordID("user", i % 3), "tags": [i, "x", None]} for i in range(n)]
    await db.query("INSERT INTO post $rows", {"rows": rows})
    await db.query("INSERT INTO user $rows",
                   {"rows": [{"id": RecordID("user", i), "name": f"u{i}"} for i in range(3)]})


def tamper(replica: Replica, table: str, rid: RecordID, **changes: Any) -> None:
    """Change a row behind the scheduler's back (no event, any version)."""
    row = replica.get(table, rid)
    assert row is not None
    row.update(changes)
    replica.apply([(replica.applied_seq + 1, {"table": table, "op": "UPDATE",
                                              "id": rid, "record": row})])


async def test_a_replica_in_sync_is_not_touched(db: Database, replica: Replica) -> None:
    await seed(db)
    await replica.clone_from(db)
    h = Harness(replica, db)
    assert await h.checker.check_once() is True
    st = h.checker.status()
    assert st["mismatched"] == [] and st["tables"]["post"] == {"upstream": 10, "replica": 10}
    assert h.submitted == [] and h.reclones == []
    assert st["checked_at"] is not None and st["last_error"] is None


async def test_a_row_changed_behind_the_replicas_back_is_repaired_in_place_with_one_event(
        db: Database, replica: Replica) -> None:
    await seed(db)
    await replica.clone_from(db)
    h = Harness(replica, db, confirm_ticks=2)
    await h.checker.check_once()
    tamper(replica, "post", RecordID("post", 3), t="wrong")
    await h.checker.check_once()
    assert h.checker.status()["mismatched"] == ["post"] and h.submitted == []  # unconfirmed
    await h.checker.check_once()
    assert h.events() == [("UPDATE", "post:3")]
    assert replica.get("post", "post:3") == await db.query_one("SELECT * FROM ONLY post:3")
    st = h.checker.status()
    assert st["auto_repairs"] == 1 and st["last_auto_repair"]["rows"] == 1
    await h.checker.check_once()
    assert h.checker.status()["mismatched"] == [] and h.reclones == []


async def test_a_newer_version_in_the_replica_is_replaced_not_skipped_as_stale(
        db: Database, replica: Replica) -> None:
    await seed(db)
    await replica.clone_from(db)
    h = Harness(replica, db, confirm_ticks=1)
    tamper(replica, "post", RecordID("post", 2), _00_rv=99, t="from the future")
    await db.query("DELETE post:5")  # and one row the replica still has
    await db.query("CREATE post:77 SET _00_rv = 1, t = 'missed'")  # and one it never saw
    await h.checker.check_once()
    assert sorted(h.events()) == sorted([("DELETE", "post:2"), ("CREATE", "post:2"),
                                         ("DELETE", "post:5"), ("CREATE", "post:77")])
    assert list(replica.rows("post")) == await db.query_one("SELECT * FROM post ORDER BY id")


async def test_a_table_emptied_in_the_replica_is_backfilled_at_once(
        db: Database, replica: Replica) -> None:
    await seed(db)
    await replica.clone_from(db)
    h = Harness(replica, db, confirm_ticks=5)
    await h.checker.check_once()
    replica.apply([(replica.applied_seq + 1 + i, {"table": "user", "op": "DELETE",
                                                  "id": f"user:{i}", "record": None})
                   for i in range(3)])
    assert replica.count("user") == 0
    await h.checker.check_once()  # no confirmation ticks for an empty table
    assert sorted(h.events()) == [("CREATE", f"user:{i}") for i in range(3)]
    assert list(replica.rows("user")) == await db.query_one("SELECT * FROM user ORDER BY id")


async def test_a_table_new_to_the_replica_is_backfilled_without_the_cap(
        db: Database, replica: Replica) -> None:
    await seed(db)
    await replica.clone_from(db, tables=["user"])
    h = Harness(replica, db, repair_max_rows=2)
    await h.checker.check_once()
    assert len(h.events()) == 10 and h.reclones == []
    assert replica.count("post") == 10
    st = h.checker.status()
    assert st["last_auto_repair"]["kind"] == "backfill" and st["backfilling"] == []


async def test_a_divergence_above_the_cap_re_clones_once_per_cooldown(
        db: Database, replica: Replica) -> None:
    await seed(db)
    await replica.clone_from(db)
    h = Harness(replica, db, confirm_ticks=1, repair_max_rows=2)
    for i in range(3):
        tamper(replica, "post", RecordID("post", i), t="wrong")
    await h.checker.check_once()
    assert h.submitted == [] and len(h.reclones) == 1 and "more than 2 rows" in h.reclones[0]
    assert list(replica.rows("post")) == await db.query_one("SELECT * FROM post ORDER BY id")
    st = h.checker.status()
    assert st["auto_reclones"] == 1 and st["last_auto_reclone"]["reason"] == h.reclones[0]
    # Drift again within the cooldown: reported, not re-cloned.
    for i in range(3):
        tamper(replica, "post", RecordID("post", i), t="wrong again")
    await h.checker.check_once()
    st = h.checker.status()
    assert len(h.reclones) == 1 and st["stuck"] == ["post"] and st["auto_reclones"] == 1
    assert "cooldown" in st["last_error"]


async def test_report_only_mode_never_re_clones(db: Database, replica: Replica) -> None:
    await seed(db)
    await replica.clone_from(db)
    h = Harness(replica, db, confirm_ticks=1, repair_max_rows=2, auto_reclone=False)
    for i in range(3):
        tamper(replica, "post", RecordID("post", i), t="wrong")
    await h.checker.check_once()
    st = h.checker.status()
    assert h.reclones == [] and h.submitted == []
    assert st["mismatched"] == ["post"] and st["stuck"] == ["post"]
    assert st["auto_reclone_enabled"] is False and st["auto_reclones"] == 0


async def test_the_check_waits_while_events_are_buffered(db: Database,
                                                          replica: Replica) -> None:
    await seed(db)
    await replica.clone_from(db)
    h = Harness(replica, db, confirm_ticks=1)
    tamper(replica, "post", RecordID("post", 1), t="wrong")
    h.buffer = True
    assert await h.checker.check_once() is False
    assert h.checker.status()["checked_at"] is None and h.submitted == []
    h.buffer = False
    assert await h.checker.check_once() is True
    assert h.events() == [("UPDATE", "post:1")]


async def test_disabled_checks_do_nothing(db: Database, replica: Replica) -> None:
    h = Harness(replica, db, check=False)
    assert await h.checker.check_once() is False
    assert h.checker.status()["enabled"] is False


async def test_rows_that_came_through_the_changefeed_hash_like_the_database_rows(
        db: Database, replica: Replica, tmp_path: Path) -> None:
    """The replica's copy built from feed events and a fresh read of the database agree, so a
    check right after a drain finds nothing (typed values, updates and deletes included)."""
    await db.query("DEFINE TABLE post SCHEMALESS CHANGEFEED 1h INCLUDE ORIGINAL; "
                   "DEFINE TABLE user SCHEMALESS CHANGEFEED 1h INCLUDE ORIGINAL")
    h = Harness(replica, db, confirm_ticks=1)

    async def synced() -> list[str]:
        return ["post", "user"]

    tail = ChangefeedTail(db, h.submit, tmp_path / "cursor.json", synced, poll_secs=3600,
                          doorbell_table=None)
    await seed(db)
    await db.query("UPDATE post:1 SET t = 'changed', extra = { a: [1, 2.5, d'2025-01-01'] }; "
                   "DELETE post:2; UPDATE post:3 SET dur = 90s")
    await tail.catch_up()
    assert replica.count("post") == 9
    await h.checker.check_once()
    st = h.checker.status()
    assert st["mismatched"] == [] and st["tables"]["post"] == {"upstream": 9, "replica": 9}
    assert h.reclones == [] and st["auto_repairs"] == 0


async def test_view_tables_nosync_tables_and_bookkeeping_are_not_synced(db: Database) -> None:
    await db.query("DEFINE TABLE post SCHEMALESS; DEFINE TABLE audit COMMENT 'log @nosync'; "
                   "DEFINE TABLE post_count AS SELECT count() AS n FROM post GROUP ALL; "
                   "DEFINE TABLE _00_version; DEFINE TABLE _00_query")
    assert await default_tables(db) == ["_00_query", "post"]


async def test_a_table_removed_upstream_leaves_the_replica_after_two_agreeing_checks(
        db: Database, replica: Replica, tmp_path: Path) -> None:
    await seed(db)
    await replica.clone_from(db)
    h = Harness(replica, db)
    h.checker.incidents_dir = tmp_path
    await h.checker.check_once()
    assert set(replica.tables()) == {"post", "user"}
    await db.query("REMOVE TABLE user")
    await h.checker.check_once()  # one probe could race a schema change: nothing dropped yet
    assert replica.count("user") == 3 and h.checker.missing == {"user": 1}
    replica.freeze()  # an SSP bootstraps from the snapshot: the drop waits
    await h.checker.check_once()
    assert replica.count("user") == 3
    replica.unfreeze()
    await h.checker.check_once()
    assert replica.tables() == ["post"] and replica.count("user") == 0
    assert h.checker.dropped == ["user"] and h.checker.missing == {}
    lines = [json.loads(x) for x in (tmp_path / "incidents.jsonl").read_text().splitlines()]
    assert [(x["kind"], x["component"], x["state"]) for x in lines] == [
        ("schema_change", "user", "recorded")]
    assert "3 rows" in lines[0]["events"][0]["summary"]
    # A table marked @nosync counts as gone too.
    await db.query("DEFINE TABLE OVERWRITE post SCHEMALESS COMMENT '@nosync'")
    await h.checker.check_once()
    await h.checker.check_once()
    assert replica.tables() == [] and h.checker.dropped == ["user", "post"]
    assert h.reclones == []
