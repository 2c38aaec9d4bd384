"""The SSP's scheduler mode against a small scheduler written here (aiohttp, in the test
process) that answers register / heartbeat / progress / `/proxy/query` / `/health/snapshot`
from a real database host's data (read with `dbclient`). The SSP is the real `python -m ssp`
(hub, shards, gunicorn). Covers: register + bootstrap through the proxy (CBOR, bearer),
integrity check, batched ingest with `seq` dedup, heartbeats carrying `last_seq`, and every
exit code of the link (2, 3, 4 with and without clean, 5, 6)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from surrealdb.data.cbor import encode as cbor_encode

from dbclient import Database
from engine.hashing import hash_text, table_hash
from engine.values import parse_record_id
from ipc.peerauth import ssp_credential
from ssp.hub import Hub
from tests.support.procs import DbHost, free_port
from tests.support.ssp_stack import (
    APP_SCHEMA,
    Ssp,
    apply_schema,
    edges,
    root_db,
    start_ssp,
    unique_db,
    view_body,
    wait_for,
)

SECRET = "scheduler-mode-test-secret"
AUTH = {"Authorization": f"Bearer {SECRET}"}
# what the SSP sends its scheduler: its own credential, never the secret (ipc.peerauth)
SSP_BEARER = f"Bearer {ssp_credential(SECRET, 'ssp-under-test')}"


class FakeScheduler:
    """Just enough of the scheduler's ingest listener for one SSP, backed by the database."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.registered: list[dict[str, Any]] = []
        self.heartbeats: list[dict[str, Any]] = []
        self.progress: list[dict[str, Any]] = []
        self.proxy_calls: list[tuple[str, str, str]] = []  # (query, accept, authorization)
        self.snapshot_calls = 0
        self.register_status = 202
        self.snapshot_seq = 10
        self.heartbeat_reply: tuple[int, str, str] = (200, '{"ok": true}', "application/json")
        self.corrupt_snapshot = False
        self.warm_answer: dict[str, Any] = {}  # merged into the 202 (a warm-capable scheduler)
        self.proxy_gate = asyncio.Event()
        self.proxy_gate.set()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/ssp/register", self.register)
        app.router.add_post("/ssp/heartbeat", self.heartbeat)
        app.router.add_post("/ssp/bootstrap-progress", self.bootstrap_progress)
        app.router.add_post("/proxy/query", self.proxy)
        app.router.add_get("/health/snapshot", self.snapshot)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def register(self, req: web.Request) -> web.Response:
        self.registered.append(await req.json())
        if self.register_status != 202:
            return web.json_response({"error": "invalid", "message": "refused by the test"},
                                     status=self.register_status)
        return web.json_response({"snapshot_seq": self.snapshot_seq, **self.warm_answer},
                                 status=202)

    async def heartbeat(self, req: web.Request) -> web.Response:
        self.heartbeats.append(await req.json())
        status, text, ctype = self.heartbeat_reply
        return web.Response(status=status, text=text, content_type=ctype)

    async def bootstrap_progress(self, req: web.Request) -> web.Response:
        self.progress.append(await req.json())
        return web.json_response({"ok": True})

    async def proxy(self, req: web.Request) -> web.Response:
        await self.proxy_gate.wait()
        body = await req.json()
        query = body["query"]
        self.proxy_calls.append((query, req.headers.get("Accept", ""),
                                 req.headers.get("Authorization", "")))
        if req.headers.get("Authorization") != SSP_BEARER:
            return web.json_response({"error": "unauthorized"}, status=401)
        if query.strip().upper() == "TABLES":
            result: Any = sorted(await self._tables())
        else:
            params = dict(body.get("vars") or {})
            if isinstance(params.get("last"), str):
                params["last"] = parse_record_id(params["last"])
            result = await self.db.query_one(query, params)
        return web.Response(body=cbor_encode([{"status": "OK", "result": result}]),
                            content_type="application/cbor")

    async def _tables(self) -> list[str]:
        defs = await self.db.table_definitions()
        return [t for t, d in defs.items() if Hub.syncs_table(t, d)]

    async def snapshot(self, req: web.Request) -> web.Response:
        self.snapshot_calls += 1
        tables, hashes = {}, {}
        for t in await self._tables():
            rows = await self.db.query_one(f"SELECT * FROM {t}") or []
            tables[t] = len(rows)
            hashes[t] = hash_text(table_hash(rows))
        if self.corrupt_snapshot:
            hashes["post"] = "0123456789abcdef"
        return web.json_response({"tables": tables, "hashes": hashes,
                                  "total_records": sum(tables.values()),
                                  "snapshot_seq": self.snapshot_seq,
                                  "latest_seq": self.snapshot_seq, "lag": 0, "drift": {}})


