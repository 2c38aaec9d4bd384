"""The one database client every component uses (SSP, scheduler, CLI).

Built on the official SDK's WebSocket connection (`surrealdb.AsyncWsSurrealConnection`), so it
talks to our embedded host and to a real SurrealDB server alike. One socket per `Database`
carries every call; concurrent calls are multiplexed by request id.

Failure policy:
- every call is bounded by `DbConfig.timeout_secs` and raises `DbTimeout`; consecutive timeouts
  are counted in `consecutive_timeouts` (reset by the first successful call) for `/health`;
- a dead connection is replaced on the next call (signin + use re-applied) with capped,
  jittered exponential backoff between attempts, so a down database is not hammered; one
  attempt (socket, sign-in, use) is given at least `CONNECT_FLOOR_SECS` however short the
  call's timeout: SurrealDB checks a password with argon2 at every sign-in (a CPU-bound
  step of the server's, longer on a loaded machine), and an attempt abandoned half way
  still costs the server that work, so a per-call timeout below it never connects;
- a call that fails because the connection died is retried once only when it is a read:
  `keyset_pages`, `tables`, `table_info`, `table_definitions`, `changes`, and `query(...,
  idempotent=True)`. Writes and `transaction` are never retried: the request may have
  committed before the socket died, and the caller must decide (`DbConnectionError`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Self, TypeVar
from uuid import UUID

from surrealdb import AsyncWsSurrealConnection, ServerError, SurrealError
from websockets.exceptions import WebSocketException

from dbclient.config import LANE_VARIABLE, DbConfig
from dbclient.errors import DbAuthError, DbConnectionError, DbError, DbQueryError, DbTimeout
from dbclient.sql import (
    build_transaction,
    check_params,
    require_identifier,
    require_int,
    show_changes_sql,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

#: the least time one connection attempt (socket, sign-in, use) is given (module docstring)
CONNECT_FLOOR_SECS = 5.0

# Engine messages that only echo an earlier failure inside the same transaction.
_KNOCK_ON_ERRORS = (
    "The query was not executed due to a failed transaction",
    "The query was not executed due to a cancelled transaction",
    "Cannot COMMIT",
)

LiveSink = Callable[[dict[str, Any]], Any] | asyncio.Queue


class _ConnectionLost(Exception):
    """Internal: the socket died under a call (mapped to DbConnectionError or a retry)."""


class Database:
    """An async SurrealDB client with timeouts, reconnects and typed errors.

    Use `async with Database(cfg) as db:` or `await db.connect()` / `await db.close()`.
    """

    def __init__(
        self,
        config: DbConfig,
        *,
        backoff_base_secs: float = 0.05,
        backoff_cap_secs: float = 5.0,
    ) -> None:
        self.config = config
        self.consecutive_timeouts = 0
        self.reconnects = 0  # successful re-connections after the first one
        self._backoff_base = backoff_base_secs
        self._backoff_cap = backoff_cap_secs
        self._conn: AsyncWsSurrealConnection | None = None
        self._connect_lock = asyncio.Lock()
        self._failed_attempts = 0
        self._next_attempt_at = 0.0
        self._ever_connected = False
        self._closed = False
        self._lives: set[LiveSubscription] = set()

    def __repr__(self) -> str:
        c = self.config
        return (f"Database(url={c.ws_url!r}, ns={c.namespace!r}, db={c.database!r}, "
                f"user={c.user!r}, connected={self.connected})")

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def connected(self) -> bool:
        """True while a live socket is held (it may still die at the next call)."""
        conn = self._conn
        return conn is not None and _alive(conn)

    # ------------------------------------------------------------------ connection

    async def connect(self) -> None:
        """Open the socket, sign in as the configured user and `use` ns/db.

        Retries with backoff until the per-call timeout; raises DbAuthError at once when the
        credentials or namespace are refused, DbConnectionError when nothing answers.
        """
        self._closed = False
        await self._ensure_connection(time.monotonic() + self.config.timeout_secs)

    async def close(self) -> None:
        """Stop live subscriptions and close the socket. The object can `connect()` again."""
        self._closed = True
        for sub in list(self._lives):
            sub._stop_pump()
        self._lives.clear()
        conn, self._conn = self._conn, None
        if conn is not None:
            await _close_quietly(conn)

    async def _ensure_connection(self, deadline: float) -> AsyncWsSurrealConnection:
        conn = self._conn
        if conn is not None and _alive(conn):
            return conn
        # Only one caller reconnects; the others wait for it, but never past their own deadline.
        try:
            await asyncio.wait_for(self._connect_lock.acquire(),
                                   max(0.001, deadline - time.monotonic()))
        except TimeoutError:
            raise DbConnectionError(
                f"cannot reach the database at {self.config.ws_url} (reconnect in progress)"
            ) from None
        try:
            return await self._reconnect_locked(deadline)
        finally:
            self._connect_lock.release()

    async def _reconnect_locked(self, deadline: float) -> AsyncWsSurrealConnection:
        conn = self._conn
        if conn is not None and _alive(conn):
            return conn
        if conn is not None:
            self._conn = None
            await _close_quietly(conn)
        while True:
            if self._closed:
                raise DbConnectionError("database client is closed")
            wait = self._next_attempt_at - time.monotonic()
            if wait > 0:
                if time.monotonic() + wait > deadline:
                    raise DbConnectionError(
                        f"cannot reach the database at {self.config.ws_url} "
                        f"({self._failed_attempts} failed attempts, backing off)")
                await asyncio.sleep(wait)
            try:
                conn = await self._open(max(deadline, time.monotonic() + CONNECT_FLOOR_SECS))
            except DbAuthError:
                # Refused credentials are not retried within a call, but the next call waits
                # out the backoff too, so a wrong password does not hammer the server.
                self._note_failed_attempt()
                raise
            except DbConnectionError as e:
                self._note_failed_attempt()
                if time.monotonic() >= deadline:
                    raise DbConnectionError(
                        f"cannot reach the database at {self.config.ws_url}: {e}") from None
                continue
            self._failed_attempts = 0
            self._next_attempt_at = 0.0
            if self._ever_connected:
                self.reconnects += 1
                log.info("database connection re-established (%s)", self.config.ws_url)
            self._ever_connected = True
            self._conn = conn
            for sub in list(self._lives):
                await sub._resubscribe(conn)
            return conn

    def _note_failed_attempt(self) -> None:
        self._failed_attempts += 1
        delay = min(self._backoff_cap,
                    self._backoff_base * (2 ** min(self._failed_attempts - 1, 16)))
        # Jittered ("equal jitter"): clients that lost the server together do not retry in
        # lockstep, and each still waits at least half the exponential delay.
        self._next_attempt_at = time.monotonic() + random.uniform(delay / 2, delay)

    async def _open(self, deadline: float) -> AsyncWsSurrealConnection:
        """One connection attempt: socket, signin, use. Closes the socket on any failure."""
        cfg = self.config
        conn = AsyncWsSurrealConnection(cfg.ws_url)
        remaining = max(0.05, deadline - time.monotonic())
        try:
            await asyncio.wait_for(conn.connect(), remaining)
        except (TimeoutError, OSError, WebSocketException, SurrealError) as e:
            await _close_quietly(conn)
            raise DbConnectionError(f"connect to {cfg.ws_url} failed: {_describe(e)}") from None
        try:
            remaining = max(0.05, deadline - time.monotonic())
            await asyncio.wait_for(
                conn.signin({"username": cfg.user, "password": cfg.password}), remaining)
            remaining = max(0.05, deadline - time.monotonic())
            await asyncio.wait_for(conn.use(cfg.namespace, cfg.database), remaining)
            if cfg.lane is not None:
                remaining = max(0.05, deadline - time.monotonic())
                await asyncio.wait_for(conn.let(LANE_VARIABLE, cfg.lane), remaining)
        except ServerError as e:
            await _close_quietly(conn)
            # The engine's message names the reason; it never contains the password.
            raise DbAuthError(
                f"sign-in as {cfg.user!r} to {cfg.namespace}/{cfg.database} refused: {e}"
            ) from None
        except (TimeoutError, OSError, WebSocketException, asyncio.CancelledError, SurrealError) as e:
            await _close_quietly(conn)
            if isinstance(e, asyncio.CancelledError) and _being_cancelled():
                raise
            raise DbConnectionError(f"sign-in to {cfg.ws_url} failed: {_describe(e)}") from None
        return conn

    async def _drop(self, conn: AsyncWsSurrealConnection) -> None:
        """Forget a connection that died so the next call opens a fresh one."""
        if self._conn is conn:
            self._conn = None
        await _close_quietly(conn)

    # ------------------------------------------------------------------ call plumbing

    async def _call(
        self,
        what: str,
        op: Callable[[AsyncWsSurrealConnection], Awaitable[T]],
        *,
        retry_on_drop: bool,
    ) -> T:
        """Run `op` on a live connection under the per-call timeout.

        Waiting for another caller's reconnect or for the backoff counts against the
        timeout; a connection attempt of this call's own is given at least
        `CONNECT_FLOOR_SECS`, and the call then gets `timeout_secs` of its own.
        """
        attempts = 2 if retry_on_drop else 1
        for attempt in range(attempts):
            conn = await self._ensure_connection(time.monotonic() + self.config.timeout_secs)
            # the call's own time starts once it has a connection (opening one may take
            # longer than the timeout: CONNECT_FLOOR_SECS)
            deadline = time.monotonic() + self.config.timeout_secs
            try:
                result = await asyncio.wait_for(
                    _guard(conn, op(conn)), max(0.001, deadline - time.monotonic()))
            except TimeoutError:
                self.consecutive_timeouts += 1
                log.warning("database call %s timed out (%d in a row)", what,
                            self.consecutive_timeouts)
                raise DbTimeout(what, self.config.timeout_secs) from None
            except SurrealError as e:
                raise DbQueryError(_describe(e)) from None
            except _ConnectionLost as e:
                await self._drop(conn)
                if attempt + 1 < attempts:
                    log.info("connection lost during %s; retrying once (read)", what)
                    continue
                raise DbConnectionError(
                    f"connection to the database lost during {what}: {e}") from None
            self.consecutive_timeouts = 0
            return result
        raise AssertionError("unreachable")

    async def _query_raw(self, conn: AsyncWsSurrealConnection, sql: str,
                         vars_: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        response = await conn.query_raw(sql, dict(vars_ or {}))
        error = response.get("error")
        if error is not None:
            if isinstance(error, dict):
                raise DbQueryError(str(error.get("message", error)), None, error.get("kind"))
            raise DbQueryError(str(error))
        result = response.get("result")
        if not isinstance(result, list):
            raise DbQueryError(f"unexpected query response: {type(result).__name__}")
        return result

    # ------------------------------------------------------------------ queries

    async def query(self, sql: str, vars: Mapping[str, Any] | None = None, *,
                    idempotent: bool = False) -> list[Any]:
        """Run one or more statements; return each statement's result, in order.

        Raises DbQueryError (with the failing statement's index and the engine's message) when
        any statement has status ERR. Pass `idempotent=True` for reads so a call cut off by a
        dropped connection is retried once on a fresh one. Parameter values the engine cannot
        take (sets, ints beyond 64 bits, arbitrary objects) raise ValueError before sending.
        """
        check_params(vars or {})
        async def op(conn: AsyncWsSurrealConnection) -> list[Any]:
            statements = await self._query_raw(conn, sql, vars)
            out: list[Any] = []
            for i, st in enumerate(statements):
                if st.get("status") != "OK":
                    raise DbQueryError(str(st.get("result")), i)
                out.append(st.get("result"))
            return out

        return await self._call("query", op, retry_on_drop=idempotent)

    async def server_version(self) -> str:
        """The database's own version text (RPC ``version``, e.g. ``surrealdb-3.2.4``)."""
        async def op(conn: AsyncWsSurrealConnection) -> str:
            return str(await conn.version())

        return await self._call("version", op, retry_on_drop=True)

    async def query_one(self, sql: str, vars: Mapping[str, Any] | None = None, *,
                        idempotent: bool = False) -> Any:
        """Like `query` but return only the last statement's result (None for no statements)."""
        results = await self.query(sql, vars, idempotent=idempotent)
        return results[-1] if results else None

    async def transaction(
        self, statements: Sequence[tuple[str, Mapping[str, Any] | None]]
    ) -> list[Any]:
        """Run statements atomically in ONE request (`BEGIN; ...; COMMIT;`).

        Each entry is (one statement, its parameters); parameters are renamed per statement
        (`$name` -> `$p<i>_name`) so they never collide. Returns each statement's result. If
        any statement fails, nothing is applied and DbQueryError names that statement's index
        and the engine's message. Never retried (see module docstring).
        """
        sql, merged = build_transaction(statements)
        check_params(merged)
        count = len(statements)

        async def op(conn: AsyncWsSurrealConnection) -> list[Any]:
            results = await self._query_raw(conn, sql, merged)
            # The engine answers BEGIN and COMMIT too: strip them by position.
            body = results[1:-1] if len(results) == count + 2 else results
            first_knock_on: tuple[int, str] | None = None
            for i, st in enumerate(body):
                if st.get("status") == "OK":
                    continue
                message = str(st.get("result"))
                if message.startswith(_KNOCK_ON_ERRORS):
                    first_knock_on = first_knock_on or (i, message)
                    continue
                raise DbQueryError(message, i)
            if first_knock_on is not None:
                raise DbQueryError(first_knock_on[1], first_knock_on[0])
            if len(results) == count + 2 and results[-1].get("status") != "OK":
                # COMMIT itself failed (e.g. a write conflict): no single statement is to blame.
                raise DbQueryError(f"COMMIT failed: {results[-1].get('result')}", None)
            return [st.get("result") for st in body]

        return await self._call("transaction", op, retry_on_drop=False)

    async def keyset_pages(self, table: str, page_size: int = 500
                           ) -> AsyncIterator[list[dict[str, Any]]]:
        """Yield the whole table in pages ordered by id, using keyset (never offset) paging.

        Each page is `ORDER BY id LIMIT n`, the next one `WHERE id > <last id of the previous
        page>`, so rows written during the scan never shift later pages. The table and the last
        id are bound parameters. A missing table raises DbQueryError.
        """
        require_identifier(table)
        require_int(page_size, "page_size", minimum=1)
        async for page in keyset_pages(self, table, page_size):
            yield page

    async def table_definitions(self) -> dict[str, str]:
        """Every table of the database with its `DEFINE TABLE` text (from `INFO FOR DB`)."""
        info = await self.query_one("INFO FOR DB", idempotent=True)
        tables = (info or {}).get("tables") or {}
        return {str(k): str(v) for k, v in tables.items()}

    async def tables(self) -> list[str]:
        """Names of every table in the database, sorted (meta `_00_` tables included)."""
        return sorted(await self.table_definitions())

    async def table_info(self, table: str) -> dict[str, Any]:
        """`INFO FOR TABLE <table>`: dicts of `fields`, `events`, `indexes`... name -> DEFINE text.

        The table name is validated as a plain identifier (INFO takes no parameters).
        """
        require_identifier(table)
        info = await self.query_one(f"INFO FOR TABLE {table}", idempotent=True)
        return dict(info or {})

    async def changes(self, table: str | None, since: int,
                      limit: int = 1000) -> list[dict[str, Any]]:
        """The changefeed of `table` (None: of the whole database) from versionstamp `since`
        (inclusive).

        Returns the engine's list of `{versionstamp, changes: [...]}`. The table and numbers are
        validated and formatted as literals (the engine takes no parameters here).

        `limit` is NOT a number of sets of `table`: the engine scans at most min(limit, 1000)
        entries of the database's feed (one per table per transaction, in versionstamp order)
        and drops other tables' entries afterwards, so a short or empty answer does not mean
        the feed ended. A database read merges one transaction's entries into one set, and a
        page may end inside a transaction. Page with :func:`dbclient.feed.read_round`.
        """
        sql = show_changes_sql(table, since, limit)
        return list(await self.query_one(sql, idempotent=True) or [])

    # ------------------------------------------------------------------ live

    async def live(self, table: str, sink: LiveSink) -> LiveSubscription:
        """Subscribe to LIVE changes of `table` (WebSocket only).

        Each notification `{action, id, result, record...}` is put on `sink` (an asyncio.Queue)
        or passed to `sink(...)` (a function or coroutine function). After a reconnect the
        subscription is re-issued and `{action: 'RECONNECTED'}` is delivered first, so a caller
        using it as a doorbell knows to re-read what it may have missed.
        """
        require_identifier(table)
        sub = LiveSubscription(self, table, sink)
        conn = await self._ensure_connection(time.monotonic() + self.config.timeout_secs)
        await sub._subscribe(conn)
        self._lives.add(sub)
        return sub


