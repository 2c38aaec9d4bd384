"""The scheduler replica: apply semantics, hashes equal to the engine's, exactly-once replay,
keyset paging in SurrealDB's own ORDER BY id order, freeze."""

from __future__ import annotations

import itertools
import random
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from surrealdb import Duration, RecordID

from engine import ViewEngine
from engine.values import NONE, record_id_text
from scheduler.replica import Replica, ReplicaFrozen, id_order_key
from scheduler.wal import Wal
from tests.engine.judge import Judge


def row(table: str, key: Any, **fields: Any) -> dict[str, Any]:
    return {"id": RecordID(table, key), **fields}


def event(op: str, table: str, key: Any, **fields: Any) -> dict[str, Any]:
    rid = RecordID(table, key)
    return {"table": table, "op": op, "id": record_id_text(rid),
            "record": None if op == "DELETE" and not fields else {"id": rid, **fields}}


def numbered(events: list[dict[str, Any]], start: int = 1) -> list[tuple[int, dict[str, Any]]]:
    return list(enumerate(events, start))


MIXED_KEYS: list[Any] = [
    0, 1, -1, 7, 10, -(2**63), 2**63 - 1, 123456789012,
    "a", "B", "b", "", "10", "a-b", "é", "ü", "Zeta", "x y", "中文", "_", "1a",
    uuid.UUID("00000000-0000-0000-0000-000000000001"),
    uuid.UUID("ffffffff-0000-0000-0000-000000000000"),
    uuid.UUID("7fffffff-ffff-ffff-ffff-ffffffffffff"),
    [1], [1, 2], [1, "a"], [2], ["a"], [], [-5, 1.5], [Decimal("1.25")], [1.5], [[1], 2],
    [None], [True], ["a", "b"], [False], ["a", None], [Decimal("-0.5")], [-2.5], [2**62],
    ["x", datetime(2024, 1, 1, tzinfo=UTC)], ["x", datetime(2023, 12, 31, 23, 59, tzinfo=UTC)],
    [uuid.UUID(int=5)], ["a\x00b"],
    [{"k": 1}], [[]],
    {"a": 1}, {"a": 2}, {"b": 0}, {"a": 1, "b": 1}, {}, {"a": "x"},
]


def random_value(rng: random.Random, depth: int = 0) -> Any:
    k = rng.randrange(14 if depth < 2 else 11)
    if k == 0:
        return None
    if k == 1:
        return rng.random() < 0.5
    if k == 2:
        return rng.randrange(-(10**12), 10**12)
    if k == 3:
        return rng.uniform(-1e6, 1e6)
    if k == 4:
        return "".join(rng.choice("abcé中 -_") for _ in range(rng.randrange(8)))
    if k == 5:
        return Decimal(rng.randrange(-10**6, 10**6)) / Decimal(1000)
    if k == 6:
        return Duration(rng.randrange(10**12))
    if k == 7:
        return datetime(2020, 1, 1, tzinfo=UTC) + timedelta(microseconds=rng.randrange(10**14))
    if k == 8:
        return uuid.UUID(int=rng.getrandbits(128))
    if k == 9:
        return RecordID("user", rng.randrange(100))
    if k == 10:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(5)))
    if k == 11:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if k == 12:
        return {f"f{i}": random_value(rng, depth + 1) for i in range(rng.randrange(4))}
    return NONE


