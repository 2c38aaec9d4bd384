"""An app's connection: a record user signed in to the database, the views it holds, its
optimistic writes and its outbox calls. See `viewclient/__init__.py` for the model."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from surrealdb import AsyncSurreal, RecordID

from viewclient.conflicts import is_conflict, retried
from viewclient.naming import QUERY_TABLE, edge_table, record_text, ttl_secs
from viewclient.query import MEMBERS_PARAM, members_query
from viewclient.view import View

log = logging.getLogger("viewclient")

# While a row waits for the service's answer, it is touched this often (see _register_row).
ROW_POKE_SECS = 2.0

class ViewError(Exception):
    """The service refused a view (its status and message as the service said them)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


@dataclass
class FailedWrite:
    """An optimistic write the database refused; shown until the app dismisses it."""

    op: str
    target: str
    data: Any
    error: str


@dataclass
class Pending:
    """An optimistic write not yet answered by the database."""

    op: str  # create, update, delete
    table: str
    record: str  # record id text
    data: dict[str, Any] = field(default_factory=dict)


class Client:
    """One signed-in session: its salt (two sessions of one user are two views), its views,
    and the reconnect loop that turns a dropped connection into a `gap` and back."""

    def __init__(self, url: str, namespace: str, database: str, auth: dict[str, Any], *,
                 service_url: str, service_token: str, ref_mode: str,
                 health_interval: float, client_id: str | None,
                 registration: str = "row", register_timeout: float = 60.0) -> None:
        self.url, self.namespace, self.database = url, namespace, database
        self._auth = auth
        self.service_url = service_url.rstrip("/")
        self._service_token = service_token
        self.ref_mode = ref_mode
        self.health_interval = health_interval
        self.registration = registration
        self.register_timeout = register_timeout
        self.client_id = client_id or uuid.uuid4().hex
        # Per-session salt: the same query in two tabs (two Clients) hashes to two view ids.
        self.salt = secrets.token_hex(16)
        self.db: Any = None
        self.auth_id: Any = None
        self.auth_text = ""  # canonical text of auth_id, as SurrealDB prints it
        self.views: dict[str, Any] = {}  # view id -> View
        self.pending: list[Pending] = []
        self.failed_writes: list[FailedWrite] = []
        # edge table -> (its LIVE query on the current connection, view record text -> wake-up)
        self._follows: dict[str, tuple[Any, dict[str, asyncio.Event]]] = {}
        self._follow_tasks: list[asyncio.Task[None]] = []
        self._http: aiohttp.ClientSession | None = None
        self._watch: asyncio.Task[None] | None = None
        self._closed = False
        self.connected = asyncio.Event()

    # -- connection ------------------------------------------------------------------------

    async def _open(self) -> None:
        db = AsyncSurreal(self.url)
        try:
            if "token" in self._auth:
                await db.authenticate(self._auth["token"])
            else:
                await db.signin({"namespace": self.namespace, "database": self.database,
                                 **self._auth})
            await db.use(self.namespace, self.database)
            got: Any = await db.query("RETURN [$auth.id, <string> $auth.id]")
            auth_id, auth_text = got
        except BaseException:
            with contextlib.suppress(Exception):
                await db.close()
            raise
        if auth_id is None:
            await db.close()
            raise PermissionError("the credentials did not sign in a record user")
        self.db, self.auth_id, self.auth_text = db, auth_id, str(auth_text)
        self.connected.set()

    async def start(self) -> None:
        self._http = aiohttp.ClientSession()
        await self._open()
        self._watch = asyncio.create_task(self._watchdog())

    def _socket_task(self) -> Any:
        return getattr(self.db, "recv_task", None)

    async def _service_healthy(self) -> bool:
        assert self._http is not None
        try:
            async with self._http.get(self.service_url + "/health",
                                      timeout=aiohttp.ClientTimeout(total=2)) as r:
                return r.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def _watchdog(self) -> None:
        """Notice a dropped database connection or a service that stopped answering; mark
        every view `gap`, reconnect, re-register, re-subscribe and re-read."""
        while not self._closed:
            task = self._socket_task()
            lost = task is not None and task.done()
            if not lost and not await self._service_healthy():
                lost = True
            if not lost:
                with contextlib.suppress(TimeoutError):
                    if task is not None:
                        await asyncio.wait_for(asyncio.shield(task), self.health_interval)
                    else:
                        await asyncio.sleep(self.health_interval)
                continue
            if self._closed:
                return
            self.connected.clear()
            for v in list(self.views.values()):
                v._set_gap()
            await self._recover()

    async def _recover(self) -> None:
        delay = 0.1
        while not self._closed:
            try:
                task = self._socket_task()
                if self.db is None or task is None or task.done():
                    dead = self.db
                    await self._open()
                    self._forget_follows()  # the old connection stays set until a new one works
                    if dead is not None:
                        with contextlib.suppress(Exception):
                            await dead.close()
                if not await self._service_healthy():
                    raise ConnectionError("service not healthy")
                for v in list(self.views.values()):
                    await v._resume()
                return
            except Exception as e:  # noqa: BLE001 - any failure means: try again later
                self.connected.clear()
                log.info("reconnect failed (%s); retrying in %.1fs", e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def close(self) -> None:
        """Close every view (deleting its `_00_query` row) and the connection."""
        self._closed = True
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watch
        for v in list(self.views.values()):
            with contextlib.suppress(Exception):
                await v.close()
        self._forget_follows()
        if self.db is not None:
            with contextlib.suppress(Exception):
                await self.db.close()
        if self._http is not None:
            await self._http.close()

    async def query(self, surql: str, params: dict[str, Any] | None = None) -> Any:
        """Every statement's result, as the signed-in user."""
        return await self.db.query_raw(surql, params or {})

    async def follow(self, table: str, view: Any, wake: asyncio.Event) -> None:
        """Wake `wake` on every notification of an edge of `view` in `table`."""
        if table not in self._follows:
            live_id = await self.db.live(table)
            q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
            self.db.live_queues.setdefault(str(live_id), []).append(q)
            self._follows[table] = (live_id, {})
            self._follow_tasks.append(asyncio.create_task(self._dispatch(q, table)))
        self._follows[table][1][str(view)] = wake

    async def _dispatch(self, q: asyncio.Queue[dict[str, Any]], table: str) -> None:
        while True:
            note = await q.get()
            row = note.get("result")
            if not isinstance(row, dict) or table not in self._follows:
                continue
            views = self._follows[table][1]
            owner = row.get("in")
            if owner is None:
                # SurrealDB 3.0.x (the Node build) sends a DELETE's notification with the
                # record's id alone; an edge's id is [its view, its member].
                rid = row.get("id")
                key = getattr(rid, "id", None)
                owner = key[0] if isinstance(key, list) and key else None
            if owner is None:
                for every in views.values():  # whose edge it was is unknown: all read again
                    every.set()
            elif (wake := views.get(str(owner))) is not None:
                wake.set()

    async def unfollow(self, table: str, view: Any) -> None:
        entry = self._follows.get(table)
        if entry is None:
            return
        entry[1].pop(str(view), None)
        if not entry[1]:
            del self._follows[table]
            with contextlib.suppress(Exception):
                await self.db.kill(entry[0])

    def _forget_follows(self) -> None:
        """The connection is new: its LIVE queries are gone; views follow again."""
        for t in self._follow_tasks:
            t.cancel()
        self._follow_tasks.clear()
        self._follows.clear()

    # -- views -----------------------------------------------------------------------------

    def view_id(self, surql: str, params: dict[str, Any] | None) -> str:
        body = json.dumps([self.salt, surql, params or {}], sort_keys=True, default=str)
        return "query:c" + hashlib.sha256(body.encode()).hexdigest()[:32]

    async def register(self, view_id: str, surql: str, params: dict[str, Any] | None,
                       ttl: str) -> None:
        """Have the service hold the view: by writing its `_00_query` row as the user
        (`registration="row"`, the default) or through `/view/register` with the service's
        bearer (`registration="bearer"`, for server-side apps)."""
        if self.registration == "bearer":
            await self._register_bearer(view_id, surql, params, ttl)
        else:
            await self._register_row(view_id, surql, params, ttl)

    async def _register_row(self, view_id: str, surql: str, params: dict[str, Any] | None,
                            ttl: str) -> None:
        """CREATE the view's `_00_query` row (the schema sets its `auth_id` to this user) and
        wait until the service answered on it: `state` written (registered) or `error` (its
        refusal, raised as ViewError). A row already there is waited on as it is. While no
        answer comes, `lastActiveAt` is touched every `ROW_POKE_SECS` (a change the service
        reads again: it may have been not ready)."""
        record = RecordID(QUERY_TABLE, view_id.removeprefix("query:"))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.register_timeout
        poke_at = loop.time() + ROW_POKE_SECS
        pause = 0.005
        create = True
        while True:
            if create:
                res = await self.db.query_raw(
                    "CREATE $q SET surql = $s, params = $p, clientId = $c, ttl = $t, "
                    "lastActiveAt = time::now() RETURN NONE",
                    {"q": record, "s": surql, "p": params or {}, "c": self.client_id, "t": ttl})
                err = _statement_error(res)
                if err is not None and "already exists" not in err and not is_conflict(err):
                    raise ViewError(403, f"cannot write the view's row: {err}")
                create = False  # a conflict: the read below says whether the row is there
            got = await self.db.query("SELECT state, error FROM $q", {"q": record})
            row = got[0] if got else None
            if row is None:
                create = True  # gone (the service restarted, or dropped it): write it again
            elif row.get("error"):
                refused = row["error"]
                with contextlib.suppress(Exception):
                    await self.db.query("DELETE $q", {"q": record})
                raise ViewError(int(refused.get("status") or 400),
                                f"{refused.get('error')}: {refused.get('message')}")
            elif row.get("state") is not None:
                return
            now = loop.time()
            if now > deadline:
                raise ViewError(503, f"the service did not answer on view {view_id}'s row "
                                f"within {self.register_timeout:.0f}s")
            if now > poke_at:
                poke_at = now + ROW_POKE_SECS
                try:
                    await self.db.query("UPDATE $q SET lastActiveAt = time::now() RETURN NONE",
                                        {"q": record})
                except Exception as e:
                    # Transport http: the database's event posts the row to the service
                    # inside this write, and the service's answer (state or error) can be
                    # written onto the row before this write commits, which then fails as a
                    # conflict. The answer is what was waited for: read it.
                    if not is_conflict(str(e)):
                        raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.1)

    async def _register_bearer(self, view_id: str, surql: str, params: dict[str, Any] | None,
                               ttl: str) -> None:
        """`POST /view/register` with the service's bearer; the service writes the row."""
        assert self._http is not None
        body = {"id": view_id, "surql": surql, "clientId": self.client_id, "ttl": ttl,
                "params": {**(params or {}), "auth_id": self.auth_text},
                "lastActiveAt": _now_iso()}
        async with self._http.post(self.service_url + "/view/register", json=body,
                                   headers={"Authorization": f"Bearer {self._service_token}"},
                                   timeout=aiohttp.ClientTimeout(total=60)) as r:
            text = await r.text()
            if r.status != 200:
                try:
                    msg = json.loads(text).get("message", text)
                except (ValueError, AttributeError):
                    msg = text
                raise ViewError(r.status, str(msg))

    async def view(self, surql: str, params: dict[str, Any] | None = None, *,
                   ttl: str = "10m") -> Any:
        """Register a live view and read its first rows (see `View`)."""
        ttl_secs(ttl)
        vid = self.view_id(surql, params)
        v = View(self, vid, surql, params or {}, ttl)
        self.views[vid] = v
        try:
            await v._start()
        except BaseException:
            self.views.pop(vid, None)
            raise
        return v

    # -- optimistic writes -----------------------------------------------------------------

    async def _write(self, p: Pending, statement: str, vars: dict[str, Any]) -> Any:
        self.pending.append(p)
        for v in self.views.values():
            v._changed_locally()
        db = self.db

        async def attempt() -> Any:
            res = await db.query_raw(statement, vars)
            err = res.get("error")
            stmt = (res.get("result") or [{}])[0]
            if err is None and stmt.get("status") != "OK":
                err = stmt.get("result")
            elif err is None and not stmt.get("result"):
                err = "the database changed no record (not found or not permitted)"
            if err is not None:
                raise PermissionError(err.get("message") if isinstance(err, dict) else str(err))
            return stmt.get("result")

        try:
            # A DELETE takes the edges pointing at the record along, so a write can lose to
            # the SSP's edge transaction: SurrealDB calls that retryable, and it is no refusal.
            return await retried(attempt)
        except Exception as e:
            self.failed_writes.append(FailedWrite(p.op, p.record, p.data, str(e)))
            raise
        finally:
            self.pending.remove(p)
            for v in self.views.values():
                await v._reread()

    async def create(self, record: str, data: dict[str, Any]) -> Any:
        """CREATE `record` (`table:key`) with `data`, shown in the views at once."""
        table = record.split(":", 1)[0]
        return await self._write(Pending("create", table, record, dict(data)),
                                 "CREATE type::record($r) CONTENT $d",
                                 {"r": record, "d": data})

    async def update(self, record: str, data: dict[str, Any]) -> Any:
        """MERGE `data` into `record`, shown in the views at once."""
        table = record.split(":", 1)[0]
        return await self._write(Pending("update", table, record, dict(data)),
                                 "UPDATE type::record($r) MERGE $d", {"r": record, "d": data})

    async def delete(self, record: str) -> Any:
        """DELETE `record`, gone from the views at once."""
        table = record.split(":", 1)[0]
        return await self._write(Pending("delete", table, record),
                                 "DELETE type::record($r) RETURN BEFORE", {"r": record})

    # -- outbox jobs -----------------------------------------------------------------------

    async def run(self, table: str, path: str, payload: Any, *, timeout: float = 60.0,
                  poll: float = 0.05) -> Any:
        """Write a `pending` job into outbox `table` and wait for the service's answer: its
        `result` when `completed`, JobFailed with its `errors` when `failed`."""
        res = await self.db.query("CREATE type::table($t) SET path = $p, payload = $d, "
                                  "status = 'pending'", {"t": table, "p": path, "d": payload})
        row = res[0] if isinstance(res, list) else res
        rid = row["id"]
        deadline = time.monotonic() + timeout
        while True:
            got = await self.db.query("SELECT status, result, errors FROM $r", {"r": rid})
            job = got[0] if got else {}
            if job.get("status") == "completed":
                return job.get("result")
            if job.get("status") == "failed":
                raise JobFailed(record_text(rid), job.get("errors"))
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {record_text(rid)} still {job.get('status')!r}")
            await asyncio.sleep(poll)
            poll = min(poll * 1.5, 0.5)


