"""Where the SSP's row bytes live: one memmap arena per SSP, written by the hub, read by shards.

The hub keeps every synced row once per host as canonical msgpack bytes in an
:class:`engine.arena.Arena` (with the table hashes), and its shard workers map the same segment
files read-only (:class:`engine.arena.ArenaReader`). When the hub loads rows into a shard
(bootstrap pages, a table found by the schema poll, the rebuild of a restarted shard) it sends
the rows' arena handles, 8 bytes each, instead of the rows: the shard reads and decodes them
from the mapping.

Location:

- ``SVC_SSP_ARENA_DIR`` set: a sparse file per segment in that directory, kept after exit (the
  next start discards it: an arena is rebuilt from the snapshot or the database, never reused).
- unset: a private directory under ``/dev/shm`` (memory, not disk; the system temp dir when
  there is no ``/dev/shm``), removed when the hub stops. A directory whose owner process is
  gone (a hub killed with SIGKILL) is removed by the next hub that starts on the host.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from engine.arena import Arena, RowStore

log = logging.getLogger("ssp.rowarena")

PRIVATE_PREFIX = "svc-ssp-arena-"
_OWNER = "owner.pid"
HANDLE_DTYPE = np.dtype("<u8")


def pack_handles(handles: Iterable[int]) -> bytes:
    """Handles as little-endian u64 bytes (one msgpack bin field, no per-row object)."""
    return np.fromiter(handles, dtype=HANDLE_DTYPE).tobytes()


def unpack_handles(data: bytes) -> list[int]:
    """The inverse of :func:`pack_handles` (ValueError when the length is not a multiple of 8)."""
    if len(data) % HANDLE_DTYPE.itemsize:
        raise ValueError(f"handle bytes must be a multiple of 8, got {len(data)}")
    return np.frombuffer(data, dtype=HANDLE_DTYPE).tolist()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: not ours to judge
    return True


def sweep_orphans(base: Path) -> int:
    """Remove private arena directories in ``base`` whose owning process is gone."""
    removed = 0
    try:
        entries = list(base.iterdir())
    except OSError:
        return 0
    for d in entries:
        if not d.name.startswith(PRIVATE_PREFIX) or not d.is_dir():
            continue
        try:
            pid = int((d / _OWNER).read_text())
        except (OSError, ValueError):
            continue  # not fully created yet, or not ours: leave it
        if not _alive(pid):
            shutil.rmtree(d, ignore_errors=True)
            removed += 1
    return removed


def _private_base(want_bytes: int) -> Path:
    """/dev/shm when it is writable and has `want_bytes` free (a container's default /dev/shm
    is often 64 MiB), else the system temp dir."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        st = os.statvfs(shm)
        if st.f_bavail * st.f_frsize >= want_bytes:
            return shm
        log.warning("/dev/shm has less than %d MiB free: the row arena goes to %s",
                    want_bytes >> 20, tempfile.gettempdir())
    return Path(tempfile.gettempdir())


class HubRows:
    """The hub's :class:`RowStore` over its arena, plus where shards find the arena."""

    def __init__(self, arena_dir: Path | None, segment_mb: int, want_mb: int = 1024) -> None:
        """`want_mb`: free space a private arena wants in /dev/shm (the SSP passes its
        SVC_SSP_MEMORY_LIMIT_MB)."""
        self.private = arena_dir is None
        if arena_dir is None:
            base = _private_base(max(want_mb, segment_mb) << 20)
            if sweep_orphans(base):
                log.info("removed row arenas left by stopped SSPs in %s", base)
            arena_dir = Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX, dir=base))
            (arena_dir / _OWNER).write_text(str(os.getpid()))
            # Removed on close(), and at interpreter exit for a hub that was never closed.
            self._cleanup = weakref.finalize(self, shutil.rmtree, str(arena_dir), True)
        self.dir = arena_dir
        # Superseded blocks are freed only while no load message naming handles is in flight.
        # A private arena is memory: each segment is reserved when added, so running out of it
        # is an OSError on that put, not a SIGBUS later (a configured dir stays sparse).
        self.store = RowStore(Arena(arena_dir, segment_mb, preallocate=self.private),
                              defer_free=True)
        self.readers = 0

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """While shards may read handles sent inside this block, superseded blocks are kept
        (the row a handle named stays readable); they are freed once no such block is open."""
        self.readers += 1
        try:
            yield
        finally:
            self.readers -= 1
            self.release()

    def release(self) -> None:
        """Free superseded blocks unless a shard may still be reading handles."""
        if self.readers == 0:
            self.store.release_deferred()

    def clear(self) -> None:
        """Forget every row (the blocks are reused by later puts)."""
        for t in self.store.tables():
            self.store.clear_table(t)
        self.release()

    def close(self) -> None:
        """Unmap the arena; a private directory is removed."""
        self.store.arena.close()
        if self.private:
            self._cleanup()
