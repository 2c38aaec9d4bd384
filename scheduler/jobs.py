"""The scheduler's job routes and backend health (spec: scheduler endpoint table, job rows).

Jobs live in the database (outbox rows, see `ssp.jobs`); the SSPs run them. The scheduler
only routes operations to its Ready SSPs:

- `POST /job/dispatch {job_id, table, payload}`: `job_id` must be a record of `table` (400
  otherwise). Picks one Ready SSP (round robin) and asks it to admit the job now (`POST
  /job/recover {table, id}` on the SSP, which answers the row after that admission round);
  200 with the id of the SSP that holds the job as a JSON string: the row's `assignee` once
  claimed (possibly another SSP, woken by the ingest broadcast), else the SSP asked (it runs
  the job when one of its slots frees). An SSP's 4xx (404: not a job table, no such job)
  relayed verbatim; 503 `no_ssp` when none is Ready or none answered. The job row in the
  database is the job (outbox): dispatch does not write it, and `payload` is only
  shape-checked.
- `POST /job/result {job_id, status, result?, error?}`: 200; the latest status per job is
  kept in memory (bounded) for `/metrics` `running_jobs` (jobs whose latest status is
  `pending` or `running`, plus the machine pools' jobs waiting or on a machine). The SSPs
  post one for every status change of a job they run (`ssp.jobreports.ResultReporter`);
  anyone else may post too.
- `POST /job/kill {id}`: sent to every Ready SSP (the owner cancels, the others flag the row);
  200 `{id, dispatched, ssps}` (`dispatched`: how many SSPs answered 200, `ssps`: their ids);
  when every SSP refused the id (404: no such job, not a job table) their verdict verbatim;
  503 `no_ssp` when none is Ready.
- `POST /job/retry {id}`: forwarded to one Ready SSP; 200 `{id, status: 'pending',
  assigned_to}`; the SSP's 404 / 409 relayed verbatim; an unreachable SSP or a 5xx moves on
  to the next; 503 `no_ssp` when none answered.
- every `job_sweep_secs` (30) `POST /job/recover` on one Ready SSP (rotating): processing rows
  whose lease expired go back to pending and are admitted.

`PUT /backends` and `backends` in `GET /health`: the same `maintenance.backends.BackendMonitor` as the
standalone SSP, started with `SVC_BACKENDS`; its `backend_down` incidents go to the
scheduler's incident store (`scheduler.incidents`, `incidents.json` beside the
replica). Like the SSP's, `/health` has `backends` only
while the list is non-empty ("with a backend list"); `PUT /backends []` removes it.

Wiring: `add_job_routes(app, scheduler)` adds the routes and a lifespan hook that starts and
stops the sweep and the health checks with the listener.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import falcon
import falcon.asgi

from dbclient.tasks import cancel_and_wait
from engine.values import parse_record_id, record_id_text
from ipc.body import DEFAULT_MAX_BODY_BYTES, check_content_type, parse_json, read_bytes
from ipc.httperrors import bad_request
from ipc.routebodies import BodyError, JobRef
from maintenance.backends import Backend, BackendListError, BackendMonitor, parse_backends

log = logging.getLogger("scheduler.jobs")

RESULT_STATUSES = ("pending", "running", "completed", "failed")
RESULTS_KEPT = 10_000
#: Pause before `/job/kill` is sent a second time to an SSP that did not answer it.
KILL_RESEND_SECS = 0.5


class SchedulerLike(Protocol):
    """What the job plane needs from `scheduler.core.Scheduler`."""

    cfg: Any
    extra_health: dict[str, Any]
    running_jobs: Callable[[], int]

    def ready_ids(self) -> list[str]: ...

    async def forward(self, ssp_id: str, path: str, body: Mapping[str, Any]
                      ) -> tuple[int, bytes, str] | None: ...


def _no_ssp(message: str) -> tuple[int, dict[str, Any]]:
    return 503, {"error": "no_ssp", "message": message}


def _job_of(raw: bytes) -> dict[str, Any]:
    """The `job` object of an SSP's `/job/recover {id}` answer (`{}` when it has none)."""
    try:
        job = json.loads(raw).get("job")
    except (ValueError, AttributeError):
        return {}
    return job if isinstance(job, dict) else {}


