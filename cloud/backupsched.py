"""Backups on each project's configured schedule (``cloud.backupconfig``), taken by the
platform's worker (``cloud.worker``; one per service, never per gunicorn worker).

Every ``SVC_CLOUD_BACKUP_TICK_SECS`` the worker looks at the projects whose scheduled backups
are enabled. A project is due when the first time its cron schedule (UTC) gives after its
last scheduled backup (or, before the first, after the settings were last written) has
passed: one backup is then taken through the running deployment's scheduler, exactly as
``backup_create`` takes one (``cloud.backupfwd``), named ``scheduled <time>``. Times missed
while the platform was down are not caught up one by one: a due project gets one backup and
its schedule goes on from now. The attempt is recorded before the call (a crash between the
two loses that one slot rather than taking it twice); a failed attempt (no running
deployment, no object storage, the scheduler not answering) is logged, kept on the project
as ``backup_schedule.last_error`` and retried at the next time the schedule gives.

Retention: a backup the schedule took (``scheduled_backup`` rows) is deleted through the
deployed scheduler (its soft delete, as ``backup_delete``) once it is older than the
project's ``retention`` days. Backups taken by hand are never deleted by the schedule.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from cronsim import CronSim, CronSimError

from cloud.backupfwd import BackupForwarder
from cloud.errors import CloudError
from cloud.store import Store, now, rid, row_id

log = logging.getLogger("cloud.backupsched")

__all__ = ["BackupScheduler", "next_due"]


def next_due(schedule: str, after: datetime) -> datetime | None:
    """The first time ``schedule`` gives strictly after ``after`` (None: not a schedule)."""
    try:
        return next(CronSim(schedule, after))
    except (CronSimError, StopIteration):
        return None


class BackupScheduler:
    def __init__(self, store: Store, backups: BackupForwarder) -> None:
        self.store = store
        self.backups = backups

    async def tick(self) -> int:
        """Take the due backups and apply retention; how many backups were started."""
        rows = await self.store.one(
            "SELECT * FROM project WHERE deleted_at IS NONE AND backup_config.enabled = true",
            read=True) or []
        started = 0
        for row in rows:
            project = {**row, "id": row_id(row)}
            try:
                started += await self._due(project)
                await self._retention(project)
            except Exception:  # noqa: BLE001 - one project's trouble never stops the others
                log.exception("scheduled backups of %s failed", project.get("slug"))
        return started

    async def _due(self, project: dict[str, Any]) -> int:
        cfg = project.get("backup_config") or {}
        state = project.get("backup_schedule") or {}
        schedule = cfg.get("schedule")
        since = state.get("last_at") or cfg.get("updated_at") or project.get("created_at")
        if not schedule or not isinstance(since, datetime):
            return 0
        # a schedule changed since the last backup counts from its change
        if isinstance(cfg.get("updated_at"), datetime) and cfg["updated_at"] > since:
            since = cfg["updated_at"]
        due = next_due(schedule, since)
        at = now()
        if due is None or due > at:
            return 0
        key = rid("project", project["id"])
        await self.store.run("UPDATE $id SET backup_schedule.last_at = $at, "
                             "backup_schedule.last_due = $due RETURN NONE",
                             {"id": key, "at": at, "due": due})
        name = f"scheduled {due:%Y-%m-%d %H:%M} UTC"
        try:
            got = await self.backups.call(project, "POST", "/backups", {"name": name})
        except CloudError as e:
            log.warning("scheduled backup of %s not taken: %s", project["slug"], e)
            await self.store.run("UPDATE $id SET backup_schedule.last_error = $e RETURN NONE",
                                 {"id": key, "e": {"at": at, "message": str(e)[:300]}})
            return 0
        bid = got.get("backup_id") if isinstance(got, dict) else None
        stmts: list[tuple[str, dict[str, Any]]] = [
            ("UPDATE $id SET backup_schedule.last_error = NONE, backup_schedule.last_backup "
             "= $b RETURN NONE", {"id": key, "b": bid})]
        if bid:
            stmts.append(("CREATE $id CONTENT $c RETURN NONE", {
                "id": rid("scheduled_backup", f"{project['id']}.{bid}"),
                "c": {"project": project["id"], "backup_id": bid, "at": at, "due": due}}))
        await self.store.tx(stmts)
        log.info("scheduled backup %s of %s started (%s)", bid, project["slug"], name)
        return 1

    async def _retention(self, project: dict[str, Any]) -> None:
        days = (project.get("backup_config") or {}).get("retention")
        if not isinstance(days, int) or days < 1:
            return
        old = await self.store.one(
            "SELECT * FROM scheduled_backup WHERE project = $p AND deleted_at IS NONE "
            "AND at < $before", {"p": project["id"], "before": now() - timedelta(days=days)},
            read=True) or []
        for r in old:
            try:
                await self.backups.call(project, "DELETE",
                                        self.backups.backup_path(r["backup_id"]))
            except CloudError as e:
                if e.status != 404:  # already gone there: nothing left to keep
                    log.warning("expired scheduled backup %s of %s not deleted: %s",
                                r["backup_id"], project["slug"], e)
                    continue
            await self.store.run("UPDATE $id SET deleted_at = $at RETURN NONE",
                                 {"id": r["id"], "at": now()})
            log.info("scheduled backup %s of %s deleted (older than %d days)",
                     r["backup_id"], project["slug"], days)
