"""Row bytes in numpy memmap arenas, written by one process and readable by others.

The hub writes every stored row once per host into an :class:`Arena`; shard workers map the same
files read-only with an :class:`ArenaReader` and read rows by handle, so rows are not copied per
shard. Without an ``arena_dir`` the arena lives in anonymous memory (one process only).

On-disk layout (version 1) of ``arena_dir``::

    arena.json             {"format": "svc-arena", "version": 1, "segment_bytes": N, "epoch": E}
    seg-000000.bin         segment 0: N bytes (a file grows the arena; it is never resized)
    seg-000001.bin         segment 1 ...
    seg-000007.bin         an oversize segment (one block larger than N) may be bigger than N

A block starts at an 8-byte aligned offset of a segment with an 8-byte header, little-endian
``u32 length, u32 capacity`` (payload bytes used / reserved, header excluded), followed by the
payload; a freed block has length ``0xFFFFFFFF``. A handle is ``segment << 32 | offset`` (so ``segment_bytes`` < 4 GiB). Blocks are
allocated by bumping a pointer in the newest segment; freed blocks go to a free list per size
class and are reused by later puts of that class; growth adds a segment and never moves rows.

``epoch`` is a random token written by each new writer: opening an arena directory discards the
previous arena, so a reader compares :attr:`ArenaReader.epoch` with the writer's
:attr:`Arena.epoch` (e.g. sent along with handles) and reopens when they differ.

Concurrency contract: one writer. A reader may read a handle once the writer has published it
(e.g. in an IPC message sent after :meth:`Arena.put` returned). A block freed by the writer can
be reused at once, so the writer must not free a block a reader may still be reading: publish the
new handle first and free the old one afterwards (the hub frees superseded rows after the shards
acknowledged the batch that referenced them). :meth:`ArenaReader.get` validates every header and
raises :class:`ArenaError` rather than returning garbage for a bad handle.

:class:`RowStore` keeps, per table, record-id text -> handle, with counts and the table hash
(XOR of ``xxh3_64`` over :func:`engine.values.canonical_bytes`) maintained on every change; the
stored bytes *are* the canonical bytes, so hashing never re-encodes.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import struct
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from engine.hashing import bytes_hash
from engine.values import canonical_bytes, unpack_value

__all__ = ["FORMAT_VERSION", "Arena", "ArenaError", "ArenaReader", "RowStore"]

FORMAT_VERSION = 1
_META = "arena.json"
_SEG_NAME = "seg-{:06d}.bin"
_SEG_RE = re.compile(r"seg-(\d{6})\.bin\Z")
_HEADER = struct.Struct("<II")
_HDR = _HEADER.size  # 8
_ALIGN = 8
_MAX_SEGMENT_BYTES = (1 << 32) - 1
_MAX_BLOCK = (1 << 32) - 1
_FREED = 0xFFFFFFFF  # the length field of a freed block


class ArenaError(Exception):
    """A handle that does not name a live block, or an arena directory that is not ours."""


def _reserve(path: Path, size: int) -> None:
    """Create `path` with `size` bytes of storage allocated now (ENOSPC here, not a SIGBUS on a
    later write to a sparse page); a file that could not be reserved is removed."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError:
        path.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)


def _size_class(n: int) -> int:
    """Capacity (payload bytes) reserved for a payload of ``n`` bytes.

    Four classes per power of two above 64 bytes (waste under 25%), 8-byte steps below, so a
    freed block is reused by any later row of a similar size.
    """
    if n <= 64:
        return max(8, (n + 7) & ~7)
    top = n.bit_length() - 1  # 2**top <= n < 2**(top+1)
    step = 1 << (top - 2)
    return (n + step - 1) // step * step