class JobFailed(Exception):
    """The outbox job ended `failed`; `errors` holds each failed attempt."""

    def __init__(self, job: str, errors: Any) -> None:
        super().__init__(f"job {job} failed: {errors!r}")
        self.errors = errors


def _statement_error(res: dict[str, Any]) -> str | None:
    """The first error of a `query_raw` answer, None when every statement succeeded."""
    if res.get("error"):
        err = res["error"]
        return str(err.get("message") if isinstance(err, dict) else err)
    for stmt in res.get("result") or []:
        if stmt.get("status") != "OK":
            return str(stmt.get("result"))
    return None


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z"


async def connect(url: str, namespace: str, database: str, auth: dict[str, Any], *,
                  service_url: str, service_token: str = "dev", ref_mode: str = "dedicated",
                  health_interval: float = 1.0, client_id: str | None = None,
                  registration: str = "row", register_timeout: float = 60.0) -> Client:
    """Sign in as a record user (`auth`: `{"access": ..., "variables": {...}}`, or
    `{"token": ...}`) and return the session's Client. `registration`: `row` (the user
    writes its views' `_00_query` rows; no service secret) or `bearer` (`/view/register`
    with `service_token`, for server-side apps)."""
    if ref_mode not in ("dedicated", "single"):
        raise ValueError("ref_mode is 'dedicated' or 'single'")
    if registration not in ("row", "bearer"):
        raise ValueError("registration is 'row' or 'bearer'")
    c = Client(url, namespace, database, auth, service_url=service_url,
               service_token=service_token, ref_mode=ref_mode,
               health_interval=health_interval, client_id=client_id,
               registration=registration, register_timeout=register_timeout)
    await c.start()
    return c


Callback = Callable[[Any], Awaitable[None] | None]
__all__ = ["Client", "FailedWrite", "JobFailed", "ViewError", "connect", "edge_table",
           "members_query", "MEMBERS_PARAM"]
