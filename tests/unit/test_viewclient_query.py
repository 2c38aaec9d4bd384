"""`viewclient.query.members_query`: the view's query reads its known members with the
query's own projection, WHERE and ORDER BY, without its window (START/LIMIT)."""

from __future__ import annotations

from typing import Any

import pytest
from surrealdb import RecordID

from viewclient.naming import edge_table, ttl_secs
from viewclient.query import UnsupportedQuery, members_query, where_filter


@pytest.mark.parametrize(("surql", "want"), [
    ("SELECT * FROM thread WHERE score > 3 ORDER BY score DESC LIMIT 10",
     "SELECT * FROM (SELECT * FROM $__members WHERE id != NONE AND (score > 3)) "
     "ORDER BY score DESC"),
    ("SELECT id, title FROM post ORDER BY n DESC, title LIMIT 5 START 1;",
     "SELECT * FROM (SELECT id, title FROM $__members WHERE id != NONE) "
     "ORDER BY n DESC, title"),
    ("select * from post start at 2 limit by $n",
     "SELECT * FROM (SELECT * FROM $__members WHERE id != NONE)"),
    ("SELECT *, (SELECT * FROM comment WHERE thread = $parent.id ORDER BY at LIMIT 2) AS c "
     "FROM thread WHERE title = 'a FROM b LIMIT 3' OR x LIMIT 4",
     "SELECT * FROM (SELECT *, (SELECT * FROM comment WHERE thread = $parent.id ORDER BY at "
     "LIMIT 2) AS c FROM $__members WHERE id != NONE AND (title = 'a FROM b LIMIT 3' OR x))"),
    ("SELECT * FROM post FETCH owner",
     "SELECT * FROM (SELECT * FROM $__members WHERE id != NONE FETCH owner)"),
    # the outer ORDER BY sees the projected rows: an aliased expression is ordered by its name
    ("SELECT id, n AS m, tag.label AS `l, x` FROM post WITH NOINDEX WHERE a ORDER BY n DESC, "
     "tag.label COLLATE, id FETCH tag",
     "SELECT * FROM (SELECT id, n AS m, tag.label AS `l, x` FROM $__members WITH NOINDEX "
     "WHERE id != NONE AND (a) FETCH tag) ORDER BY m DESC, `l, x` COLLATE, id"),
    # a VALUE's rows are no objects: the member records are ordered, then the VALUE read
    ("SELECT VALUE n FROM post ORDER BY n LIMIT 3",
     "SELECT VALUE n FROM (SELECT * FROM (SELECT * FROM $__members WHERE id != NONE) "
     "ORDER BY n)"),
    ("SELECT VALUE id FROM post WHERE a ORDER BY n DESC, title FETCH x",
     "SELECT VALUE id FROM (SELECT * FROM (SELECT * FROM $__members WHERE id != NONE AND (a)) "
     "ORDER BY n DESC, title) FETCH x"),
    ("SELECT VALUE n FROM post",
     "SELECT * FROM (SELECT VALUE n FROM $__members WHERE id != NONE)"),
])
def test_members_query_keeps_the_shape_and_drops_the_window(surql: str, want: str) -> None:
    assert members_query(surql) == want


@pytest.mark.parametrize("surql", ["UPDATE post SET n = 1", "SELECT 1", "RETURN 1"])
def test_members_query_refuses_what_is_not_a_select_from(surql: str) -> None:
    with pytest.raises(UnsupportedQuery):
        members_query(surql)


def test_edge_table_follows_the_services_naming_rule() -> None:
    from surrealdb import RecordID

    from ssp import naming

    for rid in [RecordID("user", "alice"), RecordID("user", "a-b"), RecordID("user", 42),
                RecordID("user", "42"), RecordID("person", "bo"), RecordID("user", "a b")]:
        for mode in ("dedicated", "single"):
            assert edge_table(naming.auth_text(rid), mode) == naming.edge_table(rid, mode)


def test_ttl_parses_durations_and_refuses_garbage() -> None:
    assert ttl_secs("10m") == 600
    assert ttl_secs("1h30m") == 5400
    with pytest.raises(ValueError):
        ttl_secs("10 minutes")


@pytest.mark.parametrize(("where", "row", "want"), [
    ("owner = $auth.id AND n >= $min", {"owner": RecordID("user", "a"), "n": 3}, True),
    ("owner = $auth.id AND n >= $min", {"owner": RecordID("user", "b"), "n": 3}, False),
    ("owner = $auth.id AND n >= $min", {"owner": "user:a", "n": 1}, False),
    ("owner = $auth.id && n >= $min", {"owner": RecordID("user", "a"), "n": 2}, True),
    # a string that reads like the record id is not the record (SurrealDB: false)
    ("owner = $auth.id", {"owner": "user:a"}, False),
    ("owner != $auth.id", {"owner": RecordID("user", 1)}, True),
    ("owner > $auth.id", {"owner": RecordID("user", "b")}, None),
    ("title = 'a AND b' AND done = false", {"title": "a AND b", "done": False}, True),
    ("title != 'x'", {"title": "x"}, False),
    ("n < 2.5", {"n": 2}, True),
    # The client cannot tell (the database's answer decides): missing fields (a DEFAULT may
    # fill them), order across types, OR, functions, paths, unknown params.
    ("n >= $min", {}, None),
    ("n >= 'a'", {"n": 1}, None),
    ("a = 1 OR b = 2", {"a": 1}, None),
    ("string::len(title) > 2", {"title": "abc"}, None),
    ("owner.name = 'a'", {"owner": "user:a"}, None),
    ("n = $unknown", {"n": 1}, None),
])
def test_where_filter_evaluates_simple_conjunctions_and_says_when_it_cannot(
        where: str, row: dict[str, Any], want: bool | None) -> None:
    test = where_filter(f"SELECT * FROM post WHERE {where} ORDER BY n DESC LIMIT 3")
    assert test(row, {"min": 2}, RecordID("user", "a")) is want


@pytest.mark.parametrize("key", ["5abc", "1e5", "0x1f", "a-b", "abc", 7])
def test_where_filter_matches_the_own_record_whatever_its_key_looks_like(key: Any) -> None:
    # Signed-up users get random keys; one starting with a digit printed differently by
    # SurrealDB (`user:5abc`) and by the SDK's text (escaped), and an optimistic create of
    # the user's own row was then judged outside `owner = $auth.id` and never shown.
    test = where_filter("SELECT * FROM post WHERE owner = $auth.id AND n >= 0")
    me = RecordID("user", key)
    assert test({"owner": RecordID("user", key), "n": 1}, {}, me) is True
    assert test({"owner": RecordID("user", "other"), "n": 1}, {}, me) is False
    assert test({"owner": RecordID("team", key), "n": 1}, {}, me) is False


def test_where_filter_admits_everything_without_a_where() -> None:
    assert where_filter("SELECT * FROM post ORDER BY n LIMIT 3")({"n": 1}, {}, "") is True