def _backends_of(cfg: Any) -> list[Backend]:
    """`SchedulerConfig.backends` (validated there by `maintenance.backends.parse_backends`) as
    health-check entries."""
    return parse_backends([dict(spec.raw) for spec in cfg.backends])


class JobPlane:
    """Job routing and backend health of one scheduler (see the module docstring)."""

    def __init__(self, s: SchedulerLike) -> None:
        self.s = s
        self.results: OrderedDict[str, dict[str, Any]] = OrderedDict()
        # Told `(job_id, status)` on every `/job/result` (the workflow engine follows its jobs).
        self.result_hooks: list[Callable[[str, str], None]] = []
        self._turn = 0
        self._sweep: asyncio.Task[None] | None = None
        # The machine pools (scheduler.pools.PoolService) when configured: they own the job
        # tables of `run_on` backends, which no SSP runs, so kill and retry go there.
        self.pooled: Any = None
        store = getattr(s, "incidents", None)
        self.backends = BackendMonitor(
            _backends_of(s.cfg), interval_secs=s.cfg.health_check_interval_secs,
            down_after_secs=s.cfg.backend_down_after_secs,
            incidents_dir=s.cfg.replica_db_path.parent, component=s.cfg.scheduler_id,
            sink=store.record if store is not None else None)
        self._show_backends()

    def _show_backends(self) -> None:
        """`backends` in `/health` with a backend list only (spec: "With a backend list")."""
        if self.backends.configured:
            self.s.extra_health["backends"] = self.backends.summary
        else:
            self.s.extra_health.pop("backends", None)

    def replace_backends(self, backends: list[Backend]) -> None:
        """`PUT /backends`."""
        self.backends.replace(backends)
        self._show_backends()

    async def start(self) -> None:
        await self.backends.start()
        self._sweep = asyncio.get_running_loop().create_task(self._sweep_loop(),
                                                             name="job-sweep")

    async def stop(self) -> None:
        if self._sweep is not None:
            await cancel_and_wait(self._sweep)  # a lost cancel: dbclient.tasks
        await self.backends.stop()

    def _rotation(self) -> list[str]:
        ready = self.s.ready_ids()
        if not ready:
            return []
        k = self._turn % len(ready)
        self._turn += 1
        return ready[k:] + ready[:k]

    def running_jobs(self) -> int:
        """Jobs pending or running: by the latest `/job/result` of each, plus the pools'."""
        n = sum(1 for r in self.results.values() if r["status"] in ("pending", "running"))
        if self.pooled is not None:
            n += self.pooled.running_jobs()
        return n

    # ------------------------------------------------------------------ operations

    async def dispatch(self, job_id: str, table: str
                       ) -> tuple[int, Any] | tuple[int, bytes, str]:
        failures = []
        before = self.results.get(job_id)
        for ssp_id in self._rotation():
            res = await self.s.forward(ssp_id, "/job/recover", {"table": table, "id": job_id})
            if res is not None and res[0] == 200:
                job = _job_of(res[1])
                status = job.get("status")
                # The SSP whose claim won (it may be another one, woken by the ingest
                # broadcast); a row still pending waits for a slot on the SSP asked.
                owner = job.get("assignee") if status != "pending" else None
                assigned = owner if isinstance(owner, str) and owner else ssp_id
                if self.results.get(job_id) is before and status in ("pending", "processing"):
                    # else the SSP has reported since, or the job had already ended
                    self.results[job_id] = {"status": "pending" if status == "pending"
                                            else "running", "ssp_id": assigned}
                    self.results.move_to_end(job_id)
                    self._trim()
                return 200, assigned
            if res is not None and 400 <= res[0] < 500:
                return res  # the SSP's verdict (404: not a job table) verbatim
            failures.append(f"{ssp_id}: {'unreachable' if res is None else res[0]}")
        return _no_ssp("no SSP took the job" + (": " + "; ".join(failures) if failures
                                                 else " (none is ready)"))

    def result(self, body: dict[str, Any]) -> None:
        entry = {k: body.get(k) for k in ("status", "result", "error")}
        self.results[str(body["job_id"])] = entry
        self.results.move_to_end(str(body["job_id"]))
        self._trim()
        for hook in self.result_hooks:
            hook(str(body["job_id"]), str(body["status"]))

    def _trim(self) -> None:
        while len(self.results) > RESULTS_KEPT:
            self.results.popitem(last=False)

    async def kill(self, job_id: str) -> tuple[int, Any] | tuple[int, bytes, str]:
        if self.pooled is not None and self.pooled.owns(job_id):
            return await self.pooled.kill_job(job_id)
        ready = self.s.ready_ids()
        if not ready:
            return _no_ssp("no SSP is ready")
        answers = await asyncio.gather(*(self._kill_on(i, job_id) for i in ready))
        ok = [i for i, a in zip(ready, answers) if a is not None and a[0] == 200]
        refused = [a for a in answers if a is not None and 400 <= a[0] < 500]
        if not ok and refused and len(refused) == len(answers):
            # Every SSP judged the id (404: no such job or not a job table): its verdict, as
            # retry relays it, rather than a 200 that killed nothing.
            return refused[0]
        return 200, {"id": job_id, "dispatched": len(ok), "ssps": ok}

    async def _kill_on(self, ssp_id: str, job_id: str) -> tuple[int, bytes, str] | None:
        """`/job/kill` on one SSP, sent again once after a short pause when it was unreachable
        or busy (a kill is idempotent: flagging or cancelling twice changes nothing)."""
        res = await self.s.forward(ssp_id, "/job/kill", {"id": job_id})
        if res is None or res[0] >= 500:
            await asyncio.sleep(KILL_RESEND_SECS)
            res = await self.s.forward(ssp_id, "/job/kill", {"id": job_id})
        return res

    async def retry(self, job_id: str) -> tuple[int, Any] | tuple[int, bytes, str]:
        if self.pooled is not None and self.pooled.owns(job_id):
            return await self.pooled.retry_job(job_id)
        failures = []
        for ssp_id in self._rotation():
            res = await self.s.forward(ssp_id, "/job/retry", {"id": job_id})
            if res is None or res[0] >= 500:
                failures.append(f"{ssp_id}: {'unreachable' if res is None else res[0]}")
                continue
            if res[0] == 200:
                return 200, {"id": job_id, "status": "pending", "assigned_to": ssp_id}
            return res  # the SSP's verdict (404 unknown job, 409 not_terminal) verbatim
        return _no_ssp("no SSP took the retry" + (": " + "; ".join(failures) if failures
                                                   else " (none is ready)"))

    async def sweep_once(self) -> str | None:
        """`/job/recover` on one Ready SSP; the id of the SSP that answered 200."""
        for ssp_id in self._rotation():
            res = await self.s.forward(ssp_id, "/job/recover", {})
            if res is not None and res[0] == 200:
                return ssp_id
            log.info("job recovery on %s failed (%s)", ssp_id,
                     "unreachable" if res is None else res[0])
        return None

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.s.cfg.job_sweep_secs)
            try:
                await self.sweep_once()
            except Exception:
                log.exception("job recovery sweep failed")


