"""The restore state machine: ``queued -> running -> main_db -> replica -> done`` (or ``failed``).

* ``queued``: accepted, waiting for the plane's one worker (a backup may be running);
* ``running``: the dump is downloaded to a local file and verified whole
  (``backup.dumpformat.verify_dump``). A failure here changes nothing: the owner never
  stopped serving;
* ``main_db``: the owner stops taking events (:meth:`RestoreTarget.hold`: the scheduler
  enters Restoring, a standalone SSP goes back to bootstrapping), then the main database is
  wiped and re-imported (``backup.importer``); an attempt that fails for a reason that can
  pass (a database error, a row deleted meanwhile) is run again from the wipe, up to
  ``IMPORT_ATTEMPTS`` in all (the record's ``retries`` lists them);
* ``replica``: the owner rebuilds what it derived from the database
  (:meth:`RestoreTarget.rebuild`: the scheduler re-clones its replica and every SSP is flagged
  to re-bootstrap; a standalone SSP re-bootstraps its circuit);
* ``done``, or ``failed`` with ``failed_stage`` and ``error``.

A failure at ``main_db`` or ``replica`` leaves the database replaced or half-replaced: the
owner stays blocked (:meth:`RestoreTarget.blocked`; the registry keeps it as ``held``, so a
restart keeps it too) until an operator acts (a new restore, or the scheduler's explicit
release). Nothing half-imported is ever reported ``done``.

Every stage change is written to the registry before the stage's work starts, so a process
killed mid-restore shows, after its restart, the stage it died in (``failed``, "interrupted
by a restart at stage X") and, from ``main_db`` on, comes back blocked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from backup.dumpformat import verify_dump
from backup.importer import ImportMismatch, import_dump
from backup.registry import DESTRUCTIVE_STAGES, Registry
from dbclient import Database, DbError
from dbclient.clock import now_ms

if TYPE_CHECKING:
    from backup.objstore import ObjectStore

log = logging.getLogger("backup.restore")

__all__ = ["STAGES", "RestoreRun", "RestoreTarget", "new_restore"]

STAGES = ("queued", "running", "main_db", "replica", "done", "failed")
# The import is run again from the wipe after a failure that can pass, this many times in
# all, RETRY_SECS x the attempt apart.
IMPORT_ATTEMPTS = 3
RETRY_SECS = 1.0


class RestoreTarget(Protocol):
    """What a restore needs from the process that owns the database's derived state."""

    async def hold(self, reason: str) -> None:
        """Stop taking events (before the wipe)."""

    async def rebuild(self, reason: str) -> None:
        """Rebuild every state derived from the database (the ``replica`` stage)."""

    async def blocked(self, reason: str) -> None:
        """A restore failed after ``main_db`` began: stay blocked until an operator acts."""


def new_restore(restore_id: str, backup_id: str, storage_path: str, project_slug: str,
                sha256: str | None, tables: dict[str, int] | None = None) -> dict[str, Any]:
    at = now_ms()
    return {"restore_id": restore_id, "backup_id": backup_id, "project_slug": project_slug,
            "storage_path": storage_path, "sha256": sha256, "tables": tables,
            "stage": "queued",
            "failed_stage": None, "stages": [{"stage": "queued", "at_ms": at}],
            "started_at_ms": at, "finished_at_ms": None, "progress": None, "error": None,
            "warnings": []}


