"""`svc-db`: run the database host until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from dbhost import scratch as scratch_dir
from dbhost.config import ConfigError, HostConfig, load_config
from dbhost.engine import Engine, EngineError
from dbhost.lock import DirectoryInUse, DirectoryLock
from dbhost.server import DbHostServer
from engine import gcpolicy
from ipc.exitnow import exit_now

log = logging.getLogger("dbhost")

EXIT_CONFIG = 2
EXIT_IN_USE = 3
EXIT_ENGINE = 4


async def serve(config: HostConfig, scratch: Path | None = None) -> int:
    """Open the engine, create the root user, serve until a stop signal; returns the exit code.
    `scratch`: the memory-only host's scratch directory (`dbhost.scratch`)."""
    url = config.engine_url(scratch)
    engine = Engine(url, node=config.engine == "node", allow_net=config.allow_net,
                    max_inflight=config.max_inflight)
    try:
        await engine.start()
    except Exception as exc:  # noqa: BLE001 - the engine raises its own types for storage
        log.error("could not open the engine at %s: %s", url, exc)
        return EXIT_ENGINE
    try:
        await engine.ensure_root_user(config.user, config.password)
    except EngineError as exc:
        # An engine parse error quotes the statement, which holds the password: redact it.
        log.error("could not create the root user %r: %s", config.user,
                  exc.message.replace(config.password, "***"))
        await engine.close()
        return EXIT_ENGINE
    server = DbHostServer(config, engine)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
    except OSError as exc:
        log.error("could not listen on %s:%s: %s", config.host, config.port, exc)
        await engine.close()
        return EXIT_CONFIG
    # Under load the loop allocates many short-lived containers per request (frames, feed
    # reads) and builds no cycles on that path: CPython's default first-generation threshold
    # (700) made the collector ~17% of the main thread in issue 31's soak, and each full
    # collection walked every module object. Freeze what start-up built and collect rarely,
    # as the SSP's processes do (`engine.gcpolicy`).
    gcpolicy.configure()
    gc.freeze()
    log.info("svc-db listening on %s:%s (engine %s, %s build, storage %s)", config.host,
             config.port, engine.version, config.engine, config.path or "memory")
    await stop.wait()
    log.info("svc-db shutting down")
    await server.stop()
    await engine.close()
    log.info("svc-db stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point (`svc-db`); the only place that reads the environment."""
    try:
        config = load_config(sys.argv[1:] if argv is None else argv, os.environ)
    except ConfigError as exc:
        print(f"svc-db: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(
        level=getattr(logging, config.log_level, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if config.insecure_default_root:
        log.warning("SVC_DB_USER/SVC_DB_PASS not set: using root/root because of "
                    "--insecure-default-root. NEVER do this outside local development.")
    lock: DirectoryLock | None = None
    scratch: Path | None = None
    if config.path is None:
        scratch = scratch_dir.create()
    else:
        lock = DirectoryLock(config.path)
        try:
            lock.acquire()
        except DirectoryInUse as exc:
            log.error("%s", exc)
            return EXIT_IN_USE
    try:
        try:
            import uvloop
            uvloop.install()
        except ImportError:
            pass
        return asyncio.run(serve(config, scratch))
    finally:
        if lock is not None:
            lock.release()
        if scratch is not None:
            scratch_dir.remove(scratch)


if __name__ == "__main__":
    exit_now(main())
