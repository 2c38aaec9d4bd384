"""The backup plane of one process: backups and restores as jobs, one at a time.

Used by the scheduler (ingest-listener routes, admin routes, MCP tools) and by a standalone
SSP (its maintenance routes); each gives its :class:`~backup.restore.RestoreTarget`.

Jobs run on one worker, in the order asked (a restore waits for a backup before it); each is
a record of the registry (``backup.registry``) that the routes read. Storage layout in the
bucket, under ``<prefix>/`` (``SVC_PROJECT_SLUG``, default ``default``, when not linked;
the cloud project when linked; a ``project_slug`` given with the request wins):

* ``<prefix>/<backup_id>/dump.cbor.gz``: the dump (``backup.dumpformat``), multipart upload;
* ``<prefix>/<backup_id>/backup.json``: its catalog entry, written once the dump is complete
  (so a catalog entry always names a whole dump); a soft delete sets ``deleted_at_ms`` in it.

A backup: export (``backup.exporter``) streamed through gzip into the multipart upload; any
failure aborts the upload (no object, no catalog entry). A restore: ``backup.restore``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backup.config import ObjectStoreConfig
from backup.dumpformat import FORMAT, VERSION
from backup.exporter import export_database
from backup.registry import Registry
from backup.restore import RestoreRun, RestoreTarget, new_restore
from backup.storeerror import StorageError
from dbclient import Database, DbConfig
from dbclient.clock import now_ms
from dbclient.tasks import cancel_and_wait

if TYPE_CHECKING:  # boto3 loads with the first backup (backup.storeerror)
    from backup.objstore import ObjectStore

log = logging.getLogger("backup")

__all__ = ["BackupBusy", "BackupError", "BackupInvalid", "BackupNotFound", "BackupService",
           "NoObjectStorage", "catalog_key", "dump_key"]

ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
#: the database calls of a backup or a restore may be long (a view filled from 1M rows)
DB_TIMEOUT_SECS = 300.0


class BackupError(Exception):
    """Base of the plane's refusals; ``status`` is the HTTP status the routes answer."""

    status = 500
    code = "backup_error"


class NoObjectStorage(BackupError):
    status = 503
    code = "no_object_storage"


class BackupNotFound(BackupError):
    status = 404
    code = "not_found"


class BackupBusy(BackupError):
    status = 409
    code = "restore_running"


class BackupInvalid(BackupError):
    status = 400
    code = "invalid"


def dump_key(prefix: str, backup_id: str) -> str:
    return f"{prefix}/{backup_id}/dump.cbor.gz"


def catalog_key(prefix: str, backup_id: str) -> str:
    return f"{prefix}/{backup_id}/backup.json"


def check_id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not ID_RE.match(value):
        raise BackupInvalid(f"{what}: 1 to 128 letters, digits, '_', '.' or '-', starting with a "
                            "letter or digit")
    return value


def _new_id(kind: str) -> str:
    return f"{kind}-{now_ms()}-{uuid.uuid4().hex[:6]}"


class _NoTarget:
    async def hold(self, reason: str) -> None: ...
    async def rebuild(self, reason: str) -> None: ...
    async def blocked(self, reason: str) -> None: ...


