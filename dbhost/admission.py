"""How many requests the host lets into the engine at once, and which go first.

The embedded engine takes every request it is handed and runs them all at once. Under an
application's steady write load that meant ~100 requests inside it (issue 31's soak: 500
single-row UPDATEs a second, `/debug/statements` engine-s/s 90-97), each getting a hundredth
of the engine: an SSP's edge flush or the scheduler's feed read then took 0.4-1.5 s of wall
time for a few ms of work, and the write-to-edge latency followed.

So the host admits at most `limit` ordinary requests into the engine at once and queues the
rest, in arrival order. The view service's own requests (connections that declared the
service lane, `dbclient.DbConfig.lane`, and the host's own LIVE feed reads) are never queued:
they go in at once, take no slot, and find at most `limit` ordinary requests ahead of them.
They are never made to wait, so no request of the service can deadlock behind the application's
(an application transaction whose event posts to the scheduler, transport http, holds its
slot until the scheduler answers, and the scheduler's answer needs no slot).

The lane is a scheduling hint, not a permission: it changes the order in which the host hands
requests to the engine, nothing a request may do.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass


@dataclass
class AdmissionStats:
    """Counters for `GET /debug/memory` (`admission`)."""

    queued: int = 0  # ordinary requests that had to wait for a slot
    waiting_peak: int = 0
    wait_s: float = 0.0  # their total wait


class Admission:
    """At most `limit` ordinary requests inside the engine (0: no limit); the service lane
    enters at once (module docstring)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.inside = 0  # ordinary requests
        self.service_inside = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self.stats = AdmissionStats()

    async def enter(self, service: bool) -> None:
        """Wait for a slot (an ordinary request); the service lane takes none and goes in at
        once (then call :meth:`leave` with the same `service`)."""
        if service:
            self.service_inside += 1
            return
        if self.limit <= 0 or (self.inside < self.limit and not self._waiting):
            self.inside += 1
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiting.append(fut)
        st = self.stats
        st.queued += 1
        st.waiting_peak = max(st.waiting_peak, len(self._waiting))
        began = loop.time()
        try:
            await fut  # `leave` counted the slot for us before it woke us
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.leave(False)  # granted as we were cancelled: hand the slot on
            else:
                self._waiting.remove(fut)
            raise
        finally:
            st.wait_s += loop.time() - began

    def leave(self, service: bool) -> None:
        """A request left the engine: an ordinary one's slot goes to the longest-waiting
        ordinary request."""
        if service:
            self.service_inside -= 1
            return
        self.inside -= 1
        while self._waiting and self.inside < self.limit:
            fut = self._waiting.popleft()
            if not fut.done():
                self.inside += 1
                fut.set_result(None)

    def snapshot(self) -> dict[str, float | int]:
        """The figures `GET /debug/memory` shows."""
        st = self.stats
        return {"limit": self.limit, "inside": self.inside,
                "service_inside": self.service_inside, "waiting": len(self._waiting),
                "queued": st.queued, "waiting_peak": st.waiting_peak,
                "wait_s": round(st.wait_s, 3)}
