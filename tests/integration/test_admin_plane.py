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
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.admin_cluster import prepare_admin_db
from tests.support.admin_stack import (
    BREAKGLASS,
    AdminScheduler,
    SupervisedSsp,
    db_env,
    start_scheduler,
    start_ssp,
)
from tests.support.procs import ROOT, DbHost, base_env
from tests.support.ssp_stack import edges, root_db, wait_for

pytestmark = pytest.mark.slow

# Every admin API route: (method, path). `{ssp}` is replaced by a registered SSP's id.
ROUTES: list[tuple[str, str]] = [
    ("POST", "/admin/api/logout"), ("GET", "/admin/api/me"),
    ("POST", "/admin/api/tokens"), ("DELETE", "/admin/api/tokens"), ("GET", "/admin/api/tokens"),
    ("DELETE", "/admin/api/tokens/abc"),
    ("GET", "/admin/api/overview"), ("GET", "/admin/api/presence"),
    ("GET", "/admin/api/views"), ("GET", "/admin/api/views/abc"),
    ("DELETE", "/admin/api/views/abc"), ("GET", "/admin/api/history"),
    ("GET", "/admin/api/backends"), ("GET", "/admin/api/backends/pay"),
    ("GET", "/admin/api/logs"), ("GET", "/admin/api/jobs"), ("GET", "/admin/api/jobs/stream"),
    ("GET", "/admin/api/jobs/job:1"), ("POST", "/admin/api/jobs/job:1/kill"),
    ("POST", "/admin/api/jobs/job:1/retry"), ("POST", "/admin/api/jobs/clear"),
    ("GET", "/admin/api/operations"), ("GET", "/admin/api/operations/stream"),
    ("POST", "/admin/api/ssps/{ssp}/restart"), ("POST", "/admin/api/ssps/restart-all"),
    ("POST", "/admin/api/scheduler/restart"), ("GET", "/admin/api/incidents"),
    ("GET", "/admin/api/incidents/inc-x"), ("POST", "/admin/api/cloud/restart"),
    ("GET", "/admin/api/cloud/deployment"),
    ("GET", "/admin/api/workflows/runs"), ("GET", "/admin/api/workflows/runs/r1"),
    ("GET", "/admin/api/workflows/stream"), ("POST", "/admin/api/workflows/runs/r1/cancel"),
    ("POST", "/admin/api/workflows/runs/cancel"),
    ("POST", "/admin/api/workflows/runs/r1/rerun"), ("POST", "/admin/api/workflows/runs/r1/retry"),
    ("GET", "/admin/api/schedules"), ("GET", "/admin/api/schedules/s1"),
    ("POST", "/admin/api/schedules/s1/pause"), ("POST", "/admin/api/schedules/s1/resume"),
    ("POST", "/admin/api/schedules/s1/trigger"), ("POST", "/admin/api/schedules/s1/release"),
    ("GET", "/admin/api/backups"), ("POST", "/admin/api/backups"),
    ("PUT", "/admin/api/backups/config"), ("DELETE", "/admin/api/backups/bk-1"),
    ("POST", "/admin/api/backups/bk-1/restore"), ("GET", "/admin/api/backups/bk-1/restore"),
    ("POST", "/admin/api/restore/release"),
]


@dataclass
class Cluster:
    host: DbHost
    ns: str
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


async def _more_rows(root: Any) -> None:
    await root.query("CREATE user:bob SET name = 'bob', "
                     "pass = crypto::argon2::generate('bob-pw')")
    await root.query("CREATE job:wf_run7_build_r1 SET status = 'completed', path = '/b', "
                     "created_at = time::now(), finished_at = time::now(), "
                     "workflow_run = 'run7'")
    await root.query("CREATE mail:m1 SET status = 'pending', path = '/mail', "
                     "created_at = time::now()")


async def _prepare(host: DbHost, ns: str) -> None:
    await prepare_admin_db(host, ns, more=_more_rows,
                           job_statuses=("completed", "failed", "pending", "completed", "failed"))


