"""The TypeScript client's own tests (clients/ts, vitest on Node), run by the suite: they start
their own database host, SSP (and scheduler) from this checkout's Python (`SVC_PYTHON`) and
check the same rules as tests/integration/test_viewclient.py. One `npm test` per stack mode
(`SVC_TS_MODE`, clients/ts/test/stack.ts): `standalone` (edge mode `dedicated`),
`scheduler` (a scheduler tailing the changefeed, the clients talking to it), `single`
(standalone, edge mode `single`), `http` (standalone, transport `http` on SurrealDB's Node
build), `http-scheduler` (transport `http`, the events posting to a scheduler) and
`http-single` (transport `http`, standalone, edge mode `single`); each run builds its stack
once for all its tests. ops/test
installs the packages with `npm ci` from the lock file first (ops/_npm.sh).

The module builds the client once (`npm run build`: the type check and `dist/`;
`SVC_TS_PREBUILT` tells the runs the build is done), then starts the
runs at once: each spends most of its time waiting (TTL expiry, restarts, the stack starting),
so together they take about as long as the longest alone. Each test waits for its own run."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

import pytest

from tests.support import lifeline
from tests.support.procs import ROOT
from tests.support.tsbuild import dist_lock

TS = ROOT / "clients" / "ts"
MODES = ("standalone", "scheduler", "single", "http", "http-scheduler", "http-single")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_")}
    env["SVC_PYTHON"] = sys.executable
    env.update(extra)
    return env


@dataclass
class Run:
    """One `npm` command running in the background, its output in a temporary file."""

    what: str
    proc: subprocess.Popen[bytes]
    out: IO[bytes]
    started: float

    def wait(self, timeout: float) -> tuple[int, str]:
        """(exit code, output); killed (with its stack) when `timeout` runs out."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
            raise AssertionError(f"{self.what} still running after {timeout:.0f}s:\n"
                                 + self.output()[-6000:]) from None
        print(f"{self.what}: {time.monotonic() - self.started:.1f}s", file=sys.stderr)
        return code, self.output()

    def output(self) -> str:
        self.out.seek(0)
        return self.out.read().decode(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            # SIGTERM to the group: vitest's afterAll stops the stack it started
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        lifeline.release(self.proc.pid)
        self.out.close()


def _start(what: str, *args: str, **env: str) -> Run:
    out = tempfile.TemporaryFile()
    proc = subprocess.Popen(["npm", *args], cwd=TS, env=_env(**env), stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)
    lifeline.adopt(proc.pid)  # the run and its stack die with this one, killed or not
    return Run(what, proc, out, time.monotonic())


@dataclass
class Runs:
    build: tuple[int, str]
    modes: dict[str, Run]


@pytest.fixture(scope="module")
def runs() -> Iterator[Runs]:
    with dist_lock():  # test_ops_run builds and runs the README's example from dist/ too
        build = _start("npm run build", "run", "--silent", "build").wait(timeout=300)
    modes: dict[str, Run] = {}
    try:
        if build[0] == 0:
            for mode in MODES:
                modes[mode] = _start(f"npm test ({mode})", "test", "--silent",
                                     SVC_TS_MODE=mode, SVC_TS_PREBUILT="1")
        yield Runs(build, modes)
    finally:
        for run in modes.values():
            run.stop()


def test_typescript_client_typechecks(runs: Runs) -> None:
    code, out = runs.build  # `tsc -p tsconfig.json`: the type check, emitting dist/
    assert code == 0, out


@pytest.mark.parametrize("mode", MODES)
def test_typescript_client_tests_pass_through_the_real_stack(runs: Runs, mode: str) -> None:
    assert mode in runs.modes, "not run: the build failed\n" + runs.build[1][-3000:]
    code, out = runs.modes[mode].wait(timeout=900)
    assert code == 0, out[-6000:]
    assert " failed" not in out.split("Tests")[-1], out[-3000:]
