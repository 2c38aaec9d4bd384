"""The admin MCP endpoint (`POST /admin/api/mcp`) with the SDK's own client over HTTP, against
a real cluster (database host, `svc-scheduler`, two supervised SSPs): both protocol modes (the
initialize handshake and the 2026-07-28 per-request envelope), tools per scope, every read
tool, a restart followed to done through `operations_list`, and the HTTP-level refusals."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from scheduler.admin.mcptools import TOOLS
from tests.support.admin_cluster import AdminCluster, admin_cluster
from tests.support.procs import DbHost
from tests.support.ssp_stack import wait_for

pytestmark = pytest.mark.slow

MODES = ("legacy", "2026-07-28")
READ_TOOLS = {t.name for t in TOOLS if t.read_only}
ALL_TOOLS = {t.name for t in TOOLS}
SPEC_TOOLS = {"admin_config", "overview", "backends_list", "backend_get", "logs_recent",
              "operations_list", "presence", "views_list", "view_get", "jobs_list", "job_get",
              "job_kill", "job_retry", "jobs_clear", "ssp_restart", "ssps_restart_all",
              "scheduler_restart", "incidents_list", "incident_get", "cloud_deployment",
              "cloud_restart", "workflow_runs_list", "workflow_run_get", "workflow_run_cancel",
              "workflow_run_rerun", "workflow_run_retry", "schedules_list", "schedule_get",
              "schedule_pause", "schedule_resume", "schedule_trigger", "schedule_release",
              "pools_list", "pool_machines", "pool_pause", "pool_resume", "machine_drain",
              "backups_list", "backup_create", "backup_restore",
              "backup_restore_status", "backup_delete", "backups_configure"}
#: tools beyond the spec's list (ours: SPEC-DEVIATIONS.md, "Our additions")
EXTRA_TOOLS = {"workflow_runs_cancel", "view_unregister"}
#: read tools over routes this cluster cannot serve (no workflow tables): tested with the
#: workflows (tests/integration/test_workflows.py)
WORKFLOW_READ = {"workflow_runs_list", "workflow_run_get", "schedules_list", "schedule_get"}
#: this cluster has no machine pool: no pool is an empty list, a pool named is unknown (below)
POOL_READ = {"pools_list", "pool_machines"}


@pytest.fixture(scope="module")
def cluster(host: DbHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminCluster]:
    with admin_cluster(host, tmp_path_factory.mktemp("mcp"), "mcp_") as c:
        c.register_view("m1", "SELECT * FROM post WHERE n >= 5", "tab-m1")
        yield c


@asynccontextmanager
async def mcp_client(c: AdminCluster, token: str, mode: str) -> Any:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                              timeout=httpx2.Timeout(60))
    async with http, Client(streamable_http_client(c.admin + "/admin/api/mcp",
                                                   http_client=http), mode=mode) as client:
        yield client


def payload(result: Any) -> Any:
    assert result.is_error is False, result.content
    return result.structured_content


def test_only_post_with_a_live_bearer_reaches_the_sdk(cluster: AdminCluster) -> None:
    url = cluster.admin + "/admin/api/mcp"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "0"}}}
    hdrs = {"Accept": "application/json, text/event-stream"}
    with httpx.Client(timeout=30) as h:
        for method in ("GET", "DELETE"):
            r = h.request(method, url, headers={**hdrs, "Authorization":
                                                f"Bearer {cluster.token}"})
            assert r.status_code == 405 and r.headers["allow"] == "POST"
            assert r.json()["error"] == "method_not_allowed"
        for auth in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic x"}):
            r = h.post(url, json=init, headers={**hdrs, **auth})
            assert r.status_code == 401, r.text
            assert r.json()["error"] == "unauthorized"
            assert r.headers["www-authenticate"] == "Bearer"
        # another host name than loopback (a service name, a load balancer) is served
        r = h.post(url, json=init, headers={**hdrs, "Authorization": f"Bearer {cluster.token}",
                                            "Host": "scheduler.internal:9668"})
        assert r.status_code == 200, r.text
        assert r.json()["result"]["serverInfo"]["name"] == "svc-scheduler-admin"
        r = h.post(url, content=b"x" * (70 * 1024),
                   headers={**hdrs, "Authorization": f"Bearer {cluster.token}",
                            "Content-Type": "application/json"})
        assert r.status_code == 413
        # the rest of the listener is untouched by the dispatcher in front of it
        r = h.get(cluster.admin + "/admin/api/me",
                  headers={"Authorization": f"Bearer {cluster.token}"})
        assert r.status_code == 200 and r.json()["mode"] == "breakglass"


@pytest.mark.parametrize("mode", MODES)
async def test_tools_list_follows_the_tokens_scope(cluster: AdminCluster, mode: str) -> None:
    assert SPEC_TOOLS | EXTRA_TOOLS == ALL_TOOLS  # every tool of the spec, and ours
    full, read = cluster.mint("full", "mcp-full"), cluster.mint("read", "mcp-read")
    async with mcp_client(cluster, full, mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == ALL_TOOLS
    for name, t in tools.items():
        ro = name in READ_TOOLS
        assert t.annotations is not None and t.annotations.read_only_hint is ro, name
        assert t.input_schema["type"] == "object"
    for name in ("ssp_restart", "ssps_restart_all", "scheduler_restart", "jobs_clear",
                 "job_kill", "cloud_restart", "workflow_run_cancel", "backup_restore",
                 "backup_delete", "view_unregister"):
        assert tools[name].annotations.destructive_hint is True, name
    assert tools["overview"].annotations.destructive_hint is False
    async with mcp_client(cluster, read, mode) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert listed == READ_TOOLS
        # a write tool called anyway: a tool error, not an HTTP error; nothing started
        _, before = cluster.api("GET", "/admin/api/operations")
        res = await client.call_tool("ssp_restart", {"ssp_id": cluster.ssps[0].ssp_id,
                                                     "mode": "restart"})
        assert res.is_error is True and "read-only" in res.content[0].text
        assert res.structured_content["status"] == 403
        res = await client.call_tool("jobs_clear", {"all": True})
        assert res.is_error is True
        _, after = cluster.api("GET", "/admin/api/operations")
        assert after == before


@pytest.mark.parametrize("mode", MODES)
async def test_every_read_tool_answers_through_the_admin_api(cluster: AdminCluster,
                                                             mode: str) -> None:
    read = cluster.mint("read", "mcp-reader")
    ssp = cluster.ssps[0].ssp_id
    async with mcp_client(cluster, read, mode) as client:
        async def view_listed() -> Any:
            body = payload(await client.call_tool("views_list", {"sort": "rows"}))
            return body if any(v["key"] == "m1" for v in body["views"]) else None

        views = await wait_for(view_listed, 60, "view m1 listed")
        assert next(v for v in views["views"] if v["key"] == "m1")["rows"] == 5
        incidents = payload(await client.call_tool("incidents_list", {"limit": 5}))
        assert incidents["incidents"] and incidents["limit"] == 5
        calls: dict[str, dict[str, Any]] = {
            "admin_config": {}, "overview": {}, "backends_list": {},
            "backend_get": {"name": "pay"}, "logs_recent": {"lines": 20},
            "operations_list": {}, "presence": {}, "views_list": {"q": "n >= 5"},
            "view_get": {"key": "m1"}, "jobs_list": {"status": "failed"},
            "job_get": {"job_id": "job:j0"},
            "incidents_list": {"state": "recorded"},
            "incident_get": {"incident_id": incidents["incidents"][0]["id"]},
            "backups_list": {},
        }
        answers = {name: payload(await client.call_tool(name, args))
                   for name, args in calls.items()}
        assert READ_TOOLS - set(calls) == ({"cloud_deployment", "backup_restore_status"}
                                           | WORKFLOW_READ | POOL_READ)
        # the same data the routes answer
        assert answers["admin_config"]["breakglass_available"] is True
        assert {s["id"] for s in answers["overview"]["ssps"]} == {s.ssp_id
                                                                  for s in cluster.ssps}
        assert answers["backend_get"]["env"] == {"PAY_KEY": "***"}
        assert "very-secret-value" not in json.dumps(answers)
        assert answers["backends_list"]["list"][0]["name"] == "pay"
        assert answers["view_get"]["query"] == "SELECT * FROM post WHERE n >= 5"
        assert answers["view_get"]["rows"] == 5
        assert [j["id"] for j in answers["jobs_list"]["jobs"]] == ["job:j1"]
        assert answers["job_get"]["payload"] == {"n": 0}
        assert answers["incident_get"]["incident"]["id"] == incidents["incidents"][0]["id"]
        # no object storage in this cluster: the plane is off, nothing in its registry
        assert answers["backups_list"]["storage"]["configured"] is False
        assert answers["backups_list"]["catalog"] is None
        # ... so a backup id is one nobody knows: the route's 404, as a tool error
        res = await client.call_tool("backup_restore_status", {"backup_id": "never-made"})
        assert res.is_error and res.structured_content["status"] == 404
        assert res.structured_content["code"] == "not_found"
        logs = answers["logs_recent"]
        assert 0 < len(logs["lines"]) <= 20 and all("message" in ln for ln in logs["lines"])
        ssp_logs = payload(await client.call_tool("logs_recent", {"source": f"ssp:{ssp}",
                                                                  "lines": 5}))
        assert 0 < len(ssp_logs["lines"]) <= 5
        # errors of the route are tool errors with its status and body
        res = await client.call_tool("view_get", {"key": "nope"})
        assert res.is_error and res.structured_content["status"] == 404
        res = await client.call_tool("views_list", {"sort": "bogus"})
        assert res.is_error and res.structured_content["status"] == 400
        res = await client.call_tool("job_get", {"job_id": "post:p1"})
        assert res.is_error and "job table" in res.structured_content["message"]
        res = await client.call_tool("pools_list", {})
        assert not res.is_error and res.structured_content["pools"] == []
        res = await client.call_tool("pool_machines", {"name": "gpu"})
        assert res.is_error and res.structured_content["status"] == 404
        res = await client.call_tool("cloud_deployment", {})
        assert res.is_error and res.structured_content["status"] == 409
        assert res.structured_content["message"] == "Not linked to the hosted platform"
        res = await client.call_tool("no_such_tool", {})
        assert res.is_error


@pytest.mark.parametrize("mode", MODES)
async def test_ssp_restart_answers_an_operation_that_operations_list_follows_to_done(
        cluster: AdminCluster, mode: str) -> None:
    full = cluster.mint("full", "mcp-operator")
    ssp = cluster.ssps[1].ssp_id
    async with mcp_client(cluster, full, mode) as client:
        op = payload(await client.call_tool("ssp_restart", {"ssp_id": ssp, "mode": "restart"}))
        assert op["status"] == "running" and op["kind"] == "ssp_restart"
        assert op["target"] == f"ssp:{ssp}" and op["requested_by"]["mode"] == "mcp"

        async def finished() -> Any:
            body = payload(await client.call_tool("operations_list",
                                                  {"operation_id": op["id"]}))
            got = body["operations"][0]
            return got if got["status"] != "running" else None

        done = await wait_for(finished, 180, "the restart operation finished")
        assert done["status"] == "done", done
        res = await client.call_tool("cloud_restart", {"roles": []})
        assert res.is_error and res.structured_content["message"] == \
            "Not linked to the hosted platform"
        res = await client.call_tool("ssp_restart", {"ssp_id": ssp, "mode": "sideways"})
        assert res.is_error and res.structured_content["status"] == 400
        res = await client.call_tool("scheduler_restart", {"mode": "restart"})
        assert res.is_error and res.structured_content["code"] == "not_supervised"
        # backups: off without object storage; delete and configure need the platform link
        res = await client.call_tool("backup_create", {"name": "nightly"})
        assert res.is_error and res.structured_content["status"] == 503
        assert res.structured_content["code"] == "no_object_storage"
        res = await client.call_tool("backup_restore", {"backup_id": "bk-1"})
        assert res.is_error and res.structured_content["status"] == 503
        for name, args in (("backup_delete", {"backup_id": "bk-1"}),
                           ("backups_configure", {"enabled": True})):
            res = await client.call_tool(name, args)
            assert res.is_error and res.structured_content["message"] == \
                "Not linked to the hosted platform", name
    # an MCP-minted token (even full) cannot mint tokens
    status, body = cluster.api("POST", "/admin/api/tokens",
                               {"label": "x", "scope": "read", "ttl_days": 1}, token=full)
    assert status == 403 and body["code"] == "mcp_token"
    wait_until_ready = cluster.ready_ssps
    assert await wait_for(_async(lambda: wait_until_ready() == {s.ssp_id
                                                                for s in cluster.ssps}),
                          120, "both SSPs ready")


async def test_view_unregister_deletes_the_view_and_needs_a_writing_token(
        cluster: AdminCluster) -> None:
    cluster.register_view("mu", "SELECT * FROM post WHERE n >= 9", "tab-mu")
    read, full = cluster.mint("read", "mcp-view-reader"), cluster.mint("full", "mcp-view-op")
    async with mcp_client(cluster, read, MODES[1]) as client:
        res = await client.call_tool("view_unregister", {"key": "mu"})
        assert res.is_error and res.structured_content["status"] == 403
    assert cluster.api("GET", "/admin/api/views/mu")[0] == 200  # still there
    async with mcp_client(cluster, full, MODES[1]) as client:
        out = payload(await client.call_tool("view_unregister", {"key": "mu"}))
        assert out["unregistered"] is True and out["id"] == "query:mu"
        res = await client.call_tool("view_get", {"key": "mu"})
        assert res.is_error and res.structured_content["status"] == 404
        res = await client.call_tool("view_unregister", {"key": "mu"})
        assert res.is_error and res.structured_content["status"] == 404


def _async(fn: Any) -> Any:
    async def go() -> Any:
        return fn()
    return go


# ---------------------------------------------------------------------------- admin API fixes
# found while building the dashboard (plain HTTP: the routes the tools and the page read)

def test_view_rows_follow_writes_in_the_list_and_the_detail(cluster: AdminCluster) -> None:
    from tests.support.admin_cluster import wait_until

    cluster.register_view("m2", "SELECT * FROM post WHERE n >= 7", "tab-m2")

    def rows() -> tuple[Any, Any]:
        _, listed = cluster.api("GET", "/admin/api/views?q=n+%3E%3D+7")
        _, one = cluster.api("GET", "/admin/api/views/m2")
        return (next((v["rows"] for v in listed["views"] if v["key"] == "m2"), None),
                one.get("rows"))

    wait_until(lambda: rows() == (3, 3), 60, "m2 listed with 3 rows")
    cluster.write_post("mw1", 30)  # `_00_query.rowCount` is written once; the list follows
    wait_until(lambda: rows() == (4, 4), 60, "m2 with 4 rows after a write")


def test_the_scheduler_log_stream_resumes_after_last_event_id(cluster: AdminCluster) -> None:
    url = cluster.admin + "/admin/api/logs?source=scheduler&tail=false&backfill=5"
    auth = {"Authorization": f"Bearer {cluster.token}"}

    def ids(text: str) -> list[int]:
        return [int(x[3:].strip()) for x in text.splitlines() if x.startswith("id:")]

    with httpx.Client(timeout=30) as h:
        last = ids(h.get(url, headers=auth).text)
        assert len(last) == 5
        cluster.api("GET", "/admin/api/me")  # nothing logged; sign in twice: two lines
        for _ in range(2):
            assert h.post(cluster.admin + "/admin/api/session",
                          json={"password": "break-glass-test-password"}).status_code == 200
        resumed = h.get(url, headers={**auth, "Last-Event-ID": str(last[-1])}).text
        assert ids(resumed)[0] == last[-1] + 1 and "event: gap" not in resumed
        assert sum("admin sign-in" in x for x in resumed.splitlines()) >= 2
        # beyond the newest line: this process numbered again (a restart) -> a gap first
        ahead = h.get(url, headers={**auth, "Last-Event-ID": str(10**9)}).text
        assert ahead.split("event: gap", 1)[0].count("data:") == 0 and "event: gap" in ahead


async def test_a_tool_argument_stays_one_path_segment_or_is_refused(
        cluster: AdminCluster) -> None:
    """Issue 32: the endpoint decoded a tool's path before routing it, so an id holding `/`
    split into other segments (another route, or another route's action)."""
    async with mcp_client(cluster, cluster.token, MODES[0]) as client:
        for name, args in (("job_get", {"job_id": "job:a/kill"}),
                           ("view_get", {"key": "../backends"}),
                           ("ssp_restart", {"ssp_id": "..", "mode": "restart"})):
            res = await client.call_tool(name, args)
            assert res.is_error is True, (name, res.content)
            assert res.structured_content["status"] == 400, (name, res.structured_content)
            assert "one path segment" in res.content[0].text

