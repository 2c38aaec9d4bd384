"""The REST API (``{cloud_api_url}/v1/...``): a Falcon ASGI app.

Every operation of ``cloud.ops`` is a route (its method and path); its arguments are the path
parameters, the query string and the JSON body together (query values are turned into the
schema's integers and booleans), and it runs through ``cloud.api.run_op``, the same runner as
the MCP tools: same checks, same statuses, same answers. Around them, the routes that are not
tools: ``GET /v1/health`` and ``GET /v1/tools`` (public), sign-up and sign-in
(``/v1/auth/*``), ``GET /v1/me``, and credential management (``/v1/tokens``,
``/v1/api-keys``: a user's session only).

Every answer is JSON made by ``cloud.secret.dumps`` (the one place secret values are
rendered); every error is ``{error, message, ...}`` with the status of ``cloud.errors``, bad
input never a 500. REST takes any credential kind (session, API key, MCP token).
"""

from __future__ import annotations

import logging
from typing import Any

import falcon
import falcon.asgi

from cloud.api import Op, run_op
from cloud.deployments import public
from cloud.errors import BadRequest, CloudError, TooLarge, Unauthorized, error_body
from cloud.identity import Principal
from cloud.ops import OPS
from cloud.secret import dumps
from cloud.services import Services
from cloud.store import new_id, now, rid, row_id
from ipc.bearer import bearer_token
from ipc.body import check_content_type, parse_json, read_bytes
from ipc.version import VERSION

log = logging.getLogger("cloud.rest")

__all__ = ["MAX_BODY", "create_rest_app", "tool_catalog"]

MAX_BODY = 1024 * 1024
DRAIN_LIMIT = 8 * 1024 * 1024
ALL_KINDS = ("session", "api_key", "mcp")


def _send(resp: falcon.asgi.Response, status: int, body: Any, reveal: bool = False) -> None:
    resp.status = status
    resp.content_type = falcon.MEDIA_JSON
    resp.text = dumps(body, reveal)


async def _body(req: falcon.asgi.Request) -> dict[str, Any]:
    if req.content_length in (None, 0) and req.method in ("GET", "DELETE", "HEAD"):
        return {}
    try:
        check_content_type(req.content_type)
        data = await read_bytes(req, MAX_BODY)
        doc = parse_json(data)
    except falcon.HTTPError as e:
        if e.status_code == 413:
            # Read what is left of a body up to a few MiB before answering: a client still
            # sending when the answer and the close came would see a reset, not the 413.
            drained = 0
            async for chunk in req.stream:
                drained += len(chunk)
                if drained > DRAIN_LIMIT:
                    break
            raise TooLarge(f"request body exceeds {MAX_BODY} bytes") from None
        raise BadRequest(str(getattr(e, "message", None) or e.description)) from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise BadRequest("the body must be a JSON object")
    return doc


def _coerce(schema: dict[str, Any], name: str, text: Any) -> Any:
    """A query-string value as the argument's JSON type."""
    if isinstance(text, list):
        raise BadRequest(f"{name}: given more than once")
    prop = schema.get("properties", {}).get(name)
    types = prop.get("type") if prop else None
    types = types if isinstance(types, list) else [types]
    if "integer" in types:
        try:
            return int(text)
        except ValueError:
            raise BadRequest(f"{name}: must be an integer") from None
    if "boolean" in types:
        if text.lower() in ("true", "1"):
            return True
        if text.lower() in ("false", "0"):
            return False
        raise BadRequest(f"{name}: must be true or false")
    return text


class Authenticated:
    def __init__(self, services: Services) -> None:
        self.services = services

    async def principal(self, req: falcon.asgi.Request,
                        kinds: tuple[str, ...] = ALL_KINDS) -> Principal:
        return await self.services.identity.authenticate(
            bearer_token(req.get_header("Authorization")), kinds)


class OpsResource(Authenticated):
    """One path of the table; one responder per method it has."""

    def __init__(self, services: Services, ops: dict[str, Op]) -> None:
        super().__init__(services)
        self.ops = ops
        for method in ops:
            setattr(self, "on_" + method.lower(), self._serve)

    async def _serve(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     **params: str) -> None:
        op = self.ops[req.method]
        p = await self.principal(req)
        args: dict[str, Any] = {}
        schema = op.input_schema()
        for k, v in req.params.items():
            args[k] = _coerce(schema, k, v)
        for k, v in (await _body(req)).items():
            if k in args and args[k] != v:
                raise BadRequest(f"{k}: given in the query and the body with different values")
            args[k] = v
        for k, v in params.items():
            if k in args and args[k] != v:
                raise BadRequest(f"{k}: given in the path and elsewhere with different values")
            args[k] = v
        out, reveal = await run_op(op, p, args, self.services)
        created = op.method == "POST" and op.name.endswith(("_create", "_add"))
        _send(resp, 201 if created else 200, out, reveal)


