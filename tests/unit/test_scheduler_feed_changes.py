"""Changefeed entries -> row-change events, retention text, the re-read window, stopping the
tail (no database)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from surrealdb import RecordID

from dbclient.feed import feed_change, trim_seen
from scheduler.feed import ChangefeedTail, _event, disabled_status, feed_retention_ms

POST1 = RecordID("post", 1)


def test_a_created_row_is_a_create_with_the_whole_row() -> None:
    row = {"id": POST1, "_00_rv": 1, "t": "a"}
    assert feed_change("post", {"update": row}) == ("post", "CREATE", "post:1", row)


def test_an_updated_row_is_an_update_and_the_patches_are_dropped() -> None:
    row = {"id": POST1, "_00_rv": 2, "t": "b"}
    ch = {"current": row, "update": [{"op": "replace", "path": "/t", "value": "a"}]}
    assert feed_change("post", ch) == ("post", "UPDATE", "post:1", row)


def test_a_delete_carries_the_original_row_or_just_the_id() -> None:
    orig = {"id": POST1, "_00_rv": 2}
    assert feed_change("post", {"delete": {"id": POST1, "original": orig}}) == (
        "post", "DELETE", "post:1", orig)
    bare = feed_change("post", {"delete": {"id": POST1}})
    assert bare == ("post", "DELETE", "post:1", None)
    assert _event(*bare) == {"table": "post", "op": "DELETE", "id": "post:1",
                             "record": {"id": POST1}}


@pytest.mark.parametrize("entry", [{"define_table": {"name": "post"}},
                                   {"update": {"t": "no id"}}, {"delete": {"id": "post:1"}}])
def test_schema_entries_and_rows_without_a_record_id_are_skipped(entry: dict) -> None:
    assert feed_change("post", entry) is None


@pytest.mark.parametrize(("text", "ms"), [
    ("DEFINE TABLE t TYPE ANY SCHEMALESS CHANGEFEED 1h INCLUDE ORIGINAL", 3_600_000),
    ("DEFINE TABLE t CHANGEFEED 1d2h PERMISSIONS NONE", 93_600_000),
    ("DEFINE TABLE t CHANGEFEED 30s", 30_000),
    ("DEFINE TABLE t SCHEMALESS", None),
    ("DEFINE TABLE t CHANGEFEED soon", None),
])
def test_retention_is_read_from_the_table_definition(text: str, ms: int | None) -> None:
    assert feed_retention_ms(text) == ms


def test_seen_stamps_below_the_re_read_window_are_forgotten() -> None:
    seen = {"post": {100, 5000, 9000}}
    trim_seen(seen, {"post": 9000}, 4000)
    assert seen == {"post": {5000, 9000}}


def test_the_status_object_has_exactly_the_spec_fields(tmp_path: Path) -> None:
    fields = {"enabled", "cursor_ms", "lag_ms", "records_1m", "doorbell", "doorbell_reconnects",
              "gap", "stalled", "last_error"}
    assert set(disabled_status()) == fields and disabled_status()["enabled"] is False

    async def tables() -> list[str]:
        return []

    async def submit(events: list[dict]) -> list[int]:
        return []

    tail = ChangefeedTail(None, submit, tmp_path / "c.json", tables)  # type: ignore[arg-type]
    st = tail.status()
    assert set(st) == fields and st["enabled"] is True and st["stalled"] is False


def test_the_saved_cursor_is_loaded_and_a_damaged_file_is_refused(tmp_path: Path) -> None:
    async def tables() -> list[str]:
        return []

    async def submit(events: list[dict]) -> list[int]:
        return []

    path = tmp_path / "c.json"
    path.write_text(json.dumps({"version": 1, "base": 7 << 16, "cursors": {"post": 9 << 16},
                                "seen": {"post": [9 << 16]}, "synced_ms": 8}))
    tail = ChangefeedTail(None, submit, path, tables)  # type: ignore[arg-type]
    cur = tail.cursor
    assert (cur.base, cur.cursors, cur.seen, tail.synced_ms) == (
        7 << 16, {"post": 9 << 16}, {"post": {9 << 16}}, 8)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="unreadable"):
        ChangefeedTail(None, submit, path, tables)  # type: ignore[arg-type]


class _NoFeedDb:
    async def table_definitions(self) -> dict[str, str]:
        return {}

    async def query_one(self, sql: str, *a: Any, **kw: Any) -> list[Any]:
        assert "_00_feed_floor" in sql  # the feed floor (never restored)
        return []


async def test_stop_ends_the_loop_when_the_cancel_lands_as_its_wait_completes(
        tmp_path: Path) -> None:
    """A doorbell ring just before a restore's hold: the loop's wait for it completes in the
    same turn as stop()'s cancel, and Python 3.11's wait_for loses that cancel. stop() must
    still end the loop, not wait for it forever (the restore stuck at main_db)."""
    async def tables() -> list[str]:
        return []

    async def submit(events: list[dict]) -> list[int]:
        return []

    tail = ChangefeedTail(_NoFeedDb(), submit, tmp_path / "c.json", tables,  # type: ignore[arg-type]
                          doorbell_table=None, poll_secs=60)
    await tail.start()
    task = tail._task
    assert task is not None
    async with asyncio.timeout(10):
        while tail._persisted_synced == float("-inf"):  # one catch-up done and persisted
            await asyncio.sleep(0.01)
    for _ in range(3):  # ... and the loop parked in its wait for the doorbell
        await asyncio.sleep(0)
    tail.wake()
    await asyncio.sleep(0)  # the wait completes; the loop has not resumed yet
    guard = asyncio.timeout(10)  # a hang guard: the old stop() returned only when it fired
    async with guard:
        await tail.stop()
    assert not guard.expired(), "stop() waited on a loop that lost its cancel"
    assert task.done() and task.cancelled()
    assert tail._task is None
