"""A project's scheduled-backup settings, kept by the platform (spec: scheduled backups are
the platform's; the scheduler's ``PUT /admin/api/backups/config`` is forwarded here when
linked): ``enabled``, ``schedule`` (a 5-field cron expression, UTC) and ``retention`` (days a
backup is kept, 1-3650). Stored on the project row; a write merges the fields given.

The platform's worker takes backups on that schedule and deletes them past their retention
(``cloud.backupsched``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cronsim import CronSim, CronSimError

from cloud.errors import BadRequest
from cloud.store import Store, now, rid

__all__ = ["DEFAULT", "BackupConfig", "check"]

DEFAULT: dict[str, Any] = {"enabled": False, "schedule": None, "retention": None}


def check(body: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(body) - set(DEFAULT))
    if unknown:
        raise BadRequest(f"{unknown[0][:60]}: unknown field (enabled, schedule, retention)")
    out: dict[str, Any] = {}
    if "enabled" in body:
        if not isinstance(body["enabled"], bool):
            raise BadRequest("enabled: must be true or false")
        out["enabled"] = body["enabled"]
    if "schedule" in body:
        s = body["schedule"]
        if s is not None:
            if not isinstance(s, str) or len(s) > 100:
                raise BadRequest("schedule: a 5-field cron expression (UTC), or null")
            try:
                CronSim(s, datetime.now(UTC))
            except CronSimError as e:
                raise BadRequest(f"schedule: not a cron expression ({e})") from None
        out["schedule"] = s
    if "retention" in body:
        r = body["retention"]
        if r is not None and (isinstance(r, bool) or not isinstance(r, int)
                              or not 1 <= r <= 3650):
            raise BadRequest("retention: days a backup is kept, 1 to 3650, or null")
        out["retention"] = r
    return out


class BackupConfig:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def get(self, project: dict[str, Any]) -> dict[str, Any]:
        row = await self.store.get("project", project["id"])
        return {**DEFAULT, **((row or {}).get("backup_config") or {})}

    async def last_run(self, project: dict[str, Any]) -> dict[str, Any] | None:
        """What the schedule last did (``cloud.backupsched``): when, the backup it started,
        or why it could not; None before its first run."""
        row = await self.store.get("project", project["id"])
        state = (row or {}).get("backup_schedule")
        return dict(state) if state else None

    async def set(self, project: dict[str, Any], body: dict[str, Any], who: str,
                  extra: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        given = check(body)
        merged = {**await self.get(project), **given}
        if merged["enabled"] and not merged["schedule"]:
            raise BadRequest("schedule: required to enable scheduled backups")
        merged.update(updated_at=now(), updated_by=who)
        await self.store.tx([("UPDATE $id SET backup_config = $c RETURN NONE",
                              {"id": rid("project", project["id"]), "c": merged}), *extra])
        return merged
