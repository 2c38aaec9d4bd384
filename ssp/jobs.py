"""The SSP's outbox job runner: rows of job tables -> backend calls -> status written back.

A row in a job table (`SVC_JOB_CONFIG`) whose `status` is `pending` is a queued job. The
database is the queue and the lock; this process only holds what is in flight:

- admission: one loop per table, woken by an ingested pending row, a finished job, a retry,
  `/job/recover` or the sweep. It reads the oldest pending rows (`ORDER BY created_at, id`)
  and claims them with a conditional `UPDATE ... WHERE status = 'pending'` (status
  `processing`, `assignee` = this SSP, `lease_until`), so two SSPs never both claim a row.
  At most `concurrency` jobs per table run in this process (exact); the rest stay `pending`.
- a job: POST `base_url + path` with `payload` as the JSON body and `Authorization: Bearer
  <auth_token>`, bounded by `timeout_secs` (the row's own `timeout_secs` instead, when set:
  a workflow step's timeout); redirects are not followed (the token goes to
  `base_url` and nowhere else). 2xx -> `completed` with `result` (the JSON reply, or
  `{"text": ...}`). Every failed attempt is appended to `errors` as one shape,
  `{at, attempt, kind, status, error}`: `status` is the HTTP status, or null when the backend
  gave no answer; `kind` says which failure it was:

  | kind | status | retried? |
  |---|---|---|
  | `http` | 5xx, 408, 425 or 429 | yes, while the budget lasts |
  | `rejected` | any other non-2xx (3xx, 4xx) | no: the job fails at once |
  | `timeout` | null | yes |
  | `unreachable` | null (connection refused, DNS, reset) | yes |
  | `killed` | null | no |

  The spec does not say which failures are retried; a 4xx other than 408/425/429 says the
  request itself is wrong (bad path, payload, token) and the same call will get the same
  answer, so it is not allowed to burn the retry budget (or the backend's time) on repeats.
  A retried failure waits `backoff_ms` x 2^(n-1) (cap 30 s), or the backend's
  `Retry-After` seconds when longer (cap 300 s), while `attempts <= max_retries` (row field,
  default 3); then `failed`. Error texts never hold the `auth_token` or a URL password (both
  replaced by `***`). Every write after the claim is conditional on `assignee` = this SSP and
  status `processing`: an SSP that lost its lease never overwrites the new owner's outcome.
- lease: renewed every third of `lease_secs` while the job runs; a renewal that finds the row
  no longer ours cancels the call.
- kill: in flight here -> the call is cancelled and the row `failed` with error `killed`;
  otherwise -> `kill_requested = true` on a pending or processing row: whoever claims a
  pending row fails it at once ("fails at dequeue"), and the owner of a processing row sees
  the flag at its next lease renewal and cancels the call. So a kill broadcast that one SSP
  misses still reaches the job when any other SSP flags the row. Retry: a terminal row goes
  back to `pending` (`errors` kept, `attempts` reset) and is re-admitted; a pending or
  processing row is 409 `not_terminal`.
- recovery (`recover_once`): processing rows whose lease expired (their SSP died or hung) go
  back to `pending` and are admitted like any other. Standalone SSPs run it every
  `SVC_SSP_JOB_SWEEP_SECS` (30); with a scheduler, the scheduler calls `POST /job/recover`.
- results (scheduler mode): each status change is reported to the scheduler's
  `POST /job/result` as `{job_id, status, result?, error?}` (`running` when claimed,
  `completed` with the result object, `failed` with the last error text, `pending` when a
  retry, a hand-back or a recovery resets it). Best effort and never in a job's way: one
  sender per SSP, the latest status per job coalesced, one post per job at a time (so a job's
  statuses arrive in order), at most `REPORTS_QUEUED` jobs waiting (the oldest dropped first).

Delivery guarantee: at-least-once. A job is never lost (the row stays `pending` or
`processing` until an outcome is written, and a processing row whose owner died is reclaimed
after its lease), but a backend can see the same call twice: when an SSP dies after the
backend answered and before the outcome was written, or when a lease expires under a slow
call. Backends should be idempotent per job id (sent as header `X-Job-Id`).

Secrets: `auth_token` is only put in the request header; it is never logged or returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from surrealdb import RecordID

from dbclient import Database, DbError
from dbclient.tasks import cancel_and_wait
from engine.jsonvalues import to_json as jsonable
from engine.values import parse_record_id, record_id_text
from ipc.http import client_session
from ipc.messages import ErrorCode, error_reply, not_ready, reply
from jobs import rows
from jobs.policy import (
    ERROR_TEXT_MAX,
    JobPathError,
    backoff_secs,
    error_entry,
    job_url,
    parse_result,
    redact,
    retried,
    retry_after_secs,
    row_max_retries,
    row_timeout,
    secrets_of,
)
from jobs.tables import JobTable
from ssp.jobreports import ResultReporter

log = logging.getLogger("ssp.jobs")

TERMINAL = ("completed", "failed")
NOT_TERMINAL = "not_terminal"  # the 409 error code of a retry while the job runs
HINT_REWAKES = (0.2, 1.0)  # transport http: the row commits after the ingest call returns
PREFETCH = 64  # pending ids read per admission query beyond the free slots
DISPATCH_WAIT_SECS = 1.0  # how long a dispatch waits for the admission round it asked for

class JobNotFound(LookupError):
    """No job row with that id in a configured job table (404)."""


class NotTerminal(RuntimeError):
    """Retry of a job that is still pending or processing (409 `not_terminal`)."""

    def __init__(self, status: str) -> None:
        super().__init__(f"the job is {status}; only completed or failed jobs can be retried")
        self.status = status


@dataclass
class _Table:
    spec: JobTable
    secrets: tuple[str, ...] = ()
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    running: int = 0
    max_running: int = 0  # highest `running` seen (diagnostics)
    # Pending ids read by the last admission query, oldest first. A finished job takes the
    # next one without reading again; anything that may add an older pending row (ingest,
    # retry, recovery) sets `refresh`, so the order stays oldest first.
    candidates: deque[RecordID] = field(default_factory=deque)
    refresh: bool = True
    rewake_scheduled: bool = False
    # Admission rounds finished (and one running): lets a dispatch wait for the round that
    # follows its poke.
    rounds: int = 0
    admitting: bool = False
    round_done: asyncio.Condition = field(default_factory=asyncio.Condition)

    def poke(self, *, refresh: bool) -> None:
        self.refresh = self.refresh or refresh
        self.wake.set()

    async def admitted(self, timeout: float) -> None:
        """Poke admission and wait (at most `timeout`) until a round that read the table
        after this call has finished."""
        target = self.rounds + (2 if self.admitting else 1)
        self.poke(refresh=True)
        async with self.round_done:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self.round_done.wait_for(lambda: self.rounds >= target), timeout)


@dataclass
class _Attempt:
    """One backend call: `result` (2xx) or `error` (an `errors` entry); `retry`: worth
    another attempt; `wait`: the backend's Retry-After in seconds."""

    result: Any = None
    error: dict[str, Any] | None = None
    retry: bool = True
    wait: float | None = None


