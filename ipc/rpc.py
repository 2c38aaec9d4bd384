"""Request/reply between processes over ZeroMQ (DEALER -> ROUTER), msgpack frames.

The SSP's gateway workers are DEALER clients of the hub's ROUTER: many requests in flight per
socket, each tagged with a request id so replies can come back in any order. A frame is
`[request_id (8 bytes), msgpack body]`; the hub answers `[request_id, msgpack reply]`.
One socket per process and asyncio task multiplexing keep the cost at one round trip per
request, with no socket per request (see architecture: DEALER->ROUTER ~130-150 us).
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
import zmq
import zmq.asyncio

_ID = struct.Struct("!Q")

Handler = Callable[[Any], Awaitable[Any]]


class RpcTimeout(Exception):
    """The server did not answer in time (it may be busy or gone)."""


class RpcClient:
    """Asyncio DEALER client: `await client.call(body)` -> reply body."""

    def __init__(self, endpoint: str, *, ctx: zmq.asyncio.Context | None = None) -> None:
        self._ctx = ctx or zmq.asyncio.Context.instance()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.connect(endpoint)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._reader: asyncio.Task[None] | None = None

    def _ensure_reader(self) -> None:
        if self._reader is None or self._reader.done():
            self._reader = asyncio.get_running_loop().create_task(self._read_loop())

    async def _read_loop(self) -> None:
        while True:
            try:
                rid_b, body = await self._sock.recv_multipart(copy=True)
            except zmq.ZMQError:
                if self._sock.closed:
                    return  # closed under the reader (close() races the cancellation)
                raise
            fut = self._pending.pop(_ID.unpack(rid_b)[0], None)
            if fut is not None and not fut.done():
                fut.set_result(msgpack.unpackb(body, raw=False, strict_map_key=False))

    async def call(self, body: Any, timeout: float = 30.0) -> Any:
        """Send one request and wait for its reply; RpcTimeout after `timeout` seconds."""
        self._ensure_reader()
        frame = msgpack.packb(body, use_bin_type=True)  # raises before anything is registered
        rid = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            await self._sock.send_multipart([_ID.pack(rid), frame])
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError as e:
            raise RpcTimeout(f"no reply within {timeout}s") from e
        finally:
            self._pending.pop(rid, None)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        for fut in self._pending.values():
            if not fut.done():
                fut.cancel()
        self._sock.close(0)


class RpcServer:
    """Asyncio ROUTER server: each request runs `handler(body)` as its own task.

    Requests are started in arrival order; a handler that must serialise work (the hub's
    sequencer) does so itself, so slow requests (a view registration) never block fast ones.
    """

    def __init__(self, endpoint: str, handler: Handler, *, ctx: zmq.asyncio.Context | None = None) -> None:
        self._ctx = ctx or zmq.asyncio.Context.instance()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(endpoint)
        self.endpoint = endpoint
        self._handler = handler
        self._tasks: set[asyncio.Task[None]] = set()

    async def serve(self) -> None:
        """Serve until cancelled."""
        while True:
            ident, rid_b, body = await self._sock.recv_multipart(copy=True)
            task = asyncio.get_running_loop().create_task(self._answer(ident, rid_b, body))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _answer(self, ident: bytes, rid_b: bytes, body: bytes) -> None:
        try:
            reply = await self._handler(msgpack.unpackb(body, raw=False, strict_map_key=False))
        except Exception as e:  # the handler's bug must not kill the server: answer 500
            reply = {"status": 500, "body": {"error": "internal", "message": f"{type(e).__name__}: {e}"}}
        await self._sock.send_multipart([ident, rid_b, msgpack.packb(reply, use_bin_type=True)])

    def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        self._sock.close(0)
