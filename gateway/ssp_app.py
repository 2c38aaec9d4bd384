"""The SSP's HTTP listener: a Falcon ASGI app that validates, authenticates and forwards.

gunicorn runs it in each worker (`gunicorn -k asgi 'gateway.ssp_app:create_app()'`). Every
route of the spec's SSP table handled by this issue is forwarded to the hub per the contract in
`ipc.messages`; the gateway itself answers only what needs no state:

- 401 `unauthorized`: bearer check (`ipc.bearer`), except the public GET routes;
- 400 `invalid`: wrong Content-Type, malformed JSON, a body of the wrong shape (the message
  names the field and what it must be), bad `/logs` query values;
- 413 `payload_too_large`: a body over 1 MiB (a batched `/ingest` array: 32 MiB); 404/405 for unknown routes and methods;
- 503 `SSP_NOT_READY`: the hub did not answer within the route's timeout (on `/health` the body
  also says `status: bootstrapping`, what a starting SSP reports);
- 500 `internal`: a bug in the gateway or an unusable hub reply (logged, generic body).

Everything else is the hub's reply, status and body unchanged.

Decisions (where the spec leaves room):

- Without `SVC_AUTH_SECRET` any bearer token is accepted, but a request with no
  `Authorization: Bearer <token>` at all is still 401 (`ipc.bearer`). With it, the secret opens
  every route; the scheduler's credential for this SSP (`ipc.peerauth`) every route except
  `/impersonate/*`; the ingest credential only `/ingest` and `/view/unregister`.
- Content-Type: absent, `application/json` (any parameters) or `application/*+json`; anything
  else is 400, so `curl -d` (form-encoded) needs `-H 'Content-Type: application/json'`.
  `POST /ingest` also takes `ipc.typed.CONTENT_TYPE` (the scheduler's typed deliveries: record
  ids, datetimes... kept); its shape is checked like JSON and the bytes go to the hub as they
  came. A JSON body keeps only what JSON carries (a SCHEMALESS link arrives as text).
- `op` is accepted in any letter case and forwarded upper-case; unknown body fields are kept;
  the unregister id may be bare (`abc`, as the cleanup event sends it) and becomes `query:abc`.
- Unknown paths are 404 before authentication; a wrong method is 405 (with `Allow`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import falcon
import falcon.asgi
import zmq.asyncio
from opentelemetry.metrics import Meter

from ipc import otel, typed
from ipc.bearer import BearerAuth
from ipc.body import (
    DEFAULT_MAX_BODY_BYTES,
    check_content_type,
    parse_json,
    parse_typed,
    read_bytes,
    too_large,
)
from ipc.httperrors import HttpError, bad_request, serialize_error
from ipc.messages import ErrorCode, check_reply, logs_poll, request, route_timeout
from ipc.publiccors import PublicCors
from ipc.routebodies import BODY_ROUTES, BodyError, is_identifier, normalize_body

from .hub import HubLink, HubUnavailable
from .hublog import HubLogHandler
from .sse import LogStream, check_logs_body, parse_backfill, parse_last_event_id, parse_tail

log = logging.getLogger("gateway.ssp")

#: A batched `POST /ingest` (a JSON array of up to 1000 events, from the scheduler) may be
#: larger than one event's 1 MiB; a single-event body keeps the 1 MiB limit.
INGEST_BATCH_MAX_BODY_BYTES = 32 * 1024 * 1024


def _internal() -> HttpError:
    return HttpError(500, ErrorCode.INTERNAL, "internal error in the gateway (logged)")


class GatewayApp(falcon.asgi.App[falcon.asgi.Request, falcon.asgi.Response]):
    """The Falcon app plus its hub link (closed by the lifespan hook, used by tests)."""

    hub: HubLink


@dataclass(frozen=True)
class GatewaySettings:
    """What the gateway needs: the bearer secret and where the hub listens."""

    auth_secret: str | None
    hub_endpoint: str
    #: this SSP's id (`SVC_SSP_ID`, passed by the hub): a scheduler credential must name it
    ssp_id: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    logs_poll_interval: float = 0.25
    logs_keepalive: float = 5.0
    #: copy the gateway's warnings and errors to the hub's log (`GET /logs`); gunicorn only
    copy_logs_to_hub: bool = False
    #: None: the per-route waits of `ipc.messages.ROUTE_TIMEOUT_SECS`; a number overrides all
    hub_timeout_secs: float | None = None
    #: OpenTelemetry request metrics (`ipc.otel`): exporters from the standard OTEL_* names
    metrics_exporters: tuple[str, ...] = ()
    metrics_export_interval_ms: int = otel.DEFAULT_EXPORT_INTERVAL_MS
    instance_id: str = "ssp-gateway"

    @classmethod
    def from_env(cls, env: Mapping[str, str], hub_endpoint: str) -> GatewaySettings:
        """The gateway's part of the SSP configuration: the secret (`SVC_AUTH_SECRET`, as
        `ssp.config` reads it) and the hub endpoint the SSP passed."""
        try:
            exporters = otel.metrics_exporters(env)
            interval = otel.export_interval_ms(env)
        except otel.OtelConfigError as e:  # the SSP refused it at start already; be safe
            log.error("request metrics not exported: %s", e)
            exporters, interval = (), otel.DEFAULT_EXPORT_INTERVAL_MS
        return cls(auth_secret=env.get("SVC_AUTH_SECRET") or None, hub_endpoint=hub_endpoint,
                   ssp_id=env.get("SVC_SSP_ID") or None,
                   copy_logs_to_hub=True, metrics_exporters=exporters,
                   metrics_export_interval_ms=interval,
                   instance_id=f"{env.get('SVC_SSP_ID') or 'ssp'}/gateway-{os.getpid()}")

    def __repr__(self) -> str:  # never print the secret
        return f"GatewaySettings(hub_endpoint={self.hub_endpoint!r}, auth={'on' if self.auth_secret else 'any bearer'})"


def _flat_query(req: falcon.asgi.Request) -> dict[str, str]:
    """Query string as str -> str; a repeated key keeps its last value."""
    out: dict[str, str] = {}
    for key, value in req.params.items():
        out[key] = value[-1] if isinstance(value, list) else value
    return out


_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def _dump(body: Any) -> bytes:
    return _ENCODE(body).encode()


class Forwarder:
    """Sends one request to the hub and turns its reply into the HTTP response."""

    def __init__(self, hub: HubLink, timeout_override: float | None = None) -> None:
        self.hub = hub
        self.timeout_override = timeout_override

    def timeout(self, route: str) -> float:
        """Seconds to wait for the hub on `route`."""
        return route_timeout(route) if self.timeout_override is None else self.timeout_override

    async def call(self, route: str, msg: dict[str, Any]) -> dict[str, Any]:
        """The hub's validated reply to `msg`; 503 when it does not answer, 500 when unusable."""
        try:
            reply = await self.hub.call(msg, self.timeout(route))
        except HubUnavailable as e:
            body: dict[str, Any] = {"error": ErrorCode.NOT_READY, "message": str(e)}
            if route == "GET /health":
                body["status"] = "bootstrapping"
            return {"status": 503, "body": body}
        problem = check_reply(reply)
        if problem is not None:
            log.error("%s: unusable hub reply: %s", route, problem)
            raise _internal()
        return reply

    @staticmethod
    def respond(route: str, resp: falcon.asgi.Response, reply: dict[str, Any]) -> None:
        """Write a checked hub reply into `resp` (JSON body, or text/plain `text`)."""
        resp.status = reply["status"]
        headers = reply.get("headers")
        if headers:
            for name, value in headers.items():
                resp.set_header(name, value)
        text = reply.get("text")
        if text is not None:
            resp.content_type = falcon.MEDIA_TEXT
            resp.text = text
            return
        body = reply.get("body")
        if body is None:
            return
        try:
            resp.data = _dump(body)
        except (TypeError, ValueError) as e:
            log.error("%s: hub reply body is not JSON-able: %s", route, e)
            raise _internal() from None
        resp.content_type = falcon.MEDIA_JSON

    async def forward(
        self,
        route: str,
        req: falcon.asgi.Request,
        resp: falcon.asgi.Response,
        body: Any = None,
        params: dict[str, str] | None = None,
    ) -> None:
        """Forward one request and answer with the hub's reply."""
        msg = request(route, body, query=_flat_query(req), params=params, timeout_secs=self.timeout(route))
        self.respond(route, resp, await self.call(route, msg))


