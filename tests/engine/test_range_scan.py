"""Range conjuncts narrow a new view's candidates from the indexes (engine.rangescan):
``votes >= $lo AND votes < $hi`` on the row's own field, ``thread.score <= $max`` through
a record link (engine.linkscan). Checked against SurrealDB after every random write (values,
order, NONE vs NULL, ties, ``delta.updated``); views registered after writes against a
fresh engine; and the candidates a registration evaluates bounded by the rows in range."""

from __future__ import annotations

import random
from typing import Any

import pytest
from surrealdb import RecordID

from tests.engine.codec import Case, View
from tests.engine.gen import linked_rows_and_writes
from tests.engine.runner import engine_api, run_case

VIEWS = [
    # own range on a window, a range through the link
    "SELECT id, votes FROM comment WHERE thread.score <= $p0 AND votes >= $p2 "
    "ORDER BY votes DESC, id LIMIT 3",
    # ranges and a list through one link, an own upper bound, no window
    "SELECT *, thread.status AS thread_status FROM comment WHERE thread.score > $p0 AND "
    "thread.category IN $p1 AND votes < $p3",
    # own range only, no link: an implicit view
    "SELECT id, votes FROM comment WHERE votes >= $p2 AND votes < $p3",
    # the constant on the left, a strict bound through the link
    "SELECT id FROM comment WHERE $p0 >= thread.score AND thread.score > $p2",
    # products with factors (a float one too), two fields of the row, a link
    "SELECT id, votes FROM comment WHERE votes * 2 > $p2 AND 3 * votes <= $p3 AND "
    "thread.score < $p0 ORDER BY votes DESC, id LIMIT 4",
    "SELECT id FROM comment WHERE votes * 2.5 >= $p2 AND id > 3 AND votes < 4",
    # a grouped shape: its groups are filled from the narrowed rows
    "SELECT count() AS n, math::max(votes) AS top FROM comment WHERE votes * 2 >= $p2 AND "
    "votes < $p3 GROUP ALL",
]

PARAMS: list[dict[str, Any]] = [
    {"p0": 5, "p1": ["a"], "p2": 1, "p3": 3},
    {"p0": 2.5, "p1": ["b", "c"], "p2": 0, "p3": 4},
    {"p0": -1, "p1": ["a", "b"], "p2": 5, "p3": 1},  # empty ranges
    {"p0": 9, "p1": ["a", None], "p2": 1.5, "p3": 2.5},
    {"p0": "5", "p1": ["c"], "p2": None, "p3": "x"},  # no number: every row stays
    {"p0": 2**60, "p1": ["a", "b", "c"], "p2": -(2**60), "p3": 2**60},
    {"p0": 7, "p1": ["b"], "p2": 4.5, "p3": 9.0},
]


def _value(r: random.Random, hi: int) -> Any:
    k = r.random()
    if k < 0.08:
        return None  # NULL
    if k < 0.16:
        return "absent"  # NONE: the key is left out
    if k < 0.26:
        return r.randint(0, hi) + 0.5
    if k < 0.3:
        return str(r.randint(0, hi))
    if k < 0.33:
        return 2**60
    return r.randint(0, hi)  # few values: ties


def _case(seed: int, surql: str) -> Case:
    r = random.Random(seed)

    def thread(i: int) -> dict[str, Any]:
        row: dict[str, Any] = {"id": RecordID("thread", i),
                               "status": r.choice(["open", "closed"])}
        for field, v in (("score", _value(r, 9)), ("category", r.choice(["a", "b", "c", 1, None,
                                                                            "absent"]))):
            if v != "absent":
                row[field] = v
        return row

    def comment(i: int) -> dict[str, Any]:
        row: dict[str, Any] = {"id": RecordID("comment", i)}
        v = _value(r, 5)
        if v != "absent":
            row["votes"] = v
        k = r.random()
        if k < 0.8:
            row["thread"] = RecordID("thread", r.randint(0, 7))  # 6 and 7 may not exist
        elif k < 0.87:
            row["thread"] = None
        elif k < 0.93:
            row["thread"] = [RecordID("thread", r.randint(0, 5))]
        return row

    rows, writes = linked_rows_and_writes(r, thread, comment, 16)
    return Case(rows=rows, views=[View(surql, dict(p)) for p in PARAMS], writes=writes,
                note=f"range {seed}: {surql}", check_updated=True)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("surql", VIEWS)
def test_views_with_range_conjuncts_agree_with_surrealdb(surql: str, seed: int) -> None:
    mismatch = run_case(_case(seed, surql), check_updated=True)
    assert mismatch is None, str(mismatch)


