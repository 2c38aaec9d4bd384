"""The database's feed floor (`dbclient.feedfloor`): a cursor pinned to it never reads the
feed of the database a restore replaced, across resets; a snapshot or a saved scheduler
position below it is of that database. Issue 31: an SSP started cold within a few seconds
of a restore read the writes made just before it and published edges for rows the database
no longer held."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dbclient.feed import FeedCursor
from ssp.hub.loading import _snapshot_below
from tests.unit.test_dbclient_feed_sweep import MS, Clock, SimFeed, cursor, drain


async def test_a_pinned_cursor_reads_nothing_below_the_floor_even_after_a_reset() -> None:
    clock = Clock()
    feed = SimFeed(clock)
    for i in range(5):  # the replaced database's last writes, 1 s before the restore
        feed.commit(f"old{i}", vs_ms=clock.ms - 1000 + i)
    floor = clock.ms * MS
    clock.ms += 10
    feed.commit("restored")
    for pinned in (False, True):
        cur = cursor(clock, sweeping=True)  # a cold start: 5 s back
        if pinned:
            cur.pin(floor)
        got: list[str] = []
        await drain(cur, feed, got)
        assert got == (["restored"] if pinned else [f"old{i}" for i in range(5)] + ["restored"])
    cur.reset(floor - 3000 * MS)  # a re-clone's reset (the usual margin) keeps the pin
    got = []
    await drain(cur, feed, got)
    assert got == ["restored"] and cur.floor == floor
    cur.reset(floor + MS, floor=True)  # a restore's own reset: its base when higher
    assert cur.floor == floor + MS


def test_below_names_positions_of_the_replaced_database() -> None:
    cur = FeedCursor(100, overlap_vs=10)
    assert cur.below(101) and not cur.below(100)  # no table yet: the base
    cur.follow("a", 200)
    cur.follow("b", 150)
    assert cur.below(151) and not cur.below(150)
    assert _snapshot_below({"cursors": {"a": 200, "b": 150}}, 151)
    assert not _snapshot_below({"cursors": {"a": 200, "b": 150}}, 150)
    assert not _snapshot_below({"cursors": {"a": 1}}, 0)  # never restored


async def no_tables() -> list[str]:
    return []


class FloorDb:
    """`read_floor`'s one query, answered with the floor the test sets."""

    def __init__(self, floor: int) -> None:
        self.floor = floor

    async def query_one(self, sql: str, *a: Any, **kw: Any) -> list[int]:
        assert "_00_feed_floor" in sql
        return [self.floor] if self.floor else []


async def test_a_saved_scheduler_position_below_the_floor_is_a_gap(tmp_path: Path) -> None:
    from scheduler.feed import ChangefeedTail

    async def submit(*a: Any) -> None:
        raise AssertionError("nothing is read past a gap")

    state = tmp_path / "cursor.json"
    tail = ChangefeedTail(FloorDb(0), submit, state, tables=no_tables)  # type: ignore[arg-type]
    tail.cursor.follow("post", 1000 * MS)
    await tail._persist()
    saved_floor = 2000 * MS  # a restore ran after that position was saved
    tail = ChangefeedTail(FloorDb(saved_floor), submit, state,  # type: ignore[arg-type]
                          tables=no_tables)
    assert await tail.catch_up() == 0
    assert tail.gap and "restored" in (tail.last_error or "")
    assert tail.cursor.floor == saved_floor  # the re-clone's reset keeps it
    await tail.reset(1500)
    assert not tail.gap and tail.cursor.floor == saved_floor
    # A cold start (no saved position) below the floor is only its margin: pinned, no gap.
    db: Any = FloorDb(saved_floor)
    fresh = ChangefeedTail(db, submit, tmp_path / "new.json", tables=no_tables)
    assert await fresh._check_floor() is False and fresh.cursor.floor == saved_floor
