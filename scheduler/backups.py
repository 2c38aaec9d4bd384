"""The scheduler's backup plane: the backup service over this scheduler, and its routes on the
ingest listener (the spec's "Backup plane: same routes as the SSP standalone table",
unauthenticated like the rest of that listener; bodies in :mod:`backup.requests`).

:class:`BackupPlane` owns one :class:`backup.service.BackupService` whose restores act on the
scheduler (:class:`SchedulerTarget`): ``main_db`` begins with Restoring
(``Scheduler.hold_for_restore``: ingest, reclone and SSP registration answer 503, the
changefeed tail stops), ``replica`` is ``Scheduler.release_restore`` (the replica re-cloned
from the restored database, every SSP flagged to re-bootstrap, the tail restarted). A
failure from ``main_db`` on keeps the scheduler Restoring, across a restart too, until an
operator acts: a new restore (accepted while held, the one exception to "503 unless Ready"),
or :meth:`BackupPlane.release` (``POST /admin/api/restore/release``), which accepts the
database as it is now.

Storage prefix: the cloud project when linked (spec, Authentication 7), else
``SVC_PROJECT_SLUG``. Failures become incidents: ``backup_failed`` (recorded),
``restore_failed`` (recorded when nothing was replaced; open while the scheduler is held,
recovered when it is released or a restore succeeds).
"""

from __future__ import annotations

import logging
from typing import Any

import falcon
import falcon.asgi

from backup import requests
from backup.service import BackupError, BackupService
from backup.storeerror import StorageError
from ipc.body import DEFAULT_MAX_BODY_BYTES, check_content_type, parse_json, read_bytes
from ipc.httperrors import HttpError

log = logging.getLogger("scheduler.backups")

__all__ = ["BackupPlane", "SchedulerTarget", "add_backup_routes"]


class SchedulerTarget:
    """What a restore does to the scheduler (see the module docstring)."""

    def __init__(self, s: Any) -> None:
        self.s = s

    async def hold(self, reason: str) -> None:
        await self.s.hold_for_restore(reason)

    async def rebuild(self, reason: str) -> None:
        try:
            await self.s.release_restore(reason)
        except BaseException:
            await self.s.hold_for_restore(f"{reason}: the re-clone failed")
            raise

    async def blocked(self, reason: str) -> None:
        await self.s.hold_for_restore(reason)


class BackupPlane:
    """The backup service of one scheduler, its incidents and the operator's release."""

    def __init__(self, s: Any) -> None:
        self.s = s
        cfg = s.cfg
        prefix = cfg.admin.cloud_project if cfg.cloud_linked and cfg.admin.cloud_project \
            else cfg.admin.project_slug
        self.service = BackupService(cfg.db, cfg.admin.objstore, cfg.data_dir, prefix=prefix,
                                     target=SchedulerTarget(s), on_failure=self._failed,
                                     pause_at=cfg.admin.backup_pause_at)
        self.service.watchers.append(self._watch)
        self.incident: str | None = None  # the open restore_failed incident
        self.releasing = False
        held = self.service.held
        if held is not None:
            # A restore was replacing the database when the last process stopped (or had
            # failed after main_db): stay Restoring until an operator acts.
            s.restore_hold = (f"restore {held['restore_id']} {held.get('error') or 'failed'}")
            self.incident = s.incidents.find_open(self._component, "restore_failed") or \
                s.incidents.open(self._component, "restore_failed",
                                 f"restore {held['restore_id']} of backup {held['backup_id']} "
                                 f"stopped at {held.get('failed_stage')}: the scheduler stays "
                                 "Restoring until a new restore or a release")

    @property
    def _component(self) -> str:
        return f"scheduler:{self.s.cfg.scheduler_id}"

    async def start(self) -> None:
        await self.service.start()

    async def stop(self) -> None:
        await self.service.stop()

    def _failed(self, kind: str, rec: dict[str, Any]) -> None:
        store = self.s.incidents
        if kind == "backup":
            store.note(f"backup:{rec['backup_id']}", "backup_failed",
                       f"backup {rec['backup_id']} failed: {rec.get('error')}",
                       severity="warning")
            return
        summary = (f"restore {rec['restore_id']} of backup {rec['backup_id']} failed at "
                   f"{rec.get('failed_stage')}: {rec.get('error')}")
        if rec.get("failed_stage") in ("main_db", "replica"):
            summary += "; the scheduler stays Restoring until a new restore or a release"
            if self.incident is None:
                self.incident = store.open(self._component, "restore_failed", summary)
            else:
                store.event(self.incident, summary)
        else:
            store.note(self._component, "restore_failed", summary + " (nothing was replaced)",
                       severity="warning")

    def _watch(self, kind: str, rec: dict[str, Any]) -> None:
        if kind == "restore" and rec.get("stage") == "done" and self.incident is not None:
            self.s.incidents.end(self.incident, "recovered",
                                 f"restore {rec['restore_id']} completed")
            self.incident = None

    # ------------------------------------------------------------------ state
    def restore_allowed(self) -> str | None:
        """None when a restore may start now, else why not (the 503's message)."""
        state = self.s.state
        if state == "ready":
            return None
        if state == "restoring" and self.service.held is not None and not self.releasing \
                and self.service.restore_running() is None:
            return None  # held by a failed restore: a new restore is the way out
        return f"the scheduler is {state}; a restore starts only when it is ready"

    async def release(self) -> None:
        """The operator accepts the database as it is: re-clone, SSPs re-bootstrap, Ready.
        Raises RuntimeError when the scheduler is not held by a failed restore."""
        if self.service.held is None or self.s.state != "restoring":
            raise RuntimeError("the scheduler is not held by a failed restore")
        if self.service.restore_running() is not None or self.releasing:
            raise RuntimeError("a restore or a release is already running")
        held = self.service.held
        self.releasing = True
        try:
            await SchedulerTarget(self.s).rebuild(
                f"operator release after restore {held['restore_id']}")
            self.service.registry.held = None
            self.service.registry.changed()
            if self.incident is not None:
                self.s.incidents.end(self.incident, "recovered",
                                     "released by an operator: replica re-cloned from the "
                                     "database as it is")
                self.incident = None
        finally:
            self.releasing = False


