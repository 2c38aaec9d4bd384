"""Incremental behaviour of the engine core: windows, links, subqueries, staleness, batches."""

from __future__ import annotations

from typing import Any

from surrealdb import RecordID

from engine import ViewEngine
from engine.worker import ShardWorker


def _t(i: int, **kw: Any) -> dict[str, Any]:
    return {"id": RecordID("thread", i), **kw}


def _engine() -> ViewEngine:
    e = ViewEngine()
    e.load("user", [{"id": RecordID("user", 1), "name": "ann"},
                    {"id": RecordID("user", 2), "name": "bob"}])
    e.load("thread", [_t(i, score=i, author=RecordID("user", 1 + i % 2)) for i in range(1, 11)])
    e.load("comment", [{"id": RecordID("comment", i), "thread": RecordID("thread", 1 + i % 3),
                        "n": i} for i in range(1, 10)])
    return e


def test_top_k_refills_from_below_when_a_member_leaves() -> None:
    e = _engine()
    assert e.register("v", "SELECT * FROM thread ORDER BY score DESC LIMIT 3", {}) == {
        "thread:10", "thread:9", "thread:8"}
    d = e.ingest("thread", "DELETE", "thread:9", None)["v"]
    assert d.removed == {"thread:9"} and d.added == {"thread:7"}
    d = e.ingest("thread", "UPDATE", "thread:10", _t(10, score=0))["v"]
    assert d.removed == {"thread:10"} and d.added == {"thread:6"}
    assert [r["id"].id for r in e.result("v")] == [8, 7, 6]


def test_update_that_stops_matching_moves_the_row_out_and_delete_leaves_filtered_view() -> None:
    e = _engine()
    e.register("v", "SELECT * FROM thread WHERE score > 8", {})
    assert e.ingest("thread", "UPDATE", "thread:9", _t(9, score=1))["v"].removed == {"thread:9"}
    assert e.ingest("thread", "DELETE", "thread:10", None)["v"].removed == {"thread:10"}
    assert e.members("v") == set()


def test_desc_ties_break_by_record_id_ascending() -> None:
    e = ViewEngine()
    e.load("thread", [_t(i, s="x") for i in range(1, 6)])
    e.register("v", "SELECT * FROM thread ORDER BY s DESC LIMIT 2", {})
    assert e.members("v") == {"thread:1", "thread:2"}


def test_record_link_change_moves_rows_in_and_out() -> None:
    e = _engine()
    e.register("v", "SELECT * FROM thread WHERE author.name = 'ann'", {})
    assert len(e.members("v")) == 5
    d = e.ingest("user", "UPDATE", "user:2", {"id": RecordID("user", 2), "name": "ann"})["v"]
    assert len(d.added) == 5 and not d.removed
    d = e.ingest("user", "DELETE", "user:1", None)["v"]
    assert len(d.removed) == 5


def test_lateral_subquery_follows_comment_changes_and_author_lookup() -> None:
    e = _engine()
    e.register("v", "SELECT *, (SELECT * FROM comment WHERE thread = $parent.id ORDER BY n DESC "
                    "LIMIT 2) AS cs, (SELECT * FROM user WHERE id = $parent.author LIMIT 1)[0] "
                    "AS au FROM thread WHERE id = thread:1", {})
    assert e.members("v") == {"thread:1", "comment:9", "comment:6", "user:2"}
    d = e.ingest("comment", "CREATE", "comment:20",
                 {"id": RecordID("comment", 20), "thread": RecordID("thread", 1), "n": 20})["v"]
    assert d.added == {"comment:20"} and d.removed == {"comment:6"} and "thread:1" in d.updated
    d = e.ingest("comment", "DELETE", "comment:20", None)["v"]
    assert d.added == {"comment:6"} and d.removed == {"comment:20"}
    d = e.ingest("user", "UPDATE", "user:2", {"id": RecordID("user", 2), "name": "B"})["v"]
    assert d.updated == {"user:2", "thread:1"} and not d.added
    assert e.ingest("comment", "UPDATE", "comment:2",
                    {"id": RecordID("comment", 2), "thread": RecordID("thread", 2), "n": 0}) == {}


