"""One lock for clients/ts/dist: `npm run build` rewrites its files in place (truncate, then
write), so a Node process loading them at that moment could read half a file. A build holds
the lock, and so does a test's Node process until it has loaded its modules. Test modules in
other pytest-xdist workers build the same checkout at the same time."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.procs import ROOT

TS = ROOT / "clients" / "ts"


@contextmanager
def dist_lock() -> Iterator[None]:
    """Held while clients/ts/dist is written or loaded (a file lock, across processes)."""
    path = TS / "node_modules" / ".svc-dist.lock"  # ignored by git with node_modules
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
