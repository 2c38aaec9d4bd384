"""The SSP's row arena: handles on the wire, private directories, deferred frees, and a shard
loading rows by handle from an arena another process (here: this one) writes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from surrealdb import RecordID

from engine.arena import ArenaError, ArenaReader
from engine.values import canonical_bytes, pack_value, unpack_value
from ssp.rowarena import PRIVATE_PREFIX, HubRows, pack_handles, sweep_orphans, unpack_handles
from ssp.shard import Shard, encode_request


def test_handles_round_trip_as_u64_bytes() -> None:
    hs = [0, 8, (3 << 32) | 4096, (1 << 63) + 8]
    raw = pack_handles(iter(hs))
    assert len(raw) == 8 * len(hs)
    assert unpack_handles(raw) == hs
    assert unpack_handles(b"") == []
    with pytest.raises(ValueError, match="multiple of 8"):
        unpack_handles(b"\x00" * 9)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_orphaned_private_arenas_are_swept_and_live_ones_kept(tmp_path: Path) -> None:
    dead = tmp_path / f"{PRIVATE_PREFIX}dead"
    live = tmp_path / f"{PRIVATE_PREFIX}live"
    unowned = tmp_path / f"{PRIVATE_PREFIX}half"
    other = tmp_path / "something-else"
    for d in (dead, live, unowned, other):
        d.mkdir()
        (d / "seg-000000.bin").write_bytes(b"x")
    (dead / "owner.pid").write_text(str(_dead_pid()))
    (live / "owner.pid").write_text(str(os.getpid()))
    (other / "owner.pid").write_text(str(_dead_pid()))
    assert sweep_orphans(tmp_path) == 1
    assert not dead.exists()
    assert live.exists() and unowned.exists() and other.exists()


def test_private_arena_lives_in_memory_and_is_removed_on_close() -> None:
    rows = HubRows(None, 1)
    d = rows.dir
    try:
        assert rows.private and d.name.startswith(PRIVATE_PREFIX)
        if Path("/dev/shm").is_dir():
            assert d.parent == Path("/dev/shm")
        assert (d / "owner.pid").read_text() == str(os.getpid())
        rows.store.put("post", "post:1", {"id": RecordID("post", 1), "n": 1})
        assert any(p.name.startswith("seg-") for p in d.iterdir())
    finally:
        rows.close()
    assert not d.exists()


def test_configured_arena_dir_is_kept_after_close(tmp_path: Path) -> None:
    rows = HubRows(tmp_path / "arena", 1)
    rows.store.put("post", "post:1", {"id": RecordID("post", 1)})
    rows.close()
    assert not rows.private and (tmp_path / "arena" / "arena.json").exists()


def test_superseded_rows_stay_readable_while_handles_may_be_read(tmp_path: Path) -> None:
    rows = HubRows(tmp_path / "arena", 1)
    reader = ArenaReader(tmp_path / "arena")
    try:
        store = rows.store
        store.put("post", "post:1", {"id": RecordID("post", 1), "n": 1})
        old = store.handle("post", "post:1")
        assert old is not None
        with rows.reading():
            store.put("post", "post:1", {"id": RecordID("post", 1), "n": 2})
            rows.release()  # a release while a reader is open frees nothing
            assert reader.get_row(old)["n"] == 1
        with pytest.raises(ArenaError):
            reader.get(old)  # freed once the block closed
        new = store.handle("post", "post:1")
        assert new is not None and reader.get_row(new)["n"] == 2
        # Without an open reading block, ingest-time releases free at once.
        store.delete("post", "post:1")
        rows.release()
        with pytest.raises(ArenaError):
            reader.get(new)
    finally:
        reader.close()
        rows.close()


def _rows(n: int) -> list[dict[str, object]]:
    return [{"id": RecordID("post", i), "owner": RecordID("user", f"u{i % 3}"), "n": i}
            for i in range(n)]


async def test_a_shard_loads_rows_by_handle_from_the_arena(tmp_path: Path) -> None:
    rows = HubRows(tmp_path / "arena", 1)
    try:
        for r in _rows(50):
            rows.store.put_bytes("post", f"post:{r['n']}", canonical_bytes(r))
        shard = Shard(0, str(tmp_path / "arena"))
        raw = pack_handles(rows.store.handles("post"))
        out = await shard.handle(encode_request("load_handles", {"tables": {"post": raw}}))
        assert out == {"ok": True, "groups": []}
        assert shard.worker.engine.table_count("post") == 50
        reg = await shard.handle(encode_request("register", {
            "view_id": "v", "surql": "SELECT * FROM post WHERE owner = $o AND n < 20",
            "params": {"o": RecordID("user", "u1")}}))
        assert reg["ok"] and reg["members"] == sorted(f"post:{i}" for i in range(1, 20, 3))
        # With the view registered, a later load reports the view's delta.
        rows.store.put("post", "post:100", {"id": RecordID("post", 100),
                                            "owner": RecordID("user", "u1"), "n": 4})
        raw = pack_handles([rows.store.handle("post", "post:100")])  # type: ignore[list-item]
        out = await shard.handle(encode_request("load_handles", {"tables": {"post": raw}}))
        assert out["groups"] == [[["v"], {"added": ["post:100"], "removed": [], "updated": []}]]
        # The rows decoded from the arena keep their SurrealDB types.
        res = await shard.handle({"kind": "result", "data": pack_value({"view_id": "v"})})
        assert all(isinstance(r["owner"], RecordID) for r in unpack_value(res["data"]))
    finally:
        rows.close()


async def test_a_load_of_two_tables_reports_both_tables_deltas_in_order() -> None:
    # One `load_many` carrying two tables a view reads: each table's deltas reach the hub in
    # table order (a reply keyed by view kept only the last table's, losing `a:1`).
    shard = Shard(0)
    reg = await shard.handle(encode_request("register", {
        "view_id": "v", "surql": "SELECT *, (SELECT id FROM b WHERE a = $parent.id) AS bs "
                                "FROM a", "params": {}}))
    assert reg == {"ok": True, "members": []}
    out = await shard.handle(encode_request("load_many", {"tables": {
        "a": [{"id": RecordID("a", 1)}],
        "b": [{"id": RecordID("b", 1), "a": RecordID("a", 1)}]}}))
    assert out["ok"], out
    seen: set[str] = set()
    for vids, d in out["groups"]:
        if "v" in vids:
            seen.difference_update(d["removed"])
            seen.update(d["added"])
    assert seen == {"a:1", "b:1"}, out


async def test_bad_handles_and_a_shard_without_arena_are_errors_not_crashes(
        tmp_path: Path) -> None:
    rows = HubRows(tmp_path / "arena", 1)
    try:
        rows.store.put("post", "post:1", {"id": RecordID("post", 1)})
        shard = Shard(0, str(tmp_path / "arena"))
        for raw in (pack_handles([12345 | (7 << 32)]), pack_handles([4]), b"\x01\x02"):
            out = await shard.handle(encode_request("load_handles", {"tables": {"post": raw}}))
            assert out["ok"] is False and out["error"] == "arena" and out["message"], raw
        assert shard.worker.engine.table_count("post") == 0
        bare = await Shard(1).handle(encode_request("load_handles", {"tables": {}}))
        assert bare["ok"] is False and "no arena" in bare["message"]
        missing = Shard(2, str(tmp_path / "nowhere"))
        out = await missing.handle(encode_request("load_handles", {"tables": {}}))
        assert out["ok"] is False and out["error"] == "arena"
    finally:
        rows.close()


_FILL_UNTIL_FULL = r"""
import resource, signal, sys
from engine.arena import Arena
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit: EFBIG, not a signal
resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, 2 << 20))  # per file: segments are 1 MiB
arena = Arena(sys.argv[1], 1, preallocate=True)
handles = [arena.put(bytes([i % 251]) * 4000) for i in range(600)]  # spans 3 segments
try:
    arena.put(b"x" * (3 << 20))  # needs an oversize segment the limit refuses
except OSError as e:
    assert all(arena.get(h)[0] == i % 251 for i, h in enumerate(handles))
    arena.put(b"y" * 100)  # the arena is still usable
    print("refused", arena.segments, e.errno)
    raise SystemExit(0)
raise SystemExit("the oversize segment was not refused")
"""


def test_a_preallocated_arena_fails_the_put_instead_of_faulting_later(tmp_path: Path) -> None:
    # A file-size limit stands in for a full /dev/shm: reserving a segment that does not fit
    # raises OSError at put time, and every row stored before stays readable.
    proc = subprocess.run([sys.executable, "-c", _FILL_UNTIL_FULL, str(tmp_path / "a")],
                          capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr[-2000:]
    words = proc.stdout.split()
    assert words[0] == "refused" and words[1] == "3", proc.stdout
    assert not (tmp_path / "a" / "seg-000003.bin").exists()  # the failed segment is removed
