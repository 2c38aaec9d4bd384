"""The scheduler's SSP pool: registration, the state machine (Bootstrapping -> Replaying ->
Ready), heartbeats, the health poll and the reaper (flags and removal: `scheduler.roster`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

import aiohttp

from ipc import typed
from scheduler.delivery import Delivery
from scheduler.entries import (
    Outbound,
    Reply,
    SspEntry,
    SspState,
)
from scheduler.roster import Roster
from scheduler.state import CoordinatorState

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


class SspPool:
    """Registers SSPs and moves them through their states."""

    def __init__(self, s: CoordinatorState, roster: Roster, delivery: Delivery) -> None:
        self.s = s
        self.roster = roster
        self.delivery = delivery

    async def register_ssp(self, ssp_id: str, url: str, *, verified: bool = False,
                           warm: tuple[str, int] | None = None) -> Reply:
        """``POST /ssp/register`` (body already validated, caller authenticated where the
        secret is set: ``verified``): 202 ``{snapshot_seq, epoch, warm}`` (and ``views``,
        the ids the tracker assigns to it, when warm); 503 while the
        scheduler is not ready or too many SSPs bootstrap (see ``MAX_BOOTSTRAPPING``).

        ``warm`` (ours): the ``(epoch, seq)`` of the rows the SSP's snapshot holds. Accepted
        when the epoch is this replica's and the WAL still holds every event after ``seq``:
        the SSP then loads its snapshot and reads the events up to ``snapshot_seq`` from
        :meth:`catchup` instead of bootstrapping through the proxy. Otherwise the answer
        says why (``warm_refused``) and the SSP bootstraps cold, as without the field."""
        if self.s.state != "ready":  # cloning, or restoring (scheduler.backups)
            return Reply(503, {"error": self.s.state,
                               "message": f"the scheduler is {self.s.state}; retry"})
        old = self.s.entries.get(ssp_id)
        others = [e for e in self.s.entries.values() if e.ssp_id != ssp_id]
        booting = sum(1 for e in others if e.state is SspState.BOOTSTRAPPING)
        if booting >= MAX_BOOTSTRAPPING or (old is None and len(others) >= MAX_SSPS):
            log.warning("registration of SSP %.80s refused: %d SSPs bootstrapping, %d in all",
                        ssp_id, booting, len(others))
            return Reply(503, {"error": "busy", "message": (
                f"too many SSPs registered or bootstrapping ({booting} of {MAX_BOOTSTRAPPING} "
                f"bootstrapping, {len(others)} of {MAX_SSPS} in all); retry later")})
        if old is not None:
            self.roster.drop(old)
        self.roster.note(ssp_id, "registered" if old is None else "reregistered",
                   "" if old is None else old.state.value)
        async with self.s.drain_lock:
            if not self.s.replica.frozen and not self.s.replica.cloning:
                await self.s.in_replica_thread(self.s.apply_wal)
            # No await from here on: the backfill and the entry appear atomically w.r.t.
            # publication, so every seq > snapshot_seq reaches the queue exactly once.
            snapshot_seq = self.s.replica.freeze()
            entry = SspEntry(ssp_id, url.rstrip("/"), snapshot_seq,
                             auth=self.s.peer_auth(ssp_id), verified=verified)
            refused = None if warm is None else self.warm_refusal(warm, snapshot_seq)
            if warm is not None and refused is None:
                entry.warm_from = warm[1]
            for seq, ev in self.s.wal.replay(snapshot_seq):
                if seq >= self.s.next_pub:
                    break
                entry.queue.append(Outbound(seq, ev))
            self.s.entries[ssp_id] = entry
        entry.sender = asyncio.create_task(self.delivery.send_loop(entry), name=f"sender-{ssp_id}")
        entry.sender.add_done_callback(self.s.task_done)
        if len(entry.queue) > self.s.cfg.max_buffer_per_ssp:
            self.roster.flag_ssp(ssp_id, "buffer overflow at registration", True)
        answer: dict[str, Any] = {"snapshot_seq": snapshot_seq, "epoch": self.s.epoch,
                                  "warm": entry.warm_from is not None}
        if entry.warm_from is not None:
            # The views it held that no other SSP took while it was away (its 409 unassigned
            # them) are its again; those of them its snapshot holds it builds on the
            # snapshot's rows (ours), and re-sending them after Ready is then a refresh.
            back = self.s.tracker.reclaim(ssp_id)
            answer["views"] = sorted(self.s.tracker.of_ssp(ssp_id))
            log.info("SSP %s registered at %s (snapshot_seq=%d), warm from seq %d, keeping "
                     "%d views (%d of them unplaced since it left)", ssp_id, entry.url,
                     snapshot_seq, entry.warm_from, len(answer["views"]), len(back))
        else:
            if refused is not None:
                answer["warm_refused"] = refused
                log.info("SSP %s: no warm start (%s)", ssp_id, refused)
            log.info("SSP %s registered at %s (snapshot_seq=%d)", ssp_id, entry.url,
                     snapshot_seq)
        return Reply(202, answer)

    def warm_refusal(self, warm: tuple[str, int], snapshot_seq: int) -> str | None:
        """Why an SSP holding the rows up to ``warm`` cannot start warm (None: it can)."""
        epoch, seq = warm
        if not self.s.epoch or epoch != self.s.epoch:
            return ("the snapshot is of another replica epoch (re-cloned, restored or reset "
                    "since)")
        if seq > self.s.wal.last_seq:
            return (f"the snapshot's position {seq} is ahead of the WAL's last event "
                    f"{self.s.wal.last_seq} (the WAL lost events)")
        if seq > snapshot_seq:
            # the integrity check compares with the replica as frozen, behind these rows
            return (f"the snapshot's position {seq} is ahead of the replica's {snapshot_seq}, "
                    "held there by another SSP's bootstrap")
        first = self.s.wal.first_seq
        if first > seq + 1:
            return (f"the WAL no longer holds events {seq + 1}..{first - 1} (retention: "
                    f"{self.s.cfg.wal_retain_events} events)")
        return None

    def catchup(self, ssp_id: str, after: int, through: int, limit: int) -> Reply:
        """``POST /ssp/catchup`` (ours): the events ``after < seq <= through`` of a warm
        start, at most ``limit``, as a typed batch (`ipc.typed`, as ``/ingest`` gets them).
        404 when the SSP is not registered warm, 409 when the range is outside its warm
        start or the WAL no longer holds it (the SSP then bootstraps cold)."""
        e = self.s.entries.get(ssp_id)
        if e is None or e.warm_from is None or e.state is not SspState.BOOTSTRAPPING:
            return Reply(404, {"error": "not_found", "message": (
                f"SSP {ssp_id} is not registered for a warm start; register again")})
        if after < e.warm_from or through > e.snapshot_seq or after > through:
            return Reply(409, {"error": "out_of_range", "message": (
                f"the warm start covers seq {e.warm_from}..{e.snapshot_seq}; asked "
                f"{after}..{through}")})
        out: list[bytes] = []
        expect = after + 1
        for seq, ev in self.s.wal.replay(after):
            if seq > through or len(out) >= limit:
                break
            if seq != expect:
                break
            out.append(Outbound(seq, ev).wire())
            expect += 1
        if expect <= through and len(out) < limit:
            return Reply(409, {"error": "gap", "message": (
                f"the WAL no longer holds seq {expect}; bootstrap cold")})
        return Reply(200, raw=typed.encode_batch(out), content_type=typed.CONTENT_TYPE)

    def heartbeat(self, body: Mapping[str, Any]) -> Reply:
        """``POST /ssp/heartbeat`` (body validated)."""
        ssp_id = body["ssp_id"]
        e = self.s.entries.get(ssp_id)
        if e is None:
            return Reply(404, {"error": "not_found",
                               "message": f"SSP {ssp_id} is not registered; register again"})
        if e.flagged is not None:
            reason, clean = e.flagged
            self.roster.remove_ssp(ssp_id, f"answered 409 ({reason})")
            return Reply(409, {"reason": reason, "clean": clean})
        e.last_heartbeat = time.monotonic()
        for k in ("timestamp", "views", "cpu_usage", "memory_usage", "memory_limit_mb",
                  "version", "publication", "last_seq", "start"):
            if k in body:
                e.metrics[k] = body[k]
        # `restoring: true` (ours): the SSP's periodic writers hold still while a restore
        # replaces the database (`hold_for_restore` waits for these answers before the wipe).
        # Sent only while restoring: the spec's answer is a plain 200 and an SSP reads a
        # missing field as false (`ssp.link`).
        if self.s.restore_hold is not None:
            return Reply(200, {"ok": True, "restoring": True})
        return Reply(200, {"ok": True})

    def bootstrap_progress(self, body: Mapping[str, Any]) -> None:
        ssp_id = body.get("ssp_id")
        if isinstance(ssp_id, str) and ssp_id in self.s.entries:  # unknown ids: nothing kept
            self.s.progress[ssp_id] = {**body, "received_at": time.time()}

    async def poll_loop(self) -> None:
        interval = self.s.cfg.ssp_poll_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            booting = [e for e in self.s.entries.values()
                       if e.state is SspState.BOOTSTRAPPING and e.flagged is None]
            if booting:
                await asyncio.gather(*(self.poll_one(e) for e in booting))

    async def poll_one(self, e: SspEntry) -> None:
        assert self.s.session is not None
        answered = False
        try:
            async with self.s.session.get(f"{e.url}/health", allow_redirects=False,
                                         timeout=aiohttp.ClientTimeout(total=5)) as r:
                answered = True
                body = await r.json(content_type=None)
            ready = isinstance(body, dict) and body.get("status") == "ready"
        except (aiohttp.ClientError, TimeoutError, ValueError):
            ready = False
        if self.s.entries.get(e.ssp_id) is not e or e.flagged is not None:
            return
        now = time.monotonic()
        if answered and e.answered_at is None:
            e.answered_at = now
        evict_after = min(UNANSWERED_EVICT_SECS, float(self.s.cfg.bootstrap_timeout_secs))
        if e.answered_at is None and now - e.registered_at > evict_after:
            self.roster.remove_ssp(e.ssp_id, f"its URL never answered a health poll within "
                                      f"{evict_after:g}s of registering")
            return
        if ready:
            log.info("SSP %s bootstrapped; replaying %d buffered events", e.ssp_id, len(e.queue))
            self.roster.release_freeze(e)
            e.state = SspState.REPLAYING
            e.last_heartbeat = time.monotonic()
            e.wake.set()
        elif time.monotonic() - e.registered_at > self.s.cfg.bootstrap_timeout_secs:
            self.roster.flag_ssp(e.ssp_id, f"bootstrap not finished within "
                          f"{self.s.cfg.bootstrap_timeout_secs}s", True)

    async def reaper_loop(self) -> None:
        timeout = self.s.cfg.heartbeat_timeout_ms / 1000
        tick = min(timeout / 4, 1.0)
        last = time.monotonic()
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            # Away longer than it slept (this process stalled, or the machine): heartbeats
            # that came meanwhile wait unread in the sockets, and judging now would remove
            # SSPs that beat on time (a soak under load lost both SSPs at once this way, then
            # their views while they came back). That time counts against no SSP.
            stalled = now - last - tick
            last = now
            if stalled > tick:
                log.warning("the scheduler was stalled %.1fs: heartbeat deadlines moved by as "
                            "much", stalled)
                for e in self.s.entries.values():
                    if e.last_heartbeat is not None:
                        e.last_heartbeat += stalled
                continue
            for e in list(self.s.entries.values()):
                if e.last_heartbeat is not None and \
                        now - e.last_heartbeat > timeout + e.reap_grace:
                    self.roster.remove_ssp(e.ssp_id, f"no heartbeat for {now - e.last_heartbeat:.1f}s")
