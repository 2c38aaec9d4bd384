"""Graph traversal (``->edge->table``, ``<-edge<-table``) against SurrealDB.

Edges are rows of a relation table (the judge writes them with RELATE: their ``in`` and
``out`` never change); a traversal is a join over the edge table by ``in`` or ``out``,
kept by the dependency indexes: an edge write re-projects exactly the rows that traversed
from either end, and requalifies the rows whose condition did."""

from __future__ import annotations

import random
from typing import Any

import pytest
from surrealdb import RecordID

from tests.engine.codec import Case, View
from tests.engine.runner import engine_api, run_case


def _u(i: Any, **f: Any) -> dict[str, Any]:
    return {"id": RecordID("user", i), **f}


def _t(i: Any, **f: Any) -> dict[str, Any]:
    return {"id": RecordID("thread", i), **f}


def _l(i: Any, a: Any, b: Any, **f: Any) -> dict[str, Any]:
    return {"id": RecordID("likes", i), "in": RecordID("user", a), "out": RecordID("thread", b),
            **f}


ROWS = {
    "user": [_u(1, name="Ann"), _u(2, name="Bob"), _u(3, name="Cy")],
    "thread": [_t(1, title="one"), _t(2, title="two"), _t(3, title="three")],
    "comment": [],
    "likes": [_l(5, 1, 2, weight=1), _l("a", 1, 3, weight=2), _l(1, 2, 2), _l("b", 1, 1),
              _l(7, 9, 1)],  # user:9 never exists
}

WRITES = [
    ("likes", "CREATE", RecordID("likes", 2), _l(2, 3, 1, weight=5)),
    ("likes", "UPDATE", RecordID("likes", 5), _l(5, 1, 2, weight=9)),  # ends stay
    ("thread", "UPDATE", RecordID("thread", 2), _t(2, title="TWO")),
    ("likes", "DELETE", RecordID("likes", "a"), None),
    ("user", "CREATE", RecordID("user", 9), _u(9, name="Nine")),
    ("likes", "DELETE", RecordID("likes", 1), None),
    ("likes", "DELETE", RecordID("likes", "b"), None),  # the edges first, as the feed
    ("likes", "DELETE", RecordID("likes", 5), None),
    ("user", "DELETE", RecordID("user", 1), None),
]

VIEWS = [
    "SELECT id, ->likes->thread AS liked, ->likes AS edges FROM user",
    "SELECT id, <-likes<-user AS fans, count(<-likes) AS n FROM thread",
    "SELECT id, ->likes->thread.title AS titles, ->likes.weight AS weights FROM user",
    "SELECT id, ->likes->thread.* AS liked FROM user",  # the liked threads are members
    "SELECT id, ->likes->thread<-likes<-user AS peers FROM user",
    "SELECT id FROM user WHERE ->likes->thread CONTAINS thread:2",
    "SELECT id, name FROM user WHERE count(->likes) > 1 ORDER BY name LIMIT 2",
    "SELECT id FROM thread WHERE <-likes<-user.name CONTAINS 'Cy'",
    "SELECT id, (SELECT id, <-likes<-user AS fans FROM thread WHERE id IN $parent.seen) AS t "
    "FROM user",
]


@pytest.mark.parametrize("surql", VIEWS)
def test_traversal_agrees_with_surrealdb_after_every_write(surql: str) -> None:
    rows = dict(ROWS)
    rows["user"] = [dict(u, seen=[RecordID("thread", 1), RecordID("thread", 2)])
                    for u in ROWS["user"]]
    case = Case(rows=rows, views=[View(surql, {})], writes=WRITES, note=surql)
    mismatch = run_case(case)
    assert mismatch is None, str(mismatch)


def test_an_edge_write_reaches_only_the_rows_at_its_ends() -> None:
    """Cost: 2,000 users and 20,000 edges; one new edge re-projects its two ends only."""
    view_engine, _ = engine_api()
    eng = view_engine()
    eng.load("user", [_u(i) for i in range(2_000)])
    eng.load("thread", [_t(i) for i in range(2_000)])
    eng.load("likes", [_l(i, i % 2_000, (i * 7) % 2_000) for i in range(20_000)])
    eng.register("u", "SELECT id, ->likes->thread AS liked FROM user", {})
    eng.register("t", "SELECT id, count(<-likes) AS fans FROM thread", {})
    d = eng.ingest("likes", "CREATE", "likes:99999", _l(99_999, 5, 6))
    assert d["u"].updated == {"user:5"} and d["t"].updated == {"thread:6"}
    liked = next(r for r in eng.result("u") if r["id"] == RecordID("user", 5))["liked"]
    assert liked[-1] == RecordID("thread", 6) and len(liked) == 11


