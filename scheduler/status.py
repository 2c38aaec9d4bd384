"""What the scheduler reports: `/health`, `/health/snapshot`, metrics and `/info`."""

from __future__ import annotations

import logging
import time
from typing import Any

from engine.hashing import hash_text
from ipc.version import VERSION
from scheduler.entries import (
    Reply,
    SspState,
)
from scheduler.placement import Placement
from scheduler.state import CoordinatorState

log = logging.getLogger("scheduler")


class Status:
    """The scheduler's health, snapshot, metrics and info."""

    def __init__(self, s: CoordinatorState, placement: Placement) -> None:
        self.s = s
        self.placement = placement

    def health(self) -> Reply:
        ready = self.placement.ready_ids()
        now = time.monotonic()
        body: dict[str, Any] = {
            "status": "healthy" if ready else "unavailable",
            "scheduler": {
                "id": self.s.cfg.scheduler_id,
                "state": self.s.state,
                "replica_lag": self.s.wal.last_seq - self.s.replica.applied_seq,
                "applied_seq": self.s.replica.applied_seq,
                "latest_seq": self.s.wal.last_seq,
                "ready_ssps": len(ready),
                "total_ssps": len(self.s.entries),
            },
            "heartbeat": self.heartbeat_probe(now),
            "changefeed": {"enabled": False},
        }
        for name, provider in self.s.extra_health.items():
            body[name] = provider()
        feed = body.get("changefeed") or {}
        if ready and (feed.get("gap") or feed.get("stalled")):
            # Events stopped flowing from the database: SSPs serve, but go stale.
            body["status"] = "degraded"
        return Reply(200 if ready else 503, body)

    def heartbeat_probe(self, now: float) -> dict[str, Any]:
        """The end-to-end view of `/health`: per SSP, how long ago it heartbeated, the last
        event sent to it, the last one it reports applied (`last_seq` of its heartbeat) and how
        many events it is behind the WAL; `ok` when there is an SSP and every Ready one
        heartbeated within the timeout."""
        latest = self.s.wal.last_seq
        timeout = self.s.cfg.heartbeat_timeout_ms / 1000
        ssps: dict[str, Any] = {}
        ok = True
        for i, e in self.s.entries.items():
            ago = None if e.last_heartbeat is None else round(now - e.last_heartbeat, 3)
            acked = e.metrics.get("last_seq")
            acked = acked if isinstance(acked, int) and not isinstance(acked, bool) else None
            ssps[i] = {"state": e.state.value, "seconds_ago": ago, "sent_seq": e.sent_seq,
                       "acked_seq": acked,
                       "behind": None if acked is None else max(0, latest - acked)}
            if e.state in (SspState.READY, SspState.LAGGING) and e.flagged is None:
                ok = ok and ago is not None and ago <= timeout
        return {"ok": ok and bool(ssps), "timeout_ms": self.s.cfg.heartbeat_timeout_ms,
                "latest_seq": latest,
                "last_heartbeat_seconds_ago": {i: v["seconds_ago"] for i, v in ssps.items()
                                               if v["seconds_ago"] is not None},
                "ssps": ssps}

    def snapshot(self) -> dict[str, Any]:
        tables = {t: self.s.replica.count(t) for t in self.s.replica.tables()}
        # The same wire text as the SSP's circuit_hashes (16 hex digits).
        hashes = {t: hash_text(self.s.replica.hash(t)) for t in tables}
        applied = self.s.replica.applied_seq
        body: dict[str, Any] = {
            "tables": tables,
            "hashes": hashes,
            "total_records": sum(tables.values()),
            "snapshot_seq": applied,
            "latest_seq": self.s.wal.last_seq,
            "lag": self.s.wal.last_seq - applied,
            "frozen": self.s.replica.frozen,
            "drift": {"enabled": False},
        }
        for name, provider in self.s.extra_snapshot.items():
            body[name] = provider()
        return body

    def metrics(self) -> dict[str, Any]:
        now = time.monotonic()
        counts = self.s.tracker.counts()
        ssps = []
        for i, e in self.s.entries.items():
            ssps.append({
                "id": i, "url": e.url, "state": e.state.value,
                "flagged": e.flagged[0] if e.flagged else None,
                "query_count": counts.get(i, 0),
                "views": e.metrics.get("views", 0),
                "cpu_usage": e.metrics.get("cpu_usage"),
                "memory_usage": e.metrics.get("memory_usage"),
                "memory_limit_mb": e.mem_limit(),
                "version": e.metrics.get("version"),
                "last_seq": e.metrics.get("last_seq"),
                "last_heartbeat_seconds_ago": (round(now - e.last_heartbeat, 3)
                                               if e.last_heartbeat is not None else None),
                "queued": len(e.queue), "sent_seq": e.sent_seq,
                "send_failures": e.send_failures,
                "bootstrap_progress": self.s.progress.get(i),
                "start": e.metrics.get("start"),
            })
        return {
            "scheduler": {
                "total_ssps": len(self.s.entries),
                "ready_ssps": len(self.placement.ready_ids()),
                "total_queries": len(self.s.tracker),
                "running_jobs": self.s.running_jobs(),
                "uptime_seconds": int(now - self.s.started),
                "state": self.s.state,
                "ingested": self.s.ingested,
                "dropped_batches": self.s.dropped_batches,
                "wal_batches": self.s.committer.batches,
                "applied_seq": self.s.replica.applied_seq,
                "latest_seq": self.s.wal.last_seq,
                "last_clone": self.s.last_clone,
            },
            "ssps": ssps,
        }

    def info(self) -> list[dict[str, Any]]:
        out = [{"entity": "scheduler", "id": self.s.cfg.scheduler_id, "status": self.s.state,
                "views": len(self.s.tracker), "version": VERSION}]
        counts = self.s.tracker.counts()
        for i, e in self.s.entries.items():
            out.append({"entity": "ssp", "id": i,
                        "status": "flagged" if e.flagged else e.state.value,
                        "views": e.metrics.get("views", counts.get(i, 0))})
        return out
