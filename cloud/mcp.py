"""``{cloud_api_url}/v1/mcp``: the hosted platform's MCP endpoint (spec "Hosted platform MCP",
Authentication 9), served by the official ``mcp`` SDK: a ``Server`` with a stateless
``StreamableHTTPSessionManager`` and JSON responses, both protocol modes (the initialize
handshake, each request its own POST, and the per-request envelope of 2026-07-28).

Before the SDK sees a request: only POST (405 otherwise, ``Allow: POST``: a stateless endpoint
has no stream to GET and no session to DELETE); a bearer that is an MCP token
(``mcp_live_...``: CLI sessions and API keys are refused here), live and unexpired, else 401
with the REST API's error body; bodies up to 1 MiB.

Tools are the operations of ``cloud.ops``: ``tools/list`` shows only those whose scope the
token holds; ``tools/call`` runs the operation through ``cloud.api.run_op`` in process (no
HTTP round trip: the same runner the REST route uses, so the same checks and answers). A
refusal (scope, tenant, role, bad arguments, confirm, not found, conflict) is a tool error
(``isError``, the error body with its ``status`` as structured content), never an HTTP error
of the MCP request. Results are rendered by ``cloud.secret.render``.

The SDK's DNS-rebinding protection is off as on the admin endpoint: the endpoint is reached
through other names than loopback, and it needs a bearer that a page of another origin cannot
send on a user's behalf (no cookies).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from cloud.api import Op, run_op
from cloud.errors import CloudError, NotFound, Unauthorized, error_body
from cloud.identity import Principal
from cloud.ops import OPS, op_named
from cloud.rest import MAX_BODY, VERSION
from cloud.secret import render
from cloud.services import Services
from ipc.asgi import header as _header
from ipc.asgi import send_json as _send_json
from ipc.bearer import bearer_token

log = logging.getLogger("cloud.mcp")

__all__ = ["MCP_PATH", "McpEndpoint"]

MCP_PATH = "/v1/mcp"
_SCOPE_KEY = "svc.cloud"
Scope = dict[str, Any]

INSTRUCTIONS = ("Manage hosted projects: tenants, projects, env variables, vault secrets, "
                "domains, repo links, usage. Arguments shared by many tools: tenant_id (tenant "
                "id or slug; default your personal tenant; every result names the tenant it "
                "acted in), project (project slug or id), limit (1-100, default 20) and "
                "cursor (next_cursor of the previous page) on lists, confirm on destructive "
                "tools (equal to the target's slug, id or name). Secret values are redacted "
                "(a keyed fingerprint instead) unless the token holds secrets:reveal.")

#: shared arguments, described once in INSTRUCTIONS instead of in every tool
_COMMON = frozenset({"tenant_id", "project", "limit", "cursor", "confirm"})
#: bounds the server checks anyway: not advertised, so tools/list stays small
_UNADVERTISED = frozenset({"minLength", "maxLength", "maxProperties", "minimum", "maximum",
                           "additionalProperties"})


def _lean(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _lean(v) for k, v in schema.items() if k not in _UNADVERTISED}
    if isinstance(schema, list):
        return [_lean(v) for v in schema]
    return schema


def advertised_schema(op: Op) -> dict[str, Any]:
    """The arguments as ``tools/list`` shows them: names, types, enums, required, and a
    description where an argument is not one of the shared ones. The full schema (bounds,
    no unknown arguments) is what calls are checked against (``cloud.api.validate``) and what
    ``GET /v1/tools`` documents."""
    full = _lean(op.input_schema())
    for name in _COMMON & set(full["properties"]):
        full["properties"][name] = {k: v for k, v in full["properties"][name].items()
                                    if k != "description"}
    return dict(full)






def tool_of(op: Op) -> types.Tool:
    # Hints at their defaults are left out (readOnlyHint false; destructiveHint means nothing
    # on a read-only tool), except destructiveHint false on writes, whose default is true.
    return types.Tool(
        name=op.name, description=op.description, input_schema=advertised_schema(op),
        annotations=types.ToolAnnotations(
            read_only_hint=True if op.read_only else None,
            destructive_hint=None if op.read_only else op.kind == "destructive",
            open_world_hint=False))


def _tool_error(e: CloudError) -> types.CallToolResult:
    text = f"{e.status} {e.code}: {e.message}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content={"status": e.status, **error_body(e)},
                                is_error=True)


class McpEndpoint:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.server: Server[Any] = Server(
            "svc-cloud", version=VERSION, instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools, on_call_tool=self._call_tool,
            get_tool_input_schema=lambda n: (o.input_schema() if (o := op_named(n)) else None))
        self.manager = StreamableHTTPSessionManager(
            self.server, json_response=True, stateless=True, max_request_body_size=MAX_BODY,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        self._tools = {o.name: tool_of(o) for o in OPS}

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    @staticmethod
    def _principal(ctx: Any) -> Principal | None:
        scope = getattr(getattr(ctx, "request", None), "scope", None)
        found = scope.get(_SCOPE_KEY) if isinstance(scope, dict) else None
        return found if isinstance(found, Principal) else None

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        p = self._principal(ctx)
        return types.ListToolsResult(tools=[self._tools[o.name] for o in OPS
                                            if p is not None and p.may(o.scope)])

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams
                         ) -> types.CallToolResult:
        p = self._principal(ctx)
        if p is None:  # the dispatcher always sets it; defensive
            return _tool_error(Unauthorized("no credential"))
        op = op_named(params.name)
        if op is None:
            return _tool_error(NotFound(f"no tool {params.name[:80]}"))
        try:
            out, reveal = await run_op(op, p, dict(params.arguments or {}), self.services)
        except CloudError as e:
            return _tool_error(e)
        body = render(out, reveal)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(body,
                                                                    separators=(",", ":")))],
            structured_content=body, is_error=False)

    async def handle(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope.get("method") != "POST":
            await _send_json(send, 405, {"error": "method_not_allowed",
                                         "message": "the MCP endpoint is stateless: POST only"},
                             {"Allow": "POST"})
            return
        raw = _header(scope, b"authorization")
        token = bearer_token(raw.decode("latin-1") if raw is not None else None)
        try:
            p = await self.services.identity.authenticate(token, ("mcp",))
        except CloudError as e:
            headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else None
            await _send_json(send, e.status, error_body(e), headers)
            return
        inner = dict(scope)
        inner[_SCOPE_KEY] = p
        await self.manager.handle_request(inner, receive, send)