class Health:
    def __init__(self, services: Services) -> None:
        self.services = services

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        try:
            counts = await self.services.keys.counts()
        except CloudError as e:
            _send(resp, 503, {"ok": False, "version": VERSION, "database": e.message})
            return
        ring = self.services.cfg.keyring
        _send(resp, 200, {"ok": True, "version": VERSION, "database": "ok",
                          "keyring": {"primary": ring.primary, "keys": list(ring.order),
                                      "data_keys_by_ring_key": counts}})


def tool_catalog() -> list[dict[str, Any]]:
    """Every operation with its route, scope and arguments (the tools' documentation)."""
    return [{"name": o.name, "description": o.description, "scope": o.scope,
             "kind": o.kind, "role": o.role, "method": o.method, "path": o.path,
             "arguments": o.input_schema()} for o in OPS]


class Tools:
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        _send(resp, 200, {"tools": tool_catalog()})


class Signup(Authenticated):
    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        b = await _body(req)
        out = await self.services.identity.signup(b.get("email"), b.get("password"),
                                                  b.get("name"))
        _send(resp, 201, out)


class Login(Authenticated):
    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        b = await _body(req)
        out = await self.services.identity.login(b.get("email"), b.get("password"),
                                                 b.get("label"), req.remote_addr or "?")
        _send(resp, 201, out)


class Logout(Authenticated):
    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        p = await self.principal(req, ("session",))
        await self.services.identity.logout(p)
        resp.status = 204


class Me(Authenticated):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        p = await self.principal(req)
        _send(resp, 200, self.services.identity.me(p))


class Credentials(Authenticated):
    """``/v1/tokens`` (MCP tokens) and ``/v1/api-keys``."""

    def __init__(self, services: Services, kind: str) -> None:
        super().__init__(services)
        self.kind = kind

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        p = await self.principal(req)
        _send(resp, 200, {"items": await self.services.identity.list_credentials(p,
                                                                                 self.kind)})

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        p = await self.principal(req)
        _send(resp, 201, await self.services.identity.mint(p, self.kind, await _body(req)))


class Credential(Authenticated):
    def __init__(self, services: Services, kind: str) -> None:
        super().__init__(services)
        self.kind = kind

    async def on_delete(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                        token_id: str) -> None:
        p = await self.principal(req)
        await self.services.identity.revoke(p, self.kind, token_id)
        resp.status = 204


class LinkBase:
    def __init__(self, services: Services) -> None:
        self.services = services

    async def _auth(self, req: falcon.asgi.Request) -> tuple[dict[str, Any], dict[str, Any]]:
        return await self.services.deployments.link_auth(
            req.get_header("X-Svc-Project"), bearer_token(req.get_header("Authorization")))


class LinkResource(LinkBase):
    """``/v1/link/deployment`` (GET) and ``/v1/link/restart`` (POST): the scheduler's cloud
    link (spec, Authentication 7). The credential is the deployed stack's
    ``SVC_AUTH_SECRET`` (bearer) with its ``SVC_CLOUD_PROJECT`` (``X-Svc-Project``); the
    platform keeps only its hash, on the deployment it made it for."""

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        project, dep = await self._auth(req)
        current = await self.services.deployments.latest(project["id"], ("running",))
        pending = await self.services.deployments.latest(
            project["id"], ("queued", "building", "deploying"))
        shown = current or dep
        out = await self.services.deployments.detail(project, row_id(shown))
        _send(resp, 200, {"project": {"id": project["id"], "slug": project["slug"]},
                          "linked_deployment": row_id(dep), **out,
                          "pending": public(pending) if pending else None})

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        project, dep = await self._auth(req)
        body = await _body(req)
        unknown = sorted(set(body) - {"roles", "upgrade", "clean", "surreal"})
        if unknown:
            raise BadRequest(f"{unknown[0][:60]}: unknown argument (roles, upgrade, clean, "
                             "surreal)")
        for k in ("upgrade", "clean", "surreal"):
            if k in body and not isinstance(body[k], bool):
                raise BadRequest(f"{k}: must be true or false")
        audit = [("CREATE $id CONTENT $c RETURN NONE", {
            "id": rid("audit_event", f"aud_{int(now().timestamp() * 1e6):017d}"
                      f"{new_id('', 6)}"),
            "c": {"tenant": project["tenant"], "project": project["id"],
                  "action": "deployment_restart", "target": None, "actor": None,
                  "actor_email": None, "credential": "cloud_link",
                  "credential_id": row_id(dep), "at": now(), "detail": body}})]
        out = await self.services.deployments.restart(project, body, "scheduler (cloud link)",
                                                      audit)
        _send(resp, 202, {"project": {"id": project["id"], "slug": project["slug"]}, **out})


