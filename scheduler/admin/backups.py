"""The admin backup routes (spec "Admin listener", backups), over the scheduler's backup plane
(:mod:`scheduler.backups`), reached through ``Cluster.backup_plane()``:

* ``GET /admin/api/backups``: ``{catalog, catalog_error, local, restores, config, storage,
  held, linked}``: the bucket's catalog under this scheduler's prefix, the local registry,
  the restores, the schedule config (``{enabled: false}`` until linked, then the platform's
  settings: scheduled backups are the platform's), storage reachability, and the failed restore that holds the
  scheduler in Restoring (or null);
* ``POST /admin/api/backups {name}``: 202 ``{operation, backup_id}``; 503
  ``no_object_storage`` without object storage;
* ``PUT /admin/api/backups/config {enabled, schedule, retention}``: 409 ``not_linked`` until
  linked, then forwarded to the platform (:mod:`.cloudlink`), which keeps the settings;
* ``DELETE /admin/api/backups/:id``: soft delete in the catalog (``deleted_at_ms``); 409
  ``not_linked`` until linked; 404 unknown;
* ``POST /admin/api/backups/:id/restore``: 202 ``{operation, restore_id}``; 503 unless the
  scheduler is Ready, except while a failed restore holds it in Restoring (a new restore is
  one way out); 409 ``restore_running``;
* ``GET /admin/api/backups/:id/restore``: ``{cloud, local, stage}`` of the latest restore of
  that backup (``cloud`` is null until linked), nulls for a backup never restored; 404 for a
  backup neither the local registry, a restore nor the catalog knows, 400 for a malformed
  id;
* ``POST /admin/api/restore/release`` (ours): the other way out of a held Restoring: the
  database is accepted as it is now, the replica re-cloned, every SSP re-bootstrapped; 202
  with the operation; 409 ``not_restoring`` unless held.

Each backup and restore is an operation (:mod:`.operations`): ``kind`` ``backup`` or
``restore``, ``progress`` the registry record's state (status or stage, rows, bytes, step);
a restore's operation ends when the restore is done and the SSPs registered before it are
Ready again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import falcon
import falcon.asgi

from backup.service import BackupError
from backup.storeerror import StorageError
from scheduler.admin.errors import (
    AdminError,
    Conflict,
    NotFound,
    Unavailable,
)
from scheduler.admin.values import read_json

log = logging.getLogger("scheduler.admin.backups")

__all__ = ["BackupRoutes", "backup_routes"]

POLL_SECS = 0.2
PROGRESS_SECS = 0.25


def _who(req: falcon.asgi.Request) -> dict[str, Any]:
    p = req.context.principal
    return {"subject": p.subject, "mode": p.mode}


def _refusal(e: BackupError) -> AdminError:
    return AdminError(str(e), code=e.code, status=e.status)


def _progress(kind: str, rec: dict[str, Any]) -> dict[str, Any]:
    """The registry state an operation shows."""
    out = {"status": rec.get("status")} if kind == "backup" else {"stage": rec.get("stage")}
    out.update({k: rec.get(k) for k in ("rows", "bytes") if rec.get(k) is not None})
    if isinstance(rec.get("progress"), dict):
        out.update(rec["progress"])
    return out


class BackupRoutes:
    """The routes' logic (one per admin plane)."""

    def __init__(self, plane: Any) -> None:
        self.plane = plane
        self._ops: dict[str, str] = {}  # backup or restore id -> operation id
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watching = False
        self._last: dict[str, tuple[float, Any]] = {}  # op id -> (when, state) of its last update

    @property
    def bp(self) -> Any:
        bp = self.plane.cluster.backup_plane()
        if bp is None:
            raise Unavailable("the backup plane is not running", code="no_object_storage")
        if not self._watching:
            bp.service.watchers.append(self._watch)
            self._watching = True
        return bp

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ operations
    def _watch(self, kind: str, rec: dict[str, Any]) -> None:
        key = rec.get("backup_id") if kind == "backup" else rec.get("restore_id")
        op_id = self._ops.get(str(key))
        if op_id is None:
            return
        ops = self.plane.ops
        state = rec.get("status") if kind == "backup" else rec.get("stage")
        now = time.monotonic()
        last = self._last.get(op_id)
        if last is not None and last[1] == state and now - last[0] < PROGRESS_SECS:
            return  # rows move every page: the operations stream gets at most 4 a second
        self._last[op_id] = (now, state)
        ops.update(op_id, progress=_progress(kind, rec))
        if state in ("done", "failed"):
            self._last.pop(op_id, None)
        if kind == "backup" and rec.get("status") in ("done", "failed"):
            self._ops.pop(str(key), None)
            ok = rec["status"] == "done"
            ops.finish(op_id, ok, f"backup {key} stored: {rec.get('rows')} rows, "
                       f"{rec.get('bytes')} bytes" if ok else
                       f"backup {key} failed: {rec.get('error')}")
        elif kind == "restore" and rec.get("stage") == "failed":
            self._ops.pop(str(key), None)
            ops.finish(op_id, False, f"restore {key} failed at {rec.get('failed_stage')}: "
                       f"{rec.get('error')}")
        elif kind == "restore" and rec.get("stage") == "done":
            self._ops.pop(str(key), None)
            ops.update(op_id, note="database restored and replica re-cloned; waiting for the "
                       "SSPs to bootstrap again")
            self._spawn(self._ssps_back(op_id, f"restore {key} done"), f"restore-{key}")

    async def _ssps_back(self, op_id: str, what: str) -> None:
        """Finish the operation when every SSP registered before it is Ready again."""
        op = self.plane.ops.get(op_id) or {}
        ids = [i for i in (op.get("details") or {}).get("ssps", []) if isinstance(i, str)]
        cluster = self.plane.cluster
        since = float((op.get("details") or {}).get("since_monotonic") or 0.0)
        deadline = time.monotonic() + self.plane.actions.restart_timeout
        while True:
            missing = [i for i in ids if not ((info := cluster.ssp(i)) is not None
                                              and info.registered_at > since and info.serving)]
            if not missing:
                self.plane.ops.finish(op_id, True, f"{what}; every SSP re-bootstrapped")
                return
            if time.monotonic() > deadline:
                self.plane.ops.finish(op_id, False, f"{what}, but not re-registered and Ready "
                                      f"in time: {', '.join(missing)}")
                return
            await asyncio.sleep(POLL_SECS)

    # ------------------------------------------------------------------ bodies
    async def listing(self) -> dict[str, Any]:
        bp = self.bp
        svc = bp.service
        catalog: list[dict[str, Any]] | None = None
        error = None
        if svc.enabled:
            try:
                catalog = await svc.catalog()
            except StorageError as e:
                error = str(e)
        return {"catalog": catalog, "catalog_error": error,
                "local": svc.registry.backup_list(), "restores": svc.registry.restore_list(),
                "config": await self._config(),
                "storage": await svc.storage_status(), "held": svc.held,
                "linked": self.plane.cfg.cloud_linked,
                "registry_error": svc.registry.storage_error}

    async def _config(self) -> dict[str, Any]:
        """The platform's settings when linked (an error note if it does not answer)."""
        off = {"enabled": False, "schedule": None, "retention": None, "linked": False}
        if not self.plane.cfg.cloud_linked:
            return off
        try:
            got = await self.plane.cloud_link.call("GET", "backups/config")
        except AdminError as e:
            return {**off, "linked": True, "error": e.message}
        return {**off, **(got.get("config") or {}), "linked": True}

    def create(self, body: Any, who: dict[str, Any]) -> dict[str, Any]:
        bp = self.bp
        if not bp.service.enabled:
            raise Unavailable("no object storage is configured (OBJSTORE_ENDPOINT, "
                              "OBJSTORE_BUCKET or the keys): backups are off",
                              code="no_object_storage")
        if body is not None and not isinstance(body, dict):
            raise AdminError("the body must be an object {name}", status=400)
        name = (body or {}).get("name")
        if name is not None and (not isinstance(name, str) or not name.strip()
                                 or len(name) > 200):
            raise AdminError("name: a non-empty string of at most 200 characters", status=400)
        try:
            rec = bp.service.create_backup(name=name.strip() if name else None)
        except BackupError as e:
            raise _refusal(e) from None
        op = self.plane.ops.start("backup", f"backup:{rec['backup_id']}", who,
                                  progress=_progress("backup", rec),
                                  details={"backup_id": rec["backup_id"], "name": rec["name"]})
        self._ops[rec["backup_id"]] = op["id"]
        return {"operation": op, "backup_id": rec["backup_id"]}

    def _linked(self) -> None:
        if not self.plane.cfg.cloud_linked:
            raise Conflict("Not linked to the hosted platform", code="not_linked")

    async def delete(self, backup_id: str) -> dict[str, Any]:
        self._linked()
        try:
            entry = await self.bp.service.soft_delete(backup_id)
        except BackupError as e:
            raise _refusal(e) from None
        except StorageError as e:
            raise AdminError(str(e), code="storage", status=502) from None
        return {"backup_id": backup_id, "deleted_at_ms": entry.get("deleted_at_ms")}

    async def config(self, body: Any) -> dict[str, Any]:
        """Forwarded to the platform, which keeps scheduled-backup settings."""
        self._linked()
        if not isinstance(body, dict):
            raise AdminError("the body must be an object {enabled, schedule, retention}",
                             status=400)
        out = await self.plane.cloud_link.call("PUT", "backups/config", body)
        return {"config": out.get("config"), "linked": True}

    async def restore(self, backup_id: str, who: dict[str, Any]) -> dict[str, Any]:
        bp = self.bp
        if not bp.service.enabled:
            raise Unavailable("no object storage is configured: restores are off",
                              code="no_object_storage")
        why = bp.restore_allowed()
        if why is not None:
            raise Unavailable(why, code=self.plane.cluster.state())
        try:
            rec = await bp.service.start_restore(backup_id)
        except BackupError as e:
            raise _refusal(e) from None
        except StorageError as e:
            raise AdminError(str(e), code="storage", status=502) from None
        ids = [s.id for s in self.plane.cluster.ssps()]
        op = self.plane.ops.start(
            "restore", f"scheduler:{self.plane.cluster.scheduler_id}", who,
            progress=_progress("restore", rec),
            details={"backup_id": backup_id, "restore_id": rec["restore_id"], "ssps": ids,
                     "since_monotonic": time.monotonic()})
        self._ops[rec["restore_id"]] = op["id"]
        return {"operation": op, "restore_id": rec["restore_id"]}

    async def restore_status(self, backup_id: str) -> dict[str, Any]:
        svc = self.bp.service
        try:
            known = await svc.known(backup_id)
        except BackupError as e:
            raise _refusal(e) from None
        except StorageError as e:
            raise AdminError(str(e), code="storage", status=502) from None
        if not known:
            raise NotFound(f"no backup {backup_id} (local registry or catalog)",
                           code="not_found")
        rec = svc.registry.latest_restore(backup_id)
        return {"cloud": None, "local": rec, "stage": rec.get("stage") if rec else None}

    def release(self, who: dict[str, Any]) -> dict[str, Any]:
        bp = self.bp
        if bp.service.held is None or self.plane.cluster.state() != "restoring":
            raise Conflict("the scheduler is not held in Restoring by a failed restore",
                           code="not_restoring")
        if bp.releasing or bp.service.restore_running() is not None:
            raise Conflict("a restore or a release is already running", code="restore_running")
        ids = [s.id for s in self.plane.cluster.ssps()]
        op = self.plane.ops.start("restore_release",
                                  f"scheduler:{self.plane.cluster.scheduler_id}", who,
                                  details={"ssps": ids, "since_monotonic": time.monotonic(),
                                           "restore_id": bp.service.held.get("restore_id")})
        self._spawn(self._release(op["id"]), "restore-release")
        return op

    async def _release(self, op_id: str) -> None:
        try:
            await self.bp.release()
        except Exception as e:  # noqa: BLE001 - reported in the operation
            self.plane.ops.finish(op_id, False, f"release failed: {type(e).__name__}: {e}")
            return
        self.plane.ops.update(op_id, note="replica re-cloned from the database as it is")
        await self._ssps_back(op_id, "released from Restoring")


