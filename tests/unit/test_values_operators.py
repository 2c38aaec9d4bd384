"""Operators and truthiness agree with SurrealDB 3.2.4 (differential, hypothesis)."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from surrealdb import RecordID

from engine import values as V
from engine.values import NONE
from tests.support.value_oracle import Oracle, stored_values, values


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    """One in-process SurrealDB for the module."""
    yield Oracle()


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
    # Equality indexes rely on eq_key agreeing with "=" (and on equal keys hashing alike).
    assert (V.eq_key(a) == V.eq_key(b)) is expected[0], (a, b)
    if expected[0]:
        assert hash(V.eq_key(a)) == hash(V.eq_key(b))


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(a=values, b=values)
def test_operators_match_surrealdb_on_random_pairs(oracle: Oracle, a: Any, b: Any) -> None:
    _check_pair(oracle, a, b)


# Containers built from the other operand make membership true often enough to matter.
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), items=st.lists(values, min_size=1, max_size=4))
def test_membership_operators_match_surrealdb(
    oracle: Oracle, data: st.DataObject, items: list[Any]
) -> None:
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


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(v=values)
def test_truthiness_matches_surrealdb(oracle: Oracle, v: Any) -> None:
    assert V.truthy(v) == oracle.value("RETURN !!$v", {"v": v}), repr(v)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=st.lists(stored_values, min_size=1, max_size=6))
def test_where_keeps_exactly_the_truthy_rows(oracle: Oracle, rows: list[Any]) -> None:
    table = oracle.fresh_table()
    oracle.query(
        f"FOR $i IN 0..{len(rows)} {{ CREATE type::record('{table}', $i) SET v = $vs[$i] }}",
        {"vs": rows},
    )
    kept = {r["id"].id for r in oracle.value(f"SELECT id FROM {table} WHERE v")}
    assert kept == {i for i, v in enumerate(rows) if V.truthy(v)}


def _valid_decimal(d: Decimal) -> bool:
    # What SurrealDB's 96-bit decimal holds: at most 28 digits and 28 decimal places.
    t = d.as_tuple()
    return len(t.digits) <= 28 and -28 <= int(t.exponent) and abs(d) < Decimal("7e28")


def _near_decimals(f: float) -> st.SearchStrategy[Decimal]:
    text = Decimal(repr(f))
    exact = Decimal(f)
    tiny = Decimal("1e-20")
    return st.sampled_from([text, exact, text + tiny, text - tiny]).filter(_valid_decimal)


_numbers = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=2**53 - 3, max_value=2**53 + 3),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e20, max_value=1e20),
    st.sampled_from([0.1, 0.3, 2.0**53, 2.0**53 + 2, 1e16, 1.5]),
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False).flatmap(_near_decimals),
    st.decimals(allow_nan=False, allow_infinity=False, places=20, min_value=-10, max_value=10),
)


# SurrealDB compares float with decimal through the float's shortest text and everything else
# exactly; these pairs sit right at the boundaries where the two rules differ.
@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), a=_numbers)
def test_numbers_compare_like_surrealdb_across_int_float_decimal(
    oracle: Oracle, data: st.DataObject, a: Any
) -> None:
    b = data.draw(st.one_of(_numbers, _related_numbers(a)))
    _check_pair(oracle, a, b)


def _related_numbers(a: Any) -> st.SearchStrategy[Any]:
    options: list[Any] = [a]
    try:
        f = float(a)
        options += [f] + [d for d in (Decimal(repr(f)),) if _valid_decimal(d)]
        if f == int(f) and abs(f) < 2**63:
            options.append(int(f))
    except (OverflowError, ValueError):
        pass
    return st.sampled_from(options)
