"""The SSP's outbox job runner: rows of job tables -> backend calls -> status written back.

A row in a job table (`SVC_JOB_CONFIG`) whose `status` is `pending` is a queued job. The
database is the queue and the lock; this process only holds what is in flight:

- admission: one loop per table, woken by an ingested pending row, a finished job, a retry,
  `/job/recover` or the sweep. It reads the oldest pending rows (`ORDER BY created_at, id`)
  and claims them with a conditional `UPDATE ... WHERE status = 'pending'` (status
  `processing`, `assignee` = this SSP, `lease_until`), so two SSPs never both claim a row.
  At most `concurrency` jobs per table run in this process (exact); the rest stay `pending`.
- a job: POST `base_url + path` with `payload` as the JSON body and `Authorization: Bearer
  <auth_token>`, bounded by `timeout_secs`. 2xx -> `completed` with `result` (the JSON reply,
  or `{"text": ...}`). Anything else (non-2xx, timeout, connection failure) is appended to
  `errors` as `{at, error, status}` (`status` only when the backend answered) and retried
  after a backoff while `attempts <= max_retries` (row field, default 3), then `failed`.
  Every write after the claim is conditional on `assignee` = this SSP and status
  `processing`: an SSP that lost its lease never overwrites the new owner's outcome.
- lease: renewed every third of `lease_secs` while the job runs; a renewal that finds the row
  no longer ours cancels the call.
- kill: in flight here -> the call is cancelled and the row `failed` with error `killed`;
  pending -> `kill_requested = true` on the row, and whoever claims it fails it at once
  ("fails at dequeue"). Retry: a terminal row goes back to `pending` (`errors` kept,
  `attempts` reset) and is re-admitted; a pending or processing row is 409 `not_terminal`.
- recovery (`recover_once`): processing rows whose lease expired (their SSP died or hung) go
  back to `pending` and are admitted like any other. Standalone SSPs run it every
  `SVC_SSP_JOB_SWEEP_SECS` (30); with a scheduler, the scheduler calls `POST /job/recover`.

Delivery guarantee: at-least-once. A job is never lost (the row stays `pending` or
`processing` until an outcome is written, and a processing row whose owner died is reclaimed
after its lease), but a backend can see the same call twice: when an SSP dies after the
backend answered and before the outcome was written, or when a lease expires under a slow
call. Backends should be idempotent per job id (sent as header `X-Job-Id`).

Secrets: `auth_token` is only put in the request header; it is never logged or returned.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections import deque
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import aiohttp
from surrealdb import RecordID

from dbclient import Database, DbError
from engine.values import parse_record_id, record_id_text
from ipc.messages import ErrorCode, error_reply, not_ready, reply
from ssp.config import JobTable

log = logging.getLogger("ssp.jobs")

DEFAULT_MAX_RETRIES = 3
TERMINAL = ("completed", "failed")
NOT_TERMINAL = "not_terminal"  # the 409 error code of a retry while the job runs
ERROR_TEXT_MAX = 500
RESULT_TEXT_MAX = 65_536
HINT_REWAKES = (0.2, 1.0)  # transport http: the row commits after the ingest call returns
PREFETCH = 64  # pending ids read per admission query beyond the free slots


class JobNotFound(LookupError):
    """No job row with that id in a configured job table (404)."""


class NotTerminal(RuntimeError):
    """Retry of a job that is still pending or processing (409 `not_terminal`)."""

    def __init__(self, status: str) -> None:
        super().__init__(f"the job is {status}; only completed or failed jobs can be retried")
        self.status = status


def jsonable(v: Any) -> Any:
    """Database values -> JSON (record ids and datetimes as SurrealDB text)."""
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, RecordID):
        return record_id_text(v)
    if isinstance(v, datetime):
        return v.isoformat().replace("+00:00", "Z")
    if isinstance(v, (Decimal, UUID)):
        return str(v)
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def backoff_secs(base_ms: int, attempt: int) -> float:
    """Wait before retry number `attempt` (1, 2, ...): base, 2x, 4x... capped at 30 s."""
    return min(base_ms * 2 ** max(0, attempt - 1), 30_000) / 1000


def job_url(base_url: str, path: Any) -> str:
    """`base_url` + the row's `path` (one slash between them)."""
    p = str(path or "")
    if not p:
        return base_url
    return base_url.rstrip("/") + "/" + p.lstrip("/")


