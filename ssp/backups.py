"""The standalone SSP's maintenance plane: backups and restores of the main database (spec,
"Standalone maintenance plane"; bodies in :mod:`backup.requests`, jobs in
:mod:`backup.service`).

Routes (hub handlers, merged into the hub's route table by :func:`backup_routes`):
``POST /backup/create``, ``GET /backup/status``, ``GET /backup/status/{backup_id}``,
``POST /backup/restore``, ``GET /backup/restore/status/{restore_id}``. In scheduler mode the
cluster's copies live on the scheduler: these answer 409 ``scheduler_mode``.

A restore acts on this SSP (:class:`SspTarget`):

* ``main_db`` begins with the SSP back in ``bootstrapping``: ``/ingest`` and
  ``/view/register`` answer 503, the changefeed tail and the checkpoints stop, pending edges
  are flushed, the snapshot file is deleted (events in the window are rejected and not
  replayed: the rebuild reads the restored database);
* ``replica`` re-bootstraps the circuit from the restored database (every row dropped, the
  tables loaded again, the views whose ``_00_query`` rows are live registered again and
  their edges re-published), then the tail and the checkpoints restart and the SSP is
  ``ready``;
* a failure from ``main_db`` on leaves the SSP ``bootstrapping`` until the process restarts.

The plane is made on first use (a process that never backs up pays nothing); its registry
(``backups.json``) lives in ``SVC_SSP_SNAPSHOT_DIR``, else in the run dir.

Hooks this module needs from the hub: ``status``, ``cfg``, ``publisher.drain``,
``forget_rows``, ``bootstrap``, ``_tasks``/``_spawn`` (the ``changefeed`` and ``checkpoint``
loops), ``_tail``, ``_checkpoints``, ``_snapshot_path``, ``cursors``, ``_seen``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from backup import requests
from backup.objstore import StorageError
from backup.service import BackupError, BackupService
from ipc.messages import error_reply, reply

log = logging.getLogger("ssp.backups")

__all__ = ["SspTarget", "backup_routes", "plane_of"]

Handler = Callable[[Any, dict[str, Any]], Awaitable[dict[str, Any]]]
_LOOPS = ("changefeed", "checkpoint")


class SspTarget:
    """What a restore does to a standalone SSP (see the module docstring)."""

    def __init__(self, hub: Any) -> None:
        self.hub = hub

    async def _stop_loops(self) -> None:
        hub = self.hub
        stopping = [t for t in hub._tasks if t.get_name() in _LOOPS and not t.done()]
        for t in stopping:
            t.cancel()
        await asyncio.gather(*stopping, return_exceptions=True)
        hub._tasks[:] = [t for t in hub._tasks if t not in stopping]

    def _drop_snapshot(self) -> None:
        path = self.hub._snapshot_path()
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)

    async def hold(self, reason: str) -> None:
        hub = self.hub
        hub.status = "bootstrapping"  # /ingest and /view/register answer 503 from now on
        log.warning("SSP restoring, ingest refused: %s", reason)
        await self._stop_loops()
        if not await hub.publisher.drain(timeout=30.0):
            log.warning("restore: %d edge operations could not be flushed before the wipe",
                        hub.publisher.pending_ops)
        self._drop_snapshot()  # a warm start must never bring the old rows back

    async def rebuild(self, reason: str) -> None:
        hub = self.hub
        await hub.forget_rows()  # every view and row, fresh shard processes
        hub.cursors.clear()
        hub._seen.clear()
        since_vs = int(time.time() * 1000) << 16
        await hub.bootstrap()  # tables from the restored database, live views re-registered
        # The tail starts where this bootstrap began, without the usual margin: the feed still
        # holds the changes made before the database was replaced (REMOVE TABLE does not drop
        # them), and read again they would put pre-restore rows back over the restored ones.
        for table in hub.cursors:
            hub.cursors[table] = max(hub.cursors[table], since_vs)
        if hub.cfg.ingest_transport == "changefeed" and hub.link is None:
            hub._spawn(hub._tail(), "changefeed")
        if hub.cfg.snapshot_dir is not None:
            hub._spawn(hub._checkpoints(), "checkpoint")
        hub.status = "ready"
        log.info("SSP re-bootstrapped after %s: %d views", reason, len(hub.views))

    async def blocked(self, reason: str) -> None:
        self.hub.status = "bootstrapping"
        self._drop_snapshot()
        log.error("SSP blocked until a restart: %s", reason)


def plane_of(hub: Any) -> BackupService:
    """The hub's backup service, made and started on first use."""
    svc = getattr(hub, "backup_service", None)
    if svc is None:
        cfg = hub.cfg
        svc = BackupService(cfg.db, cfg.objstore, cfg.snapshot_dir or cfg.run_dir,
                            prefix=cfg.project_slug, target=SspTarget(hub),
                            pause_at=cfg.backup_pause_at)
        hub.backup_service = svc
        asyncio.get_running_loop().create_task(svc.start(), name="backup-start")
    return svc


def _refused(e: BackupError) -> dict[str, Any]:
    return error_reply(e.status, e.code, str(e))


def backup_routes(service_of: Callable[[Any], BackupService] = plane_of
                  ) -> dict[str, Handler]:
    """The hub's handlers of the maintenance routes (bodies shape-checked by the gateway as
    objects; their fields by :mod:`backup.requests`)."""

    def standalone(hub: Any) -> dict[str, Any] | None:
        if hub.link is not None:
            return error_reply(409, "scheduler_mode", "in a cluster, backups and restores are "
                               "served by the scheduler (its ingest listener and admin API)")
        return None

    async def create(hub: Any, req: dict[str, Any]) -> dict[str, Any]:
        if (refusal := standalone(hub)) is not None:
            return refusal
        try:
            rec = service_of(hub).create_backup(**requests.parse_create(req.get("body")))
        except BackupError as e:
            return _refused(e)
        return reply(202, rec)

    async def status(hub: Any, req: dict[str, Any]) -> dict[str, Any]:
        if (refusal := standalone(hub)) is not None:
            return refusal
        return reply(200, await requests.status(service_of(hub)))

    async def one_backup(hub: Any, req: dict[str, Any]) -> dict[str, Any]:
        if (refusal := standalone(hub)) is not None:
            return refusal
        try:
            return reply(200, requests.backup_status(service_of(hub),
                                                     str(req["params"]["backup_id"])))
        except BackupError as e:
            return _refused(e)

    async def restore(hub: Any, req: dict[str, Any]) -> dict[str, Any]:
        if (refusal := standalone(hub)) is not None:
            return refusal
        try:
            rec = await service_of(hub).start_restore(**requests.parse_restore(req.get("body")))
        except BackupError as e:
            return _refused(e)
        except StorageError as e:  # the catalog could not be read
            return error_reply(502, "storage", str(e))
        return reply(202, rec)

    async def one_restore(hub: Any, req: dict[str, Any]) -> dict[str, Any]:
        if (refusal := standalone(hub)) is not None:
            return refusal
        try:
            return reply(200, requests.restore_status(service_of(hub),
                                                      str(req["params"]["restore_id"])))
        except BackupError as e:
            return _refused(e)

    return {"POST /backup/create": create, "GET /backup/status": status,
            "GET /backup/status/{backup_id}": one_backup, "POST /backup/restore": restore,
            "GET /backup/restore/status/{restore_id}": one_restore}
