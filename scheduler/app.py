"""The scheduler's ingest listener: a Falcon ASGI app over one :class:`scheduler.core.Scheduler`.

Served by uvicorn in the scheduler's own process (the state lives there). Every error the
listener decides is ``{"error": code, "message": text}`` (``ipc.httperrors``): malformed JSON,
a body of the wrong shape or a field of the wrong type is 400 ``invalid`` naming the field,
never a 500. Unknown routes are 404, wrong methods 405. The listener is unauthenticated except
the routes of ``scheduler.listenerauth`` when ``SVC_AUTH_SECRET`` is set: ``/proxy/*`` (spec,
Authentication 2), the SSP and job routes, and what changes the cluster.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import falcon
import falcon.asgi
from opentelemetry.metrics import Meter, NoOpMeter
from surrealdb.data.cbor import decode as cbor_decode

from dbclient import DbError
from dbclient.eventrecord import typed_record
from ipc import otel
from ipc.body import DEFAULT_MAX_BODY_BYTES, check_content_type, parse_json, read_bytes
from ipc.httperrors import HttpError, bad_request, serialize_error
from ipc.messages import ErrorCode
from ipc.publiccors import PublicCors
from ipc.routebodies import BodyError, RowChange, ViewRegistration, ViewUnregistration
from scheduler.backups import add_backup_routes
from scheduler.core import Reply, Scheduler, SchedulerBusy
from scheduler.impersonate import add_impersonation_routes
from scheduler.jobs import add_job_routes
from scheduler.listenerauth import ListenerAuth, peer_names, require_peer
from scheduler.proxy import ProxyInvalid, encode_cbor, encode_json, parse_statement, run_statement
from scheduler.workflows.wiring import attach_workflows

__all__ = ["create_app"]

log = logging.getLogger("scheduler.http")
_MAX_BATCH_BODY = 64 * 1024 * 1024
SSP_ID_MAX = 200
URL_MAX = 2048


def _send(resp: falcon.asgi.Response, reply: Reply) -> None:
    resp.status = reply.status
    if reply.raw is not None:
        resp.data = reply.raw
        resp.content_type = reply.content_type
    else:
        resp.media = reply.body


async def _json_body(req: falcon.asgi.Request, limit: int = DEFAULT_MAX_BODY_BYTES) -> Any:
    check_content_type(req.content_type)
    return parse_json(await read_bytes(req, limit))


def _obj(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        kind = "null" if body is None else type(body).__name__
        raise bad_request(f"the body must be a JSON object, got {kind}")
    return body


def _str_field(body: dict[str, Any], key: str, *, required: bool = True) -> str | None:
    if key not in body or body[key] is None:
        if required:
            raise bad_request(f"{key}: is required (a string)")
        return None
    v = body[key]
    if not isinstance(v, str):
        raise bad_request(f"{key}: must be a string")
    return v


def _num_field(body: dict[str, Any], key: str, *, required: bool,
               integer: bool = False) -> None:
    if key not in body or body[key] is None:
        if required:
            raise bad_request(f"{key}: is required (a number)")
        return
    v = body[key]
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or (isinstance(v, float) and not math.isfinite(v)):
        raise bad_request(f"{key}: must be {'an integer' if integer else 'a number'}")


def _busy(e: SchedulerBusy) -> HttpError:
    return HttpError(503, "restoring" if "restoring" in str(e) else "cloning", str(e))


class Ingest:
    def __init__(self, s: Scheduler) -> None:
        self.s = s

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await _json_body(req)
        try:
            event = RowChange.from_body(body)
        except BodyError as e:
            # A database event's http::post fails the application's write with only the
            # status: the reason is here (never the record, which is application data).
            log.warning("/ingest refused an event: %s", e)
            raise bad_request(str(e)) from None
        try:
            cbor_row = typed_record(body)
        except ValueError as e:
            log.warning("/ingest refused an event on table %r: %s", event.table, e)
            raise bad_request(str(e)) from None
        ev = {"table": event.table, "op": event.op, "id": event.id,
              "record": event.record if cbor_row is None else cbor_row}
        try:
            seq = await self.s.ingest(ev, typed=cbor_row is not None)
        except SchedulerBusy as e:
            raise _busy(e) from None
        except ValueError as e:
            log.warning("/ingest refused an event on table %r: %s", event.table, e)
            raise bad_request(str(e)) from None
        except OSError:
            log.exception("WAL append failed")
            raise HttpError(500, ErrorCode.INTERNAL, "the event could not be written to "
                               "the WAL (logged)") from None
        resp.media = {"seq": seq}


class ProxyQuery:
    def __init__(self, s: Scheduler) -> None:
        self.s = s

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        ctype = (req.content_type or "").split(";", 1)[0].strip().lower()
        if ctype == "application/cbor":
            data = await read_bytes(req, DEFAULT_MAX_BODY_BYTES)
            try:
                body = cbor_decode(data)
            except Exception:  # noqa: BLE001 - the CBOR decoder raises many types on garbage
                raise bad_request("request body is not valid CBOR") from None
        else:
            body = await _json_body(req)
        body = _obj(body)
        try:
            st = parse_statement(body.get("query"), body.get("vars"))
        except ProxyInvalid as e:
            raise bad_request(str(e)) from None

        async def upstream(text: str) -> Any:
            return await self.s.db.query_one(text, idempotent=True)

        try:
            result = await run_statement(st, self.s.replica, upstream)
        except ProxyInvalid as e:
            raise bad_request(str(e)) from None
        except DbError as e:
            raise HttpError(500, ErrorCode.INTERNAL, f"upstream database: {e}") from None
        except Exception:
            log.exception("proxy query failed on the replica")
            raise HttpError(500, ErrorCode.INTERNAL, "the replica failed (logged)") from None
        if "application/cbor" in (req.get_header("Accept") or ""):
            resp.data = encode_cbor(result)
            resp.content_type = "application/cbor"
        else:
            resp.data = encode_json(result)
            resp.content_type = falcon.MEDIA_JSON


class ProxyNoop:
    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = {}


class ViewRegister:
    def __init__(self, s: Scheduler) -> None:
        self.s = s

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await _json_body(req)
        try:
            reg = ViewRegistration.from_body(body)
        except BodyError as e:
            raise bad_request(str(e)) from None
        _send(resp, await self.s.register_view(reg.id, body))


class ViewUnregister:
    def __init__(self, s: Scheduler) -> None:
        self.s = s

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await _json_body(req)
        try:
            un = ViewUnregistration.from_body(body)
        except BodyError as e:
            raise bad_request(str(e)) from None
        self.s.unregister_view(un.id)
        resp.media = {"ok": True, "id": un.id}


class SspRegister:
    def __init__(self, s: Scheduler) -> None:
        self.s = s

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = _obj(await _json_body(req))
        ssp_id = _str_field(body, "ssp_id")
        url = _str_field(body, "url")
        assert ssp_id is not None and url is not None
        if not ssp_id.strip():
            raise bad_request("ssp_id: must not be empty")
        if not url.startswith(("http://", "https://")) or len(url) < 9:
            raise bad_request("url: must start with http:// or https://")
        if len(ssp_id) > SSP_ID_MAX or len(url) > URL_MAX:
            raise bad_request(f"ssp_id and url: at most {SSP_ID_MAX} and {URL_MAX} characters")
        warm = _warm_position(body.get("warm"))
        require_peer(req, ssp_id)
        _send(resp, await self.s.register_ssp(ssp_id, url,
                                              verified=self.s.peer_keys is not None,
                                              warm=warm))


def _warm_position(raw: Any) -> tuple[str, int] | None:
    """The optional `warm` field of `POST /ssp/register` (ours): `{epoch, seq}`."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise bad_request("warm: must be an object {epoch, seq}")
    epoch = raw.get("epoch")
    if not isinstance(epoch, str) or not epoch or len(epoch) > 200:
        raise bad_request("warm.epoch: must be a non-empty string")
    return epoch, _count(raw, "seq", "warm.seq")


