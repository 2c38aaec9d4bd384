"""How a new view finds its rows among many (issue 33: any view over 20k rows registers in
at most 50 ms), checked against SurrealDB after random writes and by the work it does.

- A WHERE reading one field of the row alone (`string::uppercase(status) = $s`) is
  evaluated once per string held there, not once per row (engine.window.passing); values
  of other kinds (1 and 1.0 share an index key, not a type; NONE, NULL, arrays) row by row.
- A view whose WHERE tests fields of the row against semi-join sets (`thread IN (SELECT
  VALUE id FROM thread WHERE ...)`) takes as candidates the rows holding the set's keys
  when they are few (engine.membership.semi_candidates); a window over most of a large
  table walks its sort field's index like any walked window (engine.window, "walk"). A
  key entering or leaving a set requalifies the rows holding it, walked yet or not.
"""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pytest
from surrealdb import RecordID

from tests.engine.codec import Case, View
from tests.engine.runner import engine_api, run_case

# one string field read alone: implicit views, a window too long to be walked, a group
ONE_FIELD = [
    "SELECT id, s FROM comment WHERE string::uppercase(s) = $su",
    "SELECT id, s, k FROM comment WHERE s IN $list OR string::starts_with(s, $pre)",
    "SELECT id, k FROM comment WHERE string::len(s) > $n ORDER BY k, id DESC LIMIT 150",
    "SELECT s, count() AS n FROM comment WHERE string::lowercase(s) != $su GROUP BY s",
    # 1, 1.0 and 1dec share an index key, not an answer
    "SELECT id, s FROM comment WHERE type::is_float(s) OR type::is_decimal(s) OR s = $su",
]
ONE_PARAMS: list[dict[str, Any]] = [
    {"su": "AB", "list": ["a", "B"], "pre": "a", "n": 1},
    {"su": "A", "list": [], "pre": "", "n": 0},
]

# semi-join windows over a table large against their heads (walked)
SEMI = [
    "SELECT id, k FROM comment WHERE thread IN (SELECT VALUE id FROM thread WHERE "
    "score >= $lo) ORDER BY k LIMIT 3",
    "SELECT id, k, v FROM comment WHERE v >= 0 AND thread IN (SELECT VALUE id FROM thread "
    "WHERE score < $hi) ORDER BY k DESC LIMIT 2 START 1",
    "SELECT id, v FROM comment WHERE thread IN (SELECT VALUE id FROM thread WHERE "
    "score >= $lo) AND v > 2",
]
SEMI_PARAMS: list[dict[str, Any]] = [{"lo": 3, "hi": 6}, {"lo": 9, "hi": 1}]

_S: list[Any] = ["a", "A", "ab", "AB", "b", "B", "", "abc", 1, 1.0, Decimal(1), None, "absent",
                 ["a"], True]


def _row(r: random.Random, i: int) -> dict[str, Any]:
    row: dict[str, Any] = {"id": RecordID("comment", i), "v": r.randint(-1, 9),
                           "k": r.choice([r.randint(0, 12), r.randint(0, 12), "z", None]),
                           "thread": r.choice([RecordID("thread", r.randint(0, 7)),
                                               RecordID("thread", r.randint(0, 7)), None])}
    s = r.choice(_S)
    if s != "absent":
        row["s"] = s
    return row


