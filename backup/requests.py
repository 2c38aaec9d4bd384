"""The maintenance routes' bodies, checked once for both listeners that serve them.

The spec's "Standalone maintenance plane" (an SSP without scheduler) and the same routes on
the scheduler's ingest listener:

* ``POST /backup/create {backup_id?, project_slug?, name?}``: 202 with the backup record;
* ``GET /backup/status``: ``{backups, restores, storage, held}`` (recent jobs, reachability);
* ``GET /backup/status/:backup_id``: one backup record;
* ``POST /backup/restore {restore_id?, backup_id, project_slug?, storage_path?}``: 202 with
  the restore record;
* ``GET /backup/restore/status/:restore_id``: one restore record.

Refusals are ``backup.service.BackupError`` subclasses carrying their status: 400 invalid,
404 unknown id, 409 a restore already queued or running, 503 without object storage.
"""

from __future__ import annotations

from typing import Any

from backup.service import BackupInvalid, BackupNotFound, BackupService, check_id

__all__ = [
    "RECENT",
    "backup_status",
    "parse_create",
    "parse_restore",
    "restore_status",
    "status",
]

RECENT = 20


def _obj(body: Any) -> dict[str, Any]:
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise BackupInvalid("the body must be a JSON object")
    return body


def _opt_str(body: dict[str, Any], key: str) -> str | None:
    v = body.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        raise BackupInvalid(f"{key}: must be a non-empty string")
    return v.strip()


def parse_create(body: Any) -> dict[str, Any]:
    """``{backup_id?, project_slug?, name?}`` -> keyword arguments of ``create_backup``."""
    b = _obj(body)
    out = {"backup_id": _opt_str(b, "backup_id"), "project_slug": _opt_str(b, "project_slug"),
           "name": _opt_str(b, "name")}
    if out["backup_id"] is not None:
        check_id(out["backup_id"], "backup_id")
    return out


def parse_restore(body: Any) -> dict[str, Any]:
    """``{restore_id?, backup_id, project_slug?, storage_path?}`` -> arguments of
    ``start_restore``."""
    b = _obj(body)
    backup_id = _opt_str(b, "backup_id")
    if backup_id is None:
        raise BackupInvalid("backup_id: is required")
    check_id(backup_id, "backup_id")
    return {"backup_id": backup_id, "restore_id": _opt_str(b, "restore_id"),
            "project_slug": _opt_str(b, "project_slug"),
            "storage_path": _opt_str(b, "storage_path")}


async def status(svc: BackupService) -> dict[str, Any]:
    """``GET /backup/status``."""
    return {"backups": svc.registry.backup_list()[:RECENT],
            "restores": svc.registry.restore_list()[:RECENT],
            "storage": await svc.storage_status(),
            "held": svc.held, "registry_error": svc.registry.storage_error}


def backup_status(svc: BackupService, backup_id: str) -> dict[str, Any]:
    rec = svc.registry.backups.get(backup_id)
    if rec is None:
        raise BackupNotFound(f"no backup {backup_id[:128]} in this process's registry")
    return rec


def restore_status(svc: BackupService, restore_id: str) -> dict[str, Any]:
    rec = svc.registry.restores.get(restore_id)
    if rec is None:
        raise BackupNotFound(f"no restore {restore_id[:128]} in this process's registry")
    return rec