class GetRoute:
    """A GET route forwarded as is (path parameters in `params`)."""

    def __init__(self, fwd: Forwarder, route: str, *, public: bool = False) -> None:
        self.fwd = fwd
        self.route = route
        self.public = public

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, **params: str) -> None:
        """Forward the GET to the hub."""
        if "table" in params and not is_identifier(params["table"]):
            raise bad_request(f"table must be a table name ([A-Za-z_][A-Za-z0-9_]*), got {params['table'][:80]!r}")
        await self.fwd.forward(self.route, req, resp, params=params or None)


class PostRoute:
    """A POST route: read, parse and shape-check the body, then forward its normalised form."""

    public = False

    def __init__(self, fwd: Forwarder, route: str, max_body_bytes: int) -> None:
        self.fwd = fwd
        self.route = route
        self.max_body_bytes = max_body_bytes
        self.needs_body = route in BODY_ROUTES
        # Who may call it besides holders of the secret (`ipc.bearer`): the database's events
        # post row changes and view deletions; impersonation is for the secret alone.
        self.ingest_route = route in INGEST_ROUTES
        self.master_only = route in MASTER_ONLY_ROUTES

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        """Validate the body and forward it."""
        batchable = self.route == "POST /ingest"
        is_typed = check_content_type(req.content_type, typed_ok=batchable)
        limit = max(self.max_body_bytes, INGEST_BATCH_MAX_BODY_BYTES) if batchable else self.max_body_bytes
        raw = await read_bytes(req, limit)
        if batchable and len(raw) > self.max_body_bytes and not (
                typed.is_array(raw) if is_typed else raw.lstrip().startswith(b"[")):
            raise too_large(self.max_body_bytes)  # a single event keeps the 1 MiB limit
        if not (raw if is_typed else raw.strip()):
            if self.needs_body:
                raise bad_request("request body is empty: " + (
                    "an event or an array of events is required" if is_typed
                    else "a JSON object is required"))
            body = None
        else:
            body = parse_typed(raw) if is_typed else parse_json(raw)
        try:
            normalized = normalize_body(self.route, body)
        except BodyError as e:
            raise bad_request(str(e)) from None
        # A typed body goes to the hub as the bytes that came (its shape checked here): the
        # hub decodes its values once, instead of a decode here and a re-pack for the hub.
        await self.fwd.forward(self.route, req, resp, body=raw if is_typed else normalized)


