"""`dbclient.feed.FeedCursor` with sweeps: reads re-read only a short overlap, and the rest of
the re-read window is swept in slices. A commit that becomes visible late (up to the window)
must still be delivered, exactly once; the old cursor (no sweeps) is the reference.

The feed is simulated so that the test decides when each commit becomes visible: a real engine
shows a late commit only by chance. Versionstamps follow the engine's (ms << 16), and the
simulated clock drives both the commits and the cursor's sweep timer.
"""

from __future__ import annotations

import bisect
import itertools
import random
from typing import Any

import pytest
from surrealdb import RecordID

from dbclient.feed import FeedCursor

MS = 1 << 16
WINDOW = 2000 * MS


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> float:
        return self.ms / 1000


class SimFeed:
    """`Database.changes` over commits that show at a time of the test's choosing."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.commits: list[tuple[int, int, str]] = []  # (vs, shows at ms, key)
        self.reads = 0
        self.entries_read = 0

    def commit(self, key: str, *, vs_ms: int | None = None, late_ms: int = 0) -> None:
        at = self.clock.ms if vs_ms is None else vs_ms
        self.commits.append((at * MS + len(self.commits) % MS, at + late_ms, key))

    async def changes(self, table: str | None, since: int, limit: int = 1000) -> list[Any]:
        assert table is None
        self.reads += 1
        # commits are appended in versionstamp order
        first = bisect.bisect_left(self.commits, (since, -1, ""))
        shown = []
        for vs, shows, key in itertools.islice(self.commits, first, None):
            if shows <= self.clock.ms:
                shown.append((vs, key))
                if len(shown) == limit:
                    break
        self.entries_read += len(shown)
        return [{"versionstamp": vs,
                 "changes": [{"update": {"id": RecordID("t", key), "k": key}}]}
                for vs, key in shown]


async def drain(cur: FeedCursor, feed: SimFeed, got: list[str]) -> None:
    """Read rounds until the cursor is caught up, as the scheduler's tail does."""
    while True:
        rnd = await cur.read(feed, ["t"])  # type: ignore[arg-type]
        for _vs, _t, s in rnd.sets:
            got += [ch["update"]["k"] for ch in s["changes"]]
        cur.advance(rnd, ["t"])
        if not rnd.more:
            return


async def late_among_short_reads(cur: FeedCursor, feed: SimFeed, clock: Clock, got: list[str],
                                 reader: Any) -> None:
    """A commit that shows 500 ms late among 2 s of commits read every 10 ms by `reader`."""
    await reader(cur, feed, got)  # the first read reads the whole window and marks it
    feed.commit("x")
    clock.ms += 10
    feed.commit("late", late_ms=500)
    for _ in range(200):
        clock.ms += 10
        feed.commit("y")
        await reader(cur, feed, got)


def cursor(clock: Clock, *, sweeping: bool) -> FeedCursor:
    return FeedCursor((clock.ms - 5000) * MS, limit=50, overlap_vs=WINDOW,
                      short_vs=50 * MS if sweeping else None, sweep_secs=0.5, clock=clock)


async def test_a_commit_visible_late_is_delivered_by_a_sweep_not_by_the_short_reads() -> None:
    clock = Clock()
    feed = SimFeed(clock)
    cur = cursor(clock, sweeping=True)
    got: list[str] = []
    for i in range(20):  # a steady feed, read every 10 ms
        feed.commit(f"a{i}")
        clock.ms += 10
        await drain(cur, feed, got)
    # committed (versionstamp) now, visible only 1.5 s later: within the window
    feed.commit("late", late_ms=1500)
    for i in range(300):
        feed.commit(f"b{i}")
        clock.ms += 10
        await drain(cur, feed, got)
        if clock.ms - (feed.commits[20][0] >> 16) < 1500 + 200:
            assert "late" not in got  # not visible yet, or only the short reads ran
    assert got.count("late") == 1
    assert sorted(got) == sorted(k for _vs, _s, k in feed.commits)


async def test_without_the_sweep_a_late_commit_would_be_lost() -> None:
    """The same late commit with sweeps that never come: the short reads alone miss it (so the
    test above fails if the sweep is dropped)."""
    clock = Clock()
    feed = SimFeed(clock)
    cur = cursor(clock, sweeping=True)
    cur.sweep_secs = float("inf")
    got: list[str] = []
    await late_among_short_reads(cur, feed, clock, got, drain)
    assert "late" not in got


@pytest.mark.parametrize("seed", range(6))
async def test_random_lateness_within_the_window_loses_nothing_and_repeats_nothing(
        seed: int) -> None:
    rng = random.Random(seed)
    clock = Clock()
    feed = SimFeed(clock)
    old, new = cursor(clock, sweeping=False), cursor(clock, sweeping=True)
    got_old: list[str] = []
    got_new: list[str] = []
    for i in range(800):
        for _ in range(rng.randrange(0, 6)):
            late = rng.choice([0, 0, 0, 0, rng.randrange(1, 60), rng.randrange(60, 1900),
                               rng.randrange(1900, 2000)])
            feed.commit(f"k{len(feed.commits)}", late_ms=late)
        clock.ms += rng.choice([1, 5, 10, 30, 120])
        if i % 97 == 0:  # a restart from the persisted state now and then
            new = FeedCursor.from_state(new.state(), limit=50, overlap_vs=WINDOW,
                                        short_vs=50 * MS, sweep_secs=0.5)
            new._clock = clock
        await drain(new, feed, got_new)
        await drain(old, feed, got_old)
    clock.ms += 2500  # everything shows; reads go on until the last sweeps ran
    for _ in range(4):
        clock.ms += 300
        await drain(new, feed, got_new)
        await drain(old, feed, got_old)
    every = sorted(k for _vs, _s, k in feed.commits)
    assert sorted(got_old) == every
    assert sorted(got_new) == every  # nothing lost, nothing twice