class Linked:
    def __init__(self, root: Database, sched: FakeScheduler, tmp: Path, host: DbHost,
                 ns: str, db: str) -> None:
        self.root, self.sched, self.tmp, self.host, self.ns, self.db = root, sched, tmp, host, ns, db
        self.snapshot_dir = tmp / "snap"
        self.arena_dir = tmp / "arena"

    def start(self, **env: str) -> Ssp:
        return start_ssp(self.tmp, self.host, self.ns, self.db, SVC_SCHEDULER_URL=self.sched.url,
                         SVC_INGEST_TRANSPORT="http", SVC_AUTH_SECRET=SECRET,
                         HEARTBEAT_INTERVAL_MS="100", SVC_SSP_BOOTSTRAP_PAGE_SIZE="3",
                         SVC_SSP_SNAPSHOT_DIR=str(self.snapshot_dir),
                         SVC_SSP_ARENA_DIR=str(self.arena_dir), SVC_SSP_ID="ssp-under-test",
                         **env)


@pytest.fixture
async def linked(host: DbHost, tmp_path: Path) -> AsyncIterator[Linked]:
    ns, db = unique_db()
    root = await root_db(host, ns, db)
    await root.query(APP_SCHEMA)
    # The host cannot run http::post: the schema's changefeed flavour, events played by the test.
    apply_schema(host, ns, db, "changefeed")
    await root.query("CREATE user:alice SET name = 'alice', pass = 'x'")
    for i in range(7):  # more than two pages of 3
        await root.query(f"CREATE post:p{i} SET owner = user:alice, title = 't{i}', n = {i}, "
                         "at = d'2026-01-02T03:04:05Z'")
    sched = FakeScheduler(root)
    await sched.start()
    try:
        yield Linked(root, sched, tmp_path, host, ns, db)
    finally:
        await sched.stop()
        await root.close()


async def exit_code(ssp: Ssp, timeout: float = 90) -> int:
    """Wait (without blocking the scheduler served by this loop) for the SSP to exit."""
    proc = ssp.process.proc
    assert proc is not None
    await wait_for(lambda: _true(proc.poll() is not None), timeout, "the SSP to exit")
    ssp.stop()
    return int(proc.returncode)


def event(i: int, seq: int | None, title: str) -> dict[str, Any]:
    ev: dict[str, Any] = {"table": "post", "op": "CREATE", "id": f"post:n{i}",
                          "record": {"id": f"post:n{i}", "owner": "user:alice", "title": title,
                                     "n": 100 + i}}
    if seq is not None:
        ev["seq"] = seq
    return ev