class PutRoute:
    """A PUT route (`PUT /backends`): the same body checks and forwarding as a POST."""

    public = False

    def __init__(self, fwd: Forwarder, route: str, max_body_bytes: int) -> None:
        self.post = PostRoute(fwd, route, max_body_bytes)

    async def on_put(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        """Validate the body and forward it."""
        await self.post.on_post(req, resp)


class LogsRoute:
    """`GET /logs`: the hub's log lines as server-sent events (see `gateway.sse`)."""

    public = False

    def __init__(self, fwd: Forwarder, settings: GatewaySettings) -> None:
        self.fwd = fwd
        self.settings = settings

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        """Check the query, fetch the backfill (errors answered as JSON), then stream."""
        tail = parse_tail(req.get_param("tail"))
        backfill = parse_backfill(req.get_param("backfill"))
        resume = parse_last_event_id(req.get_header("Last-Event-ID"))
        wait = self.fwd.timeout("GET /logs")
        if resume is not None:
            first = logs_poll(cursor=resume, timeout_secs=wait)
        else:
            first = logs_poll(backfill=backfill, timeout_secs=wait)
        reply = await self.fwd.call("GET /logs", first)
        if reply["status"] != 200:
            self.fwd.respond("GET /logs", resp, reply)
            return
        problem = check_logs_body(reply.get("body"))
        if problem is not None:
            log.error("GET /logs: unusable hub reply: %s", problem)
            raise _internal()
        stream = LogStream(
            self.fwd.hub,
            reply["body"],
            tail=tail,
            timeout=wait,
            poll_interval=self.settings.logs_poll_interval,
            keepalive=self.settings.logs_keepalive,
        )
        resp.set_header("Cache-Control", "no-cache")
        resp.set_header("X-Accel-Buffering", "no")  # proxies must not buffer the stream
        resp.sse = stream.events()


class Lifespan:
    """Closes the hub socket (and stops copying logs to it) when the worker shuts down."""

    def __init__(self, hub: HubLink, log_handler: logging.Handler | None,
                 meter_provider: Any = None) -> None:
        self.hub = hub
        self.log_handler = log_handler
        self.meter_provider = meter_provider

    async def process_shutdown(self, scope: Mapping[str, Any], event: Mapping[str, Any]) -> None:
        """ASGI lifespan shutdown hook."""
        if self.log_handler is not None:
            logging.getLogger("gateway").removeHandler(self.log_handler)
        self.hub.close()
        if self.meter_provider is not None:
            # The last figures (a final export), bounded so a dead collector cannot hang us.
            await asyncio.to_thread(self.meter_provider.shutdown, 5_000)


async def _unexpected(req: falcon.asgi.Request, resp: falcon.asgi.Response, ex: Exception, params: Any) -> None:
    """Any exception that is not an HTTP error: log it with the route, answer a generic 500."""
    if isinstance(ex, falcon.HTTPError):
        raise ex
    log.exception("unexpected error in %s %s", req.method, req.path)
    raise _internal()


GET_ROUTES: tuple[tuple[str, str, bool], ...] = (
    # (path, route, public)
    ("/health", "GET /health", True),
    ("/version", "GET /version", True),
    ("/info", "GET /info", True),
    ("/info/text", "GET /info/text", True),
    ("/debug/view/{view_id}", "GET /debug/view/{view_id}", False),
    ("/debug/deps", "GET /debug/deps", False),
    ("/debug/memory", "GET /debug/memory", False),
    ("/debug/catchup-rows/{table}", "GET /debug/catchup-rows/{table}", False),
    ("/debug/heartbeat", "GET /debug/heartbeat", False),
    ("/backup/status", "GET /backup/status", False),
    ("/backup/status/{backup_id}", "GET /backup/status/{backup_id}", False),
    ("/backup/restore/status/{restore_id}", "GET /backup/restore/status/{restore_id}", False),
)

#: routes the database's events call with the ingest credential (`ipc.peerauth`)
INGEST_ROUTES = frozenset({"POST /ingest", "POST /view/unregister"})
#: routes no derived credential opens: minting impersonation tokens needs the secret itself
MASTER_ONLY_ROUTES = frozenset({"POST /impersonate/mint", "POST /impersonate/users"})

POST_ROUTES: tuple[str, ...] = (
    "/ingest",
    "/view/register",
    "/view/unregister",
    "/reset",
    "/admin/reload",
    "/log",
    "/job/kill",
    "/job/retry",
    "/job/recover",
    "/backup/create",
    "/backup/restore",
    "/impersonate/mint",
    "/impersonate/users",
    "/crdt/apply",
)


def build_app(settings: GatewaySettings, *, ctx: zmq.asyncio.Context | None = None,
              meter: Meter | None = None) -> GatewayApp:
    """The gateway app for `settings` (tests pass their own ZeroMQ context, and may pass the
    meter of the request metrics; else one exporting as `settings` says, or a no-op one)."""
    hub = HubLink(settings.hub_endpoint, ctx=ctx)
    provider = None
    if meter is None:
        meter, provider = otel.setup_meter(
            settings.metrics_exporters, interval_ms=settings.metrics_export_interval_ms,
            service_name="svc-ssp-gateway", instance_id=settings.instance_id,
            meter_name="gateway")
    handler: HubLogHandler | None = None
    if settings.copy_logs_to_hub:
        handler = HubLogHandler(hub)
        gateway_log = logging.getLogger("gateway")
        gateway_log.addHandler(handler)
        if gateway_log.getEffectiveLevel() > logging.WARNING:
            gateway_log.setLevel(logging.WARNING)
    fwd = Forwarder(hub, settings.hub_timeout_secs)
    app = GatewayApp(
        middleware=[PublicCors(["/health"]), otel.RequestMetrics(meter),
                    BearerAuth(settings.auth_secret, own_id=settings.ssp_id),
                    Lifespan(hub, handler, provider)],
        cors_enable=False,
    )
    app.req_options.strip_url_path_trailing_slash = True
    app.set_error_serializer(serialize_error)
    app.add_error_handler(Exception, _unexpected)
    for path, route, public in GET_ROUTES:
        app.add_route(path, GetRoute(fwd, route, public=public))
    for path in POST_ROUTES:
        app.add_route(path, PostRoute(fwd, f"POST {path}", settings.max_body_bytes))
    app.add_route("/logs", LogsRoute(fwd, settings))
    app.add_route("/backends", PutRoute(fwd, "PUT /backends", settings.max_body_bytes))
    app.hub = hub
    return app


def create_app(hub_endpoint: str) -> GatewayApp:
    """gunicorn's entry point (`gateway.serve`): the app of one worker, forwarding to the hub
    at `hub_endpoint`."""
    # gunicorn configures only its own loggers: without this, a handler on "gateway" (the hub
    # copy) would silence Python's last-resort stderr output. No-op if logging is set up.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s")
    return build_app(GatewaySettings.from_env(os.environ, hub_endpoint))
