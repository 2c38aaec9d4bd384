"""The standalone SSP's changefeed tail reads only the last 100 ms of the feed each round and
sweeps the whole re-read window apart, as the scheduler's tail does: a commit that shows late
on a quiet feed still arrives (at the owed sweep), new changes never wait behind a sweep, and
a sweep read before a cursor reset (a restore) is dropped.

The database is simulated so that the test decides when a commit becomes visible (a real engine
shows a late commit only by chance); the end-to-end standalone paths run against the real
engine in `tests/integration/test_feed_cursor_restart.py` and the edges differential test."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from ssp.hub import state as state_mod
from ssp.hub import tail as tail_mod
from ssp.hub.tail import FeedTail
from tests.support.feedsim import MS, SimDb, SlowSweepDb


def quiet_tail(db: SimDb, got: list[str], monkeypatch: pytest.MonkeyPatch) -> FeedTail:
    """A standalone tail over `db` following table `t`, with its poll a minute away: only
    wake-ups and sweeps read. Its events' ids go to `got`."""
    monkeypatch.setattr(tail_mod, "FEED_POLL_SECS", 60.0)

    class Sequencer:
        async def submit(self, events: list[Any], *, defer: bool = False) -> None:
            got.extend(e[2] for e in events)

    cursor = state_mod.feed_cursor(0)  # as the hub makes it
    cursor.follow("t", (time.time_ns() // 1_000_000 - 5000) * MS)
    state = SimpleNamespace(db=db, views={}, cursor=cursor)
    return FeedTail(state, Sequencer(), SimpleNamespace())  # type: ignore[arg-type]


async def _until(pred: Any) -> None:
    while not pred():
        await asyncio.sleep(0.01)


async def test_a_late_commit_on_a_quiet_feed_arrives_at_the_owed_sweep(
        monkeypatch: pytest.MonkeyPatch) -> None:
    db = SimDb()
    got: list[str] = []
    tail = quiet_tail(db, got, monkeypatch)
    task = asyncio.create_task(tail.run())
    try:
        await asyncio.wait_for(_until(lambda: db.reads >= 1), 10)  # the first read sweeps
        db.show("first")
        tail._wake.set()
        await asyncio.wait_for(_until(lambda: got == ["t:first"]), 10)  # a short read
        # committed 500 ms ago, visible only now: past the 100 ms short re-read, within 2 s;
        # nothing rings, and the next poll is a minute away
        db.show("late", ms_ago=500)
        await asyncio.wait_for(_until(lambda: "t:late" in got),
                               5 * state_mod.FEED_SWEEP_SECS)
        assert got == ["t:first", "t:late"] and tail.sweeps >= 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_new_changes_arrive_while_a_sweep_is_still_reading(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31: a round re-read the whole 2 s window; under load each read returned ~1,000
    seen changes. Now a round re-reads 100 ms, the sweep reads apart: a change committed while
    a sweep hangs arrives at once, and the late commit the sweep was for arrives when it ends,
    once."""
    db = SlowSweepDb()
    got: list[str] = []
    db.release.set()  # the first read reads the whole window (it marks the table)
    db.show("zero")
    tail = quiet_tail(db, got, monkeypatch)
    task = asyncio.create_task(tail.run())
    try:
        await asyncio.wait_for(_until(lambda: "t:zero" in got), 10)
        await asyncio.wait_for(_until(lambda: tail.sweeps >= 1 or not tail._sweep_owed), 10)
        db.release.clear()
        db.sweeping.clear()
        db.show("first")
        tail._wake.set()
        await asyncio.wait_for(_until(lambda: "t:first" in got), 10)
        db.show("late", ms_ago=500)  # only a sweep finds it
        await asyncio.wait_for(db.sweeping.wait(), 5 * state_mod.FEED_SWEEP_SECS)
        for key in ("during1", "during2"):  # the sweep hangs; new changes still come
            db.show(key)
            tail._wake.set()
            await asyncio.wait_for(_until(lambda k=key: f"t:{k}" in got), 10)
        assert "t:late" not in got
        db.release.set()
        await asyncio.wait_for(_until(lambda: "t:late" in got), 10)
        sweeps = tail.sweeps
        await asyncio.wait_for(_until(lambda: tail.sweeps > sweeps or not tail._sweep_owed), 10)
        assert sorted(got) == sorted(["t:zero", "t:first", "t:during1", "t:during2",
                                      "t:late"])
    finally:
        db.release.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_round_reads_only_the_short_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rounds over a feed with many commits in the last second return only what is new and
    the last 100 ms, not the whole 2 s window again (the cost before: every set of the window,
    every round)."""
    db = SimDb()
    got: list[str] = []
    tail = quiet_tail(db, got, monkeypatch)
    for i in range(200):  # the last second's commits, spread over it
        db.show(f"old{i}", ms_ago=1000 - i * 5)
    await tail.catch_up()  # the first round reads (and marks) the whole window
    assert len(got) == 200
    db.read_sets = 0
    for i in range(10):
        db.show(f"new{i}")
        await tail.round()
    assert len(got) == 210
    # each round returned its new set and the few of the last 100 ms, never the 200 again
    assert db.read_sets < 10 * 40, db.read_sets


async def test_a_sweep_read_before_a_reset_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A restore resets the cursor (`ssp.hub.backups`) while a sweep may be reading the old
    database's feed: that sweep must not apply or mark anything."""
    db = SlowSweepDb()
    got: list[str] = []
    db.release.set()
    tail = quiet_tail(db, got, monkeypatch)
    await tail.catch_up()
    db.show("old", ms_ago=500)
    db.release.clear()

    async def sweep_in_task() -> int:
        return await tail.sweep()

    sweeping = asyncio.create_task(sweep_in_task(), name="changefeed-sweep")
    await asyncio.wait_for(db.sweeping.wait(), 10)
    tail.state.cursor.reset((time.time_ns() // 1_000_000) * MS, floor=True)
    tail.state.cursor.follow("t", (time.time_ns() // 1_000_000) * MS)
    db.release.set()
    assert await sweeping == 0
    assert got == [] and tail.state.cursor.marks == {} and tail.state.cursor.seen == {}
