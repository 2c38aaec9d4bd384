"""The local stack's temporary state: one directory per `ops/run`, removed when it stops.

`svc-stack-*` in the system temp dir holds the SSPs' run dirs (ipc sockets) and, with
`--memory`, the scheduler's config, replica and WAL. ops/run removes it when it stops. A stack
that was killed (SIGKILL, a power cut) cannot, so the next start removes the directories
whose owner is gone (`ipc.ownedtmp`: the owner's pid and kernel start time).
"""

from __future__ import annotations

from pathlib import Path

from ipc import ownedtmp

PREFIX = "svc-stack-"


def create(base: Path | None = None) -> Path:
    """A new directory owned by this process."""
    return ownedtmp.create(PREFIX, base)


def remove(path: Path) -> None:
    """Remove the directory and everything in it (nothing when it is gone already)."""
    ownedtmp.remove(path)


def sweep(base: Path | None = None) -> list[Path]:
    """Remove the directories left by stacks that are no longer running; the removed paths."""
    return ownedtmp.sweep(PREFIX, base)