async def _connect(sched: AdminScheduler, host: DbHost, ns: str,
                   ssps: list[SupervisedSsp]) -> Cluster:
    async with client() as http:
        status, body = await sign_in(http, sched.admin, {"password": BREAKGLASS})
        assert status == 200, body
        c = Cluster(host, ns, sched, ssps, body["token"])

        async def both() -> bool:
            return await ready_ids(http, c) == {s.ssp_id for s in ssps}

        await wait_for(both, 120, "both SSPs ready")
    return c


@pytest.fixture(scope="module")
def cluster(host: DbHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("admin")
    ns = "adm_" + uuid.uuid4().hex[:8]
    asyncio.run(_prepare(host, ns))
    sched = start_scheduler(tmp, host, ns, job_tables=["job"])
    ssps: list[SupervisedSsp] = []
    try:
        ssps.extend(start_ssp(tmp, host, ns, sched) for _ in range(2))
        yield asyncio.run(_connect(sched, host, ns, ssps))
    finally:
        for s in ssps:
            s.process.stop()
        code = sched.process.stop()
        assert code == 0, sched.process.log_text()[-3000:]


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
        page = await r.text()  # the shipped dashboard (SVC_ADMIN_DIR's default) routes it
        assert r.status == 200 and '<script type="module" src="/admin/js/main.js">' in page
    log = cluster.sched.process.log_text()
    assert "no admin dashboard bundle" not in log


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
        if path == "/admin/api/logout":
            continue  # a read-only token may end itself (below)
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
    assert status == 200 and me["scope"] == "read"
    async with http.get(admin + "/admin/api/operations/stream",
                        headers=cluster.auth(ro)) as r:
        assert r.status == 200
        first = await read_event(r, "operations")
        assert first["operations"] == after_ops["operations"]
    # its own logout is the one write it may do
    status, _ = await jreq(http, "POST", admin + "/admin/api/logout", token=ro)
    assert status == 200
    status, _ = await jreq(http, "GET", admin + "/admin/api/me", token=ro)
    assert status == 401


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
                {"label": "x", "scope": "admin"}, {"label": "x", "ttl_days": 30},
                {"label": "x", "scope": "read", "ttl_days": 1.5}, [1], "text"):
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


# ---------------------------------------------------------------------------- read API

async def register(http: aiohttp.ClientSession, c: Cluster, key: str, surql: str,
                   client_id: str, user: str = "user:alice") -> str:
    body = {"id": f"query:{key}", "surql": surql, "clientId": client_id, "ttl": "10m",
            "params": {"auth_id": user}}
    async with http.post(c.sched.url + "/view/register", json=body) as r:
        reply = await r.json()
        assert r.status == 200, reply
    return str(reply["ssp_id"])