class RestoreRun:
    """One restore through its stages (see the module docstring)."""

    def __init__(self, rec: dict[str, Any], *, registry: Registry, store: ObjectStore,
                 db: Database, target: RestoreTarget, work_dir: Path,
                 on_change: Callable[[dict[str, Any]], None],
                 pause: Callable[[str], Awaitable[None]] | None = None) -> None:
        self.rec = rec
        self.registry = registry
        self.store = store
        self.db = db
        self.target = target
        self.work_dir = work_dir
        self.on_change = on_change
        self.pause = pause  # the crash-test failpoint (backup.service.BackupService.pause)

    def _stage(self, stage: str) -> None:
        self.rec["stage"] = stage
        self.rec["stages"].append({"stage": stage, "at_ms": now_ms()})
        self.rec["progress"] = None
        self.registry.put_restore(self.rec)  # on disk before the stage's work starts
        log.info("restore %s: %s", self.rec["restore_id"], stage)
        self.on_change(self.rec)

    def _progress(self, p: dict[str, Any]) -> None:
        self.rec["progress"] = p
        self.registry.put_restore(self.rec, durable=False)
        self.on_change(self.rec)

    async def _pause(self, point: str) -> None:
        if self.pause is not None:
            await self.pause(point)

    async def run(self) -> dict[str, Any]:
        rid = self.rec["restore_id"]
        reason = f"restore {rid} of backup {self.rec['backup_id']}"
        self.work_dir.mkdir(parents=True, exist_ok=True)
        path = self.work_dir / f"{rid}.dump.gz"
        try:
            self._stage("running")
            await self._pause("running")
            size = await asyncio.to_thread(
                self.store.download, self.rec["storage_path"], path,
                lambda n: self._progress({"step": "download", "bytes": n}))
            self._progress({"step": "verify", "bytes": size})
            checked = await asyncio.to_thread(verify_dump, path, self.rec.get("sha256"),
                                              self.rec.get("tables"))
            self.rec["rows"] = checked["rows"]
            self._stage("main_db")
            await self.target.hold(reason)
            report = await self._import(path, checked["rows"])
            self.rec["warnings"] = report["warnings"]
            self.rec["import_secs"] = report["secs"]
            self._stage("replica")
            await self._pause("replica")
            await self.target.rebuild(reason)
            self.rec["finished_at_ms"] = now_ms()
            if self.registry.held is not None:
                self.registry.held = None  # a successful restore releases an earlier block
            self._stage("done")
        except asyncio.CancelledError:
            # The process is stopping: the registry keeps the stage; the next process marks
            # it interrupted (and blocked from main_db on).
            raise
        except Exception as e:  # noqa: BLE001 - every failure ends the restore as failed
            await self._fail(e, reason)
        finally:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        return self.rec

    async def _import(self, path: Path, rows: int) -> dict[str, Any]:
        """The import, again from the wipe when an attempt fails for a reason that can pass
        (the database refused a statement or timed out, a writer still running deleted a
        row meanwhile: `ImportMismatch`), at most IMPORT_ATTEMPTS times; each failed attempt
        is kept in the record's `retries`. A dump that cannot be read is not retried."""
        for attempt in range(1, IMPORT_ATTEMPTS + 1):
            def progress(p: dict[str, Any], n: int = attempt) -> None:
                self._progress({"step": "import", "attempt": n, **p})
            try:
                return await import_dump(
                    self.db, path, rows_total=rows, progress=progress,
                    halfway=(lambda: self._pause("main_db")) if attempt == 1 else None)
            except (DbError, ImportMismatch) as e:
                if attempt == IMPORT_ATTEMPTS:
                    raise
                msg = f"{type(e).__name__}: {e}"[:500]
                log.warning("restore %s: import attempt %d failed (%s); importing again",
                            self.rec["restore_id"], attempt, msg)
                self.rec.setdefault("retries", []).append(
                    {"attempt": attempt, "at_ms": now_ms(), "error": msg})
                self.registry.put_restore(self.rec)
                await asyncio.sleep(RETRY_SECS * attempt)
        raise AssertionError("unreachable")

    async def _fail(self, e: Exception, reason: str) -> None:
        stage = self.rec["stage"]
        msg = f"{type(e).__name__}: {e}"[:500]
        log.error("restore %s failed at stage %s: %s", self.rec["restore_id"], stage, msg)
        self.rec.update(failed_stage=stage, error=msg, finished_at_ms=now_ms())
        if stage in DESTRUCTIVE_STAGES:
            self.registry.held = self.rec
            try:
                await self.target.blocked(f"{reason} failed at {stage}: {msg}")
            except Exception:  # the record says failed whatever happens here
                log.exception("restore %s: blocking the owner failed", self.rec["restore_id"])
        self._stage("failed")
