"""Shard worker processes as the hub sees them: spawn, call, watch, restart."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import xxhash
import zmq.asyncio

from ipc.lifeline import lifeline_argv
from ipc.rpc import RpcClient, RpcTimeout
from ssp.shard import encode_request

log = logging.getLogger("ssp.shards")

# A shard that dies this many times within RESTART_WINDOW_SECS is given up on (status failed).
MAX_RESTARTS = 5
RESTART_WINDOW_SECS = 60.0


class ShardDown(Exception):
    """The shard process is not running (it died or is being restarted)."""


class ShardTimeout(ShardDown):
    """The shard did not answer in time. It may still be working on the request (and apply
    it later), so its state can no longer be trusted: the caller kills it, and its rebuild
    recomputes its views from the hub's registry."""


class ShardError(Exception):
    """The shard answered `ok: false` (the `code` says why)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def shard_of(view_id: str, shards: int) -> int:
    """The shard that owns `view_id` (stable across processes and restarts)."""
    return xxhash.xxh3_64_intdigest(view_id.encode()) % shards


class ShardHandle:
    """One shard worker process and the hub's client socket to it."""

    def __init__(self, index: int, endpoint: str, ctx: zmq.asyncio.Context,
                 on_exit: Callable[[ShardHandle, int], Awaitable[None]],
                 arena_dir: str | None = None) -> None:
        self.index = index
        self.endpoint = endpoint
        self.arena_dir = arena_dir
        self._ctx = ctx
        self._on_exit = on_exit
        self.proc: asyncio.subprocess.Process | None = None
        self.client: RpcClient | None = None
        self.up = False
        self.stopping = False
        self.restarts: list[float] = []
        self._died = asyncio.Event()
        self._watch: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        """The worker's process id while it runs."""
        return self.proc.pid if self.proc is not None and self.proc.returncode is None else None

    async def start(self, timeout: float = 30.0) -> None:
        """Spawn the worker and wait until it answers a ping."""
        self._died = asyncio.Event()
        arena = ["--arena-dir", self.arena_dir] if self.arena_dir is not None else []
        self.proc = await asyncio.create_subprocess_exec(
            # Dies with the hub (SIGKILL), even when the hub is killed: nothing else would
            # stop it. `ipc.lifeline` execs the shard in the same process (same pid).
            *lifeline_argv([sys.executable, "-m", "ssp.shard", "--index", str(self.index),
                            "--endpoint", self.endpoint, *arena]),
            # Its own session: SIGTERM to the SSP's process group reaches the hub, which
            # flushes and then stops the shards itself (a shard gone first is not a crash).
            start_new_session=True)
        if self.client is not None:
            self.client.close()
        self.client = RpcClient(self.endpoint, ctx=self._ctx)
        self._watch = asyncio.get_running_loop().create_task(self._watch_exit(self.proc))
        deadline = time.monotonic() + timeout
        while True:
            try:
                await self.client.call({"kind": "ping"}, timeout=1.0)
                break
            except RpcTimeout:
                if self.proc.returncode is not None or time.monotonic() > deadline:
                    raise ShardDown(f"shard {self.index} did not start") from None
                # A DEALER that connected before the ROUTER bound may have lost the ping:
                # a fresh socket retries cleanly.
                self.client.close()
                self.client = RpcClient(self.endpoint, ctx=self._ctx)
        self.up = True
        log.info("shard %d up (pid %s)", self.index, self.proc.pid)

    async def _watch_exit(self, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        if proc is not self.proc:
            return  # an older generation, replaced on purpose
        self.up = False
        self._died.set()
        if not self.stopping:
            log.error("shard %d (pid %d) exited with %s", self.index, proc.pid, code)
            await self._on_exit(self, code)

    async def call(self, kind: str, payload: dict[str, Any] | None = None,
                   timeout: float = 120.0) -> dict[str, Any]:
        """Send one request; ShardDown when the process dies first, ShardError on `ok: false`."""
        msg = {"kind": kind} if payload is None else encode_request(kind, payload)
        return await self.send(msg, timeout)

    async def send(self, msg: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
        """Send an already encoded request (the same bytes may go to every shard)."""
        if not self.up or self.client is None:
            raise ShardDown(f"shard {self.index} is down")
        call = asyncio.ensure_future(self.client.call(msg, timeout=timeout))
        died = asyncio.ensure_future(self._died.wait())
        try:
            done, _ = await asyncio.wait({call, died}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            died.cancel()
        if call not in done:
            call.cancel()
            raise ShardDown(f"shard {self.index} died during {msg.get('kind')}")
        try:
            reply = call.result()
        except RpcTimeout:
            raise ShardTimeout(f"shard {self.index} did not answer {msg.get('kind')} within "
                               f"{timeout:g}s") from None
        if not isinstance(reply, dict) or not reply.get("ok"):
            raise self._error(msg.get("kind"), reply)
        return reply

    def _error(self, kind: Any, reply: Any) -> ShardError:
        """The ShardError of a failed reply, never with an empty message (the transport's
        own failure reply nests `{error, message}` under `body`)."""
        if isinstance(reply, dict) and "ok" not in reply and isinstance(reply.get("body"), dict):
            reply = reply["body"]
        if not isinstance(reply, dict):
            return ShardError("bad_reply", f"shard {self.index} answered {kind} with "
                                           f"{reply!r:.200}")
        code = str(reply.get("error") or "internal")
        message = str(reply.get("message") or "")
        if not message:
            message = f"shard {self.index} failed on {kind} ({code}) without saying why"
        return ShardError(code, message)

    def kill(self) -> None:
        """SIGKILL the worker; its exit handler restarts and rebuilds it."""
        self.up = False
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()

    def may_restart(self) -> bool:
        """Record a restart; False when it crashed too often to try again."""
        now = time.monotonic()
        self.restarts = [t for t in self.restarts if now - t < RESTART_WINDOW_SECS] + [now]
        return len(self.restarts) <= MAX_RESTARTS

    async def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the worker and wait (SIGKILL after `timeout`)."""
        self.stopping = True
        self.up = False
        if self._watch is not None:
            self._watch.cancel()  # a deliberate stop is not a crash
        proc = self.proc
        if proc is not None and proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if self.client is not None:
            self.client.close()
            self.client = None
