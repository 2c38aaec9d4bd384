"""Parser and shape normalisation of the view language."""

from __future__ import annotations

import pytest
from surrealdb import RecordID

from engine import ViewEngine
from engine.errors import QueryRejected
from engine.parser import parse
from engine.shape import normalise
from engine.values import NONE


def test_parser_accepts_projection_subqueries_fetch_order_limit_start() -> None:
    q = parse(
        "SELECT *, author.name AS who, author.*, (SELECT * FROM comment WHERE thread = $parent.id "
        "ORDER BY created_at DESC LIMIT 10) AS comments, (SELECT * FROM user WHERE id = "
        "$parent.author LIMIT 1)[0] AS au FROM thread WHERE score >= -2 AND !(title = 'x') "
        "ORDER BY score DESC, id LIMIT 5 START 2 FETCH author"
    )
    kinds = [it.kind for it in q.items]
    assert kinds == ["all", "field", "linkall", "sub", "sub"]
    assert q.items[1].path == ("author", "name") and q.items[1].out == ("who",)
    assert q.items[4].index == 0
    assert q.order == ((("score",), True), (("id",), False))
    assert q.fetch == (("author",),)


def test_literals_parse_to_surrealdb_types() -> None:
    q = parse("SELECT * FROM t WHERE a IN [1, 2.5, -3, 'x', true, NONE, NULL, user:⟨a-b⟩, "
              "d'2024-01-01T00:00:00Z', 2.5dec, {x: 1}]")
    assert q.where is not None
    items = [e[1] for e in q.where[3][1][:8]]
    assert items[:5] == [1, 2.5, -3, "x", True]
    assert items[5] is NONE and items[6] is None
    assert items[7] == RecordID("user", "a-b")


@pytest.mark.parametrize(
    ("surql", "named"),
    [
        ("SELECT count() FROM thread GROUP BY author", "GROUP BY author must name"),
        ("SELECT * FROM thread GROUP BY author", "SELECT \\* cannot be grouped"),
        ("SELECT * FROM thread SPLIT tags LIMIT 2", "SPLIT with LIMIT"),
        ("SELECT VALUE id FROM thread FETCH author", "FETCH with SELECT VALUE"),
        ("SELECT * FROM thread WHERE string::similarity::fuzzy(title, 'a') > 1",
         "string::similarity::fuzzy"),
        ("SELECT <->likes<->user AS x FROM thread", "<->"),
        ("SELECT * FROM thread WHERE title.len() > 1", "method calls"),
        ("SELECT * FROM thread WHERE created_at > time::now()", "time::now"),
        ("SELECT count() AS n FROM thread GROUP BY author LIMIT 3", "LIMIT/START over groups"),
        ("SELECT * FROM thread TIMEOUT 1s", "TIMEOUT"),
        ("SELECT * FROM thread PARALLEL", "PARALLEL"),
        ("SELECT title FROM thread ORDER BY score", "ORDER BY score"),
        ("DELETE thread", "DELETE"),
        ("SELECT * FROM thread; SELECT * FROM user", "multiple statements"),
    ],
)
def test_unsupported_constructs_are_rejected_by_name(surql: str, named: str) -> None:
    # some refusals come from parsing, others from planning the shape at registration
    with pytest.raises(QueryRejected, match=named.replace("+", r"\+").replace("(", r"\(")):
        ViewEngine().register("v", surql, {})


def test_views_differing_only_in_constants_share_a_shape() -> None:
    a, sa = normalise(parse("SELECT * FROM thread WHERE author = $auth.id LIMIT 5"),
                      {"auth": {"id": RecordID("user", 1)}})
    b, sb = normalise(parse("SELECT * FROM thread WHERE author = user:2 LIMIT 7"), {})
    assert a == b and hash(a) == hash(b)
    assert sa == (RecordID("user", 1), 5) and sb == (RecordID("user", 2), 7)
    c, _ = normalise(parse("SELECT * FROM thread WHERE author != user:2 LIMIT 7"), {})
    assert c != a


def test_missing_parameter_is_none() -> None:
    _, s = normalise(parse("SELECT * FROM t WHERE a = $nope"), {})
    assert s == (NONE,)


def test_a_query_that_is_not_a_string_is_rejected_saying_so() -> None:
    with pytest.raises(QueryRejected, match="must be a string, got int"):
        parse(5)  # type: ignore[arg-type]
    with pytest.raises(QueryRejected, match="empty"):
        parse("   ")


@pytest.mark.parametrize("literal", ["90s", "1h30m", "1.5s", "10ms"])
def test_duration_literals_are_rejected_naming_the_whole_literal(literal: str) -> None:
    with pytest.raises(QueryRejected, match=f"duration literal {literal} is not supported"):
        parse(f"SELECT * FROM thread WHERE wait = {literal}")


def test_query_tables_names_the_view_table_and_every_subquery_table() -> None:
    from engine.parser import parse, query_tables

    q = parse("SELECT *, (SELECT *, (SELECT * FROM tag WHERE post = $parent.id) AS tags "
              "FROM post WHERE owner = $parent.id) AS posts FROM user WHERE id = $auth.id")
    assert query_tables(q) == (["post", "tag", "user"], ["post", "tag"])
    assert query_tables(parse("SELECT * FROM post WHERE owner.name = 'a'")) == (["post"], [])


def test_parse_cached_remembers_a_text_and_never_a_rejection(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.parser as P

    monkeypatch.setattr(P, "_PARSED", {})
    monkeypatch.setattr(P, "_PARSED_MAX", 3)
    text = "SELECT * FROM post WHERE owner = $auth.id"
    q = P.parse_cached(text)
    assert q == P.parse(text) and P.parse_cached(text) is q  # parsed once, then shared
    for _ in range(2):
        with pytest.raises(QueryRejected):
            P.parse_cached("SELECT FROM")
    assert list(P._PARSED) == [text]
    for i in range(3):
        P.parse_cached(f"SELECT * FROM t{i}")
    assert len(P._PARSED) <= 3  # bounded: cleared when full
