"""The TypeScript client's own tests (clients/ts, vitest on Node), run by the suite: they start
their own database host, SSP (and scheduler) from this checkout's Python (`SVC_PYTHON`) and
check the same rules as tests/integration/test_viewclient.py. One `npm test` per stack mode
(`SVC_TS_MODE`, clients/ts/test/stack.ts): `standalone` (edge mode `dedicated`),
`scheduler` (a scheduler tailing the changefeed, the clients talking to it) and `single`
(standalone, edge mode `single`); each run builds its stack once for all its tests. ops/test
installs the packages with `npm ci` from the lock file first (ops/_npm.sh)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.support.procs import ROOT

TS = ROOT / "clients" / "ts"


def _npm(*args: str, timeout: float, **env_extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_")}
    env["SVC_PYTHON"] = sys.executable
    env.update(env_extra)
    return subprocess.run(["npm", *args], cwd=TS, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_typescript_client_typechecks() -> None:
    r = _npm("run", "--silent", "typecheck", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("mode", ["standalone", "scheduler", "single"])
def test_typescript_client_tests_pass_through_the_real_stack(mode: str) -> None:
    started = time.monotonic()
    r = _npm("test", "--silent", timeout=600, SVC_TS_MODE=mode)
    print(f"npm test ({mode}): {time.monotonic() - started:.1f}s", file=sys.stderr)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    assert " failed" not in r.stdout.split("Tests")[-1], r.stdout[-3000:]
