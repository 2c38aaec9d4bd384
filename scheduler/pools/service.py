"""The machine pools of one scheduler: sizing, the breaker, job hand-out, leases, results.

Jobs of a pooled backend are rows of its outbox job table, exactly as the SSPs run them
(``ssp/jobs.py``): the database is the queue and the lock. The difference is who claims:

* take (an agent with free slots asks): the oldest runnable ``pending`` rows of the pool's
  tables are claimed with the SSP's conditional ``UPDATE ... WHERE status = 'pending'``
  (``processing``, ``assignee`` = the machine id, ``lease_until``), at most the machine's free
  slots (exact: the service counts what it handed out and has no result for yet);
* heartbeat (every ``SVC_POOL_HEARTBEAT_MS``): renews the leases of the machine's jobs and
  answers which to cancel (killed on the row, or no longer ours) and whether to drain;
* result: the agent reports the backend's raw answer; the service classifies it with the
  SSP's policy (``jobs.policy``: which failures are retried, error entries, secrets masked)
  and writes the row, conditional on it still being this machine's. A retried failure goes
  back to ``pending`` with ``not_before`` (the backoff), so any machine may take it next;
* recovery: a machine that stops heartbeating for ``SVC_POOL_MACHINE_TIMEOUT_MS``, or whose
  process the provider reports gone, is ``lost`` and its ``processing`` rows go back to
  ``pending`` at once; rows whose lease expired (any owner) are reclaimed by the sweep.
  At-least-once, as for the SSPs: a backend may see a job twice (``X-Job-Id`` is the key).

Machine states: ``booting`` -> ``ready`` (registered) -> ``draining`` -> ``destroyed``;
``lost`` (silent or gone) and ``failed`` (never registered) are the other terminal states.
Pool status (spec): ``unhealthy`` when the boot breaker is open or the last sweep failed,
else ``healthy`` with a ready machine, ``starting`` with a booting machine or a job waiting,
``idle`` otherwise (no machine, nothing queued).

Sizing, per tick (``SVC_POOL_TICK_MS``): a machine is booted while fewer than
``min_machines`` run, or jobs wait beyond the free slots of booting and ready machines and
fewer than ``max_machines`` run; a ready machine without jobs for ``idle_secs`` is drained
while more than ``min_machines`` run and nothing waits. Paused: no machine is booted and no
job handed out; running jobs finish. Breaker: ``breaker_failures`` boot failures in a row
open it (a ``pool_breaker_open`` incident, component ``pool:<name>``); after
``breaker_cooldown_secs`` one trial machine boots (``half_open``); its registration closes the
breaker and records the incident ``recovered``, its failure opens it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from pathlib import Path
from typing import Any

from surrealdb import RecordID

from dbclient import Database, DbError
from dbclient.errors import UNREACHABLE_CODE, unreachable_message
from dbclient.tasks import cancel_and_wait
from engine.jsonvalues import to_json as jsonable
from engine.values import parse_record_id, record_id_text
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
    secrets_of,
)
from jobs.tables import JobTable
from scheduler.pools.config import PoolsConfig
from scheduler.pools.fleet import Assigned, Fleet, Pool, token_hash
from scheduler.pools.provider import Provider, make_provider
from scheduler.pools.sizing import Sizer
from scheduler.pools.store import ACTIVE, Machine, PoolState, PoolStore, now_ms

log = logging.getLogger("scheduler.pools")

PREFETCH = 16
TAKE_WAIT_MAX_MS = 5000
RESULT_BODY_MAX = 70_000
LOST_TAKE_SECS = 10.0  # a job handed out but not reported running this long is handed back


class PoolError(Exception):
    """A refusal with a status, a stable code and a sentence (never a secret)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def reply(self) -> tuple[int, dict[str, Any]]:
        """(status, body) as the pool and admin routes answer it."""
        return self.status, {"error": self.code, "message": self.message}


