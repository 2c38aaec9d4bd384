"""Transport http: a transaction that fails after its events posted leaves no trace in the
views (dbclient.commitcheck), through real processes.

The database's events post each change to the scheduler from inside the writing transaction;
when a later statement fails, SurrealDB rolls the rows back after the scheduler applied them.
The scheduler reads the changed records back, and what did not commit is undone with the
committed rows. A transaction that commits late (after the check's deadline) is followed too.
Two module-scoped stacks on one database host on SurrealDB's Node build (it has `http::*`),
each in its own database, over transport http: the scheduler with one SSP, and a standalone
SSP that takes the events itself.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from dbclient import Database, DbQueryError
from tests.integration.test_scheduler_process import launch, write_config
from tests.support.procs import DbHost, free_port, http_events_host
from tests.support.ssp_stack import (
    Ssp,
    app_write,
    apply_schema,
    edges,
    root_db,
    start_ssp,
    wait_for,
)

VIEW = "SELECT * FROM thread WHERE score > 3"
TABLE = "_00_list_ref_user_alice"


@dataclass
class Stack:
    host: DbHost
    name: str
    scheduler_url: str | None  # None: a standalone SSP takes the events
    ssp: Ssp


@pytest.fixture(scope="module")
def node_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DbHost]:
    with http_events_host(tmp_path_factory.mktemp("nodehost")) as host:
        yield host


def _define(host: DbHost, name: str) -> None:
    async def define() -> None:
        db = await root_db(host, name, name)
        try:
            await db.query("DEFINE TABLE thread SCHEMALESS PERMISSIONS FULL; "
                           "CREATE thread:1 SET title = 'one', score = 5; "
                           "CREATE thread:2 SET title = 'two', score = 1")
        finally:
            await db.close()
    asyncio.run(define())


@pytest.fixture(scope="module", params=["scheduler", "standalone"])
def stack(request: pytest.FixtureRequest, node_host: DbHost,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp(f"commitcheck-{request.param}")
    name = "cc" + uuid.uuid4().hex[:8]
    _define(node_host, name)
    port = free_port()  # the ingest's: the scheduler's, or the standalone SSP's
    apply_schema(node_host, name, name, "http", f"http://127.0.0.1:{port}/ingest")
    sched = ssp = None
    try:
        if request.param == "scheduler":
            sched = launch(tmp, write_config(tmp, node_host, name, port), port, name,
                           SVC_INGEST_TRANSPORT="http")
            ssp = start_ssp(tmp, node_host, name, name, SVC_SCHEDULER_URL=sched.url,
                            SVC_SSP_ID="ssp-c", SVC_SSP_SHARDS="1",
                            SVC_INGEST_TRANSPORT="http", HEARTBEAT_INTERVAL_MS="200")
        else:
            ssp = start_ssp(tmp, node_host, name, name, SVC_SSP_SHARDS="1",
                            SVC_INGEST_TRANSPORT="http",
                            SVC_SSP_LISTEN_ADDR=f"127.0.0.1:{port}")
            ssp.process.wait_http(f"http://127.0.0.1:{port}/health", timeout=120)
        yield Stack(node_host, name, sched.url if sched else None, ssp)
    finally:
        if ssp is not None:
            ssp.stop()
        if sched is not None:
            sched.process.stop()


@pytest.fixture
async def root(stack: Stack) -> AsyncIterator[Database]:
    db = await root_db(stack.host, stack.name, stack.name)
    try:
        yield db
    finally:
        stack.ssp.close_client()
        await db.close()


async def _get(url: str) -> Any:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        async with http.get(url) as r:
            return await r.json()


async def commit_check(stack: Stack) -> dict[str, Any]:
    """The commit check's counters of whoever takes the events (the scheduler's /health, a
    standalone SSP's /debug/memory)."""
    if stack.scheduler_url is None:  # (the SSP's public /health is the spec's alone)
        r = await stack.ssp.call("GET /debug/memory")
        return dict(r["body"]["commit_check"])
    return dict((await _get(stack.scheduler_url + "/health"))["commit_check"])


async def view(stack: Stack, root: Database, key: str) -> None:
    """Register `VIEW` as `key` for user:alice (through the scheduler, or at the SSP); wait
    for its edges."""
    body = {"id": f"query:{key}", "clientId": "c1", "ttl": "10m", "surql": VIEW,
            "params": {"auth_id": "user:alice"}}
    if stack.scheduler_url is None:
        r = await stack.ssp.call("POST /view/register", body)
        assert r["status"] == 200, r
    else:
        url = stack.scheduler_url

        async def ready() -> bool:
            m = await _get(url + "/metrics")
            return any(x["state"] == "ready" for x in m["ssps"])
        await wait_for(ready, timeout=60, what="the SSP ready")
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            async with http.post(url + "/view/register", json=body) as r:
                assert r.status == 200, await r.text()
    await converged(stack, root, key)


async def surreal_answer(root: Database) -> set[str]:
    rows = await root.query_one(f"SELECT VALUE <string> id FROM ({VIEW})")
    return {str(r) for r in rows or []}


