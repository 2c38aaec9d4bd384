"""Schedule time: when a cron expression is due, and what a late clock does about it.

Due times come from `cronsim` (5 fields, or 6 with seconds first) evaluated in the schedule's
IANA time zone and returned in UTC; nothing here reads the wall clock, so every rule is tested
with the times it is given.

Catch-up (the `catch_up` bound of a schedule): when the clock finds due times it did not fire
(the scheduler was down), the newest `catch_up` of them fire now, each a late fire of its own
due time (`catch_up: true` on its record); the older ones do not run and are recorded together
as one skipped fire with error `not_started` (`since`, `until`, `missed`), so a long outage is
never a silent burst, nor silently forgotten. `catch_up: 0` fires none of them. Due times within
`ON_TIME` (5 s) of the pass are not missed, only a little late, and always fire.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from cronsim import CronSim

__all__ = ["ON_TIME", "CatchUp", "due_between", "newest_due", "next_due", "plan", "zone"]

#: due times looked at per catch-up; more are counted as "at least" this many
SCAN_CAP = 10_000


@lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def _local(at: datetime, tz: str) -> datetime:
    return at.astimezone(zone(tz))


def next_due(cron: str, tz: str, after: datetime) -> datetime:
    """The first due time strictly after `after` (UTC in, UTC out)."""
    return next(CronSim(cron, _local(after, tz))).astimezone(UTC)


def due_between(cron: str, tz: str, after: datetime, until: datetime,
                cap: int = SCAN_CAP) -> tuple[list[datetime], bool]:
    """Due times in `(after, until]`, oldest first, at most `cap`; and whether more were
    left out (then the list holds the oldest `cap`)."""
    out: list[datetime] = []
    it = CronSim(cron, _local(after, tz))
    for due in it:
        d = due.astimezone(UTC)
        if d > until:
            return out, False
        if len(out) >= cap:
            return out, True
        out.append(d)
    return out, False


@dataclass(frozen=True)
class CatchUp:
    """What to do with the due times a clock pass found: `fire` (oldest first) and the
    `missed` ones (not run: one `not_started` record), `missed_count` at least as many."""

    fire: list[datetime] = field(default_factory=list)
    late: list[bool] = field(default_factory=list)  # per fire: a catch-up, not on time
    missed_since: datetime | None = None
    missed_until: datetime | None = None
    missed_count: int = 0
    count_truncated: bool = False


def newest_due(cron: str, tz: str, cursor: datetime, now: datetime, k: int) -> list[datetime]:
    """The newest `k` due times in `(cursor, now]`, oldest first."""
    out: list[datetime] = []
    if k <= 0:
        return out
    # reverse iteration is exclusive of a whole-second start: nudge it past `now`
    it = CronSim(cron, _local(now + timedelta(microseconds=1), tz), reverse=True)
    for due in it:
        d = due.astimezone(UTC)
        if d <= cursor:
            break
        if d <= now:
            out.append(d)
            if len(out) >= k:
                break
    out.reverse()
    return out


def plan(cron: str, tz: str, cursor: datetime, now: datetime, catch_up: int) -> CatchUp:
    """Due times after `cursor` up to `now` (see the module docstring).

    Due times within `ON_TIME` of now are on time and always fire: a clock pass that is a
    little behind (a busy moment, a per-second schedule) has missed nothing. Of the older
    ones the newest `catch_up` fire as catch-ups; the rest are missed."""
    recent = newest_due(cron, tz, cursor, now, catch_up + FRESH_MAX)
    fresh = [d for d in recent if now - d <= ON_TIME]
    stale = [d for d in recent if now - d > ON_TIME]
    late = stale[len(stale) - catch_up:] if catch_up else []
    fire = late + fresh
    if not fire and not stale:
        return CatchUp()
    # everything after the cursor and before the first fired (or up to now) is missed
    bound = fire[0] if fire else now + timedelta(microseconds=1)
    before = bound - timedelta(microseconds=1)
    missed, truncated = due_between(cron, tz, cursor, before)
    until = missed[-1] if missed else None
    if truncated:  # the list holds the oldest ones: find the newest missed directly
        until = newest_due(cron, tz, cursor, before, 1)[0]
    return CatchUp(fire=fire, late=[True] * len(late) + [False] * len(fresh),
                   missed_since=missed[0] if missed else None, missed_until=until,
                   missed_count=len(missed), count_truncated=truncated)


#: how late a due time may be found and still be the clock's normal fire (not a catch-up)
ON_TIME = timedelta(seconds=5)
#: on-time due times looked at per pass (a per-second schedule has 6 within ON_TIME)
FRESH_MAX = 64