class LiveSubscription:
    """A LIVE subscription owned by a `Database`; survives reconnects until `kill()`."""

    def __init__(self, db: Database, table: str, sink: LiveSink) -> None:
        self.db = db
        self.table = table
        self.sink = sink
        self.live_id: UUID | None = None
        self._queue: asyncio.Queue[dict[str, Any]] | None = None
        self._pump: asyncio.Task[None] | None = None

    async def _subscribe(self, conn: AsyncWsSurrealConnection, *,
                         reconnected: bool = False) -> None:
        timeout = self.db.config.timeout_secs
        try:
            live_id = await asyncio.wait_for(_guard(conn, conn.live(self.table)), timeout)
        except TimeoutError:
            raise DbTimeout(f"live {self.table}", timeout) from None
        except _ConnectionLost as e:
            raise DbConnectionError(f"connection lost subscribing to {self.table}: {e}") from None
        except ServerError as e:
            raise DbQueryError(f"LIVE on {self.table} refused: {e}") from None
        # Read the SDK's per-live queues directly: its iterator drops the `action` field.
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        if reconnected:
            # Queued ahead of the new subscription's events and handed to the sink by the pump:
            # the sink never runs under the reconnect lock (a sink that queries this database
            # would otherwise wait on the reconnect that is waiting on it).
            queue.put_nowait({"action": "RECONNECTED", "table": self.table})
        conn.live_queues.setdefault(str(live_id), []).append(queue)
        self.live_id = live_id
        self._queue = queue
        self._stop_pump()
        self._pump = asyncio.create_task(self._run_pump(queue), name=f"live-{self.table}")

    async def _resubscribe(self, conn: AsyncWsSurrealConnection) -> None:
        try:
            await self._subscribe(conn, reconnected=True)
        except DbError as e:
            log.warning("re-subscribing LIVE on %s failed: %s", self.table, e)

    async def _run_pump(self, queue: asyncio.Queue[dict[str, Any]]) -> None:
        while True:
            item = await queue.get()
            try:
                await self._deliver(item)
            except Exception:  # a sink bug must not kill the subscription silently
                log.exception("LIVE sink for %s failed", self.table)

    async def _deliver(self, item: dict[str, Any]) -> None:
        sink = self.sink
        if isinstance(sink, asyncio.Queue):
            sink.put_nowait(item)
            return
        out = sink(item)
        if asyncio.iscoroutine(out):
            await out

    def _stop_pump(self) -> None:
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()
        self._pump = None

    async def kill(self) -> None:
        """End the subscription (best effort on the server: a dead socket has no live query)."""
        self._stop_pump()
        self.db._lives.discard(self)
        conn = self.db._conn
        live_id, self.live_id = self.live_id, None
        if conn is not None and live_id is not None and _alive(conn):
            try:
                await asyncio.wait_for(_guard(conn, conn.kill(live_id)),
                                       self.db.config.timeout_secs)
            except (TimeoutError, _ConnectionLost, SurrealError) as e:
                log.info("KILL of live query on %s failed: %s", self.table, _describe(e))


