"""The gateway<->hub contract helpers in `ipc.messages` and the fake hub's log buffer."""

from __future__ import annotations

from datetime import UTC, datetime

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.testing import LogBuffer
from ipc.messages import (
    ROUTES,
    check_reply,
    error_reply,
    not_ready,
    reply,
    request,
    request_expired,
    route_timeout,
)
from ipc.routebodies import (
    BodyError,
    LogEntry,
    RowChange,
    ViewRegistration,
    normalize_body,
    normalize_view_id,
)
from timetext.durations import parse_duration_ms
from timetext.timestamps import parse_timestamp


@pytest.mark.parametrize(
    ("text", "ms"),
    [("30s", 30_000), ("10m", 600_000), ("1h30m", 5_400_000), ("500ms", 500), ("1d", 86_400_000),
     ("1w", 604_800_000), ("2m30s", 150_000), ("1500us", 1), ("1ns", 1), (" 10m ", 600_000)],
)
def test_parse_duration_ms(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "10", "m", "10 m", "1.5h", "-1s", "10mm", "0s", "11y", "1h-", "ten"])
def test_parse_duration_refuses_non_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration_ms(text)


@given(st.lists(st.tuples(st.integers(1, 1000), st.sampled_from(["ms", "s", "m", "h"])), min_size=1, max_size=4))
def test_duration_parts_add_up(parts: list[tuple[int, str]]) -> None:
    unit_ms = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
    text = "".join(f"{n}{u}" for n, u in parts)
    assert parse_duration_ms(text) == sum(n * unit_ms[u] for n, u in parts)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-01-31T12:00:00Z", datetime(2025, 1, 31, 12, tzinfo=UTC)),
        ("2025-01-31T14:00:00+02:00", datetime(2025, 1, 31, 12, tzinfo=UTC)),
        ("2025-01-31T12:00:00.123456789Z", datetime(2025, 1, 31, 12, 0, 0, 123456, tzinfo=UTC)),
        ("2025-01-31T12:00", datetime(2025, 1, 31, 12, tzinfo=UTC)),
    ],
)
def test_parse_timestamp(text: str, expected: datetime) -> None:
    assert parse_timestamp(text) == expected


@pytest.mark.parametrize("text", ["2025-01-31", "yesterday", "2025-02-30T00:00:00Z", "12:00:00", ""])
def test_parse_timestamp_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_timestamp(text)


@pytest.mark.parametrize(("raw", "norm"), [("abc", "query:abc"), ("query:abc", "query:abc"),
                                           ("_00_query:abc", "query:abc"), ("⟨x y⟩", "query:⟨x y⟩")])
def test_normalize_view_id(raw: str, norm: str) -> None:
    assert normalize_view_id(raw) == norm


def test_typed_bodies_round_trip_what_the_gateway_forwards() -> None:
    ingest = normalize_body("POST /ingest", {"table": "t", "op": "delete", "id": "t:1", "record": {}})
    assert RowChange.from_body(ingest) == RowChange("t", "DELETE", "t:1", {})
    reg = normalize_body("POST /view/register", {"id": "query:q", "surql": "SELECT * FROM t",
                                                 "clientId": "c", "ttl": "1h30m",
                                                 "lastActiveAt": "2025-01-31T12:00:00Z"})
    typed = ViewRegistration.from_body(reg)
    assert typed.ttl_ms == 5_400_000 and typed.params is None and typed.format is None
    assert typed.last_active_at == datetime(2025, 1, 31, 12, tzinfo=UTC)
    assert LogEntry.from_body(normalize_body("POST /log", {"message": "m", "level": "ERROR"})) == LogEntry(
        "m", "error", None)


def test_body_error_names_the_field() -> None:
    with pytest.raises(BodyError) as e:
        normalize_body("POST /ingest", {"table": "t", "op": "CREATE", "id": "t:1"})
    assert e.value.field == "record" and str(e.value) == "record: is required (an object)"


def test_request_and_reply_builders_are_msgpack_safe() -> None:
    msg = request("GET /debug/view/{view_id}", params={"view_id": "query:a"}, query={"x": "1"})
    assert msgpack.unpackb(msgpack.packb(msg), raw=False) == msg
    assert msg["route"] in ROUTES and msg["body"] is None
    assert check_reply(reply(200, {"a": 1})) is None
    assert check_reply(reply(200, None, text="t", headers={"A": "b"})) is None
    assert check_reply(not_ready("x")) is None
    assert error_reply(409, "auth_mismatch", "m") == {"status": 409, "body": {"error": "auth_mismatch", "message": "m"}}
    assert check_reply({"status": True}) is not None
    assert check_reply({"status": 600}) is not None


def test_deadline_reflects_the_route_timeout() -> None:
    msg = request("POST /admin/reload")
    assert route_timeout("POST /admin/reload") > route_timeout("POST /ingest")
    assert not request_expired(msg)
    assert request_expired(msg, now_ms=msg["deadline_ms"] + 1)
    assert not request_expired({"route": "GET /health"})


def test_log_buffer_numbers_lines_and_reports_gaps() -> None:
    buf = LogBuffer(capacity=3)
    assert buf.poll({"backfill": "10"})["body"] == {"lines": [], "cursor": 0, "gap": False}
    for i in range(1, 6):
        buf.append(f"l{i}")
    assert buf.poll({"backfill": "2"})["body"] == {"lines": ["l4", "l5"], "cursor": 5, "gap": False}
    assert buf.poll({"cursor": "4"})["body"] == {"lines": ["l5"], "cursor": 5, "gap": False}
    assert buf.poll({"cursor": "5"})["body"] == {"lines": [], "cursor": 5, "gap": False}
    # lines 2 was dropped (capacity 3 keeps 3..5): a viewer at 1 missed it
    assert buf.poll({"cursor": "1"})["body"] == {"lines": ["l3", "l4", "l5"], "cursor": 5, "gap": True}
    # a cursor from before a restart
    assert buf.poll({"cursor": "99"})["body"] == {"lines": ["l3", "l4", "l5"], "cursor": 5, "gap": True}
