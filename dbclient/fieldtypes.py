"""SurrealDB types for rows that arrived as JSON (transport `http`), from the table's fields.

A database event posts its row as JSON, so record links and datetimes arrive as text. Stored or
hashed like that they differ from what the database holds (`engine.hashing` hashes a RecordID
and the string `"user:1"` differently), and a replica of them never hashes like upstream. Where
the table's definition says a field is a `record<...>` or a `datetime` (`INFO FOR TABLE`), the
text is turned back into that type. Schemaless fields have no type to go by and stay as sent.

Used by the SSP (JSON ingest, rows bootstrapped through the scheduler's proxy) and by the
scheduler (`POST /ingest`, before the WAL).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from surrealdb import RecordID

from dbclient.errors import DbError
from engine.values import parse_record_id

if TYPE_CHECKING:
    from dbclient.database import Database

log = logging.getLogger("dbclient.fieldtypes")

__all__ = ["FieldTypes", "field_kinds", "restore_types"]

Kinds = dict[str, str]  # field name -> "record" | "datetime"
# Datetime text -> value. Callers pass the ingest contract's parser
# (`timetext.timestamps.parse_timestamp`: the same text, the same value), which this package cannot
# import (dbclient sits below ipc's users, not above ipc).
ParseDatetime = Callable[[str], datetime]


def field_kinds(info: Mapping[str, Any]) -> Kinds:
    """The fields of an `INFO FOR TABLE` answer typed as a record link or a datetime."""
    kinds: Kinds = {}
    for name, text in (info.get("fields") or {}).items():
        up = str(text).upper()
        if " TYPE " not in up:
            continue
        tail = up.split(" TYPE ", 1)[1]
        # SurrealDB 3 prints option<T> as `none | T`: the first non-none alternative.
        alts = [a.strip() for a in tail.split("|")]
        tail = next((a for a in alts if not a.startswith(("NONE", "NULL"))), "")
        if tail.startswith(("RECORD", "OPTION<RECORD")):
            kinds[str(name)] = "record"
        elif tail.startswith(("DATETIME", "OPTION<DATETIME")):
            kinds[str(name)] = "datetime"
    return kinds


def restore_types(table: str, rid: str, record: Mapping[str, Any],
                  kinds: Mapping[str, str], *, parse_datetime: ParseDatetime) -> dict[str, Any]:
    """`record` with its id a RecordID and the `kinds` fields' text typed again (datetimes
    with `parse_datetime`).

    ValueError when `rid` is not a record id of `table`. A value that does not parse keeps its
    text (the engine compares it as SurrealDB would a string)."""
    out = dict(record)
    try:
        ident = parse_record_id(rid) if ":" in rid else RecordID(table, rid)
    except ValueError:
        raise ValueError(f"id {rid[:80]!r} is not a record id") from None
    if ident.table_name != table:
        raise ValueError(f"id {rid[:80]!r} is not in table {table}")
    out["id"] = ident
    for name, kind in kinds.items():
        v = out.get(name)
        if not isinstance(v, str):
            continue
        try:
            out[name] = parse_record_id(v) if kind == "record" else parse_datetime(v)
        except ValueError:
            pass
    return out


class FieldTypes:
    """Per-table field kinds read from the database, cached for `refresh_secs`.

    `await kinds(table)` reads `INFO FOR TABLE` on a miss or when the entry is older than
    `refresh_secs` (one read per table at a time). When the read fails the previous answer is
    kept (or none: the row stays as sent) and the failure is logged and counted."""

    def __init__(self, db: Database, refresh_secs: float = 30.0, *,
                 parse_datetime: ParseDatetime) -> None:
        self.db = db
        self.parse_datetime = parse_datetime
        self.refresh_secs = refresh_secs
        self.failures = 0
        self._cache: dict[str, tuple[float, Kinds]] = {}
        self._loading: dict[str, asyncio.Future[Kinds]] = {}

    async def kinds(self, table: str) -> Kinds:
        """The table's typed fields (possibly empty)."""
        hit = self._cache.get(table)
        if hit is not None and time.monotonic() - hit[0] < self.refresh_secs:
            return hit[1]
        pending = self._loading.get(table)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[Kinds] = asyncio.get_running_loop().create_future()
        self._loading[table] = fut
        try:
            try:
                kinds = field_kinds(await self.db.table_info(table))
            except (DbError, ValueError) as e:
                self.failures += 1
                kinds = hit[1] if hit is not None else {}
                log.warning("INFO FOR TABLE %s failed (%s); %s", table, e,
                            "keeping the previous field types" if hit is not None
                            else "its rows stay as sent")
                # Retry the read after a short while, not on every event.
                self._cache[table] = (time.monotonic() - self.refresh_secs + 1.0, kinds)
            else:
                self._cache[table] = (time.monotonic(), kinds)
            fut.set_result(kinds)
            return kinds
        finally:
            del self._loading[table]
            if not fut.done():
                fut.cancel()

    def forget(self, table: str | None = None) -> None:
        """Drop the cached kinds of `table` (all tables with None): the next use reads them."""
        if table is None:
            self._cache.clear()
        else:
            self._cache.pop(table, None)

    async def restore(self, table: str, rid: str, record: Mapping[str, Any]) -> dict[str, Any]:
        """:func:`restore_types` with the table's current kinds."""
        return restore_types(table, rid, record, await self.kinds(table),
                             parse_datetime=self.parse_datetime)
