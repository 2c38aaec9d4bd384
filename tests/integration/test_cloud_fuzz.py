"""A fuzz pass over the control plane's REST routes and MCP tools: random arguments (valid
names and values mixed with wrong types, extremes, unknown keys, broken bodies) for every
operation, through a real ``svc-cloud``. Every answer must be one of the spec's statuses with
an ``{error, message}`` body, never a 500 or a protocol error, and no error body may carry the
secret value the fuzzer plants. Seeded: a failure replays."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from cloud.ops import OPS
from tests.support.cloud_stack import Cloud, running_cloud
from tests.support.procs import DbHost

pytestmark = pytest.mark.slow

SEED = 3610
REST_CASES = 500
MCP_CASES = 250
ALLOWED = {200, 201, 204, 400, 401, 403, 404, 405, 409, 413}
#: gunicorn refuses a request line over 4 KiB itself, before the app (plain text)
SERVER_LEVEL = {414}
PLANTED = "fuzz-planted-secret-4b7e"


@pytest.fixture(scope="module")
def cloud(host: DbHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with running_cloud(host, tmp_path_factory.mktemp("cloudfuzz")) as c:
        yield c


class Fuzz:
    def __init__(self, cloud: Cloud) -> None:
        self.rng = random.Random(SEED)
        _, self.session, signed = cloud.user("fuzz")
        self.tenant = signed["tenant"]["slug"]
        self.project = "fuzzed"
        cloud.ok("POST", "/v1/projects", self.session, {"slug": self.project})
        cloud.ok("PATCH", f"/v1/projects/{self.project}/env", self.session,
                 {"vars": {"KNOWN": PLANTED}})
        cloud.ok("PUT", f"/v1/projects/{self.project}/vault/KNOWN", self.session,
                 {"value": PLANTED})
        self.token = cloud.mint(self.session, ["mcp:full"])

    def scalar(self) -> Any:
        r = self.rng
        return r.choice([
            None, True, False, 0, -1, 2**63, 1.5, float("1e308"), "", " ", "x" * r.randint(1, 400),
            "é🙂\u202e", "\x00", "../../etc", "a" * 5000, self.project, self.tenant,
            "KNOWN", "production", "prj_unknown", "usr_x", "mcp:full", "owner",
            "file:///etc", "https://h/r.git", "example.test", "--x", "${X}", "%00", "null",
            "9" * 40, "A-b_c.d"])

    def value(self, depth: int = 0) -> Any:
        r = self.rng.random()
        if depth < 2 and r < 0.12:
            return [self.value(depth + 1) for _ in range(self.rng.randint(0, 3))]
        if depth < 2 and r < 0.24:
            return {self.rng.choice(["KNOWN", "k", "", "1x", "projects"]):
                    self.value(depth + 1) for _ in range(self.rng.randint(0, 3))}
        return self.scalar()

    def args(self, schema: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in schema["properties"]:
            roll = self.rng.random()
            if roll < 0.25:
                continue
            if name == "project" and roll < 0.6:
                out[name] = self.project
            elif name == "tenant_id" and roll < 0.5:
                out[name] = self.tenant
            elif name == "value" and roll < 0.6:  # secret positions carry the planted value
                out[name] = PLANTED
            elif name == "vars" and roll < 0.6:
                out[name] = {self.rng.choice(["KNOWN", "A", "1x", "", "b-c"]): self.rng.choice(
                    [PLANTED, None, 5, [PLANTED]]) for _ in range(self.rng.randint(1, 3))}
            else:
                out[name] = self.value()
        if self.rng.random() < 0.15:
            out[self.rng.choice(["extra", "", "tenant", "__proto__"])] = self.value()
        return out


@pytest.fixture(scope="module")
def fuzz(cloud: Cloud) -> Fuzz:
    return Fuzz(cloud)


def _check(status: int, text: str, what: Any) -> None:
    assert status in ALLOWED | SERVER_LEVEL, (status, what, text[:300])
    if status >= 400 and status not in SERVER_LEVEL:
        body = json.loads(text)
        assert isinstance(body.get("error"), str) and isinstance(body.get("message"), str), text
    leaked = text.count(PLANTED) if status >= 400 else 0
    assert leaked == 0, (status, what)


def _path(f: Fuzz, template: str, args: dict[str, Any]) -> str:
    def fill(m: re.Match[str]) -> str:
        v = args.pop(m.group(1), None)
        if v is None:
            v = f.scalar()
        return quote(str(v) if not isinstance(v, str) else v, safe="") or "x"
    return re.sub(r"{(\w+)}", fill, template)


def test_rest_routes_answer_bad_input_with_the_spec_statuses(cloud: Cloud, fuzz: Fuzz) -> None:
    tokens = [fuzz.session, fuzz.token, None, "mcp_live_" + "a" * 60]
    for i in range(REST_CASES):
        op = fuzz.rng.choice(OPS)
        args = fuzz.args(op.input_schema())
        path = _path(fuzz, op.path, args)
        token = fuzz.rng.choice(tokens)
        method = op.method if fuzz.rng.random() < 0.9 else fuzz.rng.choice(
            ["GET", "POST", "PUT", "PATCH", "DELETE"])
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if method in ("GET", "DELETE"):
            params = {k: json.dumps(v) if not isinstance(v, str) else v
                      for k, v in args.items() if k}
            try:
                r = cloud.http.request(method, cloud.url + path, headers=headers, params=params)
            except Exception as e:
                raise AssertionError((i, op.name, method, path, params)) from e
        else:
            roll = fuzz.rng.random()
            if roll < 0.1:
                content: bytes = fuzz.rng.choice([b"{", b"[]", b"null", b"\xff\xfe", b'"x"',
                                                  b"{" * 5000, b"1e999999"])
            elif roll < 0.12:
                content = b'{"vars": "' + b"x" * (1100 * 1024) + b'"}'
            else:
                content = json.dumps(args).encode()
            r = cloud.http.request(method, cloud.url + path, content=content,
                                   headers={**headers, "Content-Type": "application/json"})
        _check(r.status_code, r.text, (i, op.name, method, path))


def test_auth_routes_answer_bad_input_with_the_spec_statuses(cloud: Cloud, fuzz: Fuzz) -> None:
    for i in range(60):
        path = fuzz.rng.choice(["/v1/auth/signup", "/v1/auth/login", "/v1/tokens",
                                "/v1/api-keys", "/v1/tokens/" + quote(str(fuzz.scalar()),
                                                                      safe="")])
        method = fuzz.rng.choice(["POST", "GET", "DELETE"])
        body = {k: fuzz.value() for k in fuzz.rng.sample(
            ["email", "password", "label", "scopes", "expires_in_days", "tenant_id", "x"],
            fuzz.rng.randint(0, 4))}
        r = cloud.http.request(method, cloud.url + path, json=body,
                               headers={"Authorization": f"Bearer {fuzz.session}"})
        _check(r.status_code, r.text, (i, method, path))


async def test_mcp_tools_answer_bad_input_with_tool_errors(cloud: Cloud, fuzz: Fuzz) -> None:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {fuzz.token}"},
                              timeout=httpx2.Timeout(60))
    async with http, Client(streamable_http_client(cloud.url + "/v1/mcp", http_client=http),
                            mode="2026-07-28") as client:
        for i in range(MCP_CASES):
            roll = fuzz.rng.random()
            name = fuzz.rng.choice(OPS).name if roll < 0.95 else fuzz.rng.choice(
                ["nope", "", "projects list", "x" * 300])
            op = next((o for o in OPS if o.name == name), None)
            args = fuzz.args(op.input_schema()) if op else {"a": fuzz.value()}
            res = await client.call_tool(name, args)
            text = res.content[0].text if res.content else ""
            if res.is_error:
                sc = res.structured_content or {}
                assert sc.get("status") in ALLOWED - {200, 201, 204}, (i, name, text[:300])
                leaked = json.dumps(sc).count(PLANTED)
                assert leaked == 0, (i, name)
    count = cloud.log_text().count(PLANTED)
    assert count == 0


def test_a_refused_request_with_a_large_unread_body_leaves_the_connection_usable(
        cloud: Cloud) -> None:
    # A request refused before its body is read (no token: 401; a body over the limit: 413)
    # must not leave the keep-alive connection in a state where the client's next request
    # meets a close without an answer (seen in the fuzz above under load).
    with httpx.Client(timeout=30) as http:
        big = b'{"vars": "' + b"x" * (1100 * 1024) + b'"}'
        for i in range(20):
            path = "/v1/projects" if i % 2 else "/v1/tenants"
            r = http.post(cloud.url + path, content=big,
                          headers={"Content-Type": "application/json"})
            assert r.status_code in (401, 413), (i, r.status_code, r.text[:200])
            assert http.get(cloud.url + "/v1/health").status_code == 200, i