async def test_views_presence_and_overview_show_live_views_with_their_figures(
        cluster: Cluster, http: aiohttp.ClientSession) -> None:
    admin, tok = cluster.sched.admin, cluster.token
    q = "SELECT * FROM post WHERE n >= 3"
    placed = {k: await register(http, cluster, k, q, f"tab-{k}") for k in ("va", "vb")}
    await register(http, cluster, "vc", "SELECT * FROM post WHERE n >= 8", "tab-c", "user:bob")

    async def listed() -> dict[str, Any] | None:
        _, body = await jreq(http, "GET", admin + "/admin/api/views?limit=100", token=tok)
        views = {v["key"]: v for v in body["views"]}
        if {"va", "vb", "vc"} <= set(views) and all(
                views[k]["materialisation"]["p99"] is not None for k in ("va", "vb")):
            return views
        return None

    views = await wait_for(listed, 60, "the views with their materialisation figures")
    va = views["va"]
    assert va["ssp_id"] == placed["va"] and va["user"] == "user:alice"
    assert va["rows"] == 7 and va["identical_sessions"] == 1 and not va["expired"]
    assert va["materialisation"]["samples"] >= 1 and va["expires_in_ms"] > 0
    # filters
    _, body = await jreq(http, "GET", admin + "/admin/api/views?user=user:bob", token=tok)
    assert [v["key"] for v in body["views"]] == ["vc"]
    _, body = await jreq(http, "GET", admin + "/admin/api/views?shared=true&sort=user",
                         token=tok)
    assert sorted(v["key"] for v in body["views"]) == ["va", "vb"]
    _, body = await jreq(http, "GET", admin + "/admin/api/views?q=N+%3E%3D+8", token=tok)
    assert [v["key"] for v in body["views"]] == ["vc"]
    _, body = await jreq(http, "GET", admin + "/admin/api/views?slow_ms=0&limit=1", token=tok)
    assert body["returned"] == 1 and body["total"] >= 2
    _, body = await jreq(http, "GET", admin + "/admin/api/views?large=true", token=tok)
    assert body["views"] == []
    for ssp_id in {s.ssp_id for s in cluster.ssps}:  # the views one SSP holds
        _, body = await jreq(http, "GET", admin + f"/admin/api/views?ssp={ssp_id}&limit=1000",
                             token=tok)
        keys = {v["key"] for v in body["views"]}
        assert all(v["ssp_id"] == ssp_id for v in body["views"]), body
        assert {k for k in ("va", "vb", "vc") if views[k]["ssp_id"] == ssp_id} <= keys
    _, body = await jreq(http, "GET", admin + "/admin/api/views?ssp=no-such-ssp", token=tok)
    assert body["views"] == []
    status, body = await jreq(http, "GET", admin + "/admin/api/views?sort=bogus", token=tok)
    assert status == 400 and body["error"] == "invalid" and "sort" in body["message"]
    # detail: read live, memory from the SSP, the identical session
    status, d = await jreq(http, "GET", admin + "/admin/api/views/query:va", token=tok)
    assert status == 200, d
    assert d["query"] == q and d["params"] == {"auth_id": "user:alice"} and d["rows"] == 7
    assert d["memory"]["members"] == 7 and d["memory"]["estimated_bytes"] > 0
    assert [o["key"] for o in d["identical_sessions"]] == ["vb"]
    assert d["materialisation"]["p99"] is not None
    status, body = await jreq(http, "GET", admin + "/admin/api/views/nope", token=tok)
    assert status == 404 and body["error"] == "not_found"
    # presence and overview
    _, p = await jreq(http, "GET", admin + "/admin/api/presence", token=tok)
    assert p["live"]["users"] >= 2 and p["live"]["views"] >= 3 and p["samples"]
    assert p["heaviest_users"][0]["user"] == "user:alice"
    assert sum(v["views"] for k, v in p["per_ssp"].items() if k != "unplaced") >= 3
    _, ov = await jreq(http, "GET", admin + "/admin/api/overview", token=tok)
    assert ov["scheduler"]["state"] == "ready" and len(ov["ssps"]) == 2
    assert ov["totals"]["live_views"] >= 3 and ov["incidents"]["retention_days"] == 30
    assert ov["incidents"]["storage_error"] is None and ov["operations"]["running"] == []
    # the view-metrics rows the SSPs flushed in cluster mode
    root = await root_db(cluster.host, cluster.ns, cluster.ns)
    try:
        rows = await root.query_one("SELECT view_id, ssp_id, publish_ms FROM _00_view_metrics")
    finally:
        await root.close()
    by_view = {r["view_id"]: r for r in rows}
    assert by_view["query:va"]["ssp_id"] == placed["va"]


async def test_scheduler_and_ssp_logs_stream_as_server_sent_events(
        cluster: Cluster, http: aiohttp.ClientSession) -> None:
    admin = cluster.sched.admin
    async with http.get(admin + "/admin/api/logs?source=scheduler&tail=false&backfill=50",
                        headers=cluster.auth()) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        text = await r.text()
    lines = [json.loads(x[5:]) for x in text.splitlines() if x.startswith("data:")]
    assert 0 < len(lines) <= 50 and any("SSP" in ln["message"] for ln in lines)
    ssp = cluster.ssps[0].ssp_id
    async with http.get(admin + f"/admin/api/logs?source=ssp:{ssp}&tail=false&backfill=20",
                        headers=cluster.auth()) as r:
        assert r.status == 200
        relayed = await r.text()
    assert "data:" in relayed
    for bad, code in (("source=ssp:nope", 404), ("source=disk", 400), ("backfill=-1", 400),
                      ("backfill=99999", 400), ("tail=maybe", 400)):
        status, body = await jreq(http, "GET", admin + "/admin/api/logs?" + bad,
                                  token=cluster.token)
        assert status == code, (bad, body)