async def test_register_bootstrap_batches_heartbeats_and_a_clean_resync(linked: Linked) -> None:
    sched = linked.sched
    linked.snapshot_dir.mkdir()
    (linked.snapshot_dir / "snapshot.json").write_text("{}")
    linked.arena_dir.mkdir()
    (linked.arena_dir / "segment-0").write_bytes(b"x" * 10)
    sched.proxy_gate.clear()  # hold the bootstrap: the SSP is registered but not ready
    ssp = linked.start()
    base = f"http://127.0.0.1:{ssp.port}"
    async with httpx.AsyncClient(base_url=base, timeout=30, headers=AUTH) as http:
        try:
            await wait_for(lambda: _true(sched.registered), 60, "registration")
            assert sched.registered[0] == {"ssp_id": "ssp-under-test", "url": base}

            async def gateway_up() -> bool:
                try:
                    return (await http.get("/health")).status_code == 503
                except httpx.TransportError:
                    return False
            await wait_for(gateway_up, 60, "gateway answering while bootstrapping")
            r = await http.post("/ingest", json=[event(0, 11, "early")])
            assert r.status_code == 503 and r.json()["error"] == "SSP_NOT_READY"
            sched.proxy_gate.set()
            await ssp.wait_ready()

            # Bootstrap went through the proxy, in CBOR, with the bearer, in keyset pages.
            queries = [q for q, _, _ in sched.proxy_calls]
            assert all(a == "application/cbor" and z == SSP_BEARER
                       for _, a, z in sched.proxy_calls)
            assert "INFO FOR DB" in queries
            assert any("WHERE id > $last" in q for q in queries)
            assert sched.snapshot_calls == 1  # integrity checked once, equal
            assert sched.progress and sched.progress[-1]["tables_done"] == \
                sched.progress[-1]["tables_total"]
            info = (await http.get("/info")).json()[0]
            assert info["circuit_tables"]["post"] == 7

            # A view registered (as the scheduler would forward it) gets typed rows.
            r = await http.post("/view/register", json=view_body(
                "v1", "SELECT * FROM post WHERE owner = $auth.id"))
            assert r.status_code == 200, r.text
            assert r.json()["rowCount"] == 7
            edge_table = "_00_list_ref_user_alice"
            await wait_for(lambda: _n(edges(linked.root, edge_table, "v1"), 7), 30, "7 edges")

            # Batched ingest: seq <= snapshot_seq is already in the snapshot; redeliveries skip.
            r = await http.post("/ingest", json=[event(0, 10, "old"), event(1, 11, "a"),
                                                 event(2, 12, "b")])
            assert r.status_code == 200 and r.json() == {"accepted": 2}
            r = await http.post("/ingest", json=[event(1, 11, "a"), event(2, 12, "b")])
            assert r.json() == {"accepted": 0}
            r = await http.post("/ingest", json=[event(2, 12, "b"), event(3, 13, "c"),
                                                 event(4, None, "no seq")])
            assert r.json() == {"accepted": 2}
            r = await http.post("/ingest", json=[event(5, 14, "x"), {**event(6, 15, "y"),
                                                                   "op": "MERGE"}])
            assert r.status_code == 400 and r.json()["message"].startswith("[1].op")
            r = await http.post("/ingest", json=[event(5, 14, "x"), {**event(6, 15, "y"),
                                                                   "id": "other:1"}])
            assert r.status_code == 400 and r.json()["message"].startswith("[1]")
            await wait_for(lambda: _n(edges(linked.root, edge_table, "v1"), 11), 30, "11 edges")
            got = await edges(linked.root, edge_table, "v1")
            assert {"post:n1", "post:n2", "post:n3", "post:n4"} <= got and "post:n0" not in got

            dbg = (await http.get("/debug/heartbeat")).json()
            assert dbg["mode"] == "scheduler" and dbg["last_seq"] == 13
            await wait_for(lambda: _true([h for h in sched.heartbeats if h["last_seq"] == 13]),
                           30, "a heartbeat with last_seq 13")
            hb = sched.heartbeats[-1]
            assert hb["ssp_id"] == "ssp-under-test" and hb["views"] == 1
            assert isinstance(hb["timestamp"], float) and isinstance(hb["version"], str)
            assert {"pending_batches", "pending_operations", "pending_bytes", "oldest_age_ms",
                    "parked_batches", "last_success_epoch_ms", "overload_rejections",
                    "connection_generation", "worst_views"} <= set(hb["publication"])
            assert hb["publication"]["last_success_epoch_ms"] > 0
            # memory_usage is the process's resident MB (a Python hub is tens of MB), and the
            # SVC_SSP_MEMORY_LIMIT_MB ceiling (default 1024) travels with it for least_load.
            assert 10 < hb["memory_usage"] < hb["memory_limit_mb"] == 1024
            assert isinstance(hb["cpu_usage"], float)

            # Resync directive with clean=true: local state wiped, exit 4 after a clean stop.
            sched.heartbeat_reply = (409, json.dumps({"reason": "test resync", "clean": True}),
                                     "application/json")
            assert await exit_code(ssp) == 4, ssp.process.log_text()[-3000:]
            assert not (linked.snapshot_dir / "snapshot.json").exists()
            assert not linked.arena_dir.exists()
            assert "resync directive" in ssp.process.log_text()
            assert SECRET not in ssp.process.log_text()
        finally:
            ssp.stop()


