"""Export the main database into a dump (``backup.dumpformat``), as a stream.

Everything goes through the database URL (``dbclient.Database``), so the same code backs up the
embedded host and a SurrealDB server: the schema from ``INFO FOR DB`` / ``INFO FOR TABLE``,
then every table that is not a computed view, page by page in keyset order (``ORDER BY id
LIMIT n``, then ``WHERE id > <last id>``, never an offset), through ``type::table($t)`` so any
table name is a bound parameter.

Pipeline: this coroutine reads pages; a consumer hands each record to a worker thread that
encodes, compresses and writes it to the sink (the multipart upload), at most
:data:`QUEUE_PAGES` pages ahead. Memory is bounded by that queue plus one upload part, never
the database; the event loop that serves ingest never encodes or uploads.

Edges: a ``TYPE RELATION`` table holds only edges; a ``TYPE ANY`` table may hold both (rows
made by ``RELATE`` and plain rows that happen to have ``in``/``out`` fields), so for a page
of such a table with ``in``/``out`` rows the engine is asked which are edges
(``record::is_edge``) and they go in separate pages.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from surrealdb import RecordID

from backup.dumpformat import FORMAT, VERSION, DumpWriter
from backup.schema import escape_ident, is_view, table_kind, without_credentials
from dbclient import Database
from dbclient.clock import now_ms
from dbclient.database import keyset_pages

__all__ = ["PAGE_ROWS", "export_database", "pages"]

# Keyset pages grow from PAGE_ROWS to MAX_PAGE_ROWS once the rows' encoded size is known, so a
# page stays near PAGE_BYTES: each page is one query, and on the embedded engine a query's
# cost grows with the table (at 1,000,000 rows a 1,000-row page took ~340 ms, the whole read
# 342 s). At 200,000 small rows, 1,000-row pages read 13,524 rows/s, 5,000 43,663 and 10,000
# 59,291. Big rows keep small pages: memory stays near QUEUE_PAGES x PAGE_BYTES encoded.
PAGE_ROWS = 1000
MAX_PAGE_ROWS = 10_000
PAGE_BYTES = 2 * 1024 * 1024
QUEUE_PAGES = 4

Progress = Callable[[dict[str, Any]], None]

_EDGES = "RETURN array::map($ids, |$i| record::is_edge($i))"


async def pages(db: Database, table: str, page_rows: int | Callable[[], int] = PAGE_ROWS
                ) -> AsyncIterator[list[dict[str, Any]]]:
    """``table`` in pages of at most ``page_rows`` (or what it returns, asked before each
    page), keyset order, reads retried once."""
    async for page in keyset_pages(db, table, page_rows):
        yield page


async def _split_edges(db: Database, page: list[dict[str, Any]]
                       ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(plain rows, edges) of a page of a ``TYPE ANY`` table."""
    maybe = [r for r in page if isinstance(r.get("in"), RecordID)
             and isinstance(r.get("out"), RecordID)]
    if not maybe:
        return page, []
    flags = await db.query_one(_EDGES, {"ids": [r["id"] for r in maybe]}, idempotent=True)
    edge_ids = {id(r) for r, f in zip(maybe, flags or [], strict=False) if f is True}
    return ([r for r in page if id(r) not in edge_ids], [r for r in page if id(r) in edge_ids])


async def export_database(db: Database, sink: Callable[[bytes], None], *, backup_id: str,
                          page_rows: int = PAGE_ROWS, progress: Progress | None = None,
                          level: int = 6) -> dict[str, Any]:
    """Write the whole database to ``sink`` (blocking, called in a worker thread) as a dump.

    Returns ``{tables: {name: rows}, rows, raw_bytes, bytes, sha256, secs}``. Any database or
    sink error propagates (the caller aborts the upload: no ``end`` record was written)."""
    started = time.monotonic()
    cfg = db.config
    info = without_credentials(await db.query_one("INFO FOR DB", idempotent=True) or {})
    tables = {str(k): str(v) for k, v in (info.get("tables") or {}).items()}
    table_info = {}
    for name in sorted(tables):
        table_info[name] = await db.query_one(f"INFO FOR TABLE {escape_ident(name)}",
                                              idempotent=True) or {}
    data_tables = sorted(t for t, d in tables.items() if not is_view(d))
    writer = DumpWriter(sink, level=level)
    queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(maxsize=QUEUE_PAGES)

    encoded = [0, 0]  # rows encoded, their bytes

    async def consume() -> None:
        while (rec := await queue.get()) is not None:
            before = writer.raw_bytes
            await asyncio.to_thread(writer.add, rec)
            if rec.get("t") == "rows":
                encoded[0] += len(rec["rows"])
                encoded[1] += writer.raw_bytes - before
        await asyncio.to_thread(writer.close)

    def next_rows() -> int:
        # page_rows until rows were encoded, then as many as fit PAGE_BYTES (never fewer
        # than page_rows, never more than MAX_PAGE_ROWS)
        if not encoded[0] or page_rows >= MAX_PAGE_ROWS:
            return page_rows
        fit = PAGE_BYTES * encoded[0] // max(encoded[1], 1)
        return max(page_rows, min(MAX_PAGE_ROWS, fit))

    consumer = asyncio.get_running_loop().create_task(consume(), name="backup-writer")

    async def put(rec: dict[str, Any]) -> None:
        # The consumer failing (the upload) must stop the reader too, not leave it blocked.
        while True:
            if consumer.done():
                consumer.result()  # raises the writer's error
                raise RuntimeError("the dump writer stopped")
            try:
                await asyncio.wait_for(queue.put(rec), 1.0)
                return
            except TimeoutError:
                continue

    counts: dict[str, int] = {}
    total = 0
    try:
        await put({"t": "header", "format": FORMAT, "version": VERSION,
                   "created_at_ms": now_ms(), "namespace": cfg.namespace,
                   "database": cfg.database, "backup_id": backup_id})
        await put({"t": "schema", "db": info, "tables": table_info})
        for i, table in enumerate(data_tables):
            kind = table_kind(tables[table])
            n = 0
            async for page in pages(db, table, next_rows):
                parts: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]
                if kind == "relation":
                    parts = [([], page)]
                elif kind == "any":
                    parts = [await _split_edges(db, page)]
                else:
                    parts = [(page, [])]
                for plain, edges in parts:
                    if plain:
                        await put({"t": "rows", "table": table, "edge": False, "rows": plain})
                    if edges:
                        await put({"t": "rows", "table": table, "edge": True, "rows": edges})
                n += len(page)
                total += len(page)
                if progress is not None:
                    progress({"table": table, "tables_done": i, "tables_total": len(data_tables),
                              "rows": total})
            counts[table] = n
        await put({"t": "end", "tables": counts, "rows": total})
        await put(None)  # type: ignore[arg-type]
        await consumer
    except BaseException:
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
        raise
    return {"tables": counts, "rows": total, "raw_bytes": writer.raw_bytes,
            "bytes": writer.bytes, "sha256": writer.sha256,
            "secs": round(time.monotonic() - started, 3)}
