"""The scheduler WAL: typed round trip, sequence continuity, torn tails, kill -9, truncation."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from surrealdb import Duration, RecordID

from engine.values import NONE
from scheduler.wal import GroupCommitter, SegmentIo, Wal, WalCorrupt

REPO = Path(__file__).resolve().parents[2]


def ev(i: int, **record: Any) -> dict[str, Any]:
    return {"table": "t", "op": "UPDATE", "id": f"t:{i}",
            "record": {"id": RecordID("t", i), "n": i, **record}}


def segments(path: Path) -> list[Path]:
    return sorted(path.glob("*.wal"))


def test_round_trip_of_every_value_type(tmp_path: Path) -> None:
    record = {
        "id": RecordID("t", "a-b"),
        "null": None,
        "bool": True,
        "int": -(2**63),
        "big": 2**63 - 1,
        "float": 1.5,
        "nan_free": -0.0,
        "str": "héllo\x00",
        "bytes": b"\x00\xff",
        "dec": Decimal("1.50"),
        "dur": Duration(1_500_000_000),
        "dt": datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
        "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "link": RecordID("user", ["x", 1]),
        "arr": [1, "a", None, NONE, {"k": RecordID("u", {"a": 1})}],
        "obj": {"z": 1, "a": {"b": [Decimal(2)]}},
        "gone": NONE,
    }
    events: list[dict[str, Any]] = [
        {"table": "t", "op": "CREATE", "id": "t:`a-b`", "record": record},
        {"table": "t", "op": "DELETE", "id": RecordID("t", 7), "record": None},
    ]
    with Wal.open(tmp_path / "wal") as wal:
        assert wal.append_many(events) == [1, 2]
        got = list(wal.replay(0))
    assert [s for s, _ in got] == [1, 2]
    out = got[0][1]
    assert out["table"] == "t" and out["op"] == "CREATE" and out["id"] == "t:`a-b`"
    expected = {k: v for k, v in record.items() if v is not NONE}  # NONE is an absent field
    assert out["record"] == expected
    for k, v in expected.items():
        assert type(out["record"][k]) is type(v), k
    assert out["record"]["arr"][3] is NONE  # NONE inside an array is kept
    assert str(out["record"]["dec"]) == "1.50"
    assert got[1][1] == {"table": "t", "op": "DELETE", "id": RecordID("t", 7), "record": None}


def test_sequence_continues_after_reopen(tmp_path: Path) -> None:
    with Wal.open(tmp_path) as wal:
        assert [wal.append(ev(i)) for i in range(3)] == [1, 2, 3]
    with Wal.open(tmp_path) as wal:
        assert wal.next_seq == 4
        assert wal.append(ev(3)) == 4
        assert [s for s, _ in wal.replay(0)] == [1, 2, 3, 4]
        assert [s for s, _ in wal.replay(2)] == [3, 4]


def test_min_next_seq_starts_an_empty_log_further_on(tmp_path: Path) -> None:
    with Wal.open(tmp_path, min_next_seq=100) as wal:
        assert wal.append(ev(0)) == 100
    with Wal.open(tmp_path, min_next_seq=5) as wal:  # never goes backwards
        assert wal.append(ev(1)) == 101


@pytest.mark.parametrize("cut", [1, 5, 19, 20, 21])
def test_torn_tail_is_dropped_and_the_rest_survives(tmp_path: Path, cut: int) -> None:
    with Wal.open(tmp_path) as wal:
        for i in range(5):
            wal.append(ev(i, pad="x" * 30))
    seg = segments(tmp_path)[-1]
    size = seg.stat().st_size
    with open(seg, "r+b") as fh:
        fh.truncate(size - cut)
    with Wal.open(tmp_path) as wal:
        got = list(wal.replay(0))
        assert [s for s, _ in got] == [1, 2, 3, 4]
        assert [e["record"]["n"] for _, e in got] == [0, 1, 2, 3]
        assert wal.append(ev(99)) == 5  # the lost record's number is reused: it was never acked
        assert [e["record"]["n"] for _, e in wal.replay(4)] == [99]
    with Wal.open(tmp_path) as wal:
        assert [s for s, _ in wal.replay(0)] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("garbage", [b"\x00", b"\xff" * 7, random.Random(64).randbytes(64), b"\x00" * 20,
                                     b"\x00\x00\x00\x01" + b"\x00" * 16 + b"x"])
def test_garbage_appended_is_dropped(tmp_path: Path, garbage: bytes) -> None:
    with Wal.open(tmp_path) as wal:
        for i in range(3):
            wal.append(ev(i))
    with open(segments(tmp_path)[-1], "ab") as fh:
        fh.write(garbage)
    with Wal.open(tmp_path) as wal:
        assert [s for s, _ in wal.replay(0)] == [1, 2, 3]
        assert wal.append(ev(3)) == 4
    with Wal.open(tmp_path) as wal:
        assert [e["record"]["n"] for _, e in wal.replay(0)] == [0, 1, 2, 3]


def test_flipped_byte_in_the_last_record_is_detected(tmp_path: Path) -> None:
    with Wal.open(tmp_path) as wal:
        for i in range(3):
            wal.append(ev(i))
    seg = segments(tmp_path)[-1]
    data = bytearray(seg.read_bytes())
    data[-3] ^= 0x40
    seg.write_bytes(bytes(data))
    with Wal.open(tmp_path) as wal:
        assert [s for s, _ in wal.replay(0)] == [1, 2]


def test_damage_in_an_older_segment_is_an_error(tmp_path: Path) -> None:
    with Wal.open(tmp_path, segment_bytes=1) as wal:  # one record per segment
        for i in range(3):
            wal.append(ev(i))
    assert len(segments(tmp_path)) == 3
    first = segments(tmp_path)[0]
    first.write_bytes(first.read_bytes()[:-2])
    with pytest.raises(WalCorrupt, match="damaged"):
        Wal.open(tmp_path)


def test_truncation_removes_absorbed_segments(tmp_path: Path) -> None:
    with Wal.open(tmp_path, segment_bytes=200) as wal:
        for i in range(20):
            wal.append(ev(i, pad="y" * 50))
        before = len(segments(tmp_path))
        assert before > 3
        removed = wal.truncate_through(10)
        assert removed > 0
        assert len(segments(tmp_path)) == before - removed
        got = [s for s, _ in wal.replay(10)]
        assert got == list(range(11, 21))
        assert wal.first_seq <= 11
        # Everything absorbed: the log empties but keeps counting.
        wal.truncate_through(20)
        assert list(wal.replay(0)) == []
        assert wal.append(ev(20)) == 21
    with Wal.open(tmp_path) as wal:
        assert [s for s, _ in wal.replay(0)] == [21]
        assert wal.next_seq == 22


def test_truncated_empty_log_keeps_counting_after_reopen(tmp_path: Path) -> None:
    with Wal.open(tmp_path) as wal:
        for i in range(4):
            wal.append(ev(i))
        wal.truncate_through(4)
    with Wal.open(tmp_path) as wal:
        assert wal.next_seq == 5
        assert wal.append(ev(4)) == 5


def test_bad_events_are_rejected_and_nothing_is_written(tmp_path: Path) -> None:
    bad: list[Any] = [
        "not an event",
        {"table": "", "op": "CREATE", "id": "t:1", "record": {}},
        {"table": "t", "op": "MERGE", "id": "t:1", "record": {}},
        {"table": "t", "op": "CREATE", "id": "", "record": {}},
        {"table": "t", "op": "CREATE", "id": "t:1", "record": None},
        {"table": "t", "op": "CREATE", "id": "t:1", "record": [1]},
        {"table": "t", "op": "CREATE", "id": "t:1", "record": {"x": object()}},
        {"table": "t", "op": "CREATE", "id": "t:1", "record": {"x": 2**70}},
    ]
    with Wal.open(tmp_path) as wal:
        for b in bad:
            with pytest.raises(ValueError):
                wal.append_many([ev(0), b])
        assert list(wal.replay(0)) == []
        assert wal.append(ev(0)) == 1


def test_append_after_close_is_an_error(tmp_path: Path) -> None:
    wal = Wal.open(tmp_path)
    wal.close()
    with pytest.raises(ValueError, match="closed"):
        wal.append(ev(0))


async def test_group_committer_batches_concurrent_appends(tmp_path: Path) -> None:
    with Wal.open(tmp_path) as wal:
        gc = GroupCommitter(wal)
        seqs = await asyncio.gather(*(gc.submit(ev(i)) for i in range(200)))
        assert sorted(seqs) == list(range(1, 201))
        assert len(set(seqs)) == 200
        # 200 concurrent callers shared far fewer fsyncs than one each.
        assert gc.batches < 200
        by_seq = dict(wal.replay(0))
        for i, s in enumerate(seqs):
            assert by_seq[s]["record"]["n"] == i


async def test_group_committer_fails_only_the_bad_caller(tmp_path: Path) -> None:
    with Wal.open(tmp_path) as wal:
        gc = GroupCommitter(wal)
        bad = {"table": "t", "op": "CREATE", "id": "t:1", "record": {"x": object()}}
        results = await asyncio.gather(gc.submit(ev(1)), gc.submit(bad), gc.submit(ev(2)),
                                       return_exceptions=True)
        assert results[0] == 1 and results[2] == 2
        assert isinstance(results[1], ValueError)


_CHILD = """
import sys
from scheduler.wal import Wal
wal = Wal.open(sys.argv[1], segment_bytes=4096)
i = 0
while True:
    batch = [{"table": "t", "op": "CREATE", "id": f"t:{i + j}",
              "record": {"n": i + j, "pad": "z" * 100}} for j in range(1 + i % 3)]
    seqs = wal.append_many(batch)
    for s, e in zip(seqs, batch):
        print(s, e["record"]["n"], flush=True)
    i += len(batch)
