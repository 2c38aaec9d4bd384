"""LIVE queries on svc-db: fed from changefeeds, in commit order, filtered per subscriber.

"Never arrives" is checked without timing: changes are delivered in commit order, so once a
later marker change has arrived, an earlier hidden one can no longer come.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import pytest
from surrealdb.errors import SurrealError

from tests.support.dbhost_clients import (
    SCHEMA,
    actions,
    close,
    record_user,
    root_client,
    stream,
    take,
    unique_db,
)
from tests.support.procs import DbHost


def _health(host: DbHost) -> dict[str, Any]:
    with urllib.request.urlopen(f"{host.http_url}/health", timeout=5) as r:
        return dict(json.loads(r.read()))


async def test_subscriber_gets_create_update_delete_in_order(host: DbHost) -> None:
    ns, db = unique_db()
    sub = await root_client(host, ns, db)
    writer = await root_client(host, ns, db)  # writes from another connection
    try:
        qid = await sub.live("item")
        q = stream(sub, qid)
        await writer.query("CREATE item:1 SET v = 1")
        await writer.query("UPDATE item:1 SET v = 2")
        await writer.query("DELETE item:1")
        await writer.query("CREATE item:2 SET v = 3; UPDATE item:2 SET v = 4")
        notes = await take(q, 5)
        assert actions(notes) == [("CREATE", "item:1"), ("UPDATE", "item:1"),
                                  ("DELETE", "item:1"), ("CREATE", "item:2"),
                                  ("UPDATE", "item:2")]
        assert [n["result"]["v"] for n in notes] == [1, 2, 2, 3, 4]
        assert all(str(n["id"]) == str(qid) for n in notes)
    finally:
        await close(sub, writer)


async def test_writes_from_the_same_connection_arrive(host: DbHost) -> None:
    ns, db = unique_db()
    c = await root_client(host, ns, db)
    try:
        q = stream(c, await c.live("item"))
        await c.create("item:a", {"v": 1})
        await c.merge("item:a", {"w": 2})
        await c.delete("item:a")
        assert actions(await take(q, 3)) == [("CREATE", "item:a"), ("UPDATE", "item:a"),
                                             ("DELETE", "item:a")]
    finally:
        await close(c)


async def test_hidden_rows_never_reach_a_record_user(host: DbHost) -> None:
    ns, db = unique_db()
    root = await root_client(host, ns, db)
    await root.query(SCHEMA)
    alice = await record_user(host, ns, db, "alice")
    await record_user(host, ns, db, "bob")
    try:
        [alice_id] = await root.query("SELECT VALUE id FROM user WHERE name = 'alice'")
        [bob_id] = await root.query("SELECT VALUE id FROM user WHERE name = 'bob'")
        alice_q = stream(alice, await alice.live("post"))
        root_q = stream(root, await root.live("post"))
        await root.query("CREATE post:b SET owner = $o, title = 'bob'", {"o": bob_id})
        await root.query("CREATE post:a SET owner = $o, title = 'alice'", {"o": alice_id})
        await root.query("UPDATE post:b SET n = 1")
        await root.query("DELETE post:b")
        await root.query("UPDATE post:a SET n = 1")
        await root.query("DELETE post:a")
        got = await take(alice_q, 3)
        assert actions(got) == [("CREATE", "post:a"), ("UPDATE", "post:a"), ("DELETE", "post:a")]
        assert all(n["result"]["owner"] == alice_id for n in got)
        # Root is not bound by table permissions: it sees every change.
        assert [a for a, _ in actions(await take(root_q, 6))] == [
            "CREATE", "CREATE", "UPDATE", "DELETE", "UPDATE", "DELETE"]
        assert alice_q.empty()
    finally:
        await close(root, alice)


async def test_row_moving_out_of_a_users_permission_is_not_sent(host: DbHost) -> None:
    ns, db = unique_db()
    root = await root_client(host, ns, db)
    await root.query(SCHEMA)
    alice = await record_user(host, ns, db, "alice")
    await record_user(host, ns, db, "bob")
    try:
        [alice_id] = await root.query("SELECT VALUE id FROM user WHERE name = 'alice'")
        [bob_id] = await root.query("SELECT VALUE id FROM user WHERE name = 'bob'")
        q = stream(alice, await alice.live("post"))
        await root.query("CREATE post:x SET owner = $o, title = 't'", {"o": alice_id})
        await root.query("UPDATE post:x SET owner = $o", {"o": bob_id})  # now bob's
        await root.query("DELETE post:x")  # deleted while bob's: hidden from alice
        await root.query("CREATE post:marker SET owner = $o, title = 'm'", {"o": alice_id})
        assert actions(await take(q, 2)) == [("CREATE", "post:x"), ("CREATE", "post:marker")]
    finally:
        await close(root, alice)


async def test_kill_stops_the_stream(host: DbHost) -> None:
    ns, db = unique_db()
    c = await root_client(host, ns, db)
    try:
        killed = await c.live("item")
        killed_q = stream(c, killed)
        marker_q = stream(c, await c.live("item"))
        await c.query("CREATE item:1")
        assert actions(await take(killed_q, 1)) == [("CREATE", "item:1")]
        await c.kill(killed)
        await c.query("CREATE item:2")
        assert actions(await take(marker_q, 2)) == [("CREATE", "item:1"), ("CREATE", "item:2")]
        assert killed_q.empty()
        with pytest.raises(Exception, match="KILL"):
            await c.kill(killed)  # already gone
    finally:
        await close(c)


async def test_kill_statement_in_query_text(host: DbHost) -> None:
    ns, db = unique_db()
    c = await root_client(host, ns, db)
    try:
        res = await c.query_raw("LIVE SELECT * FROM item")
        qid = res["result"][0]["result"]
        killed_q = stream(c, qid)
        marker_q = stream(c, await c.live("item"))
        res = await c.query_raw("KILL $q", {"q": qid})
        assert res["result"][0]["status"] == "OK"
        res = await c.query_raw(f"KILL u'{qid}'")
        assert res["result"][0]["status"] == "ERR"  # already killed
        await c.query("CREATE item:1")
        await take(marker_q, 1)
        assert killed_q.empty()
    finally:
        await close(c)


async def test_two_subscribers_each_get_their_own(host: DbHost) -> None:
    ns, db = unique_db()
    a = await root_client(host, ns, db)
    b = await root_client(host, ns, db)
    try:
        qa, qb = await a.live("item"), await b.live("item")
        assert qa != qb
        sa, sb = stream(a, qa), stream(b, qb)
        await a.query("CREATE item:1; CREATE item:2")
        assert actions(await take(sa, 2)) == [("CREATE", "item:1"), ("CREATE", "item:2")]
        assert actions(await take(sb, 2)) == [("CREATE", "item:1"), ("CREATE", "item:2")]
    finally:
        await close(a, b)


async def test_live_select_where_and_projection(host: DbHost) -> None:
    ns, db = unique_db()
    c = await root_client(host, ns, db)
    try:
        res = await c.query_raw(
            "CREATE item:0 SET v = 100; LIVE SELECT v, tag FROM item WHERE v > $min; RETURN 5",
            {"min": 10})
        stmts = res["result"]
        assert [s["status"] for s in stmts] == ["OK", "OK", "OK"]
        assert stmts[2]["result"] == 5
        q = stream(c, stmts[1]["result"])
        await c.query("CREATE item:1 SET v = 5, tag = 'low', other = 1")
        await c.query("CREATE item:2 SET v = 50, tag = 'high', other = 2")
        await c.query("UPDATE item:1 SET v = 20")
        notes = await take(q, 2)
        assert actions(notes) == [("CREATE", "item:2"), ("UPDATE", "item:1")]
        assert notes[0]["result"] == {"v": 50, "tag": "high"}
        assert notes[1]["result"] == {"v": 20, "tag": "low"}
    finally:
        await close(c)


async def test_live_select_diff_sends_patches(host: DbHost) -> None:
    ns, db = unique_db()
    c = await root_client(host, ns, db)
    try:
        res = await c.query_raw("LIVE SELECT DIFF FROM item")
        q = stream(c, res["result"][0]["result"])
        await c.query("CREATE item:1 SET a = 1, b = 2")
        await c.query("UPDATE item:1 SET a = 10, c = 3, b = NONE")
        await c.query("DELETE item:1")
        create, update, delete = await take(q, 3)
        assert create["action"] == "CREATE"
        assert create["result"][0]["op"] == "replace"
        assert create["result"][0]["value"]["a"] == 1
        assert update["action"] == "UPDATE"
        assert sorted((p["op"], p["path"]) for p in update["result"]) == [
            ("add", "/c"), ("remove", "/b"), ("replace", "/a")]
        assert delete["action"] == "DELETE"
    finally:
        await close(c)


async def test_enabling_the_changefeed_keeps_the_table_definition(host: DbHost) -> None:
    ns, db = unique_db()
    root = await root_client(host, ns, db)
    await root.query(SCHEMA)
    await root.query("DEFINE EVENT count_posts ON post WHEN $event = 'CREATE' "
                     "THEN (UPSERT stats:posts SET n += 1)")
    before_db = await root.query("INFO FOR DB STRUCTURE")
    before_table = await root.query("INFO FOR TABLE post")
    alice = await record_user(host, ns, db, "alice")
    try:
        await alice.live("post")
        after_db = await root.query("INFO FOR DB STRUCTURE")
        after_table = await root.query("INFO FOR TABLE post")
        [post_before] = [t for t in before_db["tables"] if t["name"] == "post"]
        [post_after] = [t for t in after_db["tables"] if t["name"] == "post"]
        assert post_after["permissions"] == post_before["permissions"]
        assert post_after["schemafull"] is True
        assert "changefeed" in post_after and "changefeed" not in post_before
        assert after_table["fields"] == before_table["fields"]
        assert after_table["events"] == before_table["events"]
        # And they still act: schemafull rejects unknown types, permissions hide rows.
        with pytest.raises(SurrealError):
            await root.query("CREATE post SET owner = 'nope', title = 1")
        [alice_id] = await root.query("SELECT VALUE id FROM user WHERE name = 'alice'")
        await root.query("CREATE post SET owner = $o, title = 't'", {"o": alice_id})
        assert await root.query("SELECT VALUE n FROM stats:posts") == [1]
    finally:
        await close(root, alice)


async def test_live_errors_are_reported(host: DbHost) -> None:
    ns, db = unique_db()
    c = await root_client(host, ns, db)
    try:
        res = await c.query_raw("LIVE SELECT * FROM item ORDER BY v")
        assert res["result"][0]["status"] == "ERR"
        res = await c.query_raw("LIVE SELECT * FROM item WHERE (((")
        assert res["result"][0]["status"] == "ERR"
        # The connection still works.
        assert await c.query("RETURN 3") == 3
    finally:
        await close(c)


async def test_closing_a_connection_kills_its_live_queries(host: DbHost) -> None:
    ns, db = unique_db()
    c = await root_client(host, ns, db)
    await c.live("item")
    await c.close()
    other = await root_client(host, ns, db)
    try:
        for _ in range(200):  # the host notices the close asynchronously
            if (await asyncio.to_thread(_health, host))["live_queries"] == 0:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("live query still registered after its connection closed")
    finally:
        await close(other)


async def test_concurrent_writers_lose_nothing(host: DbHost) -> None:
    ns, db = unique_db()
    sub = await root_client(host, ns, db)
    writers = [await root_client(host, ns, db) for _ in range(4)]
    try:
        q = stream(sub, await sub.live("item"))

        async def write(w: int, client: object) -> None:
            for i in range(25):
                await client.query(f"CREATE item:w{w}_{i} SET w = {w}, i = {i}")  # type: ignore[attr-defined]
                await client.query(f"UPDATE item:w{w}_{i} SET i += 100")  # type: ignore[attr-defined]

        await asyncio.gather(*(write(w, c) for w, c in enumerate(writers)))
        notes = await take(q, 200)
        seen: dict[str, list[str]] = {}
        for action, rid in actions(notes):
            seen.setdefault(rid, []).append(action)
        assert len(seen) == 100
        assert all(v == ["CREATE", "UPDATE"] for v in seen.values())
        # Per writer, rows arrive in the order that writer committed them.
        for w in range(4):
            order = [int(rid.split("_")[1]) for a, rid in actions(notes)
                     if a == "CREATE" and rid.startswith(f"item:w{w}_")]
            assert order == list(range(25))
        await sub.query("CREATE item:marker")
        last = await take(q, 1)
        assert actions(last) == [("CREATE", "item:marker")]  # no duplicates before it
    finally:
        await close(sub, *writers)


async def test_record_user_live_where_with_auth(host: DbHost) -> None:
    ns, db = unique_db()
    root = await root_client(host, ns, db)
    await root.query(SCHEMA)
    alice = await record_user(host, ns, db, "alice")
    try:
        [alice_id] = await root.query("SELECT VALUE id FROM user WHERE name = 'alice'")
        res = await alice.query_raw("LIVE SELECT title FROM post WHERE n >= 5")
        q = stream(alice, res["result"][0]["result"])
        await root.query("CREATE post:1 SET owner = $o, title = 'small', n = 1", {"o": alice_id})
        await root.query("CREATE post:2 SET owner = $o, title = 'big', n = 9", {"o": alice_id})
        notes = await take(q, 1)
        assert actions(notes) == [("CREATE", "post:2")]
        assert notes[0]["result"] == {"title": "big"}
    finally:
        await close(root, alice)


async def test_redefining_the_table_later_does_not_break_the_stream(host: DbHost) -> None:
    ns, db = unique_db()
    c = await root_client(host, ns, db)
    try:
        q = stream(c, await c.live("item"))
        await c.query("DEFINE TABLE OVERWRITE item SCHEMALESS CHANGEFEED 1h")
        await c.query("CREATE item:1 SET v = 1")
        await c.query("UPDATE item:1 SET v = 2")
        await c.query("DELETE item:1")
        notes = await take(q, 3)
        assert [a for a, _ in actions(notes)][-1] == "DELETE"
        await c.query("CREATE item:2 SET v = 1")
        await c.query("UPDATE item:2 SET v = 2")
        await c.query("DELETE item:2")
        assert actions(await take(q, 3)) == [("CREATE", "item:2"), ("UPDATE", "item:2"),
                                             ("DELETE", "item:2")]
        info = await c.query("INFO FOR DB")
        assert "INCLUDE ORIGINAL" in info["tables"]["item"]
    finally:
        await close(c)


async def test_a_change_behind_a_page_of_other_tables_entries_is_delivered(
        host: DbHost) -> None:
    # SHOW CHANGES' LIMIT counts every table's feed entries (tests/engine/
    # test_changefeed_pages.py): a per-table read saw only the other table's 1,000 entries.
    ns, db = unique_db()
    sub = await root_client(host, ns, db)
    writer = await root_client(host, ns, db)
    try:
        await writer.query("DEFINE TABLE noise CHANGEFEED 1h")
        q = stream(sub, await sub.live("item"))
        await writer.query("; ".join(f"CREATE noise:{i}" for i in range(1100)))
        await writer.query("CREATE item:behind SET v = 1")
        assert actions(await take(q, 1)) == [("CREATE", "item:behind")]
        await writer.query("CREATE item:next SET v = 2")
        assert actions(await take(q, 1)) == [("CREATE", "item:next")]
    finally:
        await close(sub, writer)


async def test_only_followed_tables_changes_are_built(host: DbHost) -> None:
    # The host reads the whole database's feed; a subscriber follows one table. Rows of the
    # other tables (the application's writes, most of the feed) are decoded in C and never
    # built into SDK values: the host's Python cost follows what subscribers watch.
    ns, db = unique_db()
    sub = await root_client(host, ns, db)
    writer = await root_client(host, ns, db)
    try:
        await writer.query("DEFINE TABLE noise CHANGEFEED 1h INCLUDE ORIGINAL")
        q = stream(sub, await sub.live("item"))
        # the subscription's own DEFINE of the changefeed may be in the first read: settle
        await writer.query("CREATE item:zero SET v = 0")
        assert actions(await take(q, 1)) == [("CREATE", "item:zero")]
        built = _health(host)["live_changes_built"]
        await writer.query("; ".join(f"CREATE noise:{i} SET v = {i}" for i in range(300)))
        await writer.query("CREATE item:one SET v = 1")
        assert actions(await take(q, 1)) == [("CREATE", "item:one")]
        await writer.query("; ".join(f"UPDATE noise:{i} SET v = -1" for i in range(300)))
        await writer.query("UPDATE item:one SET v = 2")
        assert actions(await take(q, 1)) == [("UPDATE", "item:one")]
        # every read re-reads a recent window (OVERLAP_VS): a set is built once all the same
        assert _health(host)["live_changes_built"] - built == 2
    finally:
        await close(sub, writer)
