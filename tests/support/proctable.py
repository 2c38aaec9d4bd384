"""The process table as /proc shows it (Linux; no psutil): who is alive, whose child, whose
environment holds a marker. Zombies (exited, not reaped yet) count as gone."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of `pid`, None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: count fields after its closing one.
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1])


def _pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie has exited)."""
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def cmdline(pid: int) -> list[str]:
    """The argv of `pid` ([] when it is gone or a zombie)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def descendants(pid: int) -> list[int]:
    """Every living process below `pid` (children, grandchildren, ...)."""
    kids: dict[int, list[int]] = {}
    for p in _pids():
        st = _stat(p)
        if st is not None and st[0] not in ("Z", "X"):
            kids.setdefault(st[1], []).append(p)
    found, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


def with_env(entry: str) -> list[int]:
    """Living processes whose environment holds `entry` (`NAME=value`): all of a stack's
    processes, reparented orphans included, when the stack was started with a unique one."""
    want = entry.encode()
    out = []
    for p in _pids():
        try:
            env = Path(f"/proc/{p}/environ").read_bytes()
        except OSError:
            continue
        if want in env.split(b"\0") and alive(p):
            out.append(p)
    return out


def wait_gone(pids: Iterable[int], timeout: float = 30.0) -> list[int]:
    """Wait until none of `pids` is alive; those still alive after `timeout`."""
    left = list(pids)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        left = [p for p in left if alive(p)]
        if left:
            time.sleep(0.05)
    return [p for p in left if alive(p)]
