"""The admin plane against real processes: a database host, `svc-scheduler` with its admin
listener, and two SSPs in scheduler mode, each under ops/run's supervisor (relaunched on exit
2-6). One stack for the module; each test leaves the cluster as it found it (both SSPs Ready).

Rate limiting is per client address: tests that fail sign-ins connect from their own loopback
address (127.0.0.x), so the others keep signing in from 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.test_ssp_support import apply_schema, edges, root_db, wait_for
from tests.support.admin_stack import (
    ACCESS_SCHEMA,
    BREAKGLASS,
    AdminScheduler,
    SupervisedSsp,
    db_env,
    start_scheduler,
    start_ssp,
)
from tests.support.procs import ROOT, DbHost, base_env

pytestmark = pytest.mark.slow

# Every admin API route: (method, path). `{ssp}` is replaced by a registered SSP's id.
ROUTES: list[tuple[str, str]] = [
    ("POST", "/admin/api/logout"), ("GET", "/admin/api/me"),
    ("POST", "/admin/api/tokens"), ("DELETE", "/admin/api/tokens"),
    ("GET", "/admin/api/overview"), ("GET", "/admin/api/presence"),
    ("GET", "/admin/api/views"), ("GET", "/admin/api/views/abc"),
    ("GET", "/admin/api/backends"), ("GET", "/admin/api/backends/pay"),
    ("GET", "/admin/api/logs"), ("GET", "/admin/api/jobs"), ("GET", "/admin/api/jobs/stream"),
    ("GET", "/admin/api/jobs/job:1"), ("POST", "/admin/api/jobs/job:1/kill"),
    ("POST", "/admin/api/jobs/job:1/retry"), ("POST", "/admin/api/jobs/clear"),
    ("GET", "/admin/api/operations"), ("GET", "/admin/api/operations/stream"),
    ("POST", "/admin/api/ssps/{ssp}/restart"), ("POST", "/admin/api/ssps/restart-all"),
    ("POST", "/admin/api/scheduler/restart"), ("GET", "/admin/api/incidents"),
    ("GET", "/admin/api/incidents/inc-x"), ("POST", "/admin/api/cloud/restart"),
    ("GET", "/admin/api/cloud/deployment"),
]


@dataclass
class Cluster:
    host: DbHost
    ns: str
    root: Any
    sched: AdminScheduler
    ssps: list[SupervisedSsp]
    token: str  # a break-glass session token (scope full)

    def auth(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.token}"}


async def jreq(http: aiohttp.ClientSession, method: str, url: str, *, token: str | None = None,
               body: Any = None, **kw: Any) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with http.request(method, url, json=body, headers=headers, **kw) as r:
        text = await r.text()
        try:
            return r.status, json.loads(text) if text else None
        except ValueError:
            return r.status, text


async def sign_in(http: aiohttp.ClientSession, admin: str, body: dict[str, Any]) -> tuple[int, Any]:
    return await jreq(http, "POST", admin + "/admin/api/session", body=body)


def client(source: str = "127.0.0.1", total: float = 60) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(local_addr=(source, 0), force_close=True),
        timeout=aiohttp.ClientTimeout(total=total))


async def ready_ids(http: aiohttp.ClientSession, c: Cluster) -> set[str]:
    _, ov = await jreq(http, "GET", c.sched.admin + "/admin/api/overview", token=c.token)
    return {s["id"] for s in ov["ssps"] if s["state"] == "ready" and not s["flagged"]}


@pytest.fixture(scope="module")
def host(shared_db_host: DbHost) -> DbHost:
    return shared_db_host


@pytest.fixture(scope="module")
async def cluster(host: DbHost, tmp_path_factory: pytest.TempPathFactory
                  ) -> AsyncIterator[Cluster]:
    tmp = tmp_path_factory.mktemp("admin")
    ns = "adm_" + uuid.uuid4().hex[:8]
    root = await root_db(host, ns, ns)
    await root.query(ACCESS_SCHEMA)
    apply_schema(host, ns, ns)
    await root.query("CREATE user:alice SET name = 'alice', email = 'alice@example.com', "
                     "pass = crypto::argon2::generate('alice-pw')")
    await root.query("CREATE user:bob SET name = 'bob', pass = crypto::argon2::generate('bob-pw')")
    for i in range(10):
        await root.query("CREATE type::record('post', $k) SET owner = user:alice, title = 't', "
                         "n = $n", {"k": f"p{i}", "n": i})
    sched = start_scheduler(tmp, host, ns)
    ssps = [start_ssp(tmp, host, ns, sched) for _ in range(2)]
    try:
        async with client() as http:
            status, body = await sign_in(http, sched.admin, {"password": BREAKGLASS})
            assert status == 200, body
            c = Cluster(host, ns, root, sched, ssps, body["token"])

            async def both() -> bool:
                return await ready_ids(http, c) == {s.ssp_id for s in ssps}

            await wait_for(both, 120, "both SSPs ready")
        yield c
    finally:
        for s in ssps:
            s.process.stop()
        c_code = sched.process.stop()
        await root.close()
        assert c_code == 0, sched.process.log_text()[-3000:]


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with client() as s:
        yield s


def svc_admin(c: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "svccli", "admin", *args],
                          env=base_env(**db_env(c.host, c.ns)), cwd=str(ROOT),
                          capture_output=True, text=True, timeout=60, check=False)


# ---------------------------------------------------------------------------- public parts

async def test_config_is_public_and_root_redirects_to_the_dashboard(
        cluster: Cluster, http: aiohttp.ClientSession) -> None:
    status, cfg = await jreq(http, "GET", cluster.sched.admin + "/admin/api/config")
    assert status == 200
    assert cfg["breakglass_available"] is True and cfg["sessions_persistent"] is True
    assert cfg["cloud_linked"] is False and cfg["supervised"] is False
    assert cfg["project_slug"] == "default" and cfg["version"] and cfg["scheduler_id"]
    async with http.get(cluster.sched.admin + "/", allow_redirects=False) as r:
        assert r.status == 301 and r.headers["Location"].endswith("/admin/")
    async with http.get(cluster.sched.admin + "/admin/some/deep/link") as r:
        page = await r.text()
        assert r.status == 200 and "SVC_ADMIN_DIR" in page  # the placeholder: no bundle
    log = cluster.sched.process.log_text()
    assert log.count("no admin dashboard bundle") == 1


# ---------------------------------------------------------------------------- authentication

async def test_every_route_needs_a_bearer(cluster: Cluster, http: aiohttp.ClientSession) -> None:
    ssp = cluster.ssps[0].ssp_id
    bodies = set()
    for method, path in ROUTES:
        url = cluster.sched.admin + path.replace("{ssp}", ssp)
        for headers in ({}, {"Authorization": "Bearer not-a-token"},
                        {"Authorization": "Basic abc"}):
            async with http.request(method, url, json={"mode": "restart"},
                                    headers=headers) as r:
                assert r.status == 401, (method, path, r.status, await r.text())
                body = await r.json()
                assert body["error"] == "unauthorized" and "message" in body
                bodies.add(json.dumps(body, sort_keys=True))
    assert len(bodies) <= 2  # "missing header" and "invalid token": nothing route-specific


async def test_a_read_token_may_only_get_and_refused_requests_change_nothing(
        cluster: Cluster, http: aiohttp.ClientSession) -> None:
    admin = cluster.sched.admin
    status, minted = await jreq(http, "POST", admin + "/admin/api/tokens", token=cluster.token,
                                body={"label": "ro", "scope": "read", "ttl_days": 1})
    assert status == 201 and minted["scope"] == "read" and minted["mode"] == "mcp"
    ro = minted["token"]
    _, before_ops = await jreq(http, "GET", admin + "/admin/api/operations", token=ro)
    ssp = cluster.ssps[0].ssp_id
    for method, path in ROUTES:
        url = admin + path.replace("{ssp}", ssp)
        if method == "GET":
            if path.endswith("/stream") or path.endswith("/logs"):
                continue  # streams: checked below
            status, _ = await jreq(http, method, url, token=ro)
            assert status != 401 and status != 403 and status < 500, (path, status)
            continue
        status, body = await jreq(http, method, url, token=ro,
                                  body={"mode": "restart", "label": "x", "scope": "full",
                                        "ttl_days": 1, "token": ro, "all": True})
        assert status == 403, (method, path, status, body)
        assert body["code"] == "read_only" and "read-only" in body["message"]
    _, after_ops = await jreq(http, "GET", admin + "/admin/api/operations", token=ro)
    assert after_ops == before_ops  # no restart started
    status, me = await jreq(http, "GET", admin + "/admin/api/me", token=ro)
    assert status == 200 and me["scope"] == "read"  # its own logout was refused too
    async with http.get(admin + "/admin/api/operations/stream",
                        headers=cluster.auth(ro)) as r:
        assert r.status == 200
        first = await read_event(r, "operations")
        assert first["operations"] == after_ops["operations"]


async def read_event(r: aiohttp.ClientResponse, name: str, timeout: float = 30) -> Any:
    """The data of the next SSE message named `name` on an open stream."""
    async def go() -> Any:
        event, data = None, []
        async for raw in r.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
            elif line == "":
                if event == name and data:
                    return json.loads("\n".join(data))
                event, data = None, []
        raise AssertionError("stream ended")
    return await asyncio.wait_for(go(), timeout)


async def test_minted_tokens_revoked_or_expired_are_refused(
        cluster: Cluster, http: aiohttp.ClientSession) -> None:
    admin = cluster.sched.admin
    status, full = await jreq(http, "POST", admin + "/admin/api/tokens", token=cluster.token,
                              body={"label": "mcp", "scope": "full", "ttl_days": 365})
    assert status == 201
    # an MCP-minted token cannot mint, whatever its scope
    status, body = await jreq(http, "POST", admin + "/admin/api/tokens", token=full["token"],
                              body={"label": "again", "scope": "read", "ttl_days": 1})
    assert status == 403 and body["code"] == "mcp_token"
    for bad in ({"label": "x", "scope": "read", "ttl_days": 366}, {"label": "", "scope": "read"},
                {"label": "x", "scope": "admin"}, [1], "text"):
        status, body = await jreq(http, "POST", admin + "/admin/api/tokens", token=cluster.token,
                                  body=bad)
        assert status == 400 and body["error"] == "invalid", (bad, body)
    status, _ = await jreq(http, "GET", admin + "/admin/api/overview", token=full["token"])
    assert status == 200
    async with http.delete(admin + "/admin/api/tokens", json={"token": full["token"]},
                           headers=cluster.auth()) as r:
        assert r.status == 204
    status, body = await jreq(http, "GET", admin + "/admin/api/overview", token=full["token"])
    assert status == 401
    # a session token after logout
    status, s = await sign_in(http, admin, {"password": BREAKGLASS})
    assert status == 200 and s["mode"] == "breakglass"
    status, _ = await jreq(http, "POST", admin + "/admin/api/logout", token=s["token"])
    assert status == 200
    status, _ = await jreq(http, "GET", admin + "/admin/api/me", token=s["token"])
    assert status == 401
    # an expired token: signed with the right key, past its exp
    import jwt

    from scheduler.admin.tokens import AUDIENCE, derive_key
    from tests.support.admin_stack import AUTH_SECRET

    expired = jwt.encode({"sub": "breakglass", "mode": "breakglass", "scope": "full",
                          "label": "x", "kind": "session", "jti": "j1", "iat": 1000,
                          "exp": 2000, "aud": AUDIENCE}, derive_key(AUTH_SECRET),
                         algorithm="HS256")
    status, body = await jreq(http, "GET", admin + "/admin/api/me", token=expired)
    assert status == 401 and body["error"] == "unauthorized"
    forged = jwt.encode({"sub": "x", "mode": "breakglass", "scope": "full", "label": "x",
                         "kind": "session", "jti": "j2", "iat": 1000, "exp": 2**40,
                         "aud": AUDIENCE}, AUTH_SECRET, algorithm="HS256")  # the raw secret
    status, _ = await jreq(http, "GET", admin + "/admin/api/me", token=forged)
    assert status == 401


async def test_failed_sign_ins_get_one_body_and_are_rate_limited_per_address(
        cluster: Cluster) -> None:
    admin = cluster.sched.admin
    r = svc_admin(cluster, "add", "user:bob")  # bob is on the roster; wrong passwords below
    assert r.returncode == 0, r.stderr
    attempts = [{"password": "wrong"}, {"username": "nobody", "password": "x"},
                {"username": "bob", "password": "wrong"},
                {"username": "alice", "password": "alice-pw"},  # right password, not on roster
                {"username": "", "password": "x"}]
    async with client("127.0.0.2") as http:
        bodies = set()
        for i in range(10):
            status, body = await sign_in(http, admin, attempts[i % len(attempts)])
            assert status == 401, body
            bodies.add(json.dumps(body, sort_keys=True))
        assert len(bodies) == 1
        # the 11th within 5 minutes: refused without a check, the same answer
        status, body = await sign_in(http, admin, {"password": BREAKGLASS})
        assert status == 401 and json.dumps(body, sort_keys=True) in bodies
        status, body = await sign_in(http, admin, {"username": "bob", "password": "bob-pw"})
        assert status == 401 and json.dumps(body, sort_keys=True) in bodies
    async with client("127.0.0.3") as http:  # another address is not affected
        status, body = await sign_in(http, admin, {"username": "bob", "password": "bob-pw"})
        assert status == 200 and body["mode"] == "roster" and body["subject"] == "user:bob"
        for bad in ([], "x", {"password": 5}, {"username": ["a"], "password": "x"}):
            status, body = await sign_in(http, admin, bad)  # type: ignore[arg-type]
            assert status == 400 and body["error"] == "invalid"


async def test_roster_sign_in_through_the_apps_record_access(
        cluster: Cluster, http: aiohttp.ClientSession) -> None:
    admin = cluster.sched.admin
    r = svc_admin(cluster, "add", "alice@example.com", "--note", "ops lead")
    assert r.returncode == 0, r.stderr
    listed = svc_admin(cluster, "list")
    assert listed.returncode == 0 and "alice@example.com" in listed.stdout, listed
    # by $email (the identifier given is on the roster)
    status, body = await sign_in(http, admin, {"username": "alice@example.com",
                                               "password": "alice-pw"})
    assert status == 200, body
    assert body["subject"] == "user:alice" and body["mode"] == "roster"
    status, me = await jreq(http, "GET", admin + "/admin/api/me", token=body["token"])
    assert status == 200 and me["mode"] == "roster" and me["scope"] == "full"
    # removed from the roster: the same credentials no longer sign in
    r = svc_admin(cluster, "remove", "alice@example.com")
    assert r.returncode == 0, r.stderr
    async with client("127.0.0.4") as other:
        status, body = await sign_in(other, admin, {"username": "alice@example.com",
                                                    "password": "alice-pw"})
        assert status == 401
    assert svc_admin(cluster, "remove", "alice@example.com").returncode == 1
