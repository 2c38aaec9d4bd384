"""Operators and truthiness agree with SurrealDB 3.2.4 (differential, hypothesis)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from surrealdb import RecordID

from engine import values as V
from engine.values import NONE
from tests.unit.test_values_support import Oracle, oracle, stored_values, values  # noqa: F401

OPERATORS: list[tuple[str, Any]] = [
    ("=", V.equals),
    ("==", V.equals),
    ("!=", V.not_equals),
    ("<", V.less),
    ("<=", V.less_equal),
    (">", V.greater),
    (">=", V.greater_equal),
    ("CONTAINS", V.contains),
    ("CONTAINSNOT", V.contains_not),
    ("CONTAINSANY", V.contains_any),
    ("CONTAINSALL", V.contains_all),
    ("CONTAINSNONE", V.contains_none),
    ("INSIDE", V.inside),
    ("IN", V.inside),
    ("NOT IN", V.not_inside),
    ("NOTINSIDE", V.not_inside),
    ("ALLINSIDE", V.all_inside),
    ("ANYINSIDE", V.any_inside),
    ("NONEINSIDE", V.none_inside),
]
_QUERY = "RETURN [" + ", ".join(f"$a {op} $b" for op, _ in OPERATORS) + "]"


def _check_pair(oracle: Oracle, a: Any, b: Any) -> None:
    expected = oracle.value(_QUERY, {"a": a, "b": b})
    got = [fn(a, b) for _, fn in OPERATORS]
    mismatches = [
        (op, exp, mine)
        for (op, _), exp, mine in zip(OPERATORS, expected, got, strict=True)
        if exp != mine
    ]
    assert not mismatches, f"a={a!r} b={b!r}: (op, surrealdb, ours) {mismatches}"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=values, b=values)
def test_operators_match_surrealdb_on_random_pairs(oracle: Oracle, a: Any, b: Any) -> None:
    _check_pair(oracle, a, b)


# Containers built from the other operand make membership true often enough to matter.
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), items=st.lists(values, min_size=1, max_size=4))
def test_membership_operators_match_surrealdb(oracle: Oracle, data: st.DataObject, items: list[Any]) -> None:
    needle = data.draw(st.sampled_from(items))
    probe = data.draw(st.one_of(st.just(needle), st.lists(st.sampled_from(items), max_size=3)))
    _check_pair(oracle, items, probe)
    _check_pair(oracle, probe, items)


def test_operator_examples_from_the_contract(oracle: Oracle) -> None:
    cases = [
        (1, 1.0),
        ("1", 1),
        (None, NONE),
        (NONE, 1),
        ([1, 2], 1.0),
        ("hello", "ell"),
        (RecordID("user", 1), "user:1"),
        (Decimal("1.0"), 1),
        ([1, [2]], [2]),
        ({"a": 1}, "a"),
        ("abc", ["a", "z"]),
        ([1, 2, 3], [1, 2]),
        (NONE, NONE),
        (None, None),
    ]
    for a, b in cases:
        _check_pair(oracle, a, b)
        _check_pair(oracle, b, a)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(v=values)
def test_truthiness_matches_surrealdb(oracle: Oracle, v: Any) -> None:
    assert V.truthy(v) == oracle.value("RETURN !!$v", {"v": v}), repr(v)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(stored_values, min_size=1, max_size=6))
def test_where_keeps_exactly_the_truthy_rows(oracle: Oracle, rows: list[Any]) -> None:
    table = oracle.fresh_table()
    oracle.query(
        f"FOR $i IN 0..{len(rows)} {{ CREATE type::record('{table}', $i) SET v = $vs[$i] }}",
        {"vs": rows},
    )
    kept = {r["id"].id for r in oracle.value(f"SELECT id FROM {table} WHERE v")}
    assert kept == {i for i, v in enumerate(rows) if V.truthy(v)}
