"""Request/reply between processes over ZeroMQ (DEALER -> ROUTER), msgpack frames.

The SSP's gateway workers are DEALER clients of the hub's ROUTER: many requests in flight per
socket, each tagged with a request id so replies can come back in any order. A frame is
`[request_id (8 bytes), msgpack body]`; the hub answers `[request_id, msgpack reply]`.
One socket per process and asyncio task multiplexing keep the cost at one round trip per
request, with no socket per request (see architecture: DEALER->ROUTER ~130-150 us).

The sockets are plain (blocking-API) ZeroMQ sockets driven by the asyncio loop through their
notification descriptor (`_LoopSocket`), not `zmq.asyncio` sockets: pyzmq's asyncio layer
builds a future per send and per receive and re-reads the socket's events as `enum` flags
several times for each, which cost the hub ~0.2 ms of CPU per ingest (cProfile at 3,000
events/s, issue 31) and as much again in each client. Here a readable descriptor drains every
message waiting, and a send that the socket takes at once costs one call.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
import zmq
import zmq.asyncio

_ID = struct.Struct("!Q")
_POLLIN = int(zmq.POLLIN)
_POLLOUT = int(zmq.POLLOUT)
_EVENTS = int(zmq.EVENTS)
_NOBLOCK = int(zmq.NOBLOCK)
# Messages read per wake-up before the loop gets a turn (the rest is read on the next one).
_READ_BURST = 256

Handler = Callable[[Any], Awaitable[Any]]


class RpcTimeout(Exception):
    """The server did not answer in time (it may be busy or gone)."""


def _sync_context(ctx: zmq.asyncio.Context | None) -> zmq.Context[Any]:
    # The same underlying context as the caller's (inproc endpoints need one context); the
    # default is the one zmq.asyncio's default instance wraps, as before.
    base = ctx if ctx is not None else zmq.asyncio.Context.instance()
    return zmq.Context.shadow(base.underlying)


class _LoopSocket:
    """A ZeroMQ socket whose incoming messages the running asyncio loop hands to `received`.

    ZeroMQ's descriptor is edge-triggered and says only "look at the events": after it fires,
    and after any send (which may consume an edge), every waiting message must be read, or
    the next one may never wake the loop. Sends go out at once when the socket takes them;
    otherwise (a DEALER with no peer yet, a full pipe) they queue here, in order, until the
    socket reports room."""

    def __init__(self, kind: int, ctx: zmq.asyncio.Context | None,
                 received: Callable[[list[bytes]], None]) -> None:
        self._on_frames = received
        self._ctx = _sync_context(ctx)
        self._sock: zmq.Socket[Any] = self._ctx.socket(kind)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd = self._sock.getsockopt(zmq.FD)
        self._out: deque[list[bytes]] = deque()
        self._check_queued = False

    def _attach(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._detach()
            loop.add_reader(self._fd, self._on_events)
            self._loop = loop
            loop.call_soon(self._on_events)  # anything that arrived before we listened
        return loop

    def _detach(self) -> None:
        if self._loop is not None:
            # (a loop already closed has no reader left to remove)
            if not self._loop.is_closed():
                self._loop.remove_reader(self._fd)
            self._loop = None

    def _send(self, frames: list[bytes]) -> None:
        if not self._out:
            try:
                self._sock.send_multipart(frames, _NOBLOCK)
            except zmq.Again:
                self._out.append(frames)
        else:
            self._out.append(frames)
        self._recheck()

    def _recheck(self) -> None:
        # A send may have consumed the descriptor's edge: look at the events once more, once
        # per loop turn however many sends there were.
        if not self._check_queued and self._loop is not None:
            self._check_queued = True
            self._loop.call_soon(self._on_events)

    def _on_events(self) -> None:
        self._check_queued = False
        sock = self._sock
        if sock.closed:
            return
        for _ in range(_READ_BURST):
            events = int(sock.getsockopt(_EVENTS))  # (the raw getter: an int, no enum)
            if self._out and events & _POLLOUT:
                self._flush_out()
            if not events & _POLLIN:
                return
            try:
                frames = sock.recv_multipart(_NOBLOCK)
            except zmq.Again:
                return
            self._on_frames(frames)
            if sock.closed:
                return
        self._recheck()  # more may be waiting: read it on the next turn

    def _flush_out(self) -> None:
        out, sock = self._out, self._sock
        while out:
            try:
                sock.send_multipart(out[0], _NOBLOCK)
            except zmq.Again:
                return
            out.popleft()

    def _close_socket(self) -> None:
        self._detach()
        self._out.clear()
        self._sock.close(0)


class RpcClient(_LoopSocket):
    """Asyncio DEALER client: `await client.call(body)` -> reply body."""

    def __init__(self, endpoint: str, *, ctx: zmq.asyncio.Context | None = None) -> None:
        super().__init__(zmq.DEALER, ctx, self._received)
        self._sock.connect(endpoint)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}

    def _received(self, frames: list[bytes]) -> None:
        if len(frames) != 2:
            return  # not a reply of ours
        fut = self._pending.pop(_ID.unpack(frames[0])[0], None)
        if fut is not None and not fut.done():
            fut.set_result(msgpack.unpackb(frames[1], raw=False, strict_map_key=False))

    async def call(self, body: Any, timeout: float = 30.0) -> Any:
        """Send one request and wait for its reply; RpcTimeout after `timeout` seconds."""
        frame = msgpack.packb(body, use_bin_type=True)  # raises before anything is registered
        loop = self._attach()
        rid = next(self._ids)
        fut: asyncio.Future[Any] = loop.create_future()
        self._pending[rid] = fut
        timer = loop.call_later(timeout, _expire, fut, timeout)
        try:
            self._send([_ID.pack(rid), frame])
            return await fut
        finally:
            timer.cancel()
            self._pending.pop(rid, None)

    def close(self) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.cancel()
        self._pending.clear()
        self._close_socket()


def _expire(fut: asyncio.Future[Any], timeout: float) -> None:
    if not fut.done():
        fut.set_exception(RpcTimeout(f"no reply within {timeout}s"))


class RpcServer(_LoopSocket):
    """Asyncio ROUTER server: each request runs `handler(body)` as its own task.

    Requests are started in arrival order; a handler that must serialise work (the hub's
    sequencer) does so itself, so slow requests (a view registration) never block fast ones.
    """

    def __init__(self, endpoint: str, handler: Handler, *,
                 ctx: zmq.asyncio.Context | None = None) -> None:
        super().__init__(zmq.ROUTER, ctx, self._received)
        self._sock.bind(endpoint)
        self.endpoint = endpoint
        self._handler = handler
        self._tasks: set[asyncio.Task[None]] = set()

    async def serve(self) -> None:
        """Serve until cancelled."""
        self._attach()
        try:
            await asyncio.get_running_loop().create_future()  # requests arrive by callback
        finally:
            self._detach()

    def _received(self, frames: list[bytes]) -> None:
        if len(frames) != 3:
            return  # not a request of this protocol
        ident, rid_b, body = frames
        assert self._loop is not None
        task = self._loop.create_task(self._answer(ident, rid_b, body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, ident: bytes, rid_b: bytes, body: bytes) -> None:
        try:
            reply = await self._handler(msgpack.unpackb(body, raw=False, strict_map_key=False))
        except Exception as e:  # the handler's bug must not kill the server: answer 500
            reply = {"status": 500, "body": {"error": "internal", "message": f"{type(e).__name__}: {e}"}}
        if not self._sock.closed:
            self._send([ident, rid_b, msgpack.packb(reply, use_bin_type=True)])

    def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        self._close_socket()