async def test_restore_status_of_an_unknown_backup_is_404_and_a_malformed_id_400(
        cluster: Cluster, http: aiohttp.ClientSession) -> None:
    # This cluster has no object storage: no catalog, an empty local registry.
    admin, tok = cluster.sched.admin, cluster.token
    status, body = await jreq(http, "GET", admin + "/admin/api/backups/bk-none/restore",
                              token=tok)
    assert status == 404 and body["code"] == "not_found" and "bk-none" in body["message"]
    status, body = await jreq(http, "GET", admin + "/admin/api/backups/not%20an%20id/restore",
                              token=tok)
    assert status == 400 and "backup_id" in body["message"], body


async def test_jobs_routes_refuse_other_tables_and_the_stream_sends_samples(
        cluster: Cluster, http: aiohttp.ClientSession) -> None:
    admin, tok = cluster.sched.admin, cluster.token
    status, body = await jreq(http, "GET", admin + "/admin/api/jobs", token=tok)
    assert status == 200 and body["measured"] is True
    status, body = await jreq(http, "GET", admin + "/admin/api/jobs/post:p1", token=tok)
    assert status == 404 and "job table" in body["message"]
    status, body = await jreq(http, "GET", admin + "/admin/api/jobs?table=post", token=tok)
    assert status == 404
    status, body = await jreq(http, "GET", admin + "/admin/api/jobs?status=bogus", token=tok)
    assert status == 400
    status, body = await jreq(http, "POST", admin + "/admin/api/jobs/clear", token=tok,
                              body={"table": "mail", "all": True})
    assert status == 200 and body == {"cleared": 0, "total": 0, "more": False}
    status, body = await jreq(http, "POST", admin + "/admin/api/jobs/job:1/retry", token=tok)
    assert status == 404, body  # the SSP's verdict relayed: no such job
    async with http.get(admin + "/admin/api/jobs/stream", headers=cluster.auth()) as r:
        assert r.status == 200
        first = await read_event(r, "jobs")
        second = await read_event(r, "jobs")
    assert first["measured"] and second["sampled_at_ms"] > first["sampled_at_ms"]
    status, body = await jreq(http, "GET", admin + "/admin/api/cloud/deployment", token=tok)
    assert status == 409 and body["code"] == "not_linked"
    assert body["message"] == "Not linked to the hosted platform"


# ---------------------------------------------------------------------------- fuzz

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["mode", "rolling", "label", "scope", "ttl_days", "token", "table",
                         "all", "username", "password", "x"]) | st.text(max_size=8),
        inner, max_size=5),
    max_leaves=12)
_params = st.dictionaries(
    st.sampled_from(["limit", "offset", "user", "ssp", "sort", "slow_ms", "q", "shared",
                     "include_expired", "large", "status", "table", "origin", "component",
                     "state", "severity", "since", "before", "source", "tail", "backfill"])
    | st.text(max_size=6), st.text(max_size=12), max_size=4)
_segment = st.text(max_size=30).filter(lambda s: "/" not in s and "?" not in s and "#" not in s)
FUZZED = [r for r in ROUTES if r[1] not in ("/admin/api/logout",)] + [
    ("POST", "/admin/api/session"), ("GET", "/admin/api/config"),
    ("GET", "/admin/api/views/{x}"), ("GET", "/admin/api/backends/{x}"),
    ("GET", "/admin/api/jobs/{x}"), ("POST", "/admin/api/jobs/{x}/kill"),
    ("POST", "/admin/api/ssps/{x}/restart"), ("GET", "/admin/api/incidents/{x}"),
    ("GET", "/admin/api/workflows/runs/{x}"), ("POST", "/admin/api/workflows/runs/{x}/retry"),
    ("GET", "/admin/api/schedules/{x}"), ("POST", "/admin/api/schedules/{x}/trigger")]