class Arena:
    """A writable arena of memmap segments (file-backed in ``arena_dir``, else anonymous).

    ``put(data) -> handle``, ``get(handle) -> bytes``, ``free(handle)``. A file-backed arena
    starts empty: opening a directory removes the previous arena's segment files in it.
    """

    def __init__(
        self,
        arena_dir: str | os.PathLike[str] | None = None,
        segment_mb: int = 64,
        preallocate: bool = False,
    ) -> None:
        if not isinstance(segment_mb, int) or segment_mb < 1:
            raise ValueError(f"segment_mb must be a positive integer, got {segment_mb!r}")
        self.segment_bytes = segment_mb * 1024 * 1024
        if self.segment_bytes > _MAX_SEGMENT_BYTES:
            raise ValueError(f"segment_mb must be below 4096, got {segment_mb}")
        self.dir: Path | None = Path(arena_dir) if arena_dir is not None else None
        # Reserve each file segment's space when it is added: a full file system then fails the
        # put with OSError (ENOSPC) instead of a SIGBUS on a later write to a sparse page.
        self.preallocate = preallocate
        self.epoch = uuid.uuid4().hex
        self._arrays: list[np.ndarray] = []
        self._views: list[memoryview] = []
        self._top = 0  # bump pointer in the newest segment
        self._free: dict[int, list[int]] = {}
        self.live_blocks = 0
        self.live_bytes = 0
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            for p in self.dir.iterdir():
                if _SEG_RE.match(p.name):
                    p.unlink()
            meta = {
                "format": "svc-arena",
                "version": FORMAT_VERSION,
                "segment_bytes": self.segment_bytes,
                "epoch": self.epoch,
            }
            tmp = self.dir / (_META + ".tmp")
            tmp.write_text(json.dumps(meta))
            os.replace(tmp, self.dir / _META)
        self._add_segment(self.segment_bytes)

    # -- segments ------------------------------------------------------------------------------

    def _add_segment(self, size: int) -> None:
        idx = len(self._arrays)
        arr: np.ndarray
        if self.dir is None:
            # an anonymous shared mapping: pages are committed only when written
            arr = np.frombuffer(mmap.mmap(-1, size), dtype=np.uint8)
        else:
            path = self.dir / _SEG_NAME.format(idx)
            if self.preallocate:
                _reserve(path, size)
            # "r+" maps the reserved file as it is; "w+" creates a sparse one
            if self.preallocate:
                arr = np.memmap(path, dtype=np.uint8, mode="r+", shape=(size,))
            else:
                arr = np.memmap(path, dtype=np.uint8, mode="w+", shape=(size,))
        self._arrays.append(arr)
        self._views.append(arr.data)
        self._top = 0

    @property
    def segments(self) -> int:
        """Number of segments mapped so far."""
        return len(self._arrays)

    # -- blocks --------------------------------------------------------------------------------

    def put(self, data: bytes) -> int:
        """Store ``data`` in a new block and return its handle."""
        n = len(data)
        if n > _MAX_BLOCK - _HDR:
            raise ValueError(f"a block holds at most 4 GiB, got {n} bytes")
        cap = _size_class(n)
        free = self._free.get(cap)
        if free:
            handle = free.pop()
            seg, off = handle >> 32, handle & 0xFFFFFFFF
        else:
            need = _HDR + cap
            seg = len(self._arrays) - 1
            if self._top + need > len(self._views[seg]):
                if need > self.segment_bytes:
                    # An oversize block gets a segment of its own; the next put opens a fresh one.
                    self._add_segment(need)
                    seg = len(self._arrays) - 1
                    off = 0
                    self._top = len(self._views[seg])
                    return self._write(seg, off, data, cap)
                self._add_segment(self.segment_bytes)
                seg += 1
            off = self._top
            self._top = (off + need + _ALIGN - 1) & ~(_ALIGN - 1)
        return self._write(seg, off, data, cap)

    def _write(self, seg: int, off: int, data: bytes, cap: int) -> int:
        view = self._views[seg]
        n = len(data)
        view[off + _HDR : off + _HDR + n] = data
        _HEADER.pack_into(view, off, n, cap)
        self.live_blocks += 1
        self.live_bytes += n
        return (seg << 32) | off

    def _header(self, handle: int) -> tuple[memoryview, int, int, int]:
        seg, off = handle >> 32, handle & 0xFFFFFFFF
        if handle < 0 or seg >= len(self._views):
            raise ArenaError(f"no such arena block: {handle}")
        view = self._views[seg]
        if off % _ALIGN or off + _HDR > len(view):
            raise ArenaError(f"no such arena block: {handle}")
        n, cap = _HEADER.unpack_from(view, off)
        if cap == 0 or n > cap or off + _HDR + cap > len(view):
            raise ArenaError(f"no such arena block: {handle}")
        return view, off, n, cap

    def get(self, handle: int) -> bytes:
        """The bytes stored under ``handle``."""
        view, off, n, _ = self._header(handle)
        return bytes(view[off + _HDR : off + _HDR + n])

    def replace(self, handle: int, data: bytes) -> int:
        """Overwrite a block in place when ``data`` fits its capacity, else move it.

        Returns the (possibly new) handle. In-place rewrites are not atomic for concurrent
        readers: use it only for blocks no reader holds (see the module's concurrency contract).
        """
        view, off, n, cap = self._header(handle)
        if _size_class(len(data)) == cap:
            view[off + _HDR : off + _HDR + len(data)] = data
            _HEADER.pack_into(view, off, len(data), cap)
            self.live_bytes += len(data) - n
            return handle
        new = self.put(data)
        self.free(handle)
        return new

    def free(self, handle: int) -> None:
        """Release a block; its space is reused by a later put of the same size class."""
        view, off, n, cap = self._header(handle)
        # The FREED length marks the block: a double free and a reader holding a stale handle
        # get an ArenaError instead of silently sharing the block, until it is reused.
        _HEADER.pack_into(view, off, _FREED, cap)
        self._free.setdefault(cap, []).append(handle)
        self.live_blocks -= 1
        self.live_bytes -= n

    def flush(self) -> None:
        """Write dirty pages of file-backed segments to disk (readers do not need this)."""
        for arr in self._arrays:
            if isinstance(arr, np.memmap):
                arr.flush()

    def close(self) -> None:
        """Unmap all segments (the arena cannot be used afterwards)."""
        for v in self._views:
            v.release()
        self._views.clear()
        self._arrays.clear()


