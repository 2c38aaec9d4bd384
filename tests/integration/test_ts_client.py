"""The TypeScript client's own tests (clients/ts, vitest on Node), run by the suite: they start
their own database host, SSP and backend from this checkout's Python (`SVC_PYTHON`) and check
the same rules as tests/integration/test_viewclient.py. ops/test installs the packages with
`npm ci` from the lock file first (ops/_npm.sh)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.procs import ROOT

TS = ROOT / "clients" / "ts"


def _npm(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_")}
    env["SVC_PYTHON"] = sys.executable
    return subprocess.run(["npm", *args], cwd=TS, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_typescript_client_typechecks() -> None:
    r = _npm("run", "--silent", "typecheck", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_typescript_client_tests_pass_through_the_real_stack() -> None:
    r = _npm("test", "--silent", timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    assert " failed" not in r.stdout.split("Tests")[-1], r.stdout[-3000:]
