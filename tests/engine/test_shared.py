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

from engine.join import jkey
from tests.engine.codec import Case, View, dump_case
from tests.engine.gen import NUMBERS, STRINGS, TAGS, make_rows, make_writes
from tests.engine.runner import engine_api, plain, run_case

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
    # a window over array membership (rows whose tags hold nothing reach no materialisation)
    "SELECT id, score, tags FROM thread WHERE tags CONTAINS $c ORDER BY score DESC LIMIT 2",
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


def test_deltas_reach_the_views_registered_and_not_those_unregistered_since() -> None:
    # the views of a list of materialisations are kept between flushes: a view registered
    # on one of them, or unregistered, must be seen by the next change
    e = _engine()
    q = f"SELECT *, {SUB} AS cs FROM thread WHERE score > $c"
    for c in (0, 1, 2):
        e.register(f"v{c}", q, {"c": c})
    e.register("x0", q, {"c": 0})  # shares v0's materialisation
    vote = {"id": RecordID("comment", 2), "thread": RecordID("thread", 3), "votes": 7}
    assert set(e.ingest("comment", "UPDATE", "comment:2", vote)) == {"v0", "v1", "v2", "x0"}
    e.unregister("x0")  # the materialisation stays, with one view fewer
    vote = {**vote, "votes": 8}
    assert set(e.ingest("comment", "UPDATE", "comment:2", vote)) == {"v0", "v1", "v2"}
    e.register("w1", q, {"c": 1})  # shares v1's materialisation
    vote = {**vote, "votes": 9}
    d = e.ingest("comment", "UPDATE", "comment:2", vote)
    assert set(d) == {"v0", "v1", "v2", "w1"}
    assert d["w1"].updated == {"thread:3", "comment:2"}


@pytest.mark.parametrize("order", ["", " ORDER BY score DESC LIMIT 2"])
def test_contains_over_a_value_that_holds_nothing(order: str) -> None:
    # NONE, NULL, numbers and links contain nothing; strings, arrays and objects may
    view_engine, _ = engine_api()
    e = view_engine()
    e.load("thread", [{"id": RecordID("thread", 1), "score": 1, "tags": 5},
                      {"id": RecordID("thread", 2), "score": 2, "tags": "xa"},
                      {"id": RecordID("thread", 3), "score": 3}])
    q = f"SELECT id, score FROM thread WHERE tags CONTAINS $t{order}"
    assert e.register("a", q, {"t": "a"}) == {"thread:2"}
    assert e.register("n", q, {"t": None}) == set()
    d = e.ingest("thread", "UPDATE", "thread:1",
                 {"id": RecordID("thread", 1), "score": 1, "tags": ["a", None]})
    assert d["a"].added == {"thread:1"} and d["n"].added == {"thread:1"}
    d = e.ingest("thread", "UPDATE", "thread:2",
                 {"id": RecordID("thread", 2), "score": 2, "tags": None})
    assert set(d) == {"a"} and d["a"].removed == {"thread:2"}
    d = e.ingest("thread", "CREATE", "thread:4",
                 {"id": RecordID("thread", 4), "score": 4, "tags": RecordID("tag", "a")})
    assert d == {}
    assert e.members("a") == {"thread:1"} and e.members("n") == {"thread:1"}


# Correlated subqueries projected for the rows a new view shows when it registers over stored
# rows: keyed by the parent's id or by another field of it, with the rest of the WHERE clause,
# windows, an index into the result, several sort keys, two subqueries, a link in the
# subquery's WHERE.
BATCH_SHAPES = [
    SHAPES[0],
    ("SELECT id, (SELECT id, votes, created_at FROM comment WHERE author = $parent.author "
     "ORDER BY votes DESC, created_at LIMIT 3) AS by_author FROM thread WHERE score >= $c"),
    ("SELECT *, (SELECT id, votes FROM comment WHERE thread = $parent.id AND votes >= 1 "
     "ORDER BY votes START 1 LIMIT 2) AS mid FROM thread WHERE score < $c"),
    ("SELECT id, (SELECT id, votes FROM comment WHERE $parent.id = thread "
     "ORDER BY votes DESC LIMIT 1)[0] AS top FROM thread WHERE score > $c"),
    ("SELECT id, (SELECT id, body FROM comment WHERE thread = $parent.id ORDER BY body) AS "
     "cs, (SELECT id FROM comment WHERE author = $parent.author ORDER BY id LIMIT 2) AS au "
     "FROM thread WHERE score > $c"),
    ("SELECT id, (SELECT id, votes FROM comment WHERE thread = $parent.id AND author.age > 20 "
     "ORDER BY votes LIMIT 2) AS old FROM thread WHERE score > $c"),
]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("shape", range(len(BATCH_SHAPES)))
def test_views_over_stored_rows_project_their_subqueries_as_surrealdb(shape: int,
                                                                     seed: int) -> None:
    # views registered over stored rows (the first builds the shape's projection, the others
    # share it), then writes: members, deltas and rows as SurrealDB has them
    r = random.Random(71_000 + 10 * shape + seed)
    rows = make_rows(r)
    surql = BATCH_SHAPES[shape]
    views = [View(surql, {"c": c}) for c in (-100, r.choice(NUMBERS), r.choice(NUMBERS), 100)]
    case = Case(rows=rows, views=views, writes=make_writes(r, rows, 20),
                note=f"stored rows, subquery shape {shape} seed {seed}", check_updated=True)
    mismatch = run_case(case, check_updated=True)
    assert mismatch is None, f"{mismatch}\n{dump_case(case)}"