async def test_a_plain_text_409_is_not_clean_and_a_404_exits_3(linked: Linked) -> None:
    sched = linked.sched
    linked.snapshot_dir.mkdir()
    (linked.snapshot_dir / "snapshot.json").write_text("{}")
    sched.heartbeat_reply = (409, "restart please", "text/plain")
    ssp = linked.start()
    try:
        assert await exit_code(ssp) == 4, ssp.process.log_text()[-3000:]
        # Not clean: the snapshot directory is still there (rewritten on the graceful stop).
        assert (linked.snapshot_dir / "snapshot.json").exists()
    finally:
        ssp.stop()
    sched.heartbeat_reply = (404, '{"error": "not_found"}', "application/json")
    ssp = linked.start()
    try:
        assert await exit_code(ssp) == 3, ssp.process.log_text()[-3000:]
    finally:
        ssp.stop()
    # Other answers are logged and heartbeating goes on.
    sched.heartbeat_reply = (500, "boom", "text/plain")
    ssp = linked.start()
    try:
        await ssp.wait_ready()
        before = len(sched.heartbeats)
        await wait_for(lambda: _true(len(sched.heartbeats) >= before + 3), 30, "3 more beats")
        assert ssp.process.alive()
        assert ssp.stop() == 0
    finally:
        ssp.stop()


async def test_integrity_mismatch_exits_2_after_three_checks(linked: Linked) -> None:
    linked.sched.corrupt_snapshot = True
    ssp = linked.start()
    try:
        assert await exit_code(ssp) == 2, ssp.process.log_text()[-3000:]
        assert linked.sched.snapshot_calls == 3
        assert "integrity check 3/3 failed" in ssp.process.log_text()
    finally:
        ssp.stop()


async def test_registration_refused_exits_6_and_unreachable_exits_5(linked: Linked) -> None:
    linked.sched.register_status = 400
    ssp = linked.start(SVC_SSP_REGISTER_MAX_WAIT_SECS="1")
    try:
        assert await exit_code(ssp) == 6, ssp.process.log_text()[-3000:]
        assert len(linked.sched.registered) >= 1
    finally:
        ssp.stop()
    nowhere = f"http://127.0.0.1:{free_port()}"
    ssp = start_ssp(linked.tmp, linked.host, linked.ns, linked.db, SVC_SCHEDULER_URL=nowhere,
                    SVC_SSP_REGISTER_MAX_WAIT_SECS="1", SVC_INGEST_TRANSPORT="http")
    try:
        assert await exit_code(ssp) == 5, ssp.process.log_text()[-3000:]
    finally:
        ssp.stop()


async def _true(value: Any) -> Any:
    return value


async def _n(coro: Any, want: int) -> bool:
    return len(await coro) == want


async def test_a_damaged_snapshot_the_scheduler_accepted_bootstraps_cold(linked: Linked) -> None:
    # The scheduler accepts the position, but the rows cannot be read back: the SSP must not
    # fail its start (its supervisor would relaunch it onto the same file for ever) but load
    # through the proxy, saying why.
    linked.snapshot_dir.mkdir()
    (linked.snapshot_dir / "snapshot.json").write_text(json.dumps({
        "version": 1, "ssp_id": "ssp-under-test", "cursors": {},
        "scheduler": {"epoch": "e1", "seq": 10}, "rows": {"post": 5}}))  # not a list
    linked.sched.warm_answer = {"epoch": "e1", "warm": True}
    ssp = linked.start()
    try:
        await ssp.wait_ready(timeout=90)
        assert linked.sched.registered[0]["warm"] == {"epoch": "e1", "seq": 10}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ssp.port}", timeout=30,
                                     headers=AUTH) as http:
            start = (await http.get("/debug/heartbeat")).json()["start"]
            assert start["mode"] == "cold" and "the warm start failed" in start["why"], start
            assert start["pages_read"] > 0
            assert "warm start failed" in ssp.process.log_text()
            info = (await http.get("/info")).json()[0]
            assert info["circuit_tables"]["post"] == 7  # every row, from the proxy
    finally:
        ssp.stop()
