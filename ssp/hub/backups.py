"""The standalone SSP's maintenance plane: backups and restores of the main database (spec,
"Standalone maintenance plane"; bodies in :mod:`backup.requests`, jobs in
:mod:`backup.service`).

Routes (in `ssp.hub.routes`, answered by :class:`Backups`): ``POST /backup/create``,
``GET /backup/status``, ``GET /backup/status/{backup_id}``, ``POST /backup/restore``,
``GET /backup/restore/status/{restore_id}``. In scheduler mode the cluster's copies live on
the scheduler: these answer 409 ``scheduler_mode``.

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
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

from backup import requests
from backup.service import BackupError, BackupService
from backup.storeerror import StorageError
from dbclient.clock import now_ms
from dbclient.tasks import cancel_and_wait
from ipc.messages import error_reply, reply
from ssp.hub.warmviews import drop_views

if TYPE_CHECKING:
    from ssp.hub.loading import Loading
    from ssp.hub.snapshot import Snapshot
    from ssp.hub.state import HubState
    from ssp.hub.tail import FeedTail

log = logging.getLogger("ssp.backups")

__all__ = ["Backups", "SspTarget"]

_LOOPS = ("changefeed", "checkpoint")


class SspTarget:
    """What a restore does to a standalone SSP (see the module docstring)."""

    def __init__(self, state: HubState, loading: Loading, snapshot: Snapshot,
                 tail: FeedTail) -> None:
        self.state = state
        self.loading = loading
        self.snapshot = snapshot
        self.tail = tail

    async def _stop_loops(self) -> None:
        tasks = self.state.tasks
        stopping = [t for t in tasks if t.get_name() in _LOOPS and not t.done()]
        # the changefeed tail's wake wait (wait_for) may lose a cancel (dbclient.tasks)
        await cancel_and_wait(*stopping)
        tasks[:] = [t for t in tasks if t not in stopping]
        await self.tail.stop()  # its LIVE subscription: a new one comes with the new tail

    def _drop_snapshot(self) -> None:
        path = self.snapshot.path
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        drop_views(self.snapshot.views_path)  # its views name edges the restore replaces

    async def hold(self, reason: str) -> None:
        """Stop taking events: ingest refused, the tail and the checkpoints stopped, pending
        edges flushed, the snapshot file gone."""
        state = self.state
        state.status = "bootstrapping"  # /ingest and /view/register answer 503 from now on
        log.warning("SSP restoring, ingest refused: %s", reason)
        await self._stop_loops()
        if not await state.publisher.drain(timeout=30.0):
            log.warning("restore: %d edge operations could not be flushed before the wipe",
                        state.publisher.pending_ops)
        self._drop_snapshot()  # a warm start must never bring the old rows back

    async def rebuild(self, reason: str) -> None:
        """Bootstrap again from the restored database, then restart the loops: ready."""
        state = self.state
        await self.loading.forget_rows()  # every view and row, fresh shard processes
        since_vs = now_ms() << 16
        state.cursor.reset(since_vs, floor=True)
        await self.loading.bootstrap()  # tables from the restored database, live views back
        await state.allowlist.load(state.db)  # the restored database's allowlist, as at start
        # The tail starts where this bootstrap began, without the usual margin: the feed still
        # holds the changes made before the database was replaced (REMOVE TABLE does not drop
        # them), and read again they would put pre-restore rows back over the restored ones.
        cursors = state.cursor.cursors
        for table in cursors:
            cursors[table] = max(cursors[table], since_vs)
        if state.cfg.ingest_transport == "changefeed" and state.link is None:
            state.spawn(self.tail.run(), "changefeed")
        if state.cfg.snapshot_dir is not None:
            state.spawn(self.snapshot.checkpoints(), "checkpoint")
        state.status = "ready"
        log.info("SSP re-bootstrapped after %s: %d views", reason, len(state.views))

    async def blocked(self, reason: str) -> None:
        """A failure after the database was replaced: stay `bootstrapping` until a restart."""
        self.state.status = "bootstrapping"
        self._drop_snapshot()
        log.error("SSP blocked until a restart: %s", reason)


def _refused(e: BackupError) -> dict[str, Any]:
    return error_reply(e.status, e.code, str(e))


class Backups:
    """The maintenance routes' handlers (bodies shape-checked by the gateway as objects; their
    fields by :mod:`backup.requests`)."""

    def __init__(self, state: HubState, target: SspTarget) -> None:
        self.state = state
        self.target = target
        self._service: BackupService | None = None

    @property
    def service(self) -> BackupService:
        """The backup service, made and started on first use."""
        if self._service is None:
            cfg = self.state.cfg
            self._service = BackupService(cfg.db, cfg.objstore, cfg.snapshot_dir or cfg.run_dir,
                                          prefix=cfg.project_slug, target=self.target,
                                          pause_at=cfg.backup_pause_at)
            self.state.spawn(self._service.start(), "backup-start")
        return self._service

    def _standalone(self) -> dict[str, Any] | None:
        if self.state.link is not None:
            return error_reply(409, "scheduler_mode", "in a cluster, backups and restores are "
                               "served by the scheduler (its ingest listener and admin API)")
        return None

    async def create(self, req: dict[str, Any]) -> dict[str, Any]:
        """``POST /backup/create``: 202 with the queued backup."""
        if (refusal := self._standalone()) is not None:
            return refusal
        try:
            rec = self.service.create_backup(**requests.parse_create(req.get("body")))
        except BackupError as e:
            return _refused(e)
        return reply(202, rec)

    async def status(self, req: dict[str, Any]) -> dict[str, Any]:
        """``GET /backup/status``: storage, catalog and operations."""
        if (refusal := self._standalone()) is not None:
            return refusal
        return reply(200, await requests.status(self.service))

    async def one_backup(self, req: dict[str, Any]) -> dict[str, Any]:
        """``GET /backup/status/{backup_id}``."""
        if (refusal := self._standalone()) is not None:
            return refusal
        try:
            return reply(200, requests.backup_status(self.service,
                                                     str(req["params"]["backup_id"])))
        except BackupError as e:
            return _refused(e)

    async def restore(self, req: dict[str, Any]) -> dict[str, Any]:
        """``POST /backup/restore``: 202 with the queued restore."""
        if (refusal := self._standalone()) is not None:
            return refusal
        try:
            rec = await self.service.start_restore(**requests.parse_restore(req.get("body")))
        except BackupError as e:
            return _refused(e)
        except StorageError as e:  # the catalog could not be read
            return error_reply(502, "storage", str(e))
        return reply(202, rec)

    async def one_restore(self, req: dict[str, Any]) -> dict[str, Any]:
        """``GET /backup/restore/status/{restore_id}``."""
        if (refusal := self._standalone()) is not None:
            return refusal
        try:
            return reply(200, requests.restore_status(self.service,
                                                      str(req["params"]["restore_id"])))
        except BackupError as e:
            return _refused(e)