# ---------------------------------------------------------------------------- HTTP


async def _body(req: falcon.asgi.Request) -> Any:
    check_content_type(req.content_type)
    return parse_json(await read_bytes(req, DEFAULT_MAX_BODY_BYTES))


def _answer(resp: falcon.asgi.Response, out: tuple[Any, ...]) -> None:
    resp.status = out[0]
    if len(out) == 3:
        resp.data, resp.content_type = out[1], out[2]
    else:
        resp.media = out[1]


def _job_ref(body: Any) -> str:
    try:
        return JobRef.from_body(body).id
    except BodyError as e:
        raise bad_request(str(e)) from None


class _Dispatch:
    def __init__(self, p: JobPlane) -> None:
        self.p = p

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await _body(req)
        if not isinstance(body, dict):
            raise bad_request("the body must be a JSON object {job_id, table, payload}")
        for key in ("job_id", "table"):
            if not isinstance(body.get(key), str) or not body[key].strip():
                raise bad_request(f"{key}: is required (a non-empty string)")
        if "payload" in body and not isinstance(body["payload"], dict):
            raise bad_request("payload: must be an object")
        try:
            rid = parse_record_id(body["job_id"])
        except ValueError:
            raise bad_request("job_id: must be a record id such as job:1") from None
        if rid.table_name != body["table"]:
            raise bad_request(f"job_id: {body['job_id'][:80]} is not a record of table "
                              f"{body['table'][:80]}")
        _answer(resp, await self.p.dispatch(record_id_text(rid), body["table"]))


