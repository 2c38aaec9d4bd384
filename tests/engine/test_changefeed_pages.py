"""SurrealDB's own `SHOW CHANGES` paging (embedded engine, core 3.2.4), which every changefeed
reader of ours is built around (`dbclient.feed.read_round`). If an engine upgrade changes any
of this, these tests say so first.

The feed is one key range per database, ordered by (versionstamp, table): one entry per table
per transaction. `SHOW CHANGES FOR TABLE t ... LIMIT n` scans min(n, 1000) entries of that range
and drops other tables' entries AFTER the limit, so it can return a few or none of t's changes
while more wait; LIMIT above 1000 changes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from surrealdb.data.cbor import decode, encode
from surrealdb_embedded import AsyncEmbeddedDB


class Engine:
    def __init__(self, db: Any) -> None:
        self.db = db

    async def q(self, text: str) -> list[Any]:
        reply = decode(await self.db.execute(encode(
            {"id": "1", "method": "query", "params": [text, {}]})))
        return [s["result"] for s in reply["result"]]


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    db = AsyncEmbeddedDB("memory")
    await db.connect()
    await db.execute(encode({"id": "0", "method": "use", "params": ["t", "t"]}))
    yield Engine(db)
    await db.close()


def updates(sets: list[dict[str, Any]]) -> int:
    return sum(1 for s in sets for ch in s["changes"] if "update" in ch)


async def test_a_table_read_counts_every_tables_entries_against_its_limit(
        engine: Engine) -> None:
    await engine.q("DEFINE TABLE a CHANGEFEED 1h; DEFINE TABLE b CHANGEFEED 1h")
    await engine.q("; ".join(f"CREATE a:{i}; CREATE b:{i}" for i in range(20)))  # 40 entries
    # 2 definition entries, then a and b alternate: LIMIT 12 sees 5 of a's 20 creates.
    assert updates((await engine.q("SHOW CHANGES FOR TABLE a SINCE 1 LIMIT 12"))[0]) == 5
    assert updates((await engine.q("SHOW CHANGES FOR TABLE a SINCE 1 LIMIT 42"))[0]) == 20


async def test_no_read_returns_more_than_1000_entries(engine: Engine) -> None:
    await engine.q("DEFINE TABLE c CHANGEFEED 1h")
    await engine.q("; ".join(f"CREATE c:{i}" for i in range(1500)))
    for limit in (1000, 1001, 100_000):
        sets = (await engine.q(f"SHOW CHANGES FOR TABLE c SINCE 1 LIMIT {limit}"))[0]
        assert len(sets) == 1000  # the definition entry and 999 creates


async def test_other_tables_entries_can_hide_a_tables_changes_completely(
        engine: Engine) -> None:
    await engine.q("DEFINE TABLE noise CHANGEFEED 1h; DEFINE TABLE post CHANGEFEED 1h")
    await engine.q("; ".join(f"CREATE noise:{i}" for i in range(1000)))
    await engine.q("CREATE post:1")
    assert updates((await engine.q("SHOW CHANGES FOR TABLE post SINCE 1 LIMIT 1000"))[0]) == 0


async def test_a_database_read_merges_a_transaction_and_may_end_inside_it(
        engine: Engine) -> None:
    await engine.q("DEFINE TABLE a CHANGEFEED 1h; DEFINE TABLE b CHANGEFEED 1h; "
                   "DEFINE TABLE c CHANGEFEED 1h")
    await engine.q("BEGIN; CREATE c:1; CREATE a:1; CREATE b:1; COMMIT")
    whole = (await engine.q("SHOW CHANGES FOR DATABASE SINCE 1 LIMIT 100"))[0]
    tx = whole[-1]
    assert [ch["update"]["id"].table_name for ch in tx["changes"]] == ["a", "b", "c"]
    # 3 definitions + 2 of the transaction's 3 entries: the page ends inside it ...
    cut = (await engine.q("SHOW CHANGES FOR DATABASE SINCE 1 LIMIT 5"))[0]
    assert len(cut[-1]["changes"]) == 2 and cut[-1]["versionstamp"] == tx["versionstamp"]
    # ... and SINCE is inclusive, so reading on from its versionstamp completes it.
    again = (await engine.q(f"SHOW CHANGES FOR DATABASE SINCE {tx['versionstamp']} LIMIT 5"))
    assert again[0] == [tx]
