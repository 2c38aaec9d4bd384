"""Process groups read from /proc: who is still alive in a group, and stopping all of them.

Zombies do not count: an orphan whose parent is gone waits for whatever reaps orphans on this
machine (not always a prompt init in a container), and it runs nothing any more."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

__all__ = ["group_members", "signal_group", "stop_group"]

_PROC = Path("/proc")


def _stat(pid_dir: Path) -> tuple[str, int] | None:
    """(state, pgid) of a /proc/<pid> entry, None when it is gone."""
    try:
        text = (pid_dir / "stat").read_text()
    except OSError:
        return None
    # the command name is in parentheses and may hold spaces or ')'
    rest = text[text.rindex(")") + 2:].split()
    return rest[0], int(rest[2])


def group_members(pgid: int) -> list[int]:
    """The pids of the live (not zombie) processes in process group `pgid`."""
    out: list[int] = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        st = _stat(entry)
        if st is not None and st[1] == pgid and st[0] not in ("Z", "X"):
            out.append(int(entry.name))
    return out


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


async def stop_group(pgid: int, grace: float, poll: float = 0.05) -> bool:
    """SIGTERM to the group, SIGKILL to what is left after `grace` seconds; True when the
    group went without SIGKILL. Returns once no live member is left (or 5 s after SIGKILL,
    when only something unkillable could remain)."""
    signal_group(pgid, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    # The members are not all our children (a shell's grandchildren), so there is no exit
    # to wait on: their disappearance from /proc is polled.
    while group_members(pgid):
        if loop.time() >= deadline:
            break
        await asyncio.sleep(poll)
    else:
        return True
    signal_group(pgid, signal.SIGKILL)
    deadline = loop.time() + 5.0
    while group_members(pgid) and loop.time() < deadline:
        await asyncio.sleep(poll)
    return False
