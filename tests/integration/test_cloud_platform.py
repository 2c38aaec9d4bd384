"""The hosted platform's control plane through real processes: a database host, ``svc-cloud``
(gunicorn, its background worker), a local DNS server and local bare git repositories; REST
with httpx and MCP with the SDK's own client over HTTP (both protocol modes)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from surrealdb import RecordID

from cloud.config import DEFAULT_LIMITS
from cloud.ops import OPS
from cloud.scopes import READ_SCOPES, WRITE_SCOPES, expand
from dbclient import Database, DbConfig
from tests.support.cloud_stack import Cloud, digest, running_cloud
from tests.support.dns_server import LocalDns
from tests.support.procs import DbHost

pytestmark = pytest.mark.slow

MODES = ("legacy", "2026-07-28")
SENTINEL = "s3ntinel-Value-that-must-never-leak-7f3a"


@pytest.fixture(scope="module")
def dns_server() -> Iterator[LocalDns]:
    d = LocalDns()
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture(scope="module")
def cloud(host: DbHost, dns_server: LocalDns, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Cloud]:
    with running_cloud(host, tmp_path_factory.mktemp("cloud"),
                       SVC_CLOUD_DNS_RESOLVER=dns_server.address,
                       SVC_CLOUD_REPO_POLL_SECS="0.3", SVC_CLOUD_USAGE_SAMPLE_SECS="1",
                       SVC_CLOUD_PRICES='{"currency": "USD", "api_requests": 0.001}') as c:
        yield c


class People:
    def __init__(self, cloud: Cloud) -> None:
        self.alice, self.alice_s, a = cloud.user("alice")
        self.bob, self.bob_s, b = cloud.user("bob")
        self.carol, self.carol_s, c = cloud.user("carol")
        self.alice_personal = a["tenant"]["slug"]
        self.carol_personal = c["tenant"]["slug"]
        team = cloud.ok("POST", "/v1/tenants", self.alice_s, {"slug": f"team-{id(self)}"})
        self.team = team["slug"]
        cloud.ok("POST", f"/v1/tenants/{self.team}/members", self.alice_s,
                 {"email": self.bob, "role": "member"})
        self.project = f"shop-{id(self) % 100000}"
        cloud.ok("POST", "/v1/projects", self.alice_s,
                 {"slug": self.project, "tenant_id": self.team})


@pytest.fixture(scope="module")
def people(cloud: Cloud) -> People:
    return People(cloud)


@asynccontextmanager
async def mcp_client(cloud: Cloud, token: str, mode: str = "2026-07-28") -> Any:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                              timeout=httpx2.Timeout(60))
    async with http, Client(streamable_http_client(cloud.url + "/v1/mcp", http_client=http),
                            mode=mode) as client:
        yield client


def ok(result: Any) -> dict[str, Any]:
    assert result.is_error is False, result.content[0].text[:500]
    return dict(result.structured_content)


def refused(result: Any) -> dict[str, Any]:
    assert result.is_error is True
    return dict(result.structured_content)


def test_a_team_has_two_members_with_roles(cloud: Cloud, people: People) -> None:
    members = cloud.ok("GET", f"/v1/tenants/{people.team}/members", people.alice_s)
    assert {m["email"]: m["role"] for m in members["items"]} == {people.alice: "owner",
                                                                  people.bob: "member"}
    assert members["tenant"]["slug"] == people.team
    bob_tenants = cloud.ok("GET", "/v1/tenants", people.bob_s)["items"]
    assert {t["slug"]: t["role"] for t in bob_tenants if t["kind"] == "team"} == {
        people.team: "member"}
    # a member works in the team's projects but does not manage its members
    r = cloud.call("POST", f"/v1/tenants/{people.team}/members", people.bob_s,
                   {"email": people.carol})
    assert r.status_code == 403 and r.json()["error"] == "role"
    # a personal tenant has one member
    r = cloud.call("POST", f"/v1/tenants/{people.alice_personal}/members", people.alice_s,
                   {"email": people.bob})
    assert r.status_code == 409 and r.json()["error"] == "personal_tenant"
    # the last owner stays
    r = cloud.call("PATCH", f"/v1/tenants/{people.team}/members/{people.alice}",
                   people.alice_s, {"role": "admin"})
    assert r.status_code == 409 and "owner" in r.json()["message"]


async def test_env_and_vault_through_rest_and_mcp(cloud: Cloud, people: People) -> None:
    p, team = people.project, people.team
    out = cloud.ok("PATCH", f"/v1/projects/{p}/env", people.alice_s,
                   {"tenant_id": team, "vars": {"LOG_LEVEL": "info", "DB_URL": SENTINEL}})
    assert out["changed"] == ["DB_URL", "LOG_LEVEL"] and out["tenant"]["slug"] == team
    full = cloud.mint(people.alice_s, ["mcp:full"])
    async with mcp_client(cloud, full) as mcp:
        # merge: LOG_LEVEL changes, FEATURE is added, DB_URL stays
        res = ok(await mcp.call_tool("env_set", {"tenant_id": team, "project": p, "vars": {
            "LOG_LEVEL": "debug", "FEATURE": "on"}}))
        assert res["changed"] == ["FEATURE", "LOG_LEVEL"] and res["versions"]["LOG_LEVEL"] == 2
        assert res["tenant"]["slug"] == team and res["project"]["slug"] == p
        same = ok(await mcp.call_tool("env_set", {"tenant_id": team, "project": p,
                                                  "vars": {"FEATURE": "on"}}))
        assert same["unchanged"] == ["FEATURE"] and same["changed"] == []
        listed = ok(await mcp.call_tool("env_list", {"tenant_id": team, "project": p}))
        assert [i["key"] for i in listed["items"]] == ["DB_URL", "FEATURE", "LOG_LEVEL"]
        # no secrets:reveal: every value redacted, with a fingerprint
        for item in listed["items"]:
            assert item["value"]["redacted"] is True and "value" not in item["value"]
            assert item["value"]["fingerprint"].startswith("fp_")
        versions = ok(await mcp.call_tool("env_versions", {"tenant_id": team, "project": p,
                                                           "key": "LOG_LEVEL"}))
        assert [v["version"] for v in versions["items"]] == [2, 1]
        ok(await mcp.call_tool("vault_set", {"tenant_id": team, "project": p,
                                             "key": "STRIPE_KEY", "value": SENTINEL}))
        gen = ok(await mcp.call_tool("vault_generate", {"tenant_id": team, "project": p,
                                                        "key": "SESSION_SECRET",
                                                        "length": 48}))
        assert gen["secret"]["generated"] is True and "value" not in gen["secret"]
        vault = ok(await mcp.call_tool("vault_list", {"tenant_id": team, "project": p}))
        assert {i["key"] for i in vault["items"]} == {"SESSION_SECRET", "STRIPE_KEY"}
        assert all(i["value"]["redacted"] for i in vault["items"])
        # replace is explicit: every key not given goes
        rep = ok(await mcp.call_tool("env_set", {"tenant_id": team, "project": p,
                                                 "vars": {"LOG_LEVEL": "warn",
                                                          "DB_URL": SENTINEL},
                                                 "replace": True}))
        assert rep["removed"] == ["FEATURE"] and rep["unchanged"] == ["DB_URL"]
    # the same value has the same fingerprint wherever it is stored in the tenant
    env_fp = {i["key"]: i["value"]["fingerprint"] for i in cloud.ok(
        "GET", f"/v1/projects/{p}/env", full, params={"tenant_id": team})["items"]}
    vault_fp = {i["key"]: i["value"]["fingerprint"] for i in cloud.ok(
        "GET", f"/v1/projects/{p}/vault", full, params={"tenant_id": team})["items"]}
    assert env_fp["DB_URL"] == vault_fp["STRIPE_KEY"]


async def test_secrets_are_shown_only_with_secrets_reveal_and_audited(
        cloud: Cloud, people: People) -> None:
    p, team = people.project, people.team
    cloud.ok("PUT", f"/v1/projects/{p}/vault/REVEAL_ME", people.alice_s,
             {"tenant_id": team, "value": SENTINEL})
    reader = cloud.mint(people.alice_s, ["vault:read"])
    revealer = cloud.mint(people.alice_s, ["vault:read", "secrets:reveal"])
    async with mcp_client(cloud, reader) as mcp:
        hidden = ok(await mcp.call_tool("vault_get", {"tenant_id": team, "project": p,
                                                      "key": "REVEAL_ME"}))
    assert hidden["secret"]["value"]["redacted"] is True
    async with mcp_client(cloud, revealer) as mcp:
        shown = ok(await mcp.call_tool("vault_get", {"tenant_id": team, "project": p,
                                                     "key": "REVEAL_ME"}))
        generated = ok(await mcp.call_tool("vault_list", {"tenant_id": team, "project": p}))
    assert digest(shown["secret"]["value"]["value"]) == digest(SENTINEL)
    assert shown["secret"]["value"]["fingerprint"] == hidden["secret"]["value"]["fingerprint"]
    # a server-generated secret is shown to a revealing token (never by vault_generate)
    gen = [i for i in generated["items"] if i["key"] == "SESSION_SECRET"]
    assert gen and len(gen[0]["value"]["value"]) == 48 and gen[0]["generated"] is True
    audit = cloud.ok("GET", f"/v1/tenants/{team}/audit", people.alice_s,
                     params={"action": "secrets.reveal"})["items"]
    assert any("REVEAL_ME" in a["detail"]["keys"] and a["credential"] == "mcp" for a in audit)
    # a viewer never sees values, whatever its token holds
    cloud.ok("PATCH", f"/v1/tenants/{team}/members/{people.bob}", people.alice_s,
             {"role": "viewer"})
    try:
        bob_reveal = cloud.mint(people.bob_s, ["vault:read", "secrets:reveal"])
        seen = cloud.ok("GET", f"/v1/projects/{p}/vault/REVEAL_ME", bob_reveal,
                        params={"tenant_id": team})
        assert seen["secret"]["value"]["redacted"] is True
        r = cloud.call("PUT", f"/v1/projects/{p}/vault/X", people.bob_s,
                       {"tenant_id": team, "value": "v"})
        assert r.status_code == 403 and r.json()["error"] == "role"
    finally:
        cloud.ok("PATCH", f"/v1/tenants/{team}/members/{people.bob}", people.alice_s,
                 {"role": "member"})


@pytest.mark.parametrize("mode", MODES)
async def test_tools_list_follows_each_scope(cloud: Cloud, people: People, mode: str) -> None:
    cases = [[s] for s in sorted(READ_SCOPES | WRITE_SCOPES)] + [
        ["mcp:read"], ["mcp:full"], ["secrets:reveal"], None]
    for scopes in cases:
        token = cloud.mint(people.carol_s, scopes, label="scope-test")
        granted = expand(scopes or ["mcp:read"])
        async with mcp_client(cloud, token, mode) as mcp:
            listed = {t.name: t for t in (await mcp.list_tools()).tools}
        assert set(listed) == {o.name for o in OPS if o.scope in granted}, scopes
        for o in OPS:
            if o.name in listed:
                ann = listed[o.name].annotations
                assert ann is not None and bool(ann.read_only_hint) is o.read_only
                assert bool(ann.destructive_hint) is (o.kind == "destructive")
        # revoke as we go: the user's live-credential limit stays far away
        tid = token.split("_")[2]
        cloud.ok("DELETE", f"/v1/tokens/{tid}", people.carol_s)


async def test_a_read_token_cannot_write(cloud: Cloud, people: People) -> None:
    read = cloud.mint(people.alice_s, None)  # the default is read-only
    async with mcp_client(cloud, read) as mcp:
        res = refused(await mcp.call_tool("env_set", {"tenant_id": people.team,
                                                      "project": people.project,
                                                      "vars": {"NEW": "x"}}))
        assert res["status"] == 403 and res["error"] == "missing_scope"
        listed = ok(await mcp.call_tool("env_list", {"tenant_id": people.team,
                                                     "project": people.project}))
    assert "NEW" not in {i["key"] for i in listed["items"]}
    r = cloud.call("PATCH", f"/v1/projects/{people.project}/env", read,
                   {"tenant_id": people.team, "vars": {"NEW": "x"}})
    assert r.status_code == 403 and r.json()["error"] == "missing_scope"


async def test_a_foreign_tenant_is_refused_naming_the_usable_ones(cloud: Cloud,
                                                                  people: People) -> None:
    carol = cloud.mint(people.carol_s, ["mcp:full"])
    async with mcp_client(cloud, carol) as mcp:
        res = refused(await mcp.call_tool("projects_list", {"tenant_id": people.team}))
        assert res["status"] == 403 and res["error"] == "tenant_forbidden"
        assert people.carol_personal in res["message"]
        assert [t["slug"] for t in res["tenants"]] == [people.carol_personal]
        # a project of another tenant is an error naming the tenants, never an empty answer
        res = refused(await mcp.call_tool("env_list", {"project": people.project}))
        assert res["status"] == 404 and people.carol_personal in res["message"]
        assert people.team not in res["message"]
    # bob is in the team: he is told where the project is
    bob = cloud.mint(people.bob_s, ["mcp:read"])
    async with mcp_client(cloud, bob) as mcp:
        res = refused(await mcp.call_tool("env_list", {"project": people.project}))
    assert res["error"] == "wrong_tenant" and people.team in res["message"]


async def test_lists_page_with_a_cursor_that_round_trips(cloud: Cloud, people: People) -> None:
    p, team = people.project, people.team
    keys = {f"PAGE_{i:02d}": str(i) for i in range(45)}
    cloud.ok("PATCH", f"/v1/projects/{p}/env", people.alice_s,
             {"tenant_id": team, "environment": "paging", "vars": keys})
    token = cloud.mint(people.alice_s, ["env:read"])
    seen: list[str] = []
    cursor = None
    async with mcp_client(cloud, token) as mcp:
        while True:
            args = {"tenant_id": team, "project": p, "environment": "paging", "limit": 20}
            if cursor:
                args["cursor"] = cursor
            page = ok(await mcp.call_tool("env_list", args))
            assert len(page["items"]) <= 20
            seen += [i["key"] for i in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == sorted(keys)
        # a cursor is only good for the list that made it
        first = ok(await mcp.call_tool("env_list", {"tenant_id": team, "project": p,
                                                    "environment": "paging", "limit": 5}))
        res = refused(await mcp.call_tool("env_list", {"tenant_id": team, "project": p,
                                                       "cursor": first["next_cursor"]}))
        assert res["status"] == 400 and res["error"] == "bad_cursor"
        res = refused(await mcp.call_tool("env_list", {"tenant_id": team, "project": p,
                                                       "environment": "paging",
                                                       "limit": 5, "cursor": "x.y"}))
        assert res["error"] == "bad_cursor"
    # the REST route takes the same cursor
    nxt = cloud.ok("GET", f"/v1/projects/{p}/env", token,
                   params={"tenant_id": team, "environment": "paging", "limit": 5,
                           "cursor": first["next_cursor"]})
    assert [i["key"] for i in nxt["items"]] == sorted(keys)[5:10]


async def test_destructive_tools_need_confirm(cloud: Cloud, people: People) -> None:
    full = cloud.mint(people.alice_s, ["mcp:full"])
    cloud.ok("POST", "/v1/projects", people.alice_s, {"slug": f"doomed-{id(people) % 9999}"})
    slug = f"doomed-{id(people) % 9999}"
    async with mcp_client(cloud, full) as mcp:
        res = refused(await mcp.call_tool("project_delete", {"project": slug}))
        assert res["status"] == 400 and "confirm" in res["message"]
        res = refused(await mcp.call_tool("project_delete", {"project": slug,
                                                             "confirm": "other"}))
        assert res["error"] == "confirm"
        gone = ok(await mcp.call_tool("project_delete", {"project": slug, "confirm": slug}))
        assert gone["project"]["deleted"] is True
        listed = ok(await mcp.call_tool("projects_list", {}))
        assert slug not in {i["slug"] for i in listed["items"]}
        deleted = ok(await mcp.call_tool("projects_list", {"deleted": True}))
        assert slug in {i["slug"] for i in deleted["items"]}
        back = ok(await mcp.call_tool("project_restore", {"project": slug}))
        assert back["project"]["slug"] == slug
        assert slug in {i["slug"] for i in ok(await mcp.call_tool("projects_list",
                                                                  {}))["items"]}


async def test_a_domain_is_verified_against_a_local_dns_answer(
        cloud: Cloud, people: People, dns_server: LocalDns) -> None:
    p, team = people.project, people.team
    host = f"app{id(people) % 9999}.example.test"
    full = cloud.mint(people.alice_s, ["domains:read", "domains:write"])
    async with mcp_client(cloud, full) as mcp:
        added = ok(await mcp.call_tool("domain_add", {"tenant_id": team, "project": p,
                                                      "hostname": host.upper() + "."}))
        d = added["domain"]
        assert d["hostname"] == host and d["state"] == "pending"
        assert d["verification"]["name"] == f"_svc-verify.{host}"
        failed = ok(await mcp.call_tool("domain_verify", {"tenant_id": team, "project": p,
                                                          "hostname": host}))
        assert failed["domain"]["state"] == "failed"
        assert "does not exist" in failed["domain"]["reason"]
        dns_server.records[f"_svc-verify.{host}"] = ["svc-verify=wrong"]
        failed = ok(await mcp.call_tool("domain_verify", {"tenant_id": team, "project": p,
                                                          "hostname": host}))
        assert "none of them" in failed["domain"]["reason"]
        dns_server.records[f"_svc-verify.{host}"] = ["other", d["verification"]["value"]]
        good = ok(await mcp.call_tool("domain_verify", {"tenant_id": team, "project": p,
                                                        "hostname": host}))
        assert good["domain"]["state"] == "verified" and good["domain"]["reason"] is None
        # one project per hostname on the platform
        res = refused(await mcp.call_tool("domain_add", {"tenant_id": team, "project": p,
                                                         "hostname": host}))
        assert res["status"] == 409
        res = refused(await mcp.call_tool("domain_add", {"tenant_id": team, "project": p,
                                                         "hostname": "10.0.0.1"}))
        assert res["status"] == 400
        ok(await mcp.call_tool("domain_remove", {"tenant_id": team, "project": p,
                                                 "hostname": host, "confirm": host}))
    assert dns_server.queries >= 3


def _git(*args: str, cwd: Path | None = None) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.test",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.test",
           "PATH": "/usr/bin:/bin", "HOME": str(cwd or "/tmp")}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def _commit(work: Path, n: int) -> str:
    (work / "project.yml").write_text(f"apps: {{}}\n# {n}\n")
    _git("add", "project.yml", cwd=work)
    _git("commit", "-qm", f"change {n}", cwd=work)
    _git("push", "-q", "origin", "HEAD:main", cwd=work)
    return _git("rev-parse", "HEAD", cwd=work)


async def test_a_repo_link_notices_a_new_commit(cloud: Cloud, people: People,
                                                tmp_path: Path) -> None:
    bare, work = tmp_path / "repo.git", tmp_path / "work"
    _git("init", "-q", "--bare", "-b", "main", str(bare))
    _git("clone", "-q", str(bare), str(work))
    first = _commit(work, 1)
    token = cloud.mint(people.alice_s, ["links:read", "links:write"])
    async with mcp_client(cloud, token) as mcp:
        link = ok(await mcp.call_tool("link_create", {"tenant_id": people.team,
                                                      "project": people.project,
                                                      "url": f"file://{bare}",
                                                      "branch": "main"}))["link"]
        assert link["first_check"]["sha"] == first and link["first_check"]["new_commit"]
        second = _commit(work, 2)
        deadline = time.monotonic() + 30
        while True:  # the worker polls every 0.3 s in this stack
            commits = ok(await mcp.call_tool("link_commits", {
                "tenant_id": people.team, "project": people.project,
                "link_id": link["id"]}))["items"]
            if commits and commits[0]["sha"] == second:
                break
            assert time.monotonic() < deadline, commits
            time.sleep(0.2)
        assert [c["sha"] for c in commits] == [second, first]
        assert all(c["status"] == "new" for c in commits)
        # a remote URL with a password, or a transport that runs commands, is refused
        for url in ("https://user:pw@example.test/r.git", "ext::sh -c touch% /tmp/x",
                    "--upload-pack=touch /tmp/x"):
            res = refused(await mcp.call_tool("link_create", {"tenant_id": people.team,
                                                              "project": people.project,
                                                              "url": url}))
            assert res["status"] == 400, url


async def test_usage_rows_appear(cloud: Cloud, people: People) -> None:
    deadline = time.monotonic() + 30
    while True:
        usage = cloud.ok("GET", "/v1/usage", people.alice_s, params={"tenant_id": people.team})
        totals = {t["metric"]: t for t in usage["totals"]}
        if totals["api_requests"]["measured"] and totals["storage_gb_hours"]["measured"]:
            break
        assert time.monotonic() < deadline, totals
        time.sleep(0.5)
    assert totals["api_requests"]["quantity"] > 0
    assert totals["api_requests"]["currency"] == "USD" and totals["api_requests"]["amount"] > 0
    assert totals["storage_gb_hours"]["quantity"] > 0 and "amount" not in totals[
        "storage_gb_hours"]
    assert totals["egress_bytes"]["measured"] is False
    assert totals["egress_bytes"]["quantity"] is None
    assert usage["items"] and all(i["hour"] for i in usage["items"])
    proj = cloud.ok("GET", "/v1/usage", people.alice_s,
                    params={"tenant_id": people.team, "project": people.project})
    assert proj["project"]["slug"] == people.project


async def test_credentials_are_checked(cloud: Cloud, people: People) -> None:
    url = cloud.url + "/v1/mcp"
    token = cloud.mint(people.alice_s, ["mcp:read"])
    flipped = token[:-1] + ("A" if token[-1] != "A" else "B")
    for bad in (None, "Bearer nope", "Basic x", f"Bearer {people.alice_s}",
                f"Bearer {flipped}", f"Bearer {token}x"):
        r = cloud.http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                            headers={"Authorization": bad} if bad else {})
        assert r.status_code == 401 and r.json()["error"] == "unauthorized", bad
        assert r.headers["www-authenticate"] == "Bearer"
    for method in ("GET", "DELETE"):
        r = cloud.http.request(method, url, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 405 and r.headers["allow"] == "POST"
    # revoked: 401 at once
    tid = token.split("_")[2]
    cloud.ok("DELETE", f"/v1/tokens/{tid}", people.alice_s)
    r = cloud.call("GET", "/v1/tenants", token)
    assert r.status_code == 401 and "revoked" in r.json()["message"]
    # a token cannot mint tokens; the list never shows a secret
    full = cloud.mint(people.alice_s, ["mcp:full"])
    r = cloud.call("POST", "/v1/tokens", full, {"label": "x"})
    assert r.status_code == 403 and r.json()["error"] == "session_required"
    listed = cloud.ok("GET", "/v1/tokens", people.alice_s)["items"]
    assert listed and all("token" not in t and "hash" not in t for t in listed)
    # an API key acts in its one tenant
    key = cloud.mint(people.alice_s, ["projects:read"], kind="api-keys", tenant_id=people.team)
    assert key.startswith("key_live_")
    assert cloud.ok("GET", "/v1/projects", key)["tenant"]["slug"] == people.team
    r = cloud.call("GET", "/v1/projects", key, params={"tenant_id": people.alice_personal})
    assert r.status_code == 403 and r.json()["error"] == "tenant_forbidden"
    r = cloud.http.post(url, json={}, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 401  # the MCP endpoint takes MCP tokens only


def test_sign_in_failures_are_rate_limited(cloud: Cloud, people: People) -> None:
    email, _, _ = cloud.user("ratelimited")
    bodies = set()
    for _ in range(10):
        r = cloud.call("POST", "/v1/auth/login", body={"email": email, "password": "wrong"})
        assert r.status_code == 401
        bodies.add(r.text)
    # the right password no longer helps from this address, and the answer is the same
    r = cloud.call("POST", "/v1/auth/login", body={"email": email,
                                                   "password": "correct horse battery staple"})
    assert r.status_code == 401 and r.text in bodies and len(bodies) == 1


async def test_a_project_moves_to_another_tenant_with_its_values(cloud: Cloud,
                                                                 people: People) -> None:
    slug = f"moving-{id(people) % 9999}"
    cloud.ok("POST", "/v1/projects", people.alice_s, {"slug": slug})
    cloud.ok("PUT", f"/v1/projects/{slug}/vault/MOVED", people.alice_s, {"value": SENTINEL})
    before = cloud.ok("GET", f"/v1/projects/{slug}/vault/MOVED", people.alice_s)
    full = cloud.mint(people.alice_s, ["mcp:full", "secrets:reveal"])
    async with mcp_client(cloud, full) as mcp:
        res = refused(await mcp.call_tool("project_transfer", {"project": slug,
                                                               "to_tenant_id": people.team}))
        assert res["error"] == "invalid" and "confirm" in res["message"]
        moved = ok(await mcp.call_tool("project_transfer", {"project": slug, "confirm": slug,
                                                            "to_tenant_id": people.team}))
        assert moved["tenant"]["slug"] == people.team
        after = ok(await mcp.call_tool("vault_get", {"tenant_id": people.team,
                                                     "project": slug, "key": "MOVED"}))
    assert digest(after["secret"]["value"]["value"]) == digest(SENTINEL)
    # re-encrypted under the new tenant: its keyed fingerprint is the new tenant's
    assert after["secret"]["value"]["fingerprint"] != before["secret"]["value"]["fingerprint"]
    r = cloud.call("GET", f"/v1/projects/{slug}", people.alice_s)
    assert r.status_code == 404 and r.json()["error"] == "wrong_tenant"


def test_no_secret_value_reaches_the_log(cloud: Cloud, people: People) -> None:
    # after the tests above stored, revealed and moved SENTINEL: it is nowhere in the log
    count = cloud.log_text().count(SENTINEL)
    assert count == 0
    assert "Traceback" not in cloud.log_text()


async def _cloud_db(cloud: Cloud, host: DbHost) -> Database:
    db = Database(DbConfig.from_env({
        "SVC_DB_URL": host.ws_url, "SVC_DB_USER": host.user, "SVC_DB_PASS": host.password,
        "SVC_DB_NS": cloud.env["SVC_CLOUD_DB_NS"], "SVC_DB_NAME": "control"}))
    await db.connect()
    return db


async def test_an_expired_token_is_refused(cloud: Cloud, people: People, host: DbHost) -> None:
    token = cloud.mint(people.alice_s, ["mcp:read"])
    assert cloud.call("GET", "/v1/tenants", token).status_code == 200
    db = await _cloud_db(cloud, host)
    try:  # the shortest lifetime is a day: the clock is moved in the row instead
        await db.query("UPDATE $id SET expires_at = time::now() - 1s",
                       {"id": RecordID("token", token.split("_")[2])})
    finally:
        await db.close()
    r = cloud.call("GET", "/v1/tenants", token)
    assert r.status_code == 401 and "expired" in r.json()["message"]


async def test_a_tenant_limit_is_checked_with_the_write(cloud: Cloud, people: People) -> None:
    team = people.team
    in_use = cloud.ok("GET", f"/v1/tenants/{team}/limits", people.alice_s)["in_use"]
    r = cloud.call("PUT", f"/v1/tenants/{team}/limits", people.bob_s,
                   {"limits": {"projects": 0}})
    assert r.status_code == 403 and r.json()["error"] == "role"  # owners set limits
    cloud.ok("PUT", f"/v1/tenants/{team}/limits", people.alice_s,
             {"limits": {"projects": in_use["projects"]}})
    r = cloud.call("POST", "/v1/projects", people.alice_s,
                   {"slug": f"over-{id(people) % 9999}", "tenant_id": team})
    assert r.status_code == 409 and r.json()["error"] == "limit_reached"
    cloud.ok("PUT", f"/v1/tenants/{team}/limits", people.alice_s, {"limits": {"projects": None}})
    assert cloud.ok("GET", f"/v1/tenants/{team}/limits", people.alice_s)["limits"][
        "projects"] == DEFAULT_LIMITS["projects"]


async def test_a_deleted_project_is_purged_after_its_retention(cloud: Cloud, people: People,
                                                               host: DbHost) -> None:
    slug = f"purged-{id(people) % 9999}"
    cloud.ok("POST", "/v1/projects", people.alice_s, {"slug": slug})
    cloud.ok("PATCH", f"/v1/projects/{slug}/env", people.alice_s, {"vars": {"A": "1"}})
    cloud.ok("DELETE", f"/v1/projects/{slug}", people.alice_s, params={"confirm": slug})
    db = await _cloud_db(cloud, host)
    try:  # the retention is days: the row's deadline is moved instead
        await db.query("UPDATE project SET purge_after = time::now() - 1s WHERE slug = $s",
                       {"s": slug})
        deadline = time.monotonic() + 30
        while (await db.query_one("SELECT VALUE id FROM project WHERE slug = $s", {"s": slug})
               or await db.query_one("SELECT VALUE id FROM value WHERE key = 'A' AND "
                                     "type::record('project', project) = NONE")):
            assert time.monotonic() < deadline  # the worker purges on its sample tick (1 s)
            time.sleep(0.3)
    finally:
        await db.close()
    r = cloud.call("POST", f"/v1/projects/{slug}/restore", people.alice_s)
    assert r.status_code == 404
    # the slug is free again
    cloud.ok("POST", "/v1/projects", people.alice_s, {"slug": slug})
