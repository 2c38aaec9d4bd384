"""Every multi-step change of a view that can fail half way, through real processes (database
host + `python -m ssp`): after the failure the DATABASE holds either the old view, intact and
still maintained, or nothing of it (no `_00_query` row, no edges). ssp/README.md,
"Registration failures", states the rules."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from dbclient import Database
from engine.parser import MAX_DEPTH, MAX_QUERY_CHARS
from engine.values import record_id_text
from ssp.shards import shard_of
from tests.support.procs import DbHost
from tests.support.ssp_stack import (
    APP_SCHEMA,
    Stack,
    app_write,
    apply_schema,
    edges,
    root_db,
    start_ssp,
    unique_db,
    view_body,
    wait_for,
)

EDGES = "_00_list_ref_user_alice"
TOP = "SELECT * FROM thread WHERE score > 3"
SETUP = ("CREATE user:alice SET name = 'alice', pass = 'x'; DEFINE TABLE thread SCHEMALESS; "
         "CREATE thread:1 SET score = 5, title = 'a'; CREATE thread:2 SET score = 1, title = 'b'")


@contextlib.asynccontextmanager
async def thread_stack(host: DbHost, tmp: Path, setup: str = SETUP, after_schema: str = "",
                       **env: str) -> AsyncIterator[Stack]:
    """The issue's setup: a SCHEMALESS `thread` table with rows, the service schema applied
    over it, then an SSP (changefeed). `after_schema` runs between the two."""
    ns, db = unique_db()
    root = await root_db(host, ns, db)
    await root.query(APP_SCHEMA)
    await root.query(setup)
    apply_schema(host, ns, db)
    if after_schema:
        await root.query(after_schema)
    stack = Stack(host, ns, db, start_ssp(tmp, host, ns, db, **env), root)
    try:
        await stack.ssp.wait_ready()
        yield stack
    finally:
        code = stack.ssp.stop()
        await root.close()
        assert code == 0, stack.ssp.process.log_text()[-3000:]


async def row_of(st: Stack, key: str) -> dict[str, Any] | None:
    return await st.root.query_one("SELECT * FROM ONLY type::record('_00_query', $k)",  # type: ignore[no-any-return]
                                   {"k": key})


async def answer(root: Database, surql: str) -> set[str]:
    """SurrealDB's own answer to a view query (no `$auth` in these)."""
    return {record_id_text(r["id"]) for r in await root.query_one(surql)}


async def view_matches(st: Stack, key: str, surql: str) -> bool:
    """The view's row is `ready` with `surql`, and its edges are SurrealDB's answer."""
    row = await row_of(st, key)
    if row is None or row.get("state") != "ready" or row.get("surql") != surql:
        return False
    return await edges(st.root, EDGES, key) == await answer(st.root, surql)


async def nothing_of(st: Stack, key: str) -> bool:
    """No `_00_query` row and no edge of the view is left."""
    return await row_of(st, key) is None and await edges(st.root, EDGES, key) == set()


async def debug_view(st: Stack, key: str) -> dict[str, Any]:
    return await st.ssp.call("GET /debug/view/{view_id}", params={"view_id": f"query:{key}"})


async def register(st: Stack, key: str, surql: str, **extra: Any) -> dict[str, Any]:
    return await st.ssp.call("POST /view/register", view_body(key, surql, **extra))


async def shard_pid(st: Stack, key: str, shards: int) -> int | None:
    """The pid of the shard owning view `query:<key>` (None while it is restarting)."""
    mem = (await st.ssp.call("GET /debug/memory"))["body"]
    pid = mem["shards"][shard_of(f"query:{key}", shards)].get("pid")
    return int(pid) if pid else None


async def running_shard_pid(st: Stack, key: str, shards: int) -> int:
    return int(await wait_for(lambda: shard_pid(st, key, shards), what="shard running"))


