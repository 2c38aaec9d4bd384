"""The host's LIVE feed reads (`dbhost.live.LiveHub._read_group`) re-read only a short overlap
and sweep the rest of the window: a commit that becomes visible late (up to `OVERLAP_VS`) still
reaches the subscriber, exactly once.

The engine is simulated so that the test decides when each commit becomes visible (a real
engine shows a late commit only by chance); the delivery path past the read is the host's own.
"""

from __future__ import annotations

import bisect
import itertools
import random
import uuid
from typing import Any

import pytest
from cbor2 import CBORTag

from dbclient.cbor import TAG_RECORD_ID, decode
from dbhost import live as live_mod
from dbhost.live import OVERLAP_VS, LiveHub, LiveQuery, TableFeed
from dbhost.liveql import LiveSpec

MS = 1 << 16


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> float:
        return self.ms / 1000


class SimEngine:
    """The engine calls the LIVE feed loop makes, over commits that show when told."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.commits: list[tuple[int, int, str]] = []  # (vs, shows at ms, key), vs order
        self.entries_read = 0

    def commit(self, key: str, *, late_ms: int = 0) -> None:
        self.commits.append((self.clock.ms * MS + len(self.commits) % MS,
                             self.clock.ms + late_ms, key))

    async def attach(self) -> str:
        return "tail"

    async def call(self, method: str, params: Any = None, session: Any = None) -> Any:
        return None

    async def call_shallow(self, method: str, params: list[Any], session: str) -> Any:
        text = params[0]
        since = int(text.split("SINCE ")[1].split()[0])
        limit = int(text.split("LIMIT ")[1])
        first = bisect.bisect_left(self.commits, (since, -1, ""))
        out = []
        for vs, shows, key in itertools.islice(self.commits, first, None):
            if shows <= self.clock.ms:
                out.append({"versionstamp": vs, "changes": [
                    {"update": {"id": CBORTag(TAG_RECORD_ID, ["t", key]), "k": key}}]})
                if len(out) == limit:
                    break
        self.entries_read += len(out)
        return {"result": [{"status": "OK", "result": out}]}


class Conn:
    conn_id = "c1"

    def __init__(self) -> None:
        self.got: list[str] = []

    async def push(self, frame: bytes) -> None:
        self.got.append(decode(frame)["result"]["result"]["k"])


def hub_with_feed(clock: Clock) -> tuple[LiveHub, SimEngine, TableFeed, Conn]:
    engine = SimEngine(clock)
    hub = LiveHub(engine, 1.0, "root", "pw")  # type: ignore[arg-type]
    conn = Conn()
    start = clock.ms * MS
    lq = LiveQuery(uuid.uuid4(), conn, "s", None, "ns", "db", LiveSpec("t", False, "*", None),
                   {}, record_user=False, start_vs=start)
    feed = TableFeed("ns", "db", "t", next_vs=start, floor_vs=start)
    feed.queries[lq.id] = lq
    hub.feeds[lq.key] = feed
    hub.queries[lq.id] = lq
    return hub, engine, feed, conn


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(live_mod.time, "monotonic", c)
    return c


async def test_a_commit_visible_late_reaches_the_subscriber_once(clock: Clock) -> None:
    hub, engine, feed, conn = hub_with_feed(clock)
    for i in range(30):
        engine.commit(f"a{i}")
        clock.ms += 2
        await hub._read_group(("ns", "db"), [feed])
    engine.commit("late", late_ms=40)  # within the 50 ms overlap, past the short one
    for i in range(200):
        engine.commit(f"b{i}")
        clock.ms += 2
        await hub._read_group(("ns", "db"), [feed])
    assert conn.got.count("late") == 1
    assert sorted(conn.got) == sorted(k for _vs, _s, k in engine.commits)
    assert hub.late_sets >= 1


async def test_the_short_reads_alone_would_miss_it(clock: Clock, monkeypatch) -> None:
    """Sweeps that never come (after the first read): the late commit is not delivered, so
    the test above fails without them."""
    monkeypatch.setattr(live_mod, "SWEEP_SECS", float("inf"))
    hub, engine, feed, conn = hub_with_feed(clock)
    await hub._read_group(("ns", "db"), [feed])
    engine.commit("x")
    clock.ms += 2
    engine.commit("late", late_ms=40)
    for _ in range(100):
        engine.commit("y")
        clock.ms += 2
        await hub._read_group(("ns", "db"), [feed])
    assert "late" not in conn.got


@pytest.mark.parametrize("seed", range(5))
async def test_random_lateness_within_the_overlap_loses_and_repeats_nothing(
        clock: Clock, seed: int) -> None:
    rng = random.Random(seed)
    hub, engine, feed, conn = hub_with_feed(clock)
    for _ in range(1500):
        for _ in range(rng.randrange(0, 4)):
            late = rng.choice([0, 0, 0, rng.randrange(1, 10), rng.randrange(10, 49)])
            engine.commit(f"k{len(engine.commits)}", late_ms=late)
        clock.ms += rng.choice([1, 2, 5, 20, 150])
        await hub._read_group(("ns", "db"), [feed])
    clock.ms += 100
    for _ in range(3):
        clock.ms += 150
        await hub._read_group(("ns", "db"), [feed])
    assert sorted(conn.got) == sorted(k for _vs, _s, k in engine.commits)
    assert len(set(feed.seen)) == len(feed.seen)
    # the seen set stays within the window
    assert all(v >= min(feed.mark or feed.next_vs, feed.next_vs) - OVERLAP_VS for v in feed.seen)


async def test_frequent_reads_no_longer_re_read_the_whole_overlap_each_time(
        clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """500 commits a second read every 10 ms: re-reading 50 ms each time reads the feed ~6
    times; short reads plus sweeps read it about 3 times."""
    counts = {}
    for short in (OVERLAP_VS, live_mod.SHORT_VS):
        monkeypatch.setattr(live_mod, "SHORT_VS", short)
        hub, engine, feed, conn = hub_with_feed(clock)
        for _ in range(200):
            for _ in range(5):
                engine.commit(f"k{len(engine.commits)}")
            clock.ms += 10
            await hub._read_group(("ns", "db"), [feed])
        assert len(conn.got) == 1000
        counts[short] = engine.entries_read / 1000
    assert counts[live_mod.SHORT_VS] * 1.8 < counts[OVERLAP_VS]
    assert counts[live_mod.SHORT_VS] < 4.0, counts
