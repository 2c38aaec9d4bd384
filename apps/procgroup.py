"""Process groups read from /proc: who is still alive in a group, and stopping all of them.

Zombies do not count: an orphan whose parent is gone waits for whatever reaps orphans on this
machine (not always a prompt init in a container), and it runs nothing any more."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

__all__ = ["RUN_ENV", "alive", "descendants", "group_members", "marked", "signal_group",
           "stop_group", "sweep"]

#: set in every app's environment to the supervisor's run id; inherited by what the app
#: starts, so the processes of a run can be found after the supervisor died (see `sweep`)
RUN_ENV = "SVC_APPS_RUN"

_PROC = Path("/proc")


def _fields(pid_dir: Path) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgid, ...)."""
    try:
        text = (pid_dir / "stat").read_text()
    except OSError:
        return None
    # the command name is in parentheses and may hold spaces or ')'
    return text[text.rindex(")") + 2:].split()


def _stat(pid_dir: Path) -> tuple[str, int] | None:
    """(state, pgid) of a /proc/<pid> entry, None when it is gone."""
    rest = _fields(pid_dir)
    return None if rest is None else (rest[0], int(rest[2]))


def alive(pids: set[int] | list[int]) -> set[int]:
    """Those of `pids` that are live processes (not gone, not zombies)."""
    out = set()
    for pid in pids:
        st = _stat(_PROC / str(pid))
        if st is not None and st[0] not in ("Z", "X"):
            out.add(pid)
    return out


def descendants(root: int) -> set[int]:
    """The live processes under `root`, at any depth (those still parented to it or to one of
    its descendants: an orphan adopted elsewhere is no longer found)."""
    parent: dict[int, int] = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            rest = _fields(entry)
            if rest is not None and rest[0] not in ("Z", "X"):
                parent[int(entry.name)] = int(rest[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - found
        found |= frontier
    return found


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


def marked(run_id: str) -> list[int]:
    """The live processes whose environment carries `SVC_APPS_RUN=<run_id>`."""
    needle = f"{RUN_ENV}={run_id}".encode()
    out: list[int] = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            st = _stat(entry)
            if st is not None and st[0] not in ("Z", "X"):
                out.append(int(entry.name))
    return out


def sweep(run_id: str) -> list[int]:
    """Kill (SIGKILL) every process left of run `run_id`, each with its process group: what a
    supervisor killed with SIGKILL could not stop (the direct children get SIGTERM from
    `ipc.lifeline`, their own children do not). Returns the pids found."""
    found = marked(run_id)
    for pid in found:
        try:
            pgid = os.getpgid(pid)
        except ProcessLookupError:
            continue
        if pgid != os.getpgrp():  # never our own group
            signal_group(pgid, signal.SIGKILL)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return found
