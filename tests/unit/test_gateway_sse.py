"""`GET /logs`: the hub's log lines as server-sent events, with tail, backfill, gaps, resume."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.sse import frame, frame_batch
from gateway.testing import GatewayUnderTest
from ipc.messages import logs_reply, reply

SECRET = "s3cret-token"
AUTH = {"Authorization": f"Bearer {SECRET}"}
FAST = {"logs_poll_interval": 0.01, "logs_keepalive": 0.05}


def parse_sse(text: str) -> list[dict[str, Any]]:
    """SSE text -> list of messages {event, id, data, comment, retry} (fields present only)."""
    out: list[dict[str, Any]] = []
    for block in text.split("\n\n"):
        if not block:
            continue
        msg: dict[str, Any] = {}
        for line in block.split("\n"):
            if line.startswith(":"):
                msg["comment"] = line[1:].strip()
                continue
            name, _, value = line.partition(": ")
            if name == "data":
                msg["data"] = msg["data"] + "\n" + value if "data" in msg else value
            else:
                msg[name] = value
        out.append(msg)
    return out


def lines_of(msgs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["id"], m["data"]) for m in msgs if "id" in m]


def test_frame_splits_multi_line_data_into_data_fields() -> None:
    assert frame("a\nb\r\nc", event="x", event_id="7") == b"event: x\nid: 7\ndata: a\ndata: b\ndata: c\n\n"


def test_frame_batch_numbers_lines_from_the_cursor_and_serialises_objects() -> None:
    raw = frame_batch({"lines": ["one", {"k": 1}], "cursor": 9, "gap": True}).decode()
    msgs = parse_sse(raw)
    assert msgs[0]["event"] == "gap"
    assert lines_of(msgs) == [("8", "one"), ("9", '{"k": 1}')]


async def test_tail_false_sends_the_backfill_then_closes() -> None:
    async with GatewayUnderTest(SECRET, **FAST) as gw:
        for i in range(5):
            gw.hub.log.append(f"line {i}")
        result = await gw.client.simulate_get("/logs", params={"tail": "false", "backfill": "3"}, headers=AUTH)
        assert result.status_code == 200
        assert result.headers["content-type"].startswith("text/event-stream")
        msgs = parse_sse(result.text)
        assert msgs[0] == {"retry": "2000"}
        assert lines_of(msgs) == [("3", "line 2"), ("4", "line 3"), ("5", "line 4")]
        assert gw.hub.last("GET /logs")["query"] == {"backfill": "3"}


async def test_backfill_zero_sends_no_lines() -> None:
    async with GatewayUnderTest(SECRET, **FAST) as gw:
        gw.hub.log.append("old")
        result = await gw.client.simulate_get("/logs", params={"tail": "0", "backfill": "0"}, headers=AUTH)
        assert lines_of(parse_sse(result.text)) == []


async def test_last_event_id_resumes_after_that_line() -> None:
    async with GatewayUnderTest(SECRET, **FAST) as gw:
        for i in range(5):
            gw.hub.log.append(f"line {i}")
        result = await gw.client.simulate_get(
            "/logs", params={"tail": "false"}, headers={**AUTH, "Last-Event-ID": "3"}
        )
        assert lines_of(parse_sse(result.text)) == [("4", "line 3"), ("5", "line 4")]
        assert gw.hub.last("GET /logs")["query"] == {"cursor": "3"}


async def test_tail_streams_new_lines_as_they_are_logged() -> None:
    async with GatewayUnderTest(SECRET, **FAST) as gw:
        gw.hub.log.append("before")
        async with gw.client.simulate_get_stream("/logs", params={"backfill": "1"}, headers=AUTH) as sr:
            assert sr.status_code == 200
            posted = await gw.client.simulate_post(
                "/log", json={"message": "first\nsecond", "level": "WARN"}, headers=AUTH
            )
            assert posted.status_code == 200
            text = ""
            while "warn first" not in text:
                text += (await sr.stream.read()).decode()
        msgs = parse_sse(text)
        assert lines_of(msgs) == [("1", "before"), ("2", "warn first\nsecond")]


async def test_idle_stream_sends_keepalive_comments() -> None:
    async with GatewayUnderTest(SECRET, **FAST) as gw:
        async with gw.client.simulate_get_stream("/logs", headers=AUTH) as sr:
            text = ""
            while ": keepalive" not in text:
                text += (await sr.stream.read()).decode()
        assert any(m.get("comment") == "keepalive" for m in parse_sse(text))


async def test_a_viewer_that_fell_behind_sees_an_explicit_gap() -> None:
    async with GatewayUnderTest(SECRET, **FAST) as gw:
        calls = 0

        async def logs(msg: dict[str, Any]) -> dict[str, Any]:
            nonlocal calls
            calls += 1
            if calls == 1:
                return logs_reply(["a"], 1, False)
            if calls == 2:
                return logs_reply(["x"], 50, True)
            return logs_reply([], 50, False)

        gw.hub.replies["GET /logs"] = logs
        async with gw.client.simulate_get_stream("/logs", headers=AUTH) as sr:
            text = ""
            while "data: x" not in text:
                text += (await sr.stream.read()).decode()
        msgs = parse_sse(text)
        assert [m.get("event") for m in msgs if "event" in m] == ["gap"]
        assert lines_of(msgs) == [("1", "a"), ("50", "x")]
        assert gw.hub.requests[1]["query"] == {"cursor": "1"}


async def test_disconnecting_viewer_stops_the_polling() -> None:
    async with GatewayUnderTest(SECRET, **FAST) as gw:
        async with gw.client.simulate_get_stream("/logs", headers=AUTH) as sr:
            text = ""
            while ": keepalive" not in text:
                text += (await sr.stream.read()).decode()
        # Leaving the block disconnects and waits for the request task to finish.
        polls = len([m for m in gw.hub.requests if m["route"] == "GET /logs"])
        await asyncio.sleep(0.2)
        assert len([m for m in gw.hub.requests if m["route"] == "GET /logs"]) == polls


async def test_hub_that_stops_answering_ends_the_stream_with_an_error_event() -> None:
    async with GatewayUnderTest(SECRET, hub_timeout_secs=0.1, **FAST) as gw:
        calls = 0

        async def logs(msg: dict[str, Any]) -> dict[str, Any]:
            nonlocal calls
            calls += 1
            if calls > 1:
                await asyncio.sleep(5)
            return logs_reply(["a"], 1, False)

        gw.hub.replies["GET /logs"] = logs
        result = await gw.client.simulate_get("/logs", headers=AUTH)
        msgs = parse_sse(result.text)
        assert msgs[-1]["event"] == "error"
        assert "SSP_NOT_READY" in msgs[-1]["data"]


async def test_hub_not_answering_the_first_poll_is_a_503_json() -> None:
    async with GatewayUnderTest(SECRET, hub_timeout_secs=0.1, **FAST) as gw:

        async def never(msg: dict[str, Any]) -> dict[str, Any]:
            await asyncio.sleep(5)
            return logs_reply([], 0, False)

        gw.hub.replies["GET /logs"] = never
        result = await gw.client.simulate_get("/logs", headers=AUTH)
        assert result.status_code == 503
        assert result.json["error"] == "SSP_NOT_READY"


async def test_hub_error_on_the_first_poll_is_answered_as_is() -> None:
    async with GatewayUnderTest(SECRET, **FAST) as gw:
        gw.hub.replies["GET /logs"] = reply(503, {"error": "SSP_NOT_READY", "message": "starting"})
        result = await gw.client.simulate_get("/logs", headers=AUTH)
        assert (result.status_code, result.json["message"]) == (503, "starting")


async def test_a_malformed_logs_reply_is_a_500() -> None:
    async with GatewayUnderTest(SECRET, **FAST) as gw:
        gw.hub.replies["GET /logs"] = reply(200, {"lines": "nope", "cursor": 1})
        result = await gw.client.simulate_get("/logs", headers=AUTH)
        assert result.status_code == 500


@pytest.mark.parametrize(
    ("query", "word"),
    [({"tail": "maybe"}, "tail"), ({"backfill": "-1"}, "backfill"), ({"backfill": "x"}, "backfill"),
     ({"backfill": "10001"}, "backfill")],
)
async def test_bad_query_values_are_400(query: dict[str, str], word: str) -> None:
    async with GatewayUnderTest(SECRET, **FAST) as gw:
        result = await gw.client.simulate_get("/logs", params=query, headers=AUTH)
        assert result.status_code == 400
        assert word in result.json["message"]
        assert gw.hub.requests == []
