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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import unquote, urlencode

import jsonschema
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from scheduler.admin.auth import bearer_token
from scheduler.admin.errors import AdminError, Unauthorized, error_body
from scheduler.admin.mcptools import TOOLS, AdminTool, ApiCall, tool_named
from scheduler.admin.tokens import Principal, TokenAuthority

log = logging.getLogger("scheduler.admin.mcp")

__all__ = ["MCP_PATH", "AdminAsgi", "McpEndpoint"]

MCP_PATH = "/admin/api/mcp"
MAX_BODY = 64 * 1024
CALL_TIMEOUT_SECS = 60.0
_SCOPE_KEY = "svc.admin"  # where the dispatcher leaves the caller for the tool handlers
READ_ONLY_MESSAGE = "this token is read-only: it may only use the read tools"

Scope = dict[str, Any]


async def _send_json(send: Any, status: int, body: Any, headers: dict[str, str] | None = None
                     ) -> None:
    data = json.dumps(body).encode()
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    hdrs += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": data})


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


def _header(scope: Scope, name: bytes) -> bytes | None:
    for k, v in scope.get("headers", []):
        if k.lower() == name:
            return bytes(v)
    return None


class McpEndpoint:
    """The SDK server and its session manager, with the admin tools."""

    def __init__(self, falcon_app: Any, version: str) -> None:
        self.inproc = InProcess(falcon_app)
        self.server: Server[Any] = Server(
            "svc-scheduler-admin", version=version,
            instructions="Operate a surreal-views cluster: read its state (overview, views, "
                         "presence, jobs, incidents, logs) and, with a full token, restart SSPs "
                         "or the scheduler. Restarts answer an operation: follow it with "
                         "operations_list until its status is done or failed.",
            on_list_tools=self._list_tools, on_call_tool=self._call_tool,
            get_tool_input_schema=lambda name: (t.input_schema() if (t := tool_named(name))
                                                else None))
        self.manager = StreamableHTTPSessionManager(
            self.server, json_response=True, stateless=True, max_request_body_size=MAX_BODY,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False))

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    async def handle(self, scope: Scope, receive: Any, send: Any) -> None:
        await self.manager.handle_request(scope, receive, send)

    # ------------------------------------------------------------------ tools
    @staticmethod
    def _caller(ctx: Any) -> tuple[Principal, str, Scope] | None:
        req = getattr(ctx, "request", None)
        scope = getattr(req, "scope", None)
        found = scope.get(_SCOPE_KEY) if isinstance(scope, dict) else None
        if found is None:
            return None
        principal: Principal = found["principal"]
        token: str = found["token"]
        return principal, token, scope if isinstance(scope, dict) else {}

    @staticmethod
    def _tool(t: AdminTool) -> types.Tool:
        return types.Tool(
            name=t.name, title=t.title, description=t.description,
            input_schema=t.input_schema(),
            annotations=types.ToolAnnotations(
                title=t.title, read_only_hint=t.read_only,
                destructive_hint=t.kind == "destructive",
                idempotent_hint=t.read_only, open_world_hint=False))

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        caller = self._caller(ctx)
        full = caller is not None and caller[0].scope == "full"
        return types.ListToolsResult(tools=[self._tool(t) for t in TOOLS
                                            if full or t.read_only])

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams
                         ) -> types.CallToolResult:
        caller = self._caller(ctx)
        if caller is None:  # the dispatcher always sets it; defensive
            return _tool_error(401, {"error": "unauthorized", "message": "no bearer"})
        principal, token, scope = caller
        t = tool_named(params.name)
        if t is None:
            return _tool_error(404, {"error": "not_found",
                                     "message": f"no tool {params.name[:80]}"})
        if not t.read_only and principal.scope != "full":
            return _tool_error(403, {"error": "forbidden", "code": "read_only",
                                     "message": READ_ONLY_MESSAGE})
        args = dict(params.arguments or {})
        try:
            jsonschema.validate(args, t.input_schema())
        except jsonschema.ValidationError as e:
            where = "/".join(str(p) for p in e.absolute_path) or "arguments"
            return _tool_error(400, {"error": "invalid", "message": f"{where}: {e.message}"})
        try:
            call = t.request(args)
        except ValueError as e:  # an argument that cannot be put in its route's path
            return _tool_error(400, {"error": "invalid", "message": str(e)})
        try:
            status, headers, raw = await self.inproc.request(scope, token, call)
        except TimeoutError:
            return _tool_error(504, {"error": "timeout", "message": "the admin API did not "
                                     f"answer within {CALL_TIMEOUT_SECS:.0f}s"})
        ctype = headers.get("content-type", "")
        body: Any
        if ctype.startswith("application/json"):
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
        else:
            body = raw.decode("utf-8", "replace")
        if status >= 400:
            err = body if isinstance(body, dict) else {"error": f"http_{status}",
                                                       "message": str(body)[:300]}
            return _tool_error(status, err)
        if t.shape is not None:
            body = t.shape(args, body)
        return _tool_ok(status, body)


def _tool_ok(status: int, body: Any) -> types.CallToolResult:
    structured = body if isinstance(body, dict) else {"result": body}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(body, default=str))],
        structured_content=structured, is_error=False)


def _tool_error(status: int, err: dict[str, Any]) -> types.CallToolResult:
    text = f"HTTP {status} {err.get('error', '')}"
    if err.get("code"):
        text += f" ({err['code']})"
    if err.get("message"):
        text += f": {err['message']}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content={"status": status, **err}, is_error=True)


class AdminAsgi:
    """The admin listener's ASGI app: the MCP endpoint in front of the Falcon app."""

    def __init__(self, falcon_app: Any, tokens: TokenAuthority, version: str) -> None:
        self.falcon = falcon_app
        self.tokens = tokens
        self.mcp = McpEndpoint(falcon_app, version)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        kind = scope.get("type")
        if kind == "lifespan":
            # the SDK's task group lives exactly as long as the listener
            async with self.mcp.running():
                await self.falcon(scope, receive, send)
            return
        if kind == "http" and scope.get("path", "").rstrip("/") == MCP_PATH:
            await self._mcp(scope, receive, send)
            return
        await self.falcon(scope, receive, send)

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
        await self.mcp.handle(inner, receive, send)
