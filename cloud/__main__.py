"""``python -m cloud`` (console script ``svc-cloud``): the hosted platform's control plane.

The main process reads the configuration (``cloud.config``), waits for the database (up to
60 s, so a supervisor may start both together), applies the control plane's schema, then
starts gunicorn (``-k asgi``, uvloop, ``SVC_CLOUD_WORKERS`` workers serving
``cloud.asgi:create_app()``) and runs the background worker (``cloud.worker``) itself.
gunicorn is started through ``ipc.lifeline`` and its workers die with their master
(``gateway.gunicorn_hooks``), so nothing outlives this process, ``kill -9`` included; a
gunicorn that dies is started again. SIGTERM/SIGINT: gunicorn stops (in-flight requests
finish, each worker flushes its request counts), then the worker, then the process exits 0.

Exit codes: 0 after a stop signal, 2 on a configuration error, 1 when the database cannot be
reached or the schema cannot be applied at start.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence

from cloud.config import CloudConfig, ConfigError
from cloud.errors import CloudError
from cloud.services import build
from cloud.worker import Worker
from dbclient import Database, DbError
from dbclient.tasks import cancel_and_wait
from ipc.http import SERVER_KEEPALIVE_SECS
from ipc.lifeline import lifeline_argv

log = logging.getLogger("cloud")

DB_WAIT_SECS = 60.0


def gunicorn_argv(cfg: CloudConfig, python: str = sys.executable) -> list[str]:
    host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
    return [python, "-m", "gunicorn", "-k", "asgi", "-w", str(cfg.workers),
            "-b", f"{host}:{cfg.port}", "--no-control-socket", "--graceful-timeout", "5",
            "--keep-alive", str(SERVER_KEEPALIVE_SECS), "--asgi-lifespan", "on",
            "-c", "python:gateway.gunicorn_hooks", "cloud.asgi:create_app()"]


class Service:
    def __init__(self, cfg: CloudConfig) -> None:
        self.cfg = cfg
        self.stopping = False
        self.gunicorn: asyncio.subprocess.Process | None = None

    async def _connect(self, db: Database) -> None:
        deadline = time.monotonic() + DB_WAIT_SECS
        while True:
            try:
                await db.connect()
                return
            except DbError as e:
                if time.monotonic() > deadline:
                    raise
                log.info("waiting for the database (%s): %s", self.cfg.db.ws_url, e)
                await asyncio.sleep(0.5)

    async def _serve(self) -> None:
        argv = lifeline_argv(gunicorn_argv(self.cfg))
        while not self.stopping:
            self.gunicorn = await asyncio.create_subprocess_exec(*argv, env=dict(os.environ),
                                                                 start_new_session=True)
            code = await self.gunicorn.wait()
            if self.stopping:
                return
            log.error("gunicorn exited with %s; starting it again", code)
            await asyncio.sleep(1.0)

    async def _stop_gunicorn(self) -> None:
        g = self.gunicorn
        if g is None or g.returncode is not None:
            return
        g.terminate()
        try:
            await asyncio.wait_for(g.wait(), 15)
        except TimeoutError:
            g.kill()
            await g.wait()

    async def run(self) -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        db = Database(self.cfg.db)
        services = build(self.cfg, db)
        try:
            await self._connect(db)
            await services.store.apply_schema()
        except (DbError, CloudError) as e:
            log.error("svc-cloud cannot start: the database at %s: %s", self.cfg.db.ws_url, e)
            await db.close()
            return 1
        serve = loop.create_task(self._serve(), name="gunicorn")
        work = loop.create_task(Worker(services).run(), name="worker")
        print(f"svc-cloud: serving {self.cfg.url} (REST /v1, MCP {self.cfg.url}/v1/mcp; "
              f"state in {self.cfg.db.ws_url} {self.cfg.db.namespace}/{self.cfg.db.database})",
              flush=True)
        await stop.wait()
        self.stopping = True
        await self._stop_gunicorn()
        await cancel_and_wait(serve, work)
        await db.close()
        log.info("svc-cloud stopped")
        return 0


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        cfg = CloudConfig.from_env(os.environ if env is None else env)
    except ConfigError as e:
        print(f"svc-cloud: configuration error: {e}", file=sys.stderr)
        return 2
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    return asyncio.run(Service(cfg).run())


if __name__ == "__main__":
    sys.exit(main())
