"""`_00_run_rollup`: success / failure / skipped tallies per schedule and UTC day.

One row per (bucket, day), id `<bucket>:<YYYY-MM-DD>`, fields `schedule` (the bucket), `day`
(the day's start), `success`, `failure`, `skipped`. The bucket is the schedule's name for its
fires (manual triggers included) and for retries of their runs, and `(ad-hoc)` for runs no
schedule owns (reruns). The increment is written in the same transaction as the status change
it counts, so a count is never lost or doubled by a crash.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from surrealdb import RecordID

from project.workflows import AD_HOC

__all__ = ["FIELDS", "bucket_of", "increment", "tally"]

FIELDS = ("success", "failure", "skipped")


def bucket_of(schedule: str | None) -> str:
    return schedule if schedule else AD_HOC


def increment(schedule: str | None, at: datetime, field: str) -> tuple[str, dict[str, Any]]:
    """The UPSERT adding one to `field` of the bucket's row for `at`'s day."""
    assert field in FIELDS
    day = at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    bucket = bucket_of(schedule)
    rid = RecordID("_00_run_rollup", f"{bucket}:{day.date().isoformat()}")
    return (f"UPSERT $id SET schedule = $b, day = $d, {field} += 1 RETURN NONE",
            {"id": rid, "b": bucket, "d": day})


def tally(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals and the per-day list (newest first) of one bucket's rows."""
    days = []
    totals = dict.fromkeys(FIELDS, 0)
    for r in sorted(rows, key=lambda r: r.get("day") or datetime.min.replace(tzinfo=UTC),
                    reverse=True):
        counts = {f: int(r.get(f) or 0) for f in FIELDS}
        for f in FIELDS:
            totals[f] += counts[f]
        day = r.get("day")
        days.append({"day": day.date().isoformat() if isinstance(day, datetime) else None,
                     **counts})
    return {**totals, "days": days}
