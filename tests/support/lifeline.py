"""Processes a test or a benchmark starts die with the runner that started them.

A pytest run or a benchmark killed with SIGKILL (or SIGTERM, which pytest does not turn into
teardown) never runs its fixtures' `stop()`: the database hosts, SSPs, schedulers, `stack` and
`cloud` it started were reparented and lived on, holding ports, files and both cores.

The product's own children use the kernel's parent-death signal (`ipc.lifeline`). That signal
follows the *thread* that forked the child, and tests start processes from helper threads too
(`admin_cluster.run_async`, Playwright's loop), so here the runner's lifeline is a pipe
instead: the first process adopted starts a small guard (this file run as a script, in a
session of its own so a signal to the runner's group does not reach it) whose stdin is the
pipe's read end. The runner keeps the only write end; when the runner exits, however it dies,
the kernel closes it, the guard reads end-of-file and stops every process still adopted:
SIGTERM to its group (`start_new_session` children are group leaders), SIGKILL to what is left
after a grace period. A process stopped normally is released first, so nothing is signalled
twice.

The guard never signals a stranger: it records each adopted pid's start time and skips a pid
that now belongs to another process. A group whose leader is gone keeps its id from being
reused (Linux gives no new process the id of a live group), so such a group is still ours.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO

_GRACE_SECS = 5.0

_lock = threading.Lock()
_pipe: IO[str] | None = None
_guard: subprocess.Popen[str] | None = None
_owner_pid = 0


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    return stat.rsplit(")", 1)[1].split()[19]


def _send(line: str) -> None:
    global _pipe, _guard, _owner_pid
    if not sys.platform.startswith("linux"):
        return  # the guard reads /proc; elsewhere nothing is promised
    with _lock:
        if _pipe is None or _owner_pid != os.getpid():
            # first adoption in this process (a forked child does not inherit the guard)
            _guard = subprocess.Popen(
                [sys.executable, "-I", os.path.abspath(__file__)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                start_new_session=True)
            assert _guard.stdin is not None
            _pipe, _owner_pid = _guard.stdin, os.getpid()
        _pipe.write(line + "\n")
        _pipe.flush()


def _forget_in_child() -> None:
    # A forked child must not hold the runner's write end: the guard would wait for it too.
    global _pipe
    if _pipe is not None:
        try:
            _pipe.close()
        except OSError:
            pass
        _pipe = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def adopt(pid: int) -> None:
    """Stop process `pid` (and its group when it leads one) when this runner exits."""
    _send(f"+{pid}")


def release(pid: int) -> None:
    """Forget `pid`: it was stopped by its owner (call before its id can be reused)."""
    if _pipe is not None and _owner_pid == os.getpid():
        _send(f"-{pid}")


def bind_xdist_worker() -> None:
    """In a pytest-xdist worker: die (SIGKILL) when the run's main process dies.

    A worker whose main process was killed otherwise runs on to the end of its current test
    (its channel's end-of-file does not stop it), and its adopted processes with it; dead,
    its own guard stops them. The main process starts its workers from its main thread, which
    lives as long as it does (the parent-death signal follows the thread)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        from ipc.lifeline import die_with_parent

        die_with_parent(signal.SIGKILL, parent_pid=os.getppid())


def _guard_main() -> None:
    # The runner's signals are not ours: we act on end-of-file only.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    adopted: dict[int, str] = {}
    for line in sys.stdin:
        line = line.strip()
        if line[:1] == "+" and line[1:].isdigit():
            started = _start_time(int(line[1:]))
            if started is not None:
                adopted[int(line[1:])] = started
        elif line[:1] == "-" and line[1:].isdigit():
            adopted.pop(int(line[1:]), None)
    targets = [pid for pid, started in adopted.items() if _start_time(pid) in (started, None)]
    if not targets:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in targets:
            _signal(pid, sig)
        deadline = time.monotonic() + _GRACE_SECS
        while sig == signal.SIGTERM and time.monotonic() < deadline:
            if not any(_exists(pid) for pid in targets):
                return
            time.sleep(0.05)


def _signal(pid: int, sig: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _exists(pid: int) -> bool:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, 0)
            return True
        except ProcessLookupError:
            pass
        except PermissionError:
            return True
    return False


if __name__ == "__main__":
    _guard_main()