def random_events(rng: random.Random, n: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(n):
        table = rng.choice(["thread", "user", "_00_query"])
        key = rng.choice(MIXED_KEYS[:25]) if rng.random() < 0.3 else rng.randrange(60)
        op = rng.choice(["CREATE", "UPDATE", "UPDATE", "DELETE"])
        fields = {f"c{i}": random_value(rng) for i in range(rng.randrange(5))}
        if rng.random() < 0.3:
            fields["_00_rv"] = rng.randrange(5)
        out.append(event(op, table, key, **fields))
    return out


def test_apply_get_count_and_hash_match_the_engine(tmp_path: Path) -> None:
    rng = random.Random(1234)
    events = random_events(rng, 1500)
    eng = ViewEngine()
    for e in events:
        eng.ingest(e["table"], e["op"], e["id"], e["record"])
    with Replica.open(tmp_path / "r.db") as rep:
        # Apply in several transactions, as drains would.
        for i in range(0, len(events), 400):
            rep.apply(numbered(events[i:i + 400], i + 1))
        assert rep.applied_seq == len(events)
        for t in ("thread", "user", "_00_query"):
            assert rep.count(t) == eng.table_count(t)
            assert rep.hash(t) == eng.table_hash(t)
            assert rep.count(t) > 0
            for stored in rep.rows(t, page_size=7):
                rid = stored["id"]
                assert rep.get(t, rid) == stored
                assert rep.get(t, record_id_text(rid)) == stored
        assert rep.tables() == sorted(["thread", "user", "_00_query"])


def test_hash_is_maintained_incrementally_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    with Replica.open(path) as rep:
        rep.apply(numbered([event("CREATE", "t", 1, a=1), event("CREATE", "t", 2, a=2)]))
    with Replica.open(path) as rep:
        rep.apply(numbered([event("UPDATE", "t", 1, a=3), event("DELETE", "t", 2)], 3))
        eng = ViewEngine()
        eng.load("t", [row("t", 1, a=3)])
        assert rep.hash("t") == eng.table_hash("t")
        assert rep.count("t") == 1
        rep.apply(numbered([event("DELETE", "t", 1)], 5))
        assert (rep.count("t"), rep.hash("t"), rep.tables()) == (0, 0, [])


def test_update_replaces_the_whole_row_and_delete_of_unknown_is_a_no_op(tmp_path: Path) -> None:
    with Replica.open(tmp_path / "r.db") as rep:
        rep.apply(numbered([event("CREATE", "t", 1, a=1, b=2), event("UPDATE", "t", 1, a=5),
                            event("DELETE", "t", 99)]))
        assert rep.get("t", "t:1") == row("t", 1, a=5)
        assert rep.get("t", "t:99") is None
        assert rep.count("t") == 1


def test_stale_rv_is_ignored(tmp_path: Path) -> None:
    with Replica.open(tmp_path / "r.db") as rep:
        res = rep.apply(numbered([
            event("CREATE", "t", 1, _00_rv=5, v="new"),
            event("UPDATE", "t", 1, _00_rv=4, v="old"),
            event("DELETE", "t", 1, _00_rv=3),
        ]))
        assert (res.applied, res.stale) == (1, 2)
        assert rep.get("t", "t:1") == row("t", 1, _00_rv=5, v="new")
        rep.apply(numbered([event("UPDATE", "t", 1, _00_rv=5, v="same rv wins")], 4))
        assert rep.get("t", "t:1")["v"] == "same rv wins"  # type: ignore[index]


def test_a_missing_version_is_never_stale(tmp_path: Path) -> None:
    """An event posted by hand need not carry `_00_rv`: it applies over a versioned row."""
    with Replica.open(tmp_path / "r.db") as rep:
        res = rep.apply(numbered([
            event("CREATE", "t", 1, _00_rv=3, v="hooked write"),
            event("UPDATE", "t", 1, v="posted by hand"),
        ]))
        assert (res.applied, res.stale) == (2, 0)
        assert rep.get("t", "t:1")["v"] == "posted by hand"  # type: ignore[index]


def test_applied_seq_makes_wal_replay_exactly_once(tmp_path: Path) -> None:
    wal = Wal.open(tmp_path / "wal")
    # Counter-like rows: re-applying an old event would change the content.
    for i in range(10):
        wal.append(event("UPDATE", "c", 1, n=i))
    rep = Replica.open(tmp_path / "r.db")
    res = rep.apply(wal.replay(rep.applied_seq))
    assert res.applied_seq == 10
    rep.close()
    for i in range(10, 13):
        wal.append(event("UPDATE", "c", 1, n=i))
    wal.append(event("DELETE", "c", 1))
    # After a "crash": replay from the start of the log; absorbed events are skipped.
    rep = Replica.open(tmp_path / "r.db")
    res = rep.apply(wal.replay(0))
    assert (res.already, res.applied, res.applied_seq) == (10, 4, 14)
    assert rep.get("c", "c:1") is None
    rep.apply(numbered([event("CREATE", "c", 1, n=99)], 15))
    assert rep.get("c", "c:1") == row("c", 1, n=99)
    rep.close()
    wal.close()


def test_a_failed_transaction_changes_nothing(tmp_path: Path) -> None:
    with Replica.open(tmp_path / "r.db") as rep:
        rep.apply(numbered([event("CREATE", "t", 1, a=1)]))
        with pytest.raises(ValueError, match="increase"):
            rep.apply([(2, event("CREATE", "t", 2)), (2, event("CREATE", "t", 3))])
        assert rep.applied_seq == 1
        assert rep.count("t") == 1 and rep.get("t", "t:2") is None


def test_invalid_events_are_reported_not_applied(tmp_path: Path) -> None:
    with Replica.open(tmp_path / "r.db") as rep:
        res = rep.apply(numbered([
            {"table": "t", "op": "CREATE", "id": "t:1", "record": {"x": 1}},
            {"table": "t", "op": "CREATE", "id": "u:1", "record": {"x": 1}},
            {"table": "t", "op": "MERGE", "id": "t:2", "record": {}},
            {"table": "t", "op": "CREATE", "id": "t:(", "record": {}},
            {"table": "t", "op": "CREATE", "id": "t:3", "record": {"x": 2**70}},
            {"table": "t", "op": "UPDATE", "id": "t:4", "record": None},
            {"table": "t", "op": "UPDATE", "id": "t:5", "record": {"id": RecordID("t", 6)}},
            {"table": "t", "op": "UPDATE", "id": "t:⟨a-b⟩", "record": {"id": RecordID("t", "a-b")}},
        ]))
        assert res.applied == 2  # the 2.x bracket spelling of the same id is accepted
        assert [s for s, _ in res.rejected] == [2, 3, 4, 5, 6, 7]
        assert "does not match" in res.rejected[-1][1]
        assert "not in table" in res.rejected[0][1]
        assert rep.applied_seq == 8  # the log moves past them
        assert rep.get("t", "t:1") == row("t", 1, x=1)


def test_page_order_equals_surrealdb_order_by_id(tmp_path: Path) -> None:
    judge = Judge(tables=["mix"])
    try:
        rng = random.Random(7)
        keys = list(MIXED_KEYS)
        rng.shuffle(keys)
        for k in keys:
            judge.run("CREATE $id CONTENT {v: 1}", {"id": RecordID("mix", k)})
        expected = [r["id"] for r in judge.run("SELECT id FROM mix ORDER BY id")]
        assert len(expected) == len(MIXED_KEYS)
        with Replica.open(tmp_path / "r.db") as rep:
            rep.apply(numbered([event("CREATE", "mix", k, v=1) for k in keys]))
            got = [r["id"] for r in rep.rows("mix", page_size=5)]
            assert got == expected
            # Keyset continuation agrees with SurrealDB's WHERE id > $last too.
            for cut in (0, 3, 11, 20, len(expected) - 1):
                last = expected[cut]
                theirs = [r["id"] for r in judge.run(
                    "SELECT id FROM mix WHERE id > $last ORDER BY id LIMIT 4", {"last": last})]
                assert [r["id"] for r in rep.page("mix", last, 4)] == theirs
    finally:
        judge.close()


def test_order_key_is_a_total_order_consistent_with_sort_key() -> None:
    ids = [RecordID("t", k) for k in MIXED_KEYS]
    by_bytes = sorted(ids, key=id_order_key)
    for a, b in itertools.pairwise(by_bytes):
        assert id_order_key(a) < id_order_key(b)


def test_page_rejects_a_bad_limit(tmp_path: Path) -> None:
    with Replica.open(tmp_path / "r.db") as rep:
        for bad in (0, -1, True, "3"):
            with pytest.raises(ValueError, match="limit"):
                rep.page("t", None, bad)  # type: ignore[arg-type]


def test_freeze_holds_the_snapshot_until_every_bootstrap_ends(tmp_path: Path) -> None:
    with Replica.open(tmp_path / "r.db") as rep:
        rep.apply(numbered([event("CREATE", "t", 1)]))
        assert rep.freeze() == 1
        assert rep.freeze() == 1
        assert rep.frozen
        with pytest.raises(ReplicaFrozen):
            rep.apply(numbered([event("CREATE", "t", 2)], 2))
        with pytest.raises(ReplicaFrozen):
            rep.replace_all({"t": []}, 5)
        assert rep.count("t") == 1 and rep.page("t", None, 10)  # reads still served
        rep.unfreeze()
        with pytest.raises(ReplicaFrozen):
            rep.apply(numbered([event("CREATE", "t", 2)], 2))
        rep.unfreeze()
        assert not rep.frozen
        rep.apply(numbered([event("CREATE", "t", 2)], 2))
        assert rep.count("t") == 2
        with pytest.raises(RuntimeError):
            rep.unfreeze()


def test_replace_all_swaps_contents_and_sets_applied_seq(tmp_path: Path) -> None:
    with Replica.open(tmp_path / "r.db") as rep:
        rep.apply(numbered([event("CREATE", "old", 1), event("CREATE", "t", 9)]))
        rows = [row("t", i, v=i) for i in range(50)]
        rep.replace_all({"t": rows, "empty": []}, 1000)
        assert rep.tables() == ["t"]
        assert rep.count("old") == 0 and rep.count("t") == 50
        eng = ViewEngine()
        eng.load("t", rows)
        assert rep.hash("t") == eng.table_hash("t")
        assert rep.applied_seq == 1000
        assert [r["id"].id for r in rep.rows("t", 16)] == list(range(50))


DT_KEYS: list[list[Any]] = [["x", datetime(2024, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)]
           for us in (0, 1, 500_000, 1_000_000, -60_000_000)]


def test_surrealdb_orders_datetime_keys_by_storage_not_time() -> None:
    # Pins the engine fact behind the replica's choice: in 3.2.4, ORDER BY id puts
    # ['x', 00:00:00.000001] before ['x', 00:00:00] (storage order), while `id > $last`
    # compares by time, so keyset paging over such ids skips rows in SurrealDB itself.
    judge = Judge(tables=["mix"])
    try:
        for k in DT_KEYS:
            judge.run("CREATE $id CONTENT {v: 1}", {"id": RecordID("mix", k)})
        ordered = [r["id"].id[1] for r in judge.run("SELECT id FROM mix ORDER BY id")]
        assert ordered != sorted(ordered)
        assert ordered.index(DT_KEYS[1][1]) < ordered.index(DT_KEYS[0][1])
        after = judge.run("SELECT id FROM mix WHERE id > $last ORDER BY id",
                          {"last": RecordID("mix", DT_KEYS[1])})
        assert RecordID("mix", DT_KEYS[0]) not in [r["id"] for r in after]  # after it in ORDER
    finally:
        judge.close()


def test_replica_pages_datetime_keys_in_time_order_without_gaps(tmp_path: Path) -> None:
    # The replica keeps one consistent order (time), so its keyset paging never skips.
    with Replica.open(tmp_path / "r.db") as rep:
        rep.apply(numbered([event("CREATE", "mix", k) for k in DT_KEYS]))
        got = [r["id"].id[1] for r in rep.rows("mix", page_size=2)]
        assert got == sorted(k[1] for k in DT_KEYS)


def test_a_cloned_row_keeps_its_rv_against_older_events(tmp_path: Path) -> None:
    with Replica.open(tmp_path / "r.db") as rep:
        rep.replace_all({"t": [row("t", 1, _00_rv=10, v="cloned")]}, 5)
        res = rep.apply(numbered([event("UPDATE", "t", 1, _00_rv=9, v="older"),
                                  event("DELETE", "t", 1, _00_rv=8)], 6))
        assert res.stale == 2
        assert rep.get("t", "t:1") == row("t", 1, _00_rv=10, v="cloned")
        rep.apply(numbered([event("UPDATE", "t", 1, _00_rv=11, v="newer")], 8))
        assert rep.get("t", "t:1") == row("t", 1, _00_rv=11, v="newer")