# ---------------------------------------------------------------------- helpers


def _alive(conn: AsyncWsSurrealConnection) -> bool:
    """The SDK's receive task ends when the socket closes; after that no call can succeed."""
    task = conn.recv_task
    return conn.socket is not None and task is not None and not task.done()


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def _guard(conn: AsyncWsSurrealConnection, aw: Awaitable[T]) -> T:
    """Await an SDK call on `conn`, turning "the socket died" into _ConnectionLost.

    When the socket closes, the SDK cancels the futures of pending requests (and then fails
    its own bookkeeping with a KeyError), which surfaces in the caller as CancelledError or
    KeyError. We tell a real cancellation of our own task apart (asyncio's `cancelling()`)
    and report anything raised while the socket is dead as a lost connection.
    """
    try:
        return await aw
    except asyncio.CancelledError:
        if _being_cancelled():
            raise
        raise _ConnectionLost("socket closed while waiting for the answer") from None
    except (OSError, WebSocketException) as e:
        raise _ConnectionLost(_describe(e)) from None
    except (DbError, ServerError):
        raise
    except Exception as e:
        if not _alive(conn):
            raise _ConnectionLost(_describe(e)) from None
        raise


async def _close_quietly(conn: AsyncWsSurrealConnection) -> None:
    try:
        await asyncio.wait_for(conn.close(), 2.0)
    except (TimeoutError, OSError, WebSocketException, SurrealError) as e:
        log.debug("closing database socket: %s", _describe(e))


