"""Record-id text and field paths agree with SurrealDB 3.2.4 (differential, hypothesis)."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from surrealdb import RecordID

from engine.values import (
    NONE,
    ValueSyntaxError,
    format_value,
    get_path,
    parse_record_id,
    parse_value,
    record_id_text,
    sort_key,
)
from tests.support.value_oracle import Oracle, record_ids, stored_values


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    """One in-process SurrealDB for the module."""
    yield Oracle()


SLOW = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@SLOW
@given(rid=record_ids)
def test_record_id_text_is_what_string_cast_prints(oracle: Oracle, rid: RecordID) -> None:
    assert record_id_text(rid) == oracle.value("RETURN <string> $r", {"r": rid})


@SLOW
@given(rid=record_ids)
def test_parse_record_id_inverts_the_text_and_surrealdb_agrees(
    oracle: Oracle, rid: RecordID
) -> None:
    text = record_id_text(rid)
    parsed = parse_record_id(text)
    assert sort_key(parsed) == sort_key(rid)
    assert oracle.value("RETURN <record> $t = $r", {"t": text, "r": rid}) is True


@SLOW
@given(v=stored_values)
def test_format_value_is_what_surrealdb_prints_and_parses_back(oracle: Oracle, v: Any) -> None:
    assert "[" + format_value(v) + "]" == oracle.value("RETURN <string> [$v]", {"v": v})
    back = parse_value(format_value(v))
    assert sort_key(back) == sort_key(v)
    assert type(back) is type(v)


def _halfway_floats() -> list[float]:
    """Floats exactly halfway between their two shortest round-tripping decimals (2**49 +
    0.25 is 562949953421312.25: both ...312.2 and ...312.3 read back as it), where Python's
    repr takes the even digit: found by Hypothesis once, each side of zero, over a range of
    magnitudes."""
    out: list[float] = []
    for e in range(30, 60):
        for k in range(1, 40):
            f = 2.0**e + k * 2.0 ** (e - 52)
            d = Decimal(repr(f))
            step = Decimal(1).scaleb(int(d.as_tuple().exponent))
            if abs(Decimal(f) - d) * 2 == step:
                out += [f, -f]
    return out


def test_floats_halfway_between_two_shortest_texts_print_as_surrealdb_does(
        oracle: Oracle) -> None:
    floats = _halfway_floats()
    assert len(floats) > 50
    for f in floats:
        assert "[" + format_value(f) + "]" == oracle.value("RETURN <string> [$v]", {"v": f}), f
        assert parse_value(format_value(f)) == f


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("thread:1", RecordID("thread", 1)),
        ("thread:-7", RecordID("thread", -7)),
        ("user:abc", RecordID("user", "abc")),
        ("user:⟨a-b⟩", RecordID("user", "a-b")),
        ("user:`a-b`", RecordID("user", "a-b")),
        ("user:`123`", RecordID("user", "123")),
        ("user:`a\\`b`", RecordID("user", "a`b")),
        ("`user-x`:a", RecordID("user-x", "a")),
        ("user:[1, 'a']", RecordID("user", [1, "a"])),
        ("user:{ a: 1, b: 'x' }", RecordID("user", {"a": 1, "b": "x"})),
    ],
)
def test_parse_record_id_examples(text: str, expected: RecordID) -> None:
    assert parse_record_id(text) == expected


@pytest.mark.parametrize("bad", ["", "user", ":1", "user:", "user:1 junk", "user:`open", 42])
def test_parse_record_id_rejects_malformed_text_clearly(bad: Any) -> None:
    with pytest.raises(ValueSyntaxError):
        parse_record_id(bad)


def test_string_id_text_examples() -> None:
    assert record_id_text(RecordID("user", "a-b")) == "user:`a-b`"
    assert record_id_text(RecordID("user", "123")) == "user:`123`"
    assert record_id_text(RecordID("user", "1e3")) == "user:1e3"
    assert record_id_text(RecordID("thread", 1)) == "thread:1"


# Documents with nested objects and arrays of objects; paths over a small key set so they hit.
_keys = st.sampled_from(["a", "b", "c"])
_docs = st.recursive(
    stored_values,
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(_keys, kids, max_size=3)),
    max_leaves=8,
).filter(lambda d: isinstance(d, dict))


@SLOW
@given(doc=_docs, path=st.lists(_keys, min_size=1, max_size=3))
def test_field_paths_resolve_like_surrealdb(
    oracle: Oracle, doc: dict[str, Any], path: list[str]
) -> None:
    expected = oracle.value(f"RETURN $d.{'.'.join(path)} IS NONE", {"d": doc})
    got = get_path(doc, tuple(path))
    assert (got is NONE) == expected, (doc, path, got)
    same = oracle.value(f"RETURN $d.{'.'.join(path)} == $g", {"d": doc, "g": got})
    assert same is True, (doc, path, got)


def test_field_path_examples() -> None:
    doc = {"tags": [{"name": "x"}, {"other": 1}, 5], "n": None, "o": {"p": {"q": 2}}}
    assert get_path(doc, ("tags", "name")) == ["x", NONE, NONE]
    assert get_path(doc, ("missing",)) is NONE
    assert get_path(doc, ("n", "x")) is NONE
    assert get_path(doc, ("o", "p", "q")) == 2


def test_field_path_follows_links_with_a_resolver() -> None:
    users = {"user:1": {"id": RecordID("user", 1), "name": "ann"}}
    doc = {"author": RecordID("user", 1), "ghost": RecordID("user", 9)}

    def resolve(rid: RecordID) -> Any:
        return users.get(record_id_text(rid), NONE)

    assert get_path(doc, ("author", "name"), resolve) == "ann"
    assert get_path(doc, ("ghost", "name"), resolve) is NONE
    assert get_path(doc, ("author", "name")) is NONE


def test_link_paths_resolve_like_surrealdb(oracle: Oracle) -> None:
    oracle.query(
        "CREATE lu:1 SET name = 'ann', org = lo:1; CREATE lu:2 SET name = 'bob';"
        "CREATE lo:1 SET name = 'acme';"
    )
    rows = {
        "lu:1": {"id": RecordID("lu", 1), "name": "ann", "org": RecordID("lo", 1)},
        "lu:2": {"id": RecordID("lu", 2), "name": "bob"},
        "lo:1": {"id": RecordID("lo", 1), "name": "acme"},
    }

    def resolve(rid: RecordID) -> Any:
        return rows.get(record_id_text(rid), NONE)

    docs = [
        {"a": RecordID("lu", 1)},
        {"a": RecordID("lu", 9)},
        {"a": [RecordID("lu", 1), RecordID("lu", 2), RecordID("lu", 9)]},
        {"a": {"b": RecordID("lu", 2)}},
    ]
    paths = [("a", "name"), ("a", "org", "name"), ("a", "b", "name"), ("a", "missing")]
    for doc in docs:
        for path in paths:
            got = get_path(doc, path, resolve)
            text = "$d." + ".".join(path)
            assert oracle.value(f"RETURN {text} == $g", {"d": doc, "g": got}) is True, (doc, path)
            assert oracle.value(f"RETURN {text} IS NONE", {"d": doc}) is (got is NONE), (doc, path)


def test_a_field_named_in_an_object_key_is_read_from_the_id() -> None:
    """SurrealDB reads ``a:{a:0}.a`` from the key, without fetching; other fields follow the link."""
    rid = RecordID("a", {"a": 0, "b": [1]})
    row = {"id": rid, "a": 7, "c": 3}
    assert get_path({"l": rid}, ("l", "a"), lambda r: row) == 0
    assert get_path({"l": [rid]}, ("l", "b"), lambda r: row) == [[1]]
    assert get_path({"l": rid}, ("l", "c"), lambda r: row) == 3
    assert get_path({"l": rid}, ("l", "c")) is NONE
