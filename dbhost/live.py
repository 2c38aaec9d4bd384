"""LIVE queries served by the host, fed by tailing table changefeeds.

The embedded engine has no live queries, so the host keeps them: `live`/`kill` RPC methods
and `LIVE SELECT`/`KILL` statements register and drop subscriptions here; one feed per
(namespace, database, table), all of a database's feeds served by one paged
`SHOW CHANGES FOR DATABASE SINCE <versionstamp>` read, and each change is
checked in the SUBSCRIBER's own engine session against the table's select permission (for
record users) and the LIVE WHERE clause, using the row as it was after the change (or before
it, for a DELETE). So a record user never receives a row its permissions hide.

The feed is read right after any write that passes through the host (`wake`) and otherwise
every poll interval, for writes from elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from surrealdb.data.types.table import Table

from dbclient.cbor import encode, materialize
from dbclient.feed import ENGINE_PAGE_MAX, SweepWindow, split_by_table
from dbclient.tasks import stop_loops
from dbhost.engine import Engine, EngineError, StatementError, quote_ident
from dbhost.frames import INVALID_PARAMS, LIVE_ERROR, RpcError
from dbhost.liveql import (
    LiveSpec,
    LiveSyntaxError,
    as_uuid,
    mentions_live,
    parse_kill,
    parse_live,
    split_statements,
    statement_kind,
)
from dbhost.patches import PatchError, apply_patch, make_diff


class RpcConnection(Protocol):
    """A client connection as the live hub sees it (`dbhost.connection.RpcConnection`)."""

    conn_id: str

    async def push(self, frame: bytes) -> None:
        """Send an id-less notification frame (dropped when the connection is going away)."""

log = logging.getLogger("dbhost.live")

FEED_BATCH = ENGINE_PAGE_MAX  # the engine scans at most this many feed entries per read
# A transaction whose versionstamp is older than one already read but which became visible
# later, up to this much later, is not lost.
OVERLAP_VS = 50 << 16
# Each read re-reads only SHORT_VS of the feed's recent past; at most every SWEEP_SECS a read
# starts at the feed's sweep mark minus OVERLAP_VS instead (`TableFeed.mark`; the rule is
# `dbclient.feed.SweepWindow`). Re-reading the whole overlap on every read cost ~14 KB a read,
# ~80 reads a second at 500 writes/s (issue 31). Each set a read returns costs the engine ~20 us
# and this loop ~10 us to decode (the reply holds every table's sets): with 10 ms short reads
# ~70 times a second and a sweep every 0.1 s each set was read ~3.2 times, now ~2.4. Most late
# commits are at most 2 ms late (`late_by_ms`); a later one waits for the next sweep.
SHORT_VS = 3 << 16
SWEEP_SECS = 0.25
LATE_BUCKETS_MS = (2, 5, 10, 20, 50, 1 << 40)
EVAL_CHUNK = 200
DEFAULT_CHANGEFEED = "1h"


def now_versionstamp() -> int:
    """The engine's versionstamp for the current instant: (unix ms << 16) | counter."""
    return (time.time_ns() // 1_000_000) << 16


@dataclass
class Change:
    """One row change read from a changefeed."""

    vs: int
    action: str  # CREATE, UPDATE, DELETE
    record: Any
    after: Any  # row after the change (None for DELETE)
    reverse_patch: list[dict[str, Any]] | None = None  # turns `after` back into the row before
    original: Any = None  # the row before a DELETE

    def before(self) -> Any:
        """The row before the change, when the feed lets us rebuild it."""
        if self.action == "DELETE":
            return self.original
        if self.action == "CREATE" or self.reverse_patch is None:
            return None
        try:
            return apply_patch(self.after, self.reverse_patch)
        except PatchError as exc:
            log.warning("could not rebuild the row before %s: %s", self.record, exc)
            return None


@dataclass
class LiveQuery:
    """One subscription."""

    id: uuid.UUID
    conn: RpcConnection
    session: str  # engine session its changes are checked in
    client_session: Any
    ns: str
    db: str
    spec: LiveSpec
    variables: dict[str, Any]
    record_user: bool  # table permissions apply to it
    start_vs: int

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.ns, self.db, self.spec.table)