async def test_refused_re_registration_keeps_the_held_view_maintained(host: DbHost,
                                                                      tmp_path: Path) -> None:
    # The reproduction: the refused re-registration used to drop the view from the
    # SSP and leave its row `ready` and its edges [thread:1] forever.
    async with thread_stack(host, tmp_path, SVC_SSP_SHARDS="1") as st:
        r = await register(st, "top", TOP)
        assert r["status"] == 200 and r["body"]["records"] == ["thread:1"], r
        # At once, while the first edges may still be unwritten (the row `materializing`).
        r = await register(st, "top", TOP + " SPLIT score LIMIT 1")
        assert r["status"] == 400 and r["body"]["error"] == "rejected", r
        assert "SPLIT" in r["body"]["message"]
        assert "keeps its previous query and is still maintained" in r["body"]["message"]
        deep = ("SELECT * FROM thread WHERE " + "(" * (MAX_DEPTH + 1) + "score = 1"
                + ")" * (MAX_DEPTH + 1))
        r = await register(st, "top", deep)
        assert r["status"] == 400 and r["body"]["error"] == "rejected", r
        assert "MAX_DEPTH" in r["body"]["message"] and "keeps its previous" in r["body"]["message"]
        await wait_for(lambda: view_matches(st, "top", TOP), what="the old view published")
        await st.root.query("CREATE thread:3 SET score = 9; UPDATE thread:1 SET score = 0")
        await wait_for(lambda: view_matches(st, "top", TOP), what="the old view maintained")
        assert await edges(st.root, EDGES, "top") == {"thread:3"}
        d = await debug_view(st, "top")
        assert d["status"] == 200 and d["body"]["surql"] == TOP
        # A query it accepts does replace the view, and the new one is maintained.
        low = "SELECT * FROM thread WHERE score < 3"
        r = await register(st, "top", low)
        assert r["status"] == 200, r
        await st.root.query("CREATE thread:4 SET score = 2")
        await wait_for(lambda: view_matches(st, "top", low), what="the view moved to the new query")
        assert await edges(st.root, EDGES, "top") == {"thread:1", "thread:2", "thread:4"}


async def test_wide_queries_register_and_limits_are_refused_by_name(host: DbHost,
                                                                    tmp_path: Path) -> None:
    async with thread_stack(host, tmp_path, SVC_SSP_SHARDS="1") as st:
        # SurrealDB 3.2.4 itself refuses a chain this long ("nests or chains operators too
        # deeply"): its answer is read with the equivalent `score IN [...]`.
        wide = "SELECT * FROM thread WHERE " + " OR ".join(f"score = {i}" for i in range(1000))
        same = "SELECT * FROM thread WHERE score IN $s"

        async def wide_matches() -> bool:
            want = {record_id_text(r["id"]) for r in await st.root.query_one(
                same, {"s": list(range(1000))})}
            row = await row_of(st, "wide")
            return (row is not None and row.get("state") == "ready"
                    and await edges(st.root, EDGES, "wide") == want)

        r = await register(st, "wide", wide)
        assert r["status"] == 200, r
        assert set(r["body"]["records"]) == {"thread:1", "thread:2"}
        await st.root.query("CREATE thread:7 SET score = 999; CREATE thread:8 SET score = 1000")
        await wait_for(wide_matches, what="wide view maintained")
        assert await edges(st.root, EDGES, "wide") == {"thread:1", "thread:2", "thread:7"}
        # Subqueries nested exactly MAX_DEPTH levels: registered, and the result (nested as
        # deep) crosses the shard -> hub wire and comes back in the reply.
        nest = "SELECT * FROM thread WHERE score = $parent.score"
        for _ in range(MAX_DEPTH - 1):
            nest = f"SELECT *, ({nest}) AS s FROM thread WHERE score = $parent.score"
        nest = f"SELECT *, ({nest}) AS s FROM thread"
        r = await register(st, "nest", nest)
        assert r["status"] == 200, r
        top = next(x for x in r["body"]["result"] if x["id"] == "thread:2")
        depth = 0
        while isinstance(top.get("s"), list) and top["s"]:
            top, depth = top["s"][0], depth + 1
        assert depth == MAX_DEPTH
        r = await register(st, "nest2", f"SELECT *, ({nest}) AS s FROM thread")
        assert r["status"] == 400 and "MAX_DEPTH" in r["body"]["message"], r
        assert await nothing_of(st, "nest2")
        for key, surql, named in (
            ("deep", "SELECT * FROM thread WHERE " + "(" * 200 + "score = 1" + ")" * 200,
             "MAX_DEPTH"),
            ("long", "SELECT * FROM thread WHERE title = '" + "x" * MAX_QUERY_CHARS + "'",
             "MAX_QUERY_CHARS"),
        ):
            r = await register(st, key, surql)
            assert r["status"] == 400 and r["body"]["error"] == "rejected", r
            assert named in r["body"]["message"]
            assert await nothing_of(st, key)
        nested: Any = 1
        for _ in range(MAX_DEPTH + 1):
            nested = [nested]
        r = await register(st, "params", "SELECT * FROM thread WHERE score = $s",
                           params={"auth_id": "user:alice", "s": nested})
        assert r["status"] == 400 and "params nest deeper" in r["body"]["message"], r
        assert await nothing_of(st, "params")


