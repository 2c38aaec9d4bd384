"""The HTTP/WebSocket listener: `/rpc` (WebSocket and POST), `/health`, `/version`.

aiohttp serves both the WebSocket and the plain HTTP routes from one event loop, is already a
dependency (the SDK uses it), and gives us the raw binary frames without re-framing, which is
what a CBOR pass-through needs.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import logging
import weakref

from aiohttp import WSMsgType, web

from dbhost import memory
from dbhost.config import HostConfig
from dbhost.connection import RpcConnection
from dbhost.engine import Engine, EngineError
from dbhost.frames import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    WRITE_METHODS,
    RpcError,
    error_frame,
    parse_request,
    restore_session,
    with_session,
)
from dbhost.live import LiveHub
from dbhost.wsbatch import HIGH_WATER_BYTES, MAX_BATCH_BYTES, frames_of

log = logging.getLogger("dbhost.server")

CBOR = "application/cbor"
# Requests a single HTTP call cannot serve: they need a connection that stays open.
HTTP_UNSUPPORTED = frozenset({"live", "kill", "attach", "detach", "begin", "commit", "cancel"})
MAX_IN_FLIGHT_PER_CONNECTION = 64
MAX_OUTBOX_FRAMES = 100_000


def hard_frame_cap(max_frame_bytes: int) -> int:
    """Frames above the limit get an RPC error; above this cap the socket is closed (1009),
    so a client cannot make the host buffer unbounded data."""
    return max(4 * max_frame_bytes, max_frame_bytes + (1 << 20))


class DbHostServer:
    """The listener plus the engine and the LIVE hub it serves."""

    def __init__(self, config: HostConfig, engine: Engine) -> None:
        self.config = config
        self.engine = engine
        self.live = LiveHub(engine, config.live_poll_interval_ms / 1000.0, config.user,
                            config.password)
        self.sockets: weakref.WeakSet[web.WebSocketResponse] = weakref.WeakSet()
        self.connections = 0
        self.app = web.Application(client_max_size=hard_frame_cap(config.max_frame_bytes))
        self.app.router.add_get("/rpc", self.rpc_ws)
        self.app.router.add_post("/rpc", self.rpc_http)
        self.app.router.add_get("/health", self.health)
        self.app.router.add_get("/version", self.version)
        self.app.router.add_get("/debug/statements", self.statements)
        self.app.router.add_delete("/debug/statements", self.statements)
        self.app.router.add_get("/debug/memory", self.memory)
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Start the LIVE hub and listen."""
        await self.live.start()
        self.runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.config.host, self.config.port)
        await site.start()

    async def stop(self) -> None:
        """Close every client, stop the hub and the listener (the engine is closed by main)."""
        for ws in list(self.sockets):
            await ws.close(code=1001, message=b"server shutting down")
        await self.live.stop()
        if self.runner is not None:
            await self.runner.cleanup()

    # -- plain HTTP ---------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        """GET /health: 200 while the engine answers."""
        try:
            await self.engine.call("version")
        except EngineError as exc:
            return web.json_response({"status": "error", "error": exc.message}, status=503)
        return web.json_response({
            "status": "ok",
            "engine": self.engine.version,
            "storage": "memory" if self.config.path is None else "surrealkv",
            "connections": self.connections,
            "live_queries": self.live.count(),
            # feed changes built into rows for LIVE delivery (the rest are decoded in C only)
            "live_changes_built": self.live.changes_built,
            # sets that showed after a later commit was read (dbhost.live's sweeps find them)
            "live_late_sets": self.live.late_sets,
        })

    async def version(self, request: web.Request) -> web.Response:
        """GET /version: the engine's version string."""
        return web.json_response({"version": self.engine.version, "service": "svc-db"})

    async def statements(self, request: web.Request) -> web.Response:
        """GET /debug/statements[?limit=N]: engine time per statement shape (`dbhost.stats`);
        DELETE starts the counters again. The root user's credentials (HTTP Basic) only: the
        shapes name the application's tables and fields."""
        denied = self._root_only(request)
        if denied is not None:
            return denied
        stats = self.engine.stats
        if request.method == "DELETE":
            stats.reset()
            return web.json_response({"reset": True})
        raw = request.query.get("limit", "50")
        if not raw.isdigit() or not 1 <= int(raw) <= 500:
            return web.json_response(
                {"error": f"limit must be an integer from 1 to 500, got {raw[:20]!r}"},
                status=400)
        return web.json_response(stats.report(int(raw)))

    async def memory(self, request: web.Request) -> web.Response:
        """GET /debug/memory: the resident set beside the host's Python heap and the sizes of
        its own structures (`dbhost.memory`); root credentials only, as the statements."""
        denied = self._root_only(request)
        if denied is not None:
            return denied
        return web.json_response(memory.report(
            connections=self.connections, live_queries=self.live.count(),
            live_feeds=len(self.live.feeds), live_late_sets=self.live.late_sets,
            live_late_by_ms=self.live.late_report(),
            statement_shapes=self.engine.stats.shape_count,
            admission=self.engine.admission.snapshot()))

    def _root_only(self, request: web.Request) -> web.Response | None:
        """None for a request with the root user's credentials (HTTP Basic, compared in
        constant time), else the 401 to answer."""
        auth = request.headers.get("Authorization", "")
        user, _, password = _basic_credentials(auth[6:]) if auth.startswith("Basic ") else (
            "", "", "")
        ok_user = hmac.compare_digest(user.encode(), self.config.user.encode())
        ok_pass = hmac.compare_digest(password.encode(), self.config.password.encode())
        if auth.startswith("Basic ") and ok_user and ok_pass:
            return None
        return web.json_response(
            {"error": "the root user's credentials are required (HTTP Basic)"}, status=401,
            headers={"WWW-Authenticate": 'Basic realm="svc-db"'})

    # -- WebSocket RPC ------------------------------------------------------------------

    async def rpc_ws(self, request: web.Request) -> web.StreamResponse:
        """GET /rpc upgraded to a WebSocket speaking CBOR RPC."""
        ws = web.WebSocketResponse(protocols=("cbor",), compress=False,
                                   max_msg_size=hard_frame_cap(self.config.max_frame_bytes))
        await ws.prepare(request)
        # Every outgoing frame (replies and notifications) goes through one queue and one
        # writer task: order is kept, and a slow client never stalls the LIVE feed loop that
        # serves everyone. A client that lets the queue grow past the cap is disconnected
        # (a notification is never dropped while the connection lives).
        outbox: asyncio.Queue[bytes | None] = asyncio.Queue()

        transport = request.transport

        async def writer() -> None:
            while (frame := await outbox.get()) is not None:
                # what else is queued goes out with it, in one write (dbhost.wsbatch)
                batch = [frame]
                size = len(frame)
                ending = False
                while size < MAX_BATCH_BYTES and not outbox.empty():
                    more = outbox.get_nowait()
                    if more is None:
                        ending = True
                        break
                    batch.append(more)
                    size += len(more)
                try:
                    if (len(batch) > 1 and transport is not None and not ws.closed
                            and not transport.is_closing()
                            and transport.get_write_buffer_size() < HIGH_WATER_BYTES):
                        transport.write(frames_of(batch))
                    else:
                        for one in batch:
                            await ws.send_bytes(one)
                except (ConnectionError, RuntimeError):
                    return
                if ending:
                    return

        async def send(frame: bytes) -> None:
            if ws.closed:
                raise ConnectionError("connection closed")
            if outbox.qsize() >= MAX_OUTBOX_FRAMES:
                log.warning("connection %s is not reading (%d frames queued): closing it",
                            conn.conn_id, outbox.qsize())
                asyncio.get_running_loop().create_task(
                    ws.close(code=1008, message=b"client too slow"))
                raise ConnectionError("client too slow")
            outbox.put_nowait(frame)

        writer_task = asyncio.create_task(writer())

        peer = request.remote or "?"
        conn = RpcConnection(self.engine, self.live, send, peer)
        try:
            await conn.open()
        except EngineError as exc:
            log.error("could not attach a session for %s: %s", peer, exc.message)
            await ws.close(code=1011, message=b"engine unavailable")
            return ws
        self.sockets.add(ws)
        self.connections += 1
        log.info("connection open id=%s peer=%s", conn.conn_id, peer)
        tasks: set[asyncio.Task[None]] = set()
        slots = asyncio.Semaphore(MAX_IN_FLIGHT_PER_CONNECTION)

        async def serve(data: bytes | str) -> None:
            try:
                try:
                    req = parse_request(data, self.config.max_frame_bytes)
                except RpcError as exc:
                    log.warning("bad frame on connection %s: %s", conn.conn_id, exc.message)
                    reply = error_frame(exc.req_id, exc.code, exc.message)
                else:
                    try:
                        reply = await conn.handle(req)
                    except (EngineError, OSError, RuntimeError) as exc:
                        # The engine itself failed (not an error reply): answer, stay up.
                        log.error("%s request failed on connection %s: %s", req.method,
                                  conn.conn_id, exc)
                        reply = error_frame(req.id, INTERNAL_ERROR, "internal error")
                await send(reply)
            except (ConnectionError, RuntimeError) as exc:
                log.debug("reply to closed connection %s dropped: %s", conn.conn_id, exc)
            except Exception:  # the last guard of a client's request task
                log.exception("request failed on connection %s", conn.conn_id)
            finally:
                slots.release()

        try:
            async for msg in ws:
                if msg.type in (WSMsgType.BINARY, WSMsgType.TEXT):
                    await slots.acquire()
                    task = asyncio.create_task(serve(msg.data))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                elif msg.type == WSMsgType.ERROR:
                    log.warning("connection %s error: %s", conn.conn_id, ws.exception())
        finally:
            for task in list(tasks):
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            await conn.close()
            outbox.put_nowait(None)
            await writer_task
            self.connections -= 1
            log.info("connection close id=%s peer=%s code=%s", conn.conn_id, peer, ws.close_code)
        return ws

    # -- HTTP RPC -----------------------------------------------------------------------

    async def rpc_http(self, request: web.Request) -> web.Response:
        """POST /rpc: one CBOR request on a temporary session built from the headers."""
        body = await request.read()
        try:
            req = parse_request(body, self.config.max_frame_bytes)
            if req.method in HTTP_UNSUPPORTED:
                raise RpcError(METHOD_NOT_FOUND,
                               f"method {req.method} needs a WebSocket connection", req.id)
        except RpcError as exc:
            return web.Response(body=error_frame(exc.req_id, exc.code, exc.message),
                                content_type=CBOR)
        try:
            sid = await self.engine.attach()
        except EngineError as exc:
            return web.Response(body=error_frame(req.id, INTERNAL_ERROR, exc.message),
                                content_type=CBOR, status=503)
        try:
            failure = await self._prepare_http_session(request, sid)
            if failure is not None:
                return web.Response(body=error_frame(req.id, failure.code, failure.message),
                                    content_type=CBOR)
            if req.method == "query" and self.live.query_needs_host(req.query_text()):
                return web.Response(
                    body=error_frame(req.id, METHOD_NOT_FOUND,
                                     "LIVE and KILL need a WebSocket connection"),
                    content_type=CBOR)
            try:
                # a re-addressed session decodes the whole frame (Request.fields) and a value
                # in it may be refused there
                frame = with_session(req, sid)
                reply = await self.engine.execute(
                    frame, (req.id, req.method, sid),
                    req.query_text() if req.method == "query" else None)
            except RpcError as exc:
                return web.Response(body=error_frame(req.id, exc.code, exc.message),
                                    content_type=CBOR)
            if req.method in WRITE_METHODS:
                self.live.wake()
            return web.Response(body=restore_session(reply, sid, req.session),
                                content_type=CBOR)
        finally:
            await self.engine.detach(sid)

    async def _prepare_http_session(self, request: web.Request, sid: str) -> EngineError | None:
        auth = request.headers.get("Authorization", "")
        try:
            if auth.startswith("Bearer "):
                await self.engine.call("authenticate", [auth[7:].strip()], sid)
            elif auth.startswith("Basic "):
                user, _, password = _basic_credentials(auth[6:])
                await self.engine.call("signin", [{"user": user, "pass": password}], sid)
            ns = request.headers.get("Surreal-NS") or request.headers.get("NS")
            db = request.headers.get("Surreal-DB") or request.headers.get("DB")
            if ns or db:
                await self.engine.call("use", [ns, db], sid)
        except EngineError as exc:
            return exc
        return None


def _basic_credentials(encoded: str) -> tuple[str, str, str]:
    try:
        text = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return "", "", ""
    return text.partition(":")

