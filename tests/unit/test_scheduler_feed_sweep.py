"""The scheduler's changefeed tail owes a sweep after short reads: a commit that shows late
on a quiet feed (no doorbell rings for it, the poll is far off) still arrives, at the next
sweep rather than at the next poll.

The database is simulated so that the test decides when a commit becomes visible (a real engine
shows a late commit only by chance)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from scheduler import feed as feed_mod
from scheduler.feed import ChangefeedTail
from tests.support.feedsim import SimDb, SlowSweepDb


def quiet_tail(db: SimDb, tmp_path: Path, got: list[str], arrived: asyncio.Event
               ) -> ChangefeedTail:
    """A tail over `db` that hands its events' ids to `got` (and sets `arrived`), with no
    doorbell and a poll a minute away: only wake-ups and sweeps read."""

    async def submit(events: list[dict[str, Any]]) -> list[int]:
        got.extend(e["id"] for e in events)
        arrived.set()
        return list(range(len(events)))

    async def tables() -> list[str]:
        return ["t"]

    return ChangefeedTail(db, submit, tmp_path / "cursor.json", tables,  # type: ignore[arg-type]
                          poll_secs=60.0, doorbell_table=None)


async def test_a_late_commit_on_a_quiet_feed_arrives_at_the_owed_sweep(tmp_path: Path) -> None:
    db = SimDb()
    got: list[str] = []
    arrived = asyncio.Event()
    tail = quiet_tail(db, tmp_path, got, arrived)
    await tail.start()
    try:
        await asyncio.wait_for(_until(lambda: tail.rounds >= 1), 10)  # the first read sweeps
        db.show("first")
        tail.wake()
        await asyncio.wait_for(arrived.wait(), 10)  # a short read
        arrived.clear()
        # committed 500 ms ago, visible only now: past the 100 ms short re-read, within 2 s;
        # nothing rings, and the next poll is a minute away
        db.show("late", ms_ago=500)
        await asyncio.wait_for(arrived.wait(), 5 * feed_mod.FEED_SWEEP_SECS)
        assert got == ["t:first", "t:late"]
    finally:
        await tail.stop()


async def test_new_changes_arrive_while_a_sweep_is_still_reading(tmp_path: Path) -> None:
    """Issue 31: a sweep re-reads 2 s of every table's feed; under load that read took over a
    second, and new changes waited behind it. Now the sweep reads apart from the short reads:
    a change committed while a sweep hangs arrives at once, and the late commit the sweep
    was for arrives when it ends, once."""
    db = SlowSweepDb()
    got: list[str] = []
    arrived = asyncio.Event()
    db.release.set()  # the first read reads the whole window (it marks the table)
    db.show("zero")
    tail = quiet_tail(db, tmp_path, got, arrived)
    await tail.start()
    try:
        await asyncio.wait_for(_until(lambda: "t:zero" in got), 10)
        await asyncio.wait_for(_until(lambda: tail.sweeps >= 1 or not tail._sweep_owed), 10)
        db.release.clear()
        db.sweeping.clear()
        db.show("first")
        tail.wake()
        await asyncio.wait_for(arrived.wait(), 10)
        arrived.clear()
        db.show("late", ms_ago=500)  # only a sweep finds it
        await asyncio.wait_for(db.sweeping.wait(), 5 * feed_mod.FEED_SWEEP_SECS)
        for key in ("during1", "during2"):  # the sweep hangs; new changes still come
            db.show(key)
            tail.wake()
            await asyncio.wait_for(_until(lambda k=key: f"t:{k}" in got), 10)
        assert "t:late" not in got
        db.release.set()
        await asyncio.wait_for(_until(lambda: "t:late" in got), 10)
        await asyncio.wait_for(_until(lambda: tail.sweeps >= 2), 10)
        assert sorted(got) == sorted(["t:zero", "t:first", "t:during1", "t:during2",
                                      "t:late"])
    finally:
        db.release.set()
        await tail.stop()


async def test_the_cursor_file_is_written_at_most_every_persist_interval(
        tmp_path: Path, monkeypatch: Any) -> None:
    """A round per change no longer writes (fsync, rename) the cursor file per round: at most
    every `CURSOR_PERSIST_SECS` while changes flow, and the last position when it stops."""
    writes: list[float] = []
    real = feed_mod._atomic_write

    def counted(path: Path, text: str) -> None:
        writes.append(time.monotonic())
        real(path, text)

    monkeypatch.setattr(feed_mod, "_atomic_write", counted)
    db = SimDb()
    got: list[str] = []

    async def submit(events: list[dict[str, Any]]) -> list[int]:
        got.extend(e["id"] for e in events)
        return list(range(len(events)))

    async def tables() -> list[str]:
        return ["t"]

    tail = ChangefeedTail(db, submit, tmp_path / "cursor.json", tables,  # type: ignore[arg-type]
                          poll_secs=60.0, doorbell_table=None)
    began = time.monotonic()
    for i in range(60):
        db.show(f"k{i}")
        assert await tail.catch_up() == 1
    elapsed = time.monotonic() - began
    assert len(got) == 60
    assert 1 <= len(writes) <= 2 + elapsed / feed_mod.CURSOR_PERSIST_SECS
    assert len(writes) < 60
    await tail.start()
    await tail.stop()  # the stop writes the last position
    saved = json.loads((tmp_path / "cursor.json").read_text())
    assert saved["cursors"]["t"] == tail.cursor.cursors["t"]


async def _until(pred: Any) -> None:
    while not pred():
        await asyncio.sleep(0.01)