@dataclass
class _Table:
    spec: JobTable
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    running: int = 0
    max_running: int = 0  # highest `running` seen (diagnostics)
    # Pending ids read by the last admission query, oldest first. A finished job takes the
    # next one without reading again; anything that may add an older pending row (ingest,
    # retry, recovery) sets `refresh`, so the order stays oldest first.
    candidates: deque[RecordID] = field(default_factory=deque)
    refresh: bool = True
    rewake_scheduled: bool = False

    def poke(self, *, refresh: bool) -> None:
        self.refresh = self.refresh or refresh
        self.wake.set()


@dataclass
class _Running:
    table: _Table
    rid: RecordID
    task: asyncio.Task[None]
    killing: bool = False


class JobRunner:
    """Runs the outbox jobs of one SSP process (see the module docstring)."""

    def __init__(self, db: Database, tables: tuple[JobTable, ...], ssp_id: str, *,
                 sweep_secs: float = 30.0, standalone: bool = True) -> None:
        self.db = db
        self.ssp_id = ssp_id
        self.sweep_secs = sweep_secs
        self.standalone = standalone
        self.tables = {t.name: _Table(t) for t in tables}
        self.inflight: dict[str, _Running] = {}
        self.session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._timers: set[asyncio.Task[None]] = set()
        self.stats = {"completed": 0, "failed": 0, "attempts": 0, "claimed": 0,
                      "reclaimed": 0, "killed": 0}

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Open the HTTP session and start one admission loop per table (+ the sweep)."""
        if not self.tables:
            return
        self.session = aiohttp.ClientSession()
        loop = asyncio.get_running_loop()
        for t in self.tables.values():
            self._tasks.append(loop.create_task(self._admit_loop(t), name=f"jobs-{t.spec.name}"))
            t.poke(refresh=True)  # bootstrap scan: pending rows already in the table
        if self.standalone:
            self._tasks.append(loop.create_task(self._sweep_loop(), name="jobs-sweep"))
        log.info("job runner: tables %s", ", ".join(
            f"{t.spec.name} (concurrency {t.spec.concurrency})" for t in self.tables.values()))

    async def stop(self) -> None:
        """Stop admitting; hand the jobs in flight back (`pending`) so another run takes them."""
        for task in self._tasks:
            task.cancel()
        for timer in list(self._timers):
            timer.cancel()
        running = list(self.inflight.values())
        for r in running:
            r.task.cancel()
        if running:
            await asyncio.gather(*(r.task for r in running), return_exceptions=True)
            for r in running:
                with contextlib.suppress(DbError):
                    await self.db.query(
                        "UPDATE $id SET status = 'pending', assignee = NONE, lease_until = NONE "
                        "WHERE status = 'processing' AND assignee = $me RETURN NONE",
                        {"id": r.rid, "me": self.ssp_id})
            log.info("job runner stopped: %d jobs in flight handed back", len(running))
        if self.session is not None:
            await self.session.close()
            self.session = None
        await self.db.close()

    def is_job_table(self, table: str) -> bool:
        return table in self.tables

    def hint(self, table: str) -> None:
        """An ingested row of `table` is `pending`: admit now (and again shortly, for rows
        whose writing transaction commits after the ingest call)."""
        t = self.tables.get(table)
        if t is None:
            return
        t.poke(refresh=True)
        if not t.rewake_scheduled:  # one pair of timers per table, however many hints
            t.rewake_scheduled = True
            timer = asyncio.get_running_loop().create_task(self._wake_later(t))
            self._timers.add(timer)
            timer.add_done_callback(self._timers.discard)

    @staticmethod
    async def _wake_later(t: _Table) -> None:
        try:
            for delay in HINT_REWAKES:
                await asyncio.sleep(delay)
                t.poke(refresh=True)
        finally:
            t.rewake_scheduled = False

    def info(self) -> dict[str, Any]:
        """In-flight counts and outcome counters (for `/debug/memory`)."""
        return {"tables": {name: {"running": t.running, "concurrency": t.spec.concurrency,
                                  "max_running": t.max_running}
                           for name, t in self.tables.items()},
                "inflight": sorted(self.inflight), **self.stats}

    # ------------------------------------------------------------------ admission

    async def _admit_loop(self, t: _Table) -> None:
        while True:
            await t.wake.wait()
            t.wake.clear()
            try:
                await self._admit(t)
            except DbError as e:
                log.warning("job admission on %s failed: %s; retrying in 1s", t.spec.name, e)
                await asyncio.sleep(1.0)
                t.poke(refresh=True)

    async def _admit(self, t: _Table) -> None:
        """Claim the oldest pending rows until the table's slots are full or none is left."""
        limit = t.spec.concurrency + PREFETCH
        read_all = False  # the last read returned every pending row
        while t.running < t.spec.concurrency:
            if t.refresh or not t.candidates:
                if read_all and not t.refresh:
                    return  # every pending row was tried since the read
                t.refresh = False
                rows = await self.db.query_one(
                    f"SELECT id, created_at FROM {t.spec.name} WHERE status = 'pending' "
                    f"ORDER BY created_at, id LIMIT {limit}", idempotent=True) or []
                read_all = len(rows) < limit
                t.candidates = deque(r["id"] for r in rows)
                if not t.candidates:
                    return
            # One round trip claims as many candidates as there are free slots; a candidate
            # another SSP (or a kill) took since the read fails the conditional claim and is
            # skipped. Claimed rows start oldest first.
            free = t.spec.concurrency - t.running
            batch = [t.candidates.popleft() for _ in range(min(free, len(t.candidates)))]
            for row in await self._claim(t, batch):
                self._launch(t, row)

    async def _claim(self, t: _Table, rids: list[RecordID]) -> list[dict[str, Any]]:
        """Claim `rids` in one conditional UPDATE; returns the rows won, in `rids` order."""
        got = await self.db.query_one(
            "UPDATE $ids SET status = 'processing', assignee = $me, "
            f"lease_until = time::now() + {int(t.spec.lease_secs * 1000)}ms, "
            "started_at = time::now(), attempts = attempts OR 0 "
            "WHERE status = 'pending' RETURN AFTER", {"ids": rids, "me": self.ssp_id}) or []
        won = {record_id_text(r["id"]): r for r in got}
        rows = [won[k] for k in map(record_id_text, rids) if k in won]
        self.stats["claimed"] += len(rows)
        return rows

    def _launch(self, t: _Table, row: dict[str, Any]) -> None:
        key = record_id_text(row["id"])
        t.running += 1
        t.max_running = max(t.max_running, t.running)
        task = asyncio.get_running_loop().create_task(self._run(t, row), name=f"job {key}")
        self.inflight[key] = _Running(t, row["id"], task)

    # ------------------------------------------------------------------ one job

    async def _run(self, t: _Table, row: dict[str, Any]) -> None:
        rid: RecordID = row["id"]
        key = record_id_text(rid)
        renew = asyncio.get_running_loop().create_task(self._renew(t, rid, key))
        try:
            if row.get("kill_requested"):
                self.stats["killed"] += 1
                await self._finish_failed(rid, _error("killed"), attempts=None)
                log.info("job %s killed before it ran", key)
                return
            attempts = int(row.get("attempts") or 0)
            max_retries = _max_retries(row.get("max_retries"))
            while True:
                attempts += 1
                self.stats["attempts"] += 1
                ok, outcome = await self._call(t, row, key)
                if ok:
                    await self._write(rid, "status = 'completed', result = $r, attempts = $n, "
                                      "finished_at = time::now(), lease_until = NONE",
                                      {"r": outcome, "n": attempts})
                    self.stats["completed"] += 1
                    return
                if attempts > max_retries:
                    await self._finish_failed(rid, outcome, attempts=attempts)
                    self.stats["failed"] += 1
                    log.info("job %s failed after %d attempts: %s", key, attempts,
                             outcome["error"])
                    return
                await self._write(rid, "errors += $e, attempts = $n", {"e": outcome,
                                                                       "n": attempts})
                await asyncio.sleep(backoff_secs(t.spec.backoff_ms, attempts))
        except asyncio.CancelledError:
            r = self.inflight.get(key)
            if r is None or not r.killing:
                raise  # shutdown or lost lease: the row is handed back or already not ours
            self.stats["killed"] += 1
            await self._finish_failed(rid, _error("killed"), attempts=None)
            log.info("job %s killed in flight", key)
        except DbError as e:
            # The outcome could not be written: the row stays processing, its lease expires
            # and the recovery sweep hands it out again (at-least-once).
            log.warning("job %s: writing its state failed (%s); left for recovery", key, e)
        finally:
            renew.cancel()
            self.inflight.pop(key, None)
            t.running -= 1
            t.poke(refresh=False)

    async def _call(self, t: _Table, row: dict[str, Any], key: str
                    ) -> tuple[bool, dict[str, Any]]:
        """One backend call: (True, result) or (False, the error entry)."""
        assert self.session is not None
        url = job_url(t.spec.base_url, row.get("path"))
        headers = {"X-Job-Id": key}
        if t.spec.auth_token:
            headers["Authorization"] = f"Bearer {t.spec.auth_token}"
        try:
            async with self.session.post(
                    url, json=jsonable(row.get("payload")), headers=headers,
                    timeout=aiohttp.ClientTimeout(total=t.spec.timeout_secs)) as resp:
                text = await resp.text(errors="replace")
                if 200 <= resp.status < 300:
                    return True, _result(text)
                return False, _error(f"backend answered {resp.status}: "
                                     f"{text[:ERROR_TEXT_MAX]}", resp.status)
        except TimeoutError:
            return False, _error(f"backend timed out after {t.spec.timeout_secs:g}s")
        except aiohttp.ClientError as e:
            return False, _error(f"backend unreachable: {type(e).__name__}: "
                                 f"{str(e)[:ERROR_TEXT_MAX]}")

    async def _renew(self, t: _Table, rid: RecordID, key: str) -> None:
        every = max(0.05, t.spec.lease_secs / 3)
        while True:
            await asyncio.sleep(every)
            try:
                got = await self.db.query_one(
                    f"UPDATE $id SET lease_until = time::now() + {int(t.spec.lease_secs * 1000)}ms"
                    " WHERE status = 'processing' AND assignee = $me RETURN id",
                    {"id": rid, "me": self.ssp_id})
            except DbError as e:
                log.warning("job %s: lease renewal failed: %s", key, e)
                continue
            if not got:
                r = self.inflight.get(key)
                if r is not None and not r.killing:
                    log.warning("job %s is no longer ours (lease lost): cancelling the call", key)
                    r.task.cancel()
                return

    async def _write(self, rid: RecordID, sets: str, params: dict[str, Any]) -> None:
        await self.db.query(f"UPDATE $id SET {sets} WHERE status = 'processing' AND "
                            "assignee = $me RETURN NONE", {"id": rid, "me": self.ssp_id, **params})

    async def _finish_failed(self, rid: RecordID, err: dict[str, Any], *, attempts: int | None
                             ) -> None:
        sets = "status = 'failed', errors += $e, finished_at = time::now(), lease_until = NONE"
        params: dict[str, Any] = {"e": err}
        if attempts is not None:
            sets += ", attempts = $n"
            params["n"] = attempts
        await self._write(rid, sets, params)

    # ------------------------------------------------------------------ operations

    def _job_id(self, text: str) -> tuple[_Table, RecordID]:
        try:
            rid = parse_record_id(text)
        except ValueError:
            raise JobNotFound(f"{text[:80]!r} is not a record id") from None
        t = self.tables.get(rid.table_name)
        if t is None:
            raise JobNotFound(f"{rid.table_name} is not a job table")
        return t, rid

    async def _status(self, rid: RecordID) -> str:
        row = await self.db.query_one("SELECT status FROM ONLY $id", {"id": rid},
                                      idempotent=True)
        if not isinstance(row, dict):
            raise JobNotFound(f"no job {record_id_text(rid)}")
        return str(row.get("status"))

    async def kill(self, job_id: str) -> dict[str, Any]:
        """Cancel the job if it runs here, else flag a pending row to fail at dequeue."""
        t, rid = self._job_id(job_id)
        key = record_id_text(rid)
        r = self.inflight.get(key)
        if r is not None:
            r.killing = True
            r.task.cancel()
            await asyncio.gather(r.task, return_exceptions=True)
            return {"id": key, "action": "cancelled", "status": await self._status(rid)}
        flagged = await self.db.query_one(
            "UPDATE $id SET kill_requested = true WHERE status = 'pending' OR "
            "(status = 'processing' AND assignee != $me) RETURN status",
            {"id": rid, "me": self.ssp_id})
        if flagged:
            return {"id": key, "action": "flagged", "status": flagged[0].get("status")}
        return {"id": key, "action": "none", "status": await self._status(rid)}

    async def retry(self, job_id: str) -> dict[str, Any]:
        """Terminal -> pending (errors kept) and admitted; NotTerminal / JobNotFound."""
        t, rid = self._job_id(job_id)
        got = await self.db.query_one(
            "UPDATE $id SET status = 'pending', assignee = NONE, lease_until = NONE, "
            "kill_requested = NONE, attempts = 0, result = NONE, finished_at = NONE, "
            "retried_at = time::now() WHERE status IN ['completed', 'failed'] RETURN id",
            {"id": rid})
        if not got:
            raise NotTerminal(await self._status(rid))
        t.poke(refresh=True)
        log.info("job %s reset to pending for retry", record_id_text(rid))
        return {"id": record_id_text(rid), "status": "pending"}

    async def recover_once(self, table: str | None = None) -> dict[str, Any]:
        """Processing rows with an expired lease -> pending; then admit every table."""
        reclaimed = 0
        for name, t in self.tables.items():
            if table is not None and name != table:
                continue
            got = await self.db.query_one(
                f"UPDATE {name} SET status = 'pending', assignee = NONE, lease_until = NONE, "
                "recovered_at = time::now() WHERE status = 'processing' AND "
                "lease_until < time::now() RETURN id")
            for row in got or []:
                log.info("job %s: lease expired, back to pending", record_id_text(row["id"]))
            reclaimed += len(got or [])
            t.poke(refresh=True)
        self.stats["reclaimed"] += reclaimed
        return {"ssp_id": self.ssp_id, "reclaimed": reclaimed}

    async def _sweep_loop(self) -> None:
        while True:
            try:
                await self.recover_once()
            except DbError as e:
                log.warning("job recovery sweep failed: %s", e)
            await asyncio.sleep(self.sweep_secs)


