"""The admin MCP endpoint's SDK side (:class:`McpEndpoint`): the official ``mcp`` SDK's
``Server`` and stateless ``StreamableHTTPSessionManager`` with the admin tools. Imported by
:class:`scheduler.admin.mcp.AdminAsgi` on the endpoint's first request: the SDK costs about a
second of CPU to import, which every scheduler start (and every test stack) paid for an
endpoint most of them never serve."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import jsonschema
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from scheduler.admin.mcptools import TOOLS, AdminTool, tool_named
from scheduler.admin.tokens import Principal

__all__ = ["McpEndpoint"]

MAX_BODY = 64 * 1024
READ_ONLY_MESSAGE = "this token is read-only: it may only use the read tools"

Scope = dict[str, Any]


class McpEndpoint:
    """The SDK server and its session manager, with the admin tools."""

    def __init__(self, inproc: Any, version: str, scope_key: str, timeout_secs: float) -> None:
        # `inproc`: the admin app called in process (`scheduler.admin.mcp.InProcess`);
        # `scope_key`: where the dispatcher leaves the caller in the request's scope
        self.inproc = inproc
        self.scope_key = scope_key
        self.timeout_secs = timeout_secs
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
    def _caller(self, ctx: Any) -> tuple[Principal, str, Scope] | None:
        req = getattr(ctx, "request", None)
        scope = getattr(req, "scope", None)
        found = scope.get(self.scope_key) if isinstance(scope, dict) else None
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
                                     f"answer within {self.timeout_secs:.0f}s"})
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