@dataclass
class TableFeed:
    """The changefeed reader of one table and the live queries it serves."""

    ns: str
    db: str
    table: str
    next_vs: int  # first versionstamp not yet read
    floor_vs: int  # never read below this (the feed's creation)
    seen: dict[int, None] = field(default_factory=dict)
    # `next_vs` when the last sweep began (None: not swept yet) and when that was. Why a
    # sweep from `mark - OVERLAP_VS` loses nothing: `dbclient.feed.SweepWindow` (here the
    # sweep reads on to the end of the feed, so one sweep covers what it must).
    mark: int | None = None
    swept_at: float = float("-inf")
    read_from: int = 0  # `next_vs` when the last read began
    queries: dict[uuid.UUID, LiveQuery] = field(default_factory=dict)


def parse_changes(batches: list[dict[str, Any]]) -> list[Change]:
    """Turn `SHOW CHANGES` output into row changes, in commit order."""
    out: list[Change] = []
    for batch in batches:
        vs = int(batch.get("versionstamp", 0))
        for entry in batch.get("changes", []):
            if "delete" in entry:
                d = entry["delete"] or {}
                original = d.get("original")
                rid = d.get("id")
                if original is None:
                    original = {"id": rid}
                out.append(Change(vs, "DELETE", rid, None, original=original))
            elif "current" in entry:
                row = entry["current"]
                patch = entry.get("update")
                out.append(Change(vs, "UPDATE", _rid(row), row,
                                  reverse_patch=patch if isinstance(patch, list) else None))
            elif "update" in entry:
                row = entry["update"]
                out.append(Change(vs, "CREATE", _rid(row), row))
            # define_table and other schema entries carry no row
    return out


def loses_original(batches: list[dict[str, Any]]) -> bool:
    """Whether the feed shows the table redefined without INCLUDE ORIGINAL (someone ran
    DEFINE TABLE OVERWRITE); then updates look like creates and deletes lose their row."""
    for batch in batches:
        for entry in batch.get("changes", []):
            d = entry.get("define_table")
            if isinstance(d, dict):
                cf = d.get("changefeed")
                if not isinstance(cf, dict) or not cf.get("original"):
                    return True
    return False


def _rid(row: Any) -> Any:
    return row.get("id") if isinstance(row, dict) else None


def _stmt_result(result: Any, status: str = "OK") -> dict[str, Any]:
    return {"status": status, "result": result, "time": "0ns", "type": None}