def _count(body: dict[str, Any], key: str, name: str | None = None, *, low: int = 0,
           high: int | None = None, default: int | None = None) -> int:
    """An integer field from `low` to `high` (400 naming it otherwise)."""
    v = body.get(key, default)
    if (not isinstance(v, int) or isinstance(v, bool) or v < low
            or (high is not None and v > high)):
        bound = f"from {low} to {high}" if high is not None else f">= {low}"
        raise bad_request(f"{name or key}: must be an integer {bound}")
    return v


CATCHUP_MAX = 1000


async def _peer_body(req: falcon.asgi.Request) -> tuple[dict[str, Any], str]:
    """An SSP's own call: its JSON object body and `ssp_id`, the caller checked to be that
    SSP (400 for a bad body, 401/403 for another caller)."""
    body = _obj(await _json_body(req))
    ssp_id = _str_field(body, "ssp_id")
    assert ssp_id is not None
    require_peer(req, ssp_id)
    return body, ssp_id


class SspCatchup:
    """`POST /ssp/catchup` (ours): the WAL events of a warm start (`SspPool.catchup`)."""

    def __init__(self, s: Scheduler) -> None:
        self.s = s

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body, ssp_id = await _peer_body(req)
        after, through = _count(body, "after"), _count(body, "through")
        limit = _count(body, "limit", low=1, high=CATCHUP_MAX, default=CATCHUP_MAX)
        _send(resp, self.s.catchup(ssp_id, after, through, limit))


