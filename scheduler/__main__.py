"""``svc-scheduler --config scheduler.yml``: the coordinator process.

One uvloop event loop: the Falcon ingest listener served by uvicorn in-process, and the
:class:`scheduler.core.Scheduler` (WAL, replica, SSP pool). The listener comes up first so
``/health`` and ``/ingest`` answer 503 while the replica is cloned.

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

from ipc.http import SERVER_KEEPALIVE_SECS
from scheduler.app import create_app
from scheduler.config import ConfigError, SchedulerConfig
from scheduler.core import Scheduler
from scheduler.wal import WalCorrupt

log = logging.getLogger("scheduler")


class _Server(uvicorn.Server):
    """uvicorn without its own signal capture: ours sets ``should_exit`` and the process
    exits 0 after the shutdown (uvicorn re-raises the captured signal otherwise)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


async def _run(cfg: SchedulerConfig) -> int:
    scheduler = Scheduler(cfg)
    server = _Server(uvicorn.Config(create_app(scheduler), host=cfg.ingest_host,
                                    port=cfg.ingest_port, loop="uvloop", lifespan="on",
                                    timeout_keep_alive=SERVER_KEEPALIVE_SECS,
                                    log_level="warning"))
    loop = asyncio.get_running_loop()

    def stop() -> None:
        log.info("shutting down")
        server.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    serving = asyncio.create_task(server.serve(), name="http")
    starting = asyncio.create_task(scheduler.start(), name="start")
    try:
        done, _ = await asyncio.wait({serving, starting}, return_when=asyncio.FIRST_EXCEPTION)
        if starting in done and starting.exception() is not None:
            log.error("scheduler start failed", exc_info=starting.exception())
            server.should_exit = True
        await serving
        if not starting.done():
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
    finally:
        await scheduler.close()
    if not server.started:
        log.error("could not listen on %s:%d", cfg.ingest_host, cfg.ingest_port)
        return 1
    if starting.done() and not starting.cancelled() and starting.exception() is not None:
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Console entry point."""
    parser = argparse.ArgumentParser(prog="svc-scheduler", description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=None, help="scheduler YAML file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("SVC_LOG_LEVEL", "INFO").upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    try:
        cfg = SchedulerConfig.load(args.config, os.environ)
    except ConfigError as e:
        print(f"svc-scheduler: {e}", file=sys.stderr)
        return 1
    try:
        return uvloop.run(_run(cfg))
    except (WalCorrupt, OSError) as e:
        print(f"svc-scheduler: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