# ---------------------------------------------------------------------- ingest listener routes

def _refusal(e: BackupError) -> HttpError:
    return HttpError(e.status, e.code, str(e))


async def _body(req: falcon.asgi.Request) -> Any:
    check_content_type(req.content_type)
    raw = await read_bytes(req, DEFAULT_MAX_BODY_BYTES)
    return parse_json(raw) if raw.strip() else None


class _Create:
    def __init__(self, p: BackupPlane) -> None:
        self.p = p

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        try:
            args = requests.parse_create(await _body(req))
            resp.media = self.p.service.create_backup(**args)
        except BackupError as e:
            raise _refusal(e) from None
        resp.status = 202


class _Status:
    def __init__(self, p: BackupPlane) -> None:
        self.p = p

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = await requests.status(self.p.service)


class _BackupStatus:
    def __init__(self, p: BackupPlane) -> None:
        self.p = p

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     backup_id: str) -> None:
        try:
            resp.media = requests.backup_status(self.p.service, backup_id)
        except BackupError as e:
            raise _refusal(e) from None


class _Restore:
    def __init__(self, p: BackupPlane) -> None:
        self.p = p

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        try:
            args = requests.parse_restore(await _body(req))
            why = self.p.restore_allowed()
            if why is not None:
                raise HttpError(503, self.p.s.state, why)
            resp.media = await self.p.service.start_restore(**args)
        except BackupError as e:
            raise _refusal(e) from None
        except StorageError as e:  # the catalog could not be read
            raise HttpError(502, "storage", str(e)) from None
        resp.status = 202


class _RestoreStatus:
    def __init__(self, p: BackupPlane) -> None:
        self.p = p

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     restore_id: str) -> None:
        try:
            resp.media = requests.restore_status(self.p.service, restore_id)
        except BackupError as e:
            raise _refusal(e) from None


class _Lifespan:
    def __init__(self, p: BackupPlane) -> None:
        self.p = p

    async def process_startup(self, scope: Any, event: Any) -> None:
        await self.p.start()

    async def process_shutdown(self, scope: Any, event: Any) -> None:
        await self.p.stop()


def add_backup_routes(app: falcon.asgi.App, s: Any) -> BackupPlane:
    """The maintenance routes on the scheduler's ingest listener; ``s.backup_plane`` set."""
    p = BackupPlane(s)
    s.backup_plane = p  # the admin plane's backup routes and MCP tools go through it
    app.add_route("/backup/create", _Create(p))
    app.add_route("/backup/status", _Status(p))
    app.add_route("/backup/status/{backup_id}", _BackupStatus(p))
    app.add_route("/backup/restore", _Restore(p))
    app.add_route("/backup/restore/status/{restore_id}", _RestoreStatus(p))
    app.add_middleware(_Lifespan(p))
    return p
