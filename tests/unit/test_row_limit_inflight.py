"""The per-identity limit on views registered from `_00_query` rows counts registrations
still under way: the client returns once its row carries `state` (written by the SSP while it
registers), so its next row can reach the service before the first registration is recorded
(the scheduler's tracker, the SSP's views). Both services are driven here with in-process
fakes at their database and placement seams; `test_viewclient` covers the real path."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from dbclient.viewrows import Placing, registration_body
from engine.values import RecordID
from scheduler.config import IngestTransport
from scheduler.delivery import Delivery
from scheduler.entries import Reply
from ssp.hub.rowrequests import RowRequests

WHO = RecordID("user", "hana")
WAIT = 10.0  # seconds a step may take before the test fails rather than hangs


def _row(key: str) -> dict[str, Any]:
    return {"id": RecordID("_00_query", key), "surql": "SELECT * FROM post",
            "params": {}, "clientId": "c", "ttl": "10m", "auth_id": WHO,
            "lastActiveAt": "2026-12-01T00:00:00Z"}


class FakeDb:
    """Rows by record key; refusals written back are recorded."""

    def __init__(self, rows: dict[str, dict[str, Any]]) -> None:
        self.rows = rows
        self.refused: list[str] = []

    async def query_one(self, _sql: str, params: dict[str, Any], **_kw: Any) -> Any:
        return self.rows.get(str(params["q"].id))

    async def query(self, sql: str, params: dict[str, Any], **_kw: Any) -> Any:
        assert sql.startswith("UPDATE $q SET error")
        self.refused.append(str(params["q"].id))
        return []


class Gate:
    """A registration that waits until the test lets it answer."""

    def __init__(self, status: int = 200) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.status = status
        self.calls: list[str] = []

    async def wait(self, view_id: str) -> int:
        self.calls.append(view_id)
        self.entered.set()
        await self.release.wait()
        return self.status


def test_placing_counts_others_of_one_identity() -> None:
    p = Placing()
    p.start("user:a", "q1")
    p.start("user:a", "q2")
    p.start("user:b", "q3")
    assert (p.others("user:a", "q1"), p.others("user:a", "q9"), p.others("user:b", "q3"),
            p.others(None, "q1")) == (1, 2, 0, 0)
    p.done("user:a", "q1")
    p.done("user:a", "q2")
    p.done("user:a", "q1")  # twice is harmless
    assert (p.others("user:a", "q9"), p.others("user:b", "q9")) == (0, 1)


class FakeTracker:
    def __init__(self, held: dict[str, dict[str, Any]]) -> None:
        self.held = held

    def get(self, vid: str) -> Any:
        return self.held.get(vid)

    def items(self) -> Any:
        return self.held.items()


async def test_scheduler_counts_a_registration_under_way() -> None:
    db = FakeDb({k: _row(k) for k in ("a", "b", "c")})
    gate = Gate()
    first = registration_body("query:first", _row("first"))
    tracker = FakeTracker({"query:first": {"ssp_id": "s1", "body": first}})

    class FakePlacement:
        async def register_view(self, view_id: str, body: Any) -> Reply:
            return Reply(await gate.wait(view_id), {})

    s = SimpleNamespace(db=db, tracker=tracker, cfg=SimpleNamespace(
        row_views_per_user=2, ingest_transport=IngestTransport.CHANGEFEED))
    d = Delivery(s, roster=None, placement=FakePlacement())  # type: ignore[arg-type]
    one = asyncio.ensure_future(d._register_row(RecordID("_00_query", "a")))
    await asyncio.wait_for(gate.entered.wait(), WAIT)
    # while `a` is being placed (a `b` placed too would wait on the gate: the timeout fails it)
    await asyncio.wait_for(d._register_row(RecordID("_00_query", "b")), WAIT)
    assert db.refused == ["b"]
    gate.status = 503  # `a` fails: it no longer counts, so `c` is placed
    gate.release.set()
    await one
    await d._register_row(RecordID("_00_query", "c"))
    assert gate.calls == ["query:a", "query:c"] and db.refused == ["b"]


async def test_ssp_counts_a_registration_under_way() -> None:
    db = FakeDb({k: _row(k) for k in ("a", "b", "c")})
    gate = Gate()

    class FakeRegistry:
        async def register(self, msg: dict[str, Any]) -> dict[str, Any]:
            return {"status": await gate.wait(msg["body"]["id"])}

    tasks: list[asyncio.Task[None]] = []
    state = SimpleNamespace(
        db=db, cfg=SimpleNamespace(row_views_per_user=2),
        views={"query:first": SimpleNamespace(auth=WHO)},
        spawn_tracked=lambda coro: tasks.append(asyncio.ensure_future(coro)))
    rr = RowRequests(state, FakeRegistry())  # type: ignore[arg-type]
    rr.seen("query:a", _row("a"))
    await asyncio.wait_for(gate.entered.wait(), WAIT)
    rr.seen("query:b", _row("b"))
    await asyncio.wait_for(tasks[1], WAIT)
    assert db.refused == ["b"] and rr.refused == 1
    gate.status = 503  # `a` fails: it no longer counts, so `c` is placed
    gate.release.set()
    await tasks[0]
    rr.seen("query:c", _row("c"))
    await tasks[2]
    assert gate.calls == ["query:a", "query:c"] and db.refused == ["b"]
