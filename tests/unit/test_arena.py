"""The memmap arena, its cross-process reader and the row store."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from surrealdb import Duration, RecordID

from engine.arena import Arena, ArenaError, ArenaReader, RowStore
from engine.hashing import row_hash, table_hash
from engine.values import NONE, canonical_bytes
from tests.support.value_oracle import stored_values


@pytest.fixture(params=["anonymous", "files"])
def arena(request: pytest.FixtureRequest, tmp_path: Path) -> Arena:
    """An arena of 1 MiB segments, in anonymous memory or in files."""
    return Arena(tmp_path / "arena" if request.param == "files" else None, segment_mb=1)


def test_put_get_round_trips_bytes(arena: Arena) -> None:
    blobs = [b"", b"x", b"hello" * 10, bytes(range(256)) * 3]
    handles = [arena.put(b) for b in blobs]
    assert [arena.get(h) for h in handles] == blobs
    assert arena.live_blocks == len(blobs)


def test_growth_adds_segments_and_keeps_every_row(arena: Arena) -> None:
    blobs = [os.urandom(1000 + i % 700) for i in range(4000)]  # ~5 MiB over 1 MiB segments
    handles = [arena.put(b) for b in blobs]
    assert arena.segments > 4
    assert all(arena.get(h) == b for h, b in zip(handles, blobs, strict=True))


def test_a_block_larger_than_a_segment_gets_its_own(arena: Arena) -> None:
    small = arena.put(b"a")
    big = os.urandom(3 * 1024 * 1024)
    h = arena.put(big)
    after = arena.put(b"b")
    assert arena.get(h) == big
    assert (arena.get(small), arena.get(after)) == (b"a", b"b")


def test_freed_space_is_reused_by_a_row_of_the_same_size_class(arena: Arena) -> None:
    h1 = arena.put(b"x" * 100)
    arena.put(b"y" * 100)
    arena.free(h1)
    h3 = arena.put(b"z" * 98)
    assert h3 == h1
    assert arena.get(h3) == b"z" * 98
    segments = arena.segments
    for _ in range(10_000):  # churn of one live row never grows the arena
        h3 = arena.replace(h3, os.urandom(90 + _ % 10))
    assert arena.segments == segments


def test_bad_and_freed_handles_raise_instead_of_returning_garbage(arena: Arena) -> None:
    h = arena.put(b"abc")
    arena.free(h)
    with pytest.raises(ArenaError):
        arena.get(h)
    with pytest.raises(ArenaError):
        arena.free(h)
    for bad in (-1, 3, (99 << 32), (0 << 32) | (2**31)):
        with pytest.raises(ArenaError):
            arena.get(bad)


def test_invalid_segment_size_is_refused() -> None:
    for bad in (0, -1, 4096, 1.5):
        with pytest.raises(ValueError, match="segment_mb"):
            Arena(None, segment_mb=bad)  # type: ignore[arg-type]


# ---- reader in another process --------------------------------------------------------------


def _reader_main(arena_dir: str, conn: Any) -> None:
    reader = ArenaReader(arena_dir)
    while True:
        handles = conn.recv()
        if handles is None:
            break
        out: list[bytes | str] = []
        for h in handles:
            try:
                out.append(reader.get(h))
            except ArenaError as e:
                out.append(f"error: {e}")
        conn.send(out)
    reader.close()


@contextlib.contextmanager
def _spawned(target: Callable[[str, Any], None], arena_dir: Path) -> Iterator[Any]:
    """A spawned reader process running ``target(arena_dir, conn)``; yields our end of the
    pipe. The body must send None last; the process must then exit 0."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=target, args=(str(arena_dir), child))
    proc.start()
    try:
        yield parent
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
            proc.join()
    assert proc.exitcode == 0


def test_a_reader_in_another_process_reads_rows_including_new_segments(tmp_path: Path) -> None:
    arena = Arena(tmp_path, segment_mb=1)
    first = [arena.put(f"row {i}".encode()) for i in range(10)]
    with _spawned(_reader_main, tmp_path) as parent:
        parent.send(first)
        assert parent.recv() == [f"row {i}".encode() for i in range(10)]
        # Written after the reader opened, and spilling into new segments.
        later = [arena.put(bytes([i % 251]) * 5000) for i in range(600)]
        assert arena.segments > 2
        parent.send(later)
        assert parent.recv() == [bytes([i % 251]) * 5000 for i in range(600)]
        arena.free(first[0])
        parent.send([first[0], first[1]])
        stale, fine = parent.recv()
        assert isinstance(stale, str) and stale.startswith("error:")
        assert fine == b"row 1"
        parent.send(None)


def test_reader_refuses_a_directory_that_is_not_an_arena(tmp_path: Path) -> None:
    with pytest.raises(ArenaError, match="not an arena"):
        ArenaReader(tmp_path)


def test_reopening_an_arena_dir_starts_empty(tmp_path: Path) -> None:
    a = Arena(tmp_path, segment_mb=1)
    for _ in range(2000):
        a.put(os.urandom(1000))
    a.close()
    b = Arena(tmp_path, segment_mb=1)
    assert b.segments == 1
    assert b.epoch != a.epoch
    assert ArenaReader(tmp_path).epoch == b.epoch
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arena.json", "seg-000000.bin"]


# ---- row store ------------------------------------------------------------------------------

