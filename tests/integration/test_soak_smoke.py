"""The soak benchmark (`loadtests/soak_stack.py`) in its short mode: the cluster stack as
`ops/run --memory --ssps 2` starts it, steady updates, and every view's edges equal to
SurrealDB's answer once the load stops (the script exits 1 otherwise)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.procs import ROOT, base_env


def test_the_soak_short_run_converges_and_prints_memory_per_process() -> None:
    r = subprocess.run([sys.executable, "loadtests/soak_stack.py", "--short"], cwd=str(ROOT),
                       env=base_env(), capture_output=True, text=True, timeout=900, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert "(RSS MB)" in r.stdout and "scheduler" in r.stdout and "db" in r.stdout
    assert "edges equal SurrealDB's answer for 51/51 views" in r.stdout, out[-6000:]
