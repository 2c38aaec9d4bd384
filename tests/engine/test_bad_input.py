"""Malformed calls get a clear error (ValueError / QueryRejected) and leave the engine intact."""

from __future__ import annotations

from typing import Any

import pytest
from surrealdb import RecordID

from tests.engine.runner import engine_api

BAD_EVENTS: list[tuple[Any, ...]] = [
    ("user", "UPSERT", "user:1", {"id": RecordID("user", 1), "age": 1}),
    ("user", "update", "user:1", {"id": RecordID("user", 1), "age": 1}),
    ("user", "UPDATE", "thread:1", {"id": RecordID("thread", 1), "age": 1}),
    ("user", "UPDATE", "not an id", {"age": 1}),
    ("user", "UPDATE", "", {"age": 1}),
    ("user", "UPDATE", "user:1", None),
    ("user", "CREATE", "user:2", "not a row"),
    ("user", "CREATE", "user:2", ["not", "a", "row"]),
    (5, "CREATE", "user:2", {"id": RecordID("user", 2), "age": 1}),
    ("user", "CREATE", 7, {"age": 1}),
    ("user", None, "user:2", {"id": RecordID("user", 2), "age": 1}),
]


def _engine() -> Any:
    view_engine, _ = engine_api()
    eng = view_engine()
    eng.load("user", [{"id": RecordID("user", 1), "age": 5}])
    eng.register("v", "SELECT * FROM user WHERE age > 2", {})
    return eng


@pytest.mark.parametrize("event", BAD_EVENTS, ids=[repr(e[1:3]) + type(e[3]).__name__
                                                   for e in BAD_EVENTS])
def test_malformed_event_raises_value_error_and_changes_nothing(event: tuple[Any, ...]) -> None:
    eng = _engine()
    before = eng.table_hash("user")
    with pytest.raises(ValueError) as info:
        eng.ingest(*event)
    assert str(info.value)
    assert eng.table_hash("user") == before and eng.table_count("user") == 1
    assert set(eng.members("v")) == {"user:1"}


@pytest.mark.parametrize("event", BAD_EVENTS[:4])
def test_malformed_event_in_a_batch_raises_value_error(event: tuple[Any, ...]) -> None:
    eng = _engine()
    with pytest.raises(ValueError):
        eng.ingest_batch([event])
    assert set(eng.members("v")) == {"user:1"}


@pytest.mark.parametrize("surql", [None, 5, b"SELECT * FROM user", "   "])
def test_register_rejects_a_non_query(surql: Any) -> None:
    view_engine, query_rejected = engine_api()
    eng = view_engine()
    with pytest.raises(query_rejected):
        eng.register("v", surql, {})
