"""dbclient.cbor: the C codec writes the SDK's exact bytes and reads back the SDK's values."""

from __future__ import annotations

import decimal
import math
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import cbor2
from hypothesis import given, settings
from hypothesis import strategies as st
from surrealdb import RecordID
from surrealdb.cbor._types import undefined
from surrealdb.data.types.duration import Duration
from surrealdb.data.types.table import Table

from dbclient import cbor

keys = st.text(min_size=0, max_size=8)
record_keys = st.one_of(
    st.text(min_size=1, max_size=10),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.lists(st.one_of(st.integers(-5, 5), st.text(max_size=4)), max_size=3),
    st.dictionaries(st.text(min_size=1, max_size=4), st.integers(-5, 5), max_size=3),
)
record_ids = st.builds(RecordID, st.sampled_from(["user", "post", "_00_query", "a-b"]),
                       record_keys)
nested_record_ids = st.builds(lambda t, a, b: RecordID(t, [a, b]),
                              st.sampled_from(["_00_list_ref_user_u1", "e"]), record_ids,
                              record_ids)
datetimes = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
                         timezones=st.sampled_from([UTC, timezone(timedelta(hours=2)),
                                                    timezone(timedelta(hours=-5, minutes=-30))]))
_no_duration_scalars = [
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.binary(max_size=16),
    st.decimals(allow_nan=False, allow_infinity=False, places=None).filter(
        lambda d: abs(d.adjusted()) < 30),
    datetimes,
    st.uuids(),
    record_ids,
    nested_record_ids,
    st.builds(Table, st.sampled_from(["user", "post"])),
    st.just(undefined),  # the SDK's marker: tests send it to mean NULL
]
scalars = st.one_of(*_no_duration_scalars,
                    st.builds(Duration, st.integers(min_value=1, max_value=2**62)))


def _nested(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(leaves, lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(keys, inner, max_size=5)), max_leaves=30)


values = _nested(scalars)
# The same values without a Duration anywhere: drawn directly rather than filtered out of
# `values` (most of those nest a Duration somewhere, and each rejected draw cost as much as
# a kept one).
values_without_duration = _nested(st.one_of(*_no_duration_scalars))


def same(a: Any, b: Any) -> bool:
    """Equal values of identical types, NaN equal to NaN, all the way down."""
    if a is cbor2.undefined or a is undefined:
        # CBOR undefined (SurrealDB never sends it) decodes to cbor2's marker, the SDK's to its
        # own; both mean "undefined".
        return b is cbor2.undefined or b is undefined
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, RecordID):
        return a.table_name == b.table_name and same(a.id, b.id)
    if isinstance(a, Duration):
        return a.elapsed == b.elapsed
    if isinstance(a, Table):
        return a.table_name == b.table_name
    return bool(a == b)


def _has_duration(v: Any) -> bool:
    if isinstance(v, Duration):
        return True
    if isinstance(v, list):
        return any(_has_duration(x) for x in v)
    if isinstance(v, dict):
        return any(_has_duration(x) for x in v.values())
    return False


@settings(max_examples=600, deadline=None)
@given(values_without_duration)  # the SDK's duration bytes are refused by the engine
def test_encode_writes_the_sdk_bytes(value: Any) -> None:
    assert not _has_duration(value)
    assert cbor.encode(value) == cbor.sdk_encode(value)


def test_record_ids_with_text_keys_of_every_length_form_write_the_sdk_bytes() -> None:
    # `_encode_record_id` writes text-keyed ids as bytes itself: each CBOR length form
    # (inline, 1, 2, 4 bytes) of the table and the key, and text longer in bytes than in
    # characters
    for n in (0, 1, 23, 24, 255, 256, 65535, 65536):
        for key in ("k" * n, "é" * n):
            for table in ("post", "t" * n or "t"):
                rid = RecordID(table, key)
                assert cbor.encode([rid, {"r": rid}]) == cbor.sdk_encode([rid, {"r": rid}])
                assert same(cbor.decode(cbor.encode(rid)), rid)


def test_a_duration_goes_as_the_compact_tag_the_engine_takes() -> None:
    d = Duration(5_400_000_000_123)
    data = cbor.encode({"v": d})
    tagged = cbor2.loads(data, tag_hook=lambda t, _imm: (t.tag, list(t.value)))["v"]
    assert tagged == (14, [5400, 123])
    assert cbor.decode(data)["v"].elapsed == d.elapsed


@settings(max_examples=600, deadline=None)
@given(values)
def test_decode_reads_what_the_sdk_reads(value: Any) -> None:
    data = cbor.sdk_encode(value)
    assert same(cbor.decode(data), cbor.sdk_decode(data))


def test_rpc_request_of_edge_rows_round_trips() -> None:
    q = RecordID("_00_query", "u1c2")
    rows = [{"id": RecordID("_00_list_ref_user_u1", [q, RecordID("post", f"p{i}")]), "in": q,
             "out": RecordID("post", f"p{i}"), "rv": i, "seq": 7,
             "at": datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
             "n": decimal.Decimal("1.50"), "u": uuid.UUID(int=i), "gone": None}
            for i in range(50)]
    req = {"id": 3, "method": "query", "params": ["FOR $r IN $rows {}", {"rows": rows}]}
    data = cbor.encode(req)
    assert data == cbor.sdk_encode(req)
    back, used = cbor.decode_whole(data + b"\x00")
    assert used == len(data)
    assert same(back, cbor.sdk_decode(data))
    # A record id inside a record id decodes to lists, never frozen tuples.
    assert isinstance(back["params"][1]["rows"][0]["id"].id, list)


def test_none_is_surrealdb_none_and_decimal_its_string_tag() -> None:
    assert cbor.encode(None) == b"\xc6\xf6"
    assert cbor.encode(decimal.Decimal("2.5")) == b"\xca" + bytes([0x63]) + b"2.5"


def test_install_routes_the_sdk_call_sites_to_the_c_codec() -> None:
    from surrealdb.connections import async_ws
    from surrealdb.data import cbor as sdk_cbor
    from surrealdb.request_message.descriptors import cbor_ws

    cbor.install()
    assert cbor_ws.encode is cbor.encode
    assert async_ws.decode is cbor.decode
    assert sdk_cbor.encode is cbor.encode and sdk_cbor.decode is cbor.decode


@settings(max_examples=600, deadline=None)
@given(values)
def test_a_shallow_decode_materialized_is_the_full_decode(value: Any) -> None:
    # the LIVE feed reader decodes a changefeed shallowly and builds only the tables it
    # serves: what it builds must be what the full decode gives
    data = cbor.encode(value)
    assert same(cbor.materialize(cbor.decode_shallow(data)), cbor.decode(data))


def test_a_shallow_decode_builds_no_sdk_value() -> None:
    rid = RecordID("_00_list_ref_user_u1", [RecordID("_00_query", "q"), RecordID("post", "p")])
    shallow = cbor.decode_shallow(cbor.encode({"id": rid, "rows": [rid]}))
    assert isinstance(shallow["id"], cbor2.CBORTag) and shallow["id"].tag == 8
    assert isinstance(shallow["rows"][0], cbor2.CBORTag)
    built = cbor.materialize(shallow)
    assert same(built, {"id": rid, "rows": [rid]})
    assert isinstance(built["id"].id, list)
    value, used = cbor.decode_whole_shallow(cbor.encode(rid) + b"\x00")
    assert isinstance(value, cbor2.CBORTag) and used == len(cbor.encode(rid))
