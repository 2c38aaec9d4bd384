"""A `SHOW CHANGES` reply decoded lazily (`dbclient.cbor.LazyChanges`): the same values as a
whole decode, and a feed round (`dbclient.feed.read_round`) builds only the tables it keeps.

The replies come from the embedded engine (core 3.2.4), so the shape the lazy decoder
recognises is SurrealDB's own: a change set is `{versionstamp, changes}`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import cbor2
import pytest
from surrealdb_embedded import AsyncEmbeddedDB

from dbclient.cbor import LazyChanges, _tag_hook, decode, encode
from dbclient.feed import read_round
from dbclient.sql import show_changes_sql


class Engine:
    """The embedded engine answering raw query frames, as the host's socket would."""

    def __init__(self, db: Any) -> None:
        self.db = db

    async def raw(self, text: str, params: dict[str, Any] | None = None) -> bytes:
        reply: bytes = await self.db.execute(encode(
            {"id": "1", "method": "query", "params": [text, params or {}]}))
        return reply

    async def q(self, text: str, params: dict[str, Any] | None = None) -> list[Any]:
        return [s["result"] for s in decode(await self.raw(text, params))["result"]]


class FeedDb:
    """`Database.changes` over the engine, decoded the way the SDK's socket decodes."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.replies: list[list[dict[str, Any]]] = []

    async def changes(self, table: str | None, since: int, limit: int = 1000) -> list[Any]:
        sets = (await self.engine.q(show_changes_sql(table, since, limit)))[0]
        self.replies.append(sets)
        return list(sets)


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    db = AsyncEmbeddedDB("memory")
    await db.connect()
    await db.execute(encode({"id": "0", "method": "use", "params": ["t", "t"]}))
    eng = Engine(db)
    await eng.q("DEFINE TABLE post CHANGEFEED 1h INCLUDE ORIGINAL; "
                "DEFINE TABLE edge TYPE RELATION CHANGEFEED 1h INCLUDE ORIGINAL")
    yield eng
    await db.close()


async def write_mix(engine: Engine) -> None:
    """Rows with the dialect's tagged values (record links, datetimes, decimals, durations,
    NONE inside arrays), edges between them, updates and deletes: one transaction each."""
    for i in range(6):
        await engine.q(
            "CREATE type::record('post', $i) SET n = $i, at = d'2026-12-01T00:00:00Z', "
            "price = 1.5dec, wait = 90s, tags = ['a', NONE, 3], nested = { link: "
            "type::record('post', 0), deep: [{ x: NONE }] }", {"i": i})
    for i in range(1, 6):
        await engine.q("RELATE (type::record('post', 0))->(type::record('edge', [0, $i]))->"
                       "(type::record('post', $i)) SET rv = $i", {"i": i})
    await engine.q("UPDATE post:2 SET n = 20; DELETE post:3; DELETE edge:[0, 1]")


async def test_a_feed_reply_decodes_to_the_values_a_whole_decode_gives(engine: Engine) -> None:
    await write_mix(engine)
    data = await engine.raw("SHOW CHANGES FOR DATABASE SINCE 0 LIMIT 1000")
    whole = cbor2.loads(data, tag_hook=_tag_hook)
    lazy = decode(data)
    sets = lazy["result"][0]["result"]
    assert len(sets) == len(whole["result"][0]["result"]) > 10
    assert all(isinstance(s["changes"], LazyChanges) for s in sets)
    assert lazy == whole  # LazyChanges compares as the list it stands for
    # every way a reader takes the changes gives the whole decode's values
    for got, want in zip(sets, whole["result"][0]["result"], strict=True):
        assert got["versionstamp"] == want["versionstamp"]
        assert list(got["changes"]) == want["changes"]
        assert [got["changes"][i] for i in range(len(got["changes"]))] == want["changes"]
        assert got["changes"][-1:] == want["changes"][-1:]


async def test_other_replies_are_decoded_whole(engine: Engine) -> None:
    # The key's bytes inside application data: not a change set, decoded whole.
    await engine.q("CREATE post:9 SET versionstamp = 1, changes = [{ total: 1 }]")
    data = await engine.raw("SELECT * FROM post:9; SELECT versionstamp, changes FROM post:9")
    assert b"versionstamp" in data
    whole = cbor2.loads(data, tag_hook=_tag_hook)
    got = decode(data)
    assert got == whole
    assert not any(isinstance(r.get("changes"), LazyChanges)
                   for st in got["result"] for r in st["result"])
    empty = await engine.raw("SHOW CHANGES FOR TABLE post SINCE 99999999999999999 LIMIT 10")
    assert decode(empty) == cbor2.loads(empty, tag_hook=_tag_hook)


async def test_a_round_builds_only_the_tables_it_keeps(engine: Engine) -> None:
    await write_mix(engine)
    db = FeedDb(engine)
    rnd = await read_round(db, {"post": 0}, {}, limit=1000, overlap_vs=0)  # type: ignore[arg-type]
    # the kept table's changes: what a whole decode of the same feed gives for it
    whole = cbor2.loads(await engine.raw("SHOW CHANGES FOR TABLE post SINCE 0 LIMIT 1000"),
                        tag_hook=_tag_hook)["result"][0]["result"]
    want = [(s["versionstamp"], s["changes"]) for s in whole if s["changes"]]
    assert [(vs, body["changes"]) for vs, _t, body in rnd.sets] == want
    assert all(table == "post" for _vs, table, _body in rnd.sets)
    assert all(type(body["changes"]) is list for _vs, _t, body in rnd.sets)
    # the edge sets were read but never built
    edge_sets = [s for sets in db.replies for s in sets
                 if s["changes"] and all("edge" in repr(c.get("update", c.get("delete", c)))
                                         for c in s["changes"].raw)]
    assert edge_sets
    assert all(s["changes"]._built is None for s in edge_sets)
