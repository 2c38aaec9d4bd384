"""``GET /admin/api/history``: the dashboard's charts over the last hour or day, kept by the
scheduler so they survive a page reload (a browser only sees what happened while it was open).

Two bounded rings in memory, filled by one loop: a sample every ``HOUR_STEP_SECS`` (10 s) kept
for an hour (360 samples), and one every ``DAY_STEP_SECS`` (60 s) kept for a day (1,440). A
sample is ``{t, ingest_per_sec, live_views, ssps: {<id>: {lag, queued}}}``: the scheduler's
ingest rate since the ring's previous sample (null for the first one, and after the counter
went back, i.e. a restart of the ingest counter), the live views of the presence sampler, and
each registered SSP's lag (events sent but not acknowledged, null before its first report) and
queue. Reading a sample is memory only (the scheduler's own counters): about 2,000 small dicts
at most, well under a megabyte with a handful of SSPs.

The rings survive a restart of the scheduler: after each sample they are written whole to
``admin-history.json`` beside its other state files (``ipc.statefile``: a crash leaves the old
file or the new one), and read back at start, without the samples older than each ring's span.
The first sample after a restart has no rate (the ingest counter started again).

Query ``range``: ``hour`` (default) or ``day``; 400 otherwise. Answer ``{range, step_secs,
capacity, samples (oldest first), server_time_ms}``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbclient.clock import now_ms
from ipc.statefile import read_state, replace_file
from scheduler.admin.cluster import Cluster
from scheduler.admin.presence import Presence

log = logging.getLogger("scheduler.admin.history")

__all__ = ["DAY_STEP_SECS", "FILE", "HOUR_STEP_SECS", "History", "RANGES"]

FILE = "admin-history.json"

HOUR_STEP_SECS = 10
DAY_STEP_SECS = 60
RANGES = ("hour", "day")


@dataclass
class _Ring:
    step_secs: int
    capacity: int
    samples: deque[dict[str, Any]] = field(init=False)
    last: tuple[int, int] | None = None  # (t ms, ingested) of the previous sample

    def __post_init__(self) -> None:
        self.samples = deque(maxlen=self.capacity)

    def push(self, t: int, ingested: int | None, rest: dict[str, Any]) -> None:
        rate = None
        if ingested is not None and self.last is not None:
            t0, n0 = self.last
            if t > t0 and ingested >= n0:
                rate = round((ingested - n0) * 1000 / (t - t0), 3)
        if ingested is not None:
            self.last = (t, ingested)
        self.samples.append({"t": t, "ingest_per_sec": rate, **rest})


class History:
    """See the module docstring."""

    def __init__(self, cluster: Cluster, presence: Presence,
                 directory: Path | None = None) -> None:
        self.cluster = cluster
        self.presence = presence
        self.rings = {"hour": _Ring(HOUR_STEP_SECS, 3600 // HOUR_STEP_SECS),
                      "day": _Ring(DAY_STEP_SECS, 86400 // DAY_STEP_SECS)}
        self._ticks = 0
        self.path = directory / FILE if directory is not None else None
        self._load()

    def _load(self, now: int | None = None) -> None:
        """The rings as the last run left them (samples past each ring's span dropped)."""
        if self.path is None:
            return
        raw = read_state(self.path, "chart history", log)
        rings = raw.get("rings") if isinstance(raw, dict) else None
        if not isinstance(rings, dict):
            return
        now = now_ms() if now is None else now
        for name, ring in self.rings.items():
            oldest = now - ring.step_secs * ring.capacity * 1000
            kept = [x for x in rings.get(name) or ()
                    if isinstance(x, dict) and isinstance(x.get("t"), int)
                    and oldest < x["t"] <= now]
            ring.samples.extend(sorted(kept, key=lambda x: x["t"])[-ring.capacity:])
        # the day ring samples again one step after its newest sample, not at once
        newest_day = self.rings["day"].samples[-1]["t"] if self.rings["day"].samples else None
        if newest_day is not None:
            elapsed = (now - newest_day) // (HOUR_STEP_SECS * 1000)
            per = DAY_STEP_SECS // HOUR_STEP_SECS
            self._ticks = max(1, int(elapsed)) if elapsed < per else 0

    def save(self) -> None:
        """Write both rings (errors logged: the charts only lose their past)."""
        if self.path is None:
            return
        doc = {"version": 1, "rings": {k: list(r.samples) for k, r in self.rings.items()}}
        try:
            replace_file(self.path, json.dumps(doc, separators=(",", ":")).encode())
        except OSError as e:
            log.warning("chart history not saved (%s)", e)

    def sample(self, t: int | None = None) -> None:
        t = now_ms() if t is None else t
        got = self.cluster.scheduler_status().get("ingested")
        ingested = got if isinstance(got, int) and not isinstance(got, bool) else None
        ssps = {}
        for s in self.cluster.ssps():
            lag = None if s.acked_seq is None else max(0, s.sent_seq - s.acked_seq)
            ssps[s.id] = {"lag": lag, "queued": s.queued}
        rest = {"live_views": self.presence.rollup()["views"], "ssps": ssps}
        self.rings["hour"].push(t, ingested, rest)
        if self._ticks % (DAY_STEP_SECS // HOUR_STEP_SECS) == 0:
            self.rings["day"].push(t, ingested, rest)
        self._ticks += 1

    async def run(self) -> None:
        while True:
            try:
                self.sample()
                await asyncio.to_thread(self.save)
            except Exception:  # noqa: BLE001 - a chart sample must never stop the loop
                log.exception("history sample failed")
            await asyncio.sleep(HOUR_STEP_SECS)

    def body(self, range_: str) -> dict[str, Any]:
        ring = self.rings[range_]
        return {"range": range_, "step_secs": ring.step_secs, "capacity": ring.capacity,
                "samples": list(ring.samples), "server_time_ms": now_ms()}