async def converged(stack: Stack, root: Database, key: str) -> set[str]:
    """Wait until both the SSP's members and the view's edges are SurrealDB's answer."""
    seen: dict[str, Any] = {}

    async def same() -> bool:
        want = await surreal_answer(root)
        r = await stack.ssp.call("GET /debug/view/{view_id}", params={"view_id": f"query:{key}"})
        held = set(r["body"].get("cache") or []) if r["status"] == 200 else None
        shown = await edges(root, TABLE, key, missing_ok=True)
        seen.update(want=want, ssp=held, edges=shown, check=await commit_check(stack))
        return held == want and shown == want
    try:
        await wait_for(same, timeout=30, what="the view equal to SurrealDB's answer")
    except AssertionError:
        raise AssertionError(f"view {key} never equal to SurrealDB's answer: {seen}") from None
    return await surreal_answer(root)


async def test_writes_that_commit_are_confirmed_without_corrections(
        stack: Stack, root: Database) -> None:
    await view(stack, root, "plain")
    before = await commit_check(stack)
    await app_write(root, "UPDATE thread:2 SET score = 7")
    await app_write(root, "CREATE thread:10 SET title = 'ten', score = 9, at = time::now(), "
                          "link = thread:1, n = 1.5dec, tags = ['a', NULL]")
    await app_write(root, "DELETE thread:10")
    await app_write(root, "UPDATE thread:2 SET score = 1")
    assert await converged(stack, root, "plain") == {"thread:1"}

    async def confirmed() -> dict[str, Any] | None:
        c = await commit_check(stack)
        # (changes of one record noted before a read are confirmed as one)
        return c if c["pending"] == 0 and c["confirmed"] >= before["confirmed"] + 2 else None
    try:
        await wait_for(confirmed, what="the writes confirmed")
    except AssertionError:
        raise AssertionError(f"not confirmed: {await commit_check(stack)}") from None
    # the rows the events posted are the rows that committed: nothing to correct
    assert (await commit_check(stack))["corrected"] == before["corrected"]


async def test_a_transaction_that_fails_after_its_events_leaves_no_trace(
        stack: Stack, root: Database) -> None:
    await view(stack, root, "failed")
    assert await surreal_answer(root) == {"thread:1"}
    before = await commit_check(stack)
    # every statement's event posts to the scheduler; THROW then rolls them all back
    with pytest.raises(DbQueryError):
        await root.query("BEGIN; UPDATE thread:2 SET score = 9; DELETE thread:1; "
                         "CREATE thread:3 SET title = 'three', score = 8; THROW 'no'; COMMIT;")
    assert await root.query_one("SELECT VALUE score FROM ONLY thread:2") == 1

    async def corrected() -> bool:
        c = await commit_check(stack)
        return c["corrected"] >= before["corrected"] + 3
    await wait_for(corrected, what="the three changes corrected")
    assert await converged(stack, root, "failed") == {"thread:1"}

    # the records go on as usual afterwards (the correction left the right versions)
    await app_write(root, "UPDATE thread:2 SET score = 6; CREATE thread:3 SET score = 4")
    assert await converged(stack, root, "failed") == {"thread:1", "thread:2", "thread:3"}
    await app_write(root, "DELETE thread:3; UPDATE thread:2 SET score = 1")
    assert await converged(stack, root, "failed") == {"thread:1"}


async def test_a_transaction_that_commits_after_the_deadline_is_followed(
        stack: Stack, root: Database) -> None:
    await view(stack, root, "late")
    before = await commit_check(stack)
    # the event posts at once; the commit comes 3 s later, well after the check's 0.5 s
    # deadline (the check undoes the change first, then follows the commit)
    await root.query("BEGIN; UPDATE thread:2 SET score = 8; sleep(3s); COMMIT;")
    assert await converged(stack, root, "late") == {"thread:1", "thread:2"}
    after = await commit_check(stack)
    assert after["late_commits"] >= before["late_commits"] + 1, after
    await app_write(root, "UPDATE thread:2 SET score = 1")
    assert await converged(stack, root, "late") == {"thread:1"}


async def test_a_failed_delete_of_a_view_row_leaves_row_and_view_agreeing(
        stack: Stack, root: Database) -> None:
    """`_00_dbsp_cleanup` posts the unregister from inside the DELETE's transaction, so a
    failed DELETE still unregisters the view: the SSP's teardown then deletes the row too, and
    the client sees its row gone (it registers again), never a row whose view is gone."""
    await view(stack, root, "row")
    with pytest.raises(DbQueryError):
        await root.query("BEGIN; DELETE _00_query:row; THROW 'no'; COMMIT;")

    async def agree() -> bool:
        row = await root.query_one("SELECT * FROM ONLY _00_query:row")
        r = await stack.ssp.call("GET /debug/view/{view_id}", params={"view_id": "query:row"})
        return row is None and r["status"] == 404
    await wait_for(agree, what="the row gone with its view")
    assert await edges(root, TABLE, "row", missing_ok=True) == set()
    await view(stack, root, "row")  # registered again, as a client does
