"""The pools' part of the scheduler process: the service and its listener, started and
stopped by ``scheduler.__main__``. Without a pool (no backend ``run_on`` and no
``SVC_POOLS``) nothing runs and no port is bound."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import uvicorn

from dbclient import Database
from dbclient.tasks import cancel_and_wait
from ipc.http import SERVER_KEEPALIVE_SECS
from scheduler.config import SchedulerConfig
from scheduler.pools.app import create_pool_app
from scheduler.pools.config import PoolsConfig
from scheduler.pools.service import PoolService
from scheduler.serving import guarded_protocol

log = logging.getLogger("scheduler.pools")


class PoolRunner:
    def __init__(self, cfg: SchedulerConfig, pools: PoolsConfig) -> None:
        self.cfg = cfg
        self.pools_cfg = pools
        self.service: PoolService | None = None
        self.server: uvicorn.Server | None = None
        self.serving: asyncio.Task[None] | None = None
        self.starting: asyncio.Task[None] | None = None

    @classmethod
    def from_env(cls, cfg: SchedulerConfig, env: Mapping[str, str]) -> PoolRunner:
        return cls(cfg, PoolsConfig.from_env(env))

    def attach(self, scheduler: Any) -> PoolService | None:
        """Build the service over the scheduler's incident store (None without pools)."""
        if not self.pools_cfg.pools:
            return None
        self.service = PoolService(self.pools_cfg, Database(self.cfg.db), self.cfg.data_dir,
                                   scheduler.incidents)
        plane = getattr(scheduler, "job_plane", None)
        if plane is not None:
            plane.pooled = self.service  # job kill and retry of pooled tables come here
        return self.service

    def serve(self, server_cls: type[uvicorn.Server]) -> asyncio.Task[None] | None:
        if self.service is None:
            return None
        self.server = server_cls(uvicorn.Config(
            create_pool_app(self.service), host=self.pools_cfg.host, port=self.pools_cfg.port,
            loop="uvloop", lifespan="off", timeout_keep_alive=SERVER_KEEPALIVE_SECS,
            http=guarded_protocol(self.cfg.http_read_timeout_secs), proxy_headers=False,
            log_level="warning"))
        self.starting = asyncio.create_task(self._start(), name="pools-start")
        self.serving = asyncio.create_task(self.server.serve(), name="pool-http")
        return self.serving

    async def _start(self) -> None:
        assert self.service is not None
        while True:  # the database may not be up yet: as the scheduler, retry forever
            try:
                await self.service.start()
                return
            except Exception as e:  # noqa: BLE001 - logged, retried
                log.warning("machine pools could not start (%s); retrying in 2s", e)
                await asyncio.sleep(2.0)

    def should_exit(self) -> None:
        if self.server is not None:
            self.server.should_exit = True

    def started_ok(self) -> bool:
        if self.server is not None and not self.server.started:
            log.error("could not listen on %s:%d (pool listener)", self.pools_cfg.host,
                      self.pools_cfg.port)
            return False
        return True

    async def close(self) -> None:
        if self.serving is not None:
            self.should_exit()
            await asyncio.gather(self.serving, return_exceptions=True)
        if self.starting is not None and not self.starting.done():
            await cancel_and_wait(self.starting)  # a lost cancel: dbclient.tasks
        if self.service is not None:
            await self.service.close()
