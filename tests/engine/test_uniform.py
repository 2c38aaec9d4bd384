"""Views whose rows are the row's own fields beside uncorrelated subqueries ("uniform"
projections, engine.proj): every row shows the same subquery value, and the rows share
their item state instead of keeping a copy each. Checked against SurrealDB after every
random write (values, order, NONE vs NULL, ties, ``delta.updated``), and bounded in memory
per row and view."""

from __future__ import annotations

import random
from typing import Any

import pytest
from surrealdb import RecordID

from tests.engine.codec import Case, Event, View
from tests.engine.gen import linked_rows_and_writes
from tests.engine.runner import engine_api, run_case, traced_bytes_per_row_and_view

SUB = ("(SELECT id, votes, owner FROM comment WHERE votes >= $p0 AND votes < $p1 "
       "ORDER BY votes ASC LIMIT 1)")

SHAPES = [
    # the thread list of random seed 14256's S02, with per-view ranges
    f"SELECT id, author, created_at, score, {SUB} AS cheap FROM thread",
    # `*` first, two uncorrelated items, a window over the parents
    f"SELECT *, {SUB} AS cheap, (SELECT VALUE id FROM comment WHERE votes < $p0) AS below "
    "FROM thread WHERE score > 1 ORDER BY score DESC, id LIMIT 4",
    # OMIT: the output does not keep every item at its own key (values kept per row)
    f"SELECT *, {SUB} AS cheap OMIT title FROM thread",
    # a subquery shown whole, no LIMIT, ties on votes
    "SELECT id, score, (SELECT id, votes FROM comment WHERE votes <= $p1 ORDER BY votes DESC)"
    " AS all_under FROM thread WHERE score != NONE",
]

PARAMS: list[dict[str, Any]] = [{"p0": 2, "p1": 6}, {"p0": 0, "p1": 3}, {"p0": 5, "p1": 5}, {"p0": 4, "p1": None},
          {"p0": 1.0, "p1": 9}]


def _num(r: random.Random) -> Any:
    k = r.random()
    if k < 0.1:
        return None  # NULL
    if k < 0.2:
        return "absent"  # NONE: the key is left out
    if k < 0.35:
        return float(r.randint(0, 8))
    return r.randint(0, 8)  # few values: ties


def _thread(r: random.Random, i: int) -> dict[str, Any]:
    row: dict[str, Any] = {"id": RecordID("thread", i), "author": RecordID("user", r.randint(0, 3)),
                           "created_at": r.randint(0, 50), "title": f"t{r.randint(0, 9)}"}
    s = _num(r)
    if s != "absent":
        row["score"] = s
    return row


def _comment(r: random.Random, i: int) -> dict[str, Any]:
    row: dict[str, Any] = {"id": RecordID("comment", i), "owner": RecordID("user", r.randint(0, 3))}
    p = _num(r)
    if p != "absent":
        row["votes"] = p
    return row


def _case(seed: int, surql: str) -> Case:
    r = random.Random(seed)
    rows = {"thread": [_thread(r, i) for i in range(12)],
            "comment": [_comment(r, i) for i in range(10)]}
    present = {("thread", i) for i in range(12)} | {("comment", i) for i in range(10)}
    writes: list[Event] = []
    for _ in range(40):
        table = "comment" if r.random() < 0.6 else "thread"
        i = r.randint(0, 14)
        key = (table, i)
        if key in present and r.random() < 0.2:
            writes.append((table, "DELETE", RecordID(table, i), None))
            present.discard(key)
            continue
        row = _comment(r, i) if table == "comment" else _thread(r, i)
        writes.append((table, "UPDATE" if key in present else "CREATE", RecordID(table, i), row))
        present.add(key)
    views = [View(surql, dict(p)) for p in PARAMS]
    return Case(rows=rows, views=views, writes=writes, note=f"uniform {seed}: {surql}",
                check_updated=True)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("surql", SHAPES)