def test_fetch_and_link_star_make_members_but_link_field_does_not() -> None:
    e = _engine()
    e.register("f", "SELECT id, author FROM thread WHERE id = thread:1 FETCH author", {})
    e.register("s", "SELECT id, author.* AS a FROM thread WHERE id = thread:1", {})
    e.register("n", "SELECT id, author.name AS a FROM thread WHERE id = thread:1", {})
    assert e.members("f") == e.members("s") == {"thread:1", "user:2"}
    assert e.members("n") == {"thread:1"}
    d = e.ingest("user", "UPDATE", "user:2", {"id": RecordID("user", 2), "name": "zed"})
    assert d["n"].updated == {"thread:1"} and d["f"].updated == {"user:2", "thread:1"}


def test_stale_rv_is_ignored_and_create_of_existing_replaces() -> None:
    e = ViewEngine()
    e.register("v", "SELECT * FROM thread WHERE ok = true", {})
    e.ingest("thread", "CREATE", "thread:1", _t(1, ok=True, _00_rv=5))
    assert e.ingest("thread", "UPDATE", "thread:1", _t(1, ok=False, _00_rv=4)) == {}
    assert e.members("v") == {"thread:1"}
    d = e.ingest("thread", "CREATE", "thread:1", _t(1, ok=False, _00_rv=6))
    assert d["v"].removed == {"thread:1"}
    e.ingest("thread", "UPDATE", "thread:2", _t(2, ok=True))
    assert e.members("v") == {"thread:2"}


def test_ingest_batch_equals_one_by_one_net() -> None:
    events = [("thread", "UPDATE", "thread:3", _t(3, score=100, author=RecordID("user", 1))),
              ("thread", "DELETE", "thread:10", None),
              ("thread", "CREATE", "thread:11", _t(11, score=50)),
              ("thread", "DELETE", "thread:11", None),
              ("comment", "CREATE", "comment:50",
               {"id": RecordID("comment", 50), "thread": RecordID("thread", 3), "n": 1})]
    q = ("SELECT *, (SELECT * FROM comment WHERE thread = $parent.id) AS cs FROM thread "
         "ORDER BY score DESC LIMIT 3")
    a, b = _engine(), _engine()
    before = a.register("v", q, {})
    b.register("v", q, {})
    for ev in events:
        a.ingest(*ev)
    d = b.ingest_batch(events)["v"]
    assert a.members("v") == b.members("v")
    assert d.added == a.members("v") - before and d.removed == before - a.members("v")
    assert a.table_hash("thread") == b.table_hash("thread")


def test_a_batch_gives_each_range_view_the_delta_it_gets_alone() -> None:
    # Many materialisations of one range shape see the same row events of a batch; those
    # with the same entries share one merged delta (engine.flush._deltas). Every view's
    # delta, `updated` included, must be the one an engine holding that view alone computes.
    import random

    r = random.Random(5)
    q = ("SELECT *, (SELECT id, n FROM comment WHERE thread = $parent.id ORDER BY n DESC "
         "LIMIT 2) AS cs FROM thread WHERE score > $min")
    mins = [r.randrange(-1, 12) for _ in range(30)] + [3, 3, 7]
    events: list[tuple[str, str, str, Any]] = []
    for k in range(40):
        i = r.randrange(1, 14)
        if r.random() < 0.5:
            events.append(("thread", "UPDATE" if i <= 10 else "CREATE", f"thread:{i}",
                           _t(i, score=r.randrange(0, 12), author=RecordID("user", 1))))
        else:
            c = r.randrange(1, 12)
            events.append(("comment", "UPDATE" if c < 10 else "CREATE", f"comment:{c}",
                           {"id": RecordID("comment", c),
                            "thread": RecordID("thread", r.randrange(1, 11)), "n": k}))
    for size in (2, 5, 40):
        many = _engine()
        for j, m in enumerate(mins):
            many.register(f"v{j}", q, {"min": m})
        alone = []
        for j, m in enumerate(mins):
            e = _engine()
            e.register(f"v{j}", q, {"min": m})
            alone.append(e)
        for start in range(0, len(events), size):
            batch = events[start:start + size]
            got = many.ingest_batch(batch)
            for j, e in enumerate(alone):
                want = e.ingest_batch(batch).get(f"v{j}")
                assert got.get(f"v{j}") == want, (size, start, j)