class BackupService:
    """See the module docstring."""

    def __init__(self, db_config: DbConfig, store_config: ObjectStoreConfig, data_dir: Path | None,
                 *, prefix: str, target: RestoreTarget | None = None,
                 on_failure: Callable[[str, dict[str, Any]], None] | None = None,
                 pause_at: str | None = None) -> None:
        self.db_config = dataclasses.replace(
            db_config, timeout_secs=max(db_config.timeout_secs, DB_TIMEOUT_SECS))
        self.store_config = store_config
        self.prefix = prefix.strip("/") or "default"
        self.registry = Registry(data_dir)
        self.work_dir = (data_dir or Path("/tmp")) / "backup-work"
        self.target: RestoreTarget = target or _NoTarget()
        self.on_failure = on_failure
        self.watchers: list[Callable[[str, dict[str, Any]], None]] = []
        self._store: ObjectStore | None = None
        self._db: Database | None = None
        self._queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self.current: dict[str, Any] | None = None  # the job running now
        self.pause_at = pause_at  # SVC_BACKUP_PAUSE_AT (crash tests): see pause()

    @property
    def enabled(self) -> bool:
        return self.store_config.enabled

    @property
    def held(self) -> dict[str, Any] | None:
        """The failed restore that keeps the owner blocked (None when not blocked)."""
        return self.registry.held

    @property
    def store(self) -> ObjectStore:
        if not self.enabled:
            raise NoObjectStorage("no object storage is configured (set OBJSTORE_ENDPOINT, "
                                  "OBJSTORE_BUCKET or the keys)")
        if self._store is None:
            from backup.objstore import ObjectStore  # boto3: only once a backup needs it

            self._store = ObjectStore(self.store_config)
        return self._store

    async def start(self) -> None:
        self._worker = asyncio.get_running_loop().create_task(self._work(), name="backup-worker")

    async def stop(self) -> None:
        if self._worker is not None:
            # a job between database calls may lose the cancel, then wait on the queue
            await cancel_and_wait(self._worker)  # (dbclient.tasks)
            self._worker = None
        if self._db is not None:
            await self._db.close()
            self._db = None
        self.registry.write()

    async def _database(self) -> Database:
        if self._db is None:
            self._db = Database(self.db_config)
        await self._db.connect()
        return self._db

    async def pause(self, point: str) -> None:
        """The crash-test failpoint: at ``point`` (``SVC_BACKUP_PAUSE_AT``), create
        ``<work>/paused-<point>`` and wait until ``<work>/continue`` exists (then both go).
        A test kills the process while it waits, or stops a server and lets it go on."""
        if self.pause_at != point:
            return
        self.work_dir.mkdir(parents=True, exist_ok=True)
        flag, go = self.work_dir / f"paused-{point}", self.work_dir / "continue"
        log.warning("backup plane paused at %s (SVC_BACKUP_PAUSE_AT)", point)
        flag.touch()
        while not go.exists():
            await asyncio.sleep(0.05)
        go.unlink(missing_ok=True)
        flag.unlink(missing_ok=True)

    def _changed(self, kind: str, rec: dict[str, Any]) -> None:
        for fn in list(self.watchers):
            try:
                fn(kind, rec)
            except Exception:  # an observer must not break a job
                log.exception("backup watcher failed")

    # ------------------------------------------------------------------ asking
    def create_backup(self, *, backup_id: str | None = None, name: str | None = None,
                      project_slug: str | None = None) -> dict[str, Any]:
        """Enqueue a backup; its record (``status: queued``)."""
        if not self.enabled:
            raise NoObjectStorage("no object storage is configured: backups are off")
        bid = check_id(backup_id, "backup_id") if backup_id is not None else _new_id("bk")
        if bid in self.registry.backups:
            raise BackupBusy(f"backup {bid} exists already")
        prefix = check_id(project_slug, "project_slug") if project_slug else self.prefix
        if name is not None and (not isinstance(name, str) or len(name) > 200):
            raise BackupInvalid("name: a string of at most 200 characters")
        rec = {"backup_id": bid, "name": name or bid, "project_slug": prefix,
               "storage_path": dump_key(prefix, bid), "status": "queued",
               "created_at_ms": now_ms(), "finished_at_ms": None, "rows": None, "tables": None,
               "raw_bytes": None, "bytes": None, "sha256": None, "progress": None,
               "error": None, "deleted_at_ms": None}
        self.registry.put_backup(rec)
        self._queue.put_nowait(("backup", rec))
        self._changed("backup", rec)
        return rec

    async def start_restore(self, backup_id: str, *, storage_path: str | None = None,
                            project_slug: str | None = None,
                            restore_id: str | None = None) -> dict[str, Any]:
        """Enqueue a restore of ``backup_id``; its record (``stage: queued``)."""
        if not self.enabled:
            raise NoObjectStorage("no object storage is configured: restores are off")
        bid = check_id(backup_id, "backup_id")
        rid = check_id(restore_id, "restore_id") if restore_id is not None else _new_id("rs")
        if rid in self.registry.restores:
            raise BackupBusy(f"restore {rid} exists already", )
        if self.restore_running() is not None:
            raise BackupBusy("a restore is already queued or running")
        prefix = check_id(project_slug, "project_slug") if project_slug else None
        sha, tables = None, None
        local = self.registry.backups.get(bid)
        if storage_path is not None:
            if not isinstance(storage_path, str) or not storage_path.strip() \
                    or len(storage_path) > 1024:
                raise BackupInvalid("storage_path: the dump's object key")
            path = storage_path.strip().lstrip("/")
        elif local is not None and local.get("status") == "done" and prefix in (
                None, local.get("project_slug")):
            path, sha, tables = local["storage_path"], local.get("sha256"), local.get("tables")
        else:
            entry = await asyncio.to_thread(self.store.get_json,
                                            catalog_key(prefix or self.prefix, bid))
            if not isinstance(entry, dict) or not entry.get("storage_path"):
                raise BackupNotFound(f"no backup {bid} in the catalog of "
                                     f"{prefix or self.prefix}")
            path, sha = str(entry["storage_path"]), entry.get("sha256")
            tables = entry.get("tables") if isinstance(entry.get("tables"), dict) else None
        rec = new_restore(rid, bid, path, prefix or self.prefix, sha, tables)
        self.registry.put_restore(rec)
        self._queue.put_nowait(("restore", rec))
        self._changed("restore", rec)
        return rec

    def restore_running(self) -> dict[str, Any] | None:
        for rec in self.registry.restores.values():
            if rec.get("stage") not in ("done", "failed"):
                return rec
        return None

    def backup_running(self) -> dict[str, Any] | None:
        for rec in self.registry.backups.values():
            if rec.get("status") in ("queued", "running"):
                return rec
        return None

    # ------------------------------------------------------------------ reading
    async def storage_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.store_config.public(), "prefix": self.prefix}
        if not self.enabled:
            return {**out, "reachable": None, "error": None}
        return {**out, **await asyncio.to_thread(self.store.status)}

    async def catalog(self, prefix: str | None = None) -> list[dict[str, Any]]:
        """The catalog entries under ``prefix`` (newest first); StorageError when unreachable."""
        p = prefix or self.prefix
        keys = await asyncio.to_thread(self.store.list_keys, f"{p}/")
        out = []
        for key in keys:
            if not key.endswith("/backup.json"):
                continue
            entry = await asyncio.to_thread(self.store.get_json, key)
            if isinstance(entry, dict):
                out.append(entry)
        return sorted(out, key=lambda e: e.get("created_at_ms") or 0, reverse=True)

    async def known(self, backup_id: str) -> bool:
        """Whether ``backup_id`` names a backup this service can tell about: one in the local
        registry, one a restore was started from, or one in the catalog (object storage)."""
        bid = check_id(backup_id, "backup_id")
        if bid in self.registry.backups or self.registry.latest_restore(bid) is not None:
            return True
        if not self.enabled:
            return False
        entry = await asyncio.to_thread(self.store.get_json, catalog_key(self.prefix, bid))
        return isinstance(entry, dict)

    async def soft_delete(self, backup_id: str) -> dict[str, Any]:
        bid = check_id(backup_id, "backup_id")
        local = self.registry.backups.get(bid)
        prefix = (local or {}).get("project_slug") or self.prefix
        key = catalog_key(prefix, bid)
        entry = await asyncio.to_thread(self.store.get_json, key)
        if not isinstance(entry, dict):
            raise BackupNotFound(f"no backup {bid} in the catalog of {prefix}")
        if not entry.get("deleted_at_ms"):
            entry["deleted_at_ms"] = now_ms()
            await asyncio.to_thread(self.store.put_json, key, entry)
        if local is not None:
            local["deleted_at_ms"] = entry["deleted_at_ms"]
            self.registry.put_backup(local)
        return entry

    # ------------------------------------------------------------------ the worker
    async def _work(self) -> None:
        while True:
            kind, rec = await self._queue.get()
            self.current = rec
            try:
                if kind == "backup":
                    await self._run_backup(rec)
                else:
                    await RestoreRun(rec, registry=self.registry, store=self.store,
                                     db=await self._database(), target=self.target,
                                     work_dir=self.work_dir, pause=self.pause,
                                     on_change=lambda r: self._changed("restore", r)).run()
                    if rec["stage"] == "failed" and self.on_failure is not None:
                        self.on_failure("restore", rec)
            except asyncio.CancelledError:
                raise
            except Exception:  # a job failure never stops the worker
                log.exception("backup plane job %s failed", kind)
                if kind == "restore" and rec.get("stage") not in ("done", "failed"):
                    rec.update(stage="failed", failed_stage=rec.get("stage"),
                               error="internal error (logged)", finished_at_ms=now_ms())
                    self.registry.put_restore(rec)
                    self._changed("restore", rec)
            finally:
                self.current = None

    async def _run_backup(self, rec: dict[str, Any]) -> None:
        bid = rec["backup_id"]
        rec["status"] = "running"
        self.registry.put_backup(rec)
        self._changed("backup", rec)
        upload = None
        try:
            store = self.store
            await asyncio.to_thread(store.ensure_bucket)
            upload = await asyncio.to_thread(store.multipart, rec["storage_path"])

            def progress(p: dict[str, Any]) -> None:
                rec["progress"] = {**p, "bytes": upload.sent if upload else 0}
                self.registry.put_backup(rec, durable=False)
                self._changed("backup", rec)

            db = await self._database()
            result = await export_database(db, upload.write, backup_id=bid, progress=progress)
            await self.pause("upload")
            size = await asyncio.to_thread(upload.complete)
            rec.update(rows=result["rows"], tables=result["tables"],
                       raw_bytes=result["raw_bytes"], bytes=size, sha256=result["sha256"],
                       export_secs=result["secs"])
            entry = {**{k: rec[k] for k in ("backup_id", "name", "project_slug",
                                            "storage_path", "created_at_ms", "rows", "tables",
                                            "raw_bytes", "bytes", "sha256")},
                     "finished_at_ms": now_ms(), "format": FORMAT, "version": VERSION,
                     "namespace": self.db_config.namespace,
                     "database": self.db_config.database, "deleted_at_ms": None}
            await asyncio.to_thread(store.put_json, catalog_key(rec["project_slug"], bid), entry)
            rec.update(status="done", finished_at_ms=entry["finished_at_ms"], progress=None)
            log.info("backup %s done: %d rows, %d bytes", bid, result["rows"], size)
        except asyncio.CancelledError:
            if upload is not None:
                await asyncio.shield(asyncio.to_thread(upload.abort))
            raise
        except Exception as e:  # noqa: BLE001 - reported in the record
            if upload is not None:
                await asyncio.to_thread(upload.abort)
            msg = str(e) if isinstance(e, StorageError) else f"{type(e).__name__}: {e}"
            rec.update(status="failed", finished_at_ms=now_ms(), error=msg[:500])
            log.error("backup %s failed: %s", bid, rec["error"])
            if self.on_failure is not None:
                self.on_failure("backup", rec)
        self.registry.put_backup(rec)
        self._changed("backup", rec)
