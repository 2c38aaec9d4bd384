"""`dbclient.feed.read_round` against a real database host: the engine's feed pages count every
table's entries (one per table per transaction) and may end inside a transaction; the round
must still return each table's sets exactly once and in commit order."""

from __future__ import annotations

from typing import Any

import pytest

from dbclient import Database
from dbclient.feed import read_round, trim_seen

OVERLAP = 2000 << 16


@pytest.fixture
async def db(fresh_db: Database) -> Database:
    await fresh_db.query("DEFINE TABLE a CHANGEFEED 1h; DEFINE TABLE b CHANGEFEED 1h; "
                         "DEFINE TABLE c CHANGEFEED 1h; DEFINE TABLE d CHANGEFEED 1h")
    return fresh_db


async def tail(db: Database, tables: list[str], *, limit: int, page: int,
               cursors: dict[str, int] | None = None,
               seen: dict[str, set[int]] | None = None) -> list[tuple[str, Any]]:
    """Everything a tail of `tables` reads, as (table, record key), advancing like the
    scheduler does between rounds."""
    cursors = cursors if cursors is not None else {t: 1 << 16 for t in tables}
    seen = seen if seen is not None else {}
    out: list[tuple[str, Any]] = []
    while True:
        rnd = await read_round(db, cursors, seen, limit=limit, overlap_vs=OVERLAP, page=page)
        for vs, table, s in rnd.sets:
            out += [(table, ch["update"]["id"].id) for ch in s["changes"] if "update" in ch]
            seen.setdefault(table, set()).add(vs)
            cursors[table] = max(cursors[table], vs)
        if rnd.horizon is not None:
            for t in tables:
                cursors[t] = max(cursors[t], rnd.horizon)
        trim_seen(seen, cursors, OVERLAP)
        if not rnd.more:
            return out


async def write_mix(db: Database) -> list[tuple[str, Any]]:
    """Single-table writes and transactions over two to three tables; the creates of a and c in
    commit order (within a transaction, by table name as the feed orders them)."""
    stmts, want = [], []
    for i in range(40):
        if i % 3 == 0:
            stmts.append(f"BEGIN; CREATE c:{i}; CREATE b:{i}; CREATE a:{i}; COMMIT")
            want += [("a", i), ("c", i)]
        elif i % 3 == 1:
            stmts.append(f"CREATE b:{i}")
            stmts.append(f"CREATE a:{i}")
            want.append(("a", i))
        else:
            stmts.append(f"BEGIN; CREATE d:{i}; CREATE c:{i}; COMMIT")
            want.append(("c", i))
    await db.query("; ".join(stmts))
    return want


@pytest.mark.parametrize("page", [3, 4, 5, 7, 1000])  # a page holds the largest transaction
async def test_every_set_comes_once_in_commit_order_whatever_the_page_size(
        db: Database, page: int) -> None:
    want = await write_mix(db)
    assert await tail(db, ["a", "c"], limit=10_000, page=page) == want


@pytest.mark.parametrize("limit", [1, 3, 10])
async def test_a_round_stops_at_the_limit_and_the_next_one_carries_on(
        db: Database, limit: int) -> None:
    want = await write_mix(db)
    assert await tail(db, ["a", "c"], limit=limit, page=4) == want


async def test_a_read_round_on_an_idle_tail_returns_nothing_new(db: Database) -> None:
    await write_mix(db)
    cursors = {"a": 1 << 16, "c": 1 << 16}
    seen: dict[str, set[int]] = {}
    first = await tail(db, ["a", "c"], limit=100, page=5, cursors=cursors, seen=seen)
    assert first and await tail(db, ["a", "c"], limit=100, page=5, cursors=cursors,
                                seen=seen) == []


async def test_a_transaction_larger_than_a_page_is_reported_and_the_round_goes_on(
        db: Database) -> None:
    await db.query("BEGIN; CREATE a:1; CREATE b:1; CREATE c:1; CREATE d:1; COMMIT; "
                   "CREATE a:2")
    rnd = await read_round(db, {"a": 1 << 16}, {}, limit=100, overlap_vs=OVERLAP, page=3)
    assert len(rnd.oversized) == 1
    # a:1 sits in the first page of the big transaction; a:2 comes after it.
    keys = [ch["update"]["id"].id for _vs, _t, s in rnd.sets for ch in s["changes"]
            if "update" in ch]
    assert keys == [1, 2]
