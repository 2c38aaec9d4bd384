"""The control plane's background work, in the service's main process (one per service, not
one per gunicorn worker):

* repo links: every ``SVC_CLOUD_REPO_POLL_SECS``, each link's branch head (``cloud.repolinks``);
* usage: every ``SVC_CLOUD_USAGE_SAMPLE_SECS``, a storage sample per project and the rollups of
  the recent hours (``cloud.usage``);
* deployments: the reconcile worker (``cloud.reconcile``), the only caller of an executor;
* scheduled backups: every ``SVC_CLOUD_BACKUP_TICK_SECS``, the projects whose backup is due
  on their schedule, and retention (``cloud.backupsched``);
* housekeeping on the same tick: projects past their retention purged, tenant data keys
  re-wrapped under the key ring's primary key (``cloud.keys``; also once at start).

A failing tick is logged with its cause and retried at the next one: one broken repository or
a database blip does not stop the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from cloud.backupsched import BackupScheduler
from cloud.docker_executor import DockerExecutor, LocalWithContainers
from cloud.executor import Executor, LocalExecutor
from cloud.reconcile import Reconciler, default_run_dir
from cloud.services import Services
from dbclient.tasks import cancel_and_wait

log = logging.getLogger("cloud.worker")

__all__ = ["Worker"]


class Worker:
    def __init__(self, services: Services) -> None:
        self.s = services
        self.cfg = services.cfg
        self.reconciler = Reconciler(
            services.store, services.deployments, services.values, services.usage,
            self.cfg.link_url,
            Path(self.cfg.run_dir) if self.cfg.run_dir else default_run_dir(self.cfg.port),
            executor=self._executor(),
            tick=self.cfg.deploy_tick_secs, relaunch_backoff=self.cfg.relaunch_backoff_secs)
        self.backup_schedule = BackupScheduler(services.store, services.backups)

    def _executor(self) -> Executor:
        docker = DockerExecutor(self.cfg.docker, platform=f"{self.cfg.host}:{self.cfg.port}")
        if self.cfg.executor == "docker":
            return docker
        # local processes; a container app's image on a daemon when one answers
        return LocalWithContainers(LocalExecutor(), docker)

    async def _every(self, secs: float, name: str, fn: Callable[[], Awaitable[object]]) -> None:
        while True:
            try:
                await fn()
            except Exception:  # noqa: BLE001 - logged; the next tick tries again
                log.exception("%s failed; retried in %.0fs", name, secs)
            await asyncio.sleep(secs)

    async def poll_links(self) -> int:
        n = await self.s.links.poll_all()
        if n:
            log.info("repo links: %d new commit(s)", n)
        return n

    async def usage_tick(self) -> None:
        stored = await self.s.values.stored_bytes()
        await self.s.usage.sample_storage(stored, self.cfg.usage_sample_secs)
        await self.s.usage.rollup()
        purged = await self.s.projects.purge_expired()
        if purged:
            log.info("purged projects past their retention: %s", ", ".join(purged))
        await self.s.keys.rewrap_all()

    async def run(self) -> None:
        try:
            counts = await self.s.keys.rewrap_all()
            log.info("tenant data keys by ring key: %s", counts or "none yet")
        except Exception:  # noqa: BLE001 - the usage tick retries it
            log.exception("re-wrapping data keys at start failed")
        loop = asyncio.get_running_loop()
        loops = []
        if self.cfg.executor != "none":
            loops.append(loop.create_task(self.reconciler.run(), name="reconcile"))
        if self.cfg.repo_poll_secs > 0:
            loops.append(loop.create_task(self._every(self.cfg.repo_poll_secs, "repo poll",
                                                      self.poll_links)))
        if self.cfg.backup_tick_secs > 0 and self.cfg.executor != "none":
            loops.append(loop.create_task(self._every(self.cfg.backup_tick_secs,
                                                      "scheduled backups",
                                                      self.backup_schedule.tick)))
        if self.cfg.usage_sample_secs > 0:
            loops.append(loop.create_task(self._every(self.cfg.usage_sample_secs, "usage tick",
                                                      self.usage_tick)))
        try:
            await asyncio.Event().wait()
        finally:
            # to the end, whatever cancels this meanwhile: the service re-cancels this task
            # while it waits, and giving up then left the reconcile loop's stop of every
            # instance to asyncio.run's final cancel, which dropped the container stops
            # still queued for a thread (more containers than the default pool's threads)
            ending = asyncio.ensure_future(cancel_and_wait(*loops))
            while not ending.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(ending)
