"""Finding and parsing LIVE SELECT / KILL statements in query text."""

from __future__ import annotations

import uuid

import pytest
from surrealdb.data.types.table import Table

from dbhost.liveql import (
    LiveSyntaxError,
    mentions_live,
    parse_kill,
    parse_live,
    split_statements,
    statement_kind,
)


def test_split_respects_strings_comments_and_blocks() -> None:
    text = """CREATE a SET s = 'x; y'; -- a comment; here
    IF true { RETURN 1; RETURN 2 }; /* block ; */ SELECT * FROM `we;ird`;;  """
    assert split_statements(text) == [
        "CREATE a SET s = 'x; y'",
        "-- a comment; here\n    IF true { RETURN 1; RETURN 2 }",
        "/* block ; */ SELECT * FROM `we;ird`",
    ]


def test_mentions_live_only_for_live_or_kill_statements() -> None:
    assert mentions_live("LIVE SELECT * FROM t")
    assert mentions_live("RETURN 1;  kill u'00000000-0000-0000-0000-000000000000'")
    assert not mentions_live("SELECT live, kill FROM t")
    assert not mentions_live("CREATE t SET note = 'LIVE SELECT * FROM t'")
    assert statement_kind("live select diff from t") == "live"
    assert statement_kind("SELECT * FROM live") is None


def test_parse_live_fields_table_where() -> None:
    spec = parse_live("LIVE SELECT a, b.c AS d FROM post WHERE owner = $auth.id AND n > 2", {})
    assert (spec.table, spec.diff, spec.fields, spec.where) == (
        "post", False, "a, b.c AS d", "owner = $auth.id AND n > 2")


def test_parse_live_keyword_inside_subquery_is_not_the_from() -> None:
    spec = parse_live("LIVE SELECT *, (SELECT * FROM x WHERE y = 1) AS z FROM t", {})
    assert spec.table == "t"
    assert spec.where is None


def test_parse_live_diff_and_table_parameter() -> None:
    spec = parse_live("LIVE SELECT DIFF FROM $tb WHERE v > 1", {"tb": Table("item")})
    assert (spec.table, spec.diff, spec.fields, spec.where) == ("item", True, "*", "v > 1")
    assert parse_live("live select * from `odd-name`", {}).table == "odd-name"
    assert parse_live("LIVE SELECT * FROM $t", {"t": "plain"}).table == "plain"


@pytest.mark.parametrize("stmt", [
    "LIVE SELECT * FROM t ORDER BY a",
    "LIVE SELECT * FROM t FETCH owner",
    "LIVE SELECT * FROM t LIMIT 3",
    "LIVE SELECT VALUE a FROM t",
    "LIVE SELECT * FROM t, u",
    "LIVE SELECT * FROM t:1",
    "LIVE SELECT * FROM $missing",
    "LIVE SELECT * WHERE a = 1",
    "LIVE SELECT * FROM t WHERE",
])
def test_parse_live_refuses_what_it_cannot_serve(stmt: str) -> None:
    with pytest.raises(LiveSyntaxError):
        parse_live(stmt, {})


def test_parse_kill_forms() -> None:
    qid = uuid.uuid4()
    assert parse_kill(f"KILL u'{qid}'", {}) == qid
    assert parse_kill(f'kill "{qid}"', {}) == qid
    assert parse_kill("KILL $q", {"q": qid}) == qid
    assert parse_kill("KILL $q", {"q": str(qid)}) == qid
    for bad in ("KILL", "KILL 42", "KILL $nothing", "KILL u'not-a-uuid'"):
        with pytest.raises(LiveSyntaxError):
            parse_kill(bad, {})
