"""A shard that stays alive but does not answer (SIGSTOP: the process exists, its socket
takes requests, nothing comes back). Through real processes (database host + `python -m ssp`,
two shards, `SVC_SSP_SHARD_TIMEOUT_SECS=2`):

- with traffic, the batch the stopped shard does not answer within the call timeout is not
  lost: the hub kills the shard, restarts it and rebuilds it from the arena (which holds the
  batch), and the view's edges follow the write;
- without traffic, the liveness ping finds the hung shard all the same and replaces it, so
  the next write is applied by a shard that answers.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

from dbclient import Database
from engine.values import record_id_text
from ssp.shards import shard_of
from tests.support.procs import DbHost
from tests.support.ssp_stack import (
    APP_SCHEMA,
    Stack,
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
SHARDS = 2


@contextlib.asynccontextmanager
async def stack(host: DbHost, tmp: Path) -> AsyncIterator[Stack]:
    ns, db = unique_db()
    root = await root_db(host, ns, db)
    await root.query(APP_SCHEMA)
    await root.query("CREATE user:alice SET name = 'alice', pass = 'x'; "
                     "DEFINE TABLE thread SCHEMALESS; CREATE thread:1 SET score = 5")
    apply_schema(host, ns, db)
    st = Stack(host, ns, db, start_ssp(tmp, host, ns, db, SVC_SSP_SHARDS=str(SHARDS),
                                       SVC_SSP_SHARD_TIMEOUT_SECS="2"), root)
    try:
        await st.ssp.wait_ready()
        yield st
    finally:
        code = st.ssp.stop()
        await root.close()
        assert code == 0, st.ssp.process.log_text()[-3000:]


async def answer(root: Database) -> set[str]:
    return {record_id_text(r["id"]) for r in await root.query_one(TOP)}


async def maintained(st: Stack) -> bool:
    """The view's edges are SurrealDB's own answer."""
    return await edges(st.root, EDGES, "top") == await answer(st.root)


async def owner_pid(st: Stack) -> int | None:
    mem = (await st.ssp.call("GET /debug/memory"))["body"]
    pid = mem["shards"][shard_of("query:top", SHARDS)].get("pid")
    return int(pid) if pid else None


async def stopped_owner(st: Stack) -> int:
    """Register the view, wait for its edges, SIGSTOP the shard that owns it."""
    r = await st.ssp.call("POST /view/register", view_body("top", TOP))
    assert r["status"] == 200, r
    await wait_for(lambda: maintained(st), what="first edges")
    pid = int(await wait_for(lambda: owner_pid(st), what="shard running"))
    os.kill(pid, signal.SIGSTOP)
    return pid


async def test_a_batch_a_hung_shard_does_not_answer_reaches_the_view(host: DbHost,
                                                                      tmp_path: Path) -> None:
    async with stack(host, tmp_path) as st:
        pid = await stopped_owner(st)
        try:
            await st.root.query("CREATE thread:2 SET score = 9; UPDATE thread:1 SET score = 0")
            await wait_for(lambda: maintained(st), what="the write in the view's edges")
            assert await edges(st.root, EDGES, "top") == {"thread:2"}
            new = await owner_pid(st)
            assert new not in (None, pid)  # the hung process was replaced
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        h = await st.ssp.call("GET /health")
        assert h["status"] == 200 and h["body"]["status"] == "ready", h


async def test_the_liveness_ping_replaces_a_hung_shard_without_traffic(host: DbHost,
                                                                        tmp_path: Path) -> None:
    async with stack(host, tmp_path) as st:
        pid = await stopped_owner(st)
        try:
            async def replaced() -> bool:
                return await owner_pid(st) not in (pid, None)
            await wait_for(replaced, what="the hung shard replaced without any request")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        await st.root.query("CREATE thread:2 SET score = 9")
        await wait_for(lambda: maintained(st), what="later writes maintained")
        assert await edges(st.root, EDGES, "top") == {"thread:1", "thread:2"}
