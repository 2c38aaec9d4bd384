"""Malformed bodies of every POST route get a 400 naming what is wrong, never a 500."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.testing import GatewayUnderTest

SECRET = "s3cret-token"
AUTH = {"Authorization": f"Bearer {SECRET}"}

INGEST = {"table": "post", "op": "CREATE", "id": "post:1", "record": {"id": "post:1"}}
REGISTER = {"id": "query:abc", "surql": "SELECT * FROM post", "clientId": "c1", "ttl": "10m"}
UNREGISTER = {"id": "query:abc"}
LOG = {"message": "hello"}


def without(body: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != key}


# (path, raw body bytes or a JSON value, words the message must contain)
MALFORMED: list[tuple[str, Any, list[str]]] = [
    # syntax and top-level shape, for every route that takes a body
    *[(p, b"{not json", ["not valid JSON"]) for p in ("/ingest", "/view/register", "/view/unregister", "/log")],
    *[(p, b"", ["empty"]) for p in ("/ingest", "/view/register", "/view/unregister", "/log")],
    *[(p, [1, 2], ["JSON object", "array"]) for p in ("/ingest", "/view/register", "/view/unregister", "/log")],
    *[(p, "text", ["JSON object", "string"]) for p in ("/ingest", "/view/register", "/view/unregister", "/log")],
    *[(p, None, ["JSON object", "null"]) for p in ("/ingest", "/view/register", "/view/unregister", "/log")],
    *[(p, b"\xff\xfe\xfa", ["UTF-8"]) for p in ("/ingest", "/view/register", "/log")],
    ("/ingest", b'{"table":"t","op":"CREATE","id":"t:1","record":{"x":NaN}}', ["NaN"]),
    ("/ingest", b'{"table":"t","op":"CREATE","id":"t:1","record":{"x":1e999}}', ["out of range"]),
    ("/ingest", b'{"table":"t","op":"CREATE","id":"t:1","record":{"x":123456789012345678901234567890}}',
     ["body.record.x", "64-bit"]),
    ("/ingest", b'{"table":"t","op":"CREATE","id":"t:1","record":{"x":"\\ud800"}}', ["body.record.x", "surrogate"]),
    ("/ingest", b"[" * 3000 + b"]" * 3000, ["nested too deeply"]),
    ("/reset", b"[1]", ["no body"]),
    ("/reset", b"{oops", ["not valid JSON"]),
    ("/admin/reload", b'"x"', ["no body"]),
    # row-change event
    ("/ingest", without(INGEST, "table"), ["table", "required"]),
    ("/ingest", {**INGEST, "table": 5}, ["table", "string", "number"]),
    ("/ingest", {**INGEST, "table": ""}, ["table", "empty"]),
    ("/ingest", {**INGEST, "table": "bad-name"}, ["table", "table name"]),
    ("/ingest", {**INGEST, "table": "1post"}, ["table", "table name"]),
    ("/ingest", without(INGEST, "op"), ["op", "required"]),
    ("/ingest", {**INGEST, "op": "UPSERT"}, ["op", "CREATE, UPDATE, DELETE", "UPSERT"]),
    ("/ingest", {**INGEST, "op": ["CREATE"]}, ["op", "string", "array"]),
    ("/ingest", without(INGEST, "id"), ["id", "required"]),
    ("/ingest", {**INGEST, "id": 1}, ["id", "string"]),
    ("/ingest", {**INGEST, "id": "  "}, ["id", "empty"]),
    ("/ingest", without(INGEST, "record"), ["record", "required"]),
    ("/ingest", {**INGEST, "record": None}, ["record", "object", "null"]),
    ("/ingest", {**INGEST, "record": [1]}, ["record", "object", "array"]),
    ("/ingest", {**INGEST, "record": "x"}, ["record", "object"]),
    # view registration
    ("/view/register", without(REGISTER, "id"), ["id", "required"]),
    ("/view/register", {**REGISTER, "id": "abc"}, ["id", "query:<id>"]),
    ("/view/register", {**REGISTER, "id": "query:"}, ["id", "non-empty"]),
    ("/view/register", {**REGISTER, "id": "query:a\nb"}, ["id", "control"]),
    ("/view/register", {**REGISTER, "id": 7}, ["id", "string"]),
    ("/view/register", without(REGISTER, "surql"), ["surql", "required"]),
    ("/view/register", {**REGISTER, "surql": ""}, ["surql", "empty"]),
    ("/view/register", {**REGISTER, "surql": {"q": 1}}, ["surql", "string", "object"]),
    ("/view/register", without(REGISTER, "clientId"), ["clientId", "required"]),
    ("/view/register", {**REGISTER, "clientId": None}, ["clientId", "string", "null"]),
    ("/view/register", without(REGISTER, "ttl"), ["ttl", "required"]),
    ("/view/register", {**REGISTER, "ttl": 600}, ["ttl", "string", "number"]),
    ("/view/register", {**REGISTER, "ttl": "ten minutes"}, ["ttl", "duration", "30s"]),
    ("/view/register", {**REGISTER, "ttl": "10"}, ["ttl", "duration"]),
    ("/view/register", {**REGISTER, "ttl": "10x"}, ["ttl", "duration"]),
    ("/view/register", {**REGISTER, "ttl": "0s"}, ["ttl", "positive"]),
    ("/view/register", {**REGISTER, "ttl": "-5m"}, ["ttl", "duration"]),
    ("/view/register", {**REGISTER, "ttl": "999y"}, ["ttl", "10 years"]),
    ("/view/register", {**REGISTER, "params": [1]}, ["params", "object", "array"]),
    ("/view/register", {**REGISTER, "params": "x"}, ["params", "object"]),
    ("/view/register", {**REGISTER, "lastActiveAt": "yesterday"}, ["lastActiveAt", "ISO 8601"]),
    ("/view/register", {**REGISTER, "lastActiveAt": "2025-13-45T99:00:00Z"}, ["lastActiveAt", "valid"]),
    ("/view/register", {**REGISTER, "lastActiveAt": 1700000000}, ["lastActiveAt", "string", "number"]),
    ("/view/register", {**REGISTER, "format": 3}, ["format", "string", "number"]),
    # unregister
    ("/view/unregister", {}, ["id", "required"]),
    ("/view/unregister", {"id": None}, ["id", "string", "null"]),
    ("/view/unregister", {"id": ""}, ["id", "empty"]),
    ("/view/unregister", {"id": "query:"}, ["id", "non-empty"]),
    # log
    ("/log", {}, ["message", "required"]),
    ("/log", {"message": 5}, ["message", "string"]),
    ("/log", {"message": "m", "level": "fatal"}, ["level", "error, warn, info, debug, trace", "fatal"]),
    ("/log", {"message": "m", "level": 3}, ["level", "error, warn"]),
    ("/log", {"message": "m", "data": [1]}, ["data", "object", "array"]),
    ("/log", {"message": "m", "data": "x"}, ["data", "object"]),
]


@pytest.mark.parametrize(("path", "body", "words"), MALFORMED, ids=[f"{c[0]}-{i}" for i, c in enumerate(MALFORMED)])
async def test_malformed_body_is_400_with_a_message_naming_the_problem(path: str, body: Any, words: list[str]) -> None:
    async with GatewayUnderTest(SECRET) as gw:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        result = await gw.client.simulate_post(
            path, body=raw, headers={**AUTH, "Content-Type": "application/json"}
        )
        assert result.status_code == 400, result.text
        assert result.json["error"] == "invalid"
        for word in words:
            assert word in result.json["message"], (word, result.json["message"])
        assert gw.hub.requests == []


@pytest.mark.parametrize("path", ["/ingest", "/view/register", "/view/unregister", "/log", "/reset"])
@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"])
async def test_a_non_json_content_type_is_400(path: str, ctype: str) -> None:
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_post(path, body=b"{}", headers={**AUTH, "Content-Type": ctype})
        assert result.status_code == 400
        assert "Content-Type must be application/json" in result.json["message"]


@pytest.mark.parametrize("ctype", [None, "application/json", "application/json; charset=utf-8", "application/vnd.x+json"])
async def test_json_content_types_and_a_missing_one_are_accepted(ctype: str | None) -> None:
    async with GatewayUnderTest(SECRET) as gw:
        headers = dict(AUTH)
        if ctype is not None:
            headers["Content-Type"] = ctype
        result = await gw.client.simulate_post("/ingest", body=json.dumps(INGEST).encode(), headers=headers)
        assert result.status_code == 200


async def test_a_body_over_the_limit_is_413() -> None:
    async with GatewayUnderTest(SECRET, max_body_bytes=1000) as gw:
        big = {**INGEST, "record": {"x": "y" * 2000}}
        result = await gw.client.simulate_post("/ingest", json=big, headers=AUTH)
        assert result.status_code == 413
        assert result.json == {"error": "payload_too_large", "message": "request body exceeds 1000 bytes"}
        assert gw.hub.requests == []


async def test_a_body_at_the_limit_is_accepted() -> None:
    body = json.dumps({**INGEST, "record": {"x": ""}}).encode()
    async with GatewayUnderTest(SECRET, max_body_bytes=len(body)) as gw:
        result = await gw.client.simulate_post("/ingest", body=body, headers=AUTH)
        assert result.status_code == 200


async def test_the_default_limit_is_one_mebibyte() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        big = {**INGEST, "record": {"x": "y" * (1024 * 1024)}}
        result = await gw.client.simulate_post("/ingest", json=big, headers=AUTH)
        assert result.status_code == 413


@pytest.mark.parametrize(
    ("extra", "ok"),
    [
        ({"ttl": "30s"}, True),
        ({"ttl": "1h30m"}, True),
        ({"ttl": "500ms"}, True),
        ({"ttl": "1d2h3m4s"}, True),
        ({"params": None, "format": None}, True),
        ({"params": {"a": 1}, "format": "json"}, True),
        ({"lastActiveAt": "2025-01-31T12:00:00Z"}, True),
        ({"lastActiveAt": "2025-01-31T12:00:00.123456789+02:00"}, True),
        ({"lastActiveAt": None}, True),
        ({"unknownField": [1, 2]}, True),
    ],
)
async def test_valid_registrations_pass(extra: dict[str, Any], ok: bool) -> None:
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_post("/view/register", json={**REGISTER, **extra}, headers=AUTH)
        assert (result.status_code == 200) is ok, result.text


@pytest.mark.parametrize("op", ["CREATE", "UPDATE", "DELETE", "create", "Delete"])
async def test_ops_are_accepted_in_any_case(op: str) -> None:
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_post("/ingest", json={**INGEST, "op": op}, headers=AUTH)
        assert result.status_code == 200
        assert gw.hub.last("POST /ingest")["body"]["op"] == op.upper()


# ---------------------------------------------------------------------------- fuzz

POST_PATHS = ["/ingest", "/view/register", "/view/unregister", "/log", "/reset", "/admin/reload"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
field_names = st.sampled_from(["table", "op", "id", "record", "surql", "clientId", "ttl", "params",
                               "lastActiveAt", "format", "message", "level", "data"])
near_valid = st.dictionaries(field_names, json_values | st.sampled_from(
    ["CREATE", "update", "query:x", "post", "10m", "1h30m", "2025-01-01T00:00:00Z", "info", "abc"]
), max_size=8)
bodies = (
    st.binary(max_size=200)
    | json_values.map(lambda v: json.dumps(v).encode())
    | near_valid.map(lambda v: json.dumps(v).encode())
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(POST_PATHS), body=bodies, auth=st.booleans(),
       ctype=st.sampled_from([None, "application/json", "text/plain"]))
async def test_fuzzed_post_bodies_never_give_a_500(path: str, body: bytes, auth: bool, ctype: str | None) -> None:
    async with GatewayUnderTest(SECRET) as gw:
        headers = dict(AUTH) if auth else {}
        if ctype is not None:
            headers["Content-Type"] = ctype
        result = await gw.client.simulate_post(path, body=body, headers=headers)
        assert result.status_code in {200, 400, 401, 404, 405, 413}, (result.status_code, result.text)
        assert set(result.json) == {"error", "message"} or result.status_code == 200
        if result.status_code != 200:
            assert gw.hub.requests == []


path_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)


@settings(max_examples=100, deadline=None)
@given(
    prefix=st.sampled_from(["/debug/view/", "/debug/catchup-rows/", "/logs", "/health", "/debug/deps", "/"]),
    segment=path_text,
    query=st.dictionaries(st.sampled_from(["tail", "backfill", "x", ""]), path_text, max_size=3),
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
)
async def test_fuzzed_paths_and_queries_never_give_a_500(
    prefix: str, segment: str, query: dict[str, str], method: str
) -> None:
    async with GatewayUnderTest(SECRET, logs_poll_interval=0.01) as gw:
        params = dict(query)
        if prefix == "/logs":
            params["tail"] = "false"  # a tailing stream would never end
        # as a client sends it: percent-encoded, `/` and `:` kept (a `?` would start the query)
        path = prefix + urllib.parse.quote(segment, safe="/:@")
        result = await gw.client.simulate_request(method, path, params=params, headers=AUTH)
        assert result.status_code in {200, 400, 404, 405}, (result.status_code, result.text)
