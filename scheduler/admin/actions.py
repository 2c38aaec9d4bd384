"""Operator actions: SSP restarts, rolling restarts, scheduler restart/reclone/rehash, jobs.

Long actions answer 202 with an operation record (:mod:`scheduler.admin.operations`) and run
in the background; the record says when they end. ``mode`` is required (400 without it: an
empty body never restarts anything):

* ``POST ssps/{id}/restart {mode}``: ``restart`` and ``clean`` flag the SSP (the heartbeat 409
  directive ``{reason, clean}``; ``clean`` wipes its snapshot and arena; an SSP too old to
  know the JSON directive restarts warm, and the operation keeps the SSP's ``version`` in
  ``details``). Done when an SSP of that id registered again after the flag and is Ready;
  failed after one heartbeat interval + bootstrap timeout + 30 s. ``reload`` posts the SSP's
  ``/admin/reload`` and relays its verdict. 404 unknown SSP; 409 when a restart of it is
  already pending or running.
* ``POST ssps/restart-all {mode: restart|clean, rolling: true}``: with ``rolling`` one SSP at a
  time (ids in order), each waited to Ready before the next, progress ``{done, total,
  current}``; the roll stops (failed) at the first SSP that does not come back. Without
  ``rolling`` every SSP is flagged at once. 409 ``roll_running`` while one runs; 503
  ``no_ssp`` without SSPs.
* ``POST scheduler/restart {mode}``: ``reclone`` (re-clone the replica, every SSP flagged clean
  to re-bootstrap; done when the clone ended and those SSPs are Ready again) and ``rehash``
  (recompute the replica's counts and hashes from its rows, then a drift check) answer 503
  while Cloning or Restoring and 409 ``reclone_running`` while a reclone runs. ``restart``
  needs a supervisor (``supervised``, ``SVC_SUPERVISED=1``; 409 ``not_supervised`` without):
  the process exits with :data:`RESTART_EXIT_CODE` (the supervisor relaunches it) and the next
  process completes the operation when the SSPs known before are Ready again.
* ``POST jobs/{id}/kill``, ``/retry``: the cluster's kill (broadcast) or retry (one SSP), the
  SSP's verdict relayed (``{error, code: <SSP's error>, message}`` with its status).
* ``POST jobs/clear {table, all}``: see :meth:`scheduler.admin.jobsampler.JobSampler.clear`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from dbclient.tasks import cancel_and_wait
from scheduler.admin.cluster import Cluster
from scheduler.admin.errors import AdminError, Conflict, Invalid, NotFound, Unavailable
from scheduler.admin.operations import OperationLog

log = logging.getLogger("scheduler.admin.actions")

__all__ = ["RESTART_EXIT_CODE", "Actions", "relay"]

#: exit code of a scheduler restart asked through the admin API (the supervisor relaunches)
RESTART_EXIT_CODE = 4
POLL_SECS = 0.2
SSP_MODES = ("restart", "clean", "reload")
ALL_MODES = ("restart", "clean")
SCHEDULER_MODES = ("restart", "reclone", "rehash")


def relay(out: tuple[Any, ...]) -> Any:
    """An SSP verdict relayed by the job plane: the body on 200, else an AdminError with the
    SSP's status and its ``error`` as ``code``."""
    status = int(out[0])
    body = out[1]
    if len(out) == 3 and isinstance(body, (bytes, bytearray)):
        try:
            body = json.loads(body)
        except ValueError:
            body = {"message": body.decode("utf-8", "replace")[:300]}
    if status == 200:
        return body
    code = body.get("error") if isinstance(body, dict) else None
    msg = body.get("message") if isinstance(body, dict) else None
    raise AdminError(str(msg or f"the SSP answered {status}")[:500],
                     code=str(code) if code else None, status=status)


