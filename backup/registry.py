"""The local registry: every backup and restore this process ran, in ``backups.json``.

The file sits in the process's data directory (the scheduler's, beside its replica; a
standalone SSP's snapshot dir, else its run dir) and is rewritten whole (temp file, fsync,
rename) at each stage change, progress at most once per second, so a crash leaves the last
stage on disk. At load, a job the previous process was running is ``failed`` ("interrupted
by a restart at stage X"); a restore interrupted at ``main_db`` or ``replica`` had started to
replace the database, and :attr:`Registry.held` names it so the owner stays
blocked (the scheduler in Restoring) until an operator acts.

Backup records: ``{backup_id, name, project_slug, storage_path, status (queued, running,
done, failed), created_at_ms, finished_at_ms, rows, tables, raw_bytes, bytes, sha256,
progress, error, deleted_at_ms}``. Restore records: ``{restore_id, backup_id, project_slug,
storage_path, stage (queued, running, main_db, replica, done, failed), failed_stage,
stages [{stage, at_ms}], started_at_ms, finished_at_ms, progress, error, warnings}``.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from dbclient.clock import now_ms
from ipc.statefile import read_state, replace_file

log = logging.getLogger("backup.registry")

__all__ = ["FILE", "KEPT_BACKUPS", "KEPT_RESTORES", "Registry", "now_ms"]

FILE = "backups.json"
KEPT_BACKUPS = 200
KEPT_RESTORES = 50
#: restore stages after which the database may no longer be what it was
DESTRUCTIVE_STAGES = ("main_db", "replica")



class Registry:
    """See the module docstring."""

    def __init__(self, directory: Path | None) -> None:
        self.path = directory / FILE if directory is not None else None
        self.backups: dict[str, dict[str, Any]] = {}
        self.restores: dict[str, dict[str, Any]] = {}
        self.held: dict[str, Any] | None = None
        self.storage_error: str | None = None
        self._last_write = 0.0
        self._dirty = False
        self._load()

    def _load(self) -> None:
        if self.path is None:
            return
        raw = read_state(self.path, "backup registry", log)
        if not isinstance(raw, dict):
            return
        for rec in raw.get("backups") or []:
            if isinstance(rec, dict) and isinstance(rec.get("backup_id"), str):
                if rec.get("status") in ("queued", "running"):
                    rec.update(status="failed", finished_at_ms=now_ms(),
                               error=f"interrupted by a restart while {rec.get('status')}")
                self.backups[rec["backup_id"]] = rec
        for rec in raw.get("restores") or []:
            if isinstance(rec, dict) and isinstance(rec.get("restore_id"), str):
                stage = rec.get("stage")
                if stage not in ("done", "failed"):
                    rec.update(stage="failed", failed_stage=stage, finished_at_ms=now_ms(),
                               error=f"interrupted by a restart at stage {stage}")
                    rec.setdefault("stages", []).append({"stage": "failed", "at_ms": now_ms()})
                    if stage in DESTRUCTIVE_STAGES:
                        self.held = rec
                self.restores[rec["restore_id"]] = rec
        # A process that was blocked by a failed restore stays blocked after a restart too.
        held = raw.get("held")
        if self.held is None and isinstance(held, str) and held in self.restores:
            self.held = self.restores[held]
        self._dirty = True
        self.write()

    # ------------------------------------------------------------------ writers
    def put_backup(self, rec: dict[str, Any], *, durable: bool = True) -> None:
        self.backups[rec["backup_id"]] = rec
        self._trim(self.backups, KEPT_BACKUPS, "status", "created_at_ms")
        self.changed(durable)

    def put_restore(self, rec: dict[str, Any], *, durable: bool = True) -> None:
        self.restores[rec["restore_id"]] = rec
        self._trim(self.restores, KEPT_RESTORES, "stage", "started_at_ms")
        self.changed(durable)

    @staticmethod
    def _trim(items: dict[str, dict[str, Any]], kept: int, state_key: str, at_key: str) -> None:
        excess = len(items) - kept
        if excess <= 0:
            return
        old = sorted((r for r in items.values() if r.get(state_key) in ("done", "failed")),
                     key=lambda r: r.get(at_key) or 0)
        for r in old[:excess]:
            items.pop(str(r.get("backup_id") or r.get("restore_id")), None)

    def changed(self, durable: bool = True) -> None:
        """Write now (a stage change) or at most once per second (progress)."""
        self._dirty = True
        if durable or time.monotonic() - self._last_write >= 1.0:
            self.write()

    def write(self) -> None:
        if self.path is None or not self._dirty:
            return
        self._last_write = time.monotonic()
        held = self.held.get("restore_id") if self.held else None
        doc = {"backups": list(self.backups.values()), "restores": list(self.restores.values()),
               "held": held}
        try:
            replace_file(self.path, json.dumps(doc, separators=(",", ":"),
                                               default=str).encode("utf-8"))
            self.storage_error = None
            self._dirty = False
        except OSError as e:
            self.storage_error = f"backup registry not written: {e.strerror or e}"
            log.warning("%s", self.storage_error)

    # ------------------------------------------------------------------ readers
    def backup_list(self) -> list[dict[str, Any]]:
        """Newest first."""
        return sorted(self.backups.values(), key=lambda r: r.get("created_at_ms") or 0,
                      reverse=True)

    def restore_list(self) -> list[dict[str, Any]]:
        return sorted(self.restores.values(), key=lambda r: r.get("started_at_ms") or 0,
                      reverse=True)

    def latest_restore(self, backup_id: str) -> dict[str, Any] | None:
        for rec in self.restore_list():
            if rec.get("backup_id") == backup_id:
                return rec
        return None
