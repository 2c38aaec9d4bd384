"""Attacker-side tests of the trust boundaries (SECURITY.md), against real processes: a database
host, `svc-scheduler` with `SVC_AUTH_SECRET` and its admin listener, and one SSP in scheduler
mode under ops/run's supervisor.

The attacker sits on the private network (the scheduler's ingest listener is open there, by
the spec) or holds a record user's account: a fake SSP that registers its own URL, a look-alike
record user on the admin roster's sign-in, forged forwarded headers, garbage bodies, slow and
idle connections. Each test names the finding of issue 32 it closes.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ipc.peerauth import ingest_credential, scheduler_credential, ssp_credential
from tests.support.admin_cluster import prepare_admin_db
from tests.support.admin_stack import (
    AUTH_SECRET,
    BREAKGLASS,
    AdminScheduler,
    SupervisedSsp,
    db_env,
    start_scheduler,
    start_ssp,
)
from tests.support.procs import ROOT, DbHost, base_env, free_port
from tests.support.ssp_stack import root_db, wait_for

pytestmark = pytest.mark.slow

#: the stack's read deadline (SVC_HTTP_READ_TIMEOUT_SECS): short, so the slow-client test is
#: quick; above the clients' 1.5 s pooling of idle connections (ipc.http)
READ_TIMEOUT_SECS = 2


@dataclass
class Stack:
    host: DbHost
    ns: str
    sched: AdminScheduler
    ssp: SupervisedSsp
    token: str  # a break-glass session


async def _more(root: Any) -> None:
    await root.query("CREATE user:carol SET name = 'carol', "
                     "pass = crypto::argon2::generate('carol-pw')")


@pytest.fixture(scope="module")
def stack(host: DbHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("security")
    ns = "sec_" + uuid.uuid4().hex[:8]
    asyncio.run(prepare_admin_db(host, ns, more=_more))
    timeout = {"SVC_HTTP_READ_TIMEOUT_SECS": str(READ_TIMEOUT_SECS)}
    sched = start_scheduler(tmp, host, ns, env={**timeout, "SVC_IMPERSONATION": "on"})
    ssp = start_ssp(tmp, host, ns, sched, **timeout)
    try:
        async def connect() -> Stack:
            async with client() as http:
                status, body = await jreq(http, "POST", sched.admin + "/admin/api/session",
                                          body={"password": BREAKGLASS})
                assert status == 200, body

                async def ready() -> bool:
                    _, ov = await jreq(http, "GET", sched.admin + "/admin/api/overview",
                                       token=body["token"])
                    return any(s["id"] == ssp.ssp_id and s["state"] == "ready"
                               for s in ov["ssps"])

                await wait_for(ready, 120, "the SSP ready")
                return Stack(host, ns, sched, ssp, body["token"])

        yield asyncio.run(connect())
    finally:
        ssp.process.stop()
        code = sched.process.stop()
        assert code == 0, sched.process.log_text()[-3000:]


def client(source: str = "127.0.0.1") -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(local_addr=(source, 0), force_close=True),
        timeout=aiohttp.ClientTimeout(total=60))


async def jreq(http: aiohttp.ClientSession, method: str, url: str, *, token: str | None = None,
               body: Any = None, headers: dict[str, str] | None = None,
               data: bytes | None = None) -> tuple[int, Any]:
    hdrs = dict(headers or {})
    if token is not None:
        hdrs["Authorization"] = f"Bearer {token}"
    kw: dict[str, Any] = {"data": data, "headers": {**hdrs, "Content-Type":
                                                    "application/json"}} \
        if data is not None else {"json": body, "headers": hdrs}
    async with http.request(method, url, **kw) as r:
        text = await r.text()
        try:
            return r.status, json.loads(text) if text else None
        except ValueError:
            return r.status, text


@dataclass
class FakeSsp:
    """An HTTP server posing as an SSP: answers what the scheduler asks and keeps every
    request's path and headers."""

    port: int
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        async def any_route(req: web.Request) -> web.Response:
            self.seen.append((req.path, dict(req.headers)))
            await req.read()
            if req.path == "/health":
                return web.json_response({"status": "ready"})
            return web.json_response({"ok": True})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", any_route)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def fake_ssp() -> AsyncIterator[FakeSsp]:
    fake = FakeSsp(free_port())
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


def svc_admin(s: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "svccli", "admin", *args],
                          env=base_env(**db_env(s.host, s.ns)), cwd=str(ROOT),
                          capture_output=True, text=True, timeout=60, check=False)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# ------------------------------------------------------------------ critical: the master secret