# ---------------------------------------------------------------------- Falcon resources

class _Base:
    def __init__(self, routes: BackupRoutes) -> None:
        self.r = routes


class _Backups(_Base):
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = await self.r.listing()

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await read_json(req)
        resp.status = 202
        resp.media = self.r.create(body, _who(req))


class _Config(_Base):
    async def on_put(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = await self.r.config(await read_json(req))


class _Backup(_Base):
    async def on_delete(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                        backup_id: str) -> None:
        resp.media = await self.r.delete(backup_id)


class _Restore(_Base):
    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      backup_id: str) -> None:
        await read_json(req)
        resp.status = 202
        resp.media = await self.r.restore(backup_id, _who(req))

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     backup_id: str) -> None:
        resp.media = await self.r.restore_status(backup_id)


class _Release(_Base):
    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        await read_json(req)
        resp.status = 202
        resp.media = self.r.release(_who(req))


def backup_routes(plane: Any) -> list[tuple[str, Any]]:
    """The routes of this module for the admin app's route table (relative to
    ``/admin/api``); ``plane.backups`` is set."""
    routes = BackupRoutes(plane)
    plane.backups = routes
    return [("/backups", _Backups(routes)), ("/backups/config", _Config(routes)),
            ("/backups/{backup_id}", _Backup(routes)),
            ("/backups/{backup_id}/restore", _Restore(routes)),
            ("/restore/release", _Release(routes))]