def db_down() -> PoolError:
    """The pools' one 503 for a database that did not answer (a read or write of a job row
    or of the pool tables)."""
    return PoolError(503, UNREACHABLE_CODE, unreachable_message())


class PoolService:
    """See the module docstring. The composition of a pool scheduler: the machines
    (`Fleet`, which both halves change), the request-driven half (this class: the agents'
    routes, hand-out, results, the operator actions) and the clock-driven half (`Sizer`)."""

    def __init__(self, cfg: PoolsConfig, db: Database, data_dir: Path, incidents: Any, *,
                 providers: dict[str, Provider] | None = None) -> None:
        self.cfg = cfg
        self.db = db
        self.incidents = incidents
        self.store = PoolStore(data_dir / "pools.sqlite3")
        self.log_dir = data_dir / "pool-agents"
        self.providers: dict[str, Provider] = providers or {}
        self.fleet = Fleet(db, self.store)
        # the fleet's tables, never replaced: the halves share them through the fleet
        self.pools = self.fleet.pools
        self.machines = self.fleet.machines
        self.assigned = self.fleet.assigned
        self.sizer = Sizer(cfg, self.fleet, incidents)
        self._loop_task: asyncio.Task[None] | None = None

    @property
    def stopping(self) -> bool:
        return self.fleet.stopping

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        saved = self.store.pools()
        for spec in self.cfg.pools:
            provider = self.providers.get(spec.provider)
            if provider is None:
                provider = self.providers[spec.provider] = make_provider(spec.provider,
                                                                         self.log_dir)
            state = saved.get(spec.name) or PoolState(spec.name)
            sec: tuple[str, ...] = tuple(s for t in spec.tables for s in secrets_of(t))
            self.pools[spec.name] = Pool(spec, state, provider, secrets=sec)
            self.store.save_pool(state)
        now = now_ms()
        for m in self.store.machines():
            if m.active:
                # A machine of the previous scheduler process: it gets a full timeout to
                # heartbeat this one before it counts as lost.
                m.last_contact_at = now
            self.machines[m.id] = m
        await self.db.connect()
        self._loop_task = asyncio.get_running_loop().create_task(self.sizer.run(), name="pools")
        log.info("machine pools: %s", ", ".join(
            f"{p.spec.name} ({p.spec.provider}, {p.spec.slots} slots x {p.spec.max_machines}, "
            f"tables {[t.name for t in p.spec.tables]}, paused={p.state.paused})"
            for p in self.pools.values()) or "none")

    async def close(self) -> None:
        """Stop sizing; end this process's machines and hand their jobs back."""
        self.fleet.stopping = True
        if self._loop_task is not None:
            await cancel_and_wait(self._loop_task)  # a lost cancel: dbclient.tasks
        for m in list(self.machines.values()):
            if m.active:
                await self.fleet.remove(m, "destroyed", "scheduler stopped", force=False)
        for provider in self.providers.values():
            await provider.stop_all()
        with contextlib.suppress(Exception):
            await self.db.close()
        self.store.close()

    # ------------------------------------------------------------------ agent routes

    def _machine(self, machine_id: str, token: str | None) -> Machine:
        m = self.machines.get(machine_id)
        if m is None:
            raise PoolError(404, "unknown_machine", "no machine with that id")
        if not token or not hmac.compare_digest(token_hash(token), m.token_hash):
            raise PoolError(401, "unauthorized", "the machine token does not match")
        if not m.active:
            raise PoolError(410, "machine_removed", f"the machine is {m.state}")
        return m

    def _touch(self, m: Machine) -> None:
        m.last_contact_at = now_ms()

    async def register(self, machine_id: str, token: str | None, body: dict[str, Any]
                       ) -> dict[str, Any]:
        m = self._machine(machine_id, token)
        self._touch(m)
        p = self.pools[m.pool]
        if m.state == "booting":
            m.state = "ready"
            m.ready_at = now_ms()
            self.fleet.idle_since[m.id] = time.monotonic()
            self.store.save_machine(m)
            self.sizer.boot_succeeded(p, m)
            log.info("machine %s of pool %s is ready", m.id, m.pool)
        return {"machine": m.public(), "heartbeat_ms": self.cfg.heartbeat_ms,
                "drain": m.state == "draining"}

    async def heartbeat(self, machine_id: str, token: str | None, body: dict[str, Any]
                        ) -> dict[str, Any]:
        m = self._machine(machine_id, token)
        self._touch(m)
        reported = [str(x) for x in body.get("running") or [] if isinstance(x, str)][:1000]
        cancel: list[str] = []
        # After a scheduler restart the service has no hand-out record: adopt what the agent
        # runs (the renewal below keeps only rows still assigned to this machine).
        for job_id in reported:
            if job_id not in m.running:
                m.running.append(job_id)
        # Generous: a take answer still on its way (a loaded machine) must not count as lost.
        grace = max(LOST_TAKE_SECS, 5 * self.cfg.heartbeat_ms / 1000)
        for job_id in list(m.running):
            a = self.assigned.get(job_id)
            if job_id not in reported and (a is None or time.monotonic() - a.at > grace):
                # Handed out but the agent does not run it (the take answer was lost):
                # back to pending so it is not stuck until the machine dies.
                await self.fleet.release_one(m, job_id, "not running on its machine")
        renewed = await self._renew(m)
        for job_id in list(m.running):
            if job_id not in renewed:
                cancel.append(job_id)
                self.fleet.forget(m, job_id)
            elif renewed[job_id]:
                cancel.append(job_id)  # kill requested on the row: the agent reports killed
        return {"state": m.state, "drain": m.state == "draining",
                "paused": self.pools[m.pool].state.paused, "cancel": cancel,
                "slots_in_use": len(m.running)}

    async def take(self, machine_id: str, token: str | None, body: dict[str, Any]
                   ) -> dict[str, Any]:
        m = self._machine(machine_id, token)
        self._touch(m)
        p = self.pools[m.pool]
        want = body.get("max", m.slots)
        if isinstance(want, bool) or not isinstance(want, int) or want < 0:
            raise PoolError(400, "invalid", "max must be an integer >= 0")
        wait_ms = body.get("wait_ms", 0)
        if isinstance(wait_ms, bool) or not isinstance(wait_ms, int) or wait_ms < 0:
            raise PoolError(400, "invalid", "wait_ms must be an integer >= 0")
        deadline = time.monotonic() + min(wait_ms, TAKE_WAIT_MAX_MS) / 1000
        while True:
            jobs = await self._hand_out(p, m, want)
            if jobs or time.monotonic() >= deadline or m.state != "ready" or self.stopping:
                return {"jobs": jobs, "drain": m.state == "draining",
                        "paused": p.state.paused}
            p.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(p.wake.wait(), max(0.0, deadline - time.monotonic()))

    async def result(self, machine_id: str, token: str | None, body: dict[str, Any]
                     ) -> dict[str, Any]:
        m = self._machine(machine_id, token)
        self._touch(m)
        job_id = body.get("job_id")
        if not isinstance(job_id, str) or job_id not in m.running:
            raise PoolError(409, "not_assigned", "that job is not assigned to this machine")
        a = self.assigned.get(job_id) or await self._reload(m, job_id)
        if a is None:
            self.fleet.forget(m, job_id)
            raise PoolError(409, "not_assigned", "that job is no longer this machine's")
        outcome = self._classify(self.pools[m.pool], a, body)
        rid = parse_record_id(job_id)
        n = a.attempts + 1
        if outcome["kind"] == "completed":
            stmt = rows.complete(rid, m.id, outcome["result"], n)
        elif outcome["retry"] and n <= a.max_retries:
            wait = backoff_secs(a.table.backoff_ms, n)
            if outcome["wait"] is not None:
                wait = max(wait, outcome["wait"])
            stmt = rows.retry_later(rid, m.id, outcome["error"], n, wait)
        else:
            stmt = rows.fail(rid, m.id, outcome["error"], n)
        got = await self.db.query_one(*stmt)
        self.fleet.forget(m, job_id)
        self.pools[m.pool].wake.set()  # a slot is free
        if not got:
            return {"job_id": job_id, "written": False}
        log.info("job %s on %s: %s", job_id, m.id,
                 outcome["kind"] if outcome["kind"] == "completed" else
                 ("retry later" if outcome["retry"] and n <= a.max_retries else "failed"))
        return {"job_id": job_id, "written": True}

    async def drained(self, machine_id: str, token: str | None) -> dict[str, Any]:
        m = self._machine(machine_id, token)
        self._touch(m)
        for job_id in list(m.running):
            await self.fleet.release_one(m, job_id, "machine left")
        await self.fleet.remove(m, "destroyed", m.drain_reason or "drained")
        return {"machine": m.public()}

    # ------------------------------------------------------------------ operator actions

    def pool_names(self) -> list[str]:
        return sorted(self.pools)

    def pause(self, name: str, paused: bool) -> dict[str, Any]:
        p = self.pools.get(name)
        if p is None:
            raise PoolError(404, "not_found", "no pool with that name")
        if p.state.paused != paused:
            p.state.paused = paused
            p.state.paused_at = now_ms() if paused else None
            self.store.save_pool(p.state)
            log.info("pool %s %s", name, "paused" if paused else "resumed")
        p.wake.set()
        return self.pool_view(p)

    def drain(self, machine_id: str, reason: str = "operator drain") -> dict[str, Any]:
        m = self.machines.get(machine_id)
        if m is None:
            raise PoolError(404, "not_found", "no machine with that id")
        if not m.active:
            raise PoolError(409, "conflict", f"the machine is already {m.state}")
        if m.state != "draining":
            self.fleet.drain(m, reason)
        return m.public()

    # ------------------------------------------------------------------ job kill and retry

    def owns(self, job_id: str) -> bool:
        """The job is a row of a pooled table (the SSPs do not run those)."""
        try:
            table = parse_record_id(job_id).table_name
        except ValueError:
            return False
        return any(t.name == table for p in self.pools.values() for t in p.spec.tables)

    async def kill_job(self, job_id: str) -> tuple[int, Any]:
        """A pending row fails now (`killed`); a processing one is flagged and its machine
        cancels the call at its next heartbeat, reporting it `killed`. As the SSP's kill."""
        rid = parse_record_id(job_id)
        try:
            failed = await self.db.query_one(
                *rows.fail_pending_killed(rid, error_entry("killed", "killed", attempt=0)))
            if failed:
                return 200, {"id": job_id, "action": "failed", "status": "failed"}
            flagged = await self.db.query_one(*rows.flag_processing_kill(rid))
            if flagged:
                return 200, {"id": job_id, "action": "flagged", "status": "processing",
                             "machine": flagged[0].get("assignee")}
            row = await self.db.query_one(*rows.status(rid), idempotent=True)
        except DbError:
            return db_down().reply()
        if not isinstance(row, dict):
            return 404, {"error": "not_found", "message": "no such job"}
        return 200, {"id": job_id, "action": "none", "status": row.get("status")}

    async def retry_job(self, job_id: str) -> tuple[int, Any]:
        """A terminal row goes back to `pending` (errors kept, attempts reset); else 409
        `not_terminal`, as the SSP's retry."""
        rid = parse_record_id(job_id)
        try:
            got = await self.db.query_one(*rows.reset_terminal(rid, clear_backoff=True))
            row = None if got else await self.db.query_one(*rows.status(rid), idempotent=True)
        except DbError:
            return db_down().reply()
        if got:
            for p in self.pools.values():
                p.wake.set()
            return 200, {"id": job_id, "status": "pending"}
        if not isinstance(row, dict):
            return 404, {"error": "not_found", "message": "no such job"}
        return 409, {"error": "not_terminal",
                     "message": f"the job is {row.get('status')}; only completed or failed "
                                "jobs can be retried"}

    # ------------------------------------------------------------------ admin views

    def status_of(self, p: Pool) -> str:
        ms = [m for m in self.machines.values() if m.pool == p.spec.name and m.active]
        if p.state.breaker["state"] != "closed" or p.last_sweep_error:
            return "unhealthy"
        if any(m.state in ("ready", "draining") for m in ms):
            return "healthy"
        if any(m.state == "booting" for m in ms) or p.waiting:
            return "starting"
        return "idle"

    def pool_view(self, p: Pool) -> dict[str, Any]:
        ms = [m for m in self.machines.values() if m.pool == p.spec.name]
        by_state: dict[str, int] = {}
        for m in ms:
            by_state[m.state] = by_state.get(m.state, 0) + 1
        live = [m for m in ms if m.active]
        b = p.state.breaker
        return {"name": p.spec.name, "status": self.status_of(p),
                "sizing": p.spec.public(), "paused": p.state.paused,
                "paused_at": p.state.paused_at,
                "breaker": {"state": b["state"], "failures": b["failures"],
                            "opened_at": b["opened_at"], "retry_at": b["retry_at"],
                            "incident_id": b["incident_id"], "last_error": b["last_error"]},
                "machines": by_state, "busy_slots": sum(len(m.running) for m in live),
                "total_slots": sum(m.slots for m in live if m.state != "booting"),
                "jobs_waiting": p.waiting, "last_sweep_error": p.last_sweep_error}

    def running_jobs(self) -> int:
        """Pooled jobs pending or running: waiting for a slot, or on a live machine (handed
        out or running). The scheduler adds them to its `running_jobs`, since no SSP posts a
        `/job/result` for them."""
        return (sum(p.waiting for p in self.pools.values())
                + sum(len(m.running) for m in self.machines.values() if m.active))

    def list_pools(self) -> list[dict[str, Any]]:
        return [self.pool_view(self.pools[n]) for n in self.pool_names()]

    def list_machines(self, name: str) -> list[dict[str, Any]]:
        if name not in self.pools:
            raise PoolError(404, "not_found", "no pool with that name")
        ms = [m for m in self.machines.values() if m.pool == name]
        ms.sort(key=lambda m: (m.created_at, m.id), reverse=True)
        return [m.public() for m in ms]

    # ------------------------------------------------------------------ jobs

    async def _hand_out(self, p: Pool, m: Machine, want: int) -> list[dict[str, Any]]:
        if p.state.paused or m.state != "ready" or self.stopping:
            return []
        out: list[dict[str, Any]] = []
        async with p.claim:
            for t in p.spec.tables:
                free = min(want, m.slots - len(m.running)) - len(out)
                if free <= 0:
                    break
                pending = await self.db.query_one(
                    rows.oldest_pending(t.name, free + PREFETCH, runnable=True),
                    idempotent=True) or []
                ids = [r["id"] for r in pending][:free]
                if not ids:
                    continue
                got = await self.db.query_one(
                    *rows.claim(ids, m.id, t.lease_secs, clear_backoff=True)) or []
                for row in got:
                    if m.state != "ready":
                        # drained (or removed) while this claim ran: not one job more
                        await self.fleet.release_one(m, record_id_text(row["id"]), "draining")
                        continue
                    job = await self._launch(p, m, t, row)
                    if job is not None:
                        out.append(job)
        if out:
            self.fleet.idle_since.pop(m.id, None)
        return out

    async def _launch(self, p: Pool, m: Machine, t: JobTable, row: dict[str, Any]
                      ) -> dict[str, Any] | None:
        rid: RecordID = row["id"]
        key = record_id_text(rid)
        attempts = int(row.get("attempts") or 0)
        if row.get("kill_requested"):
            await self.db.query_one(*rows.fail(
                rid, m.id, error_entry("killed", "killed", attempt=attempts), attempts))
            return None
        try:
            url = job_url(t.base_url, row.get("path"))
        except JobPathError as e:  # never handed out: the bearer would leave the base path
            await self.db.query_one(*rows.fail(
                rid, m.id, error_entry("rejected", str(e), attempt=attempts + 1), attempts + 1))
            return None
        self.assigned[key] = Assigned(m.id, t, attempts, row_max_retries(row.get("max_retries")))
        m.running.append(key)
        headers = {"X-Job-Id": key}
        if t.auth_token:
            headers["Authorization"] = f"Bearer {t.auth_token}"
        return {"id": key, "url": url,
                "payload": jsonable(row.get("payload")), "headers": headers,
                "timeout_secs": t.timeout_secs, "attempt": attempts + 1}

    def _classify(self, p: Pool, a: Assigned, body: dict[str, Any]) -> dict[str, Any]:
        n = a.attempts + 1
        kind = body.get("error_kind")
        status = body.get("status")
        text = str(body.get("body") or "")[:RESULT_BODY_MAX]
        if kind is None and isinstance(status, int) and 200 <= status < 300:
            return {"kind": "completed", "result": parse_result(text)}
        if kind == "killed":
            return {"kind": "failed", "retry": False, "wait": None,
                    "error": error_entry("killed", "killed", attempt=n)}
        if kind == "timeout":
            return {"kind": "failed", "retry": True, "wait": None, "error": error_entry(
                "timeout", f"backend timed out after {a.table.timeout_secs:g}s", attempt=n)}
        if kind is None and isinstance(status, int):
            again = retried(status)
            message = redact(f"backend answered {status}: {text}",
                             p.secrets)[:ERROR_TEXT_MAX]
            return {"kind": "failed", "retry": again,
                    "wait": retry_after_secs(body.get("retry_after")) if again else None,
                    "error": error_entry("http" if again else "rejected", message, attempt=n,
                                    status=status)}
        message = redact(f"backend unreachable: {body.get('error') or kind!s}", p.secrets)
        return {"kind": "failed", "retry": True, "wait": None,
                "error": error_entry("unreachable", message[:ERROR_TEXT_MAX], attempt=n)}

    async def _reload(self, m: Machine, job_id: str) -> Assigned | None:
        """An adopted job (scheduler restarted while it ran): its row, if still ours."""
        try:
            rid = parse_record_id(job_id)
        except ValueError:
            return None
        t = next((t for t in self.pools[m.pool].spec.tables if t.name == rid.table_name), None)
        if t is None:
            return None
        row = await self.db.query_one(
            *rows.read(rid, "attempts", "max_retries", "assignee", "status"), idempotent=True)
        if not isinstance(row, dict) or row.get("assignee") != m.id \
                or row.get("status") != "processing":
            return None
        a = Assigned(m.id, t, int(row.get("attempts") or 0),
                      row_max_retries(row.get("max_retries")))
        self.assigned[job_id] = a
        return a

    async def _renew(self, m: Machine) -> dict[str, bool]:
        """Renew the leases of the machine's jobs: {job id: kill requested} of rows still
        this machine's (a job missing from the answer is no longer its)."""
        by_table: dict[str, list[RecordID]] = {}
        for job_id in m.running:
            with contextlib.suppress(ValueError):
                rid = parse_record_id(job_id)
                by_table.setdefault(rid.table_name, []).append(rid)
        tables = {t.name: t for t in self.pools[m.pool].spec.tables}
        out: dict[str, bool] = {}
        for name, rids in by_table.items():
            t = tables.get(name)
            if t is None:
                continue
            got = await self.db.query_one(*rows.renew(rids, m.id, t.lease_secs)) or []
            for row in got:
                out[record_id_text(row["id"])] = row.get("kill_requested") is True
        return out


__all__ = ["ACTIVE", "PoolError", "PoolService", "db_down"]