async def test_a_url_registered_from_the_network_never_receives_the_secret(
        stack: Stack, fake_ssp: FakeSsp) -> None:
    """Critical: `POST /ssp/register` from anyone used to make the scheduler send
    `Bearer <SVC_AUTH_SECRET>` to the URL given. Registration now needs the SSP's credential,
    and a registered SSP receives a credential that opens that SSP alone."""
    reg = stack.sched.url + "/ssp/register"
    body = {"ssp_id": "evil", "url": fake_ssp.url}
    async with client() as http:
        for headers in ({}, bearer("guess"), bearer(ssp_credential(AUTH_SECRET, "other")),
                        bearer(scheduler_credential(AUTH_SECRET, "evil")),
                        bearer(ssp_credential("another-secret-entirely", "evil"))):
            status, answer = await jreq(http, "POST", reg, body=body, headers=headers)
            assert status == 401, (headers, answer)
        # posting an event would reach every registered SSP: the fake is not one
        status, _ = await jreq(http, "POST", stack.sched.url + "/ingest", body={
            "table": "post", "op": "UPDATE", "id": "post:p0",
            "record": {"id": "post:p0", "owner": "user:alice", "title": "t", "n": 0}})
        assert status == 200
        await asyncio.sleep(1.0)  # ten health polls of a Bootstrapping entry, had there been one
        assert fake_ssp.seen == []

        # A holder of the secret registers its own URL (as an SSP does): what comes to that
        # URL is a credential for that SSP id, never the secret.
        status, answer = await jreq(http, "POST", reg, body=body,
                                    headers=bearer(ssp_credential(AUTH_SECRET, "evil")))
        assert status == 202, answer
        status, _ = await jreq(http, "POST", stack.sched.url + "/ingest", body={
            "table": "post", "op": "UPDATE", "id": "post:p1",
            "record": {"id": "post:p1", "owner": "user:alice", "title": "t", "n": 1}})
        assert status == 200

        async def delivered() -> bool:
            return any(p == "/ingest" for p, _ in fake_ssp.seen)

        await wait_for(delivered, 30, "an event delivered to the registered URL")
        sent = {h.get("Authorization") for _, h in fake_ssp.seen} - {None}
        assert sent == {f"Bearer {scheduler_credential(AUTH_SECRET, 'evil')}"}
        assert not any(AUTH_SECRET in json.dumps(h) for _, h in fake_ssp.seen)
        # What it received opens nothing else: not the real SSP, not the admin API, not the
        # replica, not impersonation.
        got = sent.pop()[len("Bearer "):]
        status, _ = await jreq(http, "POST", stack.ssp.url + "/view/register", token=got,
                               body={"id": "query:x", "surql": "SELECT * FROM post",
                                     "clientId": "c", "ttl": "1m",
                                     "params": {"auth_id": "user:alice"}})
        assert status == 401
        for method, url in (("GET", stack.sched.admin + "/admin/api/overview"),
                            ("POST", stack.sched.url + "/proxy/query"),
                            ("POST", stack.sched.url + "/impersonate/users")):
            status, _ = await jreq(http, method, url, token=got, body={"query": "INFO FOR DB"})
            assert status == 401, url


