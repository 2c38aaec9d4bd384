"""Import a verified dump into the main database: wipe, schema, rows, events, views, check.

The caller verified the dump first (``backup.dumpformat.verify_dump``): nothing is wiped for a
dump that cannot be read to its end. Then, through the database URL:

1. the wipe (``backup.schema.SchemaPlan.wipe``): every table, the service's ``_00_*`` and
   edge tables included, and every function, param and analyzer;
2. database-level definitions, tables with their fields and indexes;
3. the rows, in batches of at most :data:`BATCH_ROWS` (the embedded engine degrades on larger
   statements), each under ``OPTION IMPORT`` (no event fires, no ``VALUE`` or ``ASSERT``
   clause runs again): one ``CREATE`` per row, one ``RELATE`` per edge (so edges get their
   graph pointers); :data:`WORKERS` batches in flight at once;
4. events, then the computed views (filled by the engine from the rows);
5. the check: every table holds at least the dump's rows, else :class:`ImportMismatch`
   (edge tables and view metrics, which the service's running processes rewrite, are not
   counted).

The service keeps running while this runs (a scheduler's SSPs write their edges and view
metrics): a row such a writer created between the wipe and its import is replaced by the
dump's (its batch is written again with UPSERT), so the import never fails on it.

A failure at any step raises: the database then holds a partial import, which the restore
state machine (``backup.restore``) reports as ``failed`` and never as ``done``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from backup.dumpformat import DumpError, read_dump
from backup.schema import SchemaPlan, escape_ident
from dbclient import SQL_NULL, Database, DbQueryError
from dbclient.feedfloor import FLOOR_TABLE, floor_now, floor_statements
from dbclient.tasks import cancel_and_wait

__all__ = ["BATCH_ROWS", "WORKERS", "ImportMismatch", "import_dump"]

BATCH_ROWS = 1000
WORKERS = 2
DDL_PER_CALL = 50

Progress = Callable[[dict[str, Any]], None]

# One CREATE (one RELATE for an edge) per row in a loop: ~3x the rows/s of `INSERT $rows`
# (`INSERT RELATION $rows`: ~4x) on the embedded engine (core 3.2.4), the same outcome.
_INSERT = "OPTION IMPORT; FOR $r IN $rows { CREATE ONLY $r.id CONTENT $r RETURN NONE }"
# A batch whose CREATE found a row there already goes again as UPSERT: the service's own
# writers (an SSP's view metrics every 2 s, its edges) may write a row between the wipe and
# its import, and the dump's row wins. Only then: UPSERT reads before it writes, measured
# ~3x slower per row than CREATE on the embedded engine (20,000 rows in batches of 1,000).
_UPSERT = "OPTION IMPORT; FOR $r IN $rows { UPSERT ONLY $r.id CONTENT $r RETURN NONE }"
# RELATE over an existing edge id replaces its content in place (no collision).
_INSERT_EDGES = ("OPTION IMPORT; FOR $r IN $rows { RELATE ($r.in)->($r.id)->($r.out) "
                 "CONTENT $r RETURN NONE }")
_COLLISION = "already exists"


_DERIVED = ("_00_list_ref", "_00_view_metrics")


class ImportMismatch(RuntimeError):
    """The database does not hold what the dump holds after the import (message says where)."""


def _nulls(v: Any) -> Any:
    """``None`` read back from the database is NULL; the SDK would send it as NONE."""
    if v is None:
        return SQL_NULL
    if isinstance(v, dict):
        return {k: _nulls(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_nulls(x) for x in v]
    return v


async def _ddl(db: Database, statements: list[str]) -> None:
    for i in range(0, len(statements), DDL_PER_CALL):
        chunk = statements[i:i + DDL_PER_CALL]
        if chunk:
            await db.query(";\n".join(chunk))


async def _next(it: Iterator[dict[str, Any]]) -> dict[str, Any] | None:
    return await asyncio.to_thread(next, it, None)


async def import_dump(db: Database, path: Path, *, batch_rows: int = BATCH_ROWS,
                      workers: int = WORKERS, progress: Progress | None = None,
                      on_wipe: Callable[[], Any] | None = None,
                      rows_total: int | None = None,
                      halfway: Callable[[], Awaitable[None]] | None = None) -> dict[str, Any]:
    """Replace the database's content with the dump at ``path`` (see the module docstring).

    ``on_wipe`` is called just before the first destructive statement; ``rows_total``
    (from the verification) is only for progress; ``halfway`` (the crash-test failpoint) is
    awaited once, with half of the rows committed and no insert in flight. Returns ``{tables,
    rows, warnings, secs}``."""
    started = time.monotonic()
    it = read_dump(path)
    header = await _next(it)
    schema = await _next(it)
    if header is None or schema is None or schema.get("t") != "schema":
        raise DumpError("the dump has no schema record")
    current = await db.query_one("INFO FOR DB", idempotent=True) or {}
    plan = SchemaPlan(schema.get("db") or {}, schema.get("tables") or {}, current)
    if on_wipe is not None:
        on_wipe()
    floor = floor_now()  # every feed entry of the database being replaced lies below it
    await _ddl(db, plan.wipe())
    # The floor first: a process that starts while the rows are still coming reads no
    # change of the replaced database (dbclient.feedfloor).
    await db.query(*floor_statements(floor, "restore"))
    await _ddl(db, plan.database_level() + plan.table_defs())

    queue: asyncio.Queue[tuple[str, list[Any]] | None] = asyncio.Queue(maxsize=workers * 2)
    counts: dict[str, int] = {}
    done = 0

    async def insert() -> None:
        while (item := await queue.get()) is not None:
            stmt, rows = item
            try:
                await db.query(stmt, {"rows": rows})
            except DbQueryError as e:
                if stmt != _INSERT or _COLLISION not in e.engine_message:
                    raise
                await db.query(_UPSERT, {"rows": rows})  # (the failed batch wrote nothing)
            queue.task_done()

    tasks = [asyncio.get_running_loop().create_task(insert(), name=f"import-{i}")
             for i in range(workers)]

    async def put(item: tuple[str, list[Any]] | None) -> None:
        while True:
            for t in tasks:
                if t.done() and (t.cancelled() or t.exception() is not None):
                    t.result()  # an insert failed: raise it here
            try:
                await asyncio.wait_for(queue.put(item), 1.0)
                return
            except TimeoutError:
                continue

    end: dict[str, Any] | None = None
    total = rows_total
    try:
        while (rec := await _next(it)) is not None:
            if rec["t"] == "end":
                end = rec
                break
            if rec["t"] != "rows":
                continue
            table = str(rec["table"])
            rows = rec["rows"]
            if table == FLOOR_TABLE:
                continue  # an older restore's floor: this one wrote its own
            stmt = _INSERT_EDGES if rec.get("edge") else _INSERT
            for i in range(0, len(rows), batch_rows):
                part = rows[i:i + batch_rows]
                await put((stmt, [_nulls(r) for r in part]))
                done += len(part)
                # per batch, not per dump record: a record (an export page) may hold a whole
                # table, and the failpoint must still land inside one
                if halfway is not None and total and done * 2 >= total:
                    await _drained(queue, tasks)
                    await halfway()
                    halfway = None
            counts[table] = counts.get(table, 0) + len(rows)
            if progress is not None:
                out = progress({"table": table, "rows_done": done, "rows_total": total})
                if asyncio.iscoroutine(out):
                    await out
        for _ in tasks:
            await put(None)
        await asyncio.gather(*tasks)
    except BaseException:
        # a worker whose cancel is lost would go back to queue.get() for ever (dbclient.tasks)
        await cancel_and_wait(*tasks)
        raise
    if end is None:
        raise DumpError("the dump ends before its end record (truncated)")
    await _ddl(db, plan.after_rows())
    await _check(db, [t for t in plan.data_tables() if not derived_table(t)], counts)
    return {"tables": counts, "rows": done, "warnings": plan.warnings,
            "secs": round(time.monotonic() - started, 3)}


async def _drained(queue: asyncio.Queue[Any], tasks: list[asyncio.Task[None]]) -> None:
    """Until every batch queued so far is committed (a worker failing ends the wait)."""
    joined = asyncio.ensure_future(queue.join())
    await asyncio.wait([joined, *tasks], return_when=asyncio.FIRST_COMPLETED)
    for t in tasks:
        if t.done() and (t.cancelled() or t.exception() is not None):
            joined.cancel()
            t.result()
    await joined


def derived_table(table: str) -> bool:
    """True for the service's tables that its running processes rewrite all the time and
    rebuild after a restore (edge tables, view metrics): their counts are not checked."""
    return table.startswith(_DERIVED)


async def _check(db: Database, tables: list[str], counts: dict[str, int]) -> None:
    """Every dump row must be there: a table holding fewer rows than the dump lost some (a
    writer deleted one during the import: the restore imports again). More is allowed:
    writers the restore does not stop (an application, a schedule firing) may add rows."""
    for table in tables:
        res = await db.query_one(
            f"SELECT count() AS n FROM {escape_ident(table)} GROUP ALL", idempotent=True)
        n = int(res[0]["n"]) if res else 0
        if n < counts.get(table, 0):
            raise ImportMismatch(f"table {table} holds {n} rows after the import, the dump "
                                 f"{counts.get(table, 0)}")
