"""Many materialisations of one shape: shared projected rows and the range/membership index.

Views of one shape with different constants share one projection of each row (subqueries and
link reads run once per row, whatever the number of views) and are reached through an index of
their constants (equality buckets, intervals over SurrealDB's value order, array membership).
These cases hold that path to SurrealDB's answer after every write (``runner.run_case``: members,
exact deltas, result rows, ``delta.updated`` naming every member whose content changed, and
``ingest_batch`` of the whole sequence equal to feeding it one by one), with constants at
boundaries (equal to stored values across int/float/decimal), of mixed kinds, NULL and NONE.
"""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pytest
from surrealdb import RecordID

from tests.engine.codec import Case, View, dump_case
from tests.engine.gen import NUMBERS, TAGS, make_rows, make_writes
from tests.engine.runner import engine_api, run_case

SUB = "(SELECT id, votes FROM comment WHERE thread = $parent.id ORDER BY votes DESC LIMIT 2)"
SHAPES = [
    f"SELECT *, {SUB} AS cs FROM thread WHERE score > $c",
    "SELECT id, score FROM thread WHERE score >= $c",
    "SELECT * FROM thread WHERE score < $c",
    ("SELECT id, (SELECT id FROM comment WHERE thread = $parent.id) AS cs FROM thread "
     "WHERE $c <= score"),
    ("SELECT id, score, (SELECT id, body FROM comment WHERE thread = $parent.id "
     "ORDER BY id LIMIT 1) AS c1 FROM thread WHERE score >= $c AND score < $d"),
    "SELECT id, tags FROM thread WHERE tags CONTAINS $c",
    "SELECT id, tags FROM thread WHERE $c IN tags AND score > $d",
    # a user shown under several threads: members held by several rows
    "SELECT *, author.* AS au FROM thread WHERE score > $c",
    ("SELECT id, (SELECT id FROM comment WHERE author = $parent.author) AS same FROM thread "
     "WHERE score <= $c"),
    # the projection reads a parameter: one projection group per value of $d
    ("SELECT *, (SELECT id, votes FROM comment WHERE thread = $parent.id AND votes > $d "
     "ORDER BY votes DESC LIMIT 2) AS cs FROM thread WHERE score > $c"),
    "SELECT id, title FROM thread WHERE status = $d AND score > $c",
    # a window over a range: explicit materialisations sharing projected rows
    f"SELECT *, {SUB} AS cs FROM thread WHERE score > $c ORDER BY score DESC LIMIT 2",
]
# boundaries: values equal across int/float/decimal, the stored kinds' neighbours, NULL
CONSTANTS: list[Any] = NUMBERS + [Decimal("2.50"), 1e9, -1e9, "b", "alpha", "", True, None,
                                  RecordID("user", 1)]
ABSENT = object()  # leave the parameter out: it is NONE


def _constant(r: random.Random, surql: str) -> Any:
    if "tags" in surql:
        return r.choice(TAGS + ["zz", 1, None])
    return r.choice(CONSTANTS + [ABSENT])


def make_shared_case(seed: int, views: int = 7, writes: int = 30) -> Case:
    """Several views of one shape over constants drawn from a small pool (so several views
    share one materialisation and several share the projected rows)."""
    r = random.Random(seed)
    rows = make_rows(r)
    surql = SHAPES[seed % len(SHAPES)]
    family = []
    for _ in range(views):
        params: dict[str, Any] = {}
        for name in ("c", "d"):
            if f"${name}" not in surql:
                continue
            if name == "d" and "status" in surql:
                value: Any = r.choice(["open", "closed", "Open"])
            elif name == "d" and "votes" in surql:
                value = r.choice([0, 1, 2.5, None])
            else:
                value = _constant(r, surql)
            if value is not ABSENT:
                params[name] = value
        family.append(View(surql, params))
    return Case(rows=rows, views=family, writes=make_writes(r, rows, writes),
                note=f"shared seed {seed}", check_updated=True)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(70_000, 70_120))
def test_views_sharing_projected_rows_agree_with_surrealdb(seed: int) -> None:
    case = make_shared_case(seed)
    mismatch = run_case(case, check_updated=True)
    assert mismatch is None, f"seed {seed}: {mismatch}\n{dump_case(case)}"


def _engine() -> Any:
    view_engine, _ = engine_api()
    e = view_engine()
    e.load("thread", [{"id": RecordID("thread", i), "score": s}
                      for i, s in enumerate([1, 2.0, Decimal(3), "x", None], start=1)])
    e.load("comment", [{"id": RecordID("comment", i), "thread": RecordID("thread", 1 + i % 5),
                        "votes": i} for i in range(10)])
    return e


def test_a_subquery_change_reaches_exactly_the_views_showing_the_row() -> None:
    e = _engine()
    q = f"SELECT *, {SUB} AS cs FROM thread WHERE score > $c"
    for c in (0, 1, 2, 3, "a", None):
        e.register(f"v{c}", q, {"c": c})
    # thread:3 (score 3dec) is shown where the constant sorts below 3: 0, 1, 2 and NULL
    d = e.ingest("comment", "UPDATE", "comment:2",
                 {"id": RecordID("comment", 2), "thread": RecordID("thread", 3), "votes": 99})
    assert set(d) == {"v0", "v1", "v2", "vNone"}
    assert all(x.updated == {"thread:3", "comment:2"} for x in d.values())
    # one projection of thread:3 serves every view: one group, each shown row once
    (circuit,) = e.circuits.values()
    (proj,) = circuit.projs.values()
    assert sorted(proj.outs) == ["thread:1", "thread:2", "thread:3", "thread:4"]


def test_a_row_crossing_constants_enters_and_leaves_the_right_views() -> None:
    e = _engine()
    q = "SELECT id FROM thread WHERE score >= $lo AND score < $hi"
    bounds = [(0, 2), (2, 3), (2.0, Decimal(3)), (3, "a"), (None, 1), (1, 1)]
    for lo, hi in bounds:
        e.register(f"{lo}-{hi}", q, {"lo": lo, "hi": hi})
    before = {v: e.members(v) for v in e.view_ids()}
    d = e.ingest("thread", "UPDATE", "thread:1", {"id": RecordID("thread", 1), "score": 2})
    after = {v: e.members(v) for v in e.view_ids()}
    changed = {v for v in after if after[v] != before[v]}
    assert set(d) == changed == {"0-2", "2-3", "2.0-3"}
    assert d["0-2"].removed == {"thread:1"} and d["2-3"].added == {"thread:1"}
