"""The local stack's temporary state: one directory per `ops/run`, removed when it stops.

`svc-stack-*` in the system temp dir holds the SSPs' run dirs (ipc sockets) and, with
`--memory`, the scheduler's config, replica and WAL. ops/run removes it when it stops. A stack
that was killed (SIGKILL, a power cut) cannot, so the next start removes the directories
whose owner is gone: the `owner` file names the ops/run process by pid and kernel start time,
which no other process can share (a pid alone may have been reused). A directory is removed
only when it belongs to this user and its owner file says, readably, that its process is gone.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger("stack")

PREFIX = "svc-stack-"
_OWNER = "owner"


def _start_time(pid: int) -> int | None:
    """The kernel's start time of `pid` (clock ticks after boot), None when it is not running
    or the platform has no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: count fields after its closing one.
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19])  # field 22 overall: starttime


def create(base: Path | None = None) -> Path:
    """A new directory owned by this process."""
    path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=base))
    me = os.getpid()
    (path / _OWNER).write_text(f"{me} {_start_time(me)}\n")
    return path


def remove(path: Path) -> None:
    """Remove the directory and everything in it (nothing when it is gone already)."""
    shutil.rmtree(path, ignore_errors=True)


def _owner_gone(path: Path) -> bool:
    try:
        if path.stat().st_uid != os.getuid():
            return False
        pid_text, start_text = (path / _OWNER).read_text().split()
        pid, start = int(pid_text), int(start_text)
    except (OSError, ValueError):
        return False  # not ours to judge: half-written, foreign or unreadable
    if not Path("/proc/self/stat").exists():
        return False  # no way to tell a live owner from a dead one
    return _start_time(pid) != start


def sweep(base: Path | None = None) -> list[Path]:
    """Remove the directories left by stacks that are no longer running; the removed paths."""
    where = Path(base or tempfile.gettempdir())
    removed = []
    for path in sorted(where.glob(PREFIX + "*")):
        if path.is_dir() and not path.is_symlink() and _owner_gone(path):
            remove(path)
            removed.append(path)
    if removed:
        log.info("removed the temporary state of %d stopped stack(s) in %s", len(removed), where)
    return removed