def test_graph_paths_outside_the_supported_forms_are_refused() -> None:
    view_engine, query_rejected = engine_api()
    eng = view_engine()
    for q, word in [
        ("SELECT id, <->likes<->user AS x FROM user", "<->"),
        ("SELECT id, ->?->thread AS x FROM user", "edge table"),
        ("SELECT id, ->(likes WHERE weight > 1)->thread AS x FROM user", "filter"),
        ("SELECT id, author->likes->thread AS x FROM thread", "from a field"),
        ("SELECT ->likes->thread FROM user", "AS"),
    ]:
        with pytest.raises(query_rejected) as info:
            eng.register("v", q, {})
        assert word in str(info.value), (q, str(info.value))


def _far_end_write_cost(likes_per_user: int) -> tuple[int, Any]:
    """(edges read, the view's delta) for one title write to a thread liked by 3 of 50 users
    who each like ``likes_per_user`` threads."""
    from engine import compile as C

    view_engine, _ = engine_api()
    eng = view_engine()
    eng.load("user", [_u(i) for i in range(50)])
    eng.load("thread", [_t(i, title=f"t{i}") for i in range(1_000)])
    likes = [_l(u * 1_000 + k, u, 100 + (u * 37 + k) % 900) for u in range(50)
             for k in range(likes_per_user)]
    likes += [_l(10 ** 6 + u, u, 7) for u in (3, 4, 5)]  # thread:7, liked by 3 users
    eng.load("likes", likes)
    eng.register("u", "SELECT id, ->likes->thread.title AS titles FROM user", {})
    # an edge written at user:3 (and thread:8) drops that record's kept edges only
    eng.ingest("likes", "CREATE", "likes:2000000", _l(2 * 10 ** 6, 3, 8))
    before = C.EDGES_READ[0]
    d = eng.ingest("thread", "UPDATE", "thread:7", _t(7, title="new"))
    for r in eng.result("u"):
        if r["id"] in (RecordID("user", 4), RecordID("user", 5)):
            assert r["titles"][-1] == "new" and len(r["titles"]) == likes_per_user + 1
        if r["id"] == RecordID("user", 3):
            assert r["titles"][-2:] == ["new", "t8"]
    return C.EDGES_READ[0] - before, d["u"]


def test_a_write_at_the_far_end_does_not_read_the_edges_again() -> None:
    # The three users liking thread:7 are projected again; their edges did not change, so
    # the hop's edges kept on the edge table answer (the old code read and sorted each
    # user's edges again: 3 x 11 and 3 x 201 edges)
    few, d = _far_end_write_cost(10)
    many, _ = _far_end_write_cost(200)
    assert d.updated == {"user:3", "user:4", "user:5"}
    assert few == many == 0


def _random_graph_case(r: random.Random) -> Case:
    users = [_u(i, name=r.choice(["Ann", "Bob", "Cy"])) for i in range(5)]
    threads = [_t(i, title=r.choice(["a", "b", None])) for i in range(5)]
    ids: list[Any] = [1, 2, 3, "a", "b", 10, "z"]
    edges: dict[Any, tuple[int, int]] = {}
    for i in r.sample(ids, 4):
        edges[i] = (r.randrange(5), r.randrange(5))
    rows = {"user": users, "thread": threads, "comment": [],
            "likes": [_l(i, a, b, weight=r.randrange(3)) for i, (a, b) in edges.items()]}
    writes: list[Any] = []
    for _ in range(30):
        x = r.random()
        if x < 0.35:
            i = r.randrange(6)
            writes.append(("thread", "UPDATE" if i < 5 else "CREATE", RecordID("thread", i),
                           _t(i, title=r.choice(["a", "b", "c", None]))))
        elif x < 0.55 and edges:
            i = r.choice(list(edges))
            del edges[i]
            writes.append(("likes", "DELETE", RecordID("likes", i), None))
        elif x < 0.85:
            i = r.choice(ids)
            ab = edges.get(i) or (r.randrange(5), r.randrange(6))
            op = "UPDATE" if i in edges else "CREATE"
            edges[i] = ab  # an edge's ends never change (RELATE)
            writes.append(("likes", op, RecordID("likes", i),
                           _l(i, ab[0], ab[1], weight=r.randrange(3))))
        else:
            i = r.randrange(5)
            writes.append(("user", "UPDATE", RecordID("user", i),
                           _u(i, name=r.choice(["Ann", "Bob", "Cy"]))))
    views = [View("SELECT id, ->likes->thread.title AS titles, ->likes->thread AS liked "
                  "FROM user", {}),
             View("SELECT id, <-likes<-user.name AS fans FROM thread", {}),
             View("SELECT id, ->likes->thread<-likes<-user AS peers FROM user", {})]
    return Case(rows=rows, views=views, writes=writes, note="random graph writes")


@pytest.mark.parametrize("seed", range(6))
def test_graph_paths_under_random_writes_agree_with_surrealdb(seed: int) -> None:
    # far-end writes (titles, NONE among them), edge creates, updates and deletes (int and
    # string edge ids: the hop's order), between two traversals of one edge table
    case = _random_graph_case(random.Random(33_140 + seed))
    mismatch = run_case(case, check_updated=True)
    assert mismatch is None, str(mismatch)