EVERY_TYPE = {
    "id": RecordID("thread", "a-b"),
    "none_in_array": [NONE, None, 1],
    "null": None,
    "bool": True,
    "int": -(2**63),
    "big": 2**63 - 1,
    "float": 0.1,
    "nan": float("nan"),
    "dec": Decimal("1.50"),
    "str": "héllo ⟨x⟩",
    "dur": Duration(90 * 10**9 + 5),
    "when": datetime(1999, 12, 31, 23, 59, 59, 123456, tzinfo=UTC),
    "uuid": uuid.UUID("0190d8a2-7a2a-7000-8000-000000000000"),
    "bytes": b"\x00\xff",
    "link": RecordID("user", [1, "x", {"k": uuid.UUID(int=3)}]),
    "obj": {"nested": {"deep": [RecordID("u", 1), Decimal("-0.001")]}},
    "empty": {},
}


def _same(a: Any, b: Any) -> bool:
    return canonical_bytes({"v": a}) == canonical_bytes({"v": b})


def test_row_store_round_trips_every_value_type(arena: Arena) -> None:
    store = RowStore(arena)
    assert store.put("thread", "thread:`a-b`", EVERY_TYPE)
    back = store.get("thread", "thread:`a-b`")
    assert back is not None
    assert set(back) == set(EVERY_TYPE)
    for k, v in EVERY_TYPE.items():
        assert type(back[k]) is type(v), k
        assert _same(back[k], v), k
    assert back["none_in_array"][0] is NONE and back["none_in_array"][1] is None
    assert back["null"] is None


def test_row_store_drops_none_fields_like_surrealdb(arena: Arena) -> None:
    store = RowStore(arena)
    store.put("t", "t:1", {"id": RecordID("t", 1), "gone": NONE, "kept": None})
    assert store.get("t", "t:1") == {"id": RecordID("t", 1), "kept": None}


@settings(max_examples=200, deadline=None)
@given(row=st.dictionaries(st.sampled_from(["a", "b", "c"]), stored_values, max_size=4))
def test_row_store_round_trip_is_byte_exact(row: dict[str, Any]) -> None:
    store = RowStore()
    store.put("t", "t:1", row)
    assert canonical_bytes(store.get("t", "t:1") or {}) == canonical_bytes(row)


def test_count_and_hash_are_maintained_incrementally(arena: Arena) -> None:
    rows = {f"t:{i}": {"id": RecordID("t", i), "v": i, "s": str(i)} for i in range(50)}
    forward, backward = RowStore(arena), RowStore(Arena())
    for rid, row in rows.items():
        forward.put("t", rid, row)
    for rid, row in reversed(list(rows.items())):
        backward.put("t", rid, {"junk": 1})  # overwritten below: history must not matter
        backward.put("t", rid, row)
    assert forward.count("t") == backward.count("t") == 50
    assert forward.hash("t") == backward.hash("t") == table_hash(rows.values())
    assert forward.put("t", "t:3", dict(rows["t:3"])) is False  # same content: no change
    before = forward.hash("t")
    forward.put("t", "t:3", {**rows["t:3"], "v": 3.0})
    assert forward.hash("t") != before
    assert forward.hash("t") == before ^ row_hash(rows["t:3"]) ^ row_hash({**rows["t:3"], "v": 3.0})
    assert forward.delete("t", "t:3") and not forward.delete("t", "t:3")
    assert forward.count("t") == 49
    del rows["t:3"]
    assert forward.hash("t") == table_hash(rows.values())
    assert (forward.count("nope"), forward.hash("nope"), forward.get("nope", "x")) == (0, 0, None)
    assert dict(forward.items("t")) == rows


def test_deferred_free_keeps_superseded_rows_readable_until_released(arena: Arena) -> None:
    store = RowStore(arena, defer_free=True)
    store.put("t", "t:1", {"v": 1})
    old = store.handle("t", "t:1")
    assert old is not None
    store.put("t", "t:1", {"v": 2})
    assert arena.get(old) == canonical_bytes({"v": 1})
    assert store.release_deferred() == 1
    with pytest.raises(ArenaError):
        arena.get(old)


def test_reader_decodes_rows_written_by_the_store(tmp_path: Path) -> None:
    store = RowStore(Arena(tmp_path, segment_mb=1))
    store.put("thread", "thread:1", EVERY_TYPE)
    handle = store.handle("thread", "thread:1")
    assert handle is not None
    row = ArenaReader(tmp_path).get_row(handle)
    assert canonical_bytes(row) == canonical_bytes(EVERY_TYPE)


def _row_reader_main(arena_dir: str, conn: Any) -> None:
    reader = ArenaReader(arena_dir)
    while (handles := conn.recv()) is not None:
        conn.send([reader.get_row(h) for h in handles])
    reader.close()


def test_another_process_reads_a_view_engines_rows_after_each_call(tmp_path: Path) -> None:
    from surrealdb import RecordID

    from engine import ViewEngine

    eng = ViewEngine(arena_dir=str(tmp_path), segment_mb=1)
    eng.load("thread", [{"id": RecordID("thread", i), "n": i} for i in range(100)])
    eng.register("v", "SELECT * FROM thread WHERE n >= 98", {})
    with _spawned(_row_reader_main, tmp_path) as parent:
        store = eng.row_store
        parent.send([store.handle("thread", "thread:3")])
        assert parent.recv() == [{"id": RecordID("thread", 3), "n": 3}]
        delta = eng.ingest("thread", "UPDATE", "thread:3", {"id": RecordID("thread", 3), "n": 99,
                                                            "tags": ["a", None]})
        assert delta["v"].added == {"thread:3"}
        # the call returned: its row is in the arena, under a new handle
        parent.send([store.handle("thread", "thread:3"), store.handle("thread", "thread:99")])
        assert parent.recv() == [{"id": RecordID("thread", 3), "n": 99, "tags": ["a", None]},
                                 {"id": RecordID("thread", 99), "n": 99}]
        eng.ingest("thread", "DELETE", "thread:3", None)
        assert store.handle("thread", "thread:3") is None
        parent.send(None)
