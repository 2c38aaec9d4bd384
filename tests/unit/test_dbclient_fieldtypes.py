"""Field kinds from `INFO FOR TABLE` and the per-table cache the scheduler types JSON rows with."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from surrealdb import RecordID

from dbclient.fieldtypes import FieldTypes, field_kinds, restore_types
from tests.support.fakedb import FakeDb
from timetext.timestamps import parse_timestamp

INFO = {"fields": {
    "owner": "DEFINE FIELD owner ON post TYPE record<user> PERMISSIONS FULL",
    "editor": "DEFINE FIELD editor ON post TYPE none | record<user> PERMISSIONS FULL",
    "at": "DEFINE FIELD at ON post TYPE datetime PERMISSIONS FULL",
    "seen": "DEFINE FIELD seen ON post TYPE option<datetime> PERMISSIONS FULL",
    "title": "DEFINE FIELD title ON post TYPE string PERMISSIONS FULL",
    "free": "DEFINE FIELD free ON post PERMISSIONS FULL",
}}


def test_links_and_datetimes_are_found_whatever_the_option_spelling() -> None:
    assert field_kinds(INFO) == {"owner": "record", "editor": "record", "at": "datetime",
                                 "seen": "datetime"}
    assert field_kinds({}) == {}


def test_a_json_row_gets_its_types_back_and_untyped_fields_stay_text() -> None:
    out = restore_types("post", "post:1", {"owner": "user:alice", "at": "2025-01-31T12:00:00Z",
                                           "title": "user:bob", "seen": "not a date"},
                        field_kinds(INFO), parse_datetime=parse_timestamp)
    assert out == {"id": RecordID("post", 1), "owner": RecordID("user", "alice"),
                   "at": datetime(2025, 1, 31, 12, tzinfo=UTC), "title": "user:bob",
                   "seen": "not a date"}
    with pytest.raises(ValueError, match="not in table"):
        restore_types("post", "user:1", {}, {}, parse_datetime=parse_timestamp)


async def test_kinds_are_read_once_per_refresh_and_kept_when_a_read_fails() -> None:
    db = FakeDb(info=INFO, delay=0.01)
    ft = FieldTypes(db, refresh_secs=3600,  # type: ignore[arg-type]
                    parse_datetime=parse_timestamp)
    got = await asyncio.gather(*(ft.kinds("post") for _ in range(5)))
    assert all(g == field_kinds(INFO) for g in got) and db.info_calls == 1
    ft.forget("post")
    db.fail = True
    assert await ft.kinds("post") == {}  # nothing before it: the row stays as sent
    assert ft.failures == 1
    db.fail = False
    ft.forget()
    assert await ft.kinds("post") == field_kinds(INFO)
    ft.refresh_secs = 0
    db.fail = True
    assert await ft.kinds("post") == field_kinds(INFO)  # the previous answer is kept
    assert (await ft.restore("post", "post:1", {"owner": "user:a"}))["owner"] == RecordID(
        "user", "a")