class SspHeartbeat:
    def __init__(self, s: Scheduler) -> None:
        self.s = s

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body, _ = await _peer_body(req)
        _num_field(body, "timestamp", required=True)
        _num_field(body, "views", required=True)
        _num_field(body, "cpu_usage", required=False)
        _num_field(body, "memory_usage", required=False)
        _num_field(body, "memory_limit_mb", required=False)
        _num_field(body, "last_seq", required=False, integer=True)
        _str_field(body, "version", required=False)
        pub = body.get("publication")
        if pub is not None and not isinstance(pub, dict):
            raise bad_request("publication: must be an object")
        _send(resp, self.s.heartbeat(body))


class SspProgress:
    def __init__(self, s: Scheduler) -> None:
        self.s = s

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        # Spec: 200 always, advisory only. A body we cannot read is ignored, not refused: the
        # SSP never retries a progress post, so an error would only be noise.
        try:
            body = await _json_body(req)
        except falcon.HTTPError as e:
            log.debug("bootstrap progress ignored: %s", e.description)
            body = None
        # Kept only from the SSP it is about: anyone may post, nobody else is believed.
        if isinstance(body, dict) and peer_names(req, body.get("ssp_id")):
            self.s.bootstrap_progress(body)
        resp.media = {"ok": True}


class AdminResync:
    def __init__(self, s: Scheduler) -> None:
        self.s = s

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await _json_body(req)
        reason = "operator resync"
        if isinstance(body, dict) and isinstance(body.get("reason"), str):
            reason = body["reason"][:200]
        _send(resp, self.s.start_reclone(reason))


class Getter:
    def __init__(self, fn: Any) -> None:
        self.fn = fn

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        out = self.fn()
        if isinstance(out, Reply):
            _send(resp, out)
        else:
            resp.media = out


async def _handle_unexpected(req: falcon.asgi.Request, resp: falcon.asgi.Response,
                             ex: Exception, params: dict[str, Any]) -> None:
    if isinstance(ex, falcon.HTTPError):
        raise ex
    log.exception("unhandled error on %s %s", req.method, req.path)
    raise HttpError(500, ErrorCode.INTERNAL, "internal error in the scheduler (logged)")


def create_app(s: Scheduler, meter: Meter | None = None
               ) -> falcon.asgi.App[falcon.asgi.Request, falcon.asgi.Response]:
    """The ingest listener's routes bound to ``s``; request metrics on ``meter``
    (``ipc.otel``; None: not measured)."""
    app: falcon.asgi.App[falcon.asgi.Request, falcon.asgi.Response] = falcon.asgi.App(
        middleware=[PublicCors(["/health"]), otel.RequestMetrics(meter or NoOpMeter("scheduler")),
                    ListenerAuth(s.cfg.auth_secret)])
    app.set_error_serializer(serialize_error)
    app.add_error_handler(Exception, _handle_unexpected)
    app.add_route("/ingest", Ingest(s))
    app.add_route("/proxy/query", ProxyQuery(s))
    app.add_route("/proxy/signin", ProxyNoop())
    app.add_route("/proxy/use", ProxyNoop())
    app.add_route("/view/register", ViewRegister(s))
    app.add_route("/view/unregister", ViewUnregister(s))
    app.add_route("/ssp/register", SspRegister(s))
    app.add_route("/ssp/catchup", SspCatchup(s))
    app.add_route("/ssp/heartbeat", SspHeartbeat(s))
    app.add_route("/ssp/bootstrap-progress", SspProgress(s))
    app.add_route("/admin/resync", AdminResync(s))
    app.add_route("/metrics", Getter(s.metrics))
    app.add_route("/health", Getter(s.health))
    app.add_route("/health/snapshot", Getter(s.snapshot))
    app.add_route("/info", Getter(s.info))
    add_job_routes(app, s)
    attach_workflows(app, s)
    add_backup_routes(app, s)  # the backup plane (scheduler/backups.py)
    add_impersonation_routes(app, s)
    return app
