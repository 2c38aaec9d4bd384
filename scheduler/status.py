"""What the scheduler reports: `/health`, `/health/snapshot`, metrics and `/info`."""

from __future__ import annotations

import logging
import time
from typing import Any

from engine.hashing import hash_text
from scheduler.entries import (
    VERSION,
    Reply,
    SspState,
)

log = logging.getLogger("scheduler")


# A mixin of `scheduler.core.Scheduler`, not a component: the listener, the admin plane and
# the tests use one Scheduler object (`s.entries`, `s.flag_ssp(...)`, `s.health()`), and these
# methods work on the state it initialises (`Scheduler.__init__`). The split keeps each job in
# its own module; making them components would change every caller for no behaviour.
class Status:
    """The scheduler's health, snapshot, metrics and info."""

    # ------------------------------------------------------------------ status
    def health(self) -> Reply:
        ready = self.ready_ids()
        now = time.monotonic()
        body: dict[str, Any] = {
            "status": "healthy" if ready else "unavailable",
            "scheduler": {
                "id": self.cfg.scheduler_id,
                "state": self.state,
                "replica_lag": self.wal.last_seq - self.replica.applied_seq,
                "applied_seq": self.replica.applied_seq,
                "latest_seq": self.wal.last_seq,
                "ready_ssps": len(ready),
                "total_ssps": len(self.entries),
            },
            "heartbeat": self._heartbeat_probe(now),
            "changefeed": {"enabled": False},
        }
        for name, provider in self.extra_health.items():
            body[name] = provider()
        feed = body.get("changefeed") or {}
        if ready and (feed.get("gap") or feed.get("stalled")):
            # Events stopped flowing from the database: SSPs serve, but go stale.
            body["status"] = "degraded"
        return Reply(200 if ready else 503, body)

    def _heartbeat_probe(self, now: float) -> dict[str, Any]:
        """The end-to-end view of `/health`: per SSP, how long ago it heartbeated, the last
        event sent to it, the last one it reports applied (`last_seq` of its heartbeat) and how
        many events it is behind the WAL; `ok` when there is an SSP and every Ready one
        heartbeated within the timeout."""
        latest = self.wal.last_seq
        timeout = self.cfg.heartbeat_timeout_ms / 1000
        ssps: dict[str, Any] = {}
        ok = True
        for i, e in self.entries.items():
            ago = None if e.last_heartbeat is None else round(now - e.last_heartbeat, 3)
            acked = e.metrics.get("last_seq")
            acked = acked if isinstance(acked, int) and not isinstance(acked, bool) else None
            ssps[i] = {"state": e.state.value, "seconds_ago": ago, "sent_seq": e.sent_seq,
                       "acked_seq": acked,
                       "behind": None if acked is None else max(0, latest - acked)}
            if e.state in (SspState.READY, SspState.LAGGING) and e.flagged is None:
                ok = ok and ago is not None and ago <= timeout
        return {"ok": ok and bool(ssps), "timeout_ms": self.cfg.heartbeat_timeout_ms,
                "latest_seq": latest,
                "last_heartbeat_seconds_ago": {i: v["seconds_ago"] for i, v in ssps.items()
                                               if v["seconds_ago"] is not None},
                "ssps": ssps}

    def snapshot(self) -> dict[str, Any]:
        tables = {t: self.replica.count(t) for t in self.replica.tables()}
        # The same wire text as the SSP's circuit_hashes (16 hex digits).
        hashes = {t: hash_text(self.replica.hash(t)) for t in tables}
        applied = self.replica.applied_seq
        body: dict[str, Any] = {
            "tables": tables,
            "hashes": hashes,
            "total_records": sum(tables.values()),
            "snapshot_seq": applied,
            "latest_seq": self.wal.last_seq,
            "lag": self.wal.last_seq - applied,
            "frozen": self.replica.frozen,
            "drift": {"enabled": False},
        }
        for name, provider in self.extra_snapshot.items():
            body[name] = provider()
        return body

    def metrics(self) -> dict[str, Any]:
        now = time.monotonic()
        counts = self.tracker.counts()
        ssps = []
        for i, e in self.entries.items():
            ssps.append({
                "id": i, "url": e.url, "state": e.state.value,
                "flagged": e.flagged[0] if e.flagged else None,
                "query_count": counts.get(i, 0),
                "views": e.metrics.get("views", 0),
                "cpu_usage": e.metrics.get("cpu_usage"),
                "memory_usage": e.metrics.get("memory_usage"),
                "version": e.metrics.get("version"),
                "last_seq": e.metrics.get("last_seq"),
                "last_heartbeat_seconds_ago": (round(now - e.last_heartbeat, 3)
                                               if e.last_heartbeat is not None else None),
                "queued": len(e.queue), "sent_seq": e.sent_seq,
                "send_failures": e.send_failures,
                "bootstrap_progress": self.progress.get(i),
            })
        return {
            "scheduler": {
                "total_ssps": len(self.entries),
                "ready_ssps": len(self.ready_ids()),
                "total_queries": len(self.tracker),
                "running_jobs": self.running_jobs(),
                "uptime_seconds": int(now - self.started),
                "state": self.state,
                "ingested": self.ingested,
                "dropped_batches": self.dropped_batches,
                "wal_batches": self.committer.batches,
                "applied_seq": self.replica.applied_seq,
                "latest_seq": self.wal.last_seq,
                "last_clone": self.last_clone,
            },
            "ssps": ssps,
        }

    def info(self) -> list[dict[str, Any]]:
        out = [{"entity": "scheduler", "id": self.cfg.scheduler_id, "status": self.state,
                "views": len(self.tracker), "version": VERSION}]
        counts = self.tracker.counts()
        for i, e in self.entries.items():
            out.append({"entity": "ssp", "id": i,
                        "status": "flagged" if e.flagged else e.state.value,
                        "views": e.metrics.get("views", counts.get(i, 0))})
        return out