def _case(seed: int, views: list[str], params: list[dict[str, Any]], rows_n: int,
          n_writes: int) -> Case:
    r = random.Random(seed)
    rows = [_row(r, i) for i in range(rows_n)]
    rows[0]["k"] = 3  # the first row sets the walk's kind (ints)
    present = {i for i in range(rows_n)}
    threads = [{"id": RecordID("thread", t), "score": r.randint(0, 9)} for t in range(6)]
    tpresent = set(range(6))
    writes: list[Any] = []
    for _ in range(n_writes):
        x = r.random()
        if x < 0.2:
            # a thread's score moves: its key enters or leaves the semi-join sets
            t = r.randint(0, 7)
            if t in tpresent and r.random() < 0.2:
                writes.append(("thread", "DELETE", RecordID("thread", t), None))
                tpresent.discard(t)
            else:
                writes.append(("thread", "UPDATE" if t in tpresent else "CREATE",
                               RecordID("thread", t),
                               {"id": RecordID("thread", t), "score": r.randint(0, 9)}))
                tpresent.add(t)
            continue
        i = r.randint(0, rows_n + 5)
        if i in present and x < 0.35:
            writes.append(("comment", "DELETE", RecordID("comment", i), None))
            present.discard(i)
            continue
        writes.append(("comment", "UPDATE" if i in present else "CREATE",
                       RecordID("comment", i), _row(r, i)))
        present.add(i)
    return Case(rows={"comment": rows, "thread": threads},
                views=[View(q, dict(p)) for q in views for p in params],
                writes=writes, note=f"registration build {seed}", check_updated=True)


@pytest.mark.parametrize("seed", range(2))
def test_one_field_views_agree_with_surrealdb(seed: int) -> None:
    # (SurrealDB answers these functions' type errors slowly: few writes, one set each)
    case = _case(seed, ONE_FIELD, ONE_PARAMS[seed:seed + 1], 150, 30)
    mismatch = run_case(case, check_updated=True)
    assert mismatch is None, str(mismatch)


@pytest.mark.parametrize("seed", range(3))
def test_walked_semi_join_windows_agree_with_surrealdb(seed: int) -> None:
    mismatch = run_case(_case(seed, SEMI, SEMI_PARAMS, 200, 150), check_updated=True)
    assert mismatch is None, str(mismatch)


def _comments(eng: Any, n: int) -> None:
    statuses = ["open", "closed", "stale", "Open", "draft"]
    eng.load("thread", [{"id": RecordID("thread", t), "score": t % 10} for t in range(100)])
    eng.load("comment", [{"id": RecordID("comment", i), "status": statuses[i % 5],
                          "k": i % 1000, "thread": RecordID("thread", i % 100)}
                         for i in range(n)])



def _count_where(eng: Any, view: str) -> list[int]:
    """Count from now on the WHERE evaluations of `view`'s shape (the circuit's predicate,
    shared by the views of that shape): the count is the list's one item."""
    plan = eng.views[view].circuit.plan
    calls = [0]
    pred = plan.pred

    def counted(*args: Any) -> Any:
        calls[0] += 1
        return pred(*args)

    plan.pred = counted
    return calls


def test_a_one_field_where_is_evaluated_once_per_string() -> None:
    """A second view of `string::uppercase(status) = $s` over 20,000 rows holding five
    strings evaluates its WHERE five times, and shows the same rows a scan would."""
    view_engine, _ = engine_api()
    eng = view_engine()
    _comments(eng, 20_000)
    q = "SELECT id, status FROM comment WHERE string::uppercase(status) = $s"
    eng.register("a", q, {"s": "OPEN"})
    calls = _count_where(eng, "a")
    got = eng.register("b", q, {"s": "STALE"})
    assert calls[0] == 5
    assert len(got) == 4_000 and {r["status"] for r in eng.result("b")} == {"stale"}
    assert len(eng.result("a")) == 8_000


def test_a_wide_semi_join_window_makes_entries_only_as_far_as_it_reaches() -> None:
    """`thread IN (SELECT VALUE id ...) ORDER BY k LIMIT 10` over 20,000 rows, half of
    them passing: entries for the rows under the first keys up to its head, not 10,000."""
    view_engine, _ = engine_api()
    eng = view_engine()
    _comments(eng, 20_000)
    eng.register("v", "SELECT id, k FROM comment WHERE thread IN (SELECT VALUE id FROM "
                      "thread WHERE score >= $lo) ORDER BY k LIMIT 10", {"lo": 5})
    assert [r["k"] for r in eng.result("v")] == [5] * 10
    assert len(eng.views["v"].order.entries) < 100


