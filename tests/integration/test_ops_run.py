"""`ops/run` brings the database host up, answers /health, and Ctrl-C leaves no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.procs import ROOT, base_env, free_port, http_status


def _pgrep_group(pgid: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,pgid="], capture_output=True, text=True).stdout
    pids = []
    for line in out.splitlines():
        pid, group = line.split()
        if int(group) == pgid:
            pids.append(int(pid))
    return pids


def _descendants(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        p, pp = (int(x) for x in line.split())
        children.setdefault(pp, []).append(p)
    found, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


@pytest.mark.parametrize(("sig", "with_ssp"), [(signal.SIGINT, True), (signal.SIGTERM, False)])
def test_ops_run_serves_health_and_stops_every_child(tmp_path: Path, sig: int, with_ssp: bool) -> None:
    port = free_port()
    ssp_port = free_port()
    data = tmp_path / "data"
    extra = ["--ssp-bind", f"127.0.0.1:{ssp_port}"] if with_ssp else ["--no-ssp"]
    proc = subprocess.Popen(
        [str(ROOT / "ops" / "run"), "--db-bind", f"127.0.0.1:{port}", "--data", str(data), *extra],
        env=base_env(SVC_DB_USER="root", SVC_DB_PASS="ops-run-test"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and http_status(f"http://127.0.0.1:{port}/health") != 200:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            time.sleep(0.1)
        assert http_status(f"http://127.0.0.1:{port}/health") == 200
        if with_ssp:
            # ops/run announces the stack only once every service is healthy.
            while time.monotonic() < deadline and http_status(f"http://127.0.0.1:{ssp_port}/health") != 200:
                assert proc.poll() is None
                time.sleep(0.2)
            assert http_status(f"http://127.0.0.1:{ssp_port}/health") == 200
        kids = _descendants(proc.pid)
        assert kids, "ops/run started no child process"
        os.kill(proc.pid, sig)  # what Ctrl-C (SIGINT) or a service manager (SIGTERM) sends
        out, _ = proc.communicate(timeout=60)
        text = out.decode(errors="replace")
        assert proc.returncode == 0, text
        assert "database host" in text and str(port) in text
        time.sleep(0.2)
        left = [k for k in kids if os.path.exists(f"/proc/{k}") and
                "zombie" not in Path(f"/proc/{k}/status").read_text().lower()]
        assert left == [], f"processes left behind: {left}"
        assert http_status(f"http://127.0.0.1:{port}/health") is None
        assert http_status(f"http://127.0.0.1:{ssp_port}/health") is None
        assert data.is_dir()  # storage in the given directory, not memory
        # The password the stack was given never appears in its output.
        assert "ops-run-test" not in text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