async def test_sweeping_reads_far_fewer_entries_than_re_reading_the_window() -> None:
    counts = {}
    for sweeping in (False, True):
        clock = Clock()
        feed = SimFeed(clock)
        cur = cursor(clock, sweeping=sweeping)
        got: list[str] = []
        for _ in range(500):  # 500 commits/s, a read every 4 ms
            feed.commit(f"k{len(feed.commits)}")
            feed.commit(f"k{len(feed.commits)}")
            clock.ms += 4
            await drain(cur, feed, got)
        assert len(got) == 1000
        counts[sweeping] = feed.entries_read
    assert counts[True] * 5 < counts[False], counts


async def test_sparse_reads_read_no_more_than_re_reading_the_window_did() -> None:
    """Reads further apart than the window: every read sweeps, as the old reads did, rather
    than short reads whose changes the next sweep would read again."""
    counts = {}
    for sweeping in (False, True):
        clock = Clock()
        feed = SimFeed(clock)
        cur = cursor(clock, sweeping=sweeping)
        cur.limit = 1000  # one round per read
        got: list[str] = []
        for _ in range(12):  # 50 commits/s, a read every 2.5 s
            for _ in range(125):
                feed.commit(f"k{len(feed.commits)}")
                clock.ms += 20
            await drain(cur, feed, got)
        assert len(got) == 1500
        counts[sweeping] = feed.entries_read
    assert counts[True] <= counts[False], counts


async def drain_short(cur: FeedCursor, feed: SimFeed, got: list[str]) -> None:
    """Rounds that never sweep (the scheduler's tail, whose sweeps run apart)."""
    while True:
        rnd = await cur.read(feed, ["t"], sweeps=False)  # type: ignore[arg-type]
        for _vs, _t, s in rnd.sets:
            got += [ch["update"]["k"] for ch in s["changes"]]
        cur.advance(rnd, ["t"])
        if not rnd.more:
            return


@pytest.mark.parametrize("seed", range(6))
async def test_sweeps_apart_from_the_short_reads_lose_nothing_and_repeat_nothing(
        seed: int) -> None:
    """`sweep_read` while short reads go on: each sweep is read at one moment and absorbed
    several short rounds later (as the tail's sweep task does while its reads continue), with
    commits showing up to the window late. Every commit arrives exactly once."""
    rng = random.Random(seed)
    clock = Clock()
    feed = SimFeed(clock)
    cur = cursor(clock, sweeping=True)
    got: list[str] = []
    pending = None  # a sweep read but not absorbed yet
    swept_at = clock.ms
    for i in range(800):
        for _ in range(rng.randrange(0, 6)):
            late = rng.choice([0, 0, 0, 0, rng.randrange(1, 60), rng.randrange(60, 1900),
                               rng.randrange(1900, 2000)])
            feed.commit(f"k{len(feed.commits)}", late_ms=late)
        clock.ms += rng.choice([1, 5, 10, 30, 120])
        if i % 97 == 0:  # a restart from the persisted state (a pending sweep is lost)
            cur = FeedCursor.from_state(cur.state(), limit=50, overlap_vs=WINDOW,
                                        short_vs=50 * MS, sweep_secs=0.5)
            cur._clock = clock
            pending = None
        await drain_short(cur, feed, got)
        if pending is not None and rng.random() < 0.4:
            fresh = cur.unseen(pending)
            for _vs, _t, s in fresh:
                got += [ch["update"]["k"] for ch in s["changes"]]
            cur.absorb_sweep(pending, fresh)
            pending = None
        if pending is None and clock.ms - swept_at >= 500:
            pending = await cur.sweep_read(feed, ["t"])  # type: ignore[arg-type]
            swept_at = clock.ms
    clock.ms += 2500  # everything shows; the last sweeps run
    for _ in range(3):
        clock.ms += 600
        await drain_short(cur, feed, got)
        if pending is not None:
            fresh = cur.unseen(pending)
            for _vs, _t, s in fresh:
                got += [ch["update"]["k"] for ch in s["changes"]]
            cur.absorb_sweep(pending, fresh)
        pending = await cur.sweep_read(feed, ["t"])  # type: ignore[arg-type]
    fresh = cur.unseen(pending)
    got += [ch["update"]["k"] for _vs, _t, s in fresh for ch in s["changes"]]
    assert sorted(got) == sorted(k for _vs, _s, k in feed.commits)


async def test_short_reads_alone_miss_a_late_commit_that_a_sweep_apart_finds() -> None:
    """The sweep of `sweep_read` is what finds it: short reads that never sweep miss it."""
    clock = Clock()
    feed = SimFeed(clock)
    cur = cursor(clock, sweeping=True)
    got: list[str] = []
    await late_among_short_reads(cur, feed, clock, got, drain_short)
    assert "late" not in got
    sw = await cur.sweep_read(feed, ["t"])  # type: ignore[arg-type]
    fresh = cur.unseen(sw)
    assert [ch["update"]["k"] for _vs, _t, s in fresh for ch in s["changes"]] == ["late"]
    cur.absorb_sweep(sw, fresh)
    again = await cur.sweep_read(feed, ["t"])  # type: ignore[arg-type]
    assert cur.unseen(again) == []