"""


def test_kill_9_loses_no_acknowledged_event(tmp_path: Path) -> None:
    wal_dir = tmp_path / "wal"
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(wal_dir)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    acked: dict[int, int] = {}
    try:
        assert proc.stdout is not None
        while len(acked) < 600:
            line = proc.stdout.readline()
            assert line, "the child exited early"
            s_text, n_text = line.split()
            acked[int(s_text)] = int(n_text)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        # Lines printed before the kill but not read yet were acknowledged too.
        for line in proc.stdout.read().splitlines():
            parts = line.split()
            if len(parts) == 2:
                acked[int(parts[0])] = int(parts[1])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    with Wal.open(wal_dir) as wal:
        replayed = {s: e["record"]["n"] for s, e in wal.replay(0)}
        assert len(segments(wal_dir)) > 1  # the run crossed segment boundaries
        assert sorted(replayed) == list(range(1, len(replayed) + 1))
        for seq, n in acked.items():
            assert replayed.get(seq) == n
        nxt = wal.append(ev(0))
        assert nxt == len(replayed) + 1


# ----------------------------------------------------------------- failed writes and fsyncs


class FaultyIo(SegmentIo):
    """The segment calls, with the next write, fsync or truncate failing on demand."""

    def __init__(self) -> None:
        self.write_fails: bool = False  # write half of the data, then fail (ENOSPC)
        self.fsync_fails = 0  # how many fsyncs fail next (EIO)
        self.truncate_fails = 0

    def write(self, fd: int, data: memoryview) -> int:
        if self.write_fails:
            self.write_fails = False
            os.write(fd, data[: len(data) // 2])
            raise OSError(28, "No space left on device")
        return super().write(fd, data)

    def fsync(self, fd: int) -> None:
        if self.fsync_fails:
            self.fsync_fails -= 1
            raise OSError(5, "Input/output error")
        super().fsync(fd)

    def truncate(self, fd: int, size: int) -> None:
        if self.truncate_fails:
            self.truncate_fails -= 1
            raise OSError(5, "Input/output error")
        super().truncate(fd, size)


def faulty(wal: Wal) -> FaultyIo:
    io = FaultyIo()
    wal.io = io
    return io


def assert_log(path: Path, want: list[tuple[int, str]]) -> None:
    """What replay yields now, and after a reopen (which would cut a torn tail)."""
    with Wal.open(path) as again:
        assert [(s, e["id"]) for s, e in again.replay()] == want
        assert again.next_seq == want[-1][0] + 1


def test_a_partial_write_that_fails_is_cut_back_and_later_records_survive(
        tmp_path: Path) -> None:
    wal = Wal.open(tmp_path)
    io = faulty(wal)
    assert wal.append(ev(1)) == 1
    io.write_fails = True
    with pytest.raises(OSError, match="No space"):
        wal.append_many([ev(2), ev(3)])
    # Nobody got 2 or 3: the numbers are reused, the file holds only acknowledged records.
    assert wal.append(ev(4)) == 2
    assert [(s, e["id"]) for s, e in wal.replay()] == [(1, "t:1"), (2, "t:4")]
    wal.close()
    assert_log(tmp_path, [(1, "t:1"), (2, "t:4")])


def test_a_complete_write_whose_fsync_fails_is_cut_back_not_repeated(tmp_path: Path) -> None:
    wal = Wal.open(tmp_path)
    io = faulty(wal)
    assert wal.append(ev(1)) == 1
    io.fsync_fails = 1
    with pytest.raises(OSError, match="Input/output"):
        wal.append(ev(2))
    assert wal.append(ev(3)) == 2
    assert [(s, e["id"]) for s, e in wal.replay()] == [(1, "t:1"), (2, "t:3")]
    wal.close()
    assert_log(tmp_path, [(1, "t:1"), (2, "t:3")])


def test_when_the_cut_fails_too_appends_fail_until_it_works(tmp_path: Path) -> None:
    wal = Wal.open(tmp_path)
    io = faulty(wal)
    assert wal.append(ev(1)) == 1
    io.write_fails = True
    io.truncate_fails = 2  # the cut right after the failure, and the next append's retry
    with pytest.raises(OSError, match="No space"):
        wal.append(ev(2))
    with pytest.raises(OSError, match="Input/output"):
        wal.append(ev(3))  # refused: it would follow the torn record
    assert [(s, e["id"]) for s, e in wal.replay()] == [(1, "t:1")]
    assert wal.append(ev(4)) == 2  # the retried cut worked
    wal.close()
    assert_log(tmp_path, [(1, "t:1"), (2, "t:4")])


def test_a_torn_record_left_by_a_crash_during_the_cut_is_dropped_on_open(
        tmp_path: Path) -> None:
    wal = Wal.open(tmp_path)
    io = faulty(wal)
    wal.append(ev(1))
    io.write_fails = True
    io.truncate_fails = 1
    with pytest.raises(OSError):
        wal.append(ev(2))
    wal.close()  # the process dies with the torn record in the file
    assert_log(tmp_path, [(1, "t:1")])


async def test_the_group_committer_reuses_the_numbers_of_a_failed_batch(
        tmp_path: Path) -> None:
    wal = Wal.open(tmp_path)
    io = faulty(wal)
    committer = GroupCommitter(wal)
    assert await committer.submit(ev(1)) == 1
    io.fsync_fails = 1
    with pytest.raises(OSError):
        await committer.submit(ev(2))
    assert await asyncio.gather(*(committer.submit(ev(i)) for i in (3, 4))) == [2, 3]
    assert [e["id"] for _, e in wal.replay()] == ["t:1", "t:3", "t:4"]
    wal.close()


def test_a_jump_in_numbers_at_open_starts_a_segment_of_its_own(tmp_path: Path) -> None:
    """The replica ahead of a retained log (`min_next_seq` past its last record): the next
    event must be read back with its own number, not as the one after the file's last (a
    replay after the replica's position then skipped it, and the replica lagged for good)."""
    wal = Wal.open(tmp_path / "wal")
    assert wal.append_many([{"table": "t", "op": "CREATE", "id": f"t:{i}", "record": {"n": i}}
                            for i in range(3)]) == [1, 2, 3]
    wal.close()
    wal = Wal.open(tmp_path / "wal", min_next_seq=6)
    assert wal.append({"table": "t", "op": "UPDATE", "id": "t:9", "record": {"n": 9}}) == 6
    assert [(s, e["id"]) for s, e in wal.replay(5)] == [(6, "t:9")]
    assert [s for s, _ in wal.replay(0)] == [1, 2, 3, 6]
    wal.close()
    # and so after another restart
    wal = Wal.open(tmp_path / "wal", min_next_seq=1)
    assert [s for s, _ in wal.replay(0)] == [1, 2, 3, 6] and wal.last_seq == 6
    assert wal.append({"table": "t", "op": "DELETE", "id": "t:9", "record": None}) == 7
    wal.close()


