"""Temporary directories owned by one process and removed by the next start once it is gone.

A process that creates such a directory (`create`) removes it when it stops (`remove`). One
killed with SIGKILL (or by a power cut) cannot, so the next process of the same kind removes
the directories whose owner is gone (`sweep`): the `owner` file names the creator by pid and
kernel start time, which no other process can share (a pid alone may have been reused). A
directory is removed only when it belongs to this user and its owner file says, readably,
that its process is gone. Used for the local stack's state (`stack.rundir`) and for the
database host's scratch storage with `--memory` (`dbhost.scratch`).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger("ipc.ownedtmp")

OWNER = "owner"


def start_time(pid: int) -> int | None:
    """The kernel's start time of `pid` (clock ticks after boot), None when it is not running
    or the platform has no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: count fields after its closing one.
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19])  # field 22 overall: starttime


def create(prefix: str, base: Path | None = None) -> Path:
    """A new directory `<prefix>*` in `base` (the system temp dir) owned by this process."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    me = os.getpid()
    (path / OWNER).write_text(f"{me} {start_time(me)}\n")
    return path


def remove(path: Path) -> None:
    """Remove the directory and everything in it (nothing when it is gone already)."""
    shutil.rmtree(path, ignore_errors=True)


def owner_gone(path: Path) -> bool:
    """True when `path` is ours and its owner file names a process that no longer runs."""
    try:
        if path.stat().st_uid != os.getuid():
            return False
        pid_text, start_text = (path / OWNER).read_text().split()
        pid, start = int(pid_text), int(start_text)
    except (OSError, ValueError):
        return False  # not ours to judge: half-written, foreign or unreadable
    if not Path("/proc/self/stat").exists():
        return False  # no way to tell a live owner from a dead one
    return start_time(pid) != start


def sweep(prefix: str, base: Path | None = None) -> list[Path]:
    """Remove the `<prefix>*` directories whose owners are gone; the removed paths."""
    where = Path(base or tempfile.gettempdir())
    removed = []
    for path in sorted(where.glob(prefix + "*")):
        if path.is_dir() and not path.is_symlink() and owner_gone(path):
            remove(path)
            removed.append(path)
    if removed:
        log.info("removed %d directories left by stopped processes in %s (%s*)",
                 len(removed), where, prefix)
    return removed