def _max_retries(v: Any) -> int:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    return DEFAULT_MAX_RETRIES


def _error(message: str, status: int | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"at": datetime.now(UTC), "error": message}
    if status is not None:
        e["status"] = status
    return e


def _result(text: str) -> Any:
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return {"text": text[:RESULT_TEXT_MAX]}




# ---------------------------------------------------------------------------- hub routes


def job_routes(runner_of: Callable[[Any], JobRunner], stalled: Callable[[Any], bool]
               ) -> dict[str, Callable[[Any, dict[str, Any]], Awaitable[dict[str, Any]]]]:
    """The hub's handlers for `POST /job/kill`, `/job/retry`, `/job/recover` (bodies already
    shape-checked by the gateway, `ipc.messages.JobRef`)."""

    async def kill(hub: Any, req: dict[str, Any]) -> dict[str, Any]:
        try:
            return reply(200, await runner_of(hub).kill(str((req.get("body") or {})["id"])))
        except JobNotFound as e:
            return error_reply(404, ErrorCode.NOT_FOUND, str(e))

    async def retry(hub: Any, req: dict[str, Any]) -> dict[str, Any]:
        try:
            return reply(200, await runner_of(hub).retry(str((req.get("body") or {})["id"])))
        except JobNotFound as e:
            return error_reply(404, ErrorCode.NOT_FOUND, str(e))
        except NotTerminal as e:
            return error_reply(409, NOT_TERMINAL, str(e))

    async def recover(hub: Any, req: dict[str, Any]) -> dict[str, Any]:
        if stalled(hub):
            return not_ready("database calls are timing out")
        body = req.get("body") or {}
        table = body.get("table")
        if isinstance(body.get("id"), str):
            table = body["id"].split(":", 1)[0]
        runner = runner_of(hub)
        if table is not None and not runner.is_job_table(table):
            return error_reply(404, ErrorCode.NOT_FOUND, f"{table} is not a job table")
        return reply(200, await runner.recover_once(table))

    return {"POST /job/kill": kill, "POST /job/retry": retry, "POST /job/recover": recover}


__all__ = ["JobNotFound", "JobRunner", "NotTerminal", "backoff_secs", "job_routes", "job_url",
           "jsonable"]
