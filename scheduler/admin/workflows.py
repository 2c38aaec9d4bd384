"""Admin routes for workflows and schedules (spec "Admin listener"), over the scheduler's
workflow engine (:mod:`scheduler.workflows.engine`, reached through the cluster adapter).

Reads (bodies: :mod:`scheduler.workflows.views`):

* ``GET workflows/runs?name&schedule&status&rerun_of&limit`` -> ``{runs, limit, totals}``
  (``limit`` 1-500, default 50; ``status`` one of running, completed, failed, killed);
* ``GET workflows/runs/{id}`` -> ``{run}`` with ``steps`` and ``dag`` (``id``: the run key
  or ``_00_workflow_run:<key>``);
* ``GET workflows/stream``: server-sent events, event ``runs``, ``{runs, totals}`` (the
  unfiltered list, newest 50) at once and after every change (coalesced, at most every
  ``STREAM_MIN_SECS``); a viewer that falls behind gets ``event: gap`` first;
* ``GET schedules`` -> ``{schedules, ad_hoc}`` (each with its ``rollup`` totals);
  ``GET schedules/{name}`` -> ``{schedule}`` with ``next_fires``, ``recent_fires`` and
  ``rollup``.

Actions (each also an operation record where the spec says so: cancel and retry):

* ``POST workflows/runs/{id}/cancel`` -> 202 ``{run, status: killed|kill_requested,
  operation}``; 409 ``not_running``;
* ``POST workflows/runs/cancel`` ``{ids: [run id, ...]}`` (1 to ``BULK_MAX``, distinct): the
  same cancel for each run in ONE request -> 200 ``{results, cancelled, total}``, ``results``
  in the order asked, each ``{id, ok: true, status, run, operation}`` or ``{id, ok: false,
  status: <HTTP status>, code, error}`` (one run's refusal does not stop the others); 400 when
  ``ids`` is missing, empty, too long, repeated or not strings;
* ``POST workflows/runs/{id}/rerun`` -> 201 ``{run, rerun_of}``; 409 ``migration_required``;
* ``POST workflows/runs/{id}/retry`` -> 200 ``{run, retry_count, reset, kept, operation}``;
  409 ``not_retryable``, ``kill_pending``, ``migration_required``;
* ``POST schedules/{name}/pause`` | ``resume`` -> ``{name, paused}``;
* ``POST schedules/{name}/trigger`` -> ``{name, triggered_at}``; 409 ``paused``,
  ``disabled``;
* ``POST schedules/{name}/release`` -> ``{name, quarantined: false, released: true}``; 409
  ``not_quarantined``.

Errors: the engine's refusals keep their status and code; a database error is 503
(``no_workflow_tables`` before the tables are installed, else ``db_unreachable``). The cancel
operation is ``done`` once the run is ``killed``; the retry operation once the
reopened run ends (``done`` when it completed, ``failed`` otherwise). 503 ``not_ready`` while
the engine has no workflow tables or no database, 503 ``disabled`` with
``SVC_WORKFLOWS_ENABLED=false``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import falcon
import falcon.asgi

from dbclient import DbError
from scheduler.admin.errors import AdminError, Invalid, Unavailable, db_unreachable
from scheduler.admin.sse import Channel, channel_stream
from scheduler.admin.values import q_enum, q_int, q_str, read_json
from scheduler.workflows import views
from scheduler.workflows.errors import OpError

log = logging.getLogger("scheduler.admin.workflows")

__all__ = ["WorkflowsApi", "workflow_routes"]

STREAM_LIMIT = 50
STREAM_MIN_SECS = 0.5
NAME_MAX = 200
BULK_MAX = 200


def _op_error(e: OpError) -> AdminError:
    return AdminError(e.message, code=e.code, status=e.status)


def _param(value: str, what: str) -> str:
    if not value or len(value) > NAME_MAX or "\x00" in value:
        raise Invalid(f"{what}: 1 to {NAME_MAX} characters")
    return value


class WorkflowsApi:
    """The engine as the admin plane uses it: bodies, the runs stream, operation records."""

    def __init__(self, plane: Any) -> None:
        self.plane = plane
        self.channel = Channel()
        self._ops: dict[str, tuple[str, str]] = {}  # run key -> (operation id, kind)
        self._publish: asyncio.Task[None] | None = None
        self._hooked: Any = None

    def engine(self) -> Any:
        eng = self.plane.cluster.workflows()
        if eng is None:
            raise Unavailable("workflows are not running in this scheduler", code="disabled")
        if eng is not self._hooked:
            eng.change_hooks.append(self._changed)
            eng.run_end_hooks.append(self._run_ended)
            self._hooked = eng
        return eng

    async def call(self, coro: Any) -> Any:
        try:
            return await coro
        except OpError as e:
            raise _op_error(e) from None
        except DbError as e:
            if "does not exist" in str(e):
                raise Unavailable("no workflow tables in the database yet: `svc schema apply` "
                                  "or `svc migrate` installs them",
                                  code="no_workflow_tables") from None
            raise db_unreachable() from None

    # ------------------------------------------------------------------ stream
    def _changed(self) -> None:
        if self.channel.viewers == 0:
            self.channel.latest = None  # stale: the next viewer is sent a fresh list
            return
        if self._publish is None or self._publish.done():
            self._publish = asyncio.get_running_loop().create_task(self._publish_soon())

    async def _publish_soon(self) -> None:
        await asyncio.sleep(STREAM_MIN_SECS)
        await self.publish()

    async def publish(self) -> None:
        try:
            body = await views.list_runs(self.engine(), name=None, schedule=None, status=None,
                                         rerun_of=None, limit=STREAM_LIMIT)
        except Exception as e:  # noqa: BLE001 - a stream update is best effort
            log.info("workflow stream update skipped: %s", e)
            return
        self.channel.publish(body)

    # ------------------------------------------------------------------ operations
    def _run_ended(self, run_key: str, status: str, err: dict[str, Any] | None) -> None:
        got = self._ops.pop(run_key, None)
        if got is None:
            return
        op_id, kind = got
        ok = status == "killed" if kind == "workflow_cancel" else status == "completed"
        why = f": {err.get('code')}" if err else ""
        self.plane.ops.finish(op_id, ok, f"run {run_key} {status}{why}")

    def track(self, run_key: str, op: dict[str, Any], kind: str) -> None:
        self._ops[run_key] = (op["id"], kind)

    async def cancel(self, key: str, who: dict[str, Any]) -> dict[str, Any]:
        """Cancel one run and record it as a ``workflow_cancel`` operation (done at once when
        the run is already killed, else when it ends)."""
        out = await self.call(self.engine().cancel(key))
        op = self.plane.ops.start("workflow_cancel", out["run"], who)
        if out["status"] == "kill_requested":
            self.track(key, op, "workflow_cancel")
        else:
            self.plane.ops.finish(op["id"], True, f"run {key} {out['status']}")
        return {**out, "operation": self.plane.ops.get(op["id"])}


class _Base:
    def __init__(self, api: WorkflowsApi) -> None:
        self.api = api


def _who(req: falcon.asgi.Request) -> dict[str, Any]:
    p = req.context.principal
    return {"subject": p.subject, "mode": p.mode}


class Runs(_Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        limit = q_int(req, "limit", default=50, minimum=1, maximum=500, clamp=True)
        assert limit is not None
        resp.media = await self.api.call(views.list_runs(
            self.api.engine(), name=q_str(req, "name", max_len=NAME_MAX),
            schedule=q_str(req, "schedule", max_len=NAME_MAX),
            status=q_enum(req, "status", views.RUN_STATUSES),
            rerun_of=q_str(req, "rerun_of", max_len=NAME_MAX), limit=limit))


class RunDetail(_Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     run_id: str) -> None:
        resp.media = await self.api.call(views.get_run(self.api.engine(),
                                                       _param(run_id, "run id")))


class RunsStream(_Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        self.api.engine()
        if self.api.channel.latest is None:
            await self.api.publish()
        resp.sse = channel_stream(self.api.channel, "runs")


class RunAction(_Base):
    def __init__(self, api: WorkflowsApi, verb: str) -> None:
        super().__init__(api)
        self.verb = verb

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      run_id: str) -> None:

        await read_json(req)  # none expected; a malformed one is still refused
        eng = self.api.engine()
        key = views.run_key_of(_param(run_id, "run id"))
        if self.verb == "rerun":
            resp.status = 201
            resp.media = await self.api.call(eng.rerun(key))
            return
        if self.verb == "cancel":
            resp.status = 202
            resp.media = await self.api.cancel(key, _who(req))
            return
        out = await self.api.call(eng.retry(key))
        op = self.api.plane.ops.start("workflow_retry", out["run"], _who(req))
        self.api.track(key, op, "workflow_retry")
        resp.media = {**out, "operation": self.api.plane.ops.get(op["id"])}


def _bulk_ids(body: Any) -> list[str]:
    ids = body.get("ids") if isinstance(body, dict) else None
    if not isinstance(ids, list) or not 1 <= len(ids) <= BULK_MAX:
        raise Invalid(f"the body must be {{\"ids\": [run id, ...]}} with 1 to {BULK_MAX} ids")
    if not all(isinstance(i, str) for i in ids):
        raise Invalid("ids: every id must be a string")
    keys = [views.run_key_of(_param(i, "run id")) for i in ids]
    if len(set(keys)) != len(keys):
        raise Invalid("ids: a run is named more than once")
    return ids


class RunsCancel(_Base):
    """``POST workflows/runs/cancel``: many cancels in one request, one result per id."""

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        ids = _bulk_ids(await read_json(req))
        self.api.engine()
        who = _who(req)
        results: list[dict[str, Any]] = []
        for run_id in ids:  # in order: each cancel is a few database statements
            try:
                out = await self.api.cancel(views.run_key_of(run_id), who)
                results.append({"id": run_id, "ok": True, **out})
            except AdminError as e:
                results.append({"id": run_id, "ok": False, "status": e.status_code,
                                "code": e.error_code, "error": e.message})
        resp.media = {"results": results, "total": len(results),
                      "cancelled": sum(1 for r in results if r["ok"])}


class Schedules(_Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = await self.api.call(views.list_schedules(self.api.engine()))


class ScheduleDetail(_Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     name: str) -> None:
        resp.media = await self.api.call(views.get_schedule(self.api.engine(),
                                                            _param(name, "schedule name")))


class ScheduleAction(_Base):
    def __init__(self, api: WorkflowsApi, verb: str) -> None:
        super().__init__(api)
        self.verb = verb

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      name: str) -> None:

        await read_json(req)
        eng = self.api.engine()
        name = _param(name, "schedule name")
        if self.verb in ("pause", "resume"):
            out = eng.pause(name, self.verb == "pause")
        elif self.verb == "trigger":
            out = eng.trigger(name)
        else:
            out = eng.release(name, str(_who(req).get("subject")))
        resp.media = await self.api.call(out)


def workflow_routes(plane: Any) -> list[tuple[str, Any]]:
    """The routes of this module for the admin app's route table."""
    api = WorkflowsApi(plane)
    plane.workflows_api = api
    return [
        ("/workflows/runs", Runs(api)),
        ("/workflows/stream", RunsStream(api)),
        ("/workflows/runs/cancel", RunsCancel(api)),
        ("/workflows/runs/{run_id}", RunDetail(api)),
        ("/workflows/runs/{run_id}/cancel", RunAction(api, "cancel")),
        ("/workflows/runs/{run_id}/rerun", RunAction(api, "rerun")),
        ("/workflows/runs/{run_id}/retry", RunAction(api, "retry")),
        ("/schedules", Schedules(api)),
        ("/schedules/{name}", ScheduleDetail(api)),
        ("/schedules/{name}/pause", ScheduleAction(api, "pause")),
        ("/schedules/{name}/resume", ScheduleAction(api, "resume")),
        ("/schedules/{name}/trigger", ScheduleAction(api, "trigger")),
        ("/schedules/{name}/release", ScheduleAction(api, "release")),
    ]
