"""The engine as SurrealDB's Node.js build in a child process (`svc-db --engine node`).

Why: the Python embedded build has no `http::*` functions ("Remote HTTP request functions are
not enabled": the feature is compiled out), so the spec's default ingest transport, database
events calling the scheduler's `/ingest` inside the writing transaction, cannot run on it. The
Node build (`@surrealdb/node`, declared in `dbhost/node/package.json`, installed by the ops
scripts) has them, behind the network-target capability this host allows per target
(`SVC_DB_ALLOW_NET`).

The child (`dbhost/node/engine.mjs`) only executes RPC frames; sessions, LIVE, credentials
and limits stay in this host, so `Engine` sees the same `connect`/`execute`/`close` surface as
with the embedded build. Frames go over the child's stdin/stdout, each tagged so replies may
come back in any order. The child dies with this process (parent-death signal, and its stdin
closing).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import struct
from pathlib import Path
from typing import Any

from dbclient.cbor import decode, encode
from ipc.lifeline import lifeline_argv

log = logging.getLogger("dbhost.nodeengine")

SCRIPT = Path(__file__).resolve().parent / "node" / "engine.mjs"
_REQUEST = struct.Struct(">II")
_REPLY = struct.Struct(">IIB")
_OPEN_TAG = 0
EXIT_ENGINE_LOST = 4  # as svc-db's exit when the engine cannot open


# A request's id, method and the engine session it is addressed to (None: the owner's).
Head = tuple[Any, Any, Any]

_ERROR_HEAD = b"\xa1\x65error"  # CBOR: a map of one entry whose key is the text "error"


# The Node build has no switch for authentication: a session that has not signed in acts as
# the root owner. The embedded build refuses it. This host keeps the embedded behaviour by
# letting a session that has not signed in (or authenticated with a token) use only these.
ANONYMOUS_METHODS = frozenset({
    "attach", "detach", "signin", "signup", "authenticate", "invalidate", "reset", "use",
    "ping", "version", "let", "unset", "info",
})
AUTH_METHODS = frozenset({"signin", "signup", "authenticate"})
NOT_SIGNED_IN = {"code": -32002, "kind": "NotAllowed",
                 "message": "Not enough permissions to perform this action: sign in first"}


def as_embedded_reply(rid: Any, reply: bytes) -> bytes:
    """The Node build answers with the bare result, or `{error}`; the embedded build, and the
    RPC protocol clients expect, with `{id, result}` or `{id, error}`. CBOR items concatenate,
    so the result's bytes are kept as they are (no decode and re-encode of its values)."""
    key = "result"
    if reply.startswith(_ERROR_HEAD):
        value = decode(reply)
        err = value.get("error") if isinstance(value, dict) else None
        if isinstance(err, dict) and "code" in err and "message" in err:
            key, reply = "error", encode(err)
    if rid is None:
        return b"\xa1" + encode(key) + reply
    return b"\xa2" + encode("id") + encode(rid) + encode(key) + reply


def reply_is_error(reply: bytes) -> bool:
    value = decode(reply)
    return isinstance(value, dict) and "error" in value


class NodeEngineUnavailable(RuntimeError):
    """Node, or the engine package, is missing or would not open the storage."""


def node_modules_present() -> bool:
    """Whether the Node engine's package is installed (`ops/run` and `ops/test` install it)."""
    return (SCRIPT.parent / "node_modules" / "@surrealdb" / "node").is_dir()


