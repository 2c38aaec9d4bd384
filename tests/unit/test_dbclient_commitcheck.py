"""dbclient.commitcheck against an in-process database seam: what committed decides.

The real path (the Node build's events, the scheduler, an SSP) is
tests/integration/test_http_commit_check.py; here each rule on its own, with the reads and
the submitted corrections visible.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from surrealdb import RecordID

from dbclient.commitcheck import CommitCheck, applies_to


class FakeDb:
    """Committed rows by id text; `SELECT * FROM $ids` answers the existing ones. `during`
    runs inside a read (a change arriving while the read is under way)."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.during: Any = None
        self.reads = 0

    async def query(self, sql: str, vars: dict[str, Any]) -> list[Any]:
        assert sql == "SELECT * FROM $ids"
        self.reads += 1
        if self.during is not None:
            self.during()
            self.during = None
        out = []
        for rid in vars["ids"]:
            row = self.rows.get(f"{rid.table_name}:{rid.id}")
            if row is not None:
                out.append(dict(row))
        return [out]


def row(key: int, rv: int, **fields: Any) -> dict[str, Any]:
    return {"id": RecordID("t", key), "_00_rv": rv, **fields}


@pytest.fixture
def db() -> FakeDb:
    return FakeDb()


def check(db: FakeDb, sent: list[list[dict[str, Any]]]) -> CommitCheck:
    async def submit(events: list[dict[str, Any]]) -> None:
        sent.append(events)
    # deadline 0: a change not committed at the first read is treated as failed
    return CommitCheck(db, submit, deadline=0.0, watch=60.0, tick=0.0)


async def test_a_change_that_committed_is_confirmed_and_forgotten(db: FakeDb) -> None:
    sent: list[Any] = []
    c = check(db, sent)
    db.rows["t:1"] = row(1, 2, n=5)
    c.note("t", "UPDATE", row(1, 2, n=5))
    await c.check_due()
    assert (c.confirmed, c.corrected, c.pending, sent) == (1, 0, 0, [])


async def test_an_update_that_did_not_commit_is_undone_with_the_committed_row(
        db: FakeDb) -> None:
    sent: list[Any] = []
    c = check(db, sent)
    db.rows["t:1"] = row(1, 2, n=5)
    c.note("t", "UPDATE", row(1, 3, n=9))  # the transaction failed after its event
    await c.check_due()
    # the pipeline holds version 3: an UPDATE back to 2 would be dropped as stale
    assert [[(e["op"], e["record"].get("n")) for e in b] for b in sent] == [
        [("DELETE", None), ("CREATE", 5)]]
    assert c.corrected == 1


async def test_an_undone_delete_and_create(db: FakeDb) -> None:
    sent: list[Any] = []
    c = check(db, sent)
    db.rows["t:1"] = row(1, 2, n=5)
    c.note("t", "DELETE", row(1, 2, n=5))  # deleted, then rolled back
    c.note("t", "CREATE", row(2, 1, n=1))  # created, then rolled back
    await c.check_due()
    got = sorted((e["op"], e["id"]) for b in sent for e in b)
    assert got == [("CREATE", "t:1"), ("DELETE", "t:2")]


async def test_a_correction_with_an_older_version_in_the_pipeline_is_an_update(
        db: FakeDb) -> None:
    sent: list[Any] = []
    c = check(db, sent)
    db.rows["t:1"] = row(1, 4, n=7)  # a later commit, whose own event is still to come
    c.note("t", "UPDATE", row(1, 3, n=9))
    await c.check_due()
    assert [[(e["op"], e["record"]["n"]) for e in b] for b in sent] == [[("UPDATE", 7)]]


async def test_a_late_commit_is_followed_after_the_correction(db: FakeDb) -> None:
    sent: list[Any] = []
    c = check(db, sent)
    db.rows["t:1"] = row(1, 1, n=1)
    c.note("t", "UPDATE", row(1, 2, n=2))
    await c.check_due()  # not committed at the deadline: undone
    assert c.corrected == 1 and c.pending == 1
    db.rows["t:1"] = row(1, 2, n=2)  # ... and then it commits
    for rec in c._records.values():
        rec.checked = 0.0  # the watch reads it again
    await c.check_due()
    assert c.late == 1
    assert sent[-1] == [{"table": "t", "op": "UPDATE", "id": "t:1", "record": row(1, 2, n=2)}]


async def test_a_change_arriving_during_the_read_is_not_overruled(db: FakeDb) -> None:
    sent: list[Any] = []
    c = check(db, sent)
    db.rows["t:1"] = row(1, 1, n=1)
    c.note("t", "UPDATE", row(1, 2, n=2))
    # a newer change is applied while the read is under way: the read's answer is about
    # the older change only, so nothing is corrected from it
    db.during = lambda: c.note("t", "UPDATE", row(1, 3, n=3))
    await c.check_due()
    assert sent == [] and c.pending == 1
    db.rows["t:1"] = row(1, 3, n=3)
    await c.check_due()
    assert (c.confirmed, sent) == (1, [])


async def test_the_loop_reads_in_batches_and_counts_what_it_cannot_hold(db: FakeDb) -> None:
    sent: list[Any] = []

    async def submit(events: list[dict[str, Any]]) -> None:
        sent.append(events)
    c = CommitCheck(db, submit, deadline=5.0, tick=0.001, limit=3)
    for k in range(5):
        db.rows[f"t:{k}"] = row(k, 1)
        c.note("t", "CREATE", row(k, 1))
    assert c.unchecked == 2 and c.pending == 3
    task = asyncio.create_task(c.run())
    try:
        for _ in range(200):
            if c.pending == 0:
                break
            await asyncio.sleep(0.005)
    finally:
        task.cancel()
    assert (c.confirmed, db.reads, sent) == (3, 1, [])


def test_only_application_rows_are_checked() -> None:
    assert applies_to("thread", {"id": RecordID("thread", 1)})
    assert applies_to("thread", {"id": RecordID("thread", 1), "_00_rv": 3})
    assert not applies_to("_00_query", {"id": RecordID("_00_query", "a")})
    assert not applies_to("thread", {"id": "thread:1"})
    assert not applies_to("thread", None)


async def test_a_refused_correction_is_tried_again_and_the_loop_goes_on(db: FakeDb) -> None:
    sent: list[Any] = []
    fail = [True]

    async def submit(events: list[dict[str, Any]]) -> None:
        if fail[0]:
            fail[0] = False
            raise OSError("the WAL could not take it")
        sent.append(events)
    c = CommitCheck(db, submit, deadline=0.0, tick=0.001)
    db.rows["t:1"] = row(1, 1, n=1)
    c.note("t", "UPDATE", row(1, 2, n=2))
    task = asyncio.create_task(c.run())
    try:
        for _ in range(400):
            if sent:
                break
            await asyncio.sleep(0.005)
    finally:
        task.cancel()
    # the first submit failed: nothing counted, the same correction sent on a later round
    assert [[e["op"] for e in b] for b in sent] == [["DELETE", "CREATE"]]
    assert c.corrected == 1