async def test_ssp_and_cluster_routes_of_the_ingest_listener_need_a_credential(
        stack: Stack) -> None:
    base = stack.sched.url
    real = stack.ssp.ssp_id
    hb = {"ssp_id": real, "timestamp": time.time(), "views": 0}
    async with client() as http:
        # heartbeats: only the SSP itself (a forged 409 would make it wipe and exit)
        for headers in ({}, bearer(ssp_credential(AUTH_SECRET, "evil"))):
            status, _ = await jreq(http, "POST", base + "/ssp/heartbeat", body=hb,
                                   headers=headers)
            assert status == 401
        status, _ = await jreq(http, "POST", base + "/ssp/heartbeat", body=hb,
                               headers=bearer(ssp_credential(AUTH_SECRET, real)))
        assert status == 200
        # the replica through the proxy: the secret (spec) or an SSP's credential
        q = {"query": "SELECT * FROM post ORDER BY id LIMIT 1"}
        status, _ = await jreq(http, "POST", base + "/proxy/query", body=q)
        assert status == 401
        for token in (AUTH_SECRET, ssp_credential(AUTH_SECRET, real)):
            status, _ = await jreq(http, "POST", base + "/proxy/query", body=q, token=token)
            assert status == 200
        status, _ = await jreq(http, "POST", base + "/proxy/query", body=q,
                               token=ingest_credential(AUTH_SECRET))
        assert status == 401
        # job routes, a re-clone, the backup plane and the backend list (a request forger
        # with a status oracle when open)
        for method, path, payload in (
                ("POST", "/job/kill", {"id": "job:j0"}), ("POST", "/job/retry", {"id": "job:j0"}),
                ("POST", "/job/dispatch", {"job_id": "job:j0", "table": "job"}),
                ("POST", "/job/result", {"job_id": "job:j0", "status": "completed"}),
                ("POST", "/admin/resync", {}), ("GET", "/backup/status", None),
                ("PUT", "/backends", [{"name": "x", "url": "http://10.0.0.1/"}])):
            status, _ = await jreq(http, method, base + path, body=payload)
            assert status == 401, path
        status, _ = await jreq(http, "PUT", base + "/backends", token=AUTH_SECRET,
                               body=[{"name": "x", "url": "http://127.0.0.1:9/"}])
        assert status == 200
        status, _ = await jreq(http, "PUT", base + "/backends", token=AUTH_SECRET, body=[])
        assert status == 200
        # progress from anyone: 200 (spec), but believed only from the SSP it names
        status, _ = await jreq(http, "POST", base + "/ssp/bootstrap-progress", body={
            "ssp_id": real, "tables_done": 1, "tables_total": 1, "rows_loaded": 1,
            "current_table": "forged-by-the-network"})
        assert status == 200
        _, ov = await jreq(http, "GET", stack.sched.admin + "/admin/api/overview",
                           token=stack.token)
        assert "forged-by-the-network" not in json.dumps(ov)
        # the data plane the spec leaves open stays open
        status, _ = await jreq(http, "GET", base + "/health/snapshot")
        assert status == 200


async def test_the_ingest_credential_opens_ingest_and_unregister_only(stack: Stack) -> None:
    token = ingest_credential(AUTH_SECRET)
    ssp = stack.ssp.url
    async with client() as http:
        status, body = await jreq(http, "POST", ssp + "/ingest", token=token, body={
            "table": "post", "op": "UPDATE", "id": "post:p2",
            "record": {"id": "post:p2", "owner": "user:alice", "title": "t", "n": 2}})
        assert status in (200, 503), body  # 503 only while the SSP is gated
        status, _ = await jreq(http, "POST", ssp + "/view/unregister", token=token,
                               body={"id": "query:nobody"})
        assert status == 200
        for path, payload in (("/view/register", {"id": "query:x", "surql": "SELECT * FROM post",
                                                  "clientId": "c", "ttl": "1m"}),
                              ("/reset", None), ("/admin/reload", None),
                              ("/impersonate/users", {"table": "user"})):
            status, _ = await jreq(http, "POST", ssp + path, token=token, body=payload)
            assert status in (401, 404), path
            if path != "/impersonate/users":
                assert status == 401


# ------------------------------------------------------------------ high: roster look-alikes


async def test_roster_sign_in_matches_the_signed_in_record_not_what_was_typed(
        stack: Stack) -> None:
    added = svc_admin(stack, "add", "carol")
    assert added.returncode == 0, added.stderr
    assert "bound to user:carol" in added.stdout
    root = await root_db(stack.host, stack.ns, stack.ns)
    try:
        # A look-alike through the app's own sign-up, and the same name through another
        # access method of the same database.
        await root.query(
            "CREATE user:lookalike SET name = 'CAROL', pass = crypto::argon2::generate('x-pw');"
            "DEFINE TABLE customer SCHEMAFULL PERMISSIONS FOR select WHERE id = $auth.id;"
            "DEFINE FIELD name ON customer TYPE string; DEFINE FIELD pass ON customer TYPE string;"
            "DEFINE ACCESS shop ON DATABASE TYPE RECORD SIGNIN (SELECT * FROM customer WHERE "
            "name = $username AND crypto::argon2::compare(pass, $password)) "
            "DURATION FOR SESSION 1h;"
            "CREATE customer:c1 SET name = 'carol', pass = crypto::argon2::generate('cust-pw')")
    finally:
        await root.close()
    admin = stack.sched.admin + "/admin/api/session"
    async with client("127.0.0.21") as http:
        for who in ({"username": "CAROL", "password": "x-pw"},
                    {"username": "carol", "password": "cust-pw"}):
            status, body = await jreq(http, "POST", admin, body=who)
            assert status == 401, (who, body)
        status, body = await jreq(http, "POST", admin,
                                  body={"username": "carol", "password": "carol-pw"})
        assert status == 200 and body["subject"] == "user:carol" and body["mode"] == "roster"
    # With two accounts named carol now, the CLI asks which one rather than guess.
    again = svc_admin(stack, "add", "carol")
    assert again.returncode == 2 and "several accounts" in again.stderr
    assert "user:carol" in again.stderr and "customer:c1" in again.stderr