async def test_a_shard_that_times_out_during_re_registration_keeps_the_held_view(
        host: DbHost, tmp_path: Path) -> None:
    async with thread_stack(host, tmp_path, SVC_SSP_SHARDS="2",
                            SVC_SSP_SHARD_TIMEOUT_SECS="2") as st:
        assert (await register(st, "top", TOP))["status"] == 200
        await wait_for(lambda: view_matches(st, "top", TOP), what="published")
        pid = await running_shard_pid(st, "top", 2)
        os.kill(pid, signal.SIGSTOP)
        try:
            r = await register(st, "top", "SELECT * FROM thread WHERE score < 3")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        assert r["status"] == 503 and r["body"]["error"] == "SSP_NOT_READY", r
        assert "did not answer register" in r["body"]["message"]
        assert "keeps its previous query" in r["body"]["message"]
        # The hub killed the stopped shard (it could still apply the registration later);
        # the new process is rebuilt with the old view.

        async def replaced() -> bool:
            return await shard_pid(st, "top", 2) not in (pid, None)
        await wait_for(replaced, what="shard replaced")
        await st.root.query("CREATE thread:3 SET score = 9; UPDATE thread:1 SET score = 0")
        await wait_for(lambda: view_matches(st, "top", TOP), what="old view maintained")
        assert await edges(st.root, EDGES, "top") == {"thread:3"}
        # A new id on the stopped shard is not registered at all.
        pid = await running_shard_pid(st, "top", 2)
        os.kill(pid, signal.SIGSTOP)
        other = next(f"n{i}" for i in range(1000) if shard_of(f"query:n{i}", 2)
                     == shard_of("query:top", 2))
        try:
            r = await register(st, other, TOP)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        assert r["status"] == 503, r
        assert await nothing_of(st, other)
        h = await st.ssp.call("GET /health")
        assert h["status"] == 200 and h["body"]["status"] == "ready"


async def test_a_shard_killed_during_re_registration_leaves_the_old_or_the_new_view(
        host: DbHost, tmp_path: Path) -> None:
    async with thread_stack(host, tmp_path, SVC_SSP_SHARDS="2") as st:
        assert (await register(st, "top", TOP))["status"] == 200
        await wait_for(lambda: view_matches(st, "top", TOP), what="published")
        pid = await running_shard_pid(st, "top", 2)
        os.kill(pid, signal.SIGSTOP)
        low = "SELECT * FROM thread WHERE score < 3"
        pending = asyncio.ensure_future(register(st, "top", low))
        await asyncio.sleep(0)  # let the request leave; where it is when the shard dies varies
        os.kill(pid, signal.SIGKILL)
        r = await pending
        # Killed while the hub waited for it: 503, old view. If the request reached the hub
        # only after the restart it registered: 200, new view. Either way it is maintained.
        assert r["status"] in (200, 503), r
        surql = low if r["status"] == 200 else TOP
        if r["status"] == 503:
            assert "keeps its previous query" in r["body"]["message"]
        await st.root.query("CREATE thread:3 SET score = 9; CREATE thread:4 SET score = 0")
        await wait_for(lambda: view_matches(st, "top", surql), what="a maintained view")