VALID_MODES = {"restart", "clean", "reload", "reclone", "rehash"}


def _acts(route: tuple[str, str], body: Any) -> bool:
    """A body that would start a real action (restarts and clearing are tested on purpose
    elsewhere): a restart with a valid mode, a clear with a valid shape (or no body)."""
    if "restart" in route[1]:
        mode = body.get("mode") if isinstance(body, dict) else None
        return isinstance(mode, str) and mode in VALID_MODES  # a list is no mode (unhashable)
    if route[1] == "/admin/api/jobs/clear":
        return body is None or (isinstance(body, dict)
                                and isinstance(body.get("table"), (str, type(None)))
                                and isinstance(body.get("all", False), bool))
    return False


def test_fuzzed_bodies_and_query_strings_never_500_and_refusals_change_nothing(
        cluster: Cluster) -> None:
    from urllib.parse import quote, urlencode

    import httpx

    admin = cluster.sched.admin
    ssp = cluster.ssps[0].ssp_id
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.5"),
                      timeout=30) as h:
        def state() -> tuple[Any, ...]:
            ops = h.get(admin + "/admin/api/operations", headers=cluster.auth()).json()
            ov = h.get(admin + "/admin/api/overview", headers=cluster.auth()).json()
            return (json.dumps(ops, sort_keys=True),
                    sorted((s["id"], s["registered_at_ms"]) for s in ov["ssps"]))

        before = state()
        seen: dict[int, int] = {}

        @settings(max_examples=400, deadline=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(route=st.sampled_from(FUZZED), segment=_segment, params=_params,
               body=st.one_of(_json.map(lambda v: ("json", v)),
                              st.binary(max_size=64).map(lambda b: ("raw", b)),
                              st.just(("none", None))),
               ctype=st.sampled_from(["application/json", "text/plain", ""]))
        def one(route: tuple[str, str], segment: str, params: dict[str, str],
                body: tuple[str, Any], ctype: str) -> None:
            method, path = route
            content = (json.dumps(body[1]).encode() if body[0] == "json"
                       else body[1] if body[0] == "raw" else None)
            try:  # what the listener will read: an empty or blank body is no body
                effective = json.loads(content) if content and content.strip() else None
            except ValueError:
                effective = ...  # malformed: refused whatever the route
            if effective is not ... and _acts(route, effective):
                return
            path = path.replace("{ssp}", ssp).replace("{x}", quote(segment, safe=""))
            url = admin + path + ("?" + urlencode(params) if params else "")
            headers = dict(cluster.auth())
            if ctype:
                headers["Content-Type"] = ctype
            if path.endswith("/stream") or path.endswith("/logs"):
                with h.stream(method, url, headers=headers, content=content) as r:
                    status = r.status_code  # headers only: a stream never ends by itself
            else:
                r = h.request(method, url, headers=headers, content=content)
                status = r.status_code
                if status >= 400:
                    b = r.json()
                    assert isinstance(b.get("error"), str) and set(b) <= {"error", "code",
                                                                          "message"}, b
                    if status == 503 and "/backups" in path:
                        # the spec's answer without object storage (this cluster has none)
                        assert b.get("code") == "no_object_storage", b
                        status = 0
            assert status < 500, (method, url, body, status)
            seen[status] = seen.get(status, 0) + 1

        one()
        assert state() == before, "a fuzzed request changed the operations or the SSPs"
    assert seen.get(400, 0) > 20 and seen.get(200, 0) > 20, seen


# ---------------------------------------------------------------------------- operations

async def write_post(root: Any, http: aiohttp.ClientSession, c: Cluster, i: int) -> None:
    """A row written to the database, then its event to the scheduler (transport http)."""
    await root.query("UPSERT type::record('post', $k) SET owner = user:alice, title = 't', "
                     "n = $n", {"k": f"w{i}", "n": i % 20})
    rec = {"id": f"post:w{i}", "owner": "user:alice", "title": "t", "n": i % 20}
    async with http.post(c.sched.url + "/ingest", json={"table": "post", "op": "UPDATE",
                                                        "id": rec["id"], "record": rec}) as r:
        assert r.status == 200, await r.text()


async def wait_op(http: aiohttp.ClientSession, c: Cluster, op_id: str,
                  seen: list[Any] | None = None, timeout: float = 240) -> dict[str, Any]:
    async def done() -> dict[str, Any] | None:
        _, body = await jreq(http, "GET", c.sched.admin + "/admin/api/operations", token=c.token)
        op = next(o for o in body["operations"] if o["id"] == op_id)
        if seen is not None and (not seen or seen[-1] != op["progress"]):
            seen.append(op["progress"])
        return op if op["status"] != "running" else None

    return await wait_for(done, timeout, f"operation {op_id} finished")


async def test_rolling_restart_under_writes_keeps_every_view_equal_to_surrealdb(
        cluster: Cluster, http: aiohttp.ClientSession) -> None:
    admin, tok = cluster.sched.admin, cluster.token
    views = {f"r{k}": f"SELECT * FROM post WHERE n >= {k * 4}" for k in range(4)}
    placed = {k: await register(http, cluster, k, q, f"roll-{k}") for k, q in views.items()}
    assert set(placed.values()) == {s.ssp_id for s in cluster.ssps}
    root = await root_db(cluster.host, cluster.ns, cluster.ns)
    stop = asyncio.Event()
    written = 0

    async def writer() -> None:
        nonlocal written
        while not stop.is_set():
            await write_post(root, http, cluster, written)
            written += 1
            await asyncio.sleep(0.01)

    task = asyncio.create_task(writer())
    try:
        status, body = await jreq(http, "POST", admin + "/admin/api/ssps/restart-all",
                                  token=tok, body={"mode": "restart", "rolling": True})
        assert status == 202, body
        assert body["status"] == "running" and body["progress"]["total"] == 2
        status, again = await jreq(http, "POST", admin + "/admin/api/ssps/restart-all",
                                   token=tok, body={"mode": "clean"})
        assert status == 409 and again["code"] == "roll_running"
        progress: list[Any] = []
        op = await wait_op(http, cluster, body["id"], progress)
        assert op["status"] == "done", op
    finally:
        stop.set()
        await task
    ids = sorted(s.ssp_id for s in cluster.ssps)
    assert {"done": 0, "total": 2, "current": ids[0]} in progress, progress
    assert {"done": 1, "total": 2, "current": ids[1]} in progress, progress
    assert op["progress"] == {"done": 2, "total": 2, "current": None}
    assert written > 20
    try:
        async def converged() -> bool:
            for k, q in views.items():
                want = {f"post:{r['id'].id}" for r in await root.query_one(
                    q.replace("*", "id"))}
                if await edges(root, "_00_list_ref_user_alice", k) != want:
                    return False
            return True

        await wait_for(converged, 120, "every view's edges equal SurrealDB's answer")
        assert await ready_ids(http, cluster) == set(ids)
        # each SSP exited on the directive and wrote its snapshot on the way out
        for s in cluster.ssps:
            assert s.snapshot.exists(), s.process.log_text()[-2000:]
        # the operator action is an incident whose events carry the operation id
        _, inc = await jreq(http, "GET", admin + "/admin/api/incidents?component=ssps",
                            token=tok)
        mine = [i for i in inc["incidents"] if any(e["operation_id"] == op["id"]
                                                   for e in i["events"])]
        assert len(mine) == 1 and mine[0]["kind"] == "operator_action"
        assert mine[0]["state"] == "recorded"
    finally:
        await root.close()


async def test_a_clean_restart_wipes_the_ssps_snapshot(
        cluster: Cluster, http: aiohttp.ClientSession) -> None:
    admin, tok = cluster.sched.admin, cluster.token
    target = cluster.ssps[0]
    if not target.snapshot.exists():  # a plain restart first writes one on the way out
        status, body = await jreq(http, "POST", admin + f"/admin/api/ssps/{target.ssp_id}"
                                  "/restart", token=tok, body={"mode": "restart"})
        assert status == 202, body
        assert (await wait_op(http, cluster, body["id"]))["status"] == "done"
    assert target.snapshot.exists()
    wiped_before = target.process.log_text().count("local state wiped")
    status, body = await jreq(http, "POST", admin + f"/admin/api/ssps/{target.ssp_id}/restart",
                              token=tok, body={"mode": "clean"})
    assert status == 202 and body["kind"] == "ssp_clean", body
    assert body["details"]["version"]  # the SSP's version is recorded
    status, dup = await jreq(http, "POST", admin + f"/admin/api/ssps/{target.ssp_id}/restart",
                             token=tok, body={"mode": "restart"})
    assert status == 409 and dup["code"] == "restart_pending"
    op = await wait_op(http, cluster, body["id"])
    assert op["status"] == "done", op
    assert target.process.log_text().count("local state wiped") == wiped_before + 1
    assert not target.snapshot.exists()  # wiped, and nothing written since
    status, body = await jreq(http, "POST", admin + "/admin/api/ssps/nope/restart", token=tok,
                              body={"mode": "restart"})
    assert status == 404
    # reload goes through the SSP's /admin/reload
    status, body = await jreq(http, "POST", admin + f"/admin/api/ssps/{target.ssp_id}/restart",
                              token=tok, body={"mode": "reload"})
    assert status == 202
    op = await wait_op(http, cluster, body["id"])
    assert op["status"] == "done" and "reloaded" in op["message"], op

    async def both() -> bool:
        return await ready_ids(http, cluster) == {s.ssp_id for s in cluster.ssps}

    await wait_for(both, 120, "both SSPs ready again")


async def test_restart_all_at_once_and_clean_wipes_every_ssp_and_views_come_back(
        cluster: Cluster, http: aiohttp.ClientSession) -> None:
    admin, tok = cluster.sched.admin, cluster.token
    view = "SELECT * FROM post WHERE n >= 10"
    await register(http, cluster, "all-at-once", view, "all-at-once")
    root = await root_db(cluster.host, cluster.ns, cluster.ns)
    try:
        wiped = [s.process.log_text().count("local state wiped") for s in cluster.ssps]
        status, body = await jreq(http, "POST", admin + "/admin/api/ssps/restart-all",
                                  token=tok, body={"mode": "clean", "rolling": False})
        assert status == 202, body
        assert body["details"] == {"mode": "clean", "rolling": False,
                                   "ssps": sorted(s.ssp_id for s in cluster.ssps)}, body
        assert body["progress"]["total"] == 2
        op = await wait_op(http, cluster, body["id"])
        assert op["status"] == "done", op
        # every SSP flagged at once: each wiped its local state exactly once more
        assert [s.process.log_text().count("local state wiped") for s in cluster.ssps] == \
            [n + 1 for n in wiped]
        status, bad = await jreq(http, "POST", admin + "/admin/api/ssps/restart-all",
                                 token=tok, body={"mode": "clean", "rolling": "no"})
        assert status == 400 and "rolling" in bad["message"], bad
        await write_post(root, http, cluster, 900)

        async def converged() -> bool:
            want = {f"post:{r['id'].id}" for r in await root.query_one(
                view.replace("*", "id"))}
            return await edges(root, "_00_list_ref_user_alice", "all-at-once") == want

        await wait_for(converged, 120, "the view's edges equal SurrealDB's answer")
    finally:
        await root.close()


async def test_scheduler_restart_modes(cluster: Cluster, http: aiohttp.ClientSession) -> None:
    admin, tok = cluster.sched.admin, cluster.token
    status, body = await jreq(http, "POST", admin + "/admin/api/scheduler/restart", token=tok,
                              body={"mode": "restart"})
    assert status == 409 and body["code"] == "not_supervised"
    status, body = await jreq(http, "POST", admin + "/admin/api/scheduler/restart", token=tok,
                              body={"mode": "rehash"})
    assert status == 202, body
    op = await wait_op(http, cluster, body["id"])
    assert op["status"] == "done" and "rehashed" in op["message"], op
    status, body = await jreq(http, "POST", admin + "/admin/api/scheduler/restart", token=tok,
                              body={"mode": "reclone"})
    assert status == 202, body
    status, again = await jreq(http, "POST", admin + "/admin/api/scheduler/restart", token=tok,
                               body={"mode": "reclone"})
    assert (status, again.get("code")) in ((409, "reclone_running"), (503, "cloning")), again
    op = await wait_op(http, cluster, body["id"])
    assert op["status"] == "done", op

    async def both() -> bool:
        return await ready_ids(http, cluster) == {s.ssp_id for s in cluster.ssps}

    await wait_for(both, 120, "both SSPs ready after the reclone")


async def test_jobs_across_tables_their_origin_and_clearing_terminal_rows(
        cluster: Cluster, http: aiohttp.ClientSession) -> None:
    admin, tok = cluster.sched.admin, cluster.token

    async def sampled() -> dict[str, Any] | None:
        _, body = await jreq(http, "GET", admin + "/admin/api/jobs", token=tok)
        return body if body.get("source") == "sampler" and body["jobs"] else None

    body = await wait_for(sampled, 30, "a job sample")
    assert set(body["per_table"]) == {"job", "mail"}
    assert body["totals"]["completed"] == 3 and body["totals"]["failed"] == 2
    assert body["totals"]["pending"] == 2 and len(body["jobs"]) == 7
    status, body = await jreq(http, "GET", admin + "/admin/api/jobs?status=failed", token=tok)
    assert status == 200 and body["source"] == "database"
    assert sorted(j["id"] for j in body["jobs"]) == ["job:j1", "job:j4"]
    _, body = await jreq(http, "GET", admin + "/admin/api/jobs?origin=workflow", token=tok)
    assert [j["id"] for j in body["jobs"]] == ["job:wf_run7_build_r1"]
    _, body = await jreq(http, "GET", admin + "/admin/api/jobs?q=MAIL", token=tok)
    assert [j["id"] for j in body["jobs"]] == ["mail:m1"]
    status, job = await jreq(http, "GET", admin + "/admin/api/jobs/job:j0", token=tok)
    assert status == 200 and job["payload"] == {"n": 0} and job["origin"] == {"kind": "app"}
    assert job["errors"] == [] and job["retry_budget"]["max_retries"] == 3
    status, job = await jreq(http, "GET", admin + "/admin/api/jobs/job:wf_run7_build_r1",
                             token=tok)
    assert job["origin"] == {"kind": "workflow", "run": "run7"}
    status, body = await jreq(http, "GET", admin + "/admin/api/jobs/mail:nope", token=tok)
    assert status == 404 and body["error"] == "not_found"
    status, body = await jreq(http, "POST", admin + "/admin/api/jobs/job:j2/kill", token=tok)
    # the cluster kill, relayed: no SSP of this cluster runs table job, so every one refuses
    # the id, and that verdict (not a 200 that killed nothing) is the answer
    assert status == 404 and "not a job table" in body["message"], body
    status, body = await jreq(http, "POST", admin + "/admin/api/jobs/clear", token=tok,
                              body={"table": "job"})
    assert status == 200 and body == {"cleared": 5, "total": 5, "more": False}, body
    status, body = await jreq(http, "POST", admin + "/admin/api/jobs/clear", token=tok,
                              body={"table": "post"})
    assert status == 404
    root = await root_db(cluster.host, cluster.ns, cluster.ns)
    try:
        left = await root.query_one("SELECT VALUE id FROM job")
    finally:
        await root.close()
    assert [str(x.id) for x in left] == ["j2"]  # only the pending row is left
