"""`record_cbor`: the typed copy of the row a database event posts beside its JSON."""

from __future__ import annotations

import base64
import datetime
from decimal import Decimal

import pytest
from surrealdb import RecordID

from dbclient.cbor import encode
from dbclient.eventrecord import typed_record


def _b64(value: object) -> str:
    # as SurrealDB's encoding::base64::encode writes it: no padding
    return base64.b64encode(encode(value)).decode().rstrip("=")


def test_the_typed_copy_keeps_what_json_loses() -> None:
    row = {"id": RecordID("thread", 3), "author": RecordID("user", "a-b"),
           "at": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC), "price": Decimal("1.50"),
           "tags": ["x", RecordID("tag", 1)]}
    body = {"table": "thread", "op": "UPDATE", "id": "thread:3", "record": {"id": "thread:3"},
            "record_cbor": _b64(row)}
    assert typed_record(body) == row


def test_a_body_without_it_is_typed_the_old_way() -> None:
    assert typed_record({"table": "t", "op": "CREATE", "id": "t:1", "record": {}}) is None
    assert typed_record(["not", "a", "map"]) is None


@pytest.mark.parametrize(("raw", "why"), [
    (5, "base64 text"),
    ("***", "not base64"),
    (base64.b64encode(b"\xff\xff").decode(), "CBOR"),
    (_b64([1, 2]), "an object"),
])
def test_a_broken_copy_is_refused_with_the_reason(raw: object, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        typed_record({"record_cbor": raw})
