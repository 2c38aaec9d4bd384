"""`python -m ssp` (console script `svc-ssp`): the SSP hub process.

Starts, in order: the hub's ZeroMQ ROUTER (so `/health` answers `bootstrapping` at once), the
shard workers (`python -m ssp.shard`), the bootstrap, and gunicorn with the Falcon ASGI
gateway (`gateway.ssp_app:create_app()`, `-k asgi`). It supervises them: a shard that dies is
restarted and its views rebuilt from the hub's registry (or the SSP reports `failed`); a
gateway that dies is restarted. SIGTERM/SIGINT: stop gunicorn (no new requests), flush the
pending edges, write the snapshot, stop the shards, exit 0.

The gateway and the shards never outlive the hub: each runs in its own session (a signal to
the SSP's process group reaches the hub only, which stops them in order) and is started
through `ipc.lifeline`, so the kernel SIGKILLs it the moment the hub exits, `kill -9`
included; gunicorn's workers die with their master the same way (`gateway.gunicorn_hooks`).
A relaunched SSP therefore finds its port free.

Exit codes: 0 after a graceful shutdown, 2 on a configuration error, 1 when startup fails.
Scheduler mode (`ssp.link`) adds the spec's codes, each after the same graceful stop: 2 the
post-bootstrap integrity check kept failing, 3 the scheduler does not know this SSP (heartbeat
404), 4 resync directive (heartbeat 409), 5 scheduler unreachable / 6 registration refused
within `SVC_SSP_REGISTER_MAX_WAIT_SECS`. All ask the supervisor to relaunch the SSP.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import shutil
import signal
import sys
from collections.abc import Mapping, Sequence

from dbclient import DbError
from dbclient.tasks import cancel_and_wait
from engine import gcpolicy
from ipc.exitnow import exit_now
from ipc.lifeline import lifeline_argv
from ipc.rpc import RpcServer
from ssp.config import ConfigError, SspConfig
from ssp.hub import Hub
from ssp.hub.introspection import start_hub_tracing
from ssp.link import SchedulerExit
from ssp.rundir import secure_dir
from ssp.telemetry import attach, setup_meter

log = logging.getLogger("ssp")


def gateway_argv(cfg: SspConfig) -> list[str] | None:
    """The gunicorn command line, or None when the gateway module is not installed."""
    if importlib.util.find_spec("gateway.ssp_app") is None:
        return None
    from gateway.serve import gunicorn_argv

    # Dies with this process (SIGKILL): a gateway left behind would hold the SSP's port.
    return lifeline_argv(gunicorn_argv(cfg))


class Supervisor:
    """Runs the hub and its child processes until a stop signal."""

    def __init__(self, cfg: SspConfig) -> None:
        self.cfg = cfg
        self.hub = Hub(cfg)
        # The spec's ssp_edge_* instruments; exported only when OTEL_* asks (ssp.telemetry).
        meter, self.meter_provider = setup_meter(
            cfg.metrics_exporters, interval_ms=cfg.metrics_export_interval_ms,
            service_name="svc-ssp", instance_id=cfg.ssp_id)
        attach(self.hub.publisher, meter)
        self.server: RpcServer | None = None
        self.gateway: asyncio.subprocess.Process | None = None
        self.stopping = False
        self._stop = asyncio.Event()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        try:
            for d in self.cfg.socket_dirs:
                secure_dir(d)
        except OSError as err:
            log.error("SSP cannot start: %s", err)
            return 2
        self.server = RpcServer(self.cfg.hub_endpoint, self.hub.handle)
        serve = loop.create_task(self.server.serve(), name="hub-rpc")
        gw = loop.create_task(self._run_gateway(), name="gateway")
        start = loop.create_task(self.hub.start(), name="bootstrap")
        stop_wait = loop.create_task(self._stop.wait())
        exit_wait = loop.create_task(self.hub.exit_event.wait())
        done, _ = await asyncio.wait({start, stop_wait, exit_wait},
                                     return_when=asyncio.FIRST_COMPLETED)
        code = 0
        if start in done and isinstance(start.exception(), SchedulerExit):
            e = start.exception()
            log.error("SSP exits: %s", e)
            code = e.code  # type: ignore[union-attr]
        elif start in done and start.exception() is not None:
            e = start.exception()
            log.error("SSP startup failed: %s", e)
            self.hub.status = "failed"
            code = 1
        elif start in done:
            await asyncio.wait({stop_wait, exit_wait}, return_when=asyncio.FIRST_COMPLETED)
        else:
            await cancel_and_wait(start)  # a bootstrap cut short ends before the shutdown
        if exit_wait.done() and self.hub.exit_code is not None:
            code = self.hub.exit_code
            log.warning("SSP exits with code %d (the supervisor should relaunch it)", code)
        stop_wait.cancel()
        exit_wait.cancel()
        self.stopping = True
        await self._stop_gateway()
        gw.cancel()
        try:
            await self.hub.shutdown()
        except (DbError, OSError) as e:
            log.error("shutdown incomplete: %s", e)
        serve.cancel()
        self.server.close()
        if self.meter_provider is not None:
            # The last figures (a final export); bounded so a dead collector cannot hang us.
            await asyncio.to_thread(self.meter_provider.shutdown, 5_000)
        for d in (self.cfg.socket_dirs if self.cfg.run_dir_owned
                  else self.cfg.socket_dirs - {self.cfg.run_dir}):
            shutil.rmtree(d, ignore_errors=True)  # ours alone, made at start
        log.info("SSP stopped")
        return code

    async def _run_gateway(self) -> None:
        argv = gateway_argv(self.cfg)
        if argv is None:
            log.warning("gateway.ssp_app is not available: no HTTP listener (hub only)")
            return
        env = dict(os.environ)
        env["SVC_SSP_RUN_DIR"] = str(self.cfg.run_dir)
        env["SVC_SSP_ID"] = self.cfg.ssp_id
        while not self.stopping:
            # Its own session: SIGTERM to the SSP's group reaches the hub, which stops the
            # gateway first (no new requests) and then flushes.
            self.gateway = await asyncio.create_subprocess_exec(*argv, env=env,
                                                                start_new_session=True)
            code = await self.gateway.wait()
            if self.stopping:
                return
            log.error("gateway exited with %s; restarting", code)
            await asyncio.sleep(1.0)

    async def _stop_gateway(self) -> None:
        gw = self.gateway
        if gw is None or gw.returncode is not None:
            return
        gw.terminate()
        try:
            await asyncio.wait_for(gw.wait(), 15)
        except TimeoutError:
            gw.kill()
            await gw.wait()


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Entry point of `svc-ssp`."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        cfg = SspConfig.from_env(os.environ if env is None else env)
    except ConfigError as e:
        print(f"svc-ssp: configuration error: {e}", file=sys.stderr)
        return 2
    # The hub keeps every view's members and the publication state (long-lived) and makes
    # many short-lived containers per request and flush: the shards' collector settings.
    gcpolicy.configure()
    start_hub_tracing(os.environ if env is None else env)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    return asyncio.run(Supervisor(cfg).run())


if __name__ == "__main__":
    exit_now(main())