async def test_a_database_failure_during_the_first_publication_leaves_nothing(
        host: DbHost, tmp_path: Path) -> None:
    # Real faults in the database: an event that refuses the `_00_query` write of one query,
    # and one that makes the write outlast SVC_SSP_DB_TIMEOUT_SECS and then commit anyway.
    faults = (
        "DEFINE TABLE marker SCHEMALESS; DEFINE EVENT poison ON _00_query WHEN $event != 'DELETE' AND "
        "$after.surql CONTAINS 'poison' THEN { THROW 'poisoned registration' }; "
        "DEFINE EVENT slow ON _00_query WHEN $event != 'DELETE' AND "
        "$after.surql CONTAINS 'slow' THEN { sleep(4s); CREATE marker:slow }")
    async with thread_stack(host, tmp_path, after_schema=faults, SVC_SSP_DB_TIMEOUT_SECS="2",
                            TTL_CLEANUP_INTERVAL_SECS="1") as st:
        # A held view re-registered with a query that registers fine on its shard, but
        # whose row cannot be written: nothing of the view stays (not the old view either).
        assert (await register(st, "top", TOP))["status"] == 200
        await wait_for(lambda: view_matches(st, "top", TOP), what="published")
        r = await register(st, "top", TOP + " AND title != 'poison'")
        assert r["status"] == 500 and r["body"]["error"] == "internal", r
        assert "poisoned registration" in r["body"]["message"]
        assert "not registered" in r["body"]["message"]
        await wait_for(lambda: nothing_of(st, "top"), what="row and edges removed")
        assert (await debug_view(st, "top"))["status"] == 404
        # A new view whose row write times out (and commits 4 s later).
        r = await register(st, "late", TOP + " AND title != 'slow'")
        assert r["status"] == 503 and "not registered" in r["body"]["message"], r
        await wait_for(lambda: st.root.query_one("SELECT * FROM ONLY marker:slow"),
                       what="the timed-out write committed")
        await wait_for(lambda: nothing_of(st, "late"), what="the late row removed")
        assert (await debug_view(st, "late"))["status"] == 404
        # Later writes bring nothing back.
        await st.root.query("CREATE thread:5 SET score = 8, title = 'c'")
        await wait_for(lambda: _count(st, "thread", 3), what="write applied")
        assert await nothing_of(st, "top") and await nothing_of(st, "late")
        h = await st.ssp.call("GET /health")
        assert h["status"] == 200 and "db" not in h["body"], h


async def test_unregister_removes_everything_even_when_the_shard_does_not_answer(
        host: DbHost, tmp_path: Path) -> None:
    async with thread_stack(host, tmp_path, SVC_SSP_SHARDS="2",
                            SVC_SSP_SHARD_TIMEOUT_SECS="2") as st:
        keep = next(f"k{i}" for i in range(1000) if shard_of(f"query:k{i}", 2)
                    == shard_of("query:top", 2))
        assert (await register(st, "top", TOP))["status"] == 200
        assert (await register(st, keep, TOP))["status"] == 200
        await wait_for(lambda: view_matches(st, keep, TOP), what="published")
        pid = await running_shard_pid(st, "top", 2)
        os.kill(pid, signal.SIGSTOP)
        try:
            r = await st.ssp.call("POST /view/unregister", {"id": "query:top"})
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        assert r["status"] == 200
        await wait_for(lambda: nothing_of(st, "top"), what="row and edges removed")
        # The other view of that shard came back with the rebuild and is maintained.
        await st.root.query("CREATE thread:3 SET score = 9")
        await wait_for(lambda: view_matches(st, keep, TOP), what="the other view maintained")
        assert await nothing_of(st, "top")


