"""Frame parsing and the session key moved in and out of encoded frames."""

from __future__ import annotations

import uuid

import pytest
from surrealdb.data.cbor import decode, encode
from surrealdb.data.types.record_id import RecordID

from dbhost.frames import (
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    RpcError,
    parse_request,
    peek_id,
    restore_session,
    with_session,
)

LIMIT = 1 << 20


def _code(data: bytes | str) -> int:
    with pytest.raises(RpcError) as info:
        parse_request(data, LIMIT)
    return info.value.code


def test_bad_frames_get_the_right_codes() -> None:
    assert _code(b"\xff") == PARSE_ERROR
    assert _code(b"") == PARSE_ERROR
    assert _code(encode({"id": 1, "method": "ping"}) + b"\x00") == PARSE_ERROR
    assert _code("text") == PARSE_ERROR
    assert _code(encode([1])) == INVALID_REQUEST
    assert _code(encode({"id": 1})) == INVALID_REQUEST
    assert _code(encode({"id": 1, "method": 7})) == INVALID_REQUEST
    assert _code(encode({"id": 1, "method": "nope"})) == METHOD_NOT_FOUND


def test_oversized_frame_keeps_its_id() -> None:
    frame = encode({"id": "abc-123", "method": "query", "params": ["x" * 100, {}]})
    with pytest.raises(RpcError) as info:
        parse_request(frame, 50)
    assert info.value.code == INVALID_REQUEST
    assert info.value.req_id == "abc-123"
    assert peek_id(encode({"id": 70000, "method": "ping"})) == 70000
    assert peek_id(encode({"method": "ping", "id": 1})) is None
    assert peek_id(b"\x00") is None


def test_session_is_added_without_changing_the_rest() -> None:
    msg = {"id": "q1", "method": "query",
           "params": ["SELECT * FROM $r", {"r": RecordID("t", 1)}]}
    req = parse_request(encode(msg), LIMIT)
    sid = str(uuid.uuid4())
    out = decode(with_session(req, sid))
    assert out == {**msg, "session": sid}


def test_client_session_is_replaced_by_the_engine_session() -> None:
    client = str(uuid.uuid4())
    req = parse_request(encode({"id": 1, "method": "ping", "session": client}), LIMIT)
    sid = str(uuid.uuid4())
    assert decode(with_session(req, sid))["session"] == sid


def test_engine_session_is_removed_or_restored_in_replies() -> None:
    sid = str(uuid.uuid4())
    reply = encode({"id": 1, "result": [{"a": 1}], "session": uuid.UUID(sid)})
    assert decode(restore_session(reply, sid, None)) == {"id": 1, "result": [{"a": 1}]}
    client = str(uuid.uuid4())
    assert decode(restore_session(reply, sid, client))["session"] == client
    # An unusual layout takes the slow path and is still right.
    odd = encode({"session": uuid.UUID(sid), "id": 2, "result": None})
    assert decode(restore_session(odd, sid, None)) == {"id": 2, "result": None}


def test_params_are_decoded_only_when_asked_for() -> None:
    import cbor2

    msg = {"id": "q2", "method": "query",
           "params": ["SELECT * FROM $r", {"r": RecordID("t", 1)}]}
    req = parse_request(encode(msg), LIMIT)
    assert req.query_text() == "SELECT * FROM $r"
    assert isinstance(req.shallow["params"][1]["r"], cbor2.CBORTag)  # not built
    assert req.params == msg["params"]  # built on first use, with the SDK's types
    assert req.fields == msg


def test_an_id_in_a_surrealdb_type_is_taken_as_the_sdk_builds_it() -> None:
    req = parse_request(encode({"id": RecordID("req", 1), "method": "ping"}), LIMIT)
    assert req.id == RecordID("req", 1)
    assert _code(encode({"id": RecordID("req", 1), "method": "nope"})) == METHOD_NOT_FOUND
