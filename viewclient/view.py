"""A live view: registered with the service, its edges followed by LIVE, its rows read back in
the query's own order, with optimistic writes laid over them."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from surrealdb import RecordID

from viewclient.conflicts import retried
from viewclient.naming import QUERY_TABLE, edge_table, record_text, ttl_secs
from viewclient.query import MEMBERS_PARAM, Window, members_query, where_filter

log = logging.getLogger("viewclient")

MATERIALIZING, READY, GAP = "materializing", "ready", "gap"


@dataclass
class Step:
    """One result of a view: its rows in order, its status, and what changed since the last."""

    status: str
    rows: list[Any]
    added: list[Any] = field(default_factory=list)
    removed: list[Any] = field(default_factory=list)
    changed: list[Any] = field(default_factory=list)


def _key(row: Any) -> str:
    if isinstance(row, dict) and "id" in row:
        return record_text(row["id"])
    return json.dumps(row, sort_keys=True, default=str)


class View:
    """Use `Client.view(...)`. `rows` and `status` are current; `subscribe(cb)` or
    `async for step in view` yields each Step."""

    def __init__(self, client: Any, view_id: str, surql: str, params: dict[str, Any],
                 ttl: str) -> None:
        self.client = client
        self.id = view_id
        self.surql = surql
        self.params = params
        self.ttl = ttl
        self.record = RecordID(QUERY_TABLE, view_id.removeprefix("query:"))
        self.table = _source_table(surql)
        self.read_query = members_query(surql)
        self.where = where_filter(surql)  # optimistic creates outside the WHERE stay out
        self.window = Window(surql)  # and are placed by its ORDER BY, within its window
        self.status = MATERIALIZING
        self.rows: list[Any] = []
        self._server_rows: list[Any] = []
        self._callbacks: list[Callable[[Step], Any]] = []
        self._queues: list[asyncio.Queue[Step]] = []
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._lock = asyncio.Lock()
        self._active_at = 0.0  # loop time of the last lastActiveAt write

    @property
    def edge_table(self) -> str:
        return edge_table(self.client.auth_text, self.client.ref_mode)

    # -- lifecycle -------------------------------------------------------------------------

    async def _start(self) -> None:
        self._active_at = asyncio.get_running_loop().time()
        await self.client.register(self.id, self.surql, self.params, self.ttl)
        await self._subscribe()
        await self._reread()
        self._tasks = [asyncio.create_task(self._reader()), asyncio.create_task(self._refresher())]

    async def _subscribe(self) -> None:
        """Follow the user's edge table (it exists once the registration answered): one LIVE
        query per connection and table, shared by the session's views; an edge of this view
        wakes its reader."""
        await self.client.follow(self.edge_table, self.record, self._dirty)

    async def _reader(self) -> None:
        while not self._closed:
            await self._dirty.wait()
            self._dirty.clear()
            if self.status == GAP:
                continue  # `_resume` reads once the connection is back
            try:
                await self._reread()
            except Exception as e:  # noqa: BLE001 - a lost connection; the watchdog recovers
                log.info("view %s: read failed: %s", self.id, e)

    async def _refresher(self) -> None:
        """`lastActiveAt` at 0.9 x ttl (spec); a row that is gone is registered again."""
        period = 0.9 * ttl_secs(self.ttl)
        loop = asyncio.get_running_loop()
        while not self._closed:
            # Counted from the last write of lastActiveAt (the registration's included), not
            # from the end of the previous round: a slow read must not eat the 10% margin.
            await asyncio.sleep(max(0.0, self._active_at + period - loop.time()))
            self._active_at = loop.time()
            if self.status == GAP:
                continue
            try:
                await self.refresh()
            except Exception as e:  # noqa: BLE001 - retried next period or after a reconnect
                log.info("view %s: refresh failed: %s", self.id, e)

    async def refresh(self) -> None:
        """Write `lastActiveAt = now` into the view's `_00_query` row (register again when the
        service no longer has the row)."""
        got = await self.client.db.query("UPDATE $q SET lastActiveAt = time::now()",
                                         {"q": self.record})
        if not got:
            await self.client.register(self.id, self.surql, self.params, self.ttl)

    def _set_gap(self) -> None:
        self.status = GAP
        self._emit(self.rows)

    async def _resume(self) -> None:
        """After a reconnect: register again (the service may have lost the view), LIVE again
        on the new connection, then read the rows (a change in between is in the read)."""
        await self.client.register(self.id, self.surql, self.params, self.ttl)
        await self._subscribe()
        self.status = MATERIALIZING
        await self._reread()

    async def close(self) -> None:
        """Stop following and delete the `_00_query` row (the service unregisters the view)."""
        if self._closed:
            return
        self._closed = True
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.client.unfollow(self.edge_table, self.record)
        db = self.client.db
        if db is not None:
            # transport http: the service's teardown, posted from inside this DELETE, can
            # write the row first (viewclient.conflicts)
            await retried(lambda: db.query("DELETE $q", {"q": self.record}))
        self.client.views.pop(self.id, None)
        for q in self._queues:
            q.put_nowait(Step("closed", self.rows))

    # -- reading ---------------------------------------------------------------------------

    async def _reread(self) -> None:
        """One request: the `_00_query` row, the members from the edges, their rows in the
        query's order."""
        async with self._lock:
            vars = {**self.params, "q": self.record, "et": self.edge_table}
            # The members sorted: rows that tie on the ORDER BY keep id order, as in a read
            # of the table (the edges' own order is the edge ids').
            text = ("SELECT state, rowCount FROM $q; "
                    f"LET ${MEMBERS_PARAM} = array::sort((SELECT VALUE out FROM "
                    "type::table($et) WHERE in = $q AND !removed)); " + self.read_query)
            res = await self.client.db.query_raw(text, vars)
            if res.get("error"):
                raise RuntimeError(str(res["error"]))
            stmts = res.get("result") or []
            for s in stmts:
                if s.get("status") != "OK":
                    raise RuntimeError(f"view {self.id}: {s.get('result')}")
            meta = stmts[0].get("result") or []
            rows = stmts[-1].get("result") or []
            if not meta:
                # The service no longer has the view (spec: keep the rows, register again).
                await self.client.register(self.id, self.surql, self.params, self.ttl)
                self.status = MATERIALIZING
            else:
                self.status = READY if meta[0].get("state") == READY else MATERIALIZING
            self._server_rows = rows
            self._emit(self._overlay(rows))

    def _changed_locally(self) -> None:
        self._emit(self._overlay(self._server_rows))

    def _overlay(self, rows: list[Any]) -> list[Any]:
        """Pending optimistic writes on this view's table laid over the server's rows: a
        create or an update placed by the view's ORDER BY and cut by its window, and left out
        when the view's WHERE surely excludes it. Where the client cannot tell (a WHERE or an
        ORDER BY beyond plain comparisons, values of two types), a create is shown at the end
        and an update in place, until the database's answer corrects them."""
        out = list(rows)
        auth = self.client.auth_id
        for p in self.client.pending:
            if p.table != self.table:
                continue
            idx = next((i for i, r in enumerate(out) if _key(r) == p.record), None)
            if p.op == "delete" and idx is not None:
                out.pop(idx)
            elif p.op == "update" and idx is not None:
                row = {**out.pop(idx), **p.data}
                if self.where(row, self.params, auth) is not False:
                    self._put(out, row, fallback=idx)
            elif p.op == "create" and idx is None:
                row = {**p.data, "id": p.record}
                if self.where(row, self.params, auth) is not False:
                    self._put(out, row, fallback=len(out))
        return out

    def _put(self, out: list[Any], row: dict[str, Any], *, fallback: int) -> None:
        at = self.window.place(out, row, self.params)
        if at is None:
            out.insert(fallback, row)
        elif at >= 0:
            out.insert(at, row)
            limit = self.window.limit(self.params)
            if limit is not None and len(out) > limit:
                out.pop()  # the window's last row makes room

    def _emit(self, rows: list[Any]) -> None:
        before = {_key(r): r for r in self.rows}
        after = {_key(r): r for r in rows}
        step = Step(self.status, rows,
                    added=[r for k, r in after.items() if k not in before],
                    removed=[r for k, r in before.items() if k not in after],
                    changed=[r for k, r in after.items() if k in before and before[k] != r])
        self.rows = rows
        for q in self._queues:
            q.put_nowait(step)
        for cb in list(self._callbacks):
            out = cb(step)
            if inspect.isawaitable(out):
                asyncio.ensure_future(out)

    # -- consuming -------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[Step], Any]) -> Callable[[], None]:
        """Call `callback(step)` on every step; returns the unsubscribe function."""
        self._callbacks.append(callback)
        return lambda: self._callbacks.remove(callback)

    async def __aiter__(self) -> AsyncIterator[Step]:
        q: asyncio.Queue[Step] = asyncio.Queue()
        self._queues.append(q)
        try:
            yield Step(self.status, self.rows)
            while True:
                step = await q.get()
                if step.status == "closed":
                    return
                yield step
        finally:
            self._queues.remove(q)


def _source_table(surql: str) -> str:
    words = surql.replace(";", " ").split()
    for i, w in enumerate(words[:-1]):
        if w.upper() == "FROM":
            return words[i + 1].split(",")[0]
    return ""