def _records(case: Case, final: bool) -> dict[str, dict[str, dict[str, Any]]]:
    """The case's rows by table and id, after its writes when ``final``."""
    out = {t: {str(row["id"]): row for row in rows} for t, rows in case.rows.items()}
    if final:
        for table, op, rid, record in case.writes:
            if op == "DELETE":
                out[table].pop(str(rid), None)
            else:
                assert record is not None
                out[table][str(rid)] = record
    return out


@pytest.mark.parametrize("seed", range(4))
def test_views_registered_after_writes_equal_a_fresh_engines(seed: int) -> None:
    """The sorted keys and the dangling links are kept per table until its next write: a
    view registered after writes (views registered before them filled those) must see
    the rows as they are now."""
    view_engine, _ = engine_api()
    case = _case(seed, VIEWS[0])
    old = view_engine()
    for table, rows in _records(case, False).items():
        old.load(table, rows.values())
    for n, (surql, p) in enumerate((s, p) for s in VIEWS for p in PARAMS[:3]):
        old.register(f"before{n}", surql, p)
    for table, op, rid, record in case.writes:
        old.ingest(table, op, str(rid), record)
    fresh = view_engine()
    for table, rows in _records(case, True).items():
        fresh.load(table, rows.values())
    for n, (surql, p) in enumerate((s, p) for s in VIEWS for p in PARAMS[3:]):
        assert old.register(f"after{n}", surql, p) == fresh.register(f"after{n}", surql, p)
        assert old.result(f"after{n}") == fresh.result(f"after{n}")


def _big() -> Any:
    view_engine, _ = engine_api()
    eng = view_engine()
    eng.load("thread", [{"id": RecordID("thread", i), "score": i % 100, "category": f"k{i % 4}"}
                        for i in range(400)])
    eng.load("comment", [{"id": RecordID("comment", i), "thread": RecordID("thread", i % 400),
                          "votes": i % 1000} for i in range(8_000)])
    return eng


def test_an_own_range_evaluates_only_the_rows_in_it() -> None:
    """``votes >= $lo AND votes < $hi`` over 8,000 comments: the candidates are the 80
    rows in range (every comment was evaluated before)."""
    from engine.membership import range_narrow

    eng = _big()
    got = eng.register("v", "SELECT id FROM comment WHERE votes >= $lo AND votes < $hi",
                       {"lo": 10, "hi": 20})
    assert len(got) == 80
    cands = range_narrow(eng.store, eng.views["v"], None)
    assert cands is not None and len(list(cands)) == 80


def test_a_range_through_a_link_evaluates_only_the_rows_linking_to_records_in_it() -> None:
    """``thread.score < $max AND thread.category = $c``: the comments of the 400 threads'
    20 passing ones, 400 rows, not 8,000."""
    from engine.linkscan import link_candidates

    eng = _big()
    q = ("SELECT id, votes FROM comment WHERE thread.score < $max AND thread.category = $c "
         "ORDER BY votes DESC, id LIMIT 5")
    eng.register("v", q, {"max": 20, "c": "k1"})
    circuit = next(iter(eng.circuits.values()))
    mat = eng.views["v"]
    cands = link_candidates(eng.store, "comment", circuit.plan.q.where, mat.S)
    # threads 1, 5, ..., 17 and 101, ... are k1; scores below 20: 5 of every 100 threads
    assert cands is not None and len(cands) == 20 * 5 * 4
    eng.register("w", q.replace(" AND thread.category = $c", ""), {"max": 2})
    mat = eng.views["w"]
    circuit = mat.circuit
    cands = link_candidates(eng.store, "comment", circuit.plan.q.where, mat.S)
    assert cands is not None and len(cands) == 2 * 4 * 20  # scores 0 and 1


def test_a_product_range_evaluates_only_the_rows_in_it() -> None:
    """``votes * 2 > $x AND votes * 2 <= $y`` (the generator's where-expr) over 8,000
    comments: the candidates are the rows whose votes pass, 80 of them, and those at the
    edges of the bounds widened by one (votes 8 to 21: 112)."""
    from engine.membership import range_narrow

    eng = _big()
    q = ("SELECT id, votes FROM comment WHERE votes * 2 > $x AND 2 * votes <= $y "
         "ORDER BY votes DESC, id LIMIT 5")
    eng.register("v", q, {"x": 19, "y": 39})  # votes 10 to 19
    cands = range_narrow(eng.store, eng.views["v"], None)
    assert cands is not None and len(list(cands)) == 112
    assert [r["votes"] for r in eng.result("v")] == [19] * 5
