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

What the host cannot change (surrealdb-embedded, core 3.2.4, measured in session 9):
- The engine reads the URL's query, but prefixes every key with `datastore_`
  (`sync=never` becomes `datastore_sync`), so only `sync`, `versioned` and `retention` reach
  surrealkv. Its memtable size, block cache and value-log settings are the keys
  `surrealkv_*`, which no query key can name; the binding passes an empty configuration and
  reads none of the `SURREAL_SURREALKV_*` variables. The memtable's size therefore follows
  the machine (`memtable_bytes`), and a container's memory limit is the one knob.
- The memtable is an arena that fills by ~0.4 KB per single-row UPDATE with a changefeed
  (0.2 KB without) and is handed back when it is flushed: at 500 writes/s it takes about
  1.5 hours to fill 1 GiB, so the host's RSS rises in a straight line for that long, drops
  by the memtable's size at the flush, and starts again (a saw, bounded by the memtable;
  `loadtests/probe_host_memtable.py`). While the flush runs both are held: in an 18-minute
  soak the host went from 1,344 to 1,666 MiB when its 1 GiB memtable was flushed. Flat
  within minutes it is not.
- The embedded engine never garbage-collects changefeed entries (no node tick runs, and
  `ALTER ... COMPACT` answers "does not support compaction"): `CHANGEFEED 1s` still lists
  every change minutes later. They go to disk with the memtable, so they cost the scratch
  directory's disk, not the host's memory.

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


_MIB = 1024 * 1024
_GIB = 1024 * _MIB


def memtable_bytes_for(memory: int) -> int:
    """The memtable size surrealkv (core 3.2.4) takes for `memory` bytes of machine memory
    (its `default_max_memtable_size`): the bound of the host's saw under a steady load."""
    if memory < _GIB:
        return 64 * _MIB
    if memory < 4 * _GIB:
        return 128 * _MIB
    if memory < 16 * _GIB:
        return 256 * _MIB
    if memory < 64 * _GIB:
        return _GIB
    return 4 * _GIB


def machine_memory() -> int:
    """The memory the engine sizes itself from: the machine's total, or the cgroup's limit
    when one is set and smaller (what it reads through `sysinfo`); 0 when unknown."""
    total = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        return 0
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:
            return int(text)
    return total


def memtable_bytes() -> int:
    """The memtable size the engine takes on this machine (it counts an unreadable memory
    as 1 GiB)."""
    return memtable_bytes_for(machine_memory() or _GIB)

