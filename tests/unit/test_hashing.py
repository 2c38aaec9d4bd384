"""Canonical row bytes and the row/table hashes (the format the scheduler recomputes)."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st
from surrealdb import Duration, RecordID

from engine.hashing import bytes_hash, hash_text, row_hash, table_hash
from engine.values import NONE, canonical_bytes, unpack_value
from tests.support.value_oracle import stored_values

rows = st.dictionaries(
    st.sampled_from(["id", "a", "b", "c", "name", "x y"]), stored_values, max_size=6
)


def _shuffled(d: Any, rnd: random.Random) -> Any:
    if type(d) is dict:
        items = list(d.items())
        rnd.shuffle(items)
        return {k: _shuffled(v, rnd) for k, v in items}
    if type(d) is list:
        return [_shuffled(x, rnd) for x in d]
    return d


@settings(max_examples=300, deadline=None)
@given(row=rows, seed=st.integers(0, 2**32))
def test_canonical_bytes_ignore_key_order_at_every_depth(row: dict[str, Any], seed: int) -> None:
    assert canonical_bytes(_shuffled(row, random.Random(seed))) == canonical_bytes(row)


@settings(max_examples=300, deadline=None)
@given(row=rows)
def test_canonical_bytes_decode_to_the_same_values(row: dict[str, Any]) -> None:
    back = unpack_value(canonical_bytes(row))
    assert canonical_bytes(back) == canonical_bytes(row)
    assert set(back) == {k for k, v in row.items() if v is not NONE}


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (1, 1.0),
        (1, Decimal(1)),
        (Decimal(1), Decimal("1.0")),
        (RecordID("user", 1), "user:1"),
        (RecordID("user", 1), RecordID("user", "1")),
        (None, False),
        ([NONE], [None]),
        (b"a", "a"),
        (uuid.UUID(int=1), str(uuid.UUID(int=1))),
        (Duration(1), 1),
        (datetime(2020, 1, 1, tzinfo=UTC), "2020-01-01T00:00:00Z"),
    ],
)
def test_values_stored_differently_hash_differently(a: Any, b: Any) -> None:
    assert canonical_bytes({"v": a}) != canonical_bytes({"v": b})
    assert row_hash({"v": a}) != row_hash({"v": b})


def test_a_none_field_is_the_same_as_an_absent_field() -> None:
    assert canonical_bytes({"id": 1, "gone": NONE}) == canonical_bytes({"id": 1})
    assert canonical_bytes({"o": {"gone": NONE}}) == canonical_bytes({"o": {}})
    assert canonical_bytes({"v": None}) != canonical_bytes({})


def test_byte_format_is_pinned() -> None:
    # The scheduler implements the same format; this golden value catches any drift.
    row = {
        "id": RecordID("thread", 1),
        "title": "hi",
        "n": 2,
        "f": 0.5,
        "when": datetime(2020, 1, 1, 0, 0, 1, 500, tzinfo=UTC),
        "tags": ["a", NONE, None],
        "price": Decimal("1.50"),
        "u": uuid.UUID(int=1),
        "d": Duration(7),
    }
    data = canonical_bytes(row)
    assert data == _golden()
    assert row_hash(row) == xxhash.xxh3_64_intdigest(data)


def _golden() -> bytes:
    # Written out by hand from the documented format (engine.values.canonical_bytes).
    parts = [
        b"\x89",  # map of 9 entries, keys sorted by code point
        b"\xa1d",
        b"\xd4\x05\x07",  # Duration: ext 5 (fixext1), msgpack int 7
        b"\xa1f",
        b"\xcb" + bytes.fromhex("3fe0000000000000"),  # float64 0.5
        b"\xa2id",
        b"\xc7\x09\x02" + b"\x92\xa6thread\x01",  # RecordID: ext 2, [table, key]
        b"\xa1n",
        b"\x02",
        b"\xa5price",
        b"\xd6\x04" + b"1.50",  # Decimal: ext 4 (fixext4), str(d)
        b"\xa4tags",
        b"\x93\xa1a\xc7\x00\x01\xc0",  # ["a", NONE (ext 1, empty), NULL (nil)]
        b"\xa5title",
        b"\xa2hi",
        b"\xa1u",
        b"\xd8\x06" + uuid.UUID(int=1).bytes,  # UUID: ext 6 (fixext16)
        b"\xa4when",
        b"\xc7\x0c\x03"
        + bytes.fromhex("000000005e0be101")
        + bytes.fromhex("0007a120"),  # >qI s, ns
    ]
    return b"".join(parts)


@settings(max_examples=100, deadline=None)
@given(table=st.lists(rows, max_size=8), seed=st.integers(0, 2**32))
def test_table_hash_is_independent_of_row_order(table: list[dict[str, Any]], seed: int) -> None:
    other = list(table)
    random.Random(seed).shuffle(other)
    assert table_hash(other) == table_hash(table)


def test_table_hash_changes_with_one_value_and_is_zero_when_empty() -> None:
    base = [{"id": RecordID("t", i), "v": i} for i in range(10)]
    changed = [dict(r) for r in base]
    changed[3]["v"] = 3.5
    assert table_hash([]) == 0
    assert table_hash(base) != table_hash(changed)
    assert bytes_hash(canonical_bytes(base[0])) == row_hash(base[0])


def test_rows_outside_surrealdb_types_are_refused_clearly() -> None:
    with pytest.raises(TypeError, match="cannot encode"):
        canonical_bytes({"v": object()})
    with pytest.raises(TypeError, match="64-bit"):
        canonical_bytes({"v": 2**70})


def test_hash_text_is_sixteen_hex_digits() -> None:
    assert hash_text(0) == "0" * 16
    assert hash_text(0xABC) == "0000000000000abc"
    assert hash_text(2**64 - 1) == "f" * 16