def test_groups_hold_each_view_once_with_the_delta_the_dict_gives_it() -> None:
    # ingest_groups / ingest_batch_groups answer (view ids, delta) groups, which the shard
    # sends as they are: every view in one group at most, with the delta that ingest /
    # ingest_batch (the dict by view) gives it; the wire form merges groups sharing a delta.
    import random

    from engine.worker import delta_to_wire, groups_to_wire

    r = random.Random(11)
    shapes = [
        ("SELECT *, (SELECT id, n FROM comment WHERE thread = $parent.id ORDER BY n DESC "
         "LIMIT 2) AS cs FROM thread WHERE score > $min", lambda: {"min": r.randrange(-1, 12)}),
        ("SELECT id, score FROM thread WHERE author = $a",
         lambda: {"a": RecordID("user", r.randrange(1, 4))}),
        ("SELECT id, score FROM thread WHERE author = $a ORDER BY score DESC LIMIT 2",
         lambda: {"a": RecordID("user", r.randrange(1, 4))}),
        ("SELECT * FROM comment WHERE n >= $lo", lambda: {"lo": r.randrange(0, 30)}),
    ]
    views = [(f"v{i}", q, make()) for i, (q, make) in
             enumerate(shapes[k % len(shapes)] for k in range(60))]
    events: list[tuple[str, str, str, Any]] = []
    for k in range(60):
        i = r.randrange(1, 14)
        if r.random() < 0.5:
            op = "DELETE" if r.random() < 0.1 else "UPDATE" if i <= 10 else "CREATE"
            events.append(("thread", op, f"thread:{i}", None if op == "DELETE" else
                           _t(i, score=r.randrange(0, 12),
                              author=RecordID("user", r.randrange(1, 4)))))
        else:
            c = r.randrange(1, 12)
            events.append(("comment", "UPDATE" if c < 10 else "CREATE", f"comment:{c}",
                           {"id": RecordID("comment", c),
                            "thread": RecordID("thread", r.randrange(1, 11)), "n": k}))
    for size in (1, 7):
        grouped, plain = _engine(), _engine()
        for vid, q, params in views:
            grouped.register(vid, q, params)
            plain.register(vid, q, params)
        seen_groups = 0
        for start in range(0, len(events), size):
            batch = events[start:start + size]
            if size == 1:
                groups = grouped.ingest_groups(*batch[0])
                want = plain.ingest(*batch[0])
            else:
                groups = grouped.ingest_batch_groups(batch)
                want = plain.ingest_batch(batch)
            flat = [(v, d) for vs, d in groups for v in vs]
            assert len({v for v, _ in flat}) == len(flat), (size, start)
            assert dict(flat) == want, (size, start)
            wire = groups_to_wire(groups)
            on_wire = [v for vs, _ in wire for v in vs]
            assert sorted(on_wire) == sorted(want)
            assert {v: w for vs, w in wire for v in vs} == {
                v: delta_to_wire(d) for v, d in want.items()}
            seen_groups += sum(1 for vs, _ in groups if len(vs) > 1)
        assert seen_groups, "no group held several views: the test does not reach sharing"


def test_identical_views_share_a_materialisation_and_eq_index_limits_work() -> None:
    e = _engine()
    for i in range(100):
        e.register(f"v{i}", "SELECT * FROM thread WHERE author = $auth.id",
                   {"auth": {"id": RecordID("user", 1 + i % 2)}})
    assert len(e.circuits) == 1
    (circuit,) = e.circuits.values()
    assert len(circuit.mats) == 2
    d = e.ingest("thread", "UPDATE", "thread:1", _t(1, author=RecordID("user", 1)))
    assert set(d) == {f"v{i}" for i in range(100)}
    e.unregister("v0")
    assert "v0" not in e.ingest("thread", "DELETE", "thread:1", None)


def test_table_hash_is_order_independent() -> None:
    a, b = ViewEngine(), ViewEngine()
    rows = [_t(i, x=i) for i in range(20)]
    a.load("thread", rows)
    b.load("thread", list(reversed(rows)))
    assert a.table_hash("thread") == b.table_hash("thread") != 0
    b.ingest("thread", "UPDATE", "thread:3", _t(3, x=99))
    assert a.table_hash("thread") != b.table_hash("thread")
    b.ingest("thread", "UPDATE", "thread:3", _t(3, x=3))
    assert a.table_hash("thread") == b.table_hash("thread")


