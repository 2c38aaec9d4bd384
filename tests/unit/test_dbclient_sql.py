"""Pure SQL helpers: identifier validation, parameter renaming, transaction batches."""

from __future__ import annotations

import pytest

from dbclient import (
    build_transaction,
    is_identifier,
    rename_params,
    require_identifier,
    schema_fingerprint,
    show_changes_sql,
)


@pytest.mark.parametrize("name", ["user", "_00_version", "T1", "a_b_c", "_"])
def test_plain_identifiers_are_accepted(name: str) -> None:
    assert is_identifier(name)
    assert require_identifier(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "1abc", "a-b", "a b", "user;DROP", "a.b", "`x`", "⟨x⟩", "ü", "a\n", None, 3, b"x"],
)
def test_anything_else_is_refused(name: object) -> None:
    assert not is_identifier(name)
    with pytest.raises(ValueError, match="not a plain identifier"):
        require_identifier(name)


def test_rename_touches_only_the_named_whole_parameters() -> None:
    sql = "SELECT * FROM t WHERE id = $id AND idx = $idx AND owner = $auth.id AND x = $id"
    out = rename_params(sql, ["id"], "p0_")
    assert out == ("SELECT * FROM t WHERE id = $p0_id AND idx = $idx AND owner = $auth.id "
                   "AND x = $p0_id")


def test_rename_leaves_strings_identifiers_and_comments_alone() -> None:
    sql = ("UPDATE $id SET note = '$id costs \\'$id\\'', b = \"$id\", `$id` = 1 "
           "-- $id in a comment\n, c = $id /* $id */ # $id")
    out = rename_params(sql, ["id"], "p3_")
    assert out == ("UPDATE $p3_id SET note = '$id costs \\'$id\\'', b = \"$id\", `$id` = 1 "
                   "-- $id in a comment\n, c = $p3_id /* $id */ # $id")


def test_rename_refuses_bad_parameter_names() -> None:
    with pytest.raises(ValueError, match="parameter"):
        rename_params("RETURN 1", ["a-b"], "p0_")


def test_transaction_renames_parameters_per_statement() -> None:
    sql, vars_ = build_transaction([
        ("CREATE $id SET n = $n;", {"id": "a", "n": 1}),
        ("UPDATE $id SET n = $n", {"id": "b", "n": 2}),
        ("RETURN $auth", None),
    ])
    assert sql == ("BEGIN TRANSACTION;\nCREATE $p0_id SET n = $p0_n;\n"
                   "UPDATE $p1_id SET n = $p1_n;\nRETURN $auth;\nCOMMIT TRANSACTION;")
    assert vars_ == {"p0_id": "a", "p0_n": 1, "p1_id": "b", "p1_n": 2}


def test_transaction_refuses_empty_input() -> None:
    with pytest.raises(ValueError):
        build_transaction([])
    with pytest.raises(ValueError, match="statement 1 is empty"):
        build_transaction([("RETURN 1", None), ("  ; ", None)])


def test_show_changes_validates_before_formatting() -> None:
    assert show_changes_sql("post", 123, 10) == "SHOW CHANGES FOR TABLE post SINCE 123 LIMIT 10"
    assert show_changes_sql(None, 7, 1000) == "SHOW CHANGES FOR DATABASE SINCE 7 LIMIT 1000"
    with pytest.raises(ValueError):
        show_changes_sql("post; REMOVE TABLE x", 1, 1)
    with pytest.raises(ValueError):
        show_changes_sql("post", "1; REMOVE TABLE x", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        show_changes_sql("post", True, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        show_changes_sql("post", -1, 1)
    with pytest.raises(ValueError):
        show_changes_sql("post", 1, 0)


def test_fingerprint_is_stable_and_moves_with_any_change() -> None:
    info = {"fields": {"a": "DEFINE FIELD a ON t TYPE int", "b": "DEFINE FIELD b ON t"},
            "events": {}, "indexes": {}}
    reordered = {"indexes": {}, "events": {},
                 "fields": {"b": "DEFINE FIELD b ON t", "a": "DEFINE FIELD a ON t TYPE int"}}
    base = schema_fingerprint("DEFINE TABLE t", info)
    assert base == schema_fingerprint("DEFINE TABLE t", reordered)
    changed = {**info, "fields": {**info["fields"], "a": "DEFINE FIELD a ON t TYPE string"}}
    assert schema_fingerprint("DEFINE TABLE t", changed) != base
    assert schema_fingerprint("DEFINE TABLE t SCHEMAFULL", info) != base
    with_live = {**info, "lives": {"x": "LIVE SELECT * FROM t"}}
    assert schema_fingerprint("DEFINE TABLE t", with_live) == base


def test_params_the_engine_can_take_pass() -> None:
    import datetime
    import decimal
    import uuid

    from surrealdb import Duration, RecordID

    from dbclient import check_params

    check_params({
        "a": None, "b": True, "c": 2**63 - 1, "d": -(2**63), "e": 1.5, "f": "s", "g": b"x",
        "h": [1, (2, 3)], "i": {"k": {"n": [RecordID("t", [1, "x"])]}},
        "j": datetime.datetime.now(datetime.UTC), "k": uuid.uuid4(),
        "l": decimal.Decimal("1.5"), "m": Duration(5),
    })


@pytest.mark.parametrize(
    ("vars_", "fragment"),
    [
        ({"x": {1, 2}}, r"\$x has unsupported type set"),
        ({"x": 2**64}, r"\$x is an integer outside"),
        ({"x": [0, -(2**63) - 1]}, r"\$x\[1\] is an integer outside"),
        ({"x": {"a": {1: "v"}}}, r"\$x.a has a non-string key"),
        ({"x": object()}, "unsupported type object"),
        ({"bad-name": 1}, "parameter name"),
    ],
)
def test_params_the_engine_cannot_take_are_refused_before_sending(
    vars_: dict[str, object], fragment: str
) -> None:
    from dbclient import check_params

    with pytest.raises(ValueError, match=fragment):
        check_params(vars_)