class ArenaReader:
    """Read-only view of an arena directory written by another process.

    Segments are mapped lazily: a handle naming a segment the writer added after this reader
    opened is found on first use.
    """

    def __init__(self, arena_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(arena_dir)
        try:
            meta = json.loads((self.dir / _META).read_text())
        except (OSError, ValueError) as e:
            raise ArenaError(f"{self.dir} is not an arena directory: {e}") from None
        if meta.get("format") != "svc-arena" or meta.get("version") != FORMAT_VERSION:
            raise ArenaError(f"{self.dir}: unsupported arena format {meta!r}")
        self.segment_bytes = int(meta["segment_bytes"])
        self.epoch = str(meta.get("epoch", ""))
        self._arrays: list[np.ndarray | None] = []
        self._views: list[memoryview | None] = []

    def _segment(self, seg: int) -> memoryview:
        while seg >= len(self._views):
            self._arrays.append(None)
            self._views.append(None)
        view = self._views[seg]
        if view is None:
            path = self.dir / _SEG_NAME.format(seg)
            try:
                arr = np.memmap(path, dtype=np.uint8, mode="r")
            except (OSError, ValueError) as e:
                raise ArenaError(f"arena segment {seg} is not readable: {e}") from None
            self._arrays[seg] = arr
            view = arr.data
            self._views[seg] = view
        return view

    def get(self, handle: int) -> bytes:
        """The bytes stored under ``handle`` (raises :class:`ArenaError` for a bad handle)."""
        seg, off = handle >> 32, handle & 0xFFFFFFFF
        if handle < 0:
            raise ArenaError(f"no such arena block: {handle}")
        view = self._segment(seg)
        if off % _ALIGN or off + _HDR > len(view):
            raise ArenaError(f"no such arena block: {handle}")
        n, cap = _HEADER.unpack_from(view, off)
        if cap == 0 or n > cap or off + _HDR + cap > len(view):
            raise ArenaError(f"no such arena block: {handle}")
        return bytes(view[off + _HDR : off + _HDR + n])

    def get_row(self, handle: int) -> dict[str, Any]:
        """The row stored under ``handle``, decoded (see :class:`RowStore`)."""
        return unpack_value(self.get(handle))

    def close(self) -> None:
        """Unmap every mapped segment."""
        for v in self._views:
            if v is not None:
                v.release()
        self._views.clear()
        self._arrays.clear()


class _Table:
    __slots__ = ("handles", "hash")

    def __init__(self) -> None:
        self.handles: dict[str, int] = {}
        self.hash = 0


class RowStore:
    """Rows per table, stored once in an :class:`Arena` as canonical msgpack bytes.

    ``put(table, id, row)``, ``get(table, id) -> dict | None``, ``delete``, ``count``, ``hash``
    (XOR of ``xxh3_64`` over the rows' canonical bytes, maintained incrementally), ``items``.
    ``id`` is the record id's canonical text (:func:`engine.values.record_id_text`). Values
    round-trip with their SurrealDB types (RecordID, datetime, Decimal, Duration, UUID, NONE vs
    NULL); a top-level or nested key holding NONE is dropped, as SurrealDB stores no NONE field.
    """

    def __init__(self, arena: Arena | None = None, defer_free: bool = False) -> None:
        self.arena = arena if arena is not None else Arena()
        self._tables: dict[str, _Table] = {}
        # With readers in other processes, superseded blocks must outlive the messages that
        # name them: they are queued until release_deferred() (called once readers caught up).
        self.defer_free = defer_free
        self._deferred: list[int] = []

    def _release(self, handle: int) -> None:
        if self.defer_free:
            self._deferred.append(handle)
        else:
            self.arena.free(handle)

    def release_deferred(self) -> int:
        """Free the blocks superseded since the last call; returns how many were freed."""
        pending, self._deferred = self._deferred, []
        for handle in pending:
            self.arena.free(handle)
        return len(pending)

    def _table(self, table: str) -> _Table:
        t = self._tables.get(table)
        if t is None:
            t = self._tables[table] = _Table()
        return t

    def put(self, table: str, rid: str, row: Mapping[str, Any]) -> bool:
        """Insert or replace a row; returns False when the stored bytes did not change."""
        return self.put_bytes(table, rid, canonical_bytes(row))

    def put_bytes(self, table: str, rid: str, data: bytes) -> bool:
        """Insert or replace a row given its canonical bytes; False when unchanged."""
        t = self._table(table)
        old = t.handles.get(rid)
        arena = self.arena
        if old is not None:
            old_bytes = arena.get(old)
            if old_bytes == data:
                return False
            t.hash ^= bytes_hash(old_bytes)
            t.handles[rid] = arena.put(data)
            self._release(old)
        else:
            t.handles[rid] = arena.put(data)
        t.hash ^= bytes_hash(data)
        return True

    def delete(self, table: str, rid: str) -> bool:
        """Remove a row; returns False when it was not stored."""
        t = self._tables.get(table)
        if t is None:
            return False
        handle = t.handles.pop(rid, None)
        if handle is None:
            return False
        t.hash ^= bytes_hash(self.arena.get(handle))
        self._release(handle)
        return True

    def get(self, table: str, rid: str) -> dict[str, Any] | None:
        """The stored row (decoded), or None when absent."""
        data = self.get_bytes(table, rid)
        return None if data is None else unpack_value(data)

    def get_bytes(self, table: str, rid: str) -> bytes | None:
        """The stored canonical bytes, or None when absent."""
        t = self._tables.get(table)
        if t is None:
            return None
        handle = t.handles.get(rid)
        return None if handle is None else self.arena.get(handle)

    def handle(self, table: str, rid: str) -> int | None:
        """The arena handle of a stored row (for readers in other processes), or None."""
        t = self._tables.get(table)
        return None if t is None else t.handles.get(rid)

    def contains(self, table: str, rid: str) -> bool:
        """Whether the row is stored."""
        t = self._tables.get(table)
        return t is not None and rid in t.handles

    def count(self, table: str) -> int:
        """Number of rows stored for ``table`` (0 for an unknown table)."""
        t = self._tables.get(table)
        return 0 if t is None else len(t.handles)

    def hash(self, table: str) -> int:
        """XOR of ``xxh3_64(canonical_bytes(row))`` over the table's rows (0 when empty)."""
        t = self._tables.get(table)
        return 0 if t is None else t.hash

    def add_table(self, table: str) -> None:
        """Know ``table`` even while it holds no row (it is listed by :meth:`tables`)."""
        self._table(table)

    def tables(self) -> list[str]:
        """Names of tables added or that have held rows (until :meth:`clear_table`)."""
        return list(self._tables)

    def handles(self, table: str) -> list[int]:
        """The arena handles of a table's rows (what a reader in another process needs)."""
        t = self._tables.get(table)
        return [] if t is None else list(t.handles.values())

    def entries(self, table: str) -> Iterator[tuple[str, bytes]]:
        """``(record-id text, canonical bytes)`` of each row of a table (a snapshot of its
        handles): what a snapshot stores without decoding a row."""
        t = self._tables.get(table)
        if t is None:
            return
        get = self.arena.get
        for rid, handle in list(t.handles.items()):
            yield rid, get(handle)

    def ids(self, table: str) -> list[str]:
        """Record-id texts stored for ``table``."""
        t = self._tables.get(table)
        return [] if t is None else list(t.handles)

    def items(self, table: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """Iterate ``(record-id text, row)`` over a table (a snapshot of its ids)."""
        t = self._tables.get(table)
        if t is None:
            return
        get = self.arena.get
        for rid, handle in list(t.handles.items()):
            yield rid, unpack_value(get(handle))

    def clear_table(self, table: str) -> None:
        """Drop every row of a table."""
        t = self._tables.pop(table, None)
        if t is not None:
            for handle in t.handles.values():
                self._release(handle)
