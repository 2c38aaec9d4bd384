"""A child process that dies with its parent: Linux's parent-death signal.

A process killed with SIGKILL cannot stop its children, so each child asks the kernel, with
`prctl(PR_SET_PDEATHSIG, sig)`, to be sent `sig` the moment its parent exits. The setting
survives `execve` (of anything but a set-user-ID binary) and is cleared by `fork`, so:

- a program we start is wrapped as `python -m ipc.lifeline --parent <our pid> -- argv...`
  (`lifeline_argv`): the wrapper sets the signal, checks the parent is still the one that
  started it (it may have died before the request took effect), then execs `argv` in the
  same process (same pid);
- a process that forks workers itself (the gunicorn master) sets it in each worker after the
  fork (`die_with_parent`, from gunicorn's `post_fork` hook in `gateway.gunicorn_hooks`).

The kernel sends the signal when the *thread* that forked the child exits, not the process:
spawn from the thread that lives as long as the process (the event loop's, the main one).
On platforms without `prctl` the wrapper only execs (nothing is promised there).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
from collections.abc import Sequence

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGKILL, parent_pid: int | None = None) -> bool:
    """Have the kernel send `sig` to this process when its parent exits.

    `parent_pid`: the parent that is meant (the one that started us). When the parent has
    already changed (it died between our fork and this call, so no signal will come), `sig`
    is sent to ourselves at once. Returns False on a platform without `prctl` (not Linux);
    raises OSError when the call fails."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)
    return True


def lifeline_argv(argv: Sequence[str], *, sig: int = signal.SIGKILL,
                  python: str = sys.executable) -> list[str]:
    """`argv` wrapped so that it runs as a child of the calling process and receives `sig`
    when the caller exits (for whatever reason, SIGKILL included)."""
    return [python, "-m", "ipc.lifeline", "--signal", str(int(sig)), "--parent",
            str(os.getpid()), "--", *argv]


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m ipc.lifeline --signal N --parent PID -- PROGRAM ARGS...`: set the
    parent-death signal, then exec PROGRAM in this process. Returns only on a usage error."""
    p = argparse.ArgumentParser(prog="python -m ipc.lifeline")
    p.add_argument("--signal", type=int, default=int(signal.SIGKILL))
    p.add_argument("--parent", type=int, required=True)
    p.add_argument("program", nargs=argparse.REMAINDER)
    a = p.parse_args(sys.argv[1:] if argv is None else list(argv))
    program = a.program[1:] if a.program[:1] == ["--"] else a.program
    if not program:
        p.error("no program to run")
    die_with_parent(a.signal, a.parent)
    os.execvp(program[0], program)
    return 127  # not reached: execvp replaces this process or raises


if __name__ == "__main__":
    sys.exit(main())
