"""DEALER/ROUTER request-reply over real ZeroMQ sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import zmq.asyncio

from ipc.rpc import RpcClient, RpcServer, RpcTimeout


async def test_replies_reach_the_right_caller_even_out_of_order(tmp_path: Path) -> None:
    ctx = zmq.asyncio.Context()
    endpoint = f"ipc://{tmp_path}/hub.sock"

    async def handler(body: dict) -> dict:
        await asyncio.sleep(body["delay"])
        return {"echo": body["n"]}

    server = RpcServer(endpoint, handler, ctx=ctx)
    serving = asyncio.create_task(server.serve())
    client = RpcClient(endpoint, ctx=ctx)
    try:
        # The first request is the slowest: its reply comes back last but still to its caller.
        calls = [client.call({"n": i, "delay": (5 - i) * 0.02}) for i in range(5)]
        assert await asyncio.gather(*calls) == [{"echo": i} for i in range(5)]
    finally:
        client.close()
        serving.cancel()
        server.close()
        ctx.term()


async def test_a_failing_handler_answers_500_and_the_server_keeps_serving(tmp_path: Path) -> None:
    ctx = zmq.asyncio.Context()
    endpoint = f"ipc://{tmp_path}/hub.sock"

    async def handler(body: dict) -> dict:
        if body.get("boom"):
            raise ValueError("bad thing")
        return {"ok": True}

    server = RpcServer(endpoint, handler, ctx=ctx)
    serving = asyncio.create_task(server.serve())
    client = RpcClient(endpoint, ctx=ctx)
    try:
        reply = await client.call({"boom": True})
        assert reply["status"] == 500 and "bad thing" in reply["body"]["message"]
        assert await client.call({}) == {"ok": True}
    finally:
        client.close()
        serving.cancel()
        server.close()
        ctx.term()


async def test_call_times_out_when_nobody_answers(tmp_path: Path) -> None:
    ctx = zmq.asyncio.Context()
    client = RpcClient(f"ipc://{tmp_path}/nobody.sock", ctx=ctx)
    try:
        with pytest.raises(RpcTimeout):
            await client.call({"x": 1}, timeout=0.2)
    finally:
        client.close()
        ctx.term()


async def test_a_body_msgpack_cannot_carry_raises_and_leaves_nothing_pending(tmp_path: Path) -> None:
    ctx = zmq.asyncio.Context()
    client = RpcClient(f"ipc://{tmp_path}/x.sock", ctx=ctx)
    try:
        with pytest.raises(TypeError):
            await client.call({"x": object()}, timeout=0.2)
        assert client._pending == {}
    finally:
        client.close()
        ctx.term()


async def test_calls_beyond_the_send_queue_wait_for_the_server_and_all_get_answered(
        tmp_path: Path) -> None:
    # 2,500 calls before the server exists: ZeroMQ queues up to its high-water mark (1,000) on
    # the socket, and the client must hold the rest in order until the socket takes them.
    ctx = zmq.asyncio.Context()
    endpoint = f"ipc://{tmp_path}/late.sock"
    client = RpcClient(endpoint, ctx=ctx)

    async def handler(body: dict) -> dict:
        return {"echo": body["n"]}

    calls = [asyncio.ensure_future(client.call({"n": i}, timeout=30)) for i in range(2500)]
    await asyncio.sleep(0.05)  # every call has tried its send
    assert client._out, "the socket took every message: the test no longer reaches the queue"
    server = RpcServer(endpoint, handler, ctx=ctx)
    serving = asyncio.create_task(server.serve())
    try:
        assert await asyncio.gather(*calls) == [{"echo": i} for i in range(2500)]
        assert not client._out
    finally:
        client.close()
        serving.cancel()
        server.close()
        ctx.term()
