"""``POST /admin/api/mcp``: the admin MCP endpoint, and the ASGI app the admin listener serves.

:class:`AdminAsgi` sits in front of the Falcon admin app: every request goes to Falcon except
``/admin/api/mcp``, which is served by the official ``mcp`` SDK (``Server`` with a
``StreamableHTTPSessionManager``, stateless, JSON responses). Both protocol modes of the SDK
work: the initialize handshake (protocol 2024-11-05 to 2025-11-25, each request its own POST,
no session id) and the per-request envelope of 2026-07-28 (``MCP-Protocol-Version`` header,
no handshake).

Before the SDK sees a request (its traffic does not pass Falcon's middleware):

* any method but POST is 405 (``GET`` would open a server-to-client stream and ``DELETE``
  end a session; a stateless endpoint has neither), ``Allow: POST``;
* a missing, malformed, unknown, expired or revoked bearer is 401, the admin listener's own
  body (``{error: unauthorized, message}``). A ``read`` token is let through: the endpoint is
  exempt from the read-only method rule and enforces scope per tool (spec Authentication 6);
* bodies are limited to 64 KiB (413), as on the other admin routes.

The SDK's Host/Origin check (DNS-rebinding protection) is off on purpose: the listener is
reached by other names than loopback (a service name, a load balancer), and the protection
guards servers that trust ambient credentials, while this endpoint needs a bearer that a page
of another origin cannot obtain (tokens live in the dashboard's local storage, never a cookie).

Tools (:mod:`scheduler.admin.mcptools`): ``tools/list`` shows every tool to a ``full`` token and
only the read tools to a ``read`` one. ``tools/call`` runs the tool's admin API request through
the same Falcon app, in process, with the caller's bearer: the answer, its status and its
permissions are the route's. A route's error, a ``read`` token calling a write tool, or bad
arguments come back as a tool error (``isError``: true, the error body as structured content
with its ``status``), never as an HTTP error of the MCP request.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlencode

from ipc.asgi import header as _header
from ipc.asgi import send_json as _send_json
from scheduler.admin.auth import bearer_token
from scheduler.admin.errors import AdminError, Unauthorized, error_body
from scheduler.admin.mcptools import ApiCall
from scheduler.admin.tokens import TokenAuthority

if TYPE_CHECKING:
    from scheduler.admin.mcpserver import McpEndpoint

log = logging.getLogger("scheduler.admin.mcp")

__all__ = ["MCP_PATH", "AdminAsgi", "InProcess"]

MCP_PATH = "/admin/api/mcp"
CALL_TIMEOUT_SECS = 60.0
_SCOPE_KEY = "svc.admin"  # where the dispatcher leaves the caller for the tool handlers

Scope = dict[str, Any]




class InProcess:
    """Calls the Falcon admin app as an ASGI client would, without a socket."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def request(self, outer: Scope, token: str, call: ApiCall
                      ) -> tuple[int, dict[str, str], bytes]:
        path = "/admin/api" + call.path
        body = b"" if call.body is None else json.dumps(call.body).encode()
        query = urlencode({k: str(v) for k, v in call.query.items()}).encode()
        headers = [(b"authorization", f"Bearer {token}".encode()),
                   (b"host", _header(outer, b"host") or b"localhost"),
                   (b"accept", b"application/json, text/event-stream")]
        if body:
            headers += [(b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())]
        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
                 "http_version": "1.1", "method": call.method, "scheme": "http",
                 "path": unquote(path), "raw_path": path.encode(), "root_path": "",
                 "query_string": query, "headers": headers,
                 "client": outer.get("client"), "server": outer.get("server")}
        finished = asyncio.Event()
        sent_body = False
        status = 500
        out_headers: dict[str, str] = {}
        chunks: list[bytes] = []

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            await finished.wait()  # a streaming route watches for the client going away
            return {"type": "http.disconnect"}

        async def send(msg: dict[str, Any]) -> None:
            nonlocal status
            if msg["type"] == "http.response.start":
                status = int(msg["status"])
                out_headers.update((k.decode().lower(), v.decode())
                                   for k, v in msg.get("headers", []))
            elif msg["type"] == "http.response.body":
                chunks.append(msg.get("body", b""))
                if not msg.get("more_body", False):
                    finished.set()

        try:
            await asyncio.wait_for(self.app(scope, receive, send), CALL_TIMEOUT_SECS)
        finally:
            finished.set()
        return status, out_headers, b"".join(chunks)




class AdminAsgi:
    """The admin listener's ASGI app: the MCP endpoint in front of the Falcon app.

    The SDK side (:mod:`scheduler.admin.mcpserver`) is imported and started on the endpoint's
    first request, in a task of its own that lives until the listener's lifespan ends (the
    SDK's task group must be entered and left in one task)."""

    def __init__(self, falcon_app: Any, tokens: TokenAuthority, version: str) -> None:
        self.falcon = falcon_app
        self.tokens = tokens
        self.version = version
        self._mcp_ready: asyncio.Future[McpEndpoint] | None = None
        self._mcp_stop = asyncio.Event()
        self._mcp_task: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        kind = scope.get("type")
        if kind == "lifespan":
            try:
                await self.falcon(scope, receive, send)
            finally:
                await self._stop_mcp()
            return
        if kind == "http" and scope.get("path", "").rstrip("/") == MCP_PATH:
            await self._mcp(scope, receive, send)
            return
        await self.falcon(scope, receive, send)

    async def _endpoint(self) -> McpEndpoint:
        if self._mcp_ready is None:
            self._mcp_ready = asyncio.get_running_loop().create_future()
            self._mcp_task = asyncio.create_task(self._run_mcp(self._mcp_ready),
                                                 name="admin-mcp")
        return await asyncio.shield(self._mcp_ready)

    async def _run_mcp(self, ready: asyncio.Future[McpEndpoint]) -> None:
        try:
            from scheduler.admin.mcpserver import McpEndpoint

            endpoint = McpEndpoint(InProcess(self.falcon), self.version, _SCOPE_KEY,
                                   CALL_TIMEOUT_SECS)
            async with endpoint.running():
                ready.set_result(endpoint)
                await self._mcp_stop.wait()
        except BaseException as e:
            if not ready.done():
                ready.set_exception(e if isinstance(e, Exception) else
                                    RuntimeError("the MCP endpoint stopped"))
                self._mcp_ready = None  # the next request tries again
            if not isinstance(e, Exception):
                raise
            log.exception("the admin MCP endpoint failed")

    async def _stop_mcp(self) -> None:
        self._mcp_stop.set()
        if self._mcp_task is not None:
            await asyncio.gather(self._mcp_task, return_exceptions=True)

    async def _mcp(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope.get("method") != "POST":
            await _send_json(send, 405, {"error": "method_not_allowed",
                                         "message": "the MCP endpoint is stateless: POST only"},
                             {"Allow": "POST"})
            return
        raw = _header(scope, b"authorization")
        token = bearer_token(raw.decode("latin-1") if raw is not None else None)
        try:
            if token is None:
                raise Unauthorized("missing or malformed Authorization header "
                                   "(want: Bearer <token>)")
            principal = await self.tokens.check(token)
        except Unauthorized as e:
            await _send_json(send, 401, error_body(e), {"WWW-Authenticate": "Bearer"})
            return
        except AdminError as e:  # the roster could not be read (503)
            await _send_json(send, e.status_code, error_body(e))
            return
        inner = dict(scope)
        inner[_SCOPE_KEY] = {"principal": principal, "token": token}
        endpoint = await self._endpoint()
        await endpoint.handle(inner, receive, send)
