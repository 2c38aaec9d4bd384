"""The scheduler's SSP pool: registration, the state machine (Bootstrapping -> Replaying ->
Ready), flags, removal, heartbeats, the health poll and the reaper (see `scheduler.core`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

import aiohttp

from scheduler.entries import (
    Outbound,
    Reply,
    SspEntry,
    SspState,
)

log = logging.getLogger("scheduler")

# Registration is open to the private network without SVC_AUTH_SECRET (and to every holder of
# it with one): these bound what a flood of registrations can hold. Each Bootstrapping entry
# freezes the replica and buffers events, so at most MAX_BOOTSTRAPPING may exist at once, and
# at most MAX_SSPS entries in all; an entry whose URL has not answered a single health poll
# UNANSWERED_EVICT_SECS after it registered (or `bootstrap_timeout_secs`, when shorter) is
# removed (a real SSP's gateway answers `bootstrapping` within seconds of its registration).
MAX_BOOTSTRAPPING = 32
MAX_SSPS = 256
UNANSWERED_EVICT_SECS = 30.0


# A mixin of `scheduler.core.Scheduler`, not a component: the listener, the admin plane and
# the tests use one Scheduler object (`s.entries`, `s.flag_ssp(...)`, `s.health()`), and these
# methods work on the state it initialises (`Scheduler.__init__`). The split keeps each job in
# its own module; making them components would change every caller for no behaviour.
class SspPool:
    """Registers SSPs and moves them through their states."""

    # ------------------------------------------------------------------ SSP registry
    async def register_ssp(self, ssp_id: str, url: str, *, verified: bool = False) -> Reply:
        """``POST /ssp/register`` (body already validated, caller authenticated where the
        secret is set: ``verified``): 202 ``{snapshot_seq}``; 503 while the scheduler is not
        ready or too many SSPs bootstrap (see ``MAX_BOOTSTRAPPING``)."""
        if self.state != "ready":  # cloning, or restoring (scheduler.backups)
            return Reply(503, {"error": self.state,
                               "message": f"the scheduler is {self.state}; retry"})
        old = self.entries.get(ssp_id)
        others = [e for e in self.entries.values() if e.ssp_id != ssp_id]
        booting = sum(1 for e in others if e.state is SspState.BOOTSTRAPPING)
        if booting >= MAX_BOOTSTRAPPING or (old is None and len(others) >= MAX_SSPS):
            log.warning("registration of SSP %.80s refused: %d SSPs bootstrapping, %d in all",
                        ssp_id, booting, len(others))
            return Reply(503, {"error": "busy", "message": (
                f"too many SSPs registered or bootstrapping ({booting} of {MAX_BOOTSTRAPPING} "
                f"bootstrapping, {len(others)} of {MAX_SSPS} in all); retry later")})
        if old is not None:
            self._drop_entry(old)
        self._note(ssp_id, "registered" if old is None else "reregistered",
                   "" if old is None else old.state.value)
        async with self._drain_lock:
            if not self.replica.frozen and not self.replica.cloning:
                await asyncio.to_thread(self._drain_sync)
            # No await from here on: the backfill and the entry appear atomically w.r.t.
            # publication, so every seq > snapshot_seq reaches the queue exactly once.
            snapshot_seq = self.replica.freeze()
            entry = SspEntry(ssp_id, url.rstrip("/"), snapshot_seq,
                             auth=self.peer_auth(ssp_id), verified=verified)
            for seq, ev in self.wal.replay(snapshot_seq):
                if seq >= self._next_pub:
                    break
                entry.queue.append(Outbound(seq, ev))
            self.entries[ssp_id] = entry
        entry.sender = asyncio.create_task(self._sender(entry), name=f"sender-{ssp_id}")
        entry.sender.add_done_callback(self._task_done)
        if len(entry.queue) > self.cfg.max_buffer_per_ssp:
            self.flag_ssp(ssp_id, "buffer overflow at registration", True)
        log.info("SSP %s registered at %s (snapshot_seq=%d)", ssp_id, entry.url, snapshot_seq)
        return Reply(202, {"snapshot_seq": snapshot_seq})

    def _release_freeze(self, e: SspEntry) -> None:
        if e.holds_freeze:
            e.holds_freeze = False
            self.replica.unfreeze()

    def _drop_entry(self, e: SspEntry) -> None:
        self._release_freeze(e)
        if e.sender is not None:
            e.sender.cancel()
        e.queue.clear()
        if self.entries.get(e.ssp_id) is e:
            del self.entries[e.ssp_id]

    def flag_ssp(self, ssp_id: str, reason: str, clean: bool) -> bool:
        """Mark an SSP for re-bootstrap: next heartbeat answers 409 ``{reason, clean}``.
        Its buffer is cleared and its freeze released. False when unknown."""
        e = self.entries.get(ssp_id)
        if e is None:
            return False
        if e.flagged is None:
            log.warning("SSP %s flagged for re-bootstrap: %s", ssp_id, reason)
            e.flagged = (reason, clean)
            self._note(ssp_id, "flagged", reason)
            if e.last_heartbeat is None:
                e.last_heartbeat = time.monotonic()
                e.reap_grace = float(self.cfg.bootstrap_timeout_secs)
        e.queue.clear()
        self._release_freeze(e)
        if e.sender is not None:
            e.sender.cancel()
        return True

    def remove_ssp(self, ssp_id: str, reason: str) -> None:
        """Remove an SSP and move its views to the ready ones."""
        e = self.entries.get(ssp_id)
        if e is None:
            return
        log.warning("SSP %s removed: %s", ssp_id, reason)
        self._drop_entry(e)
        self._note(ssp_id, "removed", reason)
        moved = self.tracker.unassign(ssp_id)
        if moved:
            self._spawn(self._place_unassigned(), f"reassign-{ssp_id}")

    def _note(self, ssp_id: str, what: str, reason: str) -> None:
        for fn in list(self.ssp_events):
            try:
                fn(ssp_id, what, reason)
            except Exception:
                log.exception("ssp event observer failed")

    def heartbeat(self, body: Mapping[str, Any]) -> Reply:
        """``POST /ssp/heartbeat`` (body validated)."""
        ssp_id = body["ssp_id"]
        e = self.entries.get(ssp_id)
        if e is None:
            return Reply(404, {"error": "not_found",
                               "message": f"SSP {ssp_id} is not registered; register again"})
        if e.flagged is not None:
            reason, clean = e.flagged
            self.remove_ssp(ssp_id, f"answered 409 ({reason})")
            return Reply(409, {"reason": reason, "clean": clean})
        e.last_heartbeat = time.monotonic()
        for k in ("timestamp", "views", "cpu_usage", "memory_usage", "memory_limit_mb",
                  "version", "publication", "last_seq"):
            if k in body:
                e.metrics[k] = body[k]
        # `restoring: true` (ours): the SSP's periodic writers hold still while a restore
        # replaces the database (`hold_for_restore` waits for these answers before the wipe).
        # Sent only while restoring: the spec's answer is a plain 200 and an SSP reads a
        # missing field as false (`ssp.link`).
        if self.restore_hold is not None:
            return Reply(200, {"ok": True, "restoring": True})
        return Reply(200, {"ok": True})

    def bootstrap_progress(self, body: Mapping[str, Any]) -> None:
        ssp_id = body.get("ssp_id")
        if isinstance(ssp_id, str) and ssp_id in self.entries:  # unknown ids: nothing kept
            self.progress[ssp_id] = {**body, "received_at": time.time()}

    async def _poll_loop(self) -> None:
        interval = self.cfg.ssp_poll_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            booting = [e for e in self.entries.values()
                       if e.state is SspState.BOOTSTRAPPING and e.flagged is None]
            if booting:
                await asyncio.gather(*(self._poll_one(e) for e in booting))

    async def _poll_one(self, e: SspEntry) -> None:
        assert self._session is not None
        answered = False
        try:
            async with self._session.get(f"{e.url}/health", allow_redirects=False,
                                         timeout=aiohttp.ClientTimeout(total=5)) as r:
                answered = True
                body = await r.json(content_type=None)
            ready = isinstance(body, dict) and body.get("status") == "ready"
        except (aiohttp.ClientError, TimeoutError, ValueError):
            ready = False
        if self.entries.get(e.ssp_id) is not e or e.flagged is not None:
            return
        now = time.monotonic()
        if answered and e.answered_at is None:
            e.answered_at = now
        evict_after = min(UNANSWERED_EVICT_SECS, float(self.cfg.bootstrap_timeout_secs))
        if e.answered_at is None and now - e.registered_at > evict_after:
            self.remove_ssp(e.ssp_id, f"its URL never answered a health poll within "
                                      f"{evict_after:g}s of registering")
            return
        if ready:
            log.info("SSP %s bootstrapped; replaying %d buffered events", e.ssp_id, len(e.queue))
            self._release_freeze(e)
            e.state = SspState.REPLAYING
            e.last_heartbeat = time.monotonic()
            e.wake.set()
        elif time.monotonic() - e.registered_at > self.cfg.bootstrap_timeout_secs:
            self.flag_ssp(e.ssp_id, f"bootstrap not finished within "
                          f"{self.cfg.bootstrap_timeout_secs}s", True)

    async def _reaper_loop(self) -> None:
        timeout = self.cfg.heartbeat_timeout_ms / 1000
        while True:
            await asyncio.sleep(min(timeout / 4, 1.0))
            now = time.monotonic()
            for e in list(self.entries.values()):
                if e.last_heartbeat is not None and \
                        now - e.last_heartbeat > timeout + e.reap_grace:
                    self.remove_ssp(e.ssp_id, f"no heartbeat for {now - e.last_heartbeat:.1f}s")