def test_shard_worker_round_trip_and_bad_messages() -> None:
    w = ShardWorker()
    assert w.handle({"kind": "load", "table": "thread", "rows": [_t(1, a=1)]})["count"] == 1
    r = w.handle({"kind": "register", "view_id": "v", "surql": "SELECT * FROM thread", "params": {}})
    assert r == {"ok": True, "members": ["thread:1"]}
    r = w.handle({"kind": "ingest", "events": [["thread", "CREATE", "thread:2", _t(2)]]})
    assert r["groups"] == [[["v"], {"added": ["thread:2"], "removed": [], "updated": []}]]
    assert w.handle({"kind": "register", "view_id": "x", "surql": "SELECT time::now() AS t FROM t"})[
        "error"] == "rejected"
    assert w.handle({"kind": "ingest", "events": [["thread", "BOGUS", "thread:2", None]]})[
        "error"] == "bad_message"
    assert w.handle({"kind": "nope"})["ok"] is False


def test_arena_dir_mirrors_rows_for_other_processes(tmp_path: Any) -> None:
    from engine.arena import ArenaReader

    e = ViewEngine(arena_dir=str(tmp_path), segment_mb=1)
    e.load("thread", [_t(i, x=i) for i in range(50)])
    e.ingest("thread", "UPDATE", "thread:5", _t(5, x="five"))
    e.ingest("thread", "DELETE", "thread:6", None)
    assert e.row_store is not None
    assert e.row_store.count("thread") == e.table_count("thread") == 49
    assert e.row_store.hash("thread") == e.table_hash("thread")
    handle = e.row_store.handle("thread", "thread:5")
    assert handle is not None
    reader = ArenaReader(str(tmp_path))
    try:
        assert reader.get_row(handle)["x"] == "five"
    finally:
        reader.close()


def test_nan_equality_reaches_indexed_views() -> None:
    e = ViewEngine()
    e.register("v", "SELECT * FROM thread WHERE score = $s", {"s": float("nan")})
    d = e.ingest("thread", "CREATE", "thread:1", _t(1, score=float("nan")))
    assert d["v"].added == {"thread:1"}


def test_anonymous_arena_holds_the_rows_once_synced() -> None:
    from engine.hashing import table_hash

    e = ViewEngine()
    e.load("thread", [_t(i, x=i) for i in range(20)])
    for _ in range(3):  # one row rewritten many times is encoded once
        e.ingest("thread", "UPDATE", "thread:5", _t(5, x="five"))
    e.ingest("thread", "DELETE", "thread:6", None)
    e.ingest("thread", "CREATE", "thread:99", _t(99, x=[1, None]))
    assert e.row_store.arena.dir is None
    assert e.sync_arena() == 21  # 20 loaded (5 and 6 among them) + thread:99
    assert e.sync_arena() == 0
    rows = e.store.table("thread").rows
    assert e.row_store.count("thread") == e.table_count("thread") == 20
    assert e.row_store.get("thread", "thread:5") == _t(5, x="five")
    assert e.row_store.get("thread", "thread:6") is None
    assert e.row_store.get("thread", "thread:99") == rows["thread:99"]
    e.ingest("thread", "UPDATE", "thread:7", _t(7, x="seven"))
    assert e.table_hash("thread") == table_hash(rows.values())  # table_hash syncs first
    assert e.row_store.get("thread", "thread:7") == _t(7, x="seven")


def test_same_is_type_exact_at_every_depth() -> None:
    from decimal import Decimal

    from surrealdb import RecordID

    from engine.delta import same
    nan = float("nan")
    shared = {"x": [1, "a"]}
    assert same({"a": 1, "b": shared}, {"a": 1, "b": shared})
    assert same({"a": [1, {"b": RecordID("t", 1)}]}, {"a": [1, {"b": RecordID("t", 1)}]})
    # what a client sees: NaN shows as NaN again, a key holding NONE as no key
    from engine.values import NONE
    assert same([nan], [float("nan")]) and same(nan, float("nan"))
    assert same({"a": NONE, "b": 1}, {"b": 1}) and same({"b": 1}, {"b": 1, "a": NONE})
    assert same({"a": NONE}, {"b": NONE})
    for a, b in [({"a": 1}, {"a": 1.0}), ({"a": True}, {"a": 1}), ([1], [True]),
                 ({"a": None}, {}), ({"a": 1}, {"b": 1}), ([nan], [1.0]),
                 ({"a": NONE}, {"a": None}), ({"a": NONE, "b": 1}, {"b": 2}),
                 ({"a": Decimal("1")}, {"a": 1}), ({"a": [1, 2]}, {"a": [1, 2, 3]}),
                 ({"a": RecordID("t", 1)}, {"a": RecordID("t", 1.0)}),
                 ({"a": RecordID("t", 1)}, {"a": RecordID("u", 1)}), ((1, 2), [1, 2])]:
        assert not same(a, b) and not same(b, a), (a, b)