def test_uniform_views_agree_with_surrealdb_after_every_write(surql: str, seed: int) -> None:
    mismatch = run_case(_case(seed, surql), check_updated=True)
    assert mismatch is None, str(mismatch)


def test_rows_beside_an_uncorrelated_subquery_share_their_state() -> None:
    """Memory: views of one thread list beside an uncorrelated subquery whose parameters
    differ per view each show every thread. A row keeps its output and members, not a copy
    of the subquery's dependencies, reads and item lists (~1,740 bytes a row and view
    before, ~610 after). Bounded per row and view as views are added."""
    view_engine, _ = engine_api()
    eng = view_engine()
    n = 5_000
    eng.load("thread", [{"id": RecordID("thread", i), "author": RecordID("user", i % 50),
                         "created_at": i, "score": i % 100} for i in range(n)])
    eng.load("comment", [{"id": RecordID("comment", i), "votes": (i * 37) % 1_000,
                          "owner": RecordID("user", i % 50)} for i in range(2_000)])
    q = SHAPES[0]
    eng.register("v0", q, {"p0": 0, "p1": 10})  # the shape's first view builds shared state
    per = traced_bytes_per_row_and_view(
        eng, q, lambda k: {"p0": 100 * k, "p1": 100 * k + 50}, views=8, rows=n)
    assert per < 800, f"{per:.0f} bytes per row and view"
    # still exact: the cheapest comment of v3's range moves out of it
    rows = eng.result("v3")
    cheap = rows[0]["cheap"]
    assert len(rows) == n and cheap and all(r["cheap"] == cheap for r in rows)
    pid = cheap[0]["id"]
    d = eng.ingest("comment", "UPDATE", str(pid), {"id": pid, "votes": 999, "owner":
                                                   cheap[0]["owner"]})
    assert str(pid) in d["v3"].removed
    after = eng.result("v3")
    assert all(r["cheap"] == after[0]["cheap"] for r in after)
    assert not after[0]["cheap"] or after[0]["cheap"][0]["id"] != pid


# -- `link.field IN $list` narrows a new view's candidates (engine.linkscan) -------------

LINK_VIEWS = [
    "SELECT *, thread.status AS thread_status FROM comment WHERE thread.score <= $p0 AND "
    "thread.category IN $p1 AND votes >= $p2",
    "SELECT id, votes FROM comment WHERE thread.category IN $p1 ORDER BY votes DESC, id LIMIT 3",
]

LINK_PARAMS: list[dict[str, Any]] = [{"p0": 5, "p1": ["a"], "p2": 1}, {"p0": 9, "p1": ["b", "c"], "p2": 0},
               {"p0": 9, "p1": [], "p2": 0}, {"p0": 9, "p1": ["a", None], "p2": 0},
               {"p0": 9, "p1": "abc", "p2": 0}, {"p0": 9, "p1": ["b", 1], "p2": 0}]


def _linked_case(seed: int, surql: str) -> Case:
    r = random.Random(seed)

    def thread(i: int) -> dict[str, Any]:
        row: dict[str, Any] = {"id": RecordID("thread", i), "score": r.randint(0, 9),
                               "status": r.choice(["open", "closed"])}
        c = r.choice(["a", "b", "c", 1, None, "absent"])
        if c != "absent":
            row["category"] = c
        return row

    def comment(i: int) -> dict[str, Any]:
        row: dict[str, Any] = {"id": RecordID("comment", i), "votes": r.randint(0, 4)}
        k = r.random()
        if k < 0.85:
            row["thread"] = RecordID("thread", r.randint(0, 7))  # 6 and 7 may not exist
        elif k < 0.93:
            row["thread"] = None
        return row

    rows, writes = linked_rows_and_writes(r, thread, comment, 14)
    return Case(rows=rows, views=[View(surql, dict(p)) for p in LINK_PARAMS], writes=writes,
                note=f"link IN {seed}: {surql}", check_updated=True)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("surql", LINK_VIEWS)