# ------------------------------------------------------------------ medium: sign-in limits


async def test_garbage_sign_in_bodies_are_400_and_count_as_failures(stack: Stack) -> None:
    admin = stack.sched.admin + "/admin/api/session"
    deep = ("[" * 30_000 + "]" * 30_000).encode()  # under the 64 KiB body limit
    before = stack.sched.process.log_text().count("Traceback")
    async with client("127.0.0.23") as http:
        for _ in range(10):
            status, body = await jreq(http, "POST", admin, data=deep)
            assert status == 400, body
        status, _ = await jreq(http, "POST", admin, body={"password": BREAKGLASS})
        assert status == 401
    assert stack.sched.process.log_text().count("Traceback") == before


# ------------------------------------------------------------------ medium: tokens by id


async def test_tokens_are_listed_and_revoked_by_id_and_fall_with_the_roster(
        stack: Stack) -> None:
    assert svc_admin(stack, "add", "user:alice").returncode == 0
    admin = stack.sched.admin
    async with client() as http:
        status, s = await jreq(http, "POST", admin + "/admin/api/session",
                               body={"username": "alice", "password": "alice-pw"})
        assert status == 200, s
        alice = s["token"]
        status, m1 = await jreq(http, "POST", admin + "/admin/api/tokens", token=alice,
                                body={"label": "laptop", "scope": "full", "ttl_days": 365})
        assert status == 201
        status, listing = await jreq(http, "GET", admin + "/admin/api/tokens", token=stack.token)
        assert status == 200
        mine = [t for t in listing["tokens"] if t["label"] == "laptop"]
        assert len(mine) == 1 and mine[0]["subject"] == "user:alice" and not mine[0]["revoked"]
        assert m1["token"] not in json.dumps(listing)  # listed by id, never the token
        # revoked by id by another operator, without holding the token
        async with http.delete(admin + f"/admin/api/tokens/{mine[0]['id']}",
                               headers=bearer(stack.token)) as r:
            assert r.status == 204
        status, _ = await jreq(http, "GET", admin + "/admin/api/me", token=m1["token"])
        assert status == 401
        # Taken off the roster: the session and the tokens it minted stop working.
        status, m2 = await jreq(http, "POST", admin + "/admin/api/tokens", token=alice,
                                body={"label": "ci", "scope": "read", "ttl_days": 30})
        assert status == 201
        assert svc_admin(stack, "remove", "user:alice").returncode == 0

        async def refused() -> bool:
            codes = [(await jreq(http, "GET", admin + "/admin/api/me", token=t))[0]
                     for t in (alice, m2["token"])]
            return codes == [401, 401]

        await wait_for(refused, 30, "the removed operator's tokens refused")


async def test_a_read_only_token_can_log_itself_out(stack: Stack) -> None:
    admin = stack.sched.admin
    async with client() as http:
        status, ro = await jreq(http, "POST", admin + "/admin/api/tokens", token=stack.token,
                                body={"label": "ro", "scope": "read", "ttl_days": 1})
        assert status == 201
        status, _ = await jreq(http, "POST", admin + "/admin/api/logout", token=ro["token"])
        assert status == 200
        status, _ = await jreq(http, "GET", admin + "/admin/api/me", token=ro["token"])
        assert status == 401


# ------------------------------------------------------------------ low: slow and idle clients


def _closed_within(port: int, send: bytes, drip: bytes, limit: float) -> bool:
    """Open a connection, send `send`, then `drip` a byte at a time every 0.5 s: True when the
    server closes it within `limit` seconds."""
    s = socket.create_connection(("127.0.0.1", port), timeout=limit)
    try:
        if send:
            s.sendall(send)
        deadline = time.monotonic() + limit
        for b in drip or b"\0" * 1000:
            s.settimeout(0.5)
            try:
                if s.recv(65536) == b"":
                    return True
            except TimeoutError:
                pass
            except OSError:
                return True
            if time.monotonic() > deadline:
                return False
            if drip:
                try:
                    s.sendall(bytes([b]))
                except OSError:
                    return True
        return False
    finally:
        s.close()


@pytest.mark.parametrize("which", ["scheduler", "admin", "ssp"])
def test_idle_and_slow_header_connections_are_closed(stack: Stack, which: str) -> None:
    port = {"scheduler": stack.sched.port, "admin": stack.sched.admin_port,
            "ssp": stack.ssp.port}[which]
    limit = READ_TIMEOUT_SECS + 8.0
    assert _closed_within(port, b"", b"", limit), "an idle connection stayed open"
    head = b"GET /health HTTP/1.1\r\nHost: x\r\n"
    assert _closed_within(port, head, b"X-Slow: " + b"a" * 60, limit), \
        "a request head sent a byte at a time held the connection"