def test_a_semi_join_view_of_a_small_set_evaluates_only_its_rows() -> None:
    """`thread IN (SELECT VALUE id FROM thread WHERE score >= $lo)` over 20,000 rows: a set
    of one thread evaluates the 200 rows holding it, an empty set none."""
    view_engine, _ = engine_api()
    eng = view_engine()
    _comments(eng, 20_000)
    q = ("SELECT id, k FROM comment WHERE thread IN (SELECT VALUE id FROM thread WHERE "
         "score >= $lo) AND k < $k ORDER BY k LIMIT 10")
    eng.register("a", q, {"lo": 5, "k": 1000})
    calls = _count_where(eng, "a")
    eng.register("b", q, {"lo": 99, "k": 1000})
    assert calls[0] == 0 and eng.result("b") == []
    eng.load("thread", [{"id": RecordID("thread", 100), "score": 200}])
    eng.ingest("thread", "UPDATE", "thread:7", {"id": RecordID("thread", 7), "score": 150})
    calls[0] = 0
    eng.register("c", q, {"lo": 99, "k": 500})
    assert calls[0] == 100  # thread 7's rows with k < 500 (7, 107, ... 407: 20 each)
    assert [r["k"] for r in eng.result("c")] == [7] * 10


def test_many_link_candidates_meet_a_range_by_its_index() -> None:
    """`thread.category IN $cats AND votes >= 10 AND votes < 12` over 20,000 rows: the
    10,000 rows of the linked threads meet the votes range by the field's index, not by a
    test of each (rangescan.range_filter); the view shows what a scan shows."""
    from engine import rangescan

    view_engine, _ = engine_api()
    eng = view_engine()
    eng.load("thread", [{"id": RecordID("thread", t), "category": "ab"[t % 2]}
                        for t in range(100)])
    eng.load("comment", [{"id": RecordID("comment", i), "votes": i % 50,
                          "thread": RecordID("thread", i % 100)} for i in range(20_000)])
    # (counted by the module itself: a compiled caller does not see a stand-in put in
    # its place, which left this bound untested)
    rangescan.FILTERED[0] = 0
    eng.register("v", "SELECT id FROM comment WHERE thread.category IN $cats AND "
                      "votes >= $lo AND votes < $hi", {"cats": ["a"], "lo": 10, "hi": 12})
    assert rangescan.FILTERED[0] <= 2048
    want = {f"comment:{i}" for i in range(20_000) if i % 2 == 0 and 10 <= i % 50 < 12}
    assert {str(r["id"]) for r in eng.result("v")} == want and len(want) == 400


@pytest.mark.parametrize("q", [q for q in ONE_FIELD if "LIMIT" not in q])  # (that one walks)
def test_a_one_field_where_through_the_kept_index_agrees(q: str) -> None:
    """A first view over 5,000 rows whose field holds few strings keeps the field's index;
    the next views take their rows from its buckets. Mixed kinds there (1, 1.0, 1dec,
    NULL, NONE, arrays, bools) are evaluated row by row: each view equals the same view
    registered alone in a fresh engine (the path SurrealDB judged above), also after
    random writes."""
    view_engine, _ = engine_api()
    r = random.Random(7)
    rows = [_row(r, i) for i in range(5_000)]
    kept, fresh = view_engine(), view_engine()
    for eng in (kept, fresh):
        eng.load("comment", rows)
    kept.register("first", q, {"su": "B", "list": ["b"], "pre": "b", "n": 2})
    assert "s" in kept.store.table("comment").indexes
    for n, p in enumerate(ONE_PARAMS):
        # the members too: an implicit view's result is read through its rows' condition
        assert set(kept.register(f"v{n}", q, dict(p))) == set(fresh.register(f"v{n}", q,
                                                                              dict(p)))
    for _ in range(200):
        i = r.randint(0, 5_010)
        row = _row(r, i)
        for eng in (kept, fresh):
            eng.ingest("comment", "UPDATE", f"comment:{i}", row)
    for n in range(len(ONE_PARAMS)):
        assert kept.result(f"v{n}") == fresh.result(f"v{n}")