def test_views_filtering_a_link_in_a_list_agree_with_surrealdb(surql: str, seed: int) -> None:
    mismatch = run_case(_linked_case(seed, surql), check_updated=True)
    assert mismatch is None, str(mismatch)


def test_a_link_in_a_list_reads_only_the_rows_linking_to_listed_records() -> None:
    """Registration: ``thread.category IN $list`` takes the rows linking to the threads
    of the listed categories from the indexes; the predicate runs on those only (it ran on
    every comment before)."""
    from engine.linkscan import link_candidates

    view_engine, _ = engine_api()
    eng = view_engine()
    eng.load("thread", [{"id": RecordID("thread", i), "category": f"k{i % 20}"}
                        for i in range(200)])
    eng.load("comment", [{"id": RecordID("comment", i), "thread": RecordID("thread", i % 200),
                          "votes": i % 5} for i in range(4_000)])
    q = "SELECT id, votes FROM comment WHERE thread.category IN $p ORDER BY votes DESC, id LIMIT 5"
    got = eng.register("v", q, {"p": ["k3", "k4"]})
    assert len(got) == 5
    circuit = next(iter(eng.circuits.values()))
    mat = eng.views["v"]
    cands = link_candidates(eng.store, "comment", circuit.plan.q.where, mat.S)
    assert cands is not None and len(cands) == 400  # 2 of 20 categories


# -- rows beside uncorrelated subqueries that also read a link (random seed 61001's S09) ---

LINKED_SUB = ("SELECT *, thread.status AS thread_status, votes * 2 AS votes2, "
              "(SELECT id, score FROM thread WHERE score >= $p0 ORDER BY score DESC, id LIMIT 2)"
              " AS top, (SELECT id FROM thread ORDER BY id LIMIT 2) AS first FROM comment")


def test_rows_reading_a_link_beside_uncorrelated_subqueries_keep_no_copies() -> None:
    """Memory: a row that reads a link (``thread.status``) is not uniform, so it kept its
    own list of item values, its own list of item members (the same objects as every other
    row's), a set and two lists for the one record it read, and merged copies of its reads
    and of the windows it reads, and each window it reads kept a (group, row) tuple for it:
    ~2,330 bytes a row and view before, ~1,330 after (pure Python). Its values are read
    back from its output, lists holding the same objects as the last row's are that row's
    lists, a link read's dependencies are one tuple per record for the whole shape, and a
    window keeps its parents per group."""
    view_engine, _ = engine_api()
    eng = view_engine()
    n = 5_000
    eng.load("thread", [{"id": RecordID("thread", i), "score": i % 100,
                         "status": ("open", "closed")[i % 2]} for i in range(500)])
    eng.load("comment", [{"id": RecordID("comment", i), "thread": RecordID("thread", i % 500),
                          "votes": i % 7, "body": f"b{i % 13}"} for i in range(n)])
    eng.register("v0", LINKED_SUB, {"p0": 0})
    per = traced_bytes_per_row_and_view(eng, LINKED_SUB, lambda k: {"p0": 10 * k},
                                        views=6, rows=n)
    assert per < 1_500, f"{per:.0f} bytes per row and view"
    # still exact: the thread every view's `first` shows changes its score and status
    t0 = RecordID("thread", 0)
    d = eng.ingest("thread", "UPDATE", "thread:0", {"id": t0, "score": 1_000,
                                                   "status": "closed"})
    for k in range(1, 7):
        rows = eng.result(f"v{k}")
        assert len(rows) == n
        assert all(r["top"][0]["id"] == t0 and r["top"][0]["score"] == 1_000 for r in rows)
        assert [r["thread_status"] for r in rows if r["thread"] == t0] == ["closed"] * 10
        assert len(d[f"v{k}"].updated) == n  # every row shows thread:0 in its `top`