async def test_the_cleanup_event_path_removes_the_view(host: DbHost, tmp_path: Path) -> None:
    # Transport http: deleting the row fires `_00_dbsp_cleanup`, which posts the bare key to
    # `/view/unregister` (the host cannot run http::post, so the test plays the event).
    async with thread_stack(host, tmp_path, SVC_INGEST_TRANSPORT="http") as st:
        assert (await register(st, "top", TOP))["status"] == 200
        await wait_for(lambda: view_matches(st, "top", TOP), what="published")
        await app_write(st.root, "DELETE _00_query:top")
        r = await st.ssp.call("POST /view/unregister", {"id": "top"})
        assert r["status"] == 200
        await wait_for(lambda: nothing_of(st, "top"), what="row and edges removed")
        assert (await debug_view(st, "top"))["status"] == 404


async def test_rows_no_view_holds_are_torn_down_at_start_and_by_the_sweep(
        host: DbHost, tmp_path: Path) -> None:
    deep = "SELECT * FROM thread WHERE " + "(" * (MAX_DEPTH + 5) + "score = 5" + ")" * (
        MAX_DEPTH + 5)
    rows = (
        # A live row whose query this engine refuses (registered before the limit existed).
        "CREATE _00_query:refused SET surql = $deep, auth_id = user:alice, ttl = '10m', "
        "lastActiveAt = time::now(), state = 'ready', rowCount = 1; "
        "RELATE _00_query:refused->_00_list_ref_user_alice->thread:1; "
        # An expired row (its SSP was down when it expired).
        "CREATE _00_query:expired SET surql = $top, auth_id = user:alice, ttl = '1m', "
        "lastActiveAt = time::now() - 1h, state = 'ready', rowCount = 1; "
        "RELATE _00_query:expired->_00_list_ref_user_alice->thread:1; "
        # A live row that is restored and published again.
        "CREATE _00_query:live SET surql = $top, auth_id = user:alice, ttl = '10m', "
        "lastActiveAt = time::now(), state = 'ready', rowCount = 1, params = {}; "
        "RELATE _00_query:live->_00_list_ref_user_alice->thread:2; ")
    ns, db = unique_db()
    root = await root_db(host, ns, db)
    await root.query(APP_SCHEMA)
    await root.query(SETUP)
    apply_schema(host, ns, db)
    await root.query(rows, {"deep": deep, "top": TOP})
    st = Stack(host, ns, db, start_ssp(tmp_path, host, ns, db, TTL_CLEANUP_INTERVAL_SECS="1"),
               root)
    try:
        await st.ssp.wait_ready()
        await wait_for(lambda: nothing_of(st, "refused"), what="refused row removed")
        await wait_for(lambda: nothing_of(st, "expired"), what="expired row removed")
        await wait_for(lambda: view_matches(st, "live", TOP), what="live view restored")
        assert "not restored" in st.ssp.process.log_text()
        # A live row written behind the SSP's back: no view holds it, the sweep removes it.
        await root.query("CREATE _00_query:stray SET surql = $top, auth_id = user:alice, "
                         "ttl = '10m', lastActiveAt = time::now(), state = 'ready'; "
                         "RELATE _00_query:stray->_00_list_ref_user_alice->thread:1",
                         {"top": TOP})
        await wait_for(lambda: nothing_of(st, "stray"), what="stray row removed")
        assert await view_matches(st, "live", TOP)
    finally:
        code = st.ssp.stop()
        await root.close()
        assert code == 0, st.ssp.process.log_text()[-3000:]


async def _count(st: Stack, table: str, n: int) -> bool:
    r = await st.ssp.call("GET /info")
    return bool(r["body"][0]["circuit_tables"].get(table) == n)
