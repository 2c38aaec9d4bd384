"""The pool listener (``SVC_POOL_HOST:SVC_POOL_PORT``): ``/pool/v1/*`` for pool agents.

Every machine route takes ``Authorization: Bearer <machine token>`` (the token the provider
gave the machine at boot; only its hash is kept) and a JSON object body:

| route | body | answer |
|---|---|---|
| ``POST /pool/v1/machines/{id}/register`` | ``{version?}`` | ``{machine, heartbeat_ms, drain}``; the machine is ``ready`` |
| ``POST /pool/v1/machines/{id}/heartbeat`` | ``{running: [job id]}`` | ``{state, drain, paused, cancel: [job id], slots_in_use}`` |
| ``POST /pool/v1/machines/{id}/take`` | ``{max, wait_ms}`` (wait at most 5 s) | ``{jobs: [{id, url, payload, headers, timeout_secs, attempt}], drain, paused}`` |
| ``POST /pool/v1/machines/{id}/result`` | ``{job_id, status, body, retry_after, error_kind, error}`` | ``{job_id, written}`` |
| ``POST /pool/v1/machines/{id}/drained`` | ``{}`` | ``{machine}``; the machine is ``destroyed`` |
| ``GET /pool/v1/health`` | | ``{ok, pools: {name: status}}`` (no token) |

Errors are ``{error, message}``: 400 ``invalid`` (body), 401 ``unauthorized`` (token), 404
``unknown_machine``, 409 ``not_assigned`` (a result for a job the machine no longer holds:
drop it), 410 ``machine_removed`` (the machine is terminal: the agent exits), 413, 415, 503
``db_unreachable`` (the database did not answer; try again).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import falcon
import falcon.asgi

from dbclient import DbError
from scheduler.pools.service import PoolError, PoolService, db_down

log = logging.getLogger("scheduler.pools.http")

MAX_BODY = 256 * 1024


def _fail(resp: falcon.asgi.Response, status: int, error: str, message: str) -> None:
    resp.status = status
    resp.media = {"error": error, "message": message}


async def _body(req: falcon.asgi.Request) -> dict[str, Any]:
    if req.content_length is not None and req.content_length > MAX_BODY:
        raise PoolError(413, "payload_too_large", f"the body is over {MAX_BODY} bytes")
    data = b""
    async for chunk in req.stream:
        data += chunk
        if len(data) > MAX_BODY:
            raise PoolError(413, "payload_too_large", f"the body is over {MAX_BODY} bytes")
    if not data.strip():
        return {}
    ctype = (req.content_type or "").split(";", 1)[0].strip().lower()
    if ctype and ctype != "application/json":
        raise PoolError(415, "unsupported", "the body must be JSON")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise PoolError(400, "invalid", "the body is not valid JSON") from None
    except RecursionError:  # json's C decoder gives up on deep nesting: still the body's fault
        raise PoolError(400, "invalid", "the body is nested too deeply") from None
    if not isinstance(doc, dict):
        raise PoolError(400, "invalid", "the body must be a JSON object")
    return doc


def _token(req: falcon.asgi.Request) -> str | None:
    auth = req.get_header("Authorization") or ""
    return auth[7:].strip() if auth[:7].lower() == "bearer " else None


class MachineRoute:
    def __init__(self, service: PoolService, action: str) -> None:
        self.service = service
        self.action = action

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      machine_id: str) -> None:
        s = self.service
        try:
            body = await _body(req)
            token = _token(req)
            if self.action == "register":
                resp.media = await s.register(machine_id, token, body)
            elif self.action == "heartbeat":
                resp.media = await s.heartbeat(machine_id, token, body)
            elif self.action == "take":
                resp.media = await s.take(machine_id, token, body)
            elif self.action == "result":
                resp.media = await s.result(machine_id, token, body)
            else:
                resp.media = await s.drained(machine_id, token)
        except PoolError as e:
            _fail(resp, e.status, e.code, e.message)
        except DbError as e:
            log.warning("pool %s of %s: database error: %s", self.action, machine_id, e)
            down = db_down()
            _fail(resp, down.status, down.code, down.message)


class Health:
    def __init__(self, service: PoolService) -> None:
        self.service = service

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        s = self.service
        resp.media = {"ok": True, "pools": {n: s.status_of(s.pools[n]) for n in s.pool_names()}}


async def _unexpected(req: falcon.asgi.Request, resp: falcon.asgi.Response, ex: Exception,
                      params: Any) -> None:
    if isinstance(ex, falcon.HTTPError):
        _fail(resp, ex.status_code, "not_found" if ex.status_code == 404 else "invalid",
              str(ex.title or "refused"))
        return
    log.exception("unhandled error on %s %s", req.method, req.path)
    _fail(resp, 500, "internal", "internal error in the pool listener (logged)")


def create_pool_app(service: PoolService) -> falcon.asgi.App:
    """The pool listener's routes bound to ``service``."""
    app: falcon.asgi.App = falcon.asgi.App(cors_enable=False)
    app.add_error_handler(Exception, _unexpected)
    base = "/pool/v1"
    for action in ("register", "heartbeat", "take", "result", "drained"):
        app.add_route(f"{base}/machines/{{machine_id}}/{action}", MachineRoute(service, action))
    app.add_route(f"{base}/health", Health(service))
    return app