class LiveHub:
    """All live queries of the host and the loop that feeds them."""

    def __init__(self, engine: Engine, poll_interval: float, root_user: str,
                 root_password: str) -> None:
        self.engine = engine
        self.poll_interval = poll_interval
        self.window = SweepWindow(OVERLAP_VS, SHORT_VS, SWEEP_SECS)  # the feeds' re-reads
        self._root = {"user": root_user, "pass": root_password}
        self.queries: dict[uuid.UUID, LiveQuery] = {}
        self.feeds: dict[tuple[str, str, str], TableFeed] = {}
        self._tail_sessions: dict[tuple[str, str], str] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._setup_lock = asyncio.Lock()
        self.notifications_sent = 0
        self.evaluation_errors = 0
        # feed changes built into rows for delivery: only followed tables' new sets
        self.changes_built = 0
        # sets delivered although a later commit had been read already (late commits)
        self.late_sets = 0
        # ... by how far (ms) below the newest commit read they were: what SHORT_VS misses
        self.late_by_ms: dict[int, int] = dict.fromkeys(LATE_BUCKETS_MS, 0)

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the feed loop."""
        self._task = asyncio.create_task(self._run(), name="live-feeds")

    async def stop(self) -> None:
        """Stop the feed loop and forget every subscription."""
        if self._task is not None:
            # the loop's wake wait (wait_for) may lose a cancel (dbclient.tasks)
            await stop_loops(self._task)
        self.queries.clear()
        self.feeds.clear()
        for sid in self._tail_sessions.values():
            await self.engine.detach(sid)
        self._tail_sessions.clear()

    def wake(self) -> None:
        """A write passed through the host: read the feeds now instead of at the next poll."""
        if self.feeds:
            self._wake.set()

    def late_report(self) -> dict[str, int]:
        """Late sets by how far below the newest commit read they were (`late_by_ms`)."""
        top = LATE_BUCKETS_MS[-2]
        return {(f"<={b}ms" if b <= top else f">{top}ms"): n for b, n in self.late_by_ms.items()}

    def count(self) -> int:
        """How many live queries are registered."""
        return len(self.queries)

    # -- RPC entry points -----------------------------------------------------------------

    def query_needs_host(self, text: str | None) -> bool:
        """Whether a `query` request's text holds LIVE or KILL statements the host must
        answer (``Request.query_text()``)."""
        return text is not None and mentions_live(text)

    async def rpc_live(self, conn: RpcConnection, sid: str, params: Any,
                       client_session: Any = None) -> uuid.UUID:
        """The `live` method: params [table, diff?]."""
        if not isinstance(params, list) or not params:
            raise RpcError(INVALID_PARAMS, "live expects [table, diff?]")
        target = params[0]
        if isinstance(target, Table):
            table = target.table_name
        elif isinstance(target, str) and target:
            table = target
        else:
            raise RpcError(INVALID_PARAMS, "live expects a table name")
        diff = bool(params[1]) if len(params) > 1 else False
        return await self.subscribe(conn, sid, LiveSpec(table, diff, "*", None), {},
                                    client_session)

    async def rpc_kill(self, conn: RpcConnection, params: Any) -> None:
        """The `kill` method: params [uuid]."""
        if not isinstance(params, list) or len(params) != 1:
            raise RpcError(INVALID_PARAMS, "kill expects [uuid]")
        try:
            qid = as_uuid(params[0])
        except LiveSyntaxError as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from None
        self.kill(conn, qid)

    async def run_query(self, conn: RpcConnection, sid: str, params: list[Any],
                        client_session: Any = None) -> list[dict[str, Any]]:
        """A `query` holding LIVE/KILL statements: those run here, runs of other statements go
        to the engine in order, and the results come back as one list."""
        text = params[0]
        variables = params[1] if len(params) > 1 and isinstance(params[1], dict) else {}
        results: list[dict[str, Any]] = []
        pending: list[str] = []

        async def flush() -> None:
            if not pending:
                return
            reply = await self.engine.call_raw("query", ["; ".join(pending), variables], sid)
            pending.clear()
            self.wake()
            err = reply.get("error")
            if err is not None:
                raise RpcError(int(err.get("code", -32000)), str(err.get("message", err)))
            results.extend(reply.get("result") or [])

        for stmt in split_statements(text):
            kind = statement_kind(stmt)
            if kind is None:
                pending.append(stmt)
                continue
            await flush()
            try:
                if kind == "live":
                    spec = parse_live(stmt, variables)
                    qid = await self.subscribe(conn, sid, spec, variables, client_session)
                    results.append(_stmt_result(qid))
                else:
                    self.kill(conn, parse_kill(stmt, variables))
                    results.append(_stmt_result(None))
            except (LiveSyntaxError, RpcError) as exc:
                results.append(_stmt_result(str(exc) if isinstance(exc, LiveSyntaxError)
                                            else exc.message, "ERR"))
        await flush()
        return results

    # -- subscriptions --------------------------------------------------------------------

    async def subscribe(self, conn: RpcConnection, sid: str, spec: LiveSpec,
                        variables: dict[str, Any], client_session: Any = None) -> uuid.UUID:
        """Register a live query checked in session `sid`; returns its id."""
        try:
            who = (await self.engine.query(
                "RETURN [$session.ns, $session.db, $session.rd]", session=sid))[0]
        except EngineError as exc:
            raise RpcError(LIVE_ERROR, exc.message) from None
        ns, db, rd = who
        if not ns or not db:
            raise RpcError(LIVE_ERROR, "Specify a namespace and a database to use")
        if spec.diff and spec.fields != "*":
            raise RpcError(LIVE_ERROR, "LIVE SELECT DIFF takes no field list")
        await self._ensure_changefeed(ns, db, spec.table)
        # Let the engine judge the projection and the condition, in the subscriber's session.
        where = f" WHERE {spec.where}" if spec.where else ""
        try:
            await self.engine.query(
                f"SELECT {spec.fields} FROM {quote_ident(spec.table)}{where} LIMIT 0",
                variables, session=sid)
        except EngineError as exc:
            raise RpcError(LIVE_ERROR, exc.message) from None
        qid = uuid.uuid4()
        lq = LiveQuery(qid, conn, sid, client_session, ns, db, spec, dict(variables),
                       record_user=rd is not None, start_vs=now_versionstamp())
        feed = self.feeds.get(lq.key)
        if feed is None:
            feed = TableFeed(ns, db, spec.table, next_vs=lq.start_vs, floor_vs=lq.start_vs)
            self.feeds[lq.key] = feed
        feed.queries[qid] = lq
        self.queries[qid] = lq
        log.info("live query %s on %s/%s/%s (connection %s)", qid, ns, db, spec.table,
                 conn.conn_id)
        return qid

    def kill(self, conn: RpcConnection, qid: uuid.UUID) -> None:
        """Drop one of the connection's live queries."""
        lq = self.queries.get(qid)
        if lq is None or lq.conn is not conn:
            raise RpcError(LIVE_ERROR, f"Can not execute KILL statement using id '{qid}'")
        self._drop(lq)

    def _drop(self, lq: LiveQuery) -> None:
        self.queries.pop(lq.id, None)
        feed = self.feeds.get(lq.key)
        if feed is not None:
            feed.queries.pop(lq.id, None)
            if not feed.queries:
                del self.feeds[lq.key]

    async def kill_connection(self, conn: RpcConnection) -> None:
        """Drop every live query of a closing connection."""
        for lq in [q for q in self.queries.values() if q.conn is conn]:
            self._drop(lq)

    async def kill_session(self, conn: RpcConnection, sid: str) -> None:
        """Drop the live queries checked in a session that is being detached."""
        for lq in [q for q in self.queries.values() if q.conn is conn and q.session == sid]:
            self._drop(lq)

    # -- the owner's side -----------------------------------------------------------------

    async def _tail_session(self, ns: str, db: str) -> str:
        sid = self._tail_sessions.get((ns, db))
        if sid is None:
            sid = await self.engine.attach()
            await self.engine.call("signin", [dict(self._root)], sid)
            await self.engine.call("use", [ns, db], sid)
            self._tail_sessions[(ns, db)] = sid
        return sid

    async def _ensure_changefeed(self, ns: str, db: str, table: str) -> None:
        """Give the table a changefeed that includes the original row, keeping the rest of
        its definition (fields, permissions, schema mode, events): ALTER TABLE changes only
        the changefeed clause."""
        async with self._setup_lock:
            try:
                sid = await self._tail_session(ns, db)
                info = (await self.engine.query("INFO FOR DB", session=sid))[0]
                definition = (info.get("tables") or {}).get(table)
                name = quote_ident(table)
                if definition is None:
                    await self.engine.query(
                        f"DEFINE TABLE IF NOT EXISTS {name} "
                        f"CHANGEFEED {DEFAULT_CHANGEFEED} INCLUDE ORIGINAL", session=sid)
                elif "INCLUDE ORIGINAL" not in definition:
                    m = re.search(r"CHANGEFEED (\S+)", definition)
                    keep = m.group(1) if m else DEFAULT_CHANGEFEED
                    await self.engine.query(
                        f"ALTER TABLE {name} CHANGEFEED {keep} INCLUDE ORIGINAL", session=sid)
                    log.info("enabled the changefeed of %s/%s/%s", ns, db, table)
            except EngineError as exc:
                self._tail_sessions.pop((ns, db), None)
                raise RpcError(LIVE_ERROR, f"cannot follow table {table}: {exc.message}") \
                    from None

    # -- the feed loop --------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.poll_interval)
            except TimeoutError:
                pass
            self._wake.clear()
            groups: dict[tuple[str, str], list[TableFeed]] = {}
            for feed in self.feeds.values():
                groups.setdefault((feed.ns, feed.db), []).append(feed)
            if not groups:
                continue
            jobs = [self._read_group(key, feeds) for key, feeds in groups.items()]
            for res in await asyncio.gather(*jobs, return_exceptions=True):
                if isinstance(res, BaseException) and not isinstance(res, asyncio.CancelledError):
                    log.error("reading changefeeds failed: %r", res)

    async def _read_group(self, key: tuple[str, str], feeds: list[TableFeed]) -> None:
        """Read one database's feed (`SHOW CHANGES FOR DATABASE`) for all its followed tables.

        Not table by table: the engine's LIMIT counts every table's entries (one per table per
        transaction, at most 1000 a read) and drops other tables' afterwards, so a table read
        can come back empty while the table's changes wait behind other tables' entries, and
        only the database read tells where a page ended. A page that may end inside a
        transaction is read on from that versionstamp (SINCE is inclusive)."""
        sid = await self._tail_session(*key)
        by_table = {f.table: f for f in feeds}
        window = self.window
        began = time.monotonic()
        sweeps: dict[str, int] = {}  # table -> `next_vs` when its sweep began
        starts: dict[str, int] = {}
        for f in feeds:
            due = (window.sparse(f.next_vs, f.read_from)
                   or began - f.swept_at >= window.sweep_secs)
            start, sweeping = window.start(f.next_vs, f.mark, due)
            if sweeping:
                sweeps[f.table] = f.next_vs
            starts[f.table] = max(f.floor_vs, start)
            f.read_from = f.next_vs
        since = min(starts.values())
        pages = 0
        first_page: int | None = None  # the last versionstamp of the first page
        while True:
            # Decoded in C only: the database's feed holds every table's rows (the
            # application's writes above all), a subscriber follows a few tables.
            reply = await self.engine.call_shallow(
                "query", [f"SHOW CHANGES FOR DATABASE SINCE {since} LIMIT {FEED_BATCH}", {}],
                sid)
            err = reply.get("error")
            if err is not None:
                self._tail_sessions.pop(key, None)
                err = materialize(err)
                raise EngineError(int(err.get("code", -32000)), str(err.get("message", err)))
            stmt = (reply.get("result") or [{}])[0]
            if stmt.get("status") != "OK":
                raise StatementError(-32000, str(materialize(stmt.get("result"))))
            entries = 0
            last: int | None = None
            found: dict[str, list[dict[str, Any]]] = {}
            pages += 1
            for batch in stmt.get("result") or []:
                vs = int(batch.get("versionstamp", 0))
                last = vs
                groups = split_by_table(batch.get("changes") or [], shallow=True)
                entries += len(groups)
                for table, changes in groups.items():
                    feed = by_table.get(table)
                    # build rows only for a followed table's sets not delivered before
                    if feed is not None and vs >= starts[table] and vs not in feed.seen:
                        if vs < feed.next_vs:  # shown after a later commit was read
                            self.late_sets += 1
                            behind = (feed.next_vs - vs) >> 16
                            self.late_by_ms[next(b for b in LATE_BUCKETS_MS if behind <= b)] += 1
                        self.changes_built += len(changes)
                        found.setdefault(table, []).append(
                            {"versionstamp": vs, "changes": materialize(changes)})
            await asyncio.gather(*(self._absorb(by_table[t], b) for t, b in found.items()))
            if pages == 1:
                first_page = last
            if last is None or entries < FEED_BATCH:
                if last is not None:
                    for f in feeds:  # read up to `last`, quiet tables included
                        f.next_vs = max(f.next_vs, last)
                for table, at in sweeps.items():  # only once the sweep read to the end
                    feed = by_table[table]
                    feed.mark, feed.swept_at = window.new_mark(at, first_page), began
                    self._trim_seen(feed)
                return
            if last == since:
                log.error("a transaction at versionstamp %d holds %d or more changefeed "
                          "entries; live queries miss the ones past the first %d", since,
                          entries, FEED_BATCH)
                since += 1
            else:
                since = last

    async def _absorb(self, feed: TableFeed, batches: list[dict[str, Any]]) -> None:
        """Deliver the sets of one table not delivered before."""
        fresh = [b for b in batches if int(b.get("versionstamp", 0)) not in feed.seen]
        for b in fresh:
            vs = int(b.get("versionstamp", 0))
            feed.seen[vs] = None
            feed.next_vs = max(feed.next_vs, vs + 1)
        self._trim_seen(feed)
        if loses_original(fresh):
            log.warning("table %s/%s/%s was redefined without INCLUDE ORIGINAL; "
                        "restoring it", feed.ns, feed.db, feed.table)
            await self._ensure_changefeed(feed.ns, feed.db, feed.table)
        changes = parse_changes(fresh)
        if changes:
            await self._deliver(feed, changes)

    def _trim_seen(self, feed: TableFeed) -> None:
        """Forget versionstamps that no later read (short or sweep) reaches back to."""
        low = self.window.low(feed.next_vs, feed.mark)
        for vs in [v for v in feed.seen if v < low]:
            del feed.seen[vs]

    async def _deliver(self, feed: TableFeed, changes: list[Change]) -> None:
        queries = list(feed.queries.values())
        # Read the select permission once per round, and only when a record user listens:
        # it is evaluated as it stands now, like SurrealDB does for its own live queries.
        perm: bool | str = True
        if any(q.record_user for q in queries):
            perm = await self._select_permission(feed.ns, feed.db, feed.table)
        await asyncio.gather(*(self._deliver_one(lq, changes, perm) for lq in queries))

    async def _deliver_one(self, lq: LiveQuery, changes: list[Change], perm: bool | str) -> None:
        mine = [c for c in changes if c.vs >= lq.start_vs]
        for i in range(0, len(mine), EVAL_CHUNK):
            chunk = mine[i:i + EVAL_CHUNK]
            try:
                passed = await self._evaluate(lq, chunk, perm)
            except EngineError as exc:
                if lq.id in self.queries:
                    self.evaluation_errors += 1
                    log.warning("live query %s: checking changes failed: %s", lq.id,
                                exc.message)
                return
            for change, row in zip(chunk, passed):
                if row is None or lq.id not in self.queries:
                    continue
                frame = encode({"result": {
                    "id": lq.id,
                    "action": change.action,
                    "record": change.record,
                    "result": self._payload(lq, change, row),
                }})
                await lq.conn.push(frame)
                self.notifications_sent += 1

    def _payload(self, lq: LiveQuery, change: Change, row: Any) -> Any:
        if not lq.spec.diff:
            return row
        if change.action == "CREATE":
            return [{"op": "replace", "path": "/", "value": change.after}]
        if change.action == "DELETE":
            return [{"op": "remove", "path": "/"}]
        before = change.before()
        if before is None:
            return [{"op": "replace", "path": "/", "value": change.after}]
        return make_diff(before, change.after)

    async def _evaluate(self, lq: LiveQuery, changes: list[Change],
                        perm: bool | str) -> list[Any]:
        """For each change, the projected row if the subscriber may see it, else None."""
        conds: list[str] = []
        if lq.record_user:
            if perm is False:
                return [None] * len(changes)
            if isinstance(perm, str):
                conds.append(f"({perm})")
        if lq.spec.where:
            conds.append(f"({lq.spec.where})")
        if not conds and (lq.spec.diff or lq.spec.fields.strip() == "*"):
            # Nothing to judge and nothing to project: the row is the answer, no engine call.
            return [c.after if c.action != "DELETE" else c.original for c in changes]
        where = f" WHERE {' AND '.join(conds)}" if conds else ""
        fields = "id" if lq.spec.diff else lq.spec.fields
        variables = dict(lq.variables)
        stmts = []
        for i, change in enumerate(changes):
            name = f"__live_doc_{i}"
            variables[name] = change.after if change.action != "DELETE" else change.original
            stmts.append(f"SELECT {fields} FROM [${name}]{where}")
        reply = await self.engine.call_raw("query", ["; ".join(stmts), variables], lq.session)
        err = reply.get("error")
        if err is not None:
            raise EngineError(int(err.get("code", -32000)), str(err.get("message", err)))
        out: list[Any] = []
        for stmt in reply.get("result") or []:
            if stmt.get("status") != "OK":
                self.evaluation_errors += 1
                log.warning("live query %s: a change was skipped: %s", lq.id,
                            stmt.get("result"))
                out.append(None)
                continue
            rows = stmt.get("result") or []
            out.append(rows[0] if rows else None)
        return out

    async def _select_permission(self, ns: str, db: str, table: str) -> bool | str:
        """The table's select permission now: True (FULL), False (NONE) or an expression."""
        sid = await self._tail_session(ns, db)
        info = (await self.engine.query("INFO FOR DB STRUCTURE", session=sid))[0]
        for t in info.get("tables") or []:
            if t.get("name") == table:
                perm = (t.get("permissions") or {}).get("select", False)
                if isinstance(perm, str):
                    return perm
                return bool(perm)
        return False
