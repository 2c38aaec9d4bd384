"""The judge and the generators, checked against SurrealDB alone (no view engine needed)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from surrealdb import Duration, RecordID

from tests.engine.codec import case_from_json, case_to_json
from tests.engine.gen import make_case
from tests.engine.judge import Judge, rewrite_auth


def test_judge_keeps_null_distinct_from_none() -> None:
    judge = Judge()
    judge.write("user", "CREATE", RecordID("user", 1), {"a": None, "d": Duration(3_600_000_000_000)})
    assert judge.run("SELECT VALUE [type::of(a), type::of(b), type::of(d)] FROM user") == [
        ["null", "none", "duration"]]
    judge.close()


def test_judge_rewrites_auth_id_to_a_bound_parameter() -> None:
    text, params = rewrite_auth("SELECT * FROM thread WHERE author = $auth.id",
                                {"auth": {"id": RecordID("user", 1)}, "x": 1})
    assert text == "SELECT * FROM thread WHERE author = $__judge_auth_id"
    assert params == {"x": 1, "__judge_auth_id": RecordID("user", 1)}


def test_judge_membership_includes_subquery_and_fetched_rows_but_not_bare_links() -> None:
    judge = Judge()
    judge.write("user", "CREATE", RecordID("user", "a-b"), {"name": "x"})
    judge.write("thread", "CREATE", RecordID("thread", 1), {"author": RecordID("user", "a-b")})
    judge.write("comment", "CREATE", RecordID("comment", 1), {"thread": RecordID("thread", 1)})
    assert judge.members("SELECT * FROM thread") == {"thread:1"}
    assert judge.members("SELECT * FROM thread FETCH author") == {"thread:1", "user:`a-b`"}
    assert judge.members("SELECT id, (SELECT id FROM comment WHERE thread = $parent.id) AS c "
                         "FROM thread") == {"thread:1", "comment:1"}
    assert judge.members("SELECT id, author.name AS n FROM thread") == {"thread:1"}
    judge.close()


def test_judge_answers_a_repeated_read_once_and_afresh_after_any_write() -> None:
    judge = Judge()
    judge.write("thread", "CREATE", RecordID("thread", 1), {"n": 1})
    q, params = "SELECT * FROM thread WHERE n > $min", {"min": 0}
    first = judge.query(q, params, keep_none=True)
    assert judge.query(q, params, keep_none=True) is first  # one answer per read
    assert judge.members(q, params) == {"thread:1"}
    assert judge.query(q, {"min": 5}, keep_none=True) == []  # other parameters, other answer
    judge.write("thread", "CREATE", RecordID("thread", 2), {"n": 2})
    assert judge.members(q, params) == {"thread:1", "thread:2"}
    judge.run("UPDATE thread:1 SET n = 0")  # a write through run() is seen as well
    assert judge.members(q, params) == {"thread:2"}
    assert [r["n"] for r in judge.query(q, params, keep_none=True)] == [2]
    judge.close()


def test_generated_queries_are_valid_surrealql_over_generated_data() -> None:
    nonempty = 0
    for seed in range(150):
        case = make_case(seed)
        judge = Judge()
        for table, rows in case.rows.items():
            judge.load(table, rows)
        for view in case.views:
            nonempty += bool(judge.members(view.surql, view.params))
        for table, op, rid, record in case.writes:
            judge.write(table, op, rid, record)
        for view in case.views:
            judge.members(view.surql, view.params)
        judge.close()
    # the generator must produce views that select something, or the suite proves little
    assert nonempty > 150 * 5 // 2


def test_case_json_round_trips_every_value_type() -> None:
    row = {"id": RecordID("user", "a-b"), "n": None, "i": 1, "f": 1.0, "d": Decimal("2.5"),
           "t": datetime(2024, 1, 1, tzinfo=UTC), "du": Duration(5),
           "l": [RecordID("thread", 1), {"x": "é"}]}
    case = make_case(0)
    case.rows["user"] = [row]
    back = case_from_json(case_to_json(case))
    assert back.rows["user"] == [row]
    assert type(back.rows["user"][0]["f"]) is float and type(back.rows["user"][0]["i"]) is int
    assert back.writes == case.writes and back.views == case.views


def _thread_comments(judge: Judge, surql: str, patched: bool) -> list[tuple[int, list[int]]]:
    run = judge.query if patched else judge.query_unpatched
    return [(row["id"].id, [c["id"].id for c in row["c"]]) for row in run(surql)]


def test_upstream_subquery_order_by_limit_bug_canary() -> None:
    # SurrealDB 3.2.4 drops rows of a correlated ORDER BY + LIMIT subquery for parents after
    # the first, but not every time (2026-11-26: 2 of 120 runs kept some of them, and one
    # full-suite run got the whole right answer), so one run proves nothing either way. The judge works around it
    # (array::slice of the ordered subquery). If this canary fails on its last assertion,
    # upstream fixed the bug: drop the workaround in judge.py.
    judge = Judge()
    judge.load("thread", [{"id": RecordID("thread", i)} for i in range(1, 5)])
    judge.load("comment", [{"id": RecordID("comment", i), "thread": RecordID("thread", 1 + i % 4),
                            "n": i} for i in range(1, 13)])
    surql = ("SELECT id, (SELECT id, n FROM comment WHERE thread = $parent.id "
             "ORDER BY n DESC LIMIT 2) AS c FROM thread")
    correct = [(1, [12, 8]), (2, [9, 5]), (3, [10, 6]), (4, [11, 7])]
    assert _thread_comments(judge, surql, patched=True) == correct
    unpatched = [_thread_comments(judge, surql, patched=False) for _ in range(20)]
    for got in unpatched:
        # the bug only drops rows: each parent keeps a non-empty prefix of its right answer
        assert [t for t, _ in got] == [t for t, _ in correct], got
        for (_, cs), (_, want) in zip(got, correct):
            assert cs and cs == want[:len(cs)], got
    assert any(got != correct for got in unpatched), "upstream fixed the bug: drop the workaround"
    judge.close()


def test_subquery_rewrite_keeps_top_level_and_strings_untouched() -> None:
    from tests.engine.judge import avoid_subquery_limit_bug

    top = "SELECT * FROM thread WHERE title = '(SELECT x ORDER BY y LIMIT 2)' ORDER BY a LIMIT 3"
    assert avoid_subquery_limit_bug(top) == top
    nested = ("SELECT id, (SELECT id, (SELECT * FROM user WHERE id = $parent.author ORDER BY name "
              "LIMIT 1)[0] AS w FROM comment WHERE thread = $parent.id ORDER BY n DESC LIMIT 2 "
              "START 1 FETCH author) AS c FROM thread")
    assert avoid_subquery_limit_bug(nested) == (
        "SELECT id, array::slice((SELECT id, array::slice((SELECT * FROM user WHERE id = "
        "$parent.author ORDER BY name ), 0, 1)[0] AS w FROM comment WHERE thread = $parent.id "
        "ORDER BY n DESC   FETCH author), 1, 3) AS c FROM thread")