def test_replays_after_a_position_read_on_from_the_last_replay_and_miss_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The fold replays after the replica's position again and again: each replay starts
    # where the previous one stopped in a segment (not at the segment's first byte), and any
    # mix of appends, earlier positions, rotations, truncations and a reopen still yields
    # exactly the events after the position asked for.
    import scheduler.wal as walmod

    read: list[int] = []
    records = walmod._records

    def counting(data: bytes, expect_first: int | None) -> Any:
        read.append(len(data))
        return records(data, expect_first)
    monkeypatch.setattr(walmod, "_records", counting)
    rng = random.Random(5)
    path = tmp_path / "wal"
    wal = Wal.open(path, segment_bytes=4000)
    appended = 0
    absorbed = 0
    for step in range(60):
        n = rng.randrange(1, 25)
        wal.append_many([ev(appended + i + 1) for i in range(n)])
        appended += n
        after = absorbed if rng.random() < 0.8 else rng.randrange(0, appended + 1)
        after = max(after, wal.first_seq - 1)
        got = [seq for seq, _ in wal.replay(after)]
        assert got == list(range(after + 1, appended + 1)), (step, after)
        absorbed = appended
        if rng.random() < 0.3:
            wal.truncate_through(absorbed - rng.randrange(0, 20))
        if step == 30:
            wal.close()
            wal = Wal.open(path, segment_bytes=4000)
    # two replays after the same position: the second reads none of the records again
    read.clear()
    wal.append_many([ev(appended + i + 1) for i in range(10)])
    assert [s for s, _ in wal.replay(appended)] == list(range(appended + 1, appended + 11))
    first_read = sum(read)
    read.clear()
    assert [s for s, _ in wal.replay(appended + 10)] == []
    assert sum(read) == 0 < first_read
    wal.close()


