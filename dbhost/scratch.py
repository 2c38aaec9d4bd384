"""`--memory` storage: the engine's surrealkv in a scratch directory the host owns and removes.

Why not the engine's `mem://`: in surrealdb-embedded (core 3.2.4) it keeps every version of
every key and ~1 KB more per write transaction, forever: ~2 KB of resident memory per
single-row UPDATE with a changefeed, so a host under a steady write load grows without bound
(issue 31: ~118 MB/min at 500 writes/s). The engine would collect old versions with a
retention setting, but the Python binding opens `mem://` with none and drops the URL's query
(`loadtests/probe_host_storage.py`). surrealkv keeps recent writes in a memtable that it
flushes to disk when full (the engine sizes it from the machine's or the cgroup's memory:
128 MiB below 4 GiB, 256 MiB below 16 GiB, 1 GiB below 64 GiB), so the host's memory is
bounded, and it is as fast here (`sync=never`: nothing is fsynced, as nothing must survive).

The data still dies with the host: the directory (`svc-db-memory-*` in the system temp dir) is
removed when the host stops, and one left by a killed host is removed by the next host that
starts (`ipc.ownedtmp`). Under `ops/run` the host's TMPDIR is in the stack's own directory
(`stack.rundir`), so the stack, which stops when its memory host dies, removes it too.
"""

from __future__ import annotations

from pathlib import Path

from ipc import ownedtmp

PREFIX = "svc-db-memory-"


def create(base: Path | None = None) -> Path:
    """A fresh scratch directory (stale ones of dead hosts are removed first)."""
    ownedtmp.sweep(PREFIX, base)
    return ownedtmp.create(PREFIX, base)


def engine_url(scratch: Path) -> str:
    """The engine URL of the scratch storage in `scratch`."""
    return f"surrealkv://{scratch / 'data'}?sync=never"


def remove(scratch: Path) -> None:
    """Remove the scratch directory with the data in it."""
    ownedtmp.remove(scratch)