def test_registering_over_stored_rows_projects_what_feeding_them_projects() -> None:
    # the same shape built by a view registered over stored rows and by one registered
    # first and fed the rows one by one: the same outputs, member trees and dependencies
    view_engine, _ = engine_api()
    r = random.Random(7)
    rows = make_rows(r)
    surql = BATCH_SHAPES[1]
    built = view_engine()
    for table, rs in rows.items():
        built.load(table, rs)
    built.register("v", surql, {"c": -100})
    fed = view_engine()
    fed.register("v", surql, {"c": -100})
    for table, rs in rows.items():
        for row in rs:
            fed.ingest(table, "CREATE", str(row["id"]), row)
    ((pb,),) = [c.projs.values() for c in built.circuits.values()]
    ((pf,),) = [c.projs.values() for c in fed.circuits.values()]
    assert len(pb.outs) > 2, "the case should show several rows"
    assert pb.outs == pf.outs
    assert pb.trees == pf.trees
    assert plain(pb.pdeps) == plain(pf.pdeps)
    assert built.members("v") == fed.members("v")


# Correlated and uncorrelated subqueries whose WHERE follows a record link without reading
# $parent (`author.age > $a`): the join keeps each inner row in its group by what the link
# reads, and a write to the linked record (a user, a thread) moves the rows that read it.
LINKED_SHAPES = [
    ("SELECT id, (SELECT id, votes FROM comment WHERE thread = $parent.id AND author.age > $a "
     "ORDER BY votes DESC LIMIT 2) AS cs FROM thread WHERE score > $c"),
    # the inner table is the parent's: a thread both shows and is read through its link
    ("SELECT id, status, (SELECT id, score FROM thread WHERE status = $parent.status AND "
     "author.age >= $a ORDER BY score DESC LIMIT 2) AS peers FROM thread WHERE score > $c"),
    # no LIMIT, a residual reading the parent, two hops
    ("SELECT id, (SELECT id, votes, created_at FROM comment WHERE author = $parent.author AND "
     "thread.score < $parent.score AND thread.author.active = true ORDER BY votes) AS cs "
     "FROM thread WHERE score > $c"),
    # uncorrelated
    ("SELECT id, (SELECT id FROM comment WHERE thread.status = $a ORDER BY id LIMIT 3) AS cs "
     "FROM user WHERE age > $c"),
    # a bound from the parent on the order's field, an object path that is no link
    ("SELECT id, (SELECT id, votes FROM comment WHERE thread = $parent.id AND "
     "votes > $parent.meta.pri AND author.profile.city != $a ORDER BY votes LIMIT 2) AS cs "
     "FROM thread WHERE score > $c"),
    # a residual reading the parent on a field that is not the order's: a written comment
    # reaches only the windows whose residual it passes
    ("SELECT id, (SELECT id, votes, created_at FROM comment WHERE author = $parent.author AND "
     "votes < $parent.score ORDER BY created_at DESC LIMIT 2) AS cs FROM thread WHERE score > $c"),
    ("SELECT id, (SELECT id, body, votes FROM comment WHERE thread.status = $parent.status AND "
     "body != $parent.title ORDER BY votes, body) AS cs FROM thread WHERE score > $c"),
]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("shape", range(len(LINKED_SHAPES)))
def test_subqueries_filtering_through_links_agree_with_surrealdb(shape: int, seed: int
                                                                 ) -> None:
    surql = LINKED_SHAPES[shape]

    def a(r: random.Random) -> Any:
        return (r.choice(["open", "closed", 1]) if "status = $a" in surql else
                r.choice(STRINGS[:4]) if "city" in surql else r.choice(NUMBERS))

    _three_views_forty_writes(surql, 72_000 + 10 * shape + seed, a,
                              f"linked subquery shape {shape} seed {seed}")


