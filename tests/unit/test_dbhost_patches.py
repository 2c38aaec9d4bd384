"""JSON Patch: undoing a changefeed patch and diffing rows for LIVE DIFF."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dbhost.patches import PatchError, apply_patch, make_diff

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=10)
rows = st.dictionaries(st.text(max_size=4), values, max_size=5)


@given(rows, rows)
def test_diff_then_apply_gives_the_new_row(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert apply_patch(before, make_diff(before, after)) == after


def test_diff_shapes() -> None:
    ops = make_diff({"a": 1, "b": 2, "n": {"x": 1}}, {"a": 10, "c": 3, "n": {"x": 2}})
    assert sorted((o["op"], o["path"]) for o in ops) == [
        ("add", "/c"), ("remove", "/b"), ("replace", "/a"), ("replace", "/n/x")]
    assert make_diff({"a": 1}, {"a": True}) == [{"op": "replace", "path": "/a", "value": True}]
    assert make_diff({"a/b": 1}, {})[0]["path"] == "/a~1b"


def test_apply_reverse_patch_from_a_changefeed() -> None:
    current = {"id": "t:1", "a": 2, "tags": ["x", "y"]}
    reverse = [{"op": "replace", "path": "/a", "value": 1},
               {"op": "remove", "path": "/tags/1"}]
    assert apply_patch(current, reverse) == {"id": "t:1", "a": 1, "tags": ["x"]}
    assert current["a"] == 2  # the input is not changed


def test_apply_rejects_a_patch_that_does_not_fit() -> None:
    with pytest.raises(PatchError):
        apply_patch({"a": 1}, [{"op": "replace", "path": "/a/b/c", "value": 1}])
    with pytest.raises(PatchError):
        apply_patch({"a": 1}, [{"op": "frobnicate", "path": "/a"}])
