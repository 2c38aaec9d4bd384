"""The collector and the engine (engine.gcpolicy): no collection starts inside an entry point
whatever the process's thresholds, what the calls keep is frozen out of the collector's
reach, and the engine's structures free themselves without it (no cycle left behind)."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from surrealdb import RecordID

from engine import ViewEngine, gcpolicy

VIEWS: list[tuple[str, dict[str, Any]]] = [
    ("SELECT * FROM thread WHERE score > $min", {"min": 3}),
    ("SELECT id, title, score FROM thread WHERE author = $auth.id ORDER BY score DESC LIMIT 3",
     {"auth": {"id": RecordID("user", 1)}}),
    ("SELECT * FROM thread WHERE author.name = 'u1'", {}),
    ("SELECT *, (SELECT id, n FROM comment WHERE thread = $parent.id ORDER BY n DESC LIMIT 2)"
     " AS cs FROM thread WHERE score >= $min", {"min": 0}),
    ("SELECT id, (SELECT id, n FROM comment WHERE author = $parent.author ORDER BY n LIMIT 2)"
     " AS same, (SELECT id, name FROM user WHERE id = $parent.author LIMIT 1)[0] AS a, "
     "author.* AS arow FROM thread", {}),
    ("SELECT id, author FROM thread WHERE score < 50 FETCH author", {}),
    ("SELECT id, (SELECT id, score FROM thread ORDER BY score DESC LIMIT 2) AS top FROM user",
     {}),
]


def _rows() -> dict[str, list[dict[str, Any]]]:
    return {
        "user": [{"id": RecordID("user", i), "name": f"u{i}"} for i in range(5)],
        "thread": [{"id": RecordID("thread", i), "title": f"t{i}", "score": i % 17,
                    "author": RecordID("user", i % 5)} for i in range(100)],
        "comment": [{"id": RecordID("comment", i), "thread": RecordID("thread", i % 100),
                     "author": RecordID("user", i % 5), "n": i % 7} for i in range(300)],
    }


def _use(e: ViewEngine) -> None:
    for table, rows in _rows().items():
        e.load(table, rows)
    for i, (q, p) in enumerate(VIEWS):
        e.register(f"v{i}", q, p)
    e.complete()
    for i in range(30):
        e.ingest("comment", "UPDATE", f"comment:{i}", {"id": RecordID("comment", i),
                 "thread": RecordID("thread", (i * 7) % 100), "author": RecordID("user", 1),
                 "n": i})
        e.ingest_batch([("thread", "UPDATE", f"thread:{i}", {
            "id": RecordID("thread", i), "title": "x", "score": (i * 5) % 17,
            "author": RecordID("user", (i + 1) % 5)}),
            ("user", "UPDATE", "user:1", {"id": RecordID("user", 1), "name": f"n{i}"})])
    e.ingest("thread", "DELETE", "thread:3", None)


@pytest.fixture
def eager_collector() -> Iterator[None]:
    """CPython's collector made more eager than its defaults (700, 10, 10)."""
    old = gc.get_threshold()
    gc.set_threshold(100, 3, 3)
    try:
        yield
    finally:
        gc.set_threshold(*old)


def _collections_per_call(run: Callable[[ViewEngine], None]) -> list[int]:
    """How many collections started during each engine call ``run`` makes."""
    counting: list[int] = []
    per_call: list[int] = []

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and counting:
            counting[0] += 1

    e = ViewEngine()
    calls = ("load", "register", "unregister", "ingest", "ingest_batch", "complete")
    wrapped: dict[str, Callable[..., Any]] = {}
    for name in calls:
        method = getattr(e, name)

        def call(*a: Any, _m: Callable[..., Any] = method) -> Any:
            counting.append(0)
            try:
                return _m(*a)
            finally:
                per_call.append(counting.pop())

        wrapped[name] = call
    gc.callbacks.append(callback)
    try:
        run(_Calls(wrapped))  # type: ignore[arg-type]
    finally:
        gc.callbacks.remove(callback)
    return per_call


class _Calls:
    def __init__(self, calls: dict[str, Callable[..., Any]]) -> None:
        self.__dict__.update(calls)


def test_no_collection_runs_inside_an_entry_point(eager_collector: None) -> None:
    # the first allocation of a call, before the engine pauses the collector, may still
    # start one (with these thresholds, about any call's does)
    per_call = _collections_per_call(_use)
    assert len(per_call) > 50
    assert max(per_call) <= 1


def test_without_the_pause_collections_run_inside(eager_collector: None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # the check above can fail: the same calls, the pause made a no-op
    monkeypatch.setattr(gcpolicy, "pause", lambda: -1)
    assert max(_collections_per_call(_use)) > 10


def test_what_the_calls_keep_is_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gcpolicy, "FREEZE_AFTER", 1_000)
    gc.unfreeze()
    e = ViewEngine()
    _use(e)
    assert gc.get_freeze_count() > 5_000
    e.close()
    gc.unfreeze()


def test_collector_stays_off_when_the_caller_stopped_it() -> None:
    gc.disable()
    try:
        e = ViewEngine()
        e.load("user", _rows()["user"])
        e.register("v", "SELECT * FROM user", {})
        assert not gc.isenabled()
    finally:
        gc.enable()
    e.register("w", "SELECT * FROM user", {})
    assert gc.isenabled()


def _engine_garbage() -> list[str]:
    """Type names of engine objects only the cyclic collector could free."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = sorted({type(o).__name__ for o in gc.garbage
                        if type(o).__module__.startswith("engine")})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return found


def test_an_engine_going_away_leaves_no_cycle() -> None:
    gc.collect()
    e = ViewEngine()
    _use(e)
    del e
    assert _engine_garbage() == []


def test_unregistering_every_view_leaves_no_cycle() -> None:
    gc.collect()
    e = ViewEngine()
    _use(e)
    for v in e.view_ids():
        e.unregister(v)
    assert _engine_garbage() == []
    assert e.view_ids() == []
    e.register("again", VIEWS[3][0], VIEWS[3][1])
    assert "thread:10" in e.members("again")
