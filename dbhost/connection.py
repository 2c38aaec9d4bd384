"""One client connection: its engine sessions, its requests and its live queries."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from dbclient.cbor import decode, encode
from dbclient.config import LANE_VARIABLE, SERVICE_LANE
from dbhost.engine import Engine
from dbhost.frames import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    WRITE_METHODS,
    Request,
    RpcError,
    error_frame,
    restore_session,
    result_frame,
    with_session,
)

if TYPE_CHECKING:
    from dbhost.live import LiveHub

log = logging.getLogger("dbhost.connection")

Sender = Callable[[bytes], Awaitable[None]]


class RpcConnection:
    """The state of one WebSocket client.

    The connection owns one engine session made with `attach` when it opens, plus one per
    client-made session (the SDK's `attach`/`new_session`), and detaches them all on close.
    """

    def __init__(self, engine: Engine, live: LiveHub, send: Sender, peer: str) -> None:
        self.engine = engine
        self.live = live
        self.send = send
        self.peer = peer
        self.conn_id = uuid.uuid4().hex[:12]
        self.session = ""
        self.client_sessions: dict[str, str] = {}
        self.closed = False
        # The view service's lane (`dbhost.admission`): declared by `let _00_lane = 'service'`,
        # as `dbclient.Database` does for the scheduler's and the SSPs' connections.
        self.service = False

    async def push(self, frame: bytes) -> None:
        """Push an id-less notification frame, ignoring a connection that is going away."""
        if self.closed:
            return
        try:
            await self.send(frame)
        except (ConnectionError, RuntimeError):
            log.debug("notification to closed connection %s dropped", self.conn_id)

    async def open(self) -> None:
        """Attach the connection's own engine session."""
        self.session = await self.engine.attach()

    async def close(self) -> None:
        """Stop the connection's live queries and detach its sessions."""
        self.closed = True
        await self.live.kill_connection(self)
        for sid in list(self.client_sessions.values()) + [self.session]:
            if sid:
                await self.engine.detach(sid)
        self.client_sessions.clear()

    def engine_session(self, client_session: Any) -> str:
        """The engine session a request addresses; raises for an unknown client session."""
        if client_session is None:
            return self.session
        sid = self.client_sessions.get(str(client_session))
        if sid is None:
            raise RpcError(INVALID_REQUEST, f"session not found: {client_session}")
        return sid

    async def handle(self, req: Request) -> bytes:
        """Answer one request; never raises for a bad request."""
        try:
            return await self._dispatch(req)
        except RpcError as exc:
            return error_frame(req.id if exc.req_id is None else exc.req_id, exc.code,
                               exc.message)

    async def _dispatch(self, req: Request) -> bytes:
        m = req.method
        if m == "attach":
            return await self._attach(req)
        if m == "detach":
            return await self._detach(req)
        sid = self.engine_session(req.session)
        if m == "live":
            return self._reply(req, await self.live.rpc_live(self, sid, req.params, req.session))
        if m == "kill":
            await self.live.rpc_kill(self, req.params)
            return self._reply(req, None)
        if m == "query" and self.live.query_needs_host(req.query_text()):
            return self._reply(req, await self.live.run_query(self, sid, req.params, req.session))
        if m == "reset":
            # SurrealDB's reset also ends the session's live queries.
            await self.live.kill_session(self, sid)
        if m == "let":
            self._note_lane(req)
        reply = await self.engine.execute(with_session(req, sid), (req.id, m, sid),
                                          req.query_text() if m == "query" else None,
                                          service=self.service)
        if m in WRITE_METHODS:
            self.live.wake()
        return restore_session(reply, sid, req.session)

    def _note_lane(self, req: Request) -> None:
        """`let _00_lane = 'service'` puts the connection in the service's lane (any other
        value takes it out); the variable still reaches the engine, as any `let` does."""
        p = req.shallow.get("params")
        if isinstance(p, list) and len(p) == 2 and p[0] == LANE_VARIABLE:
            self.service = p[1] == SERVICE_LANE

    def _reply(self, req: Request, result: Any) -> bytes:
        if req.session is None:
            return result_frame(req.id, result)
        return encode({"id": req.id, "result": result, "session": req.session})

    async def _attach(self, req: Request) -> bytes:
        if req.session is None:
            raise RpcError(INVALID_PARAMS, "attach needs a session id", req.id)
        key = str(req.session)
        if key in self.client_sessions:
            raise RpcError(INVALID_PARAMS, f"session already attached: {key}", req.id)
        self.client_sessions[key] = await self.engine.attach()
        return self._reply(req, None)

    async def _detach(self, req: Request) -> bytes:
        if req.session is None:
            raise RpcError(INVALID_PARAMS, "detach needs a session id", req.id)
        sid = self.client_sessions.pop(str(req.session), None)
        if sid is None:
            raise RpcError(INVALID_REQUEST, f"session not found: {req.session}", req.id)
        await self.live.kill_session(self, sid)
        await self.engine.detach(sid)
        return self._reply(req, None)


def decode_reply(reply: bytes) -> Any:
    """Decode an engine reply (for tests and the HTTP path's error checks)."""
    return decode(reply)
