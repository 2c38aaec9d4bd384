"""The admin plane of one scheduler: its parts, wired once, started and stopped together.

Built by ``scheduler.__main__`` before the scheduler starts (so the log ring sees the start-up
lines and the lifecycle watcher the first registrations) and served by the admin listener
(:mod:`scheduler.admin.app`), whose lifespan calls :meth:`AdminPlane.start` and
:meth:`AdminPlane.stop`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from dbclient.clock import now_ms
from dbclient.tasks import cancel_and_wait
from scheduler.admin.actions import Actions
from scheduler.admin.cloudlink import CloudLink
from scheduler.admin.cluster import Cluster, SchedulerCluster
from scheduler.admin.history import History
from scheduler.admin.jobsampler import JobSampler
from scheduler.admin.lifecycle import Lifecycle
from scheduler.admin.logs import Logs
from scheduler.admin.operations import OperationLog
from scheduler.admin.presence import Presence
from scheduler.admin.ratelimit import LoginLimiter
from scheduler.admin.sessions import SignIn, Standing
from scheduler.admin.sse import LogRing
from scheduler.admin.tokens import TokenAuthority
from scheduler.admin.views import Views

log = logging.getLogger("scheduler.admin")

__all__ = ["AdminPlane"]


class AdminPlane:
    """See the module docstring."""

    def __init__(self, scheduler: Any, *, request_exit: Callable[[int], None] | None = None,
                 cluster: Cluster | None = None) -> None:
        self.cluster: Cluster = cluster or SchedulerCluster(scheduler)
        cfg = self.cluster.cfg
        self.cfg = cfg
        self.ring = LogRing(cfg.admin.log_lines)
        logging.getLogger().addHandler(self.ring)
        self.tokens = TokenAuthority(cfg.auth_secret, cfg.admin.session_ttl_secs, cfg.data_dir,
                                     breakglass_password=cfg.admin.password)
        # every use of a token re-checks its subject (roster, break-glass password)
        self.tokens.standing = Standing(self.cluster.db, self.tokens)
        self.limiter = LoginLimiter()
        self.signin = SignIn(self.cluster, self.tokens, self.limiter)
        self.ops = OperationLog(cfg.data_dir, self.cluster.incidents)
        self.actions = Actions(self.cluster, self.ops, request_exit)
        # spec, Authentication 7: linked only with all three set
        self.cloud_link = CloudLink(cfg.admin.cloud_api_url, cfg.admin.cloud_project,
                                    cfg.auth_secret if cfg.cloud_linked else None)
        self.presence = Presence(self.cluster, watched=self.watched)
        self.views = Views(self.cluster, self.presence)
        self.history = History(self.cluster, self.presence, cfg.data_dir)
        self.jobs = JobSampler(self.cluster)
        self.logs = Logs(self.cluster, self.ring)
        self.lifecycle = Lifecycle(self.cluster)
        self._loops: list[asyncio.Task[None]] = []
        self.started_at = time.time()

    def watched(self) -> bool:
        """An admin stream is open (jobs, operations, logs): samplers at the live cadence."""
        return (self.jobs.channel.viewers + self.ops.channel.viewers
                + self.logs.viewers) > 0

    def wake_samplers(self) -> None:
        """A stream viewer arrived: both samplers move to the live cadence now."""
        self.jobs.wake()
        self.presence.wake()

    async def start(self) -> None:
        await self.cluster.start()
        self.lifecycle.started()
        for name, coro in (("presence", self.presence.run()), ("job-sampler", self.jobs.run()),
                           ("lifecycle", self.lifecycle.run()),
                           ("history", self.history.run())):
            self._loops.append(asyncio.get_running_loop().create_task(coro, name=name))
        self.actions.continue_restarts()

    async def stop(self) -> None:
        # a sampler whose cancel Python 3.11's wait_for loses runs on (dbclient.tasks)
        await cancel_and_wait(*self._loops)
        await self.actions.stop()
        self.ops.shutdown()
        self.tokens.flush()
        await self.cluster.stop()
        logging.getLogger().removeHandler(self.ring)

    # ------------------------------------------------------------------ bodies
    def config(self) -> dict[str, Any]:
        """``GET /admin/api/config`` (public)."""
        cfg = self.cfg
        return {"scheduler_id": self.cluster.scheduler_id, "version": self.cluster.version,
                "breakglass_available": self.signin.breakglass_available,
                "cloud_linked": cfg.cloud_linked, "supervised": cfg.admin.supervised,
                "sessions_persistent": self.tokens.persistent,
                "project_slug": cfg.admin.project_slug}

    def overview(self) -> dict[str, Any]:
        """``GET /admin/api/overview``: from memory only."""
        ssps = self.cluster.ssps()
        monitor = self.cluster.backends()
        backends = monitor.summary() if monitor is not None and monitor.configured \
            else {"status": "none", "counts": {}, "list": []}
        status = self.cluster.scheduler_status()
        snap = self.jobs.snapshot
        rollup = self.presence.rollup()
        return {
            "scheduler": {"entity": "scheduler", "id": self.cluster.scheduler_id,
                          "version": self.cluster.version, "state": self.cluster.state(),
                          "uptime_seconds": int(self.cluster.uptime_secs()),
                          "supervised": self.cfg.admin.supervised, **status},
            "ssps": [s.public() for s in ssps],
            "backends": backends,
            "totals": {"ssps": len(ssps), "ready_ssps": sum(1 for s in ssps if s.serving),
                       "tracked_views": status.get("tracked_views"),
                       "live_views": rollup["views"], "users": rollup["users"],
                       "sessions": rollup["sessions"],
                       "running_jobs": self.cluster.running_jobs(),
                       "jobs": snap["totals"] if snap is not None else "not measured"},
            "presence": rollup,
            "operations": {"running": self.ops.running()},
            "incidents": self.cluster.incidents.summary(),
            "server_time_ms": now_ms(),
        }
