"""ssp.hub.visibility: a batch's edges wait for its commits; an event that takes a record back
to an older version (the commit check undoing a failed transaction) ends the wait on it at
once, and an event moving it forward does not.

The state is an in-process seam (database reads of `_00_version`, the publisher's marks); the
real path is tests/integration/test_http_commit_check.py and the edges differential test.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ssp.hub import visibility
from ssp.hub.visibility import Visibility


class FakeDb:
    def __init__(self, committed: dict[str, int]) -> None:
        self.committed = committed  # `_00_version` rv by record key

    async def query_one(self, sql: str, vars: dict[str, Any]) -> Any:
        rv = self.committed.get(str(vars["v"].id[1]))
        return None if rv is None else {"rv": rv}


class FakePublisher:
    def __init__(self) -> None:
        self.marked: list[tuple[str, list[str]]] = []

    def mark(self, vid: str, members: list[str], at: float | None = None) -> None:
        self.marked.append((vid, members))


class FakeState:
    def __init__(self, db: FakeDb) -> None:
        self.db = db
        self.views = {"v1": object()}
        self.publisher = FakePublisher()
        self.tasks: list[asyncio.Task[None]] = []

    def spawn_tracked(self, coro: Any) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(coro))


@pytest.fixture(autouse=True)
def short_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(visibility, "VISIBILITY_DEADLINE_SECS", 2.0)


def ev(key: str, rv: int | None, op: str = "UPDATE") -> tuple[str, str, str, Any]:
    record = {"id": f"t:{key}"} if rv is None else {"id": f"t:{key}", "_00_rv": rv}
    return ("t", op, f"t:{key}", record)


async def settle(state: FakeState, wait: float) -> bool:
    """Whether the spawned publication finished within `wait` seconds."""
    done, _ = await asyncio.wait(state.tasks, timeout=wait)
    return len(done) == len(state.tasks)


async def test_edges_wait_for_the_commit() -> None:
    db = FakeDb({"1": 4})
    state = FakeState(db)
    v = Visibility(state)  # type: ignore[arg-type]
    assert v.publish_after_commit([ev("1", 5)], [("v1", ["t:1"])], None)
    assert not await settle(state, 0.1)
    assert state.publisher.marked == []
    db.committed["1"] = 5  # the commit shows
    assert await settle(state, 1.0)
    assert state.publisher.marked == [("v1", ["t:1"])]
    assert (v.fallbacks, v.superseded) == (0, 0)


@pytest.mark.parametrize("undo", [ev("1", 4), ev("1", None, "DELETE"), ev("1", 3, "DELETE")],
                         ids=["older-version", "no-version", "older-delete"])
async def test_a_record_taken_back_ends_the_wait(undo: Any) -> None:
    state = FakeState(FakeDb({"1": 4}))
    v = Visibility(state)  # type: ignore[arg-type]
    v.publish_after_commit([ev("1", 5), ev("2", 1)], [("v1", ["t:1", "t:2"])], None)
    await asyncio.sleep(0.05)
    state.db.committed["2"] = 1  # the other change of the batch committed
    v.supersede([undo])
    assert await settle(state, 1.0)  # long before the 2 s deadline
    assert state.publisher.marked == [("v1", ["t:1", "t:2"])]
    assert (v.fallbacks, v.superseded) == (0, 1)
    assert v._waits == {}


async def test_a_newer_change_does_not_end_the_wait() -> None:
    state = FakeState(FakeDb({"1": 4}))
    v = Visibility(state)  # type: ignore[arg-type]
    v.publish_after_commit([ev("1", 5)], [("v1", ["t:1"])], None)
    await asyncio.sleep(0.05)
    v.supersede([ev("1", 6), ev("9", 1)])
    assert not await settle(state, 0.3)
    state.db.committed["1"] = 6
    assert await settle(state, 1.0)
    assert (v.fallbacks, v.superseded) == (0, 0)
