"""The database's feed floor: the versionstamp below which its changefeeds describe another
database.

A restore wipes every table and imports the backup's rows (``backup.importer``), but the
engine keeps the changefeed entries written before the wipe (``REMOVE TABLE`` does not drop
them). A tail that reads them again puts the pre-restore rows back over the restored ones:
an SSP started cold after a restore tails from a few seconds before now and read the writes
made just before the restore (issue 31: its views then held rows the database no longer
had, for good). So the import records, right after its wipe, the versionstamp it began at
in ``_00_feed_floor:db``; every tail pins its cursor to it (``FeedCursor.pin``), and a
position saved below it (a snapshot, a replica's cursor) is of the replaced database.

The table is the service's own (``PERMISSIONS NONE`` for record users) and no dump carries
its row back: the import writes the floor of the restore that ran, not one an older restore
wrote.
"""

from __future__ import annotations

from typing import Any

from dbclient.clock import now_ms
from dbclient.errors import DbQueryError

__all__ = ["FLOOR_TABLE", "floor_now", "floor_statements", "read_floor"]

FLOOR_TABLE = "_00_feed_floor"


def floor_now() -> int:
    """The versionstamp of now (the engine's versionstamps are milliseconds << 16)."""
    return now_ms() << 16


def floor_statements(vs: int, reason: str) -> tuple[str, dict[str, Any]]:
    """The statement that records `vs` as the floor, with its variables."""
    return (f"DEFINE TABLE IF NOT EXISTS {FLOOR_TABLE} SCHEMALESS PERMISSIONS NONE; "
            f"UPSERT {FLOOR_TABLE}:db SET vs = $vs, reason = $reason, at = time::now() "
            "RETURN NONE", {"vs": vs, "reason": reason})


async def read_floor(db: Any) -> int:
    """The floor the database records (0: never restored, or the table is not there)."""
    try:
        rows = await db.query_one(f"SELECT VALUE vs FROM {FLOOR_TABLE}:db", idempotent=True)
    except DbQueryError:  # a database that never had one (a strict database has no table)
        return 0
    vs = rows[0] if isinstance(rows, list) and rows else 0
    return vs if isinstance(vs, int) and not isinstance(vs, bool) and vs > 0 else 0
