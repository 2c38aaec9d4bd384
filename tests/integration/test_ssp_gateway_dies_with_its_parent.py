"""gunicorn as the SSP runs it: when the master is killed (SIGKILL, as the kernel does when the
SSP dies), its workers die at once (the `post_fork` parent-death signal), not after noticing
the new parent, and the port is free for the next gateway."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
import time
from pathlib import Path

from gateway.serve import gunicorn_argv
from ssp.config import SspConfig
from tests.support import proctable
from tests.support.procs import ManagedProcess, base_env, free_port


def test_killing_the_gunicorn_master_kills_its_workers_and_frees_the_port(
        tmp_path: Path) -> None:
    run_dir = Path(tempfile.mkdtemp(prefix="gw-it-"))
    port = free_port()
    env = base_env(SVC_SSP_RUN_DIR=str(run_dir), SVC_DB_URL="ws://127.0.0.1:9")
    cfg = SspConfig.from_env({**env, "SVC_SSP_LISTEN_ADDR": f"127.0.0.1:{port}",
                              "SVC_SSP_GATEWAY_WORKERS": "2"})
    gw = ManagedProcess("gunicorn", gunicorn_argv(cfg), env, tmp_path / "gunicorn.log").start()
    try:
        gw.wait_http(f"http://127.0.0.1:{port}/no-such-route", want=404, timeout=60)
        assert gw.proc is not None
        # gunicorn forks its workers one after the other: the first may answer before the
        # second exists (the race this test once lost under load), so wait for both
        deadline = time.monotonic() + 60
        workers = proctable.descendants(gw.proc.pid)
        while len(workers) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
            workers = proctable.descendants(gw.proc.pid)
        assert len(workers) == 2, workers
        os.kill(gw.proc.pid, signal.SIGKILL)  # the master only, not its group
        gw.proc.wait()
        assert proctable.wait_gone(workers) == []
        # gunicorn's own check would have shut them down gracefully, saying so: they did not
        # live long enough to notice.
        assert "Parent changed" not in gw.log_text()
        with socket.socket() as s:
            # Nothing listens on the port any more (SO_REUSEADDR, as gunicorn binds: the
            # probe's closed connection may sit in TIME_WAIT, which does not hold a listener).
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen()
    finally:
        gw.stop()
        shutil.rmtree(run_dir, ignore_errors=True)
