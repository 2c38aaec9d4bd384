"""`POST /ingest` in the typed encoding of `ipc.typed` (the scheduler's deliveries): chosen by
Content-Type, shape-checked like JSON (400 naming the field, nothing forwarded), and forwarded
to the hub as the bytes that came; other routes and unknown types still get 400."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from surrealdb import RecordID

from engine import wire
from engine.values import pack_wire
from gateway.testing import GatewayUnderTest
from ipc import typed
from ipc.routebodies import INGEST_BATCH_MAX

SECRET = "s3cret-token"
TYPED = {"Authorization": f"Bearer {SECRET}", "Content-Type": typed.CONTENT_TYPE}
RECORD = {"id": RecordID("comment", "c1"), "thread": RecordID("thread", "t1"),
          "created": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "n": 1}
EVENT = {"table": "comment", "op": "CREATE", "id": "comment:c1", "record": RECORD}


async def test_a_typed_event_reaches_the_hub_as_the_bytes_sent() -> None:
    body = wire.encode_event(EVENT, 7)
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_post("/ingest", body=body, headers=TYPED)
        assert result.status_code == 200, result.text
        sent = gw.hub.last("POST /ingest")["body"]
        assert sent == body
        assert typed.decode(sent, wire.ext_hook)["record"] == RECORD  # the hub gets the values back


async def test_a_typed_batch_reaches_the_hub_as_the_bytes_sent() -> None:
    events = [wire.encode_event({**EVENT, "id": f"comment:c{i}",
                                  "record": {**RECORD, "id": RecordID("comment", f"c{i}")}}, i)
              for i in range(1, 4)]
    body = typed.encode_batch(events)
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_post("/ingest", body=body, headers=TYPED)
        assert result.status_code == 200, result.text
        decoded = typed.decode(gw.hub.last("POST /ingest")["body"], wire.ext_hook)
        assert [e["seq"] for e in decoded] == [1, 2, 3]
        assert decoded[2]["record"]["thread"] == RecordID("thread", "t1")


async def test_a_json_body_is_still_parsed_and_forwarded_as_values() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        body = {"table": "comment", "op": "create", "id": "comment:c1",
                "record": {"thread": "thread:t1"}}
        result = await gw.client.simulate_post(
            "/ingest", body=json.dumps(body).encode(),
            headers={"Authorization": TYPED["Authorization"], "Content-Type": "application/json"})
        assert result.status_code == 200
        assert gw.hub.last("POST /ingest")["body"] == {**body, "op": "CREATE"}


def _event(**change: Any) -> dict[str, Any]:
    out = {**EVENT, **change}
    return {k: v for k, v in out.items() if v is not _DROP}


_DROP = object()

# (typed body, words the 400 message must contain)
MALFORMED: list[tuple[bytes, list[str]]] = [
    (b"\xc1", ["not valid", typed.CONTENT_TYPE, "not MessagePack"]),
    (b"\x91" * 3000 + b"\x01", ["not valid", "nested too deeply"]),
    (b"\x92\x01", ["not valid", "incomplete"]),
    (wire.encode_event(EVENT) + b"\x00", ["not valid", "extra data"]),
    (msgpack.packb({1: 2}), ["not valid", "map key"]),
    (msgpack.packb("text"), ["object", "string"]),
    (msgpack.packb([]), ["at least one event"]),
    (msgpack.packb([1] * (INGEST_BATCH_MAX + 1)), ["at most", str(INGEST_BATCH_MAX)]),
    (pack_wire(_event(op="UPSERT")), ["op", "CREATE, UPDATE, DELETE", "UPSERT"]),
    (msgpack.packb({"table": "comment", "op": "CREATE", "id": "comment:c1"}),
     ["record", "required"]),
    (msgpack.packb({"table": "bad-name", "op": "CREATE", "id": "x:1", "record": {}}),
     ["table", "table name"]),
    (pack_wire({"table": "comment", "op": "CREATE", "id": RecordID("comment", "c1"),
             "record": {}}), ["id", "string", "a typed value"]),
    (msgpack.packb({"table": "comment", "op": "CREATE", "id": "comment:c1", "record": [1]}),
     ["record", "object", "array"]),
    (msgpack.packb([{"table": "comment", "op": "CREATE", "id": "comment:c1", "record": {}},
                    {"table": "comment", "op": "MERGE", "id": "comment:c2", "record": {}}]),
     ["[1].op", "MERGE"]),
    (msgpack.packb([{"table": "comment", "op": "CREATE", "id": "comment:c1", "record": {},
                     "seq": "7"}]), ["[0].seq", "non-negative integer"]),
]


@pytest.mark.parametrize(("body", "words"), MALFORMED, ids=[str(i) for i in range(len(MALFORMED))])
async def test_a_malformed_typed_body_is_400_naming_the_problem(body: bytes,
                                                                words: list[str]) -> None:
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_post("/ingest", body=body, headers=TYPED)
        assert result.status_code == 400, result.text
        assert result.json["error"] == "invalid"
        for word in words:
            assert word in result.json["message"], (word, result.json["message"])
        assert gw.hub.requests == []


async def test_an_empty_typed_body_is_400() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_post("/ingest", body=b"", headers=TYPED)
        assert result.status_code == 400 and "empty" in result.json["message"]
        assert gw.hub.requests == []


@pytest.mark.parametrize("path", ["/view/register", "/view/unregister", "/log", "/reset"])
async def test_the_typed_content_type_is_for_ingest_only(path: str) -> None:
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_post(path, body=msgpack.packb({"id": "query:a"}),
                                               headers=TYPED)
        assert result.status_code == 400
        assert result.json["message"].startswith("Content-Type must be application/json,")
        assert gw.hub.requests == []


async def test_ingest_names_both_accepted_content_types() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_post(
            "/ingest", body=msgpack.packb(EVENT | {"record": {}}),
            headers={**TYPED, "Content-Type": "application/msgpack"})
        assert result.status_code == 400
        assert f"application/json or {typed.CONTENT_TYPE}" in result.json["message"]


async def test_a_typed_content_type_with_parameters_is_accepted() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_post(
            "/ingest", body=wire.encode_event(EVENT),
            headers={**TYPED, "Content-Type": typed.CONTENT_TYPE.upper() + "; v=1"})
        assert result.status_code == 200, result.text


async def test_typed_bodies_keep_the_size_limits() -> None:
    big = {**RECORD, "text": "y" * 2000}
    async with GatewayUnderTest(SECRET, max_body_bytes=1000) as gw:
        one = wire.encode_event({**EVENT, "record": big})
        result = await gw.client.simulate_post("/ingest", body=one, headers=TYPED)
        assert result.status_code == 413  # a single event keeps the route's limit
        batch = typed.encode_batch([one])
        result = await gw.client.simulate_post("/ingest", body=batch, headers=TYPED)
        assert result.status_code == 200, result.text  # a batch may be larger
        assert len(gw.hub.requests) == 1


ext_values = st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=12))
typed_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text()
    | st.binary(max_size=8) | ext_values,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
near_events = st.fixed_dictionaries(
    {}, optional={"table": st.sampled_from(["comment", "x-y"]) | typed_values,
                  "op": st.sampled_from(["CREATE", "delete", "MERGE"]) | typed_values,
                  "id": st.sampled_from(["comment:c1", ""]) | typed_values,
                  "record": st.dictionaries(st.text(max_size=4), typed_values, max_size=3)
                  | typed_values,
                  "seq": st.integers(-2, 5) | typed_values})
bodies = (st.binary(max_size=120) | typed_values.map(msgpack.packb)
          | near_events.map(msgpack.packb)
          | st.lists(near_events, min_size=1, max_size=3).map(msgpack.packb))


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies)
async def test_fuzzed_typed_bodies_never_give_a_500(body: bytes) -> None:
    async with GatewayUnderTest(SECRET) as gw:
        result = await gw.client.simulate_post("/ingest", body=body, headers=TYPED)
        assert result.status_code in {200, 400, 413}, (result.status_code, result.text)
        if result.status_code != 200:
            assert set(result.json) == {"error", "message"} and result.json["message"]
            assert gw.hub.requests == []
        else:
            assert gw.hub.last("POST /ingest")["body"] == body
