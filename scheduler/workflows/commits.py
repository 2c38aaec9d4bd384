"""The engine's database verbs. Committing its decisions (`Committer`): units in transactions
of up to `BATCH_STATEMENTS` statements, `IN_FLIGHT` at a time; a refused batch is retried unit
by unit (one refused row fails only its own unit); a write conflict is sent again, never taken
for a refusal. Reading rows (`select`)."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

from surrealdb import RecordID

from dbclient import Database, DbQueryError
from dbclient.errors import retryable
from ipc.backoff import delay
from scheduler.workflows.state import Memory, Unit

log = logging.getLogger("scheduler.workflows")

__all__ = ["CONFLICT_RETRIES", "READ_CHUNK", "Committer", "already_exists", "retryable",
           "select"]

BATCH_STATEMENTS = 600
IN_FLIGHT = 2
#: times a transaction that met a write conflict is sent again before giving up
CONFLICT_RETRIES = 6
READ_CHUNK = 500  # ids per `IN $ids` read


def already_exists(e: DbQueryError) -> bool:
    """The database refused a CREATE because the record exists (a decision recorded twice)."""
    return "already exists" in e.engine_message


async def select(db: Database, sql: str, vars: dict[str, Any] | None = None
                 ) -> list[dict[str, Any]]:
    """The rows of one idempotent SELECT (anything but objects dropped)."""
    rows = await db.query_one(sql, vars, idempotent=True) or []
    return [r for r in rows if isinstance(r, dict)]


class Committer:
    """Commits units; memory is marked for a resync when one is refused without a handler."""

    def __init__(self, db: Database, memory: Memory) -> None:
        self.db = db
        self.memory = memory

    async def commit(self, units: list[Unit]) -> None:
        """Units of one round (independent of each other by construction) in transactions of
        up to BATCH_STATEMENTS statements, two in flight (the database works on one while this
        process encodes the next)."""
        chunks: list[list[Unit]] = [[]]
        size = 0
        for u in units:
            if chunks[-1] and size + len(u.statements) > BATCH_STATEMENTS:
                chunks.append([])
                size = 0
            chunks[-1].append(u)
            size += len(u.statements)
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(chunk: list[Unit]) -> None:
            async with gate:
                await self.commit_chunk(chunk)
        if len(chunks) == 1:
            await self.commit_chunk(chunks[0])
            return
        got = await asyncio.gather(*(one(c) for c in chunks if c), return_exceptions=True)
        for g in got:
            if isinstance(g, BaseException):
                raise g

    async def commit_chunk(self, chunk: list[Unit]) -> None:
        statements = [st for u in chunk for st in u.statements]
        by_due: dict[datetime, list[RecordID]] = {}
        for u in chunk:
            if u.cursor is not None:
                by_due.setdefault(u.cursor[1], []).append(u.cursor[0])
        for due, ids in by_due.items():
            statements.append((("UPDATE $ids SET last_due_at = $d, last_fired_at = time::now() "
                               "RETURN NONE"), {"ids": ids, "d": due}))
        refused = await self._transaction(statements)
        if refused is None:
            for u in chunk:
                if u.ok is not None:
                    u.ok()
        elif len(chunk) == 1:
            await self._refused(chunk[0], refused)
        else:
            for u in chunk:  # find the one(s) refused; the rest commit on their own
                await self.commit_chunk([u])

    async def _transaction(self, statements: list[tuple[str, dict[str, Any] | None]]
                           ) -> DbQueryError | None:
        """Commit; the refusal when the database refused a statement (None: committed).
        A write conflict (another writer on the same rows: the CLI applying definitions, an
        SSP on a job row) is no refusal: the transaction is sent again, and a conflict that
        persists raises (the engine then reads its state again)."""
        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                await self.db.transaction(statements)
                return None
            except DbQueryError as e:
                if not retryable(e):
                    return e
                if attempt == CONFLICT_RETRIES:
                    raise
                await asyncio.sleep(delay(attempt + 1, 0.01))
        return None

    async def _refused(self, u: Unit, e: DbQueryError) -> None:
        if u.fail is not None:
            await u.fail(e)
        else:
            log.warning("workflows: %s refused by the database: %s", u.label, e)
            self.memory.resync = True
