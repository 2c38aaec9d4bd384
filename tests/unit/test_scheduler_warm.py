"""The scheduler's side of a warm SSP restart: the WAL keeps absorbed events for
`wal_retain_events`, the replica's epoch changes only with a clone, `POST /ssp/register` with
`warm: {epoch, seq}` is accepted only when the epoch matches and the WAL holds every event
after `seq`, and `POST /ssp/catchup` hands out exactly those events (typed, as `/ingest`
gets them). Driven through `scheduler.core.Scheduler` and its listener app with a fake SSP
and a real database host."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.wire import ext_hook
from ipc import typed
from scheduler.app import create_app
from scheduler.core import Scheduler, SspState
from tests.support.procs import DbHost
from tests.support.scheduler_fakes import FakeSsp, wait_for
from tests.unit.test_scheduler_core import config

_n = itertools.count()


@pytest.fixture
async def make(tmp_path: Path, shared_db_host: DbHost
               ) -> AsyncIterator[Callable[..., Awaitable[Scheduler]]]:
    made: list[Scheduler] = []

    async def start(data: str | None = None, **overrides: Any) -> Scheduler:
        s = Scheduler(config(tmp_path / (data or f"s{next(_n)}"), shared_db_host,
                             **overrides))
        made.append(s)
        await s.start()
        return s

    yield start
    for s in made:
        await s.close()


@pytest.fixture
async def fake() -> AsyncIterator[FakeSsp]:
    f = await FakeSsp("a").start()
    yield f
    await f.stop()


def ev(i: int) -> dict[str, Any]:
    return {"table": "item", "op": "CREATE", "id": f"item:{i}", "record": {"n": i}}


async def test_the_wal_keeps_absorbed_events_for_the_retention(make) -> None:
    kept = await make(wal_retain_events=1000)
    await kept.ingest_many([ev(i) for i in range(10)])
    assert await kept.drain()
    assert kept.replica.count("item") == 10
    assert kept.wal.first_seq == 1  # absorbed, still there for a warm restart
    assert [seq for seq, _ in kept.wal.replay(7)] == [8, 9, 10]
    # Without retention the drain empties the log, as before.
    bare = await make(wal_retain_events=0)
    await bare.ingest_many([ev(i) for i in range(10)])
    assert await bare.drain()
    assert bare.wal.first_seq == 11 and list(bare.wal.replay(0)) == []


async def test_warm_registration_is_accepted_only_from_a_position_the_wal_holds(
        make, fake: FakeSsp) -> None:
    s = await make()
    epoch = s.epoch
    assert len(epoch) == 32
    await s.ingest_many([ev(i) for i in range(10)])
    refused = await s.register_ssp("a", fake.url, warm=("another-epoch", 4))
    assert refused.status == 202 and refused.body["warm"] is False
    assert "another replica epoch" in refused.body["warm_refused"]
    assert refused.body["epoch"] == epoch and s.entries["a"].warm_from is None
    ahead = await s.register_ssp("a", fake.url, warm=(epoch, 11))
    assert ahead.body["warm"] is False and "ahead" in ahead.body["warm_refused"]
    cold = await s.register_ssp("a", fake.url)
    assert cold.body == {"snapshot_seq": 10, "epoch": epoch, "warm": False}
    ok = await s.register_ssp("a", fake.url, warm=(epoch, 4))
    assert ok.body == {"snapshot_seq": 10, "epoch": epoch, "warm": True, "views": []}
    e = s.entries["a"]
    assert e.warm_from == 4 and e.state is SspState.BOOTSTRAPPING and s.replica.frozen

    app = create_app(s)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://scheduler") as http:
        async def catchup(**body: Any) -> httpx.Response:
            return await http.post("/ssp/catchup", json={"ssp_id": "a", **body})

        r = await catchup(after=4, through=10, limit=4)
        assert r.status_code == 200 and r.headers["content-type"] == typed.CONTENT_TYPE
        got = typed.decode(r.content, ext_hook)
        assert [x["seq"] for x in got] == [5, 6, 7, 8]
        assert [x["id"] for x in got] == [f"item:{i}" for i in range(4, 8)]
        r = await catchup(after=8, through=10)
        assert [x["seq"] for x in typed.decode(r.content, ext_hook)] == [9, 10]
        assert (await catchup(after=3, through=10)).status_code == 409  # before its position
        assert (await catchup(after=4, through=11)).status_code == 409  # past snapshot_seq
        bad = await catchup(after=-1, through=10)
        assert bad.status_code == 400 and "after" in bad.json()["message"]
        assert (await catchup(after=4, through=10, limit=0)).status_code == 400
        assert (await http.post("/ssp/catchup", json={"ssp_id": "nobody", "after": 0,
                                                      "through": 1})).status_code == 404
        r = await http.post("/ssp/register", json={"ssp_id": "a", "url": fake.url,
                                                    "warm": {"epoch": epoch, "seq": "4"}})
        assert r.status_code == 400 and "warm.seq" in r.json()["message"]
        # Ready: the events after snapshot_seq are replayed as for a cold bootstrap.
        await s.ingest(ev(10))
        fake.ready = True
        await wait_for(lambda: s.entries["a"].state is SspState.READY, "ready")
        assert [x["seq"] for x in fake.events] == [11]
        assert (await catchup(after=4, through=10)).status_code == 404  # no longer warm


async def test_a_warm_registration_takes_back_the_views_its_restart_left_unplaced(
        make, fake: FakeSsp) -> None:
    """The 409 of an operator restart removes the SSP and unplaces its views; coming back
    warm, it gets back those no other SSP took (listed in the 202: it builds them from its
    snapshot), not the ones another SSP holds now nor any other unplaced one."""
    s = await make()
    await s.ingest_many([ev(i) for i in range(3)])
    assert (await s.register_ssp("a", fake.url)).body["warm"] is False
    for v in ("query:kept", "query:moved"):
        s.tracker.set(v, "a", {"id": v, "surql": "SELECT * FROM item"})
    s.tracker.set("query:other", None, {"id": "query:other", "surql": "SELECT * FROM item"})
    s.roster.flag_ssp("a", "operator restart", False)
    r = s.pool.heartbeat({"ssp_id": "a", "timestamp": 0, "views": 2})
    assert r.status == 409 and "a" not in s.entries
    assert s.tracker.of_ssp(None) == ["query:kept", "query:moved", "query:other"]
    s.tracker.set("query:moved", "b", s.tracker.get("query:moved")["body"])  # taken meanwhile
    back = await s.register_ssp("a", fake.url, warm=(s.epoch, 3))
    assert back.body["warm"] is True and back.body["views"] == ["query:kept"]
    assert s.tracker.of_ssp("a") == ["query:kept"]
    assert s.tracker.of_ssp(None) == ["query:other"]
    assert "was" not in s.tracker.get("query:kept")
    # Cold, the unplaced views wait for placement as before (Ready: `place_unassigned`).
    s.tracker.unassign("a")
    cold = await s.register_ssp("a", fake.url)
    assert "views" not in cold.body and s.tracker.of_ssp("a") == []


async def test_a_wal_truncated_past_the_position_or_a_reclone_refuses_warm(
        make, fake: FakeSsp) -> None:
    s = await make(wal_retain_events=0)
    await s.ingest_many([ev(i) for i in range(10)])
    assert await s.drain()
    r = await s.register_ssp("a", fake.url, warm=(s.epoch, 4))
    assert r.body["warm"] is False and "no longer holds events 5..10" in r.body["warm_refused"]
    # From the last absorbed event on, nothing is missing: warm.
    r = await s.register_ssp("a", fake.url, warm=(s.epoch, 10))
    assert r.body["warm"] is True
    before = s.epoch
    s.roster.drop(s.entries["a"])
    await s.reclone("test")
    assert s.epoch != before
    r = await s.register_ssp("a", fake.url, warm=(before, 10))
    assert r.body["warm"] is False and "epoch" in r.body["warm_refused"]


async def test_the_epoch_survives_a_restart_and_changes_with_a_clone(make) -> None:
    s = await make(data="same")
    epoch = s.epoch
    await s.close()
    again = await make(data="same")
    assert again.epoch == epoch
    # A marker of an older release names no epoch: one is given, and kept from then on.
    marker = again.cfg.replica_db_path.with_name(again.cfg.replica_db_path.name + ".cloned")
    await again.close()
    marker.write_text('{"reason": "startup", "at": 1}')
    third = await make(data="same")
    assert third.epoch and third.epoch != epoch
    assert third.epoch in marker.read_text()
