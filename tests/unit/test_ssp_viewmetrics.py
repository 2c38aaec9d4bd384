"""ssp.viewmetrics: which rows a metrics tick writes, and that a failed write is retried."""

from __future__ import annotations

import asyncio
import tracemalloc
from typing import Any

import pytest
from surrealdb import RecordID

from ssp.viewmetrics import ViewMetrics
from tests.support.fakedb import FakeDb


async def test_only_changed_views_are_written_and_unregistered_rows_deleted() -> None:
    views = {"query:a": (RecordID("_00_query", "a"), 3), "query:b": (RecordID("_00_query", "b"), 1)}
    m = ViewMetrics("ssp-1", 100, views.get)
    db = FakeDb()
    assert await m.write(db) == 0 and db.queries == []  # nothing observed: nothing written
    m.observe("query:a", 10.0, 3, True)
    m.observe("query:a", 30.0, 1, False)
    m.observe("query:b", 5.0, 1, False)
    assert await m.write(db) == 2
    rows = db.queries[-1][1]["rows"]
    a = next(r for r in rows if r["view_id"] == "query:a")
    assert a["id"] == RecordID("_00_view_metrics", "a") and a["rows"] == 3
    assert a["updates"] == 2 and a["edge_ops"] == 4 and a["materialize_ms"] == 10.0
    assert a["publish_ms"] == {"p50": 10.0, "p99": 30.0, "max": 30.0, "samples": 2}
    calls = len(db.queries)
    assert await m.write(db) == 0 and len(db.queries) == calls  # quiet: no write
    del views["query:b"]
    assert await m.write(db) == 0
    assert db.queries[-1][1]["gone"] == [RecordID("_00_view_metrics", "b")]


async def test_a_failed_write_is_retried_at_the_next_tick() -> None:
    views = {"query:a": (RecordID("_00_query", "a"), 1)}
    m = ViewMetrics("ssp-1", 100, views.get)
    db = FakeDb()
    m.observe("query:a", 1.0, 1, False)
    db.fail = True
    assert await m.write(db) == 0 and m.last_error
    db.fail = False
    assert await m.write(db) == 1
    assert db.queries[-1][1]["rows"][0]["updates"] == 1


async def test_a_write_takes_at_most_the_cap_and_the_longest_waiting_views_go_first() -> None:
    from ssp.viewmetrics import MAX_ROWS_PER_WRITE

    n = MAX_ROWS_PER_WRITE * 2 + 100
    views = {f"query:v{i}": (RecordID("_00_query", f"v{i}"), 1) for i in range(n)}
    m = ViewMetrics("ssp-1", 100, views.get)
    db = FakeDb()
    for vid in views:
        m.observe(vid, 1.0, 1, False)
    seen: list[set[str]] = []
    for _ in range(3):
        assert await m.write(db) <= MAX_ROWS_PER_WRITE
        seen.append({r["view_id"] for r in db.queries[-1][1]["rows"]})
    assert [len(s) for s in seen] == [MAX_ROWS_PER_WRITE, MAX_ROWS_PER_WRITE, 100]
    assert set().union(*seen) == set(views)  # every view written once, none twice
    # Every view changes again: the ones written longest ago go first.
    for vid in reversed(list(views)):
        m.observe(vid, 2.0, 1, False)
    assert await m.write(db) == MAX_ROWS_PER_WRITE
    assert {r["view_id"] for r in db.queries[-1][1]["rows"]} == seen[0]


def test_a_views_figures_stay_the_same_size_under_steady_load() -> None:
    """A soak's hubs grew for minutes under a steady load: each view's last 256 waits were
    kept as float objects in a deque that grew with every commit up to the 256th (~8 KB per
    view). From its first commit on, a view's figures must not grow."""
    views = {f"query:v{i}": (RecordID("_00_query", f"v{i}"), 1) for i in range(200)}
    m = ViewMetrics("ssp-1", 100, views.get)
    for vid in views:
        m.observe(vid, 1.5, 1, True)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for k in range(300):  # more commits than the window holds
            for vid in views:
                m.observe(vid, 2.25 + k, 1, False)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # (counters past 256 become int objects of their own: ~100 bytes per view, once)
    assert grown < 200 * 256, f"200 views' figures grew {grown} bytes over 300 commits each"
    snap = m.snapshot("query:v0")
    assert snap is not None and snap["publish_ms"]["samples"] == 256
    assert snap["publish_ms"]["max"] == 301.25 and snap["updates"] == 301


async def test_writes_keep_to_their_share_of_the_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A metrics write that takes long (the database is busy) pushes the next one out so the
    writes take at most SHARE of the time; a quick one keeps the interval."""
    from ssp import viewmetrics

    clock = {"now": 0.0}
    rests: list[float] = []
    monkeypatch.setattr(viewmetrics.time, "monotonic", lambda: clock["now"])
    views = {"query:a": (RecordID("_00_query", "a"), 1)}
    m = ViewMetrics("ssp-1", 2000, views.get)
    took = iter([0.05, 3.0, 0.05])

    class TimedDb(FakeDb):
        async def query(self, sql: str, vars: Any = None, **kw: Any) -> list[Any]:
            if sql.startswith("FOR"):
                clock["now"] += next(took)
            return await super().query(sql, vars, **kw)

    real_sleep = asyncio.sleep

    async def sleep(secs: float) -> None:
        rests.append(secs)
        m.observe("query:a", 1.0, 1, False)  # every view changes between writes
        if len(rests) > 3:
            raise asyncio.CancelledError
        await real_sleep(0)

    monkeypatch.setattr(viewmetrics.asyncio, "sleep", sleep)
    with pytest.raises(asyncio.CancelledError):
        await m.run(TimedDb())
    # quick write: the interval; a 3 s write: 27 s of rest (10% of the time); quick again
    assert rests == [2.0, 2.0, pytest.approx(3.0 * (1 - viewmetrics.SHARE) / viewmetrics.SHARE),
                     2.0]
    assert m.writes == 3
