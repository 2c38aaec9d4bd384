"""The scheduler's write-ahead log: every accepted row-change event, durable before the 200.

Durability policy: :meth:`Wal.append` and :meth:`Wal.append_many` return only after the bytes
are written and ``fsync``'ed (plus the directory, when a new segment file was created). An event
whose append returned survives ``kill -9`` and power loss (as far as the disk honours fsync).
One fsync costs far more than the write (see ``loadtests/bench_scheduler_wal.py``), so
:meth:`Wal.append_many` writes a batch with one fsync (group commit) and
:class:`GroupCommitter` gathers the appends of concurrent async callers (HTTP handlers) into such
batches: while one fsync runs, the next callers queue and share the following one.

On disk: a directory of segment files ``<first seq, 20 digits>.wal``. A record is a header
``>IQQ`` (payload length, sequence number, xxh3_64 of length + seq + payload) followed by the
payload, the MessagePack of ``{table, op, id, record}`` in the canonical value encoding of
:mod:`engine.values` (record ids, datetimes, decimals, durations, uuids, NONE keep their types).
On open, the last segment is scanned; a torn tail (short header, short payload, bad checksum,
sequence out of order: a process killed mid-write, or garbage) is cut off, never misread; since
a batch is acknowledged only after its fsync, nothing acknowledged is ever in a torn tail.
Damage inside an older segment is not a torn write and raises :class:`WalCorrupt`.
The converse also holds: a batch whose process died after ``write`` but before its fsync
returned may survive whole although nobody was acknowledged; replay delivers it (the database
write it came from may have failed), which drift repair reconciles. A ``write`` or ``fsync``
that FAILS in a running process is different: the file is cut back to the last acknowledged
record at once (retried before every later append until it works), so the next batch never
follows a torn record or repeats a sequence number, and the failed batch's numbers are reused.

:meth:`Wal.truncate_through` deletes whole segments once the replica has absorbed their events
(cheap: no rewriting); the active segment is rotated first when it is wholly absorbed. The
sequence never restarts: the next number is one past the last record, or the first number of
the newest segment when all records were truncated.

Thread safety: appends, replay and truncation take one lock; replay reads a snapshot of the
files' lengths, so it never sees a half-written record.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, Self

import xxhash

from engine.values import pack_value, unpack_value
from engine.write import OPS, check_change

__all__ = ["OPS", "GroupCommitter", "SegmentIo", "Wal", "WalCorrupt", "encode_event",
           "validate_event"]

_HEADER = struct.Struct(">IQQ")
_LENSEQ = struct.Struct(">IQ")
_SUFFIX = ".wal"
_MAX_RECORD = 64 * 1024 * 1024  # a larger length field can only be garbage
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
_READ_CHUNK = 1024 * 1024  # bytes a replay or an open reads at once (see _read_records)


class WalCorrupt(Exception):
    """A WAL segment other than the last one is damaged (not a torn tail): operator action."""


def validate_event(event: Any) -> dict[str, Any]:
    """Check a row-change event ``{table, op, id, record}`` and return it as a plain dict.

    Raises ValueError with a clear message: an event is an object, and its fields follow
    the rules of any row change (``engine.write.check_change``).
    """
    if not isinstance(event, Mapping):
        # ValueError, not TypeError: every bad-input case is one type the listener maps to 400.
        raise ValueError(  # noqa: TRY004
            f"an event must be an object, got {type(event).__name__}")
    table, op, rid, record = (event.get("table"), event.get("op"), event.get("id"),
                              event.get("record"))
    check_change(table, op, rid, record)
    return {"table": table, "op": op, "id": rid, "record": record}


def encode_event(event: Mapping[str, Any]) -> bytes:
    """Validate and encode an event as a WAL payload (ValueError when it cannot be)."""
    try:
        return pack_value(validate_event(event))
    except (TypeError, OverflowError) as e:
        raise ValueError(f"event cannot be encoded: {e}") from None


def _record_bytes(seq: int, payload: bytes) -> bytes:
    lenseq = _LENSEQ.pack(len(payload), seq)
    check = xxhash.xxh3_64_intdigest(lenseq + payload)
    return lenseq + struct.pack(">Q", check) + payload


def _records(data: bytes, expect_first: int | None) -> Iterator[tuple[int, int, int]]:
    """Valid records of a segment's bytes (from a record boundary), one at a time:
    (seq, payload start, payload end); stops at the first invalid one."""
    pos = 0
    prev = None
    n = len(data)
    while pos + _HEADER.size <= n:
        length, seq, check = _HEADER.unpack_from(data, pos)
        start = pos + _HEADER.size
        end = start + length
        if length > _MAX_RECORD or end > n:
            return
        if xxhash.xxh3_64_intdigest(data[pos:pos + _LENSEQ.size] + data[start:end]) != check:
            return
        if prev is not None and seq != prev + 1:
            return
        if prev is None and expect_first is not None and seq < expect_first:
            return
        yield seq, start, end
        prev = seq
        pos = end


def _read_records(fh: BinaryIO, offset: int, limit: int | None, expect_first: int | None
                  ) -> Iterator[tuple[int, bytes, int]]:
    """Valid records of an open segment from byte `offset` (a record boundary) up to byte
    `limit` (None: the end of the file), one at a time: (seq, payload, offset after it);
    stops at the first invalid one.

    Why in chunks of `_READ_CHUNK`: a fold reads what a whole snapshot interval appended
    (300 s at 500 writes/s is ~40 MB). One read of that size is one large allocation; glibc
    serves it with mmap and, when it is freed, raises its mmap threshold to that size, so
    the next fold's read came from the heap and stayed there: the scheduler grew by the
    read's size at a fold and never gave it back (`loadtests/probe_scheduler_fold.py`).
    """
    fh.seek(offset)
    buf = b""
    base = offset  # the file offset of buf[0]
    nxt = expect_first
    need = _READ_CHUNK
    while True:
        want = need if limit is None else min(need, limit - base - len(buf))
        chunk = fh.read(want) if want > 0 else b""
        if not chunk:
            return  # the end: a torn or short tail is not a record
        buf = buf + chunk if buf else chunk
        used = 0
        for seq, start, end in _records(buf, nxt):
            if nxt is not None and seq != nxt:
                return
            yield seq, buf[start:end], base + end
            nxt = seq + 1
            used = end
        rest = len(buf) - used
        if rest >= _HEADER.size:
            length = _HEADER.unpack_from(buf, used)[0]
            whole = _HEADER.size + length
            if length > _MAX_RECORD or whole <= rest:
                return  # the next record is in the buffer and invalid: the valid end
            need = max(_READ_CHUNK, whole - rest)  # a record larger than a chunk
        else:
            need = _READ_CHUNK
        buf = buf[used:]
        base += used


class SegmentIo:
    """The calls the WAL makes on its active segment's descriptor (tests inject faults here)."""

    def write(self, fd: int, data: memoryview) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Wal:
    """A segmented, checksummed, fsync'ed log of row-change events (see the module docstring).

    Use :meth:`open`; call :meth:`close` when done (or use it as a context manager).
    """

    def __init__(self, path: Path, segment_bytes: int) -> None:
        self.path = path
        self.segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self._segments: list[int] = []  # first seq of each segment file, ascending
        # Per segment (its first seq): (the seq after the last record a replay read, the byte
        # offset where that record ends). A replay after that seq starts reading there.
        self._read_marks: dict[int, tuple[int, int]] = {}
        self._fd = -1
        self._size = 0  # bytes of valid records in the active (last) segment
        self._next = 1
        self._last_fsync_batch = 0
        self.io = SegmentIo()
        # Bytes past `_size` may be in the file: a failed append not cut back yet.
        self._dirty = False

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: Path | str, *, min_next_seq: int = 1,
             segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> Wal:
        """Open (or create) the WAL directory, cutting off a torn tail of the last segment.

        ``min_next_seq``: the next sequence number is at least this (e.g. one past the
        replica's ``applied_seq`` when the log was removed). Raises :class:`WalCorrupt` when an
        older segment is damaged, OSError when the directory cannot be used.
        """
        if min_next_seq < 1:
            raise ValueError("min_next_seq must be >= 1")
        if segment_bytes < 1:
            raise ValueError("segment_bytes must be >= 1")
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        wal = cls(p, segment_bytes)
        wal._load(min_next_seq)
        return wal

    def _seg_path(self, first: int) -> Path:
        return self.path / f"{first:020d}{_SUFFIX}"

    def _load(self, min_next_seq: int) -> None:
        firsts = []
        for f in self.path.iterdir():
            if f.name.endswith(_SUFFIX) and f.name[: -len(_SUFFIX)].isdigit():
                firsts.append(int(f.name[: -len(_SUFFIX)]))
        firsts.sort()
        next_seq = min_next_seq
        tail_next = 0
        for i, first in enumerate(firsts):
            last_seg = i == len(firsts) - 1
            last_rec = 0
            end = 0
            with open(self._seg_path(first), "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                for seq, _payload, after in _read_records(fh, 0, None, first):
                    last_rec, end = seq, after
            if not last_seg and end != size:
                raise WalCorrupt(
                    f"WAL segment {self._seg_path(first).name} is damaged at byte {end} of "
                    f"{size} (not the last segment, so not a torn write)"
                )
            if last_seg and end != size:
                # A torn tail: drop it now so new appends follow the last good record.
                with open(self._seg_path(first), "r+b") as fh:
                    fh.truncate(end)
                    fh.flush()
                    os.fsync(fh.fileno())
            if end:
                next_seq = max(next_seq, last_rec + 1)
            else:
                next_seq = max(next_seq, first)
            if last_seg:
                self._size = end
                tail_next = last_rec + 1 if end else first
        self._segments = firsts
        self._next = next_seq
        if firsts and self._size > 0 and tail_next != next_seq:
            # The numbers jump (the replica is ahead of the log: `min_next_seq`). A segment's
            # records are numbered from its name on, so the next one cannot follow in this
            # file: it would be read back as the number after the file's last record (and a
            # replay after the replica's position would skip it). It starts a segment of its own.
            self._new_segment()
        elif firsts and self._size > 0:
            self._fd = os.open(self._seg_path(firsts[-1]), os.O_WRONLY | os.O_APPEND)
        elif firsts:
            # An empty last segment is reused only when its name matches the next number.
            if firsts[-1] == next_seq:
                self._fd = os.open(self._seg_path(firsts[-1]), os.O_WRONLY | os.O_APPEND)
            else:
                os.unlink(self._seg_path(firsts[-1]))
                self._segments.pop()
                self._new_segment()
        else:
            self._new_segment()

    def _new_segment(self) -> None:
        first = self._next
        # Open the new file before closing the old one: a failure leaves the old one active.
        fd = os.open(self._seg_path(first), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = fd
        self._segments.append(first)
        self._size = 0
        self._dirty = False
        _fsync_dir(self.path)  # the new file's name must survive a crash too

    # ------------------------------------------------------------------ properties
    @property
    def next_seq(self) -> int:
        """The sequence number the next appended event gets."""
        return self._next

    @property
    def last_seq(self) -> int:
        """The last sequence number appended (``next_seq - 1``; 0 before any event)."""
        return self._next - 1

    @property
    def first_seq(self) -> int:
        """The oldest sequence number still in the log (``next_seq`` when it is empty)."""
        return self._segments[0] if self._segments else self._next

    # ------------------------------------------------------------------ appending
    def append(self, event: Mapping[str, Any]) -> int:
        """Append one event; returns its sequence number after the bytes are fsync'ed.

        Raises ValueError (nothing written) for an invalid or unencodable event.
        """
        return self.append_many([event])[0]

    def append_many(self, events: Iterable[Mapping[str, Any]]) -> list[int]:
        """Append a batch with a single write and a single fsync (group commit).

        Every event is validated and encoded first, so a bad event rejects the whole batch with
        ValueError and nothing is written. Returns the sequence numbers, in order.
        """
        return self.append_encoded([encode_event(e) for e in events])

    def append_encoded(self, payloads: list[bytes]) -> list[int]:
        """Append payloads already produced by :func:`encode_event` (one write, one fsync)."""
        if not payloads:
            return []
        with self._lock:
            if self._fd < 0:
                raise ValueError("the WAL is closed")
            if self._dirty:
                self._cut_back()  # OSError while the file still cannot be repaired
            if self._size >= self.segment_bytes:
                self._new_segment()
            first = self._next
            buf = b"".join(_record_bytes(first + i, p) for i, p in enumerate(payloads))
            view = memoryview(buf)
            try:
                written = 0
                while written < len(buf):
                    written += self.io.write(self._fd, view[written:])
                self.io.fsync(self._fd)
            except OSError:
                # Part of the batch (or all of it, unsynced) may be in the file although nobody
                # is acknowledged. Left there, the next batch would follow a torn record, or
                # repeat its sequence numbers, and replay (and the torn-tail cut on open) would
                # stop there, losing the acknowledged records after it. Cut the file back to the
                # last acknowledged byte now; when even that fails, every later append retries
                # it first and fails until it succeeds.
                self._dirty = True
                with contextlib.suppress(OSError):
                    self._cut_back()
                raise
            self._size += len(buf)
            self._next = first + len(payloads)
            return list(range(first, self._next))

    def _cut_back(self) -> None:
        """Truncate the active segment to its acknowledged records (`_size`) and fsync."""
        self.io.truncate(self._fd, self._size)
        self.io.fsync(self._fd)
        self._dirty = False

    # ------------------------------------------------------------------ reading
    def replay(self, after_seq: int = 0) -> Iterator[tuple[int, dict[str, Any]]]:
        """Yield ``(seq, event)`` for every event with ``seq > after_seq``, in order.

        Reads what was appended when iteration reaches each segment; events appended later
        are picked up by the next call. A segment is read from where an earlier replay
        stopped when every record before that point is ``<= after_seq``, and its records are
        read in chunks of ~1 MB and decoded one at a time: the scheduler's fold replays
        after the replica's position, and reading the whole active segment (up to its
        64 MB, with a tuple per record), or even just what one fold appended, in one piece
        raised the process's memory by that size in steps (``_read_records``,
        ``loadtests/probe_scheduler_fold.py``).
        """
        with self._lock:
            segments = list(self._segments)
            active_size = self._size
            marks = dict(self._read_marks)
        for i, first in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            if nxt is not None and nxt <= after_seq + 1:
                continue  # every record of this segment is <= after_seq
            seq0, offset = first, 0
            mark = marks.get(first)
            if mark is not None and mark[0] <= after_seq + 1 and (nxt is not None
                                                                   or mark[1] <= active_size):
                seq0, offset = mark
            try:
                fh = open(self._seg_path(first), "rb")  # noqa: SIM115 (closed below)
            except FileNotFoundError:
                continue  # truncated meanwhile: those events were absorbed already
            read_to: tuple[int, int] | None = None
            with fh:
                for seq, payload, after in _read_records(
                        fh, offset, active_size if nxt is None else None, seq0):
                    if seq > after_seq:
                        yield seq, unpack_value(payload)
                    read_to = (seq + 1, after)
            if read_to is not None and (mark is None or read_to[0] > mark[0]):
                with self._lock:
                    if first in self._segments:
                        self._read_marks[first] = read_to

    # ------------------------------------------------------------------ truncation
    def truncate_through(self, seq: int) -> int:
        """Delete the segments whose events all have ``seq <= seq``; returns files removed.

        Call after the replica committed those events. The active segment is rotated first
        when everything in it is absorbed, so the log may become empty but keeps counting.
        """
        removed = 0
        with self._lock:
            if self._fd >= 0 and self._size > 0 and seq >= self._next - 1:
                self._new_segment()
            while len(self._segments) > 1 and self._segments[1] <= seq + 1:
                first = self._segments.pop(0)
                self._read_marks.pop(first, None)
                try:
                    os.unlink(self._seg_path(first))
                except FileNotFoundError:
                    pass
                removed += 1
            if removed:
                _fsync_dir(self.path)
        return removed

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Close the active segment (appends afterwards raise ValueError)."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class GroupCommitter:
    """Batches concurrent async appends into one :meth:`Wal.append_many` (one fsync).

    ``seq = await committer.submit(event)`` returns once the event is durable. While a batch's
    fsync runs in a worker thread, newly submitted events queue and go out together in the next
    batch (at most ``max_batch`` per fsync). A bad event fails only its own caller
    (ValueError); the rest of its batch is written. A caller cancelled while waiting may still
    have its event written (it was already in a batch); it just never learns the number.
    """

    def __init__(self, wal: Wal, max_batch: int = 1000) -> None:
        self.wal = wal
        self.max_batch = max_batch
        self._queue: list[tuple[dict[str, Any], asyncio.Future[int]]] = []
        self._running = False
        self._task: asyncio.Task[None] | None = None  # held: the loop keeps only weak refs
        self.batches = 0  # fsync'ed batches so far (for metrics and tests)

    async def submit(self, event: Mapping[str, Any]) -> int:
        """Append ``event`` durably; returns its sequence number."""
        checked = validate_event(event)
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._queue.append((checked, fut))
        if not self._running:
            self._running = True
            self._task = asyncio.get_running_loop().create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = self._queue[: self.max_batch]
                del self._queue[: len(batch)]
                good: list[tuple[bytes, asyncio.Future[int]]] = []
                for ev, fut in batch:
                    try:
                        good.append((encode_event(ev), fut))
                    except ValueError as e:
                        if not fut.done():
                            fut.set_exception(e)
                if not good:
                    continue
                try:
                    seqs = await asyncio.to_thread(self.wal.append_encoded, [p for p, _ in good])
                except (OSError, ValueError) as e:  # disk full, closed WAL: all waiters learn it
                    for _, fut in good:
                        if not fut.done():
                            fut.set_exception(e)
                    continue
                self.batches += 1
                for (_, fut), seq in zip(good, seqs, strict=True):
                    if not fut.done():
                        fut.set_result(seq)
        finally:
            self._running = False
