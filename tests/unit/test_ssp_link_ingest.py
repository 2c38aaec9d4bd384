"""Batched `POST /ingest` (the scheduler's deliveries): a JSON array of events, each validated
like a single event plus an optional integer `seq`; errors name the index and the field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.testing import GatewayUnderTest
from ipc.routebodies import INGEST_BATCH_MAX, BodyError, normalize_body

SECRET = "batch-test-token"
AUTH = {"Authorization": f"Bearer {SECRET}"}


def ev(i: int, **extra: Any) -> dict[str, Any]:
    return {"table": "post", "op": "create", "id": f"post:{i}", "record": {"id": f"post:{i}"},
            **extra}


def test_an_array_is_normalised_event_by_event_and_keeps_seq() -> None:
    out = normalize_body("POST /ingest", [ev(1, seq=7), ev(2)])
    assert [e["op"] for e in out] == ["CREATE", "CREATE"]
    assert out[0]["seq"] == 7 and "seq" not in out[1]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ([], ["at least one event"]),
        ([ev(0)] * (INGEST_BATCH_MAX + 1), [str(INGEST_BATCH_MAX), "at most"]),
        ([ev(0), 5], ["[1]", "JSON object", "number"]),
        ([ev(0), ev(1, op="UPSERT")], ["[1].op", "CREATE, UPDATE, DELETE"]),
        ([ev(0), ev(1), {**ev(2), "record": []}], ["[2].record", "object"]),
        ([ev(0, seq="3")], ["[0].seq", "integer", "string"]),
        ([ev(0, seq=-1)], ["[0].seq", "non-negative"]),
        ([ev(0, seq=True)], ["[0].seq", "integer"]),
    ],
)
def test_a_bad_batch_names_the_index_and_field(body: list[Any], words: list[str]) -> None:
    with pytest.raises(BodyError) as e:
        normalize_body("POST /ingest", body)
    for w in words:
        assert w in str(e.value)


async def test_the_gateway_forwards_a_batch_as_a_list() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        r = await gw.client.simulate_post("/ingest", json=[ev(1, seq=1), ev(2, seq=2)],
                                          headers=AUTH)
        assert r.status_code == 200
        body = gw.hub.last("POST /ingest")["body"]
        assert isinstance(body, list) and [e["seq"] for e in body] == [1, 2]


async def test_the_gateway_answers_400_naming_the_index() -> None:
    async with GatewayUnderTest(SECRET) as gw:
        r = await gw.client.simulate_post("/ingest", json=[ev(1), {"table": "post"}],
                                          headers=AUTH)
        assert r.status_code == 400
        assert r.json["error"] == "invalid"
        assert r.json["message"].startswith("[1].op")
        assert gw.hub.requests == []


async def test_a_batch_may_exceed_one_mebibyte_but_a_single_event_may_not() -> None:
    filler = "y" * 4000
    batch = [ev(i, seq=i + 1) | {"record": {"id": f"post:{i}", "x": filler}} for i in range(400)]
    assert len(json.dumps(batch)) > 1024 * 1024
    async with GatewayUnderTest(SECRET) as gw:
        r = await gw.client.simulate_post("/ingest", json=batch, headers=AUTH)
        assert r.status_code == 200
        single = ev(1) | {"record": {"id": "post:1", "x": "y" * (1024 * 1024)}}
        r = await gw.client.simulate_post("/ingest", json=single, headers=AUTH)
        assert r.status_code == 413
