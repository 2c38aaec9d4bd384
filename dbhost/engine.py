"""The embedded SurrealDB engine and the host's own calls into it."""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from typing import Any

from surrealdb_embedded import AsyncEmbeddedDB

from dbclient.cbor import decode, decode_shallow, encode
from dbhost.admission import Admission
from dbhost.frames import INVALID_PARAMS, RpcError
from dbhost.nodeengine import Head, NodeEngineProcess
from dbhost.stats import StatementStats

# The host's own requests are counted under their own shapes (issue 31: who reads the feed).
OWN_PREFIX = "host:"

log = logging.getLogger("dbhost.engine")


class EngineError(Exception):
    """The engine answered an internal call with an error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class StatementError(EngineError):
    """One statement of an internal query failed."""


def quote_string(value: str) -> str:
    """A SurrealQL single-quoted string literal (for the few places that take no parameter)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_ident(name: str) -> str:
    """A SurrealQL identifier, backtick-quoted when it is not plain."""
    if name and (name[0].isalpha() or name[0] == "_") and all(
            c.isalnum() or c == "_" for c in name):
        return name
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


class Engine:
    """One embedded engine; the default (owner) session belongs to the host alone."""

    def __init__(self, url: str, *, node: bool = False,
                 allow_net: tuple[str, ...] = (), max_inflight: int = 0) -> None:
        self.url = url
        # Both builds take and return the same CBOR frames (`dbhost.nodeengine`).
        self._db: AsyncEmbeddedDB | NodeEngineProcess = (
            NodeEngineProcess(url, allow_net) if node else AsyncEmbeddedDB(url))
        self._ids = itertools.count(1)
        self.version = "unknown"
        self.stats = StatementStats()  # `GET /debug/statements`
        # ordinary requests inside the engine at once; the service lane first (`dbhost.admission`)
        self.admission = Admission(max_inflight)

    async def start(self) -> None:
        """Open the storage; raises when it cannot (for instance a locked directory)."""
        await self._db.connect()
        self.version = str(await self.call("version"))

    async def close(self) -> None:
        """Close the engine, flushing storage."""
        await self._db.close()

    async def execute(self, frame: bytes, head: Head | None = None,
                      text: str | None = None, service: bool = False) -> bytes:
        """Pass an encoded request through; the reply comes back encoded. `head` is the
        request's (id, method, engine session) when the caller has read them: the Node
        build's process needs them and need not decode the frame again. `text` is a `query`
        request's text, for the statement counters (`dbhost.stats`). `service`: the request
        came on a connection of the view service's lane (`dbhost.admission`).

        The engine raises (instead of answering) when it cannot decode a request's values,
        e.g. an integer beyond 64 bits or an unknown CBOR tag: that becomes an RPC error
        reply, so the client is answered rather than left waiting for its timeout.
        """
        try:
            result = await self._execute(frame, head, text, service=service)
        except ValueError as exc:
            raise RpcError(INVALID_PARAMS, f"the engine could not decode the request: {exc}") from None
        return result

    async def call(self, method: str, params: list[Any] | None = None,
                   session: str | None = None) -> Any:
        """Call one RPC method and return its result; raises EngineError on an error reply."""
        reply = await self.call_raw(method, params, session)
        err = reply.get("error")
        if err is not None:
            raise EngineError(int(err.get("code", -32000)), str(err.get("message", err)))
        return reply.get("result")

    async def call_raw(self, method: str, params: list[Any] | None = None,
                       session: str | None = None) -> dict[str, Any]:
        """Call one RPC method and return the whole decoded reply (result or error)."""
        reply: dict[str, Any] = decode(await self._call_bytes(method, params, session))
        return reply

    async def call_shallow(self, method: str, params: list[Any] | None = None,
                           session: str | None = None) -> dict[str, Any]:
        """Like :meth:`call_raw`, but the reply is decoded shallowly (SurrealDB's tags stay
        ``cbor2.CBORTag``, `dbclient.cbor.decode_shallow`): for a caller that keeps a small
        part of a large reply and builds only that part (`dbclient.cbor.materialize`)."""
        reply: dict[str, Any] = decode_shallow(await self._call_bytes(method, params, session))
        return reply

    async def _call_bytes(self, method: str, params: list[Any] | None,
                          session: str | None) -> bytes:
        req: dict[str, Any] = {"id": f"host-{next(self._ids)}", "method": method}
        if params is not None:
            req["params"] = params
        if session is not None:
            req["session"] = session
        text = params[0] if method == "query" and params and isinstance(params[0], str) else None
        return await self._execute(encode(req), (req["id"], method, session), text, own=True)

    async def _execute(self, frame: bytes, head: Head | None, text: str | None,
                       own: bool = False, service: bool = False) -> bytes:
        """One frame through the engine, timed for the statement counters; only the Node
        build's process takes the `head`. `own`: the host's own request (its LIVE feed reads
        and checks), counted apart from the clients' requests of the same text; it goes in
        at once, as the service lane's do (`dbhost.admission`)."""
        admission = self.admission
        lane = own or service
        await admission.enter(lane)
        try:
            return await self._timed(frame, head, text, own)
        finally:
            admission.leave(lane)

    async def _timed(self, frame: bytes, head: Head | None, text: str | None,
                     own: bool) -> bytes:
        db = self._db
        stats = self.stats
        method = head[1] if head is not None else "?"
        shape = stats.shape_of(OWN_PREFIX + method if own else method, text)
        began = time.perf_counter()
        try:
            if isinstance(db, NodeEngineProcess):
                result: bytes = await db.execute(frame, head)
            else:
                result = await db.execute(frame)
        except BaseException:
            stats.record(shape, time.perf_counter() - began, failed=True)
            raise
        stats.record(shape, time.perf_counter() - began, reply_bytes=len(result))
        return result

    async def query(self, text: str, variables: dict[str, Any] | None = None,
                    session: str | None = None) -> list[Any]:
        """Run a query and return each statement's result; raises on the first failed one."""
        results = await self.call("query", [text, variables or {}], session)
        out = []
        for stmt in results:
            if stmt.get("status") != "OK":
                raise StatementError(-32000, str(stmt.get("result")))
            out.append(stmt.get("result"))
        return out

    async def attach(self) -> str:
        """A new isolated session (anonymous until it signs in)."""
        sid = str(uuid.uuid4())
        await self.call("attach", session=sid)
        return sid

    async def detach(self, sid: str) -> None:
        """Drop a session made by attach; never called for the owner session."""
        try:
            await self.call("detach", session=sid)
        except EngineError as exc:
            log.warning("detach of a session failed: %s", exc.message)

    async def ensure_root_user(self, user: str, password: str) -> None:
        """Create the root owner on first start; an existing user keeps its password."""
        # DEFINE USER takes no parameter for the password, so it is quoted as a literal; the
        # statement is never logged.
        await self.query(
            f"DEFINE USER IF NOT EXISTS {quote_ident(user)} ON ROOT "
            f"PASSWORD {quote_string(password)} ROLES OWNER")
