"""Lazy rows of grouped shapes (engine.lazy ``_grouped_spec``): a new grouped view whose keys
and aggregate arguments are fields of the row fills its groups from the stored rows without
projecting them; a write to a row projects it first, so the flush moves its old contribution.

Judges: SurrealDB itself (the grouped cases of ``test_aggregates`` with every row lazy:
number kinds tying across groups, NONE and strings, best rows retracted); the same engine
with laziness off, write by write and in batches, with views registered between writes and
idle completion; white-box checks that registration projects nothing and a write projects
only its own row.
"""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pytest
from surrealdb import RecordID

import engine.lazy
from tests.engine.codec import Case, View
from tests.engine.runner import engine_api, run_case
from tests.engine.test_aggregates import ROWS, VIEWS, WRITES, _scored_case
from tests.engine.test_lazy import eager_and_lazy, judge


@pytest.fixture
def lazy_always(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine.lazy, "LAZY_MIN", 1)


def _shown(e: Any, view: str) -> str:
    """A view's result as text (a mean over no number is NaN, which equals nothing)."""
    return repr(e.result(view))


def _lazy_count(e: Any) -> int:
    return sum(len(p.lazy) for c in e.circuits.values() for p in c.projs.values())


@pytest.mark.parametrize("surql", VIEWS)
def test_grouped_views_with_lazy_rows_agree_with_surrealdb(surql: str,
                                                           lazy_always: None) -> None:
    case = Case(rows=ROWS, views=[View(surql, {})], writes=WRITES, note=surql)
    mismatch = run_case(case)
    assert mismatch is None, str(mismatch)


@pytest.mark.parametrize("seed", range(8))
def test_lazy_min_max_over_ties_across_number_kinds_agree_with_surrealdb(
        seed: int, lazy_always: None) -> None:
    judge(_scored_case(seed), seed)


def test_the_judged_grouped_cases_have_lazy_rows(lazy_always: None) -> None:
    """The cases above are about laziness: registration leaves the own-field shapes' rows
    lazy (and only those: keys computed or read through links are projected)."""
    view_engine, _ = engine_api()
    lazy_views = []
    for q in VIEWS:
        e = view_engine()
        for table, rs in ROWS.items():
            e.load(table, [dict(x) for x in rs])
        e.register("v", q, {})
        if _lazy_count(e):
            lazy_views.append(q)
    assert "SELECT status, count() AS n FROM thread GROUP BY status" in lazy_views
    assert "SELECT kind, count() AS n FROM thread GROUP BY kind" in lazy_views
    assert not any("string::len" in q or "author.name" in q or "$parent" in q
                   for q in lazy_views)
    assert len(lazy_views) >= 6


# ------------------------------------------------------------------ lazy against eager

NUMS = [0, 1, 1.0, Decimal("1"), 2, 2.5, -3, 7, 7.0, Decimal("7"), 100, "x", None, True]

GROUPED = [
    ("SELECT count() AS n, math::max(votes) AS hi FROM comment GROUP ALL", {}),
    ("SELECT count() AS n, math::min(votes) AS lo, math::sum(votes) AS s FROM comment "
     "WHERE kind = $k GROUP ALL", {"k": "a"}),
    ("SELECT count() AS n, math::min(votes) AS lo, math::sum(votes) AS s FROM comment "
     "WHERE kind = $k GROUP ALL", {"k": "b"}),
    ("SELECT kind, count() AS n, math::mean(votes) AS m, math::max(votes) AS hi "
     "FROM comment GROUP BY kind", {}),
    ("SELECT bucket, kind, count() AS n FROM comment WHERE votes > $v GROUP BY bucket, kind "
     "ORDER BY n DESC", {"v": 1}),
    ("SELECT count(), count(votes) AS truthy FROM comment WHERE votes >= $v GROUP ALL",
     {"v": 2}),
    # not lazy (a computed key): beside the lazy ones, as eager as ever
    ("SELECT string::len(kind) AS k, count() AS n FROM comment GROUP BY k", {}),
]


def _comment(r: random.Random, i: int) -> dict[str, Any]:
    row: dict[str, Any] = {"id": RecordID("comment", i if i % 5 else f"c{i}"),
                           "kind": r.choice(["a", "b", "c"]),
                           "bucket": r.choice([1, 1.0, Decimal(1), 2, "z"]),
                           "votes": r.choice(NUMS)}
    if r.random() < 0.1:
        del row["votes"]
    return row


def _odd(r: random.Random) -> Any:
    """A shown value a lazy row could not hold (an object or array), or an odd number."""
    return r.choice([{"x": 1}, [1, 2], {"id": RecordID("user", 1)}, float("nan"),
                     float("-inf"), RecordID("thread", 1)])


