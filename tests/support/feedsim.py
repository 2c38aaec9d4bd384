"""A simulated database feed for the changefeed tails' sweep tests (the scheduler's and the
standalone SSP's): the test decides when a commit becomes visible, and how late (a real
engine shows a late commit only by chance)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from surrealdb import RecordID

from dbclient import DbQueryError

MS = 1 << 16


class SimDb:
    """`changes` over commits of table `t` the test makes visible (the change sets the reads
    returned counted, seen ones included), `table_definitions`, and no LIVE (a tail that
    asks for one then polls)."""

    def __init__(self) -> None:
        self.visible: list[tuple[int, str]] = []  # (vs, key)
        self.reads = 0
        self.read_sets = 0

    def show(self, key: str, *, ms_ago: int = 0) -> None:
        """Commit `t:key`, `ms_ago` milliseconds before now, visible from now on."""
        vs = (time.time_ns() // 1_000_000 - ms_ago) * MS + len(self.visible)
        self.visible.append((vs, key))
        self.visible.sort()

    async def changes(self, table: str | None, since: int, limit: int = 1000) -> list[Any]:
        out = [{"versionstamp": vs, "changes": [{"update": {"id": RecordID("t", k)}}]}
               for vs, k in self.visible if vs >= since][:limit]
        self.reads += 1
        self.read_sets += len(out)
        return out

    async def table_definitions(self) -> dict[str, str]:
        return {"t": "DEFINE TABLE t TYPE ANY SCHEMALESS CHANGEFEED 1h INCLUDE ORIGINAL"}

    async def query_one(self, sql: str, *a: Any, **kw: Any) -> list[Any]:
        assert "_00_feed_floor" in sql  # the feed floor (dbclient.feedfloor): never restored
        return []

    async def live(self, table: str, sink: Any) -> Any:
        raise DbQueryError("no LIVE here")


class SlowSweepDb(SimDb):
    """A read of a tail's sweep task (named `changefeed-sweep`) waits for `release`."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.sweeping = asyncio.Event()

    async def changes(self, table: str | None, since: int, limit: int = 1000) -> list[Any]:
        task = asyncio.current_task()
        if task is not None and task.get_name() == "changefeed-sweep":
            self.sweeping.set()
            await self.release.wait()
        return await super().changes(table, since, limit)