# ------------------------------------------------------------------ low: impersonation search


async def test_the_user_search_returns_no_secret_fields(stack: Stack) -> None:
    async with client() as http:
        for fields in (["pass"], ["name", "pass"]):
            status, body = await jreq(http, "POST", stack.sched.url + "/impersonate/users",
                                      token=AUTH_SECRET,
                                      body={"table": "user", "fields": fields, "search": "$"})
            assert status == 400 and body["error"] == "invalid", body
        status, body = await jreq(http, "POST", stack.sched.url + "/impersonate/users",
                                  token=AUTH_SECRET,
                                  body={"table": "user", "fields": ["name"], "search": "carol"})
        assert status == 200 and body
        assert all(set(r) <= {"id", "name", "is_admin"} for r in body)


# ------------------------------------------------------------------ low: lastActiveAt


async def test_a_record_user_cannot_date_its_views_into_the_future(stack: Stack) -> None:
    from surrealdb import AsyncSurreal

    from tests.support.dbhost_clients import close

    async with client() as http:
        status, body = await jreq(http, "POST", stack.sched.url + "/view/register", body={
            "id": "query:mine", "surql": "SELECT * FROM post WHERE n > 100",
            "clientId": "c-mine", "ttl": "30s", "params": {"auth_id": "user:alice"}})
        assert status == 200, body
    root = await root_db(stack.host, stack.ns, stack.ns)

    async def row() -> Any:
        return await root.query_one("SELECT * FROM ONLY _00_query:mine")

    await wait_for(row, 30, "the view's row")
    alice = AsyncSurreal(stack.host.ws_url)
    await alice.signin({"namespace": stack.ns, "database": stack.ns, "access": "account",
                        "variables": {"username": "alice", "password": "alice-pw"}})
    await alice.use(stack.ns, stack.ns)
    try:
        for value in ("d'2999-01-01T00:00:00Z'", "'2999-01-01T00:00:00Z'", "'whenever'"):
            with pytest.raises(Exception):  # noqa: B017 - the SDK's error type for a refusal
                await alice.query(f"UPDATE _00_query:mine SET lastActiveAt = {value}")
        await alice.query("UPDATE _00_query:mine SET lastActiveAt = time::now()")  # allowed
        got = (await row())["lastActiveAt"]
        assert got.year < 2999
    finally:
        await close(alice)
        await root.close()


# ------------------------------------------------------------------ last: it blocks 127.0.0.1


async def test_forwarded_headers_neither_reset_the_limit_nor_reach_the_log(stack: Stack) -> None:
    """From loopback (uvicorn believed X-Forwarded-For from 127.0.0.1): a fresh forged address
    per guess gave unlimited guesses. Last in the module: it uses up 127.0.0.1's failures."""
    admin = stack.sched.admin + "/admin/api/session"
    async with client("127.0.0.1") as http:
        for i in range(10):
            status, _ = await jreq(http, "POST", admin, body={"password": f"wrong-{i}"},
                                   headers={"X-Forwarded-For": f"203.0.113.{i}"})
            assert status == 401
        status, _ = await jreq(http, "POST", admin, body={"password": BREAKGLASS},
                               headers={"X-Forwarded-For": "203.0.113.99"})
        assert status == 401  # the TCP peer used up its failures, whatever the header says
    assert "203.0.113." not in stack.sched.process.log_text()


async def test_failures_from_many_addresses_together_meet_a_global_limit(
        stack: Stack) -> None:
    """Medium: the per-address limit alone let many addresses (a botnet, or the rotated
    forged addresses above) guess without end. 300 failures in all within the window stop
    every further attempt, the right password included. Last: it blocks all sign-ins."""
    admin = stack.sched.admin + "/admin/api/session"

    async def fail_from(addr: str) -> list[int]:
        async with client(addr) as http:
            return [(await jreq(http, "POST", admin, body={"password": "nope"}))[0]
                    for _ in range(10)]

    codes = await asyncio.gather(*(fail_from(f"127.0.1.{i}") for i in range(1, 31)))
    assert {c for cs in codes for c in cs} == {401}
    async with client("127.0.2.1") as http:  # a fresh address, the right password
        status, _ = await jreq(http, "POST", admin, body={"password": BREAKGLASS})
        assert status == 401
