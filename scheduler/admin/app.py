"""The admin listener: a Falcon ASGI app over one :class:`scheduler.admin.plane.AdminPlane`.

Served by uvicorn in the scheduler's process and event loop (``scheduler.__main__``) on
``SVC_ADMIN_HOST:SVC_ADMIN_PORT``, behind :class:`scheduler.admin.mcp.AdminAsgi` (the MCP
endpoint). Routes (spec "Admin listener"; the workflow and schedule routes are
``scheduler.admin.workflows``, the pool routes ``scheduler.admin.pools``, backup routes come with
their own system), under ``/admin/api`` unless said:

* ``GET /``, ``GET /admin``, ``GET /admin/{path}``: the dashboard (:mod:`.dashboard`);
* ``GET config`` (public): :meth:`AdminPlane.config`;
* ``POST session`` (public), ``POST logout``, ``GET me``, ``GET``/``POST``/``DELETE tokens``,
  ``DELETE tokens/{id}`` (revoke by the id the listing shows): :mod:`.sessions`, :mod:`.tokens`;
* ``GET overview``, ``presence``, ``views``, ``views/{key}``: :mod:`.plane`, :mod:`.presence`,
  :mod:`.views`; ``GET backends``, ``backends/{name}``: the backend monitor;
* ``GET logs``: :mod:`.logs`; ``GET jobs``, ``jobs/stream``, ``jobs/{id}``: :mod:`.jobsampler`;
* ``POST jobs/{id}/kill``, ``jobs/{id}/retry``, ``jobs/clear``, ``ssps/{id}/restart``,
  ``ssps/restart-all``, ``scheduler/restart``: :mod:`.actions`;
* ``GET operations``, ``operations/stream``: :mod:`.operations`;
* ``GET incidents``, ``incidents/{id}``: :mod:`.incidents`;
* ``POST cloud/restart``, ``GET cloud/deployment``: forwarded to the hosted platform
  (:mod:`.cloudlink`); 409 ``not_linked`` until linked;
* ``workflows/*``, ``schedules/*``: :mod:`.workflows`;
* ``backups``, ``backups/config``, ``backups/{id}``, ``backups/{id}/restore``,
  ``restore/release``: :mod:`.backups`;
* ``POST mcp``: the MCP endpoint, served in front of this app (:mod:`.mcp`).

Bodies are JSON objects of at most 64 KiB (415 for another content type, 413 over the limit,
400 when malformed). Errors: :mod:`.errors` (one body shape, mapped once). Authentication:
:mod:`.auth`.
"""

from __future__ import annotations

import logging
from typing import Any

import falcon
import falcon.asgi
from opentelemetry.metrics import Meter, NoOpMeter

from dbclient.clock import now_ms
from ipc import otel
from scheduler.admin import backups, dashboard
from scheduler.admin.auth import AdminAuth
from scheduler.admin.errors import (
    AdminError,
    Invalid,
    NotFound,
    NotImplementedYet,
    Unauthorized,
    serialize_error,
)
from scheduler.admin.history import RANGES
from scheduler.admin.jobsampler import ORIGINS, STATUSES
from scheduler.admin.mcp import AdminAsgi
from scheduler.admin.plane import AdminPlane
from scheduler.admin.pools import pool_routes
from scheduler.admin.sessions import LOGIN_FAILED
from scheduler.admin.sse import channel_stream
from scheduler.admin.values import q_enum, q_int, q_str, read_json
from scheduler.admin.workflows import workflow_routes

log = logging.getLogger("scheduler.admin.http")

__all__ = ["create_admin_app", "create_falcon_app"]

PATH_MAX = 300


def _who(req: falcon.asgi.Request) -> dict[str, Any]:
    p = req.context.principal
    return {"subject": p.subject, "mode": p.mode}


def _path_param(value: str, what: str) -> str:
    if not value or len(value) > PATH_MAX or "\x00" in value:
        raise Invalid(f"{what}: 1 to {PATH_MAX} characters")
    return value


