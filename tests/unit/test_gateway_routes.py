"""The SSP gateway forwards every route to the hub and answers the hub's reply unchanged."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.testing import GatewayUnderTest
from ipc.messages import ROUTES, reply

SECRET = "s3cret-token"
AUTH = {"Authorization": f"Bearer {SECRET}"}

INGEST = {"table": "post", "op": "CREATE", "id": "post:1", "record": {"id": "post:1", "title": "a"}}
REGISTER = {
    "id": "query:abc",
    "surql": "SELECT * FROM post",
    "clientId": "c1",
    "ttl": "10m",
}

# (method, path, json body or None, expected route, expected path params)
CASES: list[tuple[str, str, Any, str, dict[str, str]]] = [
    ("POST", "/ingest", INGEST, "POST /ingest", {}),
    ("POST", "/view/register", REGISTER, "POST /view/register", {}),
    ("POST", "/view/unregister", {"id": "query:abc"}, "POST /view/unregister", {}),
    ("POST", "/reset", None, "POST /reset", {}),
    ("POST", "/admin/reload", None, "POST /admin/reload", {}),
    ("POST", "/log", {"message": "hello"}, "POST /log", {}),
    ("GET", "/health", None, "GET /health", {}),
    ("GET", "/version", None, "GET /version", {}),
    ("GET", "/info", None, "GET /info", {}),
    ("GET", "/info/text", None, "GET /info/text", {}),
    ("GET", "/debug/view/query:abc", None, "GET /debug/view/{view_id}", {"view_id": "query:abc"}),
    ("GET", "/debug/deps", None, "GET /debug/deps", {}),
    ("GET", "/debug/memory", None, "GET /debug/memory", {}),
    ("GET", "/debug/catchup-rows/post", None, "GET /debug/catchup-rows/{table}", {"table": "post"}),
    ("GET", "/debug/heartbeat", None, "GET /debug/heartbeat", {}),
    ("POST", "/job/kill", {"id": "job:1"}, "POST /job/kill", {}),
    ("POST", "/job/retry", {"id": "job:1"}, "POST /job/retry", {}),
    ("POST", "/job/recover", None, "POST /job/recover", {}),
    ("PUT", "/backends", [{"name": "api", "url": "http://127.0.0.1:1/health"}], "PUT /backends", {}),
    ("POST", "/backup/create", {"backup_id": "bk-1"}, "POST /backup/create", {}),
    ("GET", "/backup/status", None, "GET /backup/status", {}),
    ("GET", "/backup/status/bk-1", None, "GET /backup/status/{backup_id}", {"backup_id": "bk-1"}),
    ("POST", "/backup/restore", {"backup_id": "bk-1"}, "POST /backup/restore", {}),
    ("GET", "/backup/restore/status/rs-1", None, "GET /backup/restore/status/{restore_id}",
     {"restore_id": "rs-1"}),
    ("POST", "/impersonate/mint", {"session": "_00_impersonation:s1"}, "POST /impersonate/mint",
     {}),
    ("POST", "/impersonate/users", {"table": "user"}, "POST /impersonate/users", {}),
    ("POST", "/crdt/apply", {"table": "doc"}, "POST /crdt/apply", {}),
]


def test_every_contract_route_except_logs_has_a_case() -> None:
    assert {c[3] for c in CASES} | {"GET /logs"} == set(ROUTES)


@pytest.mark.parametrize(("method", "path", "body", "route", "params"), CASES, ids=[c[3] for c in CASES])
async def test_route_is_forwarded_and_the_hub_reply_is_answered(
    method: str, path: str, body: Any, route: str, params: dict[str, str]
) -> None:
    async with GatewayUnderTest(SECRET) as gw:
        gw.hub.replies[route] = reply(207, {"from": "hub", "route": route})
        result = await gw.client.simulate_request(method, path, json=body, headers=AUTH, params={"x": "1"})
        assert result.status_code == 207
        assert result.json == {"from": "hub", "route": route}
        sent = gw.hub.last(route)
        assert sent["params"] == params
        assert sent["query"] == {"x": "1"}
        assert isinstance(sent["deadline_ms"], int)
        if route in ("POST /reset", "POST /admin/reload"):
            assert sent["body"] is None


async def test_backup_bodies_must_be_objects_and_need_the_bearer() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_post("/backup/restore", json=[1], headers=AUTH)
        assert result.status_code == 400 and result.json["error"] == "invalid"
        result = await gw.client.simulate_post("/backup/create", json={})
        assert result.status_code == 401
        result = await gw.client.simulate_get("/backup/status")
        assert result.status_code == 401
        result = await gw.client.simulate_post("/backup/create", headers=AUTH)
        assert result.status_code == 200  # no body: {} forwarded, the hub picks the id
        assert gw.hub.last("POST /backup/create")["body"] == {}


async def test_ingest_body_is_forwarded_with_op_upper_cased() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_post("/ingest", json={**INGEST, "op": "update"}, headers=AUTH)
        assert result.status_code == 200
        assert gw.hub.last("POST /ingest")["body"] == {**INGEST, "op": "UPDATE"}


async def test_register_body_is_forwarded_with_optional_fields_present() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        await gw.client.simulate_post("/view/register", json=REGISTER, headers=AUTH)
        assert gw.hub.last("POST /view/register")["body"] == {
            **REGISTER, "params": None, "format": None, "lastActiveAt": None
        }


@pytest.mark.parametrize("sent", ["abc", "_00_query:abc", "query:abc"])
async def test_unregister_normalises_the_bare_id_the_database_event_sends(sent: str) -> None:
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_post("/view/unregister", json={"id": sent}, headers=AUTH)
        assert result.status_code == 200
        assert gw.hub.last("POST /view/unregister")["body"] == {"id": "query:abc"}


async def test_log_body_gets_the_default_level() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        await gw.client.simulate_post("/log", json={"message": "m"}, headers=AUTH)
        assert gw.hub.last("POST /log")["body"] == {"message": "m", "level": "info", "data": None}


async def test_reset_accepts_an_empty_json_object_and_forwards_no_body() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_post("/reset", json={}, headers=AUTH)
        assert result.status_code == 200
        assert gw.hub.last("POST /reset")["body"] is None


async def test_hub_text_reply_is_sent_as_text_plain() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        gw.hub.replies["GET /info/text"] = reply(200, None, text="ssp  ready\nviews 3\n")
        result = await gw.client.simulate_get("/info/text")
        assert result.status_code == 200
        assert result.headers["content-type"].startswith("text/plain")
        assert result.text == "ssp  ready\nviews 3\n"


async def test_hub_error_status_and_body_reach_the_client_unchanged() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        verdict = {"error": "not_allowlisted", "message": "query shape not allowed"}
        gw.hub.replies["POST /view/register"] = reply(403, verdict)
        result = await gw.client.simulate_post("/view/register", json=REGISTER, headers=AUTH)
        assert (result.status_code, result.json) == (403, verdict)


async def test_hub_reply_headers_are_passed_on() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        gw.hub.replies["POST /ingest"] = reply(
            503, {"error": "SSP_NOT_READY", "message": "slots full"}, headers={"Retry-After": "1"}
        )
        result = await gw.client.simulate_post("/ingest", json=INGEST, headers=AUTH)
        assert result.status_code == 503
        assert result.headers["retry-after"] == "1"


async def test_hub_reply_with_no_body_is_an_empty_response() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        gw.hub.replies["POST /view/unregister"] = reply(200, None)
        result = await gw.client.simulate_post("/view/unregister", json={"id": "query:a"}, headers=AUTH)
        assert result.status_code == 200 and result.content == b""


@pytest.mark.parametrize(
    "bad_reply",
    [
        "not a map",
        {"status": "200", "body": {}},
        {"status": 42, "body": {}},
        {"status": 200, "body": {}, "text": 5},
        {"status": 200, "body": b"bytes are not JSON"},
        {"status": 200, "body": {}, "headers": {"X": 1}},
    ],
)
async def test_an_unusable_hub_reply_is_a_generic_500(bad_reply: Any) -> None:
    async with GatewayUnderTest(SECRET) as gw:

        async def canned(msg: dict[str, Any]) -> Any:
            return bad_reply

        gw.hub.replies["GET /debug/deps"] = canned
        result = await gw.client.simulate_get("/debug/deps", headers=AUTH)
        assert result.status_code == 500
        assert result.json == {"error": "internal", "message": "internal error in the gateway (logged)"}


async def test_a_hub_that_does_not_answer_gives_503_ssp_not_ready() -> None:
    async with GatewayUnderTest(SECRET, hub_timeout_secs=0.2) as gw:

        async def never(msg: dict[str, Any]) -> dict[str, Any]:
            await asyncio.sleep(30)
            return reply(200, {})

        gw.hub.replies["POST /ingest"] = never
        result = await gw.client.simulate_post("/ingest", json=INGEST, headers=AUTH)
        assert result.status_code == 503
        assert result.json["error"] == "SSP_NOT_READY"
        assert "did not answer" in result.json["message"]


async def test_health_without_a_hub_says_bootstrapping() -> None:
    async with GatewayUnderTest(SECRET, hub_timeout_secs=0.2) as gw:

        async def never(msg: dict[str, Any]) -> dict[str, Any]:
            await asyncio.sleep(30)
            return reply(200, {})

        gw.hub.replies["GET /health"] = never
        result = await gw.client.simulate_get("/health")
        assert result.status_code == 503
        assert result.json["status"] == "bootstrapping"
        assert result.json["error"] == "SSP_NOT_READY"


async def test_deadline_lets_the_hub_tell_a_request_it_can_no_longer_answer() -> None:
    from ipc.messages import request_expired

    async with GatewayUnderTest(SECRET, hub_timeout_secs=0.2) as gw:
        seen: list[bool] = []

        async def late(msg: dict[str, Any]) -> dict[str, Any]:
            await asyncio.sleep(0.4)
            seen.append(request_expired(msg))
            return reply(200, {})

        gw.hub.replies["POST /ingest"] = late
        result = await gw.client.simulate_post("/ingest", json=INGEST, headers=AUTH)
        assert result.status_code == 503
        await asyncio.sleep(0.4)
        assert seen == [True]
        assert not request_expired(gw.hub.requests[-1], now_ms=gw.hub.requests[-1]["deadline_ms"] - 1)


async def test_unknown_path_is_404_and_wrong_method_is_405() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        missing = await gw.client.simulate_get("/nope", headers=AUTH)
        assert missing.status_code == 404 and missing.json["error"] == "not_found"
        wrong = await gw.client.simulate_get("/ingest", headers=AUTH)
        assert wrong.status_code == 405 and wrong.json["error"] == "method_not_allowed"
        assert "POST" in wrong.headers["allow"]
        public_wrong = await gw.client.simulate_post("/health")
        assert public_wrong.status_code == 405
        assert gw.hub.requests == []


async def test_trailing_slash_reaches_the_same_route() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_get("/debug/deps/", headers=AUTH)
        assert result.status_code == 200
        gw.hub.last("GET /debug/deps")


async def test_catchup_rows_refuses_a_table_name_that_is_not_an_identifier() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_get("/debug/catchup-rows/bad-name", headers=AUTH)
        assert result.status_code == 400
        assert "table" in result.json["message"]
        assert gw.hub.requests == []


async def test_repeated_query_keys_keep_the_last_value() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        await gw.client.simulate_get("/debug/deps", headers=AUTH, query_string="a=1&a=2&b=x")
        assert gw.hub.last("GET /debug/deps")["query"] == {"a": "2", "b": "x"}


async def test_an_unexpected_gateway_failure_is_a_logged_generic_500(caplog: pytest.LogCaptureFixture) -> None:
    async with GatewayUnderTest(SECRET) as gw:

        async def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("boom with details")

        gw.app.hub.call = broken  # type: ignore[method-assign]
        result = await gw.client.simulate_get("/debug/deps", headers=AUTH)
        assert result.status_code == 500
        assert "boom" not in result.text
        assert any("boom with details" in r.getMessage() or (r.exc_info and "boom" in str(r.exc_info[1]))
                   for r in caplog.records)


async def test_gateway_errors_are_copied_to_the_hub_log_when_enabled() -> None:
    async with GatewayUnderTest(SECRET, copy_logs_to_hub=True) as gw:
        gw.hub.replies["GET /debug/deps"] = {"status": "bad"}
        result = await gw.client.simulate_get("/debug/deps", headers=AUTH)
        assert result.status_code == 500
        while not any(m["route"] == "POST /log" for m in gw.hub.requests):
            await asyncio.sleep(0.01)  # the copy is sent in the background
        copy = gw.hub.last("POST /log")["body"]
        assert copy["level"] == "error"
        assert "unusable hub reply" in copy["message"]
        assert copy["data"]["source"] == "gateway"
    # the handler is gone with the app: a later app does not copy to this hub
    import logging

    from gateway.hublog import HubLogHandler

    assert not any(isinstance(h, HubLogHandler) for h in logging.getLogger("gateway").handlers)
