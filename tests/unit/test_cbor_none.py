"""The differential tests' CBOR decoder (tests/engine/cbor_none.py, cbor2's C decoder with
SurrealDB's tags) reads SurrealDB's own answers exactly as the byte-by-byte reference
reader does: values of every kind the engine meets, NONE kept apart from NULL, nested in
objects, arrays and record ids."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from surrealdb import Duration, RecordID
from surrealdb.data.cbor import encode

from engine.values import NONE as ENGINE_NONE
from tests.engine import judge
from tests.engine.cbor_none import decode_keeping_none, decode_keeping_none_reference
from tests.engine.judge import NONE_VALUE
from tests.engine.runner import strict
from tests.support.value_oracle import Oracle, to_wire, values

_MARK = object()
_oracle: Oracle | None = None
_ids = itertools.count(1)


def _raw_answer(text: str, params: dict[str, Any]) -> bytes:
    """SurrealDB's raw CBOR reply to a query (the embedded engine, as the judge asks it)."""
    global _oracle
    if _oracle is None:
        _oracle = Oracle()
    wire = {k: to_wire(v) for k, v in params.items()}
    raw: bytes = _oracle.db.execute(encode({"id": next(_ids), "method": "query",
                                            "params": [text, wire]}))
    return raw


def _same(raw: bytes) -> None:
    ref = decode_keeping_none_reference(raw, _MARK)
    got = decode_keeping_none(raw, _MARK)
    assert repr(strict(got)) == repr(strict(ref))
    assert type(got) is type(ref)


@settings(max_examples=150)
@given(v=values, w=st.lists(values, max_size=3))
def test_answers_decode_as_the_reference_reader_decodes_them(v: Any, w: list[Any]) -> None:
    _same(_raw_answer("RETURN $v; RETURN [$v, $w, {a: $v, b: NONE, c: NULL}]; "
                      "RETURN type::thing('t', [$v, 1])", {"v": v, "w": w}))


def test_none_and_null_stay_apart_inside_every_container() -> None:
    raw = _raw_answer("RETURN [NONE, NULL, {a: NONE, b: NULL}, t:[NONE, NULL, {x: NONE}]]",
                      {})
    _same(raw)
    (answer,) = decode_keeping_none(raw, _MARK)["result"]
    outer = answer["result"]
    assert outer[0] is _MARK and outer[1] is None
    assert outer[2] == {"a": _MARK, "b": None} or outer[2] == {"b": None}
    rid = outer[3]
    assert rid.table_name == "t" and type(rid.id) is list


@settings(max_examples=300)
@given(v=values, w=st.lists(values, max_size=3))
@example(v=Duration(31_249_999_999_999_999), w=[])  # seconds past 2**53 ns: split exactly
def test_requests_encode_to_the_reference_encoders_bytes(v: Any, w: list[Any]) -> None:
    """The judge's requests (None as NULL, NONE_VALUE as NONE, durations compact) in the
    same bytes as the SDK's own encoder writes them."""
    # (the reference's NULL marking stops at record ids: it sent a NULL inside an id's key
    # as NONE; the C path keeps it NULL, see the test below)
    assume(not _null_in_id(v) and not any(_null_in_id(x) for x in w))
    req = {"id": 7, "method": "query",
           "params": ["RETURN $v", {"v": _as_judge(v), "w": [_as_judge(x) for x in w],
                                    "n": None, "m": NONE_VALUE}]}
    assert judge.encode(req) == judge.encode_reference(req)


def test_a_null_inside_a_record_key_is_sent_as_null() -> None:
    raw = judge.encode({"v": RecordID("a", [None, NONE_VALUE])})
    assert raw.endswith(b"\x82\xf6\xc6\xf6")  # [NULL, NONE]


def _null_in_id(v: Any, inside: bool = False) -> bool:
    t = type(v)
    if v is None:
        return inside
    if t is list:
        return any(_null_in_id(x, inside) for x in v)
    if t is dict:
        return any(_null_in_id(x, inside) for x in v.values())
    if t is RecordID:
        return _null_in_id(v.id, True)
    return False


def _as_judge(v: Any) -> Any:
    """A value of the oracle's model as the judge's callers write it (NONE as NONE_VALUE,
    NULL as None)."""
    t = type(v)
    if v is ENGINE_NONE:
        return NONE_VALUE
    if t is list:
        return [_as_judge(x) for x in v]
    if t is dict:
        return {k: _as_judge(x) for k, x in v.items()}
    if t is RecordID:
        return RecordID(v.table_name, _as_judge(v.id))
    return v
