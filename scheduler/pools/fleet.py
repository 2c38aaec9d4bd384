"""The machines of one scheduler's pools: the runtime of each pool, its machines, the jobs
handed to them, and the moves both halves of the pool service make on a machine (a job
forgotten or handed back, a machine drained or removed with its jobs). The request-driven
half (``scheduler.pools.service``: the agents' routes) and the clock-driven half
(``scheduler.pools.sizing``: liveness, sweep, sizing) share this one fleet, and neither
calls the other for it."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from dataclasses import dataclass, field

from dbclient import Database, DbError
from dbclient.clock import now_ms
from engine.values import parse_record_id
from jobs import rows
from jobs.tables import JobTable
from scheduler.pools.config import PoolSpec
from scheduler.pools.provider import Provider
from scheduler.pools.store import KEEP_TERMINAL, Machine, PoolState, PoolStore

log = logging.getLogger("scheduler.pools")

__all__ = ["Assigned", "Fleet", "Pool", "token_hash"]


def token_hash(token: str) -> str:
    """What is kept of a machine's token (compared in constant time at each call)."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class Pool:
    """One pool's runtime: its spec, persisted state, provider and tick bookkeeping."""

    spec: PoolSpec
    state: PoolState
    provider: Provider
    waiting: int = 0
    last_sweep_error: str | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    claim: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_sweep: float = 0.0
    secrets: tuple[str, ...] = ()


@dataclass
class Assigned:
    """A job handed to a machine and not reported yet."""

    machine: str
    table: JobTable
    attempts: int
    max_retries: int
    at: float = field(default_factory=time.monotonic)


class Fleet:
    def __init__(self, db: Database, store: PoolStore) -> None:
        self.db = db
        self.store = store
        self.pools: dict[str, Pool] = {}
        self.machines: dict[str, Machine] = {}
        self.assigned: dict[str, Assigned] = {}
        self.idle_since: dict[str, float] = {}
        #: the scheduler is stopping: no machine is booted, no job handed out
        self.stopping = False

    def forget(self, m: Machine, job_id: str) -> None:
        with contextlib.suppress(ValueError):
            m.running.remove(job_id)
        self.assigned.pop(job_id, None)
        if not m.running:
            self.idle_since[m.id] = time.monotonic()

    async def release_one(self, m: Machine, job_id: str, why: str) -> None:
        with contextlib.suppress(ValueError, DbError):
            got = await self.db.query_one(*rows.hand_back(parse_record_id(job_id), m.id))
            if got:
                log.info("job %s back to pending (%s: %s)", job_id, m.id, why)
        self.forget(m, job_id)
        self.pools[m.pool].wake.set()

    async def release_all(self, m: Machine, why: str) -> int:
        """Every processing row this machine holds -> pending (its rows, not only the ones
        in memory: a take answered just before the machine died counts too)."""
        n = 0
        for t in self.pools[m.pool].spec.tables:
            got = await self.db.query_one(*rows.hand_back_all(t.name, m.id)) or []
            n += len(got)
        for job_id in list(m.running):
            self.forget(m, job_id)
        if n:
            log.info("machine %s %s: %d jobs back to pending", m.id, why, n)
            self.pools[m.pool].wake.set()
        return n

    def drain(self, m: Machine, reason: str) -> None:
        m.state = "draining"
        m.drain_reason = reason
        self.store.save_machine(m)
        self.pools[m.pool].wake.set()  # a long-polling take of this machine answers now
        log.info("machine %s draining (%s)", m.id, reason)

    async def remove(self, m: Machine, state: str, reason: str, *, force: bool = False
                     ) -> None:
        if not m.active:
            return
        try:
            await self.release_all(m, state)
        except DbError as e:
            # The rows keep their lease: the sweep (or the SSP-style lease expiry) frees them.
            log.warning("machine %s: handing its jobs back failed (%s); left for the lease "
                        "sweep", m.id, e)
        m.state = state
        m.removed_at = now_ms()
        m.removal_reason = reason
        self.idle_since.pop(m.id, None)
        self.store.save_machine(m)
        self.pools[m.pool].provider.destroy(m.provider_ref, force=force)
        log.info("machine %s of pool %s %s: %s", m.id, m.pool, state, reason)
        self._prune(m.pool)

    def _prune(self, pool: str) -> None:
        done = sorted((m for m in self.machines.values() if m.pool == pool and not m.active),
                      key=lambda m: m.created_at)
        for m in done[:-KEEP_TERMINAL]:
            self.machines.pop(m.id, None)