class Base:
    def __init__(self, plane: AdminPlane) -> None:
        self.plane = plane


class Config(Base):
    public = True

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = self.plane.config()


class Session(Base):
    public = True  # signing in is how a bearer is obtained

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        addr = req.remote_addr or "unknown"
        limiter = self.plane.signin.limiter
        if limiter.blocked(addr):
            raise Unauthorized(LOGIN_FAILED)
        try:
            body = await read_json(req)
        except AdminError:
            # malformed, too deep, too large: an attempt all the same (else it is free)
            limiter.fail(addr)
            raise
        token, p = await self.plane.signin.login(body, addr)
        resp.media = {"token": token, "subject": p.subject, "mode": p.mode, "scope": p.scope,
                      "expires_at_ms": p.expires_at * 1000,
                      "persistent": self.plane.tokens.persistent}


class Logout(Base):
    any_scope = True  # a read-only token may end itself (it is a POST)

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        self.plane.tokens.revoke(req.context.principal, req.context.token)
        resp.media = {"ok": True}


class Me(Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = req.context.principal.public()


class Tokens(Base):
    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await read_json(req)
        token, p = self.plane.tokens.mint(req.context.principal, body)
        resp.status = 201
        resp.media = {"token": token, "label": p.label, "scope": p.scope, "mode": p.mode,
                      "expires_at_ms": p.expires_at * 1000,
                      "note": "shown once: store it now"}

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = {"tokens": self.plane.tokens.listing(req.context.principal),
                      "persistent": self.plane.tokens.persistent}

    async def on_delete(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await read_json(req)
        if not isinstance(body, dict) or not isinstance(body.get("token"), str) \
                or not body["token"]:
            raise Invalid("the body must be an object {token}")
        if not self.plane.tokens.revoke_token(body["token"]):
            raise NotFound("not a minted token of this scheduler")
        resp.status = 204


class TokenById(Base):
    async def on_delete(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                        ref: str) -> None:
        self.plane.tokens.revoke_ref(req.context.principal, _path_param(ref, "token id"))
        resp.status = 204


class Overview(Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = self.plane.overview()


class PresenceRoute(Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = self.plane.presence.body()


class HistoryRoute(Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = self.plane.history.body(q_enum(req, "range", RANGES, "hour") or "hour")


class ViewsList(Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = self.plane.views.listing(req)


class ViewDetail(Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     key: str) -> None:
        resp.media = await self.plane.views.detail(_path_param(key, "view key"))

    async def on_delete(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                        key: str) -> None:
        await read_json(req)  # none expected; a malformed one is still refused
        out = await self.plane.views.unregister(_path_param(key, "view key"))
        log.info("view %s unregistered by %s (%s)", out["id"], req.context.principal.subject,
                 req.context.principal.mode)
        resp.media = out


class BackendsList(Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        monitor = self.plane.cluster.backends()
        if monitor is None:
            resp.media = {"status": "none", "counts": {}, "list": []}
            return
        resp.media = monitor.summary()


class BackendDetail(Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     name: str) -> None:
        monitor = self.plane.cluster.backends()
        b = None if monitor is None else next(
            (x for x in monitor.backends if x.name == name), None)
        if b is None or monitor is None:
            raise NotFound(f"no backend {name[:80]}")
        entry = monitor.entry(b)
        entry["health_check_url"] = entry["url"]
        entry["history"] = monitor.history(b.name)
        entry["interval_secs"] = monitor.interval_secs
        resp.media = entry


class LogsRoute(Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.sse = await self.plane.logs.stream(req)
        self.plane.wake_samplers()


class Jobs(Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        status = q_enum(req, "status", STATUSES)
        origin = q_enum(req, "origin", ORIGINS)
        table = q_str(req, "table", max_len=200)
        q = q_str(req, "q", max_len=200)
        limit = q_int(req, "limit", default=100, minimum=1, maximum=1000, clamp=True)
        assert limit is not None
        resp.media = await self.plane.jobs.listing(status=status, table=table, origin=origin,
                                                   q=q, limit=limit)


class JobsStream(Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        sampler = self.plane.jobs
        if not sampler.enabled:
            raise NotImplementedYet("the job sampler is off (SVC_ADMIN_JOB_INTERVAL_SECS=0)",
                                    code="sampler_off")
        resp.sse = channel_stream(sampler.channel, "jobs")
        self.plane.wake_samplers()  # to the live cadence now


class JobDetail(Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     job_id: str) -> None:
        resp.media = await self.plane.jobs.job(_path_param(job_id, "job id"))


class JobAction(Base):
    def __init__(self, plane: AdminPlane, verb: str) -> None:
        super().__init__(plane)
        self.verb = verb

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      job_id: str) -> None:
        await read_json(req)  # none expected; a malformed one is still refused
        resp.media = await self.plane.actions.job(self.verb, _path_param(job_id, "job id"))


class JobsClear(Base):
    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await read_json(req)
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise Invalid("the body must be an object {table, all}")
        table = body.get("table")
        if table is not None and (not isinstance(table, str) or not table
                                  or len(table) > 200):
            raise Invalid("table: a job table name")
        everything = body.get("all", False)
        if not isinstance(everything, bool):
            raise Invalid("all: must be true or false")
        resp.media = await self.plane.jobs.clear(table, everything)


class Operations(Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = {"operations": self.plane.ops.listing()}


class OperationsStream(Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        ch = self.plane.ops.channel
        if ch.latest is None:
            ch.publish({"operations": self.plane.ops.listing()})
        resp.sse = channel_stream(ch, "operations")
        self.plane.wake_samplers()


class SspRestart(Base):
    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      ssp_id: str) -> None:
        body = await read_json(req)
        resp.status = 202
        resp.media = self.plane.actions.restart_ssp(_path_param(ssp_id, "SSP id"), body,
                                                    _who(req))


class SspsRestartAll(Base):
    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await read_json(req)
        resp.status = 202
        resp.media = self.plane.actions.restart_all(body, _who(req))


class SchedulerRestart(Base):
    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await read_json(req)
        resp.status = 202
        resp.media = self.plane.actions.restart_scheduler(body, _who(req))


class Incidents(Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        store = self.plane.cluster.incidents
        offset = q_int(req, "offset", default=0, minimum=0, maximum=10**9, clamp=True)
        limit = q_int(req, "limit", default=50, minimum=1, maximum=200, clamp=True)
        assert offset is not None and limit is not None
        items, total = store.query(
            component=q_str(req, "component"),
            state=q_enum(req, "state", ("open", "recovered", "interrupted", "failed",
                                        "recorded")),
            severity=q_enum(req, "severity", ("warning", "info")),
            since=q_int(req, "since", minimum=0, maximum=10**15),
            before=q_int(req, "before", minimum=0, maximum=10**15),
            offset=offset, limit=limit)
        resp.media = {"incidents": items, "total": total, "offset": offset, "limit": limit,
                      "storage_error": store.storage_error,
                      "server_time_ms": now_ms()}


class IncidentDetail(Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     incident_id: str) -> None:
        inc = self.plane.cluster.incidents.get(_path_param(incident_id, "incident id"))
        if inc is None:
            raise NotFound(f"no incident {incident_id[:80]} (unknown, or removed by retention)")
        resp.media = {"incident": inc}


class CloudDeployment(Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = await self.plane.cloud_link.deployment()


class CloudRestart(Base):
    """Forwarded to the platform and tracked as a ``cloud_restart`` operation, which ends
    once the platform has admitted the restart (a new deployment replaces this stack)."""

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await read_json(req)
        link = self.plane.cloud_link
        link.refuse_unlinked()
        op = self.plane.ops.start("cloud_restart", f"project:{link.project}", _who(req),
                                  details={k: body.get(k) for k in ("roles", "upgrade",
                                                                     "clean", "surreal")})
        try:
            out = await link.restart(body)
        except AdminError as e:
            self.plane.ops.finish(op["id"], False, f"the platform refused: {e.message}")
            raise
        dep = out.get("deployment") or {}
        self.plane.ops.finish(op["id"], True, f"the platform admitted restart deployment "
                              f"v{dep.get('version')} ({dep.get('status')})")
        resp.status = 202
        resp.media = {"operation": self.plane.ops.ops.get(op["id"], op), **out}


class _Lifespan:
    def __init__(self, plane: AdminPlane) -> None:
        self.plane = plane

    async def process_startup(self, scope: Any, event: Any) -> None:
        await self.plane.start()

    async def process_shutdown(self, scope: Any, event: Any) -> None:
        await self.plane.stop()


async def _unexpected(req: falcon.asgi.Request, resp: falcon.asgi.Response, ex: Exception,
                      params: Any) -> None:
    if isinstance(ex, falcon.HTTPError):
        raise ex
    log.exception("unhandled error on %s %s", req.method, req.path)
    raise AdminError("internal error in the admin listener (logged)", status=500)


def create_admin_app(plane: AdminPlane, meter: Meter | None = None) -> AdminAsgi:
    """The admin listener's ASGI app: the MCP endpoint in front of the Falcon routes."""
    return AdminAsgi(create_falcon_app(plane, meter), plane.tokens, plane.cluster.version)


def create_falcon_app(plane: AdminPlane,
                      meter: Meter | None = None) -> falcon.asgi.App:
    """The admin listener's routes bound to ``plane``; request metrics on ``meter``
    (``ipc.otel``; None: not measured)."""
    app: falcon.asgi.App = falcon.asgi.App(
        middleware=[otel.RequestMetrics(meter or NoOpMeter("scheduler.admin")),
                    AdminAuth(plane.tokens), _Lifespan(plane)], cors_enable=False)
    app.req_options.strip_url_path_trailing_slash = True
    app.req_options.auto_parse_qs_csv = False
    app.set_error_serializer(serialize_error)
    app.add_error_handler(Exception, _unexpected)
    dashboard.register(app, plane.cfg.admin.dir)
    api = "/admin/api"
    routes: list[tuple[str, Any]] = [
        ("/config", Config(plane)), ("/session", Session(plane)), ("/logout", Logout(plane)),
        ("/me", Me(plane)), ("/tokens", Tokens(plane)),
        ("/tokens/{ref}", TokenById(plane)), ("/overview", Overview(plane)),
        ("/presence", PresenceRoute(plane)), ("/history", HistoryRoute(plane)),
        ("/views", ViewsList(plane)),
        ("/views/{key}", ViewDetail(plane)), ("/backends", BackendsList(plane)),
        ("/backends/{name}", BackendDetail(plane)), ("/logs", LogsRoute(plane)),
        ("/jobs", Jobs(plane)), ("/jobs/stream", JobsStream(plane)),
        ("/jobs/clear", JobsClear(plane)), ("/jobs/{job_id}", JobDetail(plane)),
        ("/jobs/{job_id}/kill", JobAction(plane, "kill")),
        ("/jobs/{job_id}/retry", JobAction(plane, "retry")),
        ("/operations", Operations(plane)), ("/operations/stream", OperationsStream(plane)),
        ("/ssps/restart-all", SspsRestartAll(plane)),
        ("/ssps/{ssp_id}/restart", SspRestart(plane)),
        ("/scheduler/restart", SchedulerRestart(plane)),
        ("/incidents", Incidents(plane)), ("/incidents/{incident_id}", IncidentDetail(plane)),
        ("/cloud/restart", CloudRestart(plane)), ("/cloud/deployment", CloudDeployment(plane)),
    ]
    routes += pool_routes(plane)
    routes += workflow_routes(plane)  # workflows/*, schedules/*: scheduler.admin.workflows
    routes += backups.backup_routes(plane)  # backups/*, restore/*: scheduler.admin.backups
    for path, resource in routes:
        app.add_route(api + path, resource)
    return app
