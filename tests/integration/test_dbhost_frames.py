"""Bad frames get an RPC error; the same connection and every other client keep working."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import websockets
from surrealdb.data.cbor import decode, encode

from tests.support.dbhost_clients import close, root_client, unique_db
from tests.support.procs import DbHost, start_db_host

MAX_FRAME = 64 * 1024


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DbHost]:
    h = start_db_host(tmp_path_factory.mktemp("dbhost-frames"), memory=True,
                      extra_args=["--max-frame-bytes", str(MAX_FRAME)])
    try:
        yield h
    finally:
        h.process.stop()


@pytest.fixture
async def raw(host: DbHost) -> AsyncIterator[Any]:
    """A plain WebSocket client signed in as root and using a fresh database."""
    ws = await websockets.connect(host.ws_url, subprotocols=["cbor"], max_size=None)
    ns, db = unique_db()
    try:
        assert "result" in await call(ws, {"id": 1, "method": "signin", "params": [
            {"user": host.user, "pass": host.password}]})
        assert "result" in await call(ws, {"id": 2, "method": "use", "params": [ns, db]})
        yield ws
    finally:
        await ws.close()


async def call(ws: Any, msg: Any) -> dict[str, Any]:
    await ws.send(encode(msg))
    return decode(await ws.recv())


async def send_raw(ws: Any, data: bytes | str) -> dict[str, Any]:
    await ws.send(data)
    return decode(await ws.recv())


async def still_answers(ws: Any) -> None:
    reply = await call(ws, {"id": "next", "method": "query", "params": ["RETURN 40 + 2", {}]})
    assert reply["id"] == "next"
    assert reply["result"][0]["result"] == 42


async def test_garbage_bytes_get_a_parse_error(raw: Any) -> None:
    reply = await send_raw(raw, b"\xff\x00\x13garbage\x1c")
    assert reply["error"]["code"] == -32700
    await still_answers(raw)


async def test_truncated_cbor_gets_a_parse_error(raw: Any) -> None:
    reply = await send_raw(raw, encode({"id": 5, "method": "query", "params": ["RETURN 1"]})[:-3])
    assert reply["error"]["code"] == -32700
    await still_answers(raw)


async def test_a_frame_that_is_not_a_map_is_an_invalid_request(raw: Any) -> None:
    reply = await send_raw(raw, encode([1, 2, 3]))
    assert reply["error"]["code"] == -32600
    await still_answers(raw)


async def test_text_frames_are_refused(raw: Any) -> None:
    reply = await send_raw(raw, '{"id": 1, "method": "ping"}')
    assert "error" in reply
    await still_answers(raw)


async def test_missing_method_is_an_invalid_request(raw: Any) -> None:
    reply = await call(raw, {"id": 9, "params": []})
    assert reply == {"id": 9, "error": reply["error"]}
    assert reply["error"]["code"] == -32600
    await still_answers(raw)


async def test_unknown_method_is_method_not_found(raw: Any) -> None:
    reply = await call(raw, {"id": 10, "method": "launch_rockets", "params": []})
    assert reply["id"] == 10
    assert reply["error"]["code"] == -32601
    await still_answers(raw)


async def test_oversized_frame_gets_an_error_with_its_id(raw: Any) -> None:
    big = "x" * (MAX_FRAME + 10)
    reply = await call(raw, {"id": "big", "method": "query", "params": ["RETURN $v", {"v": big}]})
    assert reply["id"] == "big"
    assert reply["error"]["code"] == -32600
    assert str(MAX_FRAME) in reply["error"]["message"]
    await still_answers(raw)


async def test_bad_params_get_an_engine_error_not_a_crash(raw: Any) -> None:
    reply = await call(raw, {"id": 11, "method": "query", "params": "not a list"})
    assert reply["id"] == 11 and "error" in reply
    reply = await call(raw, {"id": 12, "method": "live", "params": [42]})
    assert reply["id"] == 12 and "error" in reply
    reply = await call(raw, {"id": 13, "method": "kill", "params": ["not-a-uuid"]})
    assert reply["id"] == 13 and "error" in reply
    await still_answers(raw)


async def test_other_clients_are_unaffected_by_bad_frames(host: DbHost, raw: Any) -> None:
    ns, db = unique_db()
    sdk = await root_client(host, ns, db)
    try:
        for junk in (b"\xff", encode("just a string"), b"\xa1"):
            await send_raw(raw, junk)
        assert await sdk.query("RETURN 1") == 1
        await still_answers(raw)
    finally:
        await close(sdk)


async def test_replies_carry_no_host_session_id(raw: Any) -> None:
    reply = await call(raw, {"id": 14, "method": "query", "params": ["RETURN 1", {}]})
    assert "session" not in reply


async def test_values_the_engine_cannot_decode_get_an_error_not_silence(raw: Any) -> None:
    # An integer beyond 64 bits is a CBOR bignum, which the engine refuses to decode: the host
    # must still answer this request (with an error) and keep serving the connection.
    reply = await call(raw, {"id": "big", "method": "query",
                             "params": ["RETURN $a", {"a": 2**70}]})
    assert reply["id"] == "big"
    assert reply["error"]["code"] == -32602
    assert "decode" in reply["error"]["message"]
    await still_answers(raw)


async def test_a_malformed_value_deep_in_the_params_gets_an_error_and_the_connection_goes_on(
        raw: Any) -> None:
    # The host reads a request's method and id, not its parameters (the engine decodes those):
    # a record id tag around a number is well-formed CBOR but no SurrealDB value.
    import cbor2

    frame = cbor2.dumps({"id": "deep", "method": "query",
                         "params": ["RETURN $r", {"r": [1, cbor2.CBORTag(8, 42)]}]})
    reply = await send_raw(raw, frame)
    assert reply["id"] == "deep" and reply["error"]["code"] in (-32602, -32700), reply
    await still_answers(raw)


async def test_record_ids_in_params_reach_the_engine_intact(raw: Any) -> None:
    from surrealdb.data.types.record_id import RecordID

    reply = await call(raw, {"id": 15, "method": "query",
                             "params": ["RETURN [$a, $b]", {"a": RecordID("t", [1, "x"]),
                                                           "b": {"k": RecordID("u", 2)}}]})
    assert reply["result"][0]["result"] == [RecordID("t", [1, "x"]), {"k": RecordID("u", 2)}]


async def test_pipelined_requests_each_get_their_own_reply_frame(raw: Any) -> None:
    # Replies that complete together leave the host in one socket write (dbhost.wsbatch):
    # each must still be its own WebSocket message, whole, small and large alike.
    sizes = [0, 1, 100, 70_000, 3, 200_000, 5] * 20
    for i, n in enumerate(sizes):
        await raw.send(encode({"id": i, "method": "query",
                               "params": ["RETURN string::repeat('x', $n)", {"n": n}]}))
    got: dict[int, int] = {}
    for _ in sizes:
        msg = await raw.recv()
        assert isinstance(msg, bytes)
        reply = decode(msg)
        assert reply["id"] not in got
        got[reply["id"]] = len(reply["result"][0]["result"])
    assert got == dict(enumerate(sizes))
    await still_answers(raw)
