"""One changefeed cursor (`dbclient.feed.FeedCursor`) for both tails: it moves only after the
round's events were handed on. A consumer that dies between reading a round and submitting it
(here: its submit raises, and it is started again from the state it had persisted) reads the
same changes again: nothing is skipped. Against a real database host."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dbclient import Database
from dbclient.feed import FeedCursor
from scheduler.feed import ChangefeedTail
from ssp.hub.tail import FeedTail


class Crash(Exception):
    """The consumer dies between reading a round and handing it on."""


@pytest.fixture
async def db(fresh_db: Database) -> Database:
    await fresh_db.query("DEFINE TABLE post CHANGEFEED 1h INCLUDE ORIGINAL")
    return fresh_db


async def write(db: Database, keys: range) -> None:
    for k in keys:
        await db.query("CREATE type::record('post', $k) SET n = $k", {"k": k})


async def test_the_scheduler_tail_reads_a_failed_round_again_after_a_restart(
        db: Database, tmp_path: Path) -> None:
    state = tmp_path / "cursor.json"
    got: list[str] = []

    async def tables() -> list[str]:
        return ["post"]

    async def collect(events: list[dict[str, Any]]) -> list[int]:
        got.extend(e["id"] for e in events)
        return []

    async def crash(events: list[dict[str, Any]]) -> list[int]:
        raise Crash

    first = ChangefeedTail(db, collect, state, tables, doorbell_table=None)
    await write(db, range(1, 4))
    assert await first.catch_up() == 3
    persisted = json.loads(state.read_text())
    await write(db, range(4, 7))
    dying = ChangefeedTail(db, crash, state, tables, doorbell_table=None)
    with pytest.raises(Crash):
        await dying.catch_up()
    assert json.loads(state.read_text()) == persisted  # nothing of the failed round absorbed
    got.clear()
    again = ChangefeedTail(db, collect, state, tables, doorbell_table=None)
    assert await again.catch_up() == 3
    assert got == ["post:4", "post:5", "post:6"]


async def test_the_ssp_tail_reads_a_failed_round_again_after_a_restart(db: Database) -> None:
    got: list[str] = []

    class Sequencer:
        fail = False

        async def submit(self, events: list[Any], *, defer: bool = False) -> None:
            if self.fail:
                raise Crash
            got.extend(e[2] for e in events)

    def tail_from(saved: dict[str, Any]) -> tuple[FeedTail, Sequencer]:
        # What a standalone SSP persists (`snapshot.json`) and starts from again.
        state = SimpleNamespace(db=db, views={}, cursor=FeedCursor.from_state(saved))
        seq = Sequencer()
        return FeedTail(state, seq, SimpleNamespace()), seq  # type: ignore[arg-type]

    start = FeedCursor(0)
    start.follow("post")
    tail, seq = tail_from(start.state())
    await write(db, range(1, 4))
    await tail.catch_up()
    assert got == ["post:1", "post:2", "post:3"]
    await write(db, range(4, 7))
    seq.fail = True
    with pytest.raises(Crash):
        await tail.catch_up()
    saved = tail.state.cursor.state()  # the position a checkpoint would write now
    got.clear()
    restarted, _ = tail_from(saved)
    await restarted.catch_up()
    assert got == ["post:4", "post:5", "post:6"]
