"""Changefeed entries -> row-change events, retention text, the re-read window (no database)."""

from __future__ import annotations

import json
from pathlib import Path

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