@pytest.mark.parametrize("seed", range(6))
def test_linked_rows_beside_uncorrelated_subqueries_agree_with_surrealdb(seed: int) -> None:
    case = _linked_case(seed, LINKED_SUB.replace("score >= $p0", "score >= $p0 AND score != NONE"))
    case.views[:] = [View(case.views[0].surql, {"p0": p}) for p in (0, 3, 5, 9, None, 2.5)]
    mismatch = run_case(case, check_updated=True)
    assert mismatch is None, str(mismatch)


def test_a_linked_record_write_that_keeps_the_read_fields_qualifies_no_row_again() -> None:
    """Work: `thread.category IN $list` reads a thread's category only. A thread write
    that changes its title qualified each of its comments again in every view (random seed
    92330's S02: three quarters of its CPU); now only a write changing the category does."""
    view_engine, _ = engine_api()
    eng = view_engine()
    eng.load("thread", [{"id": RecordID("thread", i), "category": f"k{i % 4}", "title": "t"}
                        for i in range(20)])
    eng.load("comment", [{"id": RecordID("comment", i), "thread": RecordID("thread", i % 20),
                          "votes": i % 5} for i in range(400)])
    q = "SELECT id, votes FROM comment WHERE thread.category IN $p ORDER BY votes DESC, id LIMIT 5"
    for k in range(4):
        eng.register(f"v{k}", q, {"p": [f"k{k}", "k9"]})
    eng.register("all", "SELECT id, votes FROM comment WHERE thread.category IN $p",
                 {"p": ["k1"]})
    t3 = RecordID("thread", 3)
    n0 = eng.writes.hop_rows
    d = eng.ingest("thread", "UPDATE", "thread:3", {"id": t3, "category": "k3", "title": "u"})
    assert eng.writes.hop_rows == n0 and not any(d.values())
    d = eng.ingest("thread", "UPDATE", "thread:3", {"id": t3, "category": "k1", "title": "u"})
    assert eng.writes.hop_rows > n0
    assert len(d["all"].added) == 20 and len(eng.result("all")) == 120
    top = sorted(eng.result("all"), key=lambda r: (-r["votes"], r["id"].id))[:5]
    assert [r["id"] for r in eng.result("v1")] == [r["id"] for r in top]


HOP_ORDERED = ("SELECT id, votes, thread.score AS tsc FROM comment WHERE thread.status = 'open' "
               "ORDER BY tsc DESC, id LIMIT 3")


@pytest.mark.parametrize("seed", range(4))
def test_a_one_hop_order_follows_writes_to_the_linked_records(seed: int) -> None:
    """A thread write changing only its score keeps every comment's qualification but
    moves its comments in the order: the shape's hop fields hold both (Circuit.hop_reads)."""
    mismatch = run_case(_linked_case(seed, HOP_ORDERED), check_updated=True)
    assert mismatch is None, str(mismatch)


def test_the_link_read_cache_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Circuit.rdeps` keeps records no row reads any more until it is emptied at
    RDEPS_MAX entries; what it shares stays exact after it is emptied."""
    import engine.proj as proj_module

    monkeypatch.setattr(proj_module, "RDEPS_MAX", 8)
    view_engine, _ = engine_api()
    eng = view_engine()
    eng.load("thread", [{"id": RecordID("thread", i), "score": i, "status": "open"}
                        for i in range(50)])
    eng.load("comment", [{"id": RecordID("comment", i), "thread": RecordID("thread", i % 50),
                          "votes": i % 7} for i in range(200)])
    eng.register("v", LINKED_SUB, {"p0": 10})
    circuit = next(iter(eng.circuits.values()))
    assert 0 < len(circuit.rdeps) <= 8
    eng.ingest("thread", "UPDATE", "thread:7", {"id": RecordID("thread", 7), "score": 7,
                                               "status": "closed"})
    rows = eng.result("v")
    assert len(rows) == 200 and len(circuit.rdeps) <= 8
    assert {r["thread_status"] for r in rows if r["thread"] == RecordID("thread", 7)} == {"closed"}