def _writes(r: random.Random, n: int, size: int) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for _ in range(n):
        i = r.randrange(size + 20)
        row = _comment(r, i)
        if r.random() < 0.03:
            row[r.choice(["votes", "kind", "bucket"])] = _odd(r)
        op = "DELETE" if r.random() < 0.15 else "UPDATE"
        rid = f"comment:{i}" if i % 5 else f"comment:c{i}"
        out.append(("comment", op, rid, None if op == "DELETE" else row))
    return out


def _pair(r: random.Random, monkeypatch: pytest.MonkeyPatch, size: int) -> tuple[Any, Any]:
    data = {"comment": [_comment(r, i) for i in range(size)]}
    eager, lazy = eager_and_lazy(data, [(f"v{i}", q, p) for i, (q, p) in enumerate(GROUPED)],
                                 monkeypatch, lazy_min=64)
    for i in range(len(GROUPED)):
        assert eager.members(f"v{i}") == lazy.members(f"v{i}")
        assert _shown(eager, f"v{i}") == _shown(lazy, f"v{i}")
    return eager, lazy


def test_lazy_grouped_rows_give_the_eager_deltas(monkeypatch: pytest.MonkeyPatch) -> None:
    r = random.Random(5)
    eager, lazy = _pair(r, monkeypatch, 1500)
    assert _lazy_count(lazy) >= 1500 and _lazy_count(eager) == 0
    for i, ev in enumerate(_writes(r, 900, 1500)):
        assert eager.ingest(*ev) == lazy.ingest(*ev), f"write {i} {ev}"
    assert _lazy_count(lazy) > 0  # rows no write reached are still lazy
    for i in range(len(GROUPED)):
        assert eager.members(f"v{i}") == lazy.members(f"v{i}")
        assert _shown(eager, f"v{i}") == _shown(lazy, f"v{i}")


@pytest.mark.parametrize("size", [7, 80])
def test_lazy_grouped_rows_give_the_eager_deltas_in_batches(
        size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    r = random.Random(size)
    eager, lazy = _pair(r, monkeypatch, 1000)
    writes = _writes(r, 700, 1000)
    for i in range(0, len(writes), size):
        batch = writes[i:i + size]
        assert eager.ingest_batch(batch) == lazy.ingest_batch(batch), f"batch at {i}"
    for i in range(len(GROUPED)):
        assert _shown(eager, f"v{i}") == _shown(lazy, f"v{i}")


def test_grouped_views_registered_between_writes_and_idle_completion_agree(
        monkeypatch: pytest.MonkeyPatch) -> None:
    r = random.Random(9)
    eager, lazy = _pair(r, monkeypatch, 800)
    writes = _writes(r, 400, 800)
    for step in range(0, 400, 40):
        for ev in writes[step:step + 40]:
            assert eager.ingest(*ev) == lazy.ingest(*ev), ev
        q, _ = GROUPED[1]
        k = r.choice(["a", "b", "c"])
        v = r.randint(-1, 8)
        for e in (eager, lazy):
            e.register(f"n{step}", q, {"k": k})
            e.register(f"m{step}", GROUPED[4][0], {"v": v})
        for name in (f"n{step}", f"m{step}"):
            assert eager.members(name) == lazy.members(name)
            assert _shown(eager, name) == _shown(lazy, name)
        if step == 200:
            lazy.complete(300)  # the shards project lazy rows while idle
    lazy.complete()
    assert _lazy_count(lazy) == 0
    for ev in _writes(r, 100, 800):
        assert eager.ingest(*ev) == lazy.ingest(*ev), ev
    for i in range(len(GROUPED)):
        assert _shown(eager, f"v{i}") == _shown(lazy, f"v{i}")


def test_registration_projects_no_row_and_a_write_projects_its_own(
        lazy_always: None) -> None:
    view_engine, _ = engine_api()
    e = view_engine()
    e.load("comment", [{"id": RecordID("comment", i), "votes": i % 50, "kind": "a"}
                       for i in range(2_000)])
    e.register("v", "SELECT kind, count() AS n, math::max(votes) AS hi FROM comment "
                    "GROUP BY kind", {})
    (proj,) = [p for c in e.circuits.values() for p in c.projs.values()]
    assert not proj.outs and len(proj.lazy) == 2_000
    assert e.result("v") == [{"kind": "a", "n": 2_000, "hi": 49}]
    e.ingest("comment", "UPDATE", "comment:49",
             {"id": RecordID("comment", 49), "votes": 500, "kind": "b"})
    assert set(proj.outs) == {"comment:49"} and len(proj.lazy) == 1_999
    assert e.result("v") == [{"kind": "a", "n": 1_999, "hi": 49},
                             {"kind": "b", "n": 1, "hi": 500}]
    # a shown object may hold members: such a group is projected at registration
    e.ingest("comment", "UPDATE", "comment:7",
             {"id": RecordID("comment", 7), "votes": {"id": RecordID("user", 1)}, "kind": "a"})
    e.register("w", "SELECT count() AS n, math::max(votes) AS hi FROM comment "
                    "WHERE kind = $k GROUP ALL", {"k": "a"})
    assert "comment:7" in e.members("w")