class NodeEngineProcess:
    """`connect`/`execute`/`close` over the child's pipe; the embedded build's surface."""

    def __init__(self, url: str, allow_net: tuple[str, ...] = ()) -> None:
        self.url = url
        self.allow_net = allow_net
        self._proc: asyncio.subprocess.Process | None = None
        self._tags = 0
        self._waiting: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._stderr: asyncio.Task[None] | None = None
        self._closed_reason = "the Node engine is not running"
        self._signed_in: set[Any] = set()

    async def connect(self) -> None:
        node = shutil.which("node")
        if node is None:
            raise NodeEngineUnavailable("--engine node needs Node.js 20 or later on PATH")
        if not node_modules_present():
            raise NodeEngineUnavailable(
                f"--engine node needs its package installed: npm ci in {SCRIPT.parent} "
                "(ops/run and ops/test do this)")
        env = dict(os.environ)
        env["SVC_DB_ALLOW_NET"] = ",".join(self.allow_net)
        # The child never needs the host's credentials.
        for key in ("SVC_DB_USER", "SVC_DB_PASS", "SVC_AUTH_SECRET"):
            env.pop(key, None)
        self._proc = await asyncio.create_subprocess_exec(
            *lifeline_argv([node, str(SCRIPT), self.url]),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env, limit=1 << 26)
        opened: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        self._waiting[_OPEN_TAG] = opened
        self._reader = asyncio.create_task(self._read_replies())
        self._stderr = asyncio.create_task(self._log_stderr())
        status, payload = await opened
        if status != 0:
            await self.close()
            raise NodeEngineUnavailable(
                f"the Node engine could not open {self.url}: {payload.decode(errors='replace')}")

    async def execute(self, frame: bytes, head: Head | None = None) -> bytes:
        """Run one request frame; `head` is its (id, method, session) when the caller has
        already read them (the host's RPC paths), so the frame is not decoded twice."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.returncode is not None:
            raise ConnectionError(self._closed_reason)
        if head is None:
            req = decode(frame)
            if not isinstance(req, dict):
                raise ValueError("an RPC request is a CBOR map")
            head = (req.get("id"), req.get("method"), req.get("session"))
        rid, method, session = head
        # A request without a session is the host's own (its owner session); a client's
        # always names the session the host made for it.
        if (session is not None and method not in ANONYMOUS_METHODS
                and session not in self._signed_in):
            return encode({"id": rid, "error": NOT_SIGNED_IN} if rid is not None
                          else {"error": NOT_SIGNED_IN})
        self._tags = self._tags % 0xFFFFFFFF + 1
        tag = self._tags
        fut: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        self._waiting[tag] = fut
        proc.stdin.write(_REQUEST.pack(len(frame), tag) + frame)
        await proc.stdin.drain()
        status, payload = await fut
        if status != 0:
            # As the embedded build raises ValueError for a request it cannot decode.
            raise ValueError(payload.decode(errors="replace"))
        reply = as_embedded_reply(rid, payload)
        if method in AUTH_METHODS and session is not None:
            if reply_is_error(reply):
                self._signed_in.discard(session)
            else:
                self._signed_in.add(session)
        elif method in ("invalidate", "detach", "reset") and session is not None:
            self._signed_in.discard(session)
        return reply

    async def close(self) -> None:
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()  # the child frees the engine (flushing storage) and exits
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            log.warning("the Node engine did not stop within 10 s; killing it")
            proc.kill()
            await proc.wait()
        for task in (self._reader, self._stderr):
            if task is not None:
                await asyncio.gather(task, return_exceptions=True)

    async def _read_replies(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        out = self._proc.stdout
        try:
            while True:
                head = await out.readexactly(_REPLY.size)
                length, tag, status = _REPLY.unpack(head)
                payload = await out.readexactly(length)
                fut = self._waiting.pop(tag, None)
                if fut is not None and not fut.done():
                    fut.set_result((status, payload))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        self._closed_reason = "the Node engine exited"
        if self._proc is not None:
            # Not stopped by close(): the engine, and with it the data, is gone. A host that
            # kept answering /health would hide that from its supervisor.
            log.error("the Node engine exited unexpectedly; the host stops (exit %d)",
                      EXIT_ENGINE_LOST)
            os._exit(EXIT_ENGINE_LOST)
        waiting, self._waiting = self._waiting, {}
        for fut in waiting.values():
            if not fut.done():
                fut.set_result((1, self._closed_reason.encode()))

    async def _log_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        async for line in self._proc.stderr:
            text = line.decode(errors="replace").rstrip()
            # The 3.0.2 build prints debugging output (dbg!) on stderr; only a panic or
            # a failure of the script itself is worth more than a debug line.
            level = (logging.ERROR if "panicked" in text or text.startswith("Error")
                     else logging.DEBUG)
            log.log(level, "node engine: %s", text)