def _describe(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


async def record_signin(cfg: DbConfig, access: str, variables: Mapping[str, Any],
                        timeout: float | None = None) -> Any:
    """Sign in as a record user through record access ``access`` on a connection of its own,
    and return that user's record id (``$auth.id``); the connection is closed.

    Raises DbAuthError when the database refuses the credentials (wrong password, unknown
    user, no such access) and DbConnectionError when it cannot be reached. The variables
    (a password among them) never appear in an error message.
    """
    deadline = time.monotonic() + (timeout or cfg.timeout_secs)
    conn = AsyncWsSurrealConnection(cfg.ws_url)

    def left() -> float:
        return max(0.05, deadline - time.monotonic())

    try:
        try:
            await asyncio.wait_for(conn.connect(), left())
        except (TimeoutError, OSError, WebSocketException, SurrealError) as e:
            raise DbConnectionError(f"connect to {cfg.ws_url} failed: {_describe(e)}") from None
        try:
            await asyncio.wait_for(conn.signin({
                "namespace": cfg.namespace, "database": cfg.database, "access": access,
                "variables": dict(variables)}), left())
        except ServerError:
            raise DbAuthError(f"record sign-in through access {access!r} refused") from None
        except (TimeoutError, OSError, WebSocketException, SurrealError) as e:
            raise DbConnectionError(f"sign-in to {cfg.ws_url} failed: {_describe(e)}") from None
        try:
            res = await asyncio.wait_for(conn.query("RETURN $auth.id"), left())
        except ServerError:
            raise DbAuthError("the signed-in record user has no identity") from None
        except (TimeoutError, OSError, WebSocketException, SurrealError) as e:
            raise DbConnectionError(f"query on {cfg.ws_url} failed: {_describe(e)}") from None
        return res
    finally:
        await _close_quietly(conn)


_FIRST_PAGE = "SELECT * FROM type::table($t) ORDER BY id LIMIT $n"
_NEXT_PAGE = "SELECT * FROM type::table($t) WHERE id > $last ORDER BY id LIMIT $n"


async def keyset_pages(db: Database, table: str, page_rows: int | Callable[[], int]
                       ) -> AsyncIterator[list[dict[str, Any]]]:
    """``table`` in pages ordered by id, keyset paged (`Database.keyset_pages`, without its
    checks of the name: the table is a bound parameter either way, and a backup reads every
    table the database has). ``page_rows`` may be a callable asked before each page (the
    exporter sizes its pages by the rows it has seen)."""
    last: Any = None
    while True:
        n = page_rows() if callable(page_rows) else page_rows
        if last is None:
            page = await db.query_one(_FIRST_PAGE, {"t": table, "n": n}, idempotent=True)
        else:
            page = await db.query_one(_NEXT_PAGE, {"t": table, "n": n, "last": last},
                                      idempotent=True)
        if not page:
            return
        yield page
        if len(page) < n:
            return
        last = page[-1]["id"]