class _Result:
    def __init__(self, p: JobPlane) -> None:
        self.p = p

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await _body(req)
        if not isinstance(body, dict):
            raise bad_request("the body must be a JSON object {job_id, status, result, error}")
        if not isinstance(body.get("job_id"), str) or not body["job_id"]:
            raise bad_request("job_id: is required (a non-empty string)")
        if body.get("status") not in RESULT_STATUSES:
            raise bad_request(f"status: must be one of {', '.join(RESULT_STATUSES)}")
        if body.get("result") is not None and not isinstance(body["result"], dict):
            raise bad_request("result: must be an object")
        if body.get("error") is not None and not isinstance(body["error"], str):
            raise bad_request("error: must be a string")
        self.p.result(body)
        resp.media = {"ok": True, "job_id": body["job_id"]}


class _Kill:
    def __init__(self, p: JobPlane) -> None:
        self.p = p

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        _answer(resp, await self.p.kill(_job_ref(await _body(req))))


class _Retry:
    def __init__(self, p: JobPlane) -> None:
        self.p = p

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        _answer(resp, await self.p.retry(_job_ref(await _body(req))))


class _Recover:
    def __init__(self, p: JobPlane) -> None:
        self.p = p

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        ssp_id = await self.p.sweep_once()
        if ssp_id is None:
            _answer(resp, _no_ssp("no SSP ran the recovery"))
        else:
            resp.media = {"ssp_id": ssp_id}


class _Backends:
    def __init__(self, p: JobPlane) -> None:
        self.p = p

    async def on_put(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        try:
            backends = parse_backends(await _body(req))
        except BackendListError as e:
            raise bad_request(str(e)) from None
        self.p.replace_backends(backends)
        resp.media = {"count": len(backends),
                      "backends": [self.p.backends.entry(b) for b in backends]}


class _Lifespan:
    def __init__(self, p: JobPlane) -> None:
        self.p = p

    async def process_startup(self, scope: Any, event: Any) -> None:
        await self.p.start()

    async def process_shutdown(self, scope: Any, event: Any) -> None:
        await self.p.stop()


def add_job_routes(app: falcon.asgi.App, s: SchedulerLike) -> JobPlane:
    """Add the job routes and `PUT /backends` to the scheduler's listener."""
    p = JobPlane(s)
    s.running_jobs = p.running_jobs
    if hasattr(s, "job_plane"):
        s.job_plane = p  # the admin plane's kill, retry and backend pages go through it
    app.add_route("/job/dispatch", _Dispatch(p))
    app.add_route("/job/result", _Result(p))
    app.add_route("/job/kill", _Kill(p))
    app.add_route("/job/retry", _Retry(p))
    app.add_route("/job/recover", _Recover(p))
    app.add_route("/backends", _Backends(p))
    app.add_middleware(_Lifespan(p))
    return p


__all__ = ["JobPlane", "add_job_routes"]
