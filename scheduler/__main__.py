"""``svc-scheduler --config scheduler.yml``: the coordinator process.

One uvloop event loop: the Falcon ingest listener served by uvicorn in-process, and the
:class:`scheduler.core.Scheduler` (WAL, replica, SSP pool). The listener comes up first so
``/health`` and ``/ingest`` answer 503 while the replica is cloned. The admin listener
(:mod:`scheduler.admin`) is a second uvicorn server in the same loop on
``SVC_ADMIN_HOST:SVC_ADMIN_PORT`` unless ``SVC_ADMIN_ENABLED`` is off; a scheduler restart
asked through it exits with code 4 (the supervisor relaunches).

SIGTERM/SIGINT: stop accepting, let in-flight requests finish, flush the group committer,
close the WAL and the replica, exit 0. Exit 1 for a bad configuration or unusable data files.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Generator
from pathlib import Path

import uvicorn
import uvloop

from dbclient.tasks import cancel_and_wait
from ipc import otel
from ipc.exitnow import exit_now
from ipc.http import SERVER_KEEPALIVE_SECS
from scheduler.admin.app import create_admin_app
from scheduler.admin.plane import AdminPlane
from scheduler.app import create_app
from scheduler.config import ConfigError, SchedulerConfig
from scheduler.core import Scheduler
from scheduler.malloctune import pin_mmap_threshold
from scheduler.pools.run import PoolRunner
from scheduler.serving import guarded_protocol
from scheduler.wal import WalCorrupt

log = logging.getLogger("scheduler")

#: how long a stopping admin listener waits for requests still running. Its event streams
#: (operations, jobs, logs) only notice a viewer that went away at their next keepalive (15 s):
#: without a bound, a browser tab closed just before a stop held the shutdown past a
#: supervisor's patience (seen: SIGKILL after 15 s).
ADMIN_SHUTDOWN_GRACE_SECS = 3


class _Server(uvicorn.Server):
    """uvicorn without its own signal capture: ours sets ``should_exit`` and the process
    exits 0 after the shutdown (uvicorn re-raises the captured signal otherwise)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


async def _run(cfg: SchedulerConfig, pools: PoolRunner) -> int:
    scheduler = Scheduler(cfg)
    # Request metrics of both listeners; exported only when OTEL_* asks (ipc.otel).
    meter, meter_provider = otel.setup_meter(
        cfg.metrics_exporters, interval_ms=cfg.metrics_export_interval_ms,
        service_name="svc-scheduler", instance_id=cfg.scheduler_id, meter_name="scheduler")
    protocol = guarded_protocol(cfg.http_read_timeout_secs)
    # No listener believes X-Forwarded-* by default (uvicorn trusts them from loopback): the
    # admin listener only from SVC_ADMIN_TRUSTED_PROXIES, so a forged header never picks the
    # address the sign-in limit counts or the one the log shows.
    server = _Server(uvicorn.Config(create_app(scheduler, meter), host=cfg.ingest_host,
                                    port=cfg.ingest_port, loop="uvloop", lifespan="on",
                                    timeout_keep_alive=SERVER_KEEPALIVE_SECS, http=protocol,
                                    proxy_headers=False, log_level="warning"))
    loop = asyncio.get_running_loop()
    exit_code = 0
    admin_server: _Server | None = None

    def stop() -> None:
        log.info("shutting down")
        server.should_exit = True
        pools.should_exit()
        if admin_server is not None:
            admin_server.should_exit = True

    def request_exit(code: int) -> None:
        nonlocal exit_code
        exit_code = code
        stop()

    if cfg.admin.enabled:
        plane = AdminPlane(scheduler, request_exit=request_exit)
        trusted = list(cfg.admin.trusted_proxies)
        admin_server = _Server(uvicorn.Config(create_admin_app(plane, meter), host=cfg.admin.host,
                                              port=cfg.admin.port, loop="uvloop",
                                              lifespan="on",
                                              timeout_keep_alive=SERVER_KEEPALIVE_SECS,
                                              timeout_graceful_shutdown=ADMIN_SHUTDOWN_GRACE_SECS,
                                              http=protocol, proxy_headers=bool(trusted),
                                              forwarded_allow_ips=trusted or None,
                                              log_level="warning"))
        plane.pools = pools.attach(scheduler)  # type: ignore[attr-defined]
    else:
        pools.attach(scheduler)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    serving = asyncio.create_task(server.serve(), name="http")
    admin_serving = (asyncio.create_task(admin_server.serve(), name="admin-http")
                     if admin_server is not None else None)
    starting = asyncio.create_task(scheduler.start(), name="start")
    pool_serving = pools.serve(_Server)
    try:
        watched = {serving, starting} | ({admin_serving} if admin_serving else set()) \
            | ({pool_serving} if pool_serving else set())
        done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_EXCEPTION)
        if starting in done and starting.exception() is not None:
            log.error("scheduler start failed", exc_info=starting.exception())
            stop()
        if admin_serving is not None and admin_serving.done():
            stop()  # the admin listener could not start (its port): stop as for the other
        if pool_serving is not None and pool_serving.done():
            stop()  # the pool listener could not start (its port)
        await serving
        if admin_serving is not None:
            await asyncio.gather(admin_serving, return_exceptions=True)
        if not starting.done():
            await cancel_and_wait(starting)  # start's database calls may lose it (dbclient.tasks)
    finally:
        await pools.close()
        await scheduler.close()
        if meter_provider is not None:
            # The last figures (a final export), bounded so a dead collector cannot hang us.
            await asyncio.to_thread(meter_provider.shutdown, 5_000)
    if not server.started:
        log.error("could not listen on %s:%d", cfg.ingest_host, cfg.ingest_port)
        return 1
    if admin_server is not None and not admin_server.started:
        log.error("could not listen on %s:%d (admin listener; SVC_ADMIN_ENABLED=false turns "
                  "it off)", cfg.admin.host, cfg.admin.port)
        return 1
    if not pools.started_ok():
        return 1
    if starting.done() and not starting.cancelled() and starting.exception() is not None:
        return 1
    return exit_code


def main(argv: list[str] | None = None) -> int:
    """Console entry point."""
    parser = argparse.ArgumentParser(prog="svc-scheduler", description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=None, help="scheduler YAML file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("SVC_LOG_LEVEL", "INFO").upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    pin_mmap_threshold()  # large buffers are unmapped when freed (scheduler.malloctune)
    try:
        cfg = SchedulerConfig.load(args.config, os.environ)
        pools = PoolRunner.from_env(cfg, os.environ)
    except ConfigError as e:
        print(f"svc-scheduler: {e}", file=sys.stderr)
        return 1
    try:
        return uvloop.run(_run(cfg, pools))
    except (WalCorrupt, OSError) as e:
        print(f"svc-scheduler: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    exit_now(main())
