"""`ops/run` brings the database host up, answers /health, and Ctrl-C leaves no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import proctable
from tests.support.procs import ROOT, base_env, free_port, http_status


def _descendants(pid: int) -> list[int]:
    return proctable.descendants(pid)


@pytest.mark.parametrize(("sig", "with_ssp"), [(signal.SIGINT, True), (signal.SIGTERM, False)])
def test_ops_run_serves_health_and_stops_every_child(tmp_path: Path, sig: int, with_ssp: bool) -> None:
    port = free_port()
    ssp_port = free_port()
    data = tmp_path / "data"
    extra = ["--ssp-bind", f"127.0.0.1:{ssp_port}"] if with_ssp else ["--no-ssp"]
    log = tmp_path / "ops-run.log"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(ROOT / "ops" / "run"), "--db-bind", f"127.0.0.1:{port}", "--data", str(data),
             *extra],
            env=base_env(SVC_DB_USER="root", SVC_DB_PASS="ops-run-test", TMPDIR=str(tmp)),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 180
        # ops/run announces the stack only once every service is healthy.
        while time.monotonic() < deadline and "service is up" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")
            time.sleep(0.1)
        assert http_status(f"http://127.0.0.1:{port}/health") == 200
        if with_ssp:
            assert http_status(f"http://127.0.0.1:{ssp_port}/health") == 200
        kids = _descendants(proc.pid)
        assert kids, "ops/run started no child process"
        os.kill(proc.pid, sig)  # what Ctrl-C (SIGINT) or a service manager (SIGTERM) sends
        proc.wait(timeout=60)
        text = log.read_text(errors="replace")
        assert proc.returncode == 0, text
        assert "database host" in text and str(port) in text
        time.sleep(0.2)
        left = [k for k in kids if os.path.exists(f"/proc/{k}") and
                "zombie" not in Path(f"/proc/{k}/status").read_text().lower()]
        assert left == [], f"processes left behind: {left}"
        assert http_status(f"http://127.0.0.1:{port}/health") is None
        assert http_status(f"http://127.0.0.1:{ssp_port}/health") is None
        assert data.is_dir()  # storage in the given directory, not memory
        assert list(tmp.iterdir()) == []  # its temporary directory (svc-stack-*) is gone
        # The password the stack was given never appears in its output.
        assert "ops-run-test" not in text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
