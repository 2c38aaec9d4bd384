"""`ipc.lifeline`: a child started through it dies when its parent dies, SIGKILL included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ipc.lifeline import lifeline_argv
from tests.support import proctable


def test_the_child_is_killed_when_its_parent_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    parent = tmp_path / "parent.py"
    parent.write_text(
        "import pathlib, subprocess, sys, time\n"
        "from ipc.lifeline import lifeline_argv\n"
        "p = subprocess.Popen(lifeline_argv([sys.executable, '-c', "
        "'import time; time.sleep(120)']))\n"
        f"pathlib.Path({str(pid_file)!r}).write_text(str(p.pid))\n"
        "time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, str(parent)], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        child = int(pid_file.read_text())
        # Same pid after the exec: the wrapper became the program.
        while proctable.cmdline(child)[1:3] != ["-c", "import time; time.sleep(120)"]:
            assert proctable.alive(child) and time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proctable.wait_gone([child]) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_child_whose_parent_is_already_gone_kills_itself_at_once() -> None:
    # Our parent is not the pid it was told (as when the parent died before the request took
    # effect): no signal would ever come, so it sends it to itself before running anything.
    argv = lifeline_argv([sys.executable, "-c", "import time; time.sleep(120)"])
    argv[argv.index("--parent") + 1] = "1"
    assert subprocess.run(argv, timeout=60, check=False).returncode == -signal.SIGKILL


def test_the_wrapper_refuses_to_run_without_a_program() -> None:
    r = subprocess.run([sys.executable, "-m", "ipc.lifeline", "--parent", "1"],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2 and "no program to run" in r.stderr
