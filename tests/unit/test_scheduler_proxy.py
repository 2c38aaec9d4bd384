"""`/proxy/query` statements on the replica, the view tracker and the balancing strategies."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from surrealdb import RecordID
from surrealdb.data.cbor import decode

from scheduler.config import LoadBalance
from scheduler.proxy import (
    SUPPORTED,
    ProxyInvalid,
    encode_cbor,
    encode_json,
    parse_statement,
    run_statement,
)
from scheduler.replica import Replica
from scheduler.views import Candidate, ViewTracker, rank_candidates


@pytest.mark.parametrize("text,kind,table,limit", [
    ("SELECT * FROM user ORDER BY id LIMIT 500", "first", "user", 500),
    ("select * from user order by id limit 3;", "first", "user", 3),
    ("SELECT * FROM _00_query WHERE id > $last ORDER BY id LIMIT 10", "after", "_00_query", 10),
    ("SELECT count() AS n FROM user GROUP ALL", "count", "user", None),
    ("INFO FOR DB", "info_db", None, None),
    ("info for table user", "info_table", "user", None),
    ("TABLES", "tables", None, None),
])
def test_served_statements_parse(text: str, kind: str, table: str | None,
                                 limit: int | None) -> None:
    st = parse_statement(text, {"last": "user:1"})
    assert (st.kind, st.table, st.limit) == (kind, table, limit)


@pytest.mark.parametrize("text", [
    "DELETE user", "SELECT * FROM user", "SELECT * FROM user ORDER BY name LIMIT 5",
    "SELECT * FROM `user` ORDER BY id LIMIT 5", "SELECT * FROM user ORDER BY id LIMIT 0",
    "SELECT * FROM user ORDER BY id LIMIT 5; DELETE user", "",
    "SELECT * FROM t ORDER BY id ASC LIMIT 5", "SELECT * FROM t ORDER BY id LIMIT $n",
    "INFO FOR NS", "SELECT * FROM t WHERE id > $last ORDER BY id DESC LIMIT 5",
])
def test_other_statements_are_refused(text: str) -> None:
    with pytest.raises(ProxyInvalid, match="serves only the SSP bootstrap reads|LIMIT must"):
        parse_statement(text, {})


def test_bad_query_and_vars_types() -> None:
    with pytest.raises(ProxyInvalid, match="query must be a string"):
        parse_statement(5, {})
    with pytest.raises(ProxyInvalid, match="vars must be an object"):
        parse_statement("TABLES", [1])
    with pytest.raises(ProxyInvalid, match="vars.last"):
        parse_statement("SELECT * FROM t WHERE id > $last ORDER BY id LIMIT 1", {})


async def test_statements_run_on_the_replica(tmp_path: Path) -> None:
    rep = Replica.open(tmp_path / "r.sqlite3")
    rows = [{"id": RecordID("user", i), "n": i,
             "at": datetime(2024, 1, 1, tzinfo=UTC), "d": Decimal("1.5")} for i in range(5)]
    rep.replace_all({"user": rows}, 0)

    async def upstream(text: str) -> str:
        return f"upstream:{text}"

    first = await run_statement(parse_statement("SELECT * FROM user ORDER BY id LIMIT 2", {}),
                                rep, upstream)
    assert [r["n"] for r in first] == [0, 1]
    after = await run_statement(parse_statement(
        "SELECT * FROM user WHERE id > $last ORDER BY id LIMIT 10",
        {"last": RecordID("user", 1)}), rep, upstream)
    assert [r["n"] for r in after] == [2, 3, 4]
    text_last = await run_statement(parse_statement(
        "SELECT * FROM user WHERE id > $last ORDER BY id LIMIT 10", {"last": "user:3"}),
        rep, upstream)
    assert [r["n"] for r in text_last] == [4]
    with pytest.raises(ProxyInvalid):
        await run_statement(parse_statement(
            "SELECT * FROM user WHERE id > $last ORDER BY id LIMIT 1", {"last": "other:1"}),
            rep, upstream)
    count = parse_statement("SELECT count() AS n FROM user GROUP ALL", {})
    assert await run_statement(count, rep, upstream) == [{"n": 5}]
    empty = parse_statement("SELECT count() AS n FROM nothing GROUP ALL", {})
    assert await run_statement(empty, rep, upstream) == []
    assert await run_statement(parse_statement("TABLES", {}), rep, upstream) == ["user"]
    assert await run_statement(parse_statement("INFO FOR DB", {}), rep, upstream) == \
        "upstream:INFO FOR DB"
    cbor = decode(encode_cbor(first))
    assert cbor[0]["status"] == "OK" and cbor[0]["result"][0]["id"] == RecordID("user", 0)
    assert cbor[0]["result"][0]["d"] == Decimal("1.5")
    js = json.loads(encode_json(first))
    assert js[0]["result"][0]["id"] == "user:0"
    assert js[0]["result"][0]["at"] == "2024-01-01T00:00:00Z"
    rep.close()


def test_tracker_persists_unless_cleared(tmp_path: Path) -> None:
    path = tmp_path / "views.sqlite"
    t = ViewTracker(path, clear=False)
    t.set("query:a", "s1", {"id": "query:a"})
    t.set("query:b", "s2", {"id": "query:b"})
    assert t.unassign("s1") == ["query:a"]
    t.close()
    t = ViewTracker(path, clear=False)
    assert t.get("query:a")["ssp_id"] is None and t.get("query:b")["ssp_id"] == "s2"
    assert t.counts() == {None: 1, "s2": 1}
    t.close()
    t = ViewTracker(path, clear=True)
    assert len(t) == 0
    t.close()


def test_rank_candidates() -> None:
    c = [Candidate("b", 5, 10.0, 100.0), Candidate("a", 1, 50.0, 10.0),
         Candidate("c", 3, 10.0, 50.0)]
    assert rank_candidates(LoadBalance.LEAST_QUERIES, c, 0) == ["a", "c", "b"]
    assert rank_candidates(LoadBalance.LEAST_LOAD, c, 0) == ["c", "b", "a"]
    assert rank_candidates(LoadBalance.ROUND_ROBIN, c, 0) == ["a", "b", "c"]
    assert rank_candidates(LoadBalance.ROUND_ROBIN, c, 4) == ["b", "c", "a"]
    assert rank_candidates(LoadBalance.ROUND_ROBIN, [], 3) == []
    # least_load against each SSP's memory ceiling (heartbeat memory_limit_mb; 1024 default):
    # at or over it goes last; below, lower CPU, then the smaller share of its own ceiling.
    m = [Candidate("x", 0, 5.0, 600.0, 4096.0), Candidate("y", 0, 5.0, 300.0, 512.0),
         Candidate("z", 0, 1.0, 1024.0)]
    assert rank_candidates(LoadBalance.LEAST_LOAD, m, 0) == ["x", "y", "z"]
    assert Candidate("old", 0, 0.0, 512.0).memory_share == 0.5


async def test_the_served_statements_are_exactly_what_an_ssp_bootstrap_sends() -> None:
    # The SSP's proxy client (ssp.link.ProxySource) against an aiohttp server that parses each
    # statement with the scheduler's parser: every statement it sends is served, and every
    # served kind is one it sends (nothing broader is kept "just in case").
    import aiohttp
    from aiohttp import web

    from ssp.hub.loading import ZERO_ROW_CHECK
    from ssp.link import ProxySource
    from tests.support.procs import free_port

    kinds: list[str] = []

    async def proxy(req: web.Request) -> web.Response:
        body = await req.json()
        st = parse_statement(body["query"], body.get("vars"))
        kinds.append(st.kind)
        result: object = {"first": [{"id": RecordID("t", 1)}], "after": [],
                          "count": [{"n": 1}], "tables": ["t"], "info_db": {"tables": {}},
                          "info_table": {"fields": {}}}[st.kind]
        return web.Response(body=encode_cbor(result), content_type="application/cbor")

    app = web.Application()
    app.router.add_post("/proxy/query", proxy)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession() as http:
            src = ProxySource(http, f"http://127.0.0.1:{port}", None)
            await src.table_definitions()
            await src.replica_tables()
            await src.table_info("t")
            assert [p async for p in src.keyset_pages("t", 1)] == [[{"id": RecordID("t", 1)}]]
            assert await src.query_one(ZERO_ROW_CHECK.format(table="t")) == [{"n": 1}]
    finally:
        await runner.cleanup()
    assert sorted(kinds) == sorted(["info_db", "tables", "info_table", "first", "after",
                                    "count"])
    assert len(SUPPORTED) == len(set(kinds))


def test_tracker_counts_are_kept_with_every_write(tmp_path: Path) -> None:
    # placement reads the counts per registration: they are kept, not recounted, and must
    # equal a count of the entries after any sequence of writes, and after a reopen
    r = random.Random(3)
    path = tmp_path / "views.sqlite"
    t = ViewTracker(path, clear=False)

    def recount(tr: ViewTracker) -> dict[str | None, int]:
        out: dict[str | None, int] = {}
        for _, e in tr.items():
            out[e["ssp_id"]] = out.get(e["ssp_id"], 0) + 1
        return out

    for _ in range(400):
        vid = f"query:v{r.randrange(40)}"
        op = r.random()
        if op < 0.55:
            t.set(vid, r.choice(["s1", "s2", "s3", None]), {"id": vid})
        elif op < 0.85:
            t.pop(vid)
        else:
            t.unassign(r.choice(["s1", "s2", "s3"]))
        assert t.counts() == recount(t)
    before = t.counts()
    t.close()
    t = ViewTracker(path, clear=False)
    assert t.counts() == before == recount(t)
    t.close()
