"""The one stand-in for `dbclient.Database` in unit tests: it records what is written,
answers reads from what the test gave it, and fails on demand. Real-database tests use the
database host (tests/support/procs.py); this is for the narrow seams a real process cannot be
made to hit on demand."""

from __future__ import annotations

import asyncio
from typing import Any

from dbclient import DbError, DbQueryError


class FakeDb:
    """`query`/`transaction`/`table_info` fail while `fail` says so:

    - an exception instance: raised by every such call until `fail` is cleared;
    - True: `DbError("down")` on every call until cleared;
    - an int n > 0: the next n calls raise `DbQueryError("boom")`.

    `query_one` answers `rows` (None by default: no row). Writes are recorded: `queries`
    (sql, vars) of each `query`, `transactions` (the statements of each `transaction`),
    `writes` (the sql of both, a transaction as "transaction")."""

    def __init__(self, fail: BaseException | bool | int | None = None, *,
                 info: dict[str, Any] | None = None, rows: Any = None,
                 delay: float = 0.0) -> None:
        self.fail = fail
        self.info = info or {}
        self.rows = rows
        self.delay = delay
        self.queries: list[tuple[str, Any]] = []
        self.transactions: list[list[tuple[str, Any]]] = []
        self.writes: list[str] = []
        self.info_calls = 0
        self.consecutive_timeouts = 0
        self.reconnects = 0

    def _maybe_fail(self) -> None:
        fail = self.fail
        if isinstance(fail, BaseException):
            raise fail
        if fail is True:
            raise DbError("down")
        if isinstance(fail, int) and fail > 0:
            self.fail = fail - 1
            raise DbQueryError("boom")

    async def query(self, sql: str, vars: Any = None, **_kw: Any) -> list[Any]:
        self._maybe_fail()
        self.queries.append((sql, vars))
        self.writes.append(sql)
        return []

    async def query_one(self, sql: str, vars: Any = None, **_kw: Any) -> Any:
        return self.rows

    async def transaction(self, stmts: list[tuple[str, Any]]) -> list[Any]:
        if self.delay:
            await asyncio.sleep(self.delay)
        self._maybe_fail()
        self.transactions.append(list(stmts))
        self.writes.append("transaction")
        # An UPDATE of listed ids that returns them (the publisher's RETIRE) answers every id:
        # here every edge exists and was live.
        return [vars["ids"] if sql.startswith("UPDATE $ids") and sql.endswith("RETURN VALUE id")
                else None for sql, vars in stmts]

    async def tables(self) -> list[str]:
        """No table: the database a fake stands for is empty (the reaper lists it at start)."""
        self._maybe_fail()
        return []

    async def table_info(self, table: str) -> dict[str, Any]:
        self.info_calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        self._maybe_fail()
        return self.info