def _mode(body: Any, allowed: tuple[str, ...]) -> str:
    """The required ``mode``: an action that restarts something is never implied by an empty
    or malformed body."""
    if not isinstance(body, dict):
        raise Invalid("the body must be an object {mode}")
    mode = body.get("mode")
    if mode not in allowed:
        raise Invalid(f"mode: is required, one of {', '.join(allowed)}")
    return str(mode)


class Actions:
    """See the module docstring."""

    def __init__(self, cluster: Cluster, ops: OperationLog,
                 request_exit: Callable[[int], None] | None = None) -> None:
        self.cluster = cluster
        self.ops = ops
        self.request_exit = request_exit
        cfg = cluster.cfg
        self.restart_timeout = (cfg.heartbeat_interval_ms / 1000 + cfg.bootstrap_timeout_secs
                                + 30.0)
        self._tasks: set[asyncio.Task[Any]] = set()

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("admin action %s failed", task.get_name(), exc_info=task.exception())

    async def stop(self) -> None:
        # an action between database calls may lose its cancel (dbclient.tasks)
        await cancel_and_wait(*self._tasks)

    # ------------------------------------------------------------------ SSPs
    def _busy(self, ssp_id: str) -> bool:
        return any(o["target"] in (f"ssp:{ssp_id}", "ssps") for o in self.ops.running()
                   if o["kind"].startswith("ssp"))

    def restart_ssp(self, ssp_id: str, body: Any, who: Mapping[str, Any]) -> dict[str, Any]:
        mode = _mode(body, SSP_MODES)
        info = self.cluster.ssp(ssp_id)
        # A restart in flight first: its SSP may be between its 409 and its new registration
        # (no entry at all), which is "being restarted", not "unknown".
        if self._busy(ssp_id) or (info is not None and info.flagged is not None):
            raise Conflict(f"SSP {ssp_id[:80]} is already being restarted",
                           code="restart_pending")
        if info is None:
            raise NotFound(f"no SSP {ssp_id[:80]} is registered")
        details = {"mode": mode, "version": info.version}
        op = self.ops.start(f"ssp_{mode}", f"ssp:{ssp_id}", who, details=details)
        if mode == "reload":
            self._spawn(self._reload(op["id"], ssp_id), f"reload-{ssp_id}")
            return op
        since = time.monotonic()
        self.cluster.flag_ssp(ssp_id, f"operator {mode} ({op['id']})", mode == "clean")
        if mode == "clean":
            self.ops.update(op["id"], note=f"clean restart asked of SSP version "
                            f"{info.version or 'unknown'} (an SSP too old for the JSON "
                            "directive restarts warm)")
        self._spawn(self._finish_restart(op["id"], [ssp_id], since), f"restart-{ssp_id}")
        return op

    async def _reload(self, op_id: str, ssp_id: str) -> None:
        res = await self.cluster.ssp_call(ssp_id, "POST", "/admin/reload", {},
                                          timeout=self.restart_timeout)
        if res is None:
            self.ops.finish(op_id, False, f"SSP {ssp_id} unreachable for /admin/reload")
        elif res[0] == 200:
            self.ops.finish(op_id, True, f"SSP {ssp_id} reloaded its circuit and is ready")
        else:
            msg = res[1].get("message") if isinstance(res[1], dict) else str(res[1])
            self.ops.finish(op_id, False, f"SSP {ssp_id} answered {res[0]} to the reload: "
                            f"{str(msg)[:300]}")

    async def _back(self, ssp_id: str, since: float, deadline: float) -> bool:
        """True once an SSP of that id registered after ``since`` and is Ready."""
        while True:
            info = self.cluster.ssp(ssp_id)
            if info is not None and info.registered_at > since and info.serving:
                return True
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(POLL_SECS)

    async def _finish_restart(self, op_id: str, ids: list[str], since: float) -> None:
        deadline = since + self.restart_timeout
        back = await asyncio.gather(*(self._back(i, since, deadline) for i in ids))
        missing = [i for i, ok in zip(ids, back, strict=True) if not ok]
        if missing:
            self.ops.finish(op_id, False, f"not re-registered and Ready within "
                            f"{self.restart_timeout:.0f}s: {', '.join(missing)}")
        else:
            self.ops.finish(op_id, True, f"{', '.join(ids)} re-registered and Ready")

    def restart_all(self, body: Any, who: Mapping[str, Any]) -> dict[str, Any]:
        mode = _mode(body, ALL_MODES)
        rolling = True
        if isinstance(body, dict) and "rolling" in body:
            if not isinstance(body["rolling"], bool):
                raise Invalid("rolling: must be true or false")
            rolling = body["rolling"]
        if self.ops.running("ssps_restart_all"):
            raise Conflict("a restart of every SSP is already running", code="roll_running")
        ids = [s.id for s in self.cluster.ssps()]
        if not ids:
            raise Unavailable("no SSP is registered", code="no_ssp")
        if any(self._busy(i) for i in ids):
            raise Conflict("an SSP restart is already running", code="restart_pending")
        op = self.ops.start("ssps_restart_all", "ssps", who,
                            progress={"done": 0, "total": len(ids), "current": None},
                            details={"mode": mode, "rolling": rolling, "ssps": ids})
        self._spawn(self._roll(op["id"], ids, mode, rolling), "restart-all")
        return op

    async def _roll(self, op_id: str, ids: list[str], mode: str, rolling: bool) -> None:
        clean = mode == "clean"
        if not rolling:
            since = time.monotonic()
            for i in ids:
                self.cluster.flag_ssp(i, f"operator {mode} of every SSP ({op_id})", clean)
            self.ops.update(op_id, progress={"done": 0, "total": len(ids), "current": "all"})
            await self._finish_restart(op_id, ids, since)
            return
        for n, ssp_id in enumerate(ids):
            self.ops.update(op_id, progress={"done": n, "total": len(ids), "current": ssp_id},
                            message=f"restarting {ssp_id} ({n + 1}/{len(ids)})")
            if self.cluster.ssp(ssp_id) is None:
                self.ops.update(op_id, note=f"{ssp_id} is no longer registered: skipped")
                continue
            since = time.monotonic()
            self.cluster.flag_ssp(ssp_id, f"operator rolling {mode} ({op_id})", clean)
            if not await self._back(ssp_id, since, since + self.restart_timeout):
                self.ops.update(op_id, progress={"done": n, "total": len(ids),
                                                 "current": ssp_id})
                self.ops.finish(op_id, False, f"{ssp_id} did not re-register and become Ready "
                                f"within {self.restart_timeout:.0f}s; the roll stopped at "
                                f"{n}/{len(ids)}")
                return
            self.ops.update(op_id, note=f"{ssp_id} is Ready again")
        self.ops.update(op_id, progress={"done": len(ids), "total": len(ids), "current": None})
        self.ops.finish(op_id, True, f"{len(ids)} SSPs restarted one at a time")

    # ------------------------------------------------------------------ scheduler
    def restart_scheduler(self, body: Any, who: Mapping[str, Any]) -> dict[str, Any]:
        mode = _mode(body, SCHEDULER_MODES)
        cluster = self.cluster
        target = f"scheduler:{cluster.scheduler_id}"
        if mode == "restart":
            if not cluster.cfg.admin.supervised:
                raise Conflict("no supervisor relaunches this scheduler (SVC_SUPERVISED is not "
                               "set): restart the process yourself", code="not_supervised")
            if self.ops.running("scheduler_restart"):
                raise Conflict("a scheduler restart is already running", code="restart_pending")
            ids = [s.id for s in cluster.ssps()]
            op = self.ops.start("scheduler_restart", target, who, details={"ssps": ids})
            self.ops.write()  # the next process completes it: on disk before we exit
            self._spawn(self._exit_soon(), "scheduler-exit")
            return op
        state = cluster.state()
        if state in ("cloning", "restoring"):
            raise Unavailable(f"the scheduler is {state}; try again when it is ready",
                              code=state)
        if cluster.reclone_running() or self.ops.running("scheduler_reclone"):
            raise Conflict("a reclone is already running", code="reclone_running")
        if mode == "rehash":
            if self.ops.running("scheduler_rehash"):
                raise Conflict("a rehash is already running", code="rehash_running")
            op = self.ops.start("scheduler_rehash", target, who)
            self._spawn(self._rehash(op["id"]), "rehash")
            return op
        ids = [s.id for s in cluster.ssps()]
        op = self.ops.start("scheduler_reclone", target, who, details={"ssps": ids})
        since = time.monotonic()
        status, answer = cluster.start_reclone(f"operator reclone ({op['id']})")
        if status != 202:
            msg = answer.get("message") if isinstance(answer, dict) else str(answer)
            self.ops.finish(op["id"], False, f"refused: {msg}")
            if status == 409:
                raise Conflict(str(msg), code="reclone_running")
            raise Unavailable(str(msg), code="cloning")
        self._spawn(self._finish_reclone(op["id"], ids, since), "reclone-watch")
        return op

    async def _exit_soon(self) -> None:
        await asyncio.sleep(0.5)  # let the 202 reach the operator first
        log.warning("scheduler restart asked through the admin API: exiting with %d for the "
                    "supervisor to relaunch", RESTART_EXIT_CODE)
        if self.request_exit is not None:
            self.request_exit(RESTART_EXIT_CODE)

    async def _rehash(self, op_id: str) -> None:
        try:
            counts = await self.cluster.rehash()
        except Exception as e:  # noqa: BLE001 - reported in the operation
            self.ops.finish(op_id, False, f"rehash failed: {type(e).__name__}")
            return
        self.ops.finish(op_id, True, f"replica rehashed: {len(counts)} tables, "
                        f"{sum(counts.values())} rows; drift check done")

    async def _finish_reclone(self, op_id: str, ids: list[str], since: float) -> None:
        deadline = since + self.restart_timeout + 600  # the clone itself takes time
        while self.cluster.reclone_running() or self.cluster.state() != "ready":
            if time.monotonic() > deadline:
                self.ops.finish(op_id, False, "the reclone did not finish in time")
                return
            await asyncio.sleep(POLL_SECS)
        self.ops.update(op_id, note="replica re-cloned; waiting for the SSPs to bootstrap again")
        await self._finish_restart(op_id, ids, since)

    def continue_restarts(self) -> None:
        """Complete the scheduler restarts the previous process was asked for."""
        for op in self.ops.continued:
            ids = [i for i in (op.get("details") or {}).get("ssps", []) if isinstance(i, str)]
            self._spawn(self._finish_scheduler_restart(op["id"], ids), "restart-continue")
        self.ops.continued = []

    async def _finish_scheduler_restart(self, op_id: str, ids: list[str]) -> None:
        since = 0.0  # any registration in this process counts
        deadline = time.monotonic() + self.restart_timeout
        while self.cluster.state() != "ready" and time.monotonic() < deadline:
            await asyncio.sleep(POLL_SECS)
        self.ops.update(op_id, note="scheduler relaunched")
        if ids:
            await self._finish_restart(op_id, ids, since)
        else:
            self.ops.finish(op_id, True, "scheduler relaunched (no SSP was registered)")

    # ------------------------------------------------------------------ jobs
    async def job(self, verb: str, job_id: str) -> Any:
        from engine.values import parse_record_id

        try:
            parse_record_id(job_id)
        except ValueError:
            raise Invalid(f"job id: a record id such as job:1, got {job_id[:80]!r}") from None
        out = await (self.cluster.job_kill(job_id) if verb == "kill"
                     else self.cluster.job_retry(job_id))
        return relay(out)
