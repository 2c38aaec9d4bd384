"""`--memory` storage: the engine's surrealkv in a scratch directory the host owns and removes.

Why not the engine's `mem://`: in surrealdb-embedded (core 3.2.4) it keeps every version of
every key and ~1 KB more per write transaction, forever: ~2 KB of resident memory per
single-row UPDATE with a changefeed, so a host under a steady write load grows without bound
(issue 31: ~118 MB/min at 500 writes/s). The engine would collect old versions with a
retention setting, but the Python binding opens `mem://` with none and drops the URL's query
(`loadtests/probe_host_storage.py`). surrealkv keeps recent writes in a memtable that it
flushes to disk when full (the engine sizes it from the machine's or the cgroup's memory:
128 MiB below 4 GiB, 256 MiB below 16 GiB, 1 GiB below 64 GiB). It keeps ~0.4 KB per such
UPDATE, a quarter of `mem://`, and is as fast here (`sync=never`: nothing is fsynced, as
nothing must survive); but its flushes do not bound the host's memory either (below).

What the host cannot change (surrealdb-embedded, core 3.2.4, measured in session 9):
- The engine reads the URL's query, but prefixes every key with `datastore_`
  (`sync=never` becomes `datastore_sync`), so only `sync`, `versioned` and `retention` reach
  surrealkv. Its memtable size, block cache and value-log settings are the keys
  `surrealkv_*`, which no query key can name; the binding passes an empty configuration and
  reads none of the `SURREAL_SURREALKV_*` variables. The memtable's size therefore follows
  the machine (`memtable_bytes`); a container's memory limit changes it, and with it only
  when the first flush comes.
- The memtable is an arena that fills by ~0.4 KB per single-row UPDATE with a changefeed
  (0.2 KB without); RSS grows with it in a straight line. A flush does NOT give the memory
  back for good (`loadtests/probe_host_memtable.py`, 3.5 MB transactions, 1 GiB memtable):
  RSS dipped from 1,103 to 432-665 MB at the first flush, was back at 1,385 MB 140 MB of
  writes later, and kept its slope through a second flush (2,845 MB after 2,660 MB
  written). So surrealkv does not bound the host's memory on this binding either; it only
  costs ~4x less per write than `mem://`. Why the flushed memory comes back was not found.
- The embedded engine never garbage-collects changefeed entries (no node tick runs, and
  `ALTER ... COMPACT` answers "does not support compaction"): `CHANGEFEED 1s` still lists
  every change minutes later. They are ~0.2 of the ~0.4 KB a write keeps, and a shorter
  `CHANGEFEED` duration changes nothing (measured: 413 B per write with 1h and with 1s).
- `MALLOC_ARENA_MAX=2` and a `malloc_trim(0)` every 2,000 writes change nothing either
  (413 B per write in each case): the growth is the engine's arena, not malloc's.
- Closing and opening the engine again does not help on its own (session 12, 20,000 rows,
  single-row UPDATEs in 500-statement transactions): reopening the same surrealkv directory
  replays it into memory (125 MB before, 265 MB after the first reopen, 309 and 358 MB after
  the next two, each after 100,000 more writes). Closing a surrealkv engine does give its
  memory back (157 -> 82 MB), and a new engine's versionstamps continue above the old one's
  (they follow the clock), so only moving the live data into a fresh engine would bound it:
  a copy that pauses writes, and moves every session, token and feed cursor with it. A closed
  `mem://` engine keeps its memory (168 -> 167 MB).

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
    (its `default_max_memtable_size`): when the host's first flush comes."""
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