def test_replay_and_open_read_a_segment_in_bounded_chunks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A fold reads what a whole snapshot interval appended. Read in one piece, that is one
    # allocation of tens of MB, which glibc keeps in the heap once it raised its mmap
    # threshold: the scheduler grew in steps at each fold. Reads stay at the chunk size
    # (or one record, when a record is larger), and records cut by a chunk's end, records
    # larger than a chunk and a damaged tail are read as before.
    import io

    import scheduler.wal as walmod

    chunk = 256
    monkeypatch.setattr(walmod, "_READ_CHUNK", chunk, raising=False)  # old code: none
    reads: list[int] = []

    class Counting(io.FileIO):
        def read(self, size: int = -1) -> bytes:
            data = super().read(size)
            reads.append(len(data))
            return data

    monkeypatch.setattr(walmod, "open", lambda p, mode="rb": Counting(p, mode),
                        raising=False)
    rng = random.Random(3)
    events = [ev(i, pad="x" * rng.choice([0, 10, 100, 700, 2000])) for i in range(1, 201)]
    big = max(len(walmod.encode_event(e)) for e in events) + walmod._HEADER.size
    wal = Wal.open(tmp_path, segment_bytes=30_000)
    for i in range(0, 200, 7):
        wal.append_many(events[i:i + 7])
    assert len(segments(tmp_path)) > 2
    for after in (0, 1, 57, 150, 199):
        got = list(wal.replay(after))
        assert [s for s, _ in got] == list(range(after + 1, 201))
        assert [e["record"] for _, e in got] == [e["record"] for e in events[after:]]
    wal.close()
    assert reads and max(reads) <= max(chunk, big) < 2 * 30_000
    # a damaged record in the middle of the last segment: open keeps what precedes it
    last = segments(tmp_path)[-1]
    data = bytearray(last.read_bytes())
    data[len(data) // 2] ^= 0xFF
    last.write_bytes(bytes(data))
    reads.clear()
    wal = Wal.open(tmp_path, segment_bytes=30_000)
    kept = [s for s, _ in wal.replay(0)]
    assert kept == list(range(1, len(kept) + 1)) and 0 < len(kept) < 200
    assert wal.append(ev(999)) == len(kept) + 1
    wal.close()
    assert max(reads) <= max(chunk, big)
