"""The per-user edge tables' definitions and removals (ssp/hub/edgetables.py) follow the
`user` events in order: the table's last event decides whether it exists, however the
queued work interleaves. A fake publication connection records the DDL; the integration
path is tests/integration/test_edges_differential.py (seed 639092781 found this)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from engine.values import parse_record_id
from ssp.hub.edgetables import EdgeTables
from ssp.naming import edge_table

USER = "user:3"


class FakeDb:
    def __init__(self) -> None:
        self.tables: set[str] = set()
        self.log: list[str] = []

    async def query(self, sql: str, *_: Any) -> None:
        await asyncio.sleep(0)  # each DDL statement yields, as a real round trip does
        self.log.append(sql.split(" TYPE ")[0])
        name = sql.split()[-1] if sql.startswith("REMOVE") else sql.split()[5]
        if sql.startswith("REMOVE"):
            self.tables.discard(name)
        else:
            self.tables.add(name)


class FakePublisher:
    def __init__(self) -> None:
        self.dropped: set[str] = set()
        self.materialised: list[str] = []

    def drop_table(self, table: str) -> None:
        self.dropped.add(table)

    def restore_table(self, table: str) -> None:
        self.dropped.discard(table)

    def materialise(self, view: Any) -> None:
        self.materialised.append(view.view_id)

    async def quiesce(self, table: str) -> None:
        await asyncio.sleep(0)


def _state(table: str) -> SimpleNamespace:
    tasks: list[asyncio.Task[None]] = []
    return SimpleNamespace(
        cfg=SimpleNamespace(ref_mode="dedicated"), pub_db=FakeDb(), publisher=FakePublisher(),
        views={"query:a": SimpleNamespace(view_id="query:a", edge_table=table)},
        spawn_tracked=lambda coro: tasks.append(asyncio.ensure_future(coro)), tasks=tasks)


async def _run(events: list[str], register_after: bool = False) -> SimpleNamespace:
    table = edge_table(parse_record_id(USER), "dedicated")
    state = _state(table)
    edges = EdgeTables(state)  # type: ignore[arg-type]
    await edges.ensure(table, parse_record_id(USER))  # the view's registration
    for op in events:  # one ingest batch: all handed over before any queued work runs
        edges.user_changed(op, USER)
    if register_after:
        await edges.ensure(table, parse_record_id(USER))
    await asyncio.gather(*state.tasks)
    state.table = table
    state.pending_generations = dict(edges._gen)
    return state


@pytest.mark.parametrize("events,exists", [
    (["DELETE"], False),
    (["DELETE", "CREATE"], True),
    (["DELETE", "CREATE", "DELETE"], False),
    (["DELETE", "CREATE", "DELETE", "CREATE"], True),
    (["CREATE", "DELETE"], False),
])
async def test_the_last_user_event_decides_the_table(events: list[str], exists: bool) -> None:
    state = await _run(events)
    assert (state.table in state.pub_db.tables) is exists, state.pub_db.log
    assert state.pending_generations == {}  # nothing kept once the queued work ran
    # while the table is gone nothing is published to it; once back, its views are rewritten
    assert (state.table in state.publisher.dropped) is (not exists)
    if exists and "DELETE" in events:
        assert state.publisher.materialised == ["query:a"]


async def test_a_registration_after_the_delete_keeps_the_table() -> None:
    state = await _run(["DELETE"], register_after=True)
    assert state.table in state.pub_db.tables, state.pub_db.log


@pytest.mark.parametrize("n", [2, 5])
async def test_registrations_of_one_user_at_once_all_find_the_table(n: int) -> None:
    """Several views of one user registered at once (loadtests/bench_ssp.py registers a user's
    ten views together) while the lock is busy with another user's: each registration
    publishes into the table as soon as its ensure returns, so none may return before the table
    is defined. The first used to skip its definition for the later one's and publish into no
    table (a 500 on registration)."""
    table = edge_table(parse_record_id(USER), "dedicated")
    state = _state(table)
    edges = EdgeTables(state)  # type: ignore[arg-type]

    async def register() -> bool:
        await edges.ensure(table, parse_record_id(USER))
        return table in state.pub_db.tables  # what the registration's publish would find

    other = parse_record_id("user:4")  # another user's definition holds the (shared) lock
    found = await asyncio.gather(edges.ensure(edge_table(other, "dedicated"), other),
                                 *(register() for _ in range(n)))
    assert all(found[1:]), (found, state.pub_db.log)
    assert edges._gen == {}


async def test_a_registration_racing_a_user_delete_leaves_it_to_the_delete() -> None:
    """A removal queued after a registration's definition decides: no table, and the publisher
    writes nothing there (the user is gone)."""
    table = edge_table(parse_record_id(USER), "dedicated")
    state = _state(table)
    edges = EdgeTables(state)  # type: ignore[arg-type]
    reg = asyncio.ensure_future(edges.ensure(table, parse_record_id(USER)))
    await asyncio.sleep(0)
    edges.user_changed("DELETE", USER)
    await reg
    await asyncio.gather(*state.tasks)
    assert table not in state.pub_db.tables and table in state.publisher.dropped
