"""Pool sizing, the boot breaker and the lease sweep: the tick of each pool
(``scheduler.pools.service`` describes the rules; this is the part that runs on the clock)."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import Any

from dbclient import DbError
from dbclient.clock import now_ms
from engine.values import record_id_text
from jobs import rows
from scheduler.pools.config import PoolsConfig
from scheduler.pools.fleet import Fleet, Pool, token_hash
from scheduler.pools.provider import BootError
from scheduler.pools.store import Machine

log = logging.getLogger("scheduler.pools")

SWEEP_EVERY_SECS = 2.0  # expired-lease recovery on the pool tables


class Sizer:
    """The tick: machine liveness, lease sweep, sizing up and down, the boot breaker. The
    pool service composes it over the shared `Fleet` and calls `boot_succeeded` when a
    booted machine registers."""

    def __init__(self, cfg: PoolsConfig, fleet: Fleet, incidents: Any) -> None:
        self.cfg = cfg
        self.fleet = fleet
        self.db = fleet.db
        self.store = fleet.store
        self.incidents = incidents

    async def run(self) -> None:
        while True:
            for p in list(self.fleet.pools.values()):
                try:
                    await self.tick(p)
                    p.last_sweep_error = None
                except DbError as e:
                    p.last_sweep_error = str(e)[:300]
                    log.warning("pool %s: sweep failed: %s", p.spec.name, e)
                except Exception:
                    p.last_sweep_error = "internal error (logged)"
                    log.exception("pool %s: sweep failed", p.spec.name)
            await asyncio.sleep(self.cfg.tick_ms / 1000)

    async def tick(self, p: Pool) -> None:
        spec = p.spec
        now = now_ms()
        for m in [m for m in self.fleet.machines.values() if m.pool == spec.name and m.active]:
            alive = p.provider.alive(m.provider_ref)
            if m.state == "booting":
                if alive is False:
                    code = p.provider.exit_code(m.provider_ref)
                    why = f"the agent exited{f' with code {code}' if code is not None else ''}" \
                          " before it registered"
                    await self.fleet.remove(m, "failed", why)
                    self._boot_failed(p, why)
                elif now - m.created_at > spec.boot_timeout_secs * 1000:
                    why = f"the agent did not register within {spec.boot_timeout_secs}s"
                    await self.fleet.remove(m, "failed", why, force=True)
                    self._boot_failed(p, why)
                continue
            if alive is False:
                code = p.provider.exit_code(m.provider_ref)
                if m.state == "draining" and code == 0:
                    await self.fleet.remove(m, "destroyed", m.drain_reason or "drained")
                else:
                    await self.fleet.remove(m, "lost", "the agent process exited" +
                                       (f" (code {code})" if code is not None else ""))
            elif now - (m.last_contact_at or m.created_at) > self.cfg.machine_timeout_ms:
                await self.fleet.remove(m, "lost", "no heartbeat for "
                                   f"{self.cfg.machine_timeout_ms / 1000:g}s", force=True)
            elif m.state == "draining" and not m.running:
                await self.fleet.remove(m, "destroyed", m.drain_reason or "drained")
        if time.monotonic() - p.last_sweep >= SWEEP_EVERY_SECS:
            p.last_sweep = time.monotonic()
            await self._sweep_leases(p)
        p.waiting = await self._count_waiting(p)
        if p.waiting:
            p.wake.set()
        self.size(p)

    async def _sweep_leases(self, p: Pool) -> None:
        for t in p.spec.tables:
            got = await self.db.query_one(rows.recover_expired(t.name)) or []
            for row in got:
                key = record_id_text(row["id"])
                a = self.fleet.assigned.get(key)
                if a is not None and a.machine in self.fleet.machines:
                    self.fleet.forget(self.fleet.machines[a.machine], key)
                log.info("job %s: lease expired, back to pending", key)

    async def _count_waiting(self, p: Pool) -> int:
        n = 0
        for t in p.spec.tables:
            got = await self.db.query_one(rows.count_runnable(t.name), idempotent=True) or []
            n += int(got[0]["n"]) if got else 0
        return n

    def size(self, p: Pool) -> None:
        spec = p.spec
        ms = [m for m in self.fleet.machines.values() if m.pool == spec.name]
        running = [m for m in ms if m.state in ("booting", "ready")]
        if not p.state.paused and not self.fleet.stopping:
            free = sum(m.slots - len(m.running) for m in running)
            wanted = (len(running) < spec.min_machines
                      or (p.waiting > free and len(running) < spec.max_machines))
            if wanted and self._breaker_allows(p, ms):
                self._boot(p)
                return
        # Scale down: idle ready machines above the minimum, nothing waiting.
        if p.waiting:
            return
        idle = [m for m in running if m.state == "ready" and not m.running
                and time.monotonic() - self.fleet.idle_since.get(m.id, time.monotonic())
                > spec.idle_secs]
        keep = len(running)
        for m in idle:
            if keep <= spec.min_machines:
                break
            self.fleet.drain(m, "idle")
            keep -= 1

    def _boot(self, p: Pool) -> None:
        mid = f"m-{p.spec.name}-{secrets.token_hex(4)}"
        token = secrets.token_urlsafe(24)
        m = Machine(mid, p.spec.name, slots=p.spec.slots, token_hash=token_hash(token))
        self.fleet.machines[mid] = m
        try:
            m.provider_ref = p.provider.boot(p.spec, mid, token, self.cfg.agent_url,
                                             self.cfg.heartbeat_ms)
        except BootError as e:
            m.state = "failed"
            m.removed_at = now_ms()
            m.removal_reason = str(e)
            self.store.save_machine(m)
            self._boot_failed(p, str(e))
            return
        self.store.save_machine(m)
        log.info("pool %s: booting machine %s (%s)", p.spec.name, mid, m.provider_ref)

    def _breaker_allows(self, p: Pool, ms: list[Machine]) -> bool:
        b = p.state.breaker
        if b["state"] == "closed":
            return True
        if b["state"] == "open" and now_ms() >= (b["retry_at"] or 0):
            b["state"] = "half_open"
            self.store.save_pool(p.state)
            log.info("pool %s: breaker half-open, one trial machine", p.spec.name)
            return True
        # half-open: one trial at a time
        return b["state"] == "half_open" and not any(m.state == "booting" for m in ms)

    def _boot_failed(self, p: Pool, why: str) -> None:
        b = p.state.breaker
        b["failures"] += 1
        b["last_error"] = why
        log.warning("pool %s: boot failure %d: %s", p.spec.name, b["failures"], why)
        if b["state"] == "half_open" or b["failures"] >= p.spec.breaker_failures:
            was_open = b["state"] != "closed"
            b["state"] = "open"
            b["opened_at"] = b["opened_at"] if was_open and b["opened_at"] else now_ms()
            b["retry_at"] = now_ms() + p.spec.breaker_cooldown_secs * 1000
            summary = (f"pool {p.spec.name}: {b['failures']} machine boots failed in a row "
                       f"(last: {why}); no new machine for {p.spec.breaker_cooldown_secs}s")
            iid = b["incident_id"]
            if iid and self.incidents.get(iid) and self.incidents.get(iid)["state"] == "open":
                self.incidents.event(iid, summary)
            else:
                b["incident_id"] = self.incidents.open(f"pool:{p.spec.name}",
                                                       "pool_breaker_open", summary)
        self.store.save_pool(p.state)

    def boot_succeeded(self, p: Pool, m: Machine) -> None:
        b = p.state.breaker
        was = b["state"]
        b["failures"] = 0
        if was != "closed":
            b.update(state="closed", opened_at=None, retry_at=None)
            if b["incident_id"]:
                self.incidents.end(b["incident_id"], "recovered",
                                   f"pool {p.spec.name}: machine {m.id} registered; breaker "
                                   "closed")
            b["incident_id"] = None
            log.info("pool %s: breaker closed", p.spec.name)
        self.store.save_pool(p.state)

