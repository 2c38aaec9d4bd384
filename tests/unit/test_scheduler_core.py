"""The scheduler's SSP state machine, broadcast and view assignment, driven through
`scheduler.core.Scheduler` with fake SSPs (aiohttp servers on loopback, real HTTP) and a real
database host."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from surrealdb import RecordID

from engine.values import NONE
from ipc import typed
from scheduler import core
from scheduler.config import LoadBalance, SchedulerConfig
from scheduler.core import Scheduler, SspState
from tests.support.procs import DbHost
from tests.support.scheduler_fakes import FakeSsp, wait_for

_ns = itertools.count()

MakeScheduler = Callable[..., Awaitable[Scheduler]]


def config(tmp: Path, host: DbHost, **overrides: Any) -> SchedulerConfig:
    n = next(_ns)
    cfg = SchedulerConfig.load(None, {
        "SVC_DB_URL": host.ws_url, "SVC_DB_USER": host.user, "SVC_DB_PASS": host.password,
        "SVC_DB_NS": f"sch{n}", "SVC_DB_NAME": f"sch{n}", "SVC_INGEST_TRANSPORT": "http",
        "SVC_DRIFT_CHECK": "false",
    })
    base = {
        "replica_db_path": tmp / "data" / "replica.sqlite3",
        "wal_path": tmp / "data" / "wal",
        "ssp_poll_interval_ms": 20,
        "heartbeat_interval_ms": 100,
        "heartbeat_timeout_ms": 600_000,  # tests of the timeout lower it
        "snapshot_update_interval_secs": 3600,
    }
    base.update(overrides)
    return dataclasses.replace(cfg, **base)


@pytest.fixture
async def make_scheduler(tmp_path: Path, shared_db_host: DbHost
                         ) -> AsyncIterator[MakeScheduler]:
    made: list[Scheduler] = []

    async def make(**overrides: Any) -> Scheduler:
        s = Scheduler(config(tmp_path / f"s{len(made)}", shared_db_host, **overrides))
        made.append(s)
        await s.start()
        return s

    yield make
    for s in made:
        await s.close()


@pytest.fixture
async def fakes() -> AsyncIterator[Callable[[str], Awaitable[FakeSsp]]]:
    started: list[FakeSsp] = []

    async def make(name: str) -> FakeSsp:
        f = await FakeSsp(name).start()
        started.append(f)
        return f

    yield make
    for f in started:
        await f.stop()


def ev(i: int, table: str = "item") -> dict[str, Any]:
    return {"table": table, "op": "CREATE", "id": f"{table}:{i}", "record": {"n": i}}


def hb(ssp_id: str, **extra: Any) -> dict[str, Any]:
    return {"ssp_id": ssp_id, "timestamp": 1.0, "views": 0, **extra}


async def bring_up(s: Scheduler, f: FakeSsp) -> None:
    reply = await s.register_ssp(f.name, f.url)
    assert reply.status == 202
    f.ready = True
    await wait_for(lambda: s.entries[f.name].state is SspState.READY, f"{f.name} ready")


async def test_register_freezes_snapshot_and_buffers_until_ready(make_scheduler, fakes) -> None:
    s = await make_scheduler()
    for i in range(3):
        await s.ingest(ev(i))
    f = await fakes("a")
    reply = await s.register_ssp("a", f.url)
    assert reply.status == 202
    # The WAL was drained into the replica first: the snapshot holds the three events.
    assert reply.body["snapshot_seq"] == 3 and reply.body["warm"] is False
    assert s.replica.frozen and s.replica.count("item") == 3
    for i in range(3, 8):
        await s.ingest(ev(i))
    await asyncio.sleep(0.1)  # several health polls: still bootstrapping, nothing sent
    assert f.batches == [] and s.entries["a"].state is SspState.BOOTSTRAPPING
    assert len(s.entries["a"].queue) == 5
    f.ready = True
    await wait_for(lambda: s.entries["a"].state is SspState.READY, "ready")
    assert not s.replica.frozen
    assert [e["seq"] for e in f.events] == [4, 5, 6, 7, 8]
    assert [e["id"] for e in f.events] == [f"item:{i}" for i in range(3, 8)]
    await s.ingest(ev(8))
    await wait_for(lambda: len(f.events) == 6, "live event")
    assert f.events[-1]["seq"] == 9


async def test_events_during_registration_are_neither_lost_nor_doubled(make_scheduler,
                                                                       fakes) -> None:
    s = await make_scheduler()
    f = await fakes("a")
    f.ready = True

    async def writer() -> None:
        for i in range(300):
            await s.ingest(ev(i))

    async def many() -> None:
        for i in range(300, 600, 10):
            await s.ingest_many([ev(j) for j in range(i, i + 10)])

    tasks = [asyncio.create_task(writer()), asyncio.create_task(many())]
    await asyncio.sleep(0.01)
    reply = await s.register_ssp("a", f.url)
    await asyncio.gather(*tasks)
    snap = reply.body["snapshot_seq"]
    await wait_for(lambda: f.events and f.events[-1]["seq"] == s.wal.last_seq, "all sent")
    seqs = [e["seq"] for e in f.events]
    assert seqs == list(range(snap + 1, s.wal.last_seq + 1))


async def test_ssp_503_is_retried_in_order(make_scheduler, fakes) -> None:
    s = await make_scheduler()
    f = await fakes("a")
    await bring_up(s, f)
    f.ingest_script.extend([503, 503, 503])
    for i in range(20):
        await s.ingest(ev(i))
    await wait_for(lambda: len(f.events) == 20, "all delivered")
    assert [e["seq"] for e in f.events] == list(range(1, 21))
    assert f.ingest_attempts >= 4
    assert all(h and h.startswith("Bearer ") for h in f.auth_headers)


async def test_health_heartbeat_shows_each_ssps_acknowledged_seq(make_scheduler,
                                                                  fakes) -> None:
    s = await make_scheduler()
    assert s.health().body["heartbeat"]["ok"] is False  # no SSP
    f = await fakes("a")
    await bring_up(s, f)
    await s.ingest_many([ev(1), ev(2)])
    await wait_for(lambda: s.entries["a"].sent_seq == 2, "both sent")
    s.heartbeat({**hb("a"), "last_seq": 1})
    probe = s.health().body["heartbeat"]
    assert probe["ok"] is True and probe["latest_seq"] == 2
    a = probe["ssps"]["a"]
    assert (a["state"], a["sent_seq"], a["acked_seq"], a["behind"]) == ("ready", 2, 1, 1)
    assert probe["last_heartbeat_seconds_ago"]["a"] == a["seconds_ago"] >= 0


async def test_batches_hold_bootstrap_chunk_size_events_and_halve_on_413(make_scheduler,
                                                                        fakes) -> None:
    s = await make_scheduler(bootstrap_chunk_size=4)
    f = await fakes("a")
    await bring_up(s, f)
    f.ingest_script.extend([413, 413])  # over the SSP's body limit twice: 4 -> 2 -> 1 events
    await s.ingest_many([ev(i) for i in range(1, 10)])
    await wait_for(lambda: len(f.events) == 9, "every event delivered")
    assert [e["seq"] for e in f.events] == list(range(1, 10))
    assert [len(b) for b in f.batches] == [1, 2, 4, 2]  # grows back after each success
    assert s.entries["a"].flagged is None
    f.ingest_script.append(413)  # one event the SSP can never take: as a malformed batch
    await s.ingest_many([ev(10)])
    await wait_for(lambda: s.entries["a"].flagged is not None, "flagged")


async def test_events_reach_every_ssp_typed_and_are_packed_once(make_scheduler, fakes) -> None:
    # Rows as the changefeed reads them: links and datetimes in schemaless fields are values.
    s = await make_scheduler()
    a, b = await fakes("a"), await fakes("b")
    await bring_up(s, a)
    assert (await s.register_ssp("b", b.url)).status == 202  # b bootstraps: events buffer
    at = datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
    rows = [{"id": RecordID("comment", i), "thread": RecordID("thread", "t1"), "at": at,
             "tags": [RecordID("user", "u1"), NONE], "amount": Decimal("1.50")}
            for i in range(3)]
    await s.ingest_many([{"table": "comment", "op": "UPDATE", "id": f"comment:{i}",
                          "record": r} for i, r in enumerate(rows)])
    await wait_for(lambda: len(a.events) == 3, "a got every event")
    # b's buffer holds the very events a's sender packed: one packing for every SSP.
    buffered = list(s.entries["b"].queue)
    assert [o.seq for o in buffered] == [1, 2, 3]
    assert all(o.packed is not None for o in buffered)
    b.ready = True  # the buffer is replayed on the same typed path
    await wait_for(lambda: len(b.events) == 3, "b got the replayed events")
    for f in (a, b):
        assert set(f.content_types) == {typed.CONTENT_TYPE}
        assert [e["record"] for e in f.events] == rows  # types kept, NONE included
        assert [e["seq"] for e in f.events] == [1, 2, 3]


async def test_an_ssp_that_refuses_the_typed_encoding_gets_json(make_scheduler, fakes) -> None:
    s = await make_scheduler()
    f = await fakes("old")
    f.json_only = True
    await bring_up(s, f)
    await s.ingest_many([ev(1), ev(2)])
    await wait_for(lambda: len(f.events) == 2, "delivered as JSON")
    assert f.content_types == [typed.CONTENT_TYPE, "application/json"]
    assert [e["seq"] for e in f.events] == [1, 2]
    assert s.entries["old"].flagged is None and not s.entries["old"].typed
    await s.ingest_many([ev(3)])
    await wait_for(lambda: len(f.events) == 3, "the next batch as JSON at once")
    assert f.content_types[-1] == "application/json" and s.dropped_batches == 0


async def test_a_batch_an_ssp_refuses_with_400_re_bootstraps_it(make_scheduler, fakes) -> None:
    # Resending gets the same 400 and skipping the batch would leave its views wrong.
    s = await make_scheduler()
    f = await fakes("a")
    await bring_up(s, f)
    f.ingest_script.append(400)
    await s.ingest_many([ev(1)])
    await wait_for(lambda: s.entries["a"].flagged is not None, "flagged")
    assert s.dropped_batches == 1 and not s.entries["a"].queue
    r = s.heartbeat(hb("a"))
    assert r.status == 409 and r.body["clean"] is True and "malformed" in r.body["reason"]


async def test_unreachable_ssp_gets_its_events_once_it_is_back(make_scheduler, fakes) -> None:
    s = await make_scheduler()
    f = await fakes("a")
    await bring_up(s, f)
    port = f.port
    await f.stop()
    for i in range(5):
        await s.ingest(ev(i))
    await wait_for(lambda: s.entries["a"].send_failures >= 2, "failed sends")
    # Heartbeats keep it registered while it is away.
    assert s.heartbeat(hb("a")).status == 200
    g = FakeSsp("a")
    g.ready = True
    from aiohttp import web  # same port again: the sender retries the same URL
    app = web.Application()
    app.router.add_post("/ingest", g._ingest)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        await wait_for(lambda: len(g.events) == 5, "redelivered")
        assert [e["seq"] for e in g.events] == [1, 2, 3, 4, 5]
    finally:
        await runner.cleanup()


async def test_heartbeat_unknown_404_known_200_metrics_kept(make_scheduler, fakes) -> None:
    s = await make_scheduler()
    assert s.heartbeat(hb("nobody")).status == 404
    f = await fakes("a")
    await bring_up(s, f)
    r = s.heartbeat(hb("a", cpu_usage=12.5, memory_usage=300, version="0.1.0", last_seq=0))
    assert (r.status, r.body) == (200, {"ok": True})  # `restoring` only while it is true
    m = s.metrics()["ssps"][0]
    assert (m["cpu_usage"], m["memory_usage"], m["version"]) == (12.5, 300, "0.1.0")
    s.restore_hold = "a restore"  # the SSP's periodic writers hold still meanwhile
    assert s.heartbeat(hb("a")).body == {"ok": True, "restoring": True}


async def test_buffer_overflow_answers_409_clean_then_404(make_scheduler, fakes) -> None:
    s = await make_scheduler(max_buffer_per_ssp=10)
    f = await fakes("a")
    assert (await s.register_ssp("a", f.url)).status == 202
    assert s.replica.frozen
    await s.ingest_many([ev(i) for i in range(11)])
    e = s.entries["a"]
    assert e.flagged is not None and not e.queue
    assert not s.replica.frozen  # the freeze was released
    r = s.heartbeat(hb("a"))
    assert r.status == 409
    assert r.body["clean"] is True and "overflow" in r.body["reason"]
    assert s.heartbeat(hb("a")).status == 404  # removed after answering 409
    # A re-registration starts over.
    assert (await s.register_ssp("a", f.url)).status == 202


async def test_an_ssp_flagged_while_bootstrapping_still_gets_its_409_after_the_timeout(
        make_scheduler, fakes) -> None:
    # It heartbeats only once its bootstrap ends, possibly later than heartbeat_timeout_ms: the
    # reaper must not remove the flagged entry first (a 404 would skip the clean wipe).
    s = await make_scheduler(max_buffer_per_ssp=3, heartbeat_timeout_ms=300,
                             bootstrap_timeout_secs=30)
    f = await fakes("a")
    assert (await s.register_ssp("a", f.url)).status == 202
    await s.ingest_many([ev(i) for i in range(4)])
    assert s.entries["a"].flagged is not None
    await asyncio.sleep(1.0)  # several reaper rounds past the heartbeat timeout
    assert "a" in s.entries
    r = s.heartbeat(hb("a"))
    assert r.status == 409 and r.body["clean"] is True and "overflow" in r.body["reason"]


async def test_a_ready_ssp_that_falls_behind_is_lagging_then_ready_not_re_bootstrapped(
        make_scheduler, fakes) -> None:
    """The spec forces a re-bootstrap on overflow only in Bootstrapping/Replaying; a Ready SSP
    with more than max_buffer_per_ssp events waiting is Lagging and keeps its queue."""
    from scheduler.core import LAGGING_HARD_LIMIT_FACTOR

    s = await make_scheduler(max_buffer_per_ssp=5)
    f = await fakes("a")
    await bring_up(s, f)
    f.ingest_script.extend([503] * 10_000)
    await s.ingest_many([ev(i) for i in range(20)])
    assert s.entries["a"].state is SspState.LAGGING
    assert s.heartbeat(hb("a")).status == 200  # not flagged
    f.ingest_script.clear()
    s.entries["a"].wake.set()
    await wait_for(lambda: len(f.events) == 20, "the backlog delivered")
    assert [e["seq"] for e in f.events] == list(range(1, 21))
    await wait_for(lambda: s.entries["a"].state is SspState.READY, "caught up")
    # An SSP that never takes events is re-bootstrapped past the hard limit.
    f.ingest_script.extend([503] * 10_000)
    await s.ingest_many([ev(i) for i in range(5 * LAGGING_HARD_LIMIT_FACTOR + 1)])
    r = s.heartbeat(hb("a"))
    assert r.status == 409 and r.body["clean"] is True and "lagging" in r.body["reason"]


async def test_bootstrap_timeout_flags_the_ssp(make_scheduler, fakes) -> None:
    s = await make_scheduler(bootstrap_timeout_secs=1)
    f = await fakes("a")  # never reports ready
    await s.register_ssp("a", f.url)
    await wait_for(lambda: s.entries["a"].flagged is not None, "flagged")
    assert not s.replica.frozen
    r = s.heartbeat(hb("a"))
    assert r.status == 409 and r.body["clean"] is True


async def test_reregister_replaces_entry_and_releases_old_freeze(make_scheduler, fakes) -> None:
    s = await make_scheduler()
    f = await fakes("a")
    await s.register_ssp("a", f.url)
    await s.register_ssp("a", f.url)
    assert s.replica.frozen
    f.ready = True
    await wait_for(lambda: s.entries["a"].state is SspState.READY, "ready")
    assert not s.replica.frozen


VIEW = {"id": "query:v1", "surql": "SELECT * FROM item", "clientId": "c1", "ttl": "30s"}


async def test_view_register_no_ssp_503(make_scheduler) -> None:
    s = await make_scheduler()
    r = await s.register_view("query:v1", VIEW)
    assert r.status == 503 and r.body["error"] == "no_ssp"


async def test_view_register_relays_ssp_verdict_verbatim(make_scheduler, fakes) -> None:
    s = await make_scheduler()
    f = await fakes("a")
    await bring_up(s, f)
    verdict = {"error": "not_allowlisted", "message": "shape not in the allowlist"}
    f.view_reply = (403, verdict)
    r = await s.register_view("query:v1", VIEW)
    assert r.status == 403 and json.loads(r.raw or b"") == verdict
    assert s.tracker.get("query:v1") is None


async def test_view_register_tracks_and_sticks_to_its_ssp(make_scheduler, fakes) -> None:
    s = await make_scheduler(load_balance=LoadBalance.ROUND_ROBIN)
    a, b = await fakes("a"), await fakes("b")
    await bring_up(s, a)
    await bring_up(s, b)
    r = await s.register_view("query:v1", VIEW)
    assert r.status == 200 and r.body["query_id"] == "query:v1"
    first = r.body["ssp_id"]
    assert isinstance(r.body["assigned_at"], float)
    for _ in range(3):
        again = await s.register_view("query:v1", VIEW)
        assert again.body["ssp_id"] == first
    r2 = await s.register_view("query:v2", dict(VIEW, id="query:v2"))
    assert r2.body["ssp_id"] != first  # round robin moves on


async def test_least_queries_spreads_views(make_scheduler, fakes) -> None:
    s = await make_scheduler(load_balance=LoadBalance.LEAST_QUERIES)
    a, b = await fakes("a"), await fakes("b")
    await bring_up(s, a)
    await bring_up(s, b)
    for i in range(6):
        r = await s.register_view(f"query:v{i}", dict(VIEW, id=f"query:v{i}"))
        assert r.status == 200
    assert len(a.views) == 3 and len(b.views) == 3


async def test_unreachable_ssp_falls_back_to_next(make_scheduler, fakes) -> None:
    s = await make_scheduler()
    a, b = await fakes("a"), await fakes("b")
    await bring_up(s, a)
    await bring_up(s, b)
    await a.stop()
    for i in range(3):
        r = await s.register_view(f"query:v{i}", dict(VIEW, id=f"query:v{i}"))
        assert r.status == 200 and r.body["ssp_id"] == "b"


async def test_unregister_clears_tracker_and_tells_ssp(make_scheduler, fakes) -> None:
    s = await make_scheduler()
    f = await fakes("a")
    await bring_up(s, f)
    await s.register_view("query:v1", VIEW)
    s.unregister_view("query:v1")
    assert s.tracker.get("query:v1") is None
    await wait_for(lambda: f.unregistered == ["query:v1"], "unregister sent")
    s.unregister_view("query:unknown")  # unknown: nothing to do, no error


async def test_query_row_delete_event_unregisters_the_view(make_scheduler, fakes) -> None:
    s = await make_scheduler()
    f = await fakes("a")
    await bring_up(s, f)
    await s.register_view("query:v1", VIEW)
    await s.ingest({"table": "_00_query", "op": "DELETE", "id": "_00_query:v1",
                    "record": {}})
    await wait_for(lambda: s.tracker.get("query:v1") is None, "tracker cleared")
    await wait_for(lambda: f.unregistered == ["query:v1"], "unregister sent")


async def test_a_query_row_delete_is_ignored_when_the_view_was_registered_again(
        make_scheduler, fakes) -> None:
    """The feed delivers a row's delete after the client registered the same id again (its
    SSP wrote the row anew): the new registration stays."""
    s = await make_scheduler()
    f = await fakes("a")
    await bring_up(s, f)
    await s.register_view("query:v2", VIEW)
    await s.db.query("UPSERT _00_query:v2 SET state = 'ready'")  # what the SSP writes
    try:
        await s.ingest({"table": "_00_query", "op": "DELETE", "id": "_00_query:v2",
                        "record": {}})
        checks = [t for t in asyncio.all_tasks() if t.get_name() == "query-delete-query:v2"]
        assert checks, "the delete rule runs as a task"
        await asyncio.gather(*checks)
        assert s.tracker.get("query:v2") is not None
        assert "query:v2" not in f.unregistered
    finally:
        await s.db.query("DELETE _00_query:v2")


def beat(s: Scheduler, ssp_id: str) -> asyncio.Task[None]:
    async def loop() -> None:
        while True:
            s.heartbeat(hb(ssp_id))
            await asyncio.sleep(0.05)

    return asyncio.create_task(loop())


async def test_heartbeat_timeout_reassigns_views(make_scheduler, fakes) -> None:
    s = await make_scheduler(load_balance=LoadBalance.ROUND_ROBIN, heartbeat_timeout_ms=400)
    a, b = await fakes("a"), await fakes("b")
    await bring_up(s, a)
    await bring_up(s, b)
    for i in range(4):
        assert (await s.register_view(f"query:v{i}", dict(VIEW, id=f"query:v{i}"))).status == 200
    on_a = set(a.views)
    assert on_a and len(on_a) < 4
    beating = beat(s, "b")
    try:
        await wait_for(lambda: "a" not in s.entries, "a removed")
        # The fake records a view when it answers; the tracker moves it when the answer
        # arrives, a step later: wait for both.
        await wait_for(lambda: set(b.views) == {f"query:v{i}" for i in range(4)}
                       and all(e["ssp_id"] == "b" for _, e in s.tracker.items()), "moved")
        assert b.views["query:v0"] == dict(VIEW, id="query:v0")  # the stored body, verbatim
    finally:
        beating.cancel()


async def test_a_stalled_scheduler_does_not_remove_ssps_that_beat_on_time(make_scheduler,
                                                                        fakes) -> None:
    """The scheduler's own loop stalls longer than the heartbeat timeout (a blocking call, a
    busy machine): the SSP's heartbeats sent meanwhile wait unread. Once it runs again, that
    time does not count against the SSP, and its next heartbeat keeps it."""
    s = await make_scheduler(heartbeat_timeout_ms=400)
    a = await fakes("a")
    await bring_up(s, a)
    paused = asyncio.Event()

    async def beats() -> None:
        while True:
            if paused.is_set():
                await asyncio.sleep(0.01)
                continue
            s.heartbeat(hb("a"))
            await asyncio.sleep(0.05)

    beating = asyncio.create_task(beats())
    try:
        await asyncio.sleep(0.3)
        paused.set()
        time.sleep(0.8)  # the stall: nothing in this process runs, heartbeats wait unread
        await asyncio.sleep(0.15)  # they are read a moment after the loop runs again
        paused.clear()
        await asyncio.sleep(0.6)
        assert "a" in s.entries, "a removed for the scheduler's own stall"
    finally:
        beating.cancel()


async def test_orphaned_views_placed_when_an_ssp_becomes_ready(make_scheduler, fakes) -> None:
    s = await make_scheduler(heartbeat_timeout_ms=400)
    a = await fakes("a")
    await bring_up(s, a)
    await s.register_view("query:v1", VIEW)
    await wait_for(lambda: "a" not in s.entries, "a removed (no heartbeat)")
    assert s.tracker.get("query:v1")["ssp_id"] is None
    b = await fakes("b")
    await s.register_ssp("b", b.url)
    beating = beat(s, "b")
    try:
        b.ready = True
        await wait_for(lambda: "query:v1" in b.views
                       and s.tracker.get("query:v1")["ssp_id"] == "b", "placed on b")
    finally:
        beating.cancel()


async def test_a_tracked_view_its_ssp_could_not_take_again_is_sent_again(
        make_scheduler, fakes) -> None:
    """An SSP that came back (restarted, re-registered) is sent its views again; one it
    answers 503 for (its database lost a write conflict, or timed out) is sent again later
    until it takes it. Before: the view stayed tracked on the SSP, which did not hold it,
    and no edge of it was written again (the 18-minute soak: 42 views lost)."""
    s = await make_scheduler()
    a = await fakes("a")
    await bring_up(s, a)
    assert (await s.register_view("query:v1", VIEW)).status == 200
    a.views.clear()  # the SSP restarted: it holds nothing
    a.view_reply = (503, {"error": "SSP_NOT_READY", "message": "write conflict"})
    a.ready = False
    assert (await s.register_ssp("a", a.url)).status == 202
    a.ready = True
    await wait_for(lambda: s.placement.retrying, "the refused view queued for a retry")
    assert s.tracker.get("query:v1")["ssp_id"] == "a"
    a.view_reply = None  # the database answers again
    await wait_for(lambda: "query:v1" in a.views and not s.placement.retrying,
                   "the view sent again and taken")


async def test_an_orphaned_view_no_ssp_could_take_is_placed_later(make_scheduler,
                                                                  fakes) -> None:
    """A view whose SSP was removed is placed on another; when that one answers 503 at
    first, the view is placed again later instead of staying unassigned until the next SSP
    becomes ready."""
    s = await make_scheduler(heartbeat_timeout_ms=400)
    a, b = await fakes("a"), await fakes("b")
    await bring_up(s, a)
    assert (await s.register_view("query:v1", VIEW)).status == 200
    await bring_up(s, b)
    b.view_reply = (503, {"error": "SSP_NOT_READY", "message": "write conflict"})
    beating = beat(s, "b")
    try:
        assert s.tracker.get("query:v1")["ssp_id"] == "a"  # the only SSP when registered
        await wait_for(lambda: "a" not in s.entries, "a removed (no heartbeat)")
        await wait_for(lambda: s.placement.retrying, "the view queued for a retry")
        assert s.tracker.get("query:v1")["ssp_id"] is None
        b.view_reply = None
        await wait_for(lambda: "query:v1" in b.views
                       and s.tracker.get("query:v1")["ssp_id"] == "b", "placed on b later")
    finally:
        beating.cancel()


async def test_flag_ssp_hook_and_reclone_flag_everyone(make_scheduler, fakes) -> None:
    s = await make_scheduler()
    a, b = await fakes("a"), await fakes("b")
    await bring_up(s, a)
    await bring_up(s, b)
    assert s.flag_ssp("a", "integrity drift", False)
    assert not s.flag_ssp("zz", "x", True)
    assert s.heartbeat(hb("a")).body == {"reason": "integrity drift", "clean": False}
    await s.ingest(ev(1))
    await s.reclone("test")
    r = s.heartbeat(hb("b"))
    assert r.status == 409 and r.body["clean"] is True
    assert s.state == "ready"


async def test_ingest_503_while_cloning_and_start_reclone_409(make_scheduler) -> None:
    from scheduler.core import SchedulerBusy

    s = await make_scheduler()
    s.state = "cloning"
    with pytest.raises(SchedulerBusy):
        await s.ingest(ev(1))
    assert s.start_reclone("x").status == 503
    s.state = "ready"
    assert s.start_reclone("x").body == {"status": "cloning"}
    assert s.start_reclone("x").status == 409
    await wait_for(lambda: s.state == "ready" and s._clone_task.done(), "clone done")


async def test_drain_applies_wal_and_truncates(make_scheduler) -> None:
    s = await make_scheduler()
    await s.ingest_many([ev(i) for i in range(10)])
    assert s.replica.count("item") == 0
    called = []

    async def hook() -> None:
        called.append(s.replica.applied_seq)

    s.after_drain.append(hook)
    assert await s.drain()
    assert s.replica.count("item") == 10 and called == [10]
    snap = s.snapshot()
    assert snap["tables"] == {"item": 10} and snap["lag"] == 0
    assert snap["hashes"]["item"] == f"{s.replica.hash('item'):016x}"


async def test_a_long_fold_applies_the_wal_in_parts_and_lets_the_loop_run_between(
        make_scheduler, monkeypatch) -> None:
    """A fold of many events is applied in parts, each in a thread, with the loop free
    between them: in one piece it held the GIL for seconds and the scheduler stalled."""
    monkeypatch.setattr(core, "FOLD_CHUNK", 40)
    s = await make_scheduler()
    await s.ingest_many([ev(i) for i in range(300)])
    parts: list[int] = []
    ticks: list[int] = []
    real = s.replica.apply

    def apply(events):  # type: ignore[no-untyped-def]
        res = real(events)
        parts.append(res.applied)
        return res

    async def ticker() -> None:
        while True:
            ticks.append(len(parts))
            await asyncio.sleep(0)

    monkeypatch.setattr(s.replica, "apply", apply)
    t = asyncio.create_task(ticker())
    try:
        assert await s.drain()
    finally:
        t.cancel()
    assert parts == [40] * 7 + [20]
    assert s.replica.count("item") == 300 and s.replica.applied_seq == 300
    # the loop ran between every two parts
    assert set(range(1, 8)) <= set(ticks), ticks


async def test_every_part_of_a_fold_runs_on_the_replicas_one_thread(
        make_scheduler, monkeypatch) -> None:
    """The fold's parts all run on the replica's own thread, while other blocking work (the
    WAL appends) keeps the default pool's threads busy: on whichever pool thread was idle,
    each part grew another thread's malloc arena to a fold's working set, and the scheduler
    kept that memory (`CoordinatorState.in_replica_thread`)."""
    monkeypatch.setattr(core, "FOLD_CHUNK", 40)
    s = await make_scheduler()
    await s.ingest_many([ev(i) for i in range(300)])
    threads: list[tuple[int, str]] = []
    real = s.replica.apply

    def apply(events):  # type: ignore[no-untyped-def]
        threads.append((threading.get_ident(), threading.current_thread().name))
        return real(events)

    monkeypatch.setattr(s.replica, "apply", apply)
    release = threading.Event()
    # the default pool's threads, held busy the whole fold long (as WAL appends hold them)
    busy = [asyncio.create_task(asyncio.to_thread(release.wait, 30)) for _ in range(3)]
    try:
        assert await s.drain()
    finally:
        release.set()
        await asyncio.gather(*busy)
    assert len(threads) == 8 and s.replica.applied_seq == 300
    assert len({ident for ident, _ in threads}) == 1, threads
    assert threads[0][1].startswith("replica"), threads
    # the same thread folds the next time too
    await s.ingest_many([ev(i) for i in range(300, 340)])
    assert await s.drain()
    assert {ident for ident, _ in threads} == {threads[0][0]}


async def test_health_and_extra_providers(make_scheduler, fakes) -> None:
    s = await make_scheduler()
    r = s.health()
    assert r.status == 503 and r.body["status"] == "unavailable"
    assert r.body["changefeed"]["enabled"] is False  # SVC_INGEST_TRANSPORT=http
    s.extra_health["changefeed"] = lambda: {"enabled": True, "lag_ms": 5}
    s.extra_snapshot["drift"] = lambda: {"enabled": True, "mismatched": []}
    f = await fakes("a")
    await bring_up(s, f)
    r = s.health()
    assert r.status == 200 and r.body["status"] == "healthy"
    assert r.body["changefeed"] == {"enabled": True, "lag_ms": 5}
    assert r.body["scheduler"]["state"] == "ready"
    assert s.snapshot()["drift"] == {"enabled": True, "mismatched": []}
    # a changefeed that fell out of retention or stalled: still serving, but degraded
    for flag in ("gap", "stalled"):
        s.extra_health["changefeed"] = lambda flag=flag: {"enabled": True, flag: True}
        r = s.health()
        assert r.status == 200 and r.body["status"] == "degraded"


async def test_restart_reclones_when_the_last_clone_did_not_finish(
        tmp_path: Path, shared_db_host: DbHost) -> None:
    cfg = config(tmp_path, shared_db_host)
    s = Scheduler(cfg)
    await s.start()
    await s.db.query("CREATE thing:1 SET n = 1")
    await s.ingest_many([ev(1)])
    await s.close()
    # Restart with a complete clone: WAL replayed, no clone (thing is not fetched).
    s = Scheduler(cfg)
    await s.start()
    assert s.replica.tables() == ["item"]
    await s.close()
    # A clone cut off by a crash leaves no marker: the next start clones again.
    cfg.replica_db_path.with_name(cfg.replica_db_path.name + ".cloned").unlink()
    s = Scheduler(cfg)
    await s.start()
    try:
        assert s.replica.count("thing") == 1
    finally:
        await s.close()


async def test_least_load_weighs_memory_against_each_ssps_reported_limit(make_scheduler,
                                                                         fakes) -> None:
    # Heartbeats go through the ingest listener's app (validation included), with request
    # metrics read by an in-memory reader; /metrics shows the limit; least_load uses it.
    import httpx
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from ipc.otel import REQUEST_DURATION
    from scheduler.app import create_app

    s = await make_scheduler(load_balance=LoadBalance.LEAST_LOAD)
    a, b = await fakes("a"), await fakes("b")
    await bring_up(s, a)
    await bring_up(s, b)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    app = create_app(s, provider.get_meter("scheduler"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://scheduler") as http:
        async def heartbeat(ssp: str, cpu: float, mem: float, limit: float | None) -> int:
            body = dict(hb(ssp), cpu_usage=cpu, memory_usage=mem)
            if limit is not None:
                body["memory_limit_mb"] = limit
            return (await http.post("/ssp/heartbeat", json=body)).status_code

        # Same CPU; a uses 600 of 4096 MB (15%), b 300 of 512 MB (59%): a is less loaded,
        # although it uses more MB.
        assert await heartbeat("a", 5.0, 600.0, 4096) == 200
        assert await heartbeat("b", 5.0, 300.0, 512) == 200
        assert (await s.register_view("query:m1", dict(VIEW, id="query:m1"))).body[
            "ssp_id"] == "a"
        # b at its ceiling goes last even with the lower CPU.
        assert await heartbeat("a", 50.0, 600.0, 4096) == 200
        assert await heartbeat("b", 1.0, 512.0, 512) == 200
        assert (await s.register_view("query:m2", dict(VIEW, id="query:m2"))).body[
            "ssp_id"] == "a"
        # Lower CPU wins below the ceilings.
        assert await heartbeat("a", 9.0, 100.0, 4096) == 200
        assert await heartbeat("b", 2.0, 400.0, 512) == 200
        assert (await s.register_view("query:m3", dict(VIEW, id="query:m3"))).body[
            "ssp_id"] == "b"
        bad = await http.post("/ssp/heartbeat", json=dict(hb("a"), memory_limit_mb="lots"))
        assert bad.status_code == 400 and "memory_limit_mb" in bad.json()["message"]
        ssps = {x["id"]: x for x in (await http.get("/metrics")).json()["ssps"]}
        assert ssps["a"]["memory_limit_mb"] == 4096 and ssps["b"]["memory_limit_mb"] == 512
    data = reader.get_metrics_data()
    points = [p for rm in data.resource_metrics for sm in rm.scope_metrics
              for m in sm.metrics if m.name == REQUEST_DURATION for p in m.data.data_points]
    by = {(p.attributes["http.route"], p.attributes["http.response.status_code"]): p.count
          for p in points}
    assert by[("/ssp/heartbeat", 200)] == 6 and by[("/ssp/heartbeat", 400)] == 1
    assert by[("/metrics", 200)] == 1
    provider.shutdown()


async def test_admin_listener_request_metrics(make_scheduler) -> None:
    import httpx
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from ipc.otel import ACTIVE_REQUESTS, REQUEST_DURATION
    from scheduler.admin.app import create_admin_app
    from scheduler.admin.plane import AdminPlane

    s = await make_scheduler()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    app = create_admin_app(AdminPlane(s), provider.get_meter("scheduler.admin"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://admin") as http:
        assert (await http.get("/admin/api/config")).status_code == 200
        assert (await http.get("/admin/api/views/query:secret-id")).status_code == 401
        assert (await http.get("/admin/api/nothing-here")).status_code in (401, 404)
    data = reader.get_metrics_data()
    metrics = {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics
               for m in sm.metrics}
    by = {(p.attributes["http.request.method"], p.attributes["http.route"],
           p.attributes["http.response.status_code"]): p.count
          for p in metrics[REQUEST_DURATION].data.data_points}
    assert by[("GET", "/admin/api/config", 200)] == 1
    # the route template, never the raw path (a view key must not become a label)
    assert by[("GET", "/admin/api/views/{key}", 401)] == 1
    assert not any("secret-id" in route for _, route, _ in by)
    assert sum(p.value for p in metrics[ACTIVE_REQUESTS].data.data_points) == 0
    provider.shutdown()