class LinkBackupConfig(LinkBase):
    """``/v1/link/backups/config``: GET and PUT by the linked scheduler."""

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        project, _ = await self._auth(req)
        _send(resp, 200, {"config": await self.services.backup_config.get(project)})

    async def on_put(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        project, _ = await self._auth(req)
        body = await _body(req)
        out = await self.services.backup_config.set(project, body, "scheduler (cloud link)", [])
        _send(resp, 200, {"config": out})


async def _cloud_error(req: falcon.asgi.Request, resp: falcon.asgi.Response,
                       ex: CloudError, params: dict[str, Any]) -> None:
    if isinstance(ex, Unauthorized):
        resp.set_header("WWW-Authenticate", "Bearer")
    _send(resp, ex.status, error_body(ex))


async def _http_error(req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      ex: falcon.HTTPError, params: dict[str, Any]) -> None:
    status = ex.status_code
    code = {404: "not_found", 405: "method_not_allowed"}.get(status, f"http_{status}")
    message = ex.description or {404: "no such route", 405: "this route does not take "
                                 "that method"}.get(status, str(ex.title))
    if ex.headers:
        resp.set_headers(ex.headers)  # Allow on a 405
    _send(resp, status, {"error": code, "message": message})


async def _unexpected(req: falcon.asgi.Request, resp: falcon.asgi.Response, ex: Exception,
                      params: dict[str, Any]) -> None:
    log.exception("unhandled error on %s %s", req.method, req.path)
    _send(resp, 500, {"error": "internal", "message": "internal error in the platform API "
                      "(logged)"})


class _UnreadBody:
    """A request answered before its body was read (refused by its token, its route or its
    size) leaves that body in the connection. The server then closes the keep-alive
    connection after the answer, and a client that already sent its next request on it meets
    a close without an answer. So the rest is read (up to `DRAIN_LIMIT`) before answering, or
    the answer says `Connection: close` when there is more."""

    async def process_response(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                               resource: Any, req_succeeded: bool) -> None:
        length = req.content_length
        if not length or req.stream.eof:
            return
        if length > DRAIN_LIMIT:
            resp.set_header("Connection", "close")
            return
        try:
            await req.stream.exhaust()
        except Exception:  # a client gone meanwhile: nothing left to keep usable
            resp.set_header("Connection", "close")


def create_rest_app(services: Services) -> falcon.asgi.App:
    app = falcon.asgi.App(middleware=[_UnreadBody()])
    app.req_options.auto_parse_qs_csv = False
    app.add_error_handler(Exception, _unexpected)
    app.add_error_handler(falcon.HTTPError, _http_error)
    app.add_error_handler(CloudError, _cloud_error)
    app.add_route("/v1/health", Health(services))
    app.add_route("/v1/tools", Tools())
    app.add_route("/v1/auth/signup", Signup(services))
    app.add_route("/v1/auth/login", Login(services))
    app.add_route("/v1/auth/logout", Logout(services))
    app.add_route("/v1/me", Me(services))
    app.add_route("/v1/link/deployment", LinkResource(services))
    app.add_route("/v1/link/restart", LinkResource(services))
    app.add_route("/v1/link/backups/config", LinkBackupConfig(services))
    app.add_route("/v1/tokens", Credentials(services, "mcp"))
    app.add_route("/v1/tokens/{token_id}", Credential(services, "mcp"))
    app.add_route("/v1/api-keys", Credentials(services, "api_key"))
    app.add_route("/v1/api-keys/{token_id}", Credential(services, "api_key"))
    by_path: dict[str, dict[str, Op]] = {}
    for op in OPS:
        by_path.setdefault(op.path, {})[op.method] = op
    for path, ops in by_path.items():
        app.add_route(path, OpsResource(services, ops))
    return app