@dataclass
class _Running:
    table: _Table
    rid: RecordID
    task: asyncio.Task[None]
    killing: bool = False

    def kill(self) -> None:
        """Cancel the call; `_run` then writes the row `failed` with a `killed` entry."""
        self.killing = True
        self.task.cancel()


class JobRunner:
    """Runs the outbox jobs of one SSP process (see the module docstring)."""

    def __init__(self, db: Database, tables: tuple[JobTable, ...], ssp_id: str, *,
                 sweep_secs: float = 30.0, standalone: bool = True,
                 scheduler_url: str | None = None, auth_secret: str | None = None) -> None:
        self.db = db
        self.ssp_id = ssp_id
        self.sweep_secs = sweep_secs
        self.standalone = standalone
        self.reporter = (ResultReporter(scheduler_url, auth_secret)
                         if scheduler_url and tables else None)
        self.tables = {t.name: _Table(t, secrets_of(t)) for t in tables}
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
        self.session = client_session()
        if self.reporter is not None:
            self.reporter.start(self.session)
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
        # admission has ended before the jobs in flight are listed: a loop that lost its
        # cancel (dbclient.tasks) could otherwise start a job that is never handed back
        await cancel_and_wait(*self._tasks)
        for timer in list(self._timers):
            timer.cancel()
        running = list(self.inflight.values())
        if running:
            # a job between database calls may lose its cancel and retry on (dbclient.tasks)
            await cancel_and_wait(*(r.task for r in running))
            for r in running:
                with contextlib.suppress(DbError):
                    got = await self.db.query_one(
                        *rows.hand_back(r.rid, self.ssp_id, recovered=False))
                    if got:
                        self._report(r.rid, "pending")
            log.info("job runner stopped: %d jobs in flight handed back", len(running))
        if self.reporter is not None and self.session is not None:
            await self.reporter.stop(self.session)
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
        out = {"tables": {name: {"running": t.running, "concurrency": t.spec.concurrency,
                                 "max_running": t.max_running}
                          for name, t in self.tables.items()},
               "inflight": sorted(self.inflight), **self.stats}
        if self.reporter is not None:
            out["results"] = {**self.reporter.stats, "queued": len(self.reporter.queued)}
        return out

    def _report(self, rid: RecordID, status: str, *, result: Any = None,
                error: str | None = None) -> None:
        if self.reporter is not None:
            self.reporter.report(record_id_text(rid), status, result=result, error=error)

    # ------------------------------------------------------------------ admission

    async def _admit_loop(self, t: _Table) -> None:
        while True:
            await t.wake.wait()
            t.wake.clear()
            t.admitting = True
            try:
                await self._admit(t)
            except DbError as e:
                log.warning("job admission on %s failed: %s; retrying in 1s", t.spec.name, e)
                await asyncio.sleep(1.0)
                t.poke(refresh=True)
            finally:
                t.admitting = False
                async with t.round_done:
                    t.rounds += 1
                    t.round_done.notify_all()

    async def _admit(self, t: _Table) -> None:
        """Claim the oldest pending rows until the table's slots are full or none is left."""
        limit = t.spec.concurrency + PREFETCH
        read_all = False  # the last read returned every pending row
        while t.running < t.spec.concurrency:
            if t.refresh or not t.candidates:
                if read_all and not t.refresh:
                    return  # every pending row was tried since the read
                t.refresh = False
                pending = await self.db.query_one(
                    rows.oldest_pending(t.spec.name, limit), idempotent=True) or []
                read_all = len(pending) < limit
                t.candidates = deque(r["id"] for r in pending)
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
            *rows.claim(rids, self.ssp_id, t.spec.lease_secs)) or []
        won = {record_id_text(r["id"]): r for r in got}
        claimed = [won[k] for k in map(record_id_text, rids) if k in won]
        self.stats["claimed"] += len(claimed)
        for row in claimed:
            self._report(row["id"], "running")
        return claimed

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
        attempts = int(row.get("attempts") or 0)
        try:
            if row.get("kill_requested"):
                self.stats["killed"] += 1
                await self._finish_failed(rid, error_entry("killed", "killed", attempt=attempts),
                                          attempts=attempts)
                log.info("job %s killed before it ran", key)
                return
            max_retries = row_max_retries(row.get("max_retries"))
            while True:
                attempts += 1
                self.stats["attempts"] += 1
                a = await self._call(t, row, key, attempts)
                if a.error is None:
                    if await self._write(rows.complete(rid, self.ssp_id, a.result, attempts)):
                        self._report(rid, "completed", result=a.result)
                    self.stats["completed"] += 1
                    return
                if not a.retry or attempts > max_retries:
                    await self._finish_failed(rid, a.error, attempts=attempts)
                    self.stats["failed"] += 1
                    log.info("job %s failed after %d attempts%s: %s", key, attempts,
                             "" if a.retry else " (not retried)", a.error["error"])
                    return
                if not await self._write(rows.note_error(rid, self.ssp_id, a.error, attempts)):
                    log.warning("job %s is no longer ours: no further attempt", key)
                    return
                wait = backoff_secs(t.spec.backoff_ms, attempts)
                await asyncio.sleep(wait if a.wait is None else max(wait, a.wait))
        except asyncio.CancelledError:
            r = self.inflight.get(key)
            if r is None or not r.killing:
                raise  # shutdown or lost lease: the row is handed back or already not ours
            self.stats["killed"] += 1
            try:
                await self._finish_failed(rid, error_entry("killed", "killed", attempt=attempts),
                                          attempts=attempts)
            except DbError as e:
                # The row keeps kill_requested: recovery hands it back and it fails at dequeue.
                log.warning("job %s killed, writing its outcome failed (%s); left for "
                            "recovery", key, e)
                return
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

    async def _call(self, t: _Table, row: dict[str, Any], key: str, attempt: int) -> _Attempt:
        """One backend call, classified (see the module docstring)."""
        assert self.session is not None
        try:
            url = job_url(t.spec.base_url, row.get("path"))
        except JobPathError as e:  # never sent: the bearer would go outside the base path
            return _Attempt(error=error_entry("rejected", str(e)[:ERROR_TEXT_MAX], attempt=attempt),
                            retry=False)
        headers = {"X-Job-Id": key}
        timeout = row_timeout(row.get("timeout_secs")) or t.spec.timeout_secs
        if t.spec.auth_token:
            headers["Authorization"] = f"Bearer {t.spec.auth_token}"
        try:
            async with self.session.post(
                    url, json=jsonable(row.get("payload")), headers=headers,
                    allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                text = await resp.text(errors="replace")
                if 200 <= resp.status < 300:
                    return _Attempt(result=parse_result(text))
                again = retried(resp.status)
                message = redact(f"backend answered {resp.status}: {text}",
                                 t.secrets)[:ERROR_TEXT_MAX]
                return _Attempt(
                    error=error_entry("http" if again else "rejected", message, attempt=attempt,
                                 status=resp.status),
                    retry=again,
                    wait=retry_after_secs(resp.headers.get("Retry-After")) if again else None)
        except TimeoutError:
            return _Attempt(error=error_entry(
                "timeout", f"backend timed out after {timeout:g}s", attempt=attempt))
        except aiohttp.ClientError as e:
            message = redact(f"backend unreachable: {type(e).__name__}: {e}", t.secrets)
            return _Attempt(error=error_entry("unreachable", message[:ERROR_TEXT_MAX],
                                         attempt=attempt))

    async def _renew(self, t: _Table, rid: RecordID, key: str) -> None:
        """Renew the lease every third of it; a kill flagged on the row (by any SSP that got
        the broadcast, so also when this one missed it) cancels the job here."""
        every = max(0.05, t.spec.lease_secs / 3)
        while True:
            await asyncio.sleep(every)
            try:
                got = await self.db.query_one(*rows.renew(rid, self.ssp_id, t.spec.lease_secs))
            except DbError as e:
                log.warning("job %s: lease renewal failed: %s", key, e)
                continue
            r = self.inflight.get(key)
            if not got:
                if r is not None and not r.killing:
                    log.warning("job %s is no longer ours (lease lost): cancelling the call", key)
                    r.task.cancel()
                return
            if got[0].get("kill_requested") is True and r is not None and not r.killing:
                log.info("job %s: kill requested on its row, cancelling the call", key)
                r.kill()
                return

    async def _write(self, stmt: rows.Statement) -> bool:
        """Run a write to our processing row (`jobs.rows.owned`); False when it is no longer
        ours (nothing written)."""
        got = await self.db.query_one(*stmt)
        return bool(got)

    async def _finish_failed(self, rid: RecordID, err: dict[str, Any], *, attempts: int
                             ) -> None:
        if await self._write(rows.fail(rid, self.ssp_id, err, attempts)):
            self._report(rid, "failed", error=str(err["error"]))

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
        row = await self.db.query_one(*rows.status(rid), idempotent=True)
        if not isinstance(row, dict):
            raise JobNotFound(f"no job {record_id_text(rid)}")
        return str(row.get("status"))

    async def kill(self, job_id: str) -> dict[str, Any]:
        """Cancel the job if it runs here, else flag a live row to fail at dequeue (or, when
        another SSP runs it, at that SSP's next lease renewal)."""
        _, rid = self._job_id(job_id)
        key = record_id_text(rid)
        flagged = None
        if key not in self.inflight:
            # Any live row, ours included: this SSP may claim it during this UPDATE.
            flagged = await self.db.query_one(*rows.flag_kill(rid))
        r = self.inflight.get(key)
        if r is not None:
            r.kill()
            await asyncio.gather(r.task, return_exceptions=True)
            return {"id": key, "action": "cancelled", "status": await self._status(rid)}
        if flagged:
            return {"id": key, "action": "flagged", "status": flagged[0].get("status")}
        return {"id": key, "action": "none", "status": await self._status(rid)}

    async def retry(self, job_id: str) -> dict[str, Any]:
        """Terminal -> pending (errors kept) and admitted; NotTerminal / JobNotFound."""
        t, rid = self._job_id(job_id)
        got = await self.db.query_one(*rows.reset_terminal(rid))
        if not got:
            raise NotTerminal(await self._status(rid))
        self._report(rid, "pending")
        t.poke(refresh=True)
        log.info("job %s reset to pending for retry", record_id_text(rid))
        return {"id": record_id_text(rid), "status": "pending"}

    async def recover_once(self, table: str | None = None) -> dict[str, Any]:
        """Processing rows with an expired lease -> pending; then admit every table."""
        reclaimed = 0
        for name, t in self.tables.items():
            if table is not None and name != table:
                continue
            got = await self.db.query_one(rows.recover_expired(name))
            for row in got or []:
                log.info("job %s: lease expired, back to pending", record_id_text(row["id"]))
                self._report(row["id"], "pending")
            reclaimed += len(got or [])
            t.poke(refresh=True)
        self.stats["reclaimed"] += reclaimed
        return {"ssp_id": self.ssp_id, "reclaimed": reclaimed}

    async def dispatch(self, job_id: str) -> dict[str, Any]:
        """`/job/recover {id}` (the scheduler's dispatch): reclaim, admit the table now, and
        report the job row after that admission round: `{id, status, assignee}`;
        JobNotFound when there is no such row. A pending row left over means every slot of
        this SSP is taken (or older rows come first): it waits for one here."""
        t, rid = self._job_id(job_id)
        await self.recover_once(t.spec.name)
        await t.admitted(DISPATCH_WAIT_SECS)
        row = await self.db.query_one(*rows.read(rid, "status", "assignee"), idempotent=True)
        if not isinstance(row, dict):
            raise JobNotFound(f"no job {record_id_text(rid)}")
        return {"id": record_id_text(rid), "status": row.get("status"),
                "assignee": row.get("assignee")}

    async def _sweep_loop(self) -> None:
        while True:
            try:
                await self.recover_once()
            except DbError as e:
                log.warning("job recovery sweep failed: %s", e)
            await asyncio.sleep(self.sweep_secs)


# ---------------------------------------------------------------------------- hub routes


def job_routes(runner_of: Callable[[Any], JobRunner], stalled: Callable[[Any], bool]
               ) -> dict[str, Callable[[Any, dict[str, Any]], Awaitable[dict[str, Any]]]]:
    """The hub's handlers for `POST /job/kill`, `/job/retry`, `/job/recover` (bodies already
    shape-checked by the gateway, `ipc.routebodies.JobRef`)."""

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
        runner = runner_of(hub)
        if isinstance(body.get("id"), str):  # a dispatch of one job
            try:
                job = await runner.dispatch(body["id"])
            except JobNotFound as e:
                return error_reply(404, ErrorCode.NOT_FOUND, str(e))
            return reply(200, {"ssp_id": runner.ssp_id, "job": job})
        if table is not None and not runner.is_job_table(table):
            return error_reply(404, ErrorCode.NOT_FOUND, f"{table} is not a job table")
        return reply(200, await runner.recover_once(table))

    return {"POST /job/kill": kill, "POST /job/retry": retry, "POST /job/recover": recover}


__all__ = ["JobNotFound", "JobRunner", "NotTerminal", "job_routes"]
