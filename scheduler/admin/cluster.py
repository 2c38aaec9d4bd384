"""The admin plane's one window on the scheduler: read the cluster and act on it.

Every admin module reads and acts through :class:`Cluster` (a Protocol) and never touches
``scheduler.core.Scheduler`` itself; :class:`SchedulerCluster` is the one adapter over the
live scheduler, so a change in the core's internals is absorbed here. What it offers:

* the scheduler: id, version, state (``cloning``, ``ready``, ``restoring``), uptime, replica
  and heartbeat figures, drift and changefeed status, configured job tables;
* SSP entries as :class:`SspInfo` snapshots (state, flag, registration time, heartbeat body
  figures, queue) and view placement (view id -> SSP id, from the tracker);
* the backend monitor, the job plane's kill and retry, the workflow engine, the backup plane, the incident
  store, the root database client;
* actions: flag an SSP (the heartbeat 409 directive), reclone, rehash, HTTP calls to an SSP
  (bearer ``SVC_AUTH_SECRET``) including a streamed GET for ``/logs``;
* ``on_ssp_event(callback)``: registration, flag and removal of SSPs as they happen.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from dbclient import Database
from ipc.http import client_session
from ipc.version import VERSION
from scheduler.config import SchedulerConfig
from scheduler.incidents import IncidentStore

log = logging.getLogger("scheduler.admin.cluster")

__all__ = ["Cluster", "SchedulerCluster", "SspInfo"]


@dataclass(frozen=True)
class SspInfo:
    """One SSP entry as the admin plane sees it."""

    id: str
    url: str
    state: str  # bootstrapping | replaying | ready | lagging
    flagged: str | None  # the resync reason while a directive waits for its heartbeat
    clean: bool
    registered_at: float  # monotonic: a new registration has a later one
    registered_at_ms: int
    views: int
    query_count: int
    cpu_usage: float | None
    memory_usage: float | None
    version: str | None
    last_heartbeat_secs: float | None
    queued: int
    sent_seq: int
    acked_seq: int | None
    send_failures: int
    publication: Mapping[str, Any] | None = None
    bootstrap_progress: Mapping[str, Any] | None = None
    # how its last bootstrap went (ours: the heartbeat's `start`, warm or cold and why)
    start: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    # Registered with a credential, or Ready at least once: its troubles are worth an incident.
    trusted: bool = True

    @property
    def serving(self) -> bool:
        """Ready or Lagging and not flagged: it holds views and receives events."""
        return self.state in ("ready", "lagging") and self.flagged is None

    def public(self) -> dict[str, Any]:
        return {"entity": "ssp", "id": self.id, "url": self.url,
                "status": "flagged" if self.flagged else self.state, "state": self.state,
                "flagged": self.flagged, "views": self.views, "query_count": self.query_count,
                "cpu_usage": self.cpu_usage, "memory_usage": self.memory_usage,
                "version": self.version, "last_heartbeat_seconds_ago": self.last_heartbeat_secs,
                "queued": self.queued, "sent_seq": self.sent_seq, "acked_seq": self.acked_seq,
                "send_failures": self.send_failures, "registered_at_ms": self.registered_at_ms,
                "publication": self.publication, "bootstrap_progress": self.bootstrap_progress,
                "start": self.start}


class Cluster(Protocol):
    """What the admin plane needs from the scheduler (see the module docstring)."""

    cfg: SchedulerConfig
    db: Database
    incidents: IncidentStore

    @property
    def scheduler_id(self) -> str: ...
    @property
    def version(self) -> str: ...
    def state(self) -> str: ...
    def uptime_secs(self) -> float: ...
    def scheduler_status(self) -> dict[str, Any]: ...
    def ssps(self) -> list[SspInfo]: ...
    def ssp(self, ssp_id: str) -> SspInfo | None: ...
    def placements(self) -> dict[str, str | None]: ...
    def placement(self, view_id: str) -> str | None: ...
    def unregister_view(self, view_id: str) -> None: ...
    def backends(self) -> Any: ...
    def workflows(self) -> Any: ...
    def running_jobs(self) -> int: ...
    def backup_plane(self) -> Any: ...
    def on_ssp_event(self, fn: Callable[[str, str, str], None]) -> None: ...
    def flag_ssp(self, ssp_id: str, reason: str, clean: bool) -> bool: ...
    def reclone_running(self) -> bool: ...
    def start_reclone(self, reason: str) -> tuple[int, Any]: ...
    async def rehash(self) -> dict[str, Any]: ...
    async def job_kill(self, job_id: str) -> tuple[Any, ...]: ...
    async def job_retry(self, job_id: str) -> tuple[Any, ...]: ...
    async def ssp_call(self, ssp_id: str, method: str, path: str, body: Any = None,
                       timeout: float = 10.0) -> tuple[int, Any] | None: ...
    def ssp_stream(self, ssp_id: str, path: str, params: Mapping[str, str],
                   headers: Mapping[str, str] | None = None) -> Any: ...
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


class SchedulerCluster:
    """:class:`Cluster` over a live ``scheduler.core.Scheduler``."""

    def __init__(self, scheduler: Any) -> None:
        self._s = scheduler
        self.cfg: SchedulerConfig = scheduler.cfg
        self.db: Database = scheduler.db
        self.incidents: IncidentStore = scheduler.incidents
        self._session: aiohttp.ClientSession | None = None
        self._registered_ms: dict[int, int] = {}

    async def start(self) -> None:
        self._session = client_session(timeout=aiohttp.ClientTimeout(total=None,
                                                                     sock_connect=5))

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ------------------------------------------------------------------ scheduler
    @property
    def scheduler_id(self) -> str:
        return str(self.cfg.scheduler_id)

    @property
    def version(self) -> str:
        return VERSION

    def state(self) -> str:
        return str(self._s.state)

    def uptime_secs(self) -> float:
        return time.monotonic() - float(self._s.started)

    def scheduler_status(self) -> dict[str, Any]:
        s = self._s
        health = s.health().body
        sched = dict(health.get("scheduler") or {})
        sched["heartbeat_ok"] = (health.get("heartbeat") or {}).get("ok")
        sched["health"] = health.get("status")
        changefeed = health.get("changefeed") or {}
        drift = s.drift.status() if getattr(s, "drift", None) is not None else {}
        return {"scheduler": sched, "changefeed": changefeed,
                "drift": {k: drift.get(k) for k in ("enabled", "checked_at", "mismatched",
                                                     "stuck", "auto_reclones", "auto_repairs",
                                                     "last_error")},
                "last_clone": s.last_clone, "ingested": s.ingested,
                "tracked_views": len(s.tracker)}

    def running_jobs(self) -> int:
        return int(self._s.running_jobs())

    # ------------------------------------------------------------------ SSPs and views
    def _info(self, e: Any, counts: Mapping[str, int], now: float) -> SspInfo:
        m = e.metrics
        key = id(e)
        reg_ms = self._registered_ms.get(key)
        if reg_ms is None:  # wall time of the registration, from its monotonic stamp
            reg_ms = int((time.time() - (now - e.registered_at)) * 1000)
            self._registered_ms[key] = reg_ms
            if len(self._registered_ms) > 1000:
                self._registered_ms.pop(next(iter(self._registered_ms)))

        def num(k: str) -> float | None:
            v = m.get(k)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        acked = m.get("last_seq")
        return SspInfo(
            id=e.ssp_id, url=e.url, state=e.state.value,
            flagged=e.flagged[0] if e.flagged else None,
            clean=bool(e.flagged and e.flagged[1]), registered_at=e.registered_at,
            registered_at_ms=reg_ms, views=int(num("views") or 0),
            query_count=counts.get(e.ssp_id, 0), cpu_usage=num("cpu_usage"),
            memory_usage=num("memory_usage"),
            version=m.get("version") if isinstance(m.get("version"), str) else None,
            last_heartbeat_secs=None if e.last_heartbeat is None
            else round(now - e.last_heartbeat, 3),
            queued=len(e.queue), sent_seq=e.sent_seq,
            acked_seq=acked if isinstance(acked, int) and not isinstance(acked, bool) else None,
            send_failures=e.send_failures,
            publication=m.get("publication") if isinstance(m.get("publication"), dict) else None,
            bootstrap_progress=self._s.progress.get(e.ssp_id),
            start=m.get("start") if isinstance(m.get("start"), dict) else None,
            trusted=bool(e.verified or e.was_ready))

    def ssps(self) -> list[SspInfo]:
        now = time.monotonic()
        counts = self._s.tracker.counts()
        return [self._info(e, counts, now) for _, e in sorted(self._s.entries.items())]

    def ssp(self, ssp_id: str) -> SspInfo | None:
        e = self._s.entries.get(ssp_id)
        return None if e is None else self._info(e, self._s.tracker.counts(), time.monotonic())

    def placements(self) -> dict[str, str | None]:
        return {vid: ent.get("ssp_id") for vid, ent in self._s.tracker.items()}

    def placement(self, view_id: str) -> str | None:
        ent = self._s.tracker.get(view_id)
        return None if ent is None else ent.get("ssp_id")

    def unregister_view(self, view_id: str) -> None:
        self._s.unregister_view(view_id)

    def backends(self) -> Any:
        plane = getattr(self._s, "job_plane", None)
        return None if plane is None else plane.backends

    def workflows(self) -> Any:
        """The workflow engine (scheduler.workflows.engine), None when not attached."""
        return getattr(self._s, "workflows", None)

    def on_ssp_event(self, fn: Callable[[str, str, str], None]) -> None:
        self._s.ssp_events.append(fn)

    def backup_plane(self) -> Any:
        """The scheduler's backup plane (``scheduler.backups.BackupPlane``), None without."""
        return getattr(self._s, "backup_plane", None)

    # ------------------------------------------------------------------ actions
    def flag_ssp(self, ssp_id: str, reason: str, clean: bool) -> bool:
        return bool(self._s.flag_ssp(ssp_id, reason, clean))

    def reclone_running(self) -> bool:
        t = getattr(self._s, "_clone_task", None)
        return bool(t is not None and not t.done()) or bool(self._s.replica.cloning)

    def start_reclone(self, reason: str) -> tuple[int, Any]:
        r = self._s.start_reclone(reason)
        return r.status, r.body

    async def rehash(self) -> dict[str, Any]:
        """Recompute the replica's per-table counts and hashes from its rows, then a drift
        check against the database."""
        counts = await asyncio.to_thread(self._s.replica.rehash)
        drift = getattr(self._s, "drift", None)
        if drift is not None:
            await drift.check_once()
        return counts

    async def job_kill(self, job_id: str) -> tuple[Any, ...]:
        plane = self._s.job_plane
        if plane is None:
            return 503, {"error": "no_ssp", "message": "the job plane is not running"}
        return tuple(await plane.kill(job_id))

    async def job_retry(self, job_id: str) -> tuple[Any, ...]:
        plane = self._s.job_plane
        if plane is None:
            return 503, {"error": "no_ssp", "message": "the job plane is not running"}
        return tuple(await plane.retry(job_id))

    async def ssp_call(self, ssp_id: str, method: str, path: str, body: Any = None,
                       timeout: float = 10.0) -> tuple[int, Any] | None:
        """One HTTP call to an SSP; (status, decoded JSON or text) or None when unreachable."""
        e = self._s.entries.get(ssp_id)
        if e is None or self._session is None:
            return None
        data = None if body is None else json.dumps(body).encode()
        headers = {**e.auth}
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            async with self._session.request(method, f"{e.url}{path}", data=data,
                                             headers=headers,
                                             timeout=aiohttp.ClientTimeout(total=timeout)) as r:
                raw = await r.read()
                try:
                    return r.status, json.loads(raw)
                except ValueError:
                    return r.status, raw.decode("utf-8", "replace")
        except (aiohttp.ClientError, TimeoutError) as err:
            log.info("SSP %s unreachable for %s %s (%s)", ssp_id, method, path,
                     type(err).__name__)
            return None

    @asynccontextmanager
    async def ssp_stream(self, ssp_id: str, path: str, params: Mapping[str, str],
                         headers: Mapping[str, str] | None = None,
                         ) -> AsyncIterator[aiohttp.ClientResponse | None]:
        """A streamed GET to an SSP (no total timeout); yields None when unreachable."""
        e = self._s.entries.get(ssp_id)
        if e is None or self._session is None:
            yield None
            return
        try:
            resp = await self._session.get(f"{e.url}{path}", params=dict(params),
                                           headers={**e.auth, **(headers or {})},
                                           timeout=aiohttp.ClientTimeout(total=None,
                                                                         sock_connect=5))
        except (aiohttp.ClientError, TimeoutError):
            yield None
            return
        try:
            yield resp
        finally:
            resp.release()
