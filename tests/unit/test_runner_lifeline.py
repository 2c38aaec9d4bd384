"""tests/support/lifeline: what a test run starts dies with the run, even when it is killed
(SIGKILL, or SIGTERM which skips pytest's teardown)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.support import proctable
from tests.support.procs import ROOT

# A ManagedProcess whose program starts a grandchild in its group (as `stack` or the SSP hub
# do), then sleeps; the pids go to a file once both run.
_CHILD = ("import subprocess, sys, time; "
          "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
          "open(sys.argv[1], 'a').write(f'{g.pid}\\n'); time.sleep(300)")


def _runner_source(pids: Path, tmp: Path) -> str:
    return textwrap.dedent(f"""
        import os, sys, threading, time
        from pathlib import Path
        from tests.support.procs import ManagedProcess, base_env

        def start(name):
            mp = ManagedProcess(name, [sys.executable, "-c", {_CHILD!r}, {str(pids)!r}],
                                base_env(), Path({str(tmp)!r}) / (name + ".log")).start()
            with open({str(pids)!r}, "a") as f:
                f.write(f"{{mp.proc.pid}}\\n")

        start("main-thread")
        # started from a helper thread that ends at once (a parent-death signal would fire
        # when that thread exits; the lifeline must not)
        t = threading.Thread(target=start, args=("helper-thread",))
        t.start()
        t.join()
        time.sleep(300)
        """)


def _wait_for_pids(pids: Path, runner: subprocess.Popen[bytes], n: int) -> list[int]:
    deadline = time.monotonic() + 60
    while True:
        lines = pids.read_text().split() if pids.exists() else []
        if len(lines) >= n:
            return [int(x) for x in lines]
        assert runner.poll() is None, "the runner exited early"
        assert time.monotonic() < deadline, f"only {lines} started"
        time.sleep(0.02)


def _check_all_die_with_runner(runner: subprocess.Popen[bytes], pids: Path,
                               sig: signal.Signals, n: int) -> None:
    try:
        started = _wait_for_pids(pids, runner, n)
        time.sleep(0.3)  # the helper thread's exit is behind us: its child must still live
        assert all(proctable.alive(p) for p in started)
        os.kill(runner.pid, sig)
        runner.wait(timeout=30)
        assert proctable.wait_gone(started) == []
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
        for p in (pids.read_text().split() if pids.exists() else []):
            try:
                os.kill(int(p), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_processes_a_script_started_die_when_it_is_sigkilled(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = tmp_path / "runner.py"
    script.write_text(_runner_source(pids, tmp_path))
    runner = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, start_new_session=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    # two ManagedProcesses and a grandchild under each
    _check_all_die_with_runner(runner, pids, signal.SIGKILL, 4)


def test_processes_a_pytest_run_started_die_when_it_is_sigtermed(tmp_path: Path) -> None:
    # pytest turns SIGTERM into no teardown at all: the fixture's stop() never runs
    pids = tmp_path / "pids"
    test_file = tmp_path / "test_hangs.py"
    test_file.write_text(textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        import pytest
        from tests.support.procs import ManagedProcess, base_env

        @pytest.fixture
        def child():
            mp = ManagedProcess("child", [sys.executable, "-c", {_CHILD!r}, {str(pids)!r}],
                                base_env(), Path({str(tmp_path)!r}) / "child.log").start()
            with open({str(pids)!r}, "a") as f:
                f.write(f"{{mp.proc.pid}}\\n")
            yield mp
            mp.stop()

        def test_hangs(child):
            time.sleep(300)
        """))
    runner = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
         str(tmp_path), "-c", os.devnull, str(test_file)],
        cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    _check_all_die_with_runner(runner, pids, signal.SIGTERM, 2)
