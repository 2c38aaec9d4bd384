"""Real processes: database host, `svc-scheduler` (admin listener, transport http) and one SSP
in scheduler mode under ops/run's supervisor, with its snapshot dir.

An operator restart while writes go on ends warm: the SSP offers its snapshot's position, the
scheduler's WAL holds everything after it, the SSP loads the snapshot, applies the events it
missed (`/ssp/catchup`), passes the integrity check and reads not one bootstrap page; the
writes made while it was down arrive and the view's edges equal SurrealDB's answer. Its view
comes back from the snapshot too (`views.json`, written at the graceful stop): built on the
snapshot's rows, it gets the missed events as deltas, and the scheduler's re-sending of it is
a refresh, so the edges of members that did not change are never written again (their
publication `seq` stays). A clean restart is cold (no snapshot: every edge written again), and
so is a snapshot written before a re-clone of the replica (another epoch)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ipc.peerauth import ssp_credential
from tests.support.admin_stack import (
    AUTH_SECRET,
    BREAKGLASS,
    AdminScheduler,
    SupervisedSsp,
    start_scheduler,
    start_ssp,
)
from tests.support.procs import DbHost
from tests.support.ssp_stack import APP_SCHEMA, apply_schema, edges, root_db, wait_for

VIEW = "SELECT * FROM post WHERE owner = $auth.id AND n >= 3"
ANSWER = "SELECT id FROM post WHERE owner = user:alice AND n >= 3"


@dataclass
class Stack:
    host: DbHost
    ns: str
    tmp: Path
    sched: AdminScheduler
    ssp: SupervisedSsp
    token: str = ""
    written: list[int] = field(default_factory=list)
    pinned: int = 0  # posts the writer never deletes: members that stay across a restart


async def _token(sched: AdminScheduler) -> str:
    async with aiohttp.ClientSession() as http, http.post(
            sched.admin + "/admin/api/session", json={"password": BREAKGLASS}) as r:
        assert r.status == 200, await r.text()
        return str((await r.json())["token"])


async def _schema(host: DbHost, ns: str) -> None:
    root = await root_db(host, ns, ns)
    try:
        await root.query(APP_SCHEMA)
        await root.query("CREATE user:alice SET name = 'alice', pass = 'x'")
    finally:
        await root.close()


@pytest.fixture(scope="module")
def stack(shared_db_host: DbHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("warm")
    ns = "warm_" + uuid.uuid4().hex[:8]
    asyncio.run(_schema(shared_db_host, ns))
    apply_schema(shared_db_host, ns, ns)  # changefeed flavour: the host has no http::*
    # A drain every second: the WAL keeps what the replica absorbed (the retention), and a
    # warm start is offered a position the replica has long passed.
    sched = start_scheduler(tmp, shared_db_host, ns, snapshot_update_interval_secs=1)
    ssp = start_ssp(tmp, shared_db_host, ns, sched)
    st = Stack(shared_db_host, ns, tmp, sched, ssp)
    try:
        st.token = asyncio.run(_token(sched))
        yield st
    finally:
        st.ssp.process.stop()
        sched.process.stop()


async def jget(http: aiohttp.ClientSession, url: str) -> Any:
    async with http.get(url, headers={"Authorization": f"Bearer {AUTH_SECRET}"}) as r:
        return json.loads(await r.text())


async def ready(http: aiohttp.ClientSession, st: Stack) -> bool:
    m = await jget(http, st.sched.url + "/metrics")
    return any(x["id"] == st.ssp.ssp_id and x["state"] == "ready" for x in m["ssps"])


async def write(root: Any, http: aiohttp.ClientSession, st: Stack, i: int, *,
                pin: bool = False) -> None:
    """A post written to the database, then its event to the scheduler (as the database's
    http event would send it); every fourth write also deletes an earlier post (`pin`: a
    post of its own, never deleted)."""
    key = f"keep{i}" if pin else f"p{i}"
    await root.query("CREATE type::record('post', $k) SET owner = user:alice, title = 't', "
                     "n = $n, at = time::now()", {"k": key, "n": i % 10})
    row = await root.query_one("SELECT * FROM ONLY type::record('post', $k)", {"k": key})
    rec = {"id": f"post:{key}", "owner": "user:alice", "title": "t", "n": i % 10,
           "at": str(row["at"])}
    events = [{"table": "post", "op": "CREATE", "id": rec["id"], "record": rec}]
    if pin:
        st.pinned += 1
    else:
        st.written.append(i)
    if i % 4 == 3 and not pin:
        gone = st.written.pop(0)
        await root.query("DELETE type::record('post', $k)", {"k": f"p{gone}"})
        events.append({"table": "post", "op": "DELETE", "id": f"post:p{gone}",
                       "record": {"id": f"post:p{gone}"}})
    for ev in events:
        async with http.post(st.sched.url + "/ingest", json=ev) as r:
            assert r.status == 200, await r.text()


async def restart(http: aiohttp.ClientSession, st: Stack, mode: str) -> None:
    """An operator restart through the admin API, waited for until its operation is done."""
    auth = {"Authorization": f"Bearer {st.token}"}
    async with http.post(st.sched.admin + f"/admin/api/ssps/{st.ssp.ssp_id}/restart",
                         json={"mode": mode}, headers=auth) as r:
        op = await r.json()
        assert r.status == 202, op

    async def done() -> dict[str, Any] | None:
        async with http.get(st.sched.admin + "/admin/api/operations", headers=auth) as r:
            ops = (await r.json())["operations"]
        mine = next(o for o in ops if o["id"] == op["id"])
        return mine if mine["status"] != "running" else None

    finished = await wait_for(done, 120, f"restart {mode} done")
    assert finished["status"] == "done", finished


async def edge_seqs(root: Any, view_key: str) -> dict[str, int]:
    """Member -> the publication `seq` of its edge (each flush writes its own)."""
    from surrealdb import RecordID

    from engine.values import record_id_text
    rows = await root.query_one("SELECT out, seq FROM _00_list_ref_user_alice WHERE in = $q "
                                "AND !removed", {"q": RecordID("_00_query", view_key)})
    return {record_id_text(r["out"]): int(r["seq"]) for r in rows or []}


async def query_row(root: Any, view_key: str) -> dict[str, Any]:
    from surrealdb import RecordID
    row = await root.query_one("SELECT lastActiveAt, state FROM ONLY $q",
                               {"q": RecordID("_00_query", view_key)})
    return dict(row or {})


async def resent(root: Any, view_key: str, since: Any) -> None:
    """The scheduler sent the view to the restarted SSP again (its registration moves the
    row's `lastActiveAt`) and the row is `ready` (a rebuild's edges are all written)."""
    async def done() -> bool:
        row = await query_row(root, view_key)
        return bool(row.get("lastActiveAt") != since and row.get("state") == "ready")

    await wait_for(done, 60, f"the scheduler re-sent {view_key} and its row is ready")


async def start_of(http: aiohttp.ClientSession, st: Stack) -> dict[str, Any]:
    return dict((await jget(http, st.ssp.url + "/debug/heartbeat"))["start"])


async def converged(http: aiohttp.ClientSession, st: Stack, root: Any) -> None:
    """The view's edges equal SurrealDB's answer and the SSP holds every post."""
    async def same() -> bool:
        want = {f"post:{r['id'].id}" for r in await root.query_one(ANSWER)}
        # after a restart the scheduler sends the view again once the SSP is Ready; until
        # then a clean start has no edge table for it
        if await edges(root, "_00_list_ref_user_alice", "w1", missing_ok=True) != want:
            return False
        info = (await jget(http, st.ssp.url + "/info"))[0]
        return bool(info["circuit_tables"].get("post") == len(st.written) + st.pinned)

    await wait_for(same, 60, "edges equal SurrealDB's answer, every post held")


async def test_a_restart_while_writes_go_on_is_warm_and_loses_nothing(stack: Stack) -> None:
    st = stack
    root = await root_db(st.host, st.ns, st.ns)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            await wait_for(lambda: ready(http, st), 120, "the SSP ready")
            assert (await start_of(http, st))["mode"] == "cold"  # no snapshot yet
            for i in range(30):
                await write(root, http, st, i)
            for i in (3, 4, 5):
                await write(root, http, st, i, pin=True)
            body = {"id": "query:w1", "surql": VIEW, "clientId": "c1", "ttl": "10m",
                    "params": {"auth_id": "user:alice"}}
            async with http.post(st.sched.url + "/view/register", json=body) as r:
                assert r.status == 200, await r.text()
            await converged(http, st, root)
            before = await edge_seqs(root, "w1")
            assert before
            since = (await query_row(root, "w1"))["lastActiveAt"]

            stop = asyncio.Event()

            async def writer() -> None:
                i = 30
                while not stop.is_set():
                    await write(root, http, st, i)
                    i += 1

            writing = asyncio.create_task(writer())
            try:
                await asyncio.sleep(0.5)
                await restart(http, st, "restart")  # exit 4, relaunched by the supervisor
                await asyncio.sleep(0.5)
            finally:
                stop.set()
                await writing
            start = await start_of(http, st)
            assert start["mode"] == "warm", start
            assert start["pages_read"] == 0  # not one bootstrap page through the proxy
            assert start["events"] > 0  # the writes made while it was down were caught up
            log = st.ssp.process.log_text()
            assert "warm start from the snapshot at seq" in log
            # the view came back from the snapshot, not from the scheduler's re-sending
            assert start["views_restored"] == 1, start
            assert "1 views restored from the snapshot" in log

            async def shown() -> bool:  # the heartbeat carries it to the admin plane
                async with http.get(st.sched.admin + "/admin/api/overview", headers={
                        "Authorization": f"Bearer {st.token}"}) as r:
                    ov = await r.json()
                mine = [x for x in ov["ssps"] if x["id"] == st.ssp.ssp_id]
                return bool(mine and (mine[0].get("start") or {}).get("mode") == "warm")

            await wait_for(shown, 30, "the admin overview says the SSP started warm")
            await converged(http, st, root)
            await resent(root, "w1", since)
            after = await edge_seqs(root, "w1")
            kept = set(before) & set(after)
            assert {"post:keep3", "post:keep4", "post:keep5"} <= kept
            # no re-backfill: an edge whose member stayed was not written again
            assert {m: after[m] for m in kept} == {m: before[m] for m in kept}
            # and the re-sent view is the one restored: the SSP built no second one
            info = (await jget(http, st.ssp.url + "/info"))[0]
            assert info["views"] == 1, info
            # the WAL's events go to the SSP that asks for itself, with its own credential
            ask = {"ssp_id": st.ssp.ssp_id, "after": 0, "through": 1}
            for bearer in (None, ssp_credential(AUTH_SECRET, "ssp-other")):
                headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
                async with http.post(st.sched.url + "/ssp/catchup", json=ask,
                                     headers=headers) as r:
                    assert r.status == 401, (bearer is None, r.status)
            async with http.post(st.sched.url + "/ssp/catchup", json=ask, headers={
                    "Authorization": f"Bearer {ssp_credential(AUTH_SECRET, st.ssp.ssp_id)}"}
                                 ) as r:
                assert r.status == 404  # its own, but it is no longer starting warm
    finally:
        await root.close()


async def test_a_clean_restart_and_a_snapshot_from_before_a_reclone_are_cold(
        stack: Stack) -> None:
    st = stack
    root = await root_db(st.host, st.ns, st.ns)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            await wait_for(lambda: ready(http, st), 120, "the SSP ready")
            before = await edge_seqs(root, "w1")
            assert before
            since = (await query_row(root, "w1"))["lastActiveAt"]
            await restart(http, st, "clean")
            start = await start_of(http, st)
            assert start["mode"] == "cold" and "no snapshot.json" in start["why"], start
            assert start["pages_read"] > 0
            assert not (st.ssp.snapshot.parent / "views.json").exists()
            await write(root, http, st, 100_000)
            await resent(root, "w1", since)
            await converged(http, st, root)
            # cold: the scheduler's re-sending built the view again and wrote every edge
            after = await edge_seqs(root, "w1")
            kept = set(before) & set(after)
            assert kept and all(after[m] != before[m] for m in kept), (before, after)

            # Stopped gracefully (snapshot written with its position), the replica re-cloned
            # meanwhile, started again: the snapshot is of another epoch.
            port = st.ssp.port
            assert st.ssp.process.stop() == 0
            assert "scheduler" in json.loads(st.ssp.snapshot.read_text())
            async with http.post(st.sched.url + "/admin/resync", json={},
                                 headers={"Authorization": f"Bearer {AUTH_SECRET}"}) as r:
                assert r.status == 202, await r.text()

            async def recloned() -> bool:
                h = await jget(http, st.sched.url + "/health")
                return bool(h["scheduler"]["state"] == "ready")

            await wait_for(recloned, 60, "the re-clone finished")
            await write(root, http, st, 100_001)
            st.ssp = start_ssp(st.tmp, st.host, st.ns, st.sched, port=port)

            async def up_again() -> bool:
                # the scheduler's entry of the stopped process may still read ready: ask the
                # new process itself
                try:
                    started = (await jget(http, st.ssp.url + "/debug/heartbeat"))["start"]
                except aiohttp.ClientError:
                    return False
                return started is not None and await ready(http, st)

            await wait_for(up_again, 120, "the SSP ready again")
            start = await start_of(http, st)
            assert start["mode"] == "cold" and "epoch" in start["why"], start
            await converged(http, st, root)
    finally:
        await root.close()
