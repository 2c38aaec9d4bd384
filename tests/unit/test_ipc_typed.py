"""The typed encoding between our processes (`ipc.typed`): every SurrealDB value of a row comes
back as it went (type and value), and bad input is a ValueError naming the problem."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from surrealdb import Duration, RecordID

from engine import wire
from engine.values import NONE, canonical_bytes
from ipc import typed

keys = st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8)
scalars = (
    st.none() | st.just(NONE) | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False) | st.text(max_size=10) | st.binary(max_size=8)
    | st.builds(RecordID, st.sampled_from(["user", "thread", "a-b"]), keys)
    | st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
                   timezones=st.just(UTC))
    | st.decimals(allow_nan=False, allow_infinity=False, places=4)
    | st.builds(Duration, st.integers(0, 2**63 - 1))
    | st.uuids()
)
values = st.recursive(scalars, lambda c: st.lists(c, max_size=3)
                      | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=12)


def same(a: Any, b: Any) -> bool:
    """Equal values of the same types, all the way down (1 == 1.0 == True would not do)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, RecordID):
        return a.table_name == b.table_name and same(a.id, b.id)
    if isinstance(a, Duration):
        return a.elapsed == b.elapsed
    if isinstance(a, Decimal):
        return str(a) == str(b)
    return bool(a == b)


@settings(max_examples=300, deadline=None)
@given(record=st.dictionaries(st.text(max_size=6), values, max_size=6), seq=st.integers(0, 2**40))
def test_every_value_of_a_record_comes_back_as_it_went(record: dict[str, Any], seq: int) -> None:
    record = {**record, "id": RecordID("comment", "c1")}
    event = {"table": "comment", "op": "UPDATE", "id": "comment:c1", "record": record}
    back = typed.decode(wire.encode_event(event, seq), wire.ext_hook)
    assert back["seq"] == seq and back["id"] == "comment:c1" and back["op"] == "UPDATE"
    assert same(back["record"], record), (back["record"], record)
    # and so hashes like the row it came from
    assert canonical_bytes(back["record"]) == canonical_bytes(record)


def test_a_batch_is_an_array_of_the_events_in_order() -> None:
    parts = [wire.encode_event({"table": "t", "op": "CREATE", "id": f"t:{i}",
                                 "record": {"id": RecordID("t", i)}}, i) for i in range(3)]
    body = typed.encode_batch(parts)
    assert typed.is_array(body) and not typed.is_array(parts[0])
    assert [e["seq"] for e in typed.decode(body, wire.ext_hook)] == [0, 1, 2]
    big = typed.encode_batch(parts * 10)  # past 15 elements: the array16 header
    assert typed.is_array(big) and len(typed.decode(big, wire.ext_hook)) == 30


def test_a_record_id_as_the_event_id_goes_as_text_and_a_delete_gets_its_id() -> None:
    rid = RecordID("user", "a-b")
    back = typed.decode(wire.encode_event({"table": "user", "op": "DELETE", "id": rid,
                                            "record": None}), wire.ext_hook)
    assert back["id"] == "user:`a-b`"
    assert back["record"] == {"id": rid}


def test_links_decode_to_equal_values_whichever_event_they_come_from() -> None:
    one = typed.decode(wire.encode_event({"table": "c", "op": "CREATE", "id": "c:1",
                                           "record": {"t": RecordID("thread", 1)}}), wire.ext_hook)
    two = typed.decode(wire.encode_event({"table": "c", "op": "CREATE", "id": "c:2",
                                           "record": {"t": RecordID("thread", 1)}}), wire.ext_hook)
    assert one["record"]["t"] == two["record"]["t"] == RecordID("thread", 1)


def test_an_unencodable_value_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        wire.encode_event({"table": "c", "op": "CREATE", "id": "c:1",
                            "record": {"x": object()}})


def _ext(code: int, data: bytes) -> bytes:
    return msgpack.packb({"x": msgpack.ExtType(code, data)})


@pytest.mark.parametrize(("data", "words"), [
    (b"\xc1", ["not MessagePack"]),
    (b"\x92\x01", ["incomplete"]),
    (msgpack.packb(1) + b"\x01", ["extra data"]),
    (msgpack.packb({1: "x"}), ["map key"]),
    (_ext(42, b""), ["unknown msgpack ext type 42"]),
    (_ext(3, b"\x00\x01"), ["malformed msgpack ext type 3"]),
    (_ext(4, b"not a number"), ["malformed msgpack ext type 4"]),
    (_ext(4, b"\xff"), ["malformed msgpack ext type 4"]),
    (_ext(6, b"\x00" * 3), ["malformed msgpack ext type 6"]),
    (_ext(2, b"\xc1"), ["malformed msgpack ext type 2"]),
    (_ext(2, msgpack.packb([1, 2])), ["record id", "table"]),
    (_ext(2, msgpack.packb([1])), ["malformed msgpack ext type 2"]),
    (b"\x91" * 3000 + b"\x01", ["nested"]),
])
def test_bad_bytes_are_a_value_error_naming_the_problem(data: bytes, words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        typed.decode(data, wire.ext_hook)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_the_shape_decode_leaves_ext_values_opaque() -> None:
    body = wire.encode_event({"table": "c", "op": "CREATE", "id": "c:1",
                               "record": {"id": RecordID("c", 1), "at": datetime.now(UTC),
                                          "n": Decimal("1.5"), "u": uuid.uuid4()}})
    shape = typed.decode_shape(body)
    assert shape["table"] == "c" and isinstance(shape["record"], dict)
    assert all(isinstance(v, slice) for v in shape["record"].values())
    assert typed.decode_shape(_ext(42, b"")) == {"x": slice(42, b"", None)}  # checked later


def test_check_record_keeps_a_typed_id_and_types_a_missing_one() -> None:
    rec = {"id": RecordID("c", 1), "x": 1}
    assert wire.check_record("c", "c:1", rec) is rec
    assert wire.check_record("c", "c:2", {})["id"] == RecordID("c", 2)
    assert wire.check_record("c", "k", {})["id"] == RecordID("c", "k")
    with pytest.raises(ValueError, match="not in table c"):
        wire.check_record("c", "c:1", {"id": RecordID("d", 1)})
    with pytest.raises(ValueError, match="not a record id"):
        wire.check_record("c", "c:`unterminated", {})
    with pytest.raises(ValueError, match="not in table c"):
        wire.check_record("c", "d:1", {})


def test_datetimes_keep_their_microseconds_and_zone() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC) + timedelta(0)
    back = typed.decode(wire.encode_event({"table": "c", "op": "CREATE", "id": "c:1",
                                            "record": {"at": at}}), wire.ext_hook)
    assert back["record"]["at"] == at and back["record"]["at"].tzinfo is not None
