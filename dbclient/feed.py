"""Reading table changefeeds (`SHOW CHANGES`) in commit order: the parts every tail shares.

A changefeed read returns change sets `{versionstamp, changes: [...]}` per table. Merging
several tables' feeds into one commit order, and not losing a commit that becomes visible after
a later one was already read, is the same problem for every reader (the SSP in standalone mode,
the scheduler's changefeed transport), so it lives here:

* :func:`feed_change` turns one change into `(table, op, id text, row)`, keeping only the row
  (`current`, `update` when it is the created row, the `original` of a delete) and dropping the
  opaque parts of the feed (JSON patches of `update`, schema entries);
* :func:`read_round` reads every table from its cursor minus an overlap (a commit with an older
  versionstamp can become visible after a newer one was read), leaves out what was already seen,
  and returns the sets in versionstamp order, cut at the lowest "page was full" horizon so that
  no table's later sets run ahead of another table's unread ones;
* :func:`feed_retention_ms` reads a table's retention from its `DEFINE TABLE` text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from surrealdb import RecordID

from dbclient.errors import DbError
from engine.values import record_id_text

if TYPE_CHECKING:
    from dbclient.database import Database

__all__ = [
    "FeedRound",
    "feed_change",
    "feed_retention_ms",
    "read_round",
    "trim_seen",
]

_UNITS_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1, "s": 1000, "m": 60_000,
             "h": 3_600_000, "d": 86_400_000, "w": 604_800_000, "y": 31_536_000_000}
_DURATION_PART = re.compile(r"(\d+)(ns|us|µs|ms|s|m|h|d|w|y)")


def feed_change(table: str, ch: Mapping[str, Any]) -> tuple[str, str, str, Any] | None:
    """One changefeed change -> (table, op, id text, row), or None for schema entries.

    `op` is CREATE (the feed's `update` holding the new row), UPDATE (`current`, the row after
    the change; its `update` is then a list of patches, dropped) or DELETE (row = the
    `original` when the feed includes it, else None).
    """
    if "delete" in ch:
        d = ch["delete"]
        rid = d.get("id") if isinstance(d, Mapping) else None
        if not isinstance(rid, RecordID):
            return None
        return (table, "DELETE", record_id_text(rid), d.get("original"))
    if "current" in ch:
        row = ch["current"]
        op = "UPDATE"
    elif "update" in ch and isinstance(ch["update"], Mapping):
        row = ch["update"]
        op = "CREATE"
    else:
        return None
    if not isinstance(row, Mapping) or not isinstance(row.get("id"), RecordID):
        return None
    return (table, op, record_id_text(row["id"]), row)


@dataclass
class FeedRound:
    """What one :func:`read_round` found."""

    sets: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    # True when some table returned a full page: more sets are waiting beyond `sets`.
    more: bool = False


async def read_round(db: Database, cursors: Mapping[str, int],
                     seen: Mapping[str, Iterable[int] | set[int]], *, limit: int,
                     overlap_vs: int) -> FeedRound:
    """Read each table's feed from `cursors[t] - overlap_vs`; return the unseen sets in order.

    A table that does not exist (or has no feed) yields nothing. When a table's page is full,
    sets beyond its last versionstamp are held back (`more`): another table may still have
    older ones unread.
    """
    found: list[tuple[int, str, dict[str, Any]]] = []
    horizon: int | None = None
    for table, cursor in cursors.items():
        since = max(0, cursor - overlap_vs)
        try:
            got = await db.changes(table, since, limit)
        except DbError as e:
            text = str(e).lower()
            if "does not exist" in text or "not found" in text:
                continue
            raise
        done = seen.get(table) or ()
        for s in got:
            vs = int(s["versionstamp"])
            if vs not in done:
                found.append((vs, table, s))
        if len(got) >= limit:
            last = int(got[-1]["versionstamp"])
            horizon = last if horizon is None else min(horizon, last)
    found.sort(key=lambda x: (x[0], x[1]))
    if horizon is not None:
        found = [f for f in found if f[0] <= horizon]
    return FeedRound(found, horizon is not None)


def trim_seen(seen: MutableMapping[str, set[int]], cursors: Mapping[str, int],
              overlap_vs: int) -> None:
    """Forget seen versionstamps below the re-read window (they are never read again)."""
    for table, vs_set in seen.items():
        floor = cursors.get(table, 0) - overlap_vs
        if any(v < floor for v in vs_set):
            seen[table] = {v for v in vs_set if v >= floor}


def feed_retention_ms(definition: str) -> int | None:
    """The retention of a `DEFINE TABLE ... CHANGEFEED <duration>` text in ms (None: no feed)."""
    m = re.search(r"\bCHANGEFEED (\S+)", definition)
    if m is None:
        return None
    total = 0.0
    pos = 0
    text = m.group(1)
    for part in _DURATION_PART.finditer(text):
        if part.start() != pos:
            return None
        total += int(part.group(1)) * _UNITS_MS[part.group(2)]
        pos = part.end()
    if pos != len(text) or total <= 0:
        return None
    return int(total)