def _three_views_forty_writes(surql: str, seed: int, a: Any, note: str) -> None:
    """Three views of ``surql`` (``$c`` a boundary or a stored number, ``$a`` drawn by
    ``a(r)``) over random rows, then 40 random writes, against SurrealDB with every
    ``delta.updated`` checked."""
    r = random.Random(seed)
    rows = make_rows(r)
    views = []
    for _ in range(3):
        va = a(r)  # drawn first: the cases stay those the seeds have named so far
        views.append(View(surql, {"c": r.choice([-100, *NUMBERS]), "a": va}))
    case = Case(rows=rows, views=views, writes=make_writes(r, rows, 40), note=note,
                check_updated=True)
    mismatch = run_case(case, check_updated=True)
    assert mismatch is None, f"{mismatch}\n{dump_case(case)}"


# Subqueries over the parent's own table: a thread is a top-level row and a member of other
# threads' (and its own) subquery rows. As a VALUE row it shows only a value (its id, its
# score), and its content, for `delta.updated`, is still the dict it shows at the top level:
# a write to the thread's own fields names it, whatever VALUE rows show of it elsewhere.
SELF_SHAPES = [
    ("SELECT id, status, (SELECT VALUE id FROM thread WHERE status = $parent.status AND "
     "author.age >= $a ORDER BY score DESC LIMIT 2) AS peers FROM thread WHERE score > $c"),
    ("SELECT id, status, (SELECT VALUE id FROM thread WHERE status = $parent.status AND "
     "author.age >= $a ORDER BY score DESC) AS peers FROM thread WHERE score > $c"),
    ("SELECT id, status, (SELECT VALUE score FROM thread WHERE status = $parent.status "
     "ORDER BY score DESC LIMIT 3) AS peers FROM thread WHERE score > $c"),
    ("SELECT id, title, (SELECT VALUE id FROM thread WHERE author = $parent.author) AS same "
     "FROM thread WHERE score > $c"),
    ("SELECT id, (SELECT VALUE id FROM thread WHERE author.age >= $a ORDER BY score DESC "
     "LIMIT 2) AS top FROM thread WHERE score > $c"),
    ("SELECT id, status, (SELECT VALUE id FROM thread WHERE status = $parent.status "
     "ORDER BY score DESC LIMIT 2)[0] AS first FROM thread WHERE score > $c"),
    # the same rows as dicts, with and without LIMIT (each member a dict of its own)
    ("SELECT id, status, (SELECT id, score FROM thread WHERE status = $parent.status "
     "ORDER BY score) AS peers FROM thread WHERE score > $c"),
    # a VALUE subquery and a dict of the same records in one row
    ("SELECT id, author.* AS au, (SELECT VALUE id FROM user WHERE age >= $a ORDER BY age "
     "LIMIT 3) AS old FROM thread WHERE score > $c"),
]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("shape", range(len(SELF_SHAPES)))
def test_subqueries_over_the_parents_own_table_agree_with_surrealdb(shape: int, seed: int
                                                                   ) -> None:
    _three_views_forty_writes(SELF_SHAPES[shape], 73_000 + 10 * shape + seed,
                              lambda r: r.choice(NUMBERS),
                              f"self subquery shape {shape} seed {seed}")


def test_a_linked_record_write_moves_only_the_rows_that_read_it() -> None:
    view_engine, _ = engine_api()
    e = view_engine()
    e.load("user", [{"id": RecordID("user", i), "age": 30} for i in range(10)])
    e.load("thread", [{"id": RecordID("thread", i), "score": i} for i in range(10)])
    # the comments of thread:t are written by user:t
    e.load("comment", [{"id": RecordID("comment", i), "thread": RecordID("thread", i % 10),
                        "author": RecordID("user", i % 10), "votes": i} for i in range(100)])
    e.register("v", "SELECT id, (SELECT id, votes FROM comment WHERE thread = $parent.id AND "
                    "author.age > 20 ORDER BY votes DESC LIMIT 2) AS cs FROM thread", {})
    ((j,),) = [list(js) for js in e.store.joins.values()]
    # the linked filter read no $parent: every window is one value, computed once
    assert all(w.value is not None for g in j.groups.values() for w in g.wins.values())
    reached = j.reached
    hot = jkey(RecordID("thread", 3))
    others = {k: id(w.value) for k, g in j.groups.items() if k != hot for w in g.wins.values()}
    d = e.ingest("user", "UPDATE", "user:3", {"id": RecordID("user", 3), "age": 10})
    assert set(d["v"].removed) == {"comment:93", "comment:83"}
    assert set(d["v"].added) == set()  # thread:3 has no comment by another author
    # thread:3's window, no other: edited as each of its comments leaves the group (the
    # next one pulled in leaves in turn), at most once per comment
    assert 1 <= j.reached - reached <= 10
    reached = j.reached
    assert {k: id(w.value) for k, g in j.groups.items() if k != hot
            for w in g.wins.values()} == others  # the other windows kept their value
    row = [r for r in e.result("v") if r["id"] == RecordID("thread", 3)][0]
    assert row["cs"] == []
    d = e.ingest("user", "UPDATE", "user:4", {"id": RecordID("user", 4), "age": 31})
    assert "v" not in d  # still above 20: no row moved
    assert j.reached == reached
