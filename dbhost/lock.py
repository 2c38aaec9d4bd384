"""An exclusive lock on a data directory, so a second host fails at once with a clear message."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_NAME = "svc-db.lock"


class DirectoryInUse(RuntimeError):
    """Another process holds the data directory."""


class DirectoryLock:
    """`flock` on DIR/svc-db.lock; the kernel drops it when the process dies, even by kill -9."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise DirectoryInUse naming the holder's pid."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DirectoryInUse(
                f"data directory {self.directory} is in use by another svc-db "
                f"(pid {holder}); stop it first or choose another --path") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (also dropped automatically at process exit)."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
