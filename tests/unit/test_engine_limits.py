"""Query limits (engine/README.md, "Limits"): the parser refuses what is too long or too deep,
naming the limit; everything it accepts compiles and evaluates without a recursion error; a
shard answers every failure with a code and a non-empty message."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from surrealdb import RecordID

from engine import ViewEngine
from engine.errors import QueryRejected
from engine.parser import MAX_DEPTH, MAX_QUERY_CHARS, parse
from engine.shape import normalise
from engine.values import record_id_text
from engine.worker import ShardWorker
from ssp.shard import Shard, encode_request
from ssp.shards import ShardHandle

# Frames already on the stack when the hub or a shard calls the engine (event loop, transport,
# dispatch) are far fewer than this: evaluating with this much stack used shows the headroom.
CALLER_FRAMES = 300


def _with_stack_used(frames: int, fn: Callable[[], Any]) -> Any:
    if frames == 0:
        return fn()
    return _with_stack_used(frames - 1, fn)


def _rows(n: int = 90) -> list[dict[str, Any]]:
    # t:i links to t:i-1 through `p`, so a subquery on `p = $parent.id` nests as deep as
    # the query does.
    return [{"id": RecordID("t", i), "a": i % 3, "p": RecordID("t", i - 1)} for i in range(1, n)]


def _subqueries(levels: int, inner: str = "a = 1") -> str:
    q = f"SELECT * FROM t WHERE p = $parent.id AND {inner}"
    for _ in range(levels - 1):
        q = f"SELECT *, ({q}) AS s FROM t WHERE p = $parent.id"
    return f"SELECT *, ({q}) AS s FROM t"


def _nested(kind: str, n: int) -> str:
    """A query nesting `n` levels of `kind` (the depth the README's rule gives it)."""
    if kind == "parens":
        return "SELECT * FROM t WHERE " + "(" * n + "a = 1" + ")" * n
    if kind == "not":  # n - 1 NOTs around one comparison: a tree n levels high
        return "SELECT * FROM t WHERE " + "NOT " * (n - 1) + "a = 1"
    if kind == "arrays":  # the comparison plus n - 1 arrays
        return "SELECT * FROM t WHERE a IN " + "[" * (n - 1) + "1" + "]" * (n - 1)
    if kind == "objects":
        return "SELECT * FROM t WHERE a = " + "{k: " * (n - 1) + "1" + "}" * (n - 1)
    if kind == "comparisons":  # a = 1 = 1 ...: each comparison nests the previous one
        return "SELECT * FROM t WHERE a" + " = 1" * n
    if kind == "subqueries":
        return _subqueries(n)
    raise AssertionError(kind)


KINDS = ("parens", "not", "arrays", "objects", "comparisons", "subqueries")


@pytest.mark.parametrize("kind", KINDS)
def test_a_query_nested_exactly_max_depth_registers_and_evaluates(kind: str) -> None:
    surql = _nested(kind, MAX_DEPTH)
    eng = ViewEngine()
    eng.load("t", _rows())
    members = _with_stack_used(CALLER_FRAMES, lambda: eng.register("v", surql, {}))
    delta = _with_stack_used(CALLER_FRAMES, lambda: eng.ingest(
        "t", "CREATE", "t:500", {"id": RecordID("t", 500), "a": 1, "p": RecordID("t", 499)}))
    rows = _with_stack_used(CALLER_FRAMES, lambda: eng.result("v"))
    ones = {f"t:{i}" for i in range(1, 90) if i % 3 == 1}
    every = {f"t:{i}" for i in range(1, 90)}
    want = {
        "parens": ones,
        "not": set(),  # NOT binds to `a`: (NOT ... a) = 1 compares a bool with 1
        "arrays": set(),  # 1 is not inside [[...[1]...]]
        "objects": set(),
        "comparisons": set(),  # (a = 1) is a bool, and a bool never equals 1
        "subqueries": every,  # the outer level has no WHERE
    }[kind]
    assert members == want
    joined = kind in ("parens", "subqueries")
    assert ("v" in delta and delta["v"].added == {"t:500"}) is joined
    assert {record_id_text(r["id"]) for r in rows} == want | ({"t:500"} if joined else set())


def test_subqueries_at_the_limit_evaluate_the_whole_chain() -> None:
    eng = ViewEngine()
    eng.load("t", _rows())
    eng.register("v", _nested("subqueries", MAX_DEPTH), {})
    top = next(r for r in eng.result("v") if r["id"] == RecordID("t", 1))
    depth = 0
    level = top
    while level.get("s"):
        level = level["s"][0]
        depth += 1
    # t:1 -> t:2 -> ... one level per subquery; the innermost keeps only `a = 1` rows.
    assert depth >= MAX_DEPTH - 3


@pytest.mark.parametrize("kind", KINDS)
def test_one_level_past_max_depth_is_refused_naming_the_limit(kind: str) -> None:
    with pytest.raises(QueryRejected, match=f"deeper than the limit of {MAX_DEPTH} levels"):
        parse(_nested(kind, MAX_DEPTH + 1))


def test_the_issue_reproduction_is_refused_not_a_recursion_error() -> None:
    with pytest.raises(QueryRejected, match="MAX_DEPTH"):
        parse("SELECT * FROM thread WHERE " + "(" * 200 + "score = 1" + ")" * 200)
    with pytest.raises(QueryRejected, match="MAX_DEPTH"):
        parse("SELECT * FROM thread WHERE " + "(" * 5000 + "score = 1" + ")" * 5000)


def test_query_length_limit() -> None:
    head = "SELECT * FROM t WHERE a = '"
    fits = head + "x" * (MAX_QUERY_CHARS - len(head) - 1) + "'"
    assert len(fits) == MAX_QUERY_CHARS
    parse(fits)
    with pytest.raises(QueryRejected, match="limit is 100,000 .MAX_QUERY_CHARS."):
        parse(fits + " ")


@pytest.mark.parametrize("joiner", [" OR ", " AND ", " || ", " && "])
def test_wide_boolean_chains_stay_shallow_and_keep_their_meaning(joiner: str) -> None:
    n = 1000
    op = "=" if "O" in joiner or "|" in joiner else "!="
    surql = "SELECT * FROM t WHERE " + joiner.join(f"a {op} {i}" for i in range(3, 3 + n))
    eng = ViewEngine()
    eng.load("t", [{"id": RecordID("t", i), "a": i} for i in range(1200)])
    members = _with_stack_used(CALLER_FRAMES, lambda: eng.register("v", surql, {}))
    if op == "=":
        assert members == {f"t:{i}" for i in range(3, 3 + n)}
    else:
        assert members == {f"t:{i}" for i in range(1200) if not 3 <= i < 3 + n}
    d = eng.ingest("t", "UPDATE", "t:5", {"id": RecordID("t", 5), "a": 5000})
    assert (d["v"].removed if op == "=" else d["v"].added) == {"t:5"}


def test_chains_pair_terms_in_order() -> None:
    q = parse("SELECT * FROM t WHERE a = 1 OR a = 2 OR a = 3 OR a = 4 OR a = 5")
    assert q.where is not None
    leaves: list[int] = []
    stack = [q.where]
    while stack:
        e = stack.pop()
        if e[0] == "or":
            stack.extend([e[2], e[1]])
        else:
            leaves.append(e[3][1])
    assert leaves == [1, 2, 3, 4, 5]
    # Precedence is unchanged: AND binds tighter than OR.
    q = parse("SELECT * FROM t WHERE a = 1 OR a = 2 AND b = 3")
    assert q.where is not None and q.where[0] == "or" and q.where[2][0] == "and"


def test_normalised_shapes_of_chains_are_stable() -> None:
    a = normalise(parse("SELECT * FROM t WHERE a = 1 OR a = 2 OR a = 3"), {})[0]
    b = normalise(parse("SELECT * FROM t WHERE a = 7 OR a = 8 OR a = 9"), {})[0]
    assert a == b


# ------------------------------------------------------------------ shard replies


def test_unexpected_engine_error_is_answered_internal_with_its_text(
        caplog: pytest.LogCaptureFixture) -> None:
    w = ShardWorker()

    def boom(*_a: Any, **_k: Any) -> Any:
        raise RecursionError("maximum recursion depth exceeded")

    # a stand-in engine: the compiled ViewEngine's methods cannot be replaced on an instance
    w.engine = SimpleNamespace(register=boom, views={})  # type: ignore[assignment]
    r = w.handle({"kind": "register", "view_id": "v", "surql": "SELECT * FROM t"})
    assert r["ok"] is False and r["error"] == "internal"
    assert "RecursionError: maximum recursion depth exceeded" in r["message"]
    assert "Traceback" in caplog.text


def test_replacing_a_view_with_a_refused_query_keeps_the_old_view() -> None:
    w = ShardWorker()
    w.handle({"kind": "load", "table": "t", "rows": [{"id": RecordID("t", 1), "a": 5}]})
    w.handle({"kind": "register", "view_id": "v", "surql": "SELECT * FROM t WHERE a > 3"})
    r = w.handle({"kind": "register", "view_id": "v",
                  "surql": "SELECT * FROM t WHERE a > 3 SPLIT a LIMIT 2"})
    assert r["error"] == "rejected" and "SPLIT" in r["message"]
    assert w.engine.view_ids() == ["v"]
    d = w.handle({"kind": "ingest", "events": [["t", "CREATE", "t:2", {"id": RecordID("t", 2),
                                                                         "a": 9}]]})
    assert d["groups"] == [[["v"], {"added": ["t:2"], "removed": [], "updated": []}]]  # old query
    r = w.handle({"kind": "register", "view_id": "v", "surql": "SELECT * FROM t WHERE a < 3"})
    assert r == {"ok": True, "members": []}
    assert w.engine.view_ids() == ["v"]  # the side id used while building is gone


def test_shard_process_handler_never_answers_without_a_message() -> None:
    shard = Shard(0)

    def boom(_msg: Any) -> Any:
        raise MemoryError

    shard.worker.handle = boom  # type: ignore[method-assign]
    r = asyncio.run(shard.handle(encode_request("register", {"view_id": "v", "surql": "x"})))
    assert r["ok"] is False and r["error"] == "internal" and "MemoryError" in r["message"]


@pytest.mark.parametrize("reply", [
    {"status": 500, "body": {"error": "internal", "message": "RecursionError: deep"}},
    {"ok": False},
    {"ok": False, "error": "internal", "message": ""},
    "garbage",
])
def test_a_failed_shard_reply_always_carries_a_message(reply: Any) -> None:
    handle = ShardHandle.__new__(ShardHandle)
    handle.index = 3
    err = handle._error("register", reply)
    assert err.message and err.code
    if isinstance(reply, dict) and "body" in reply:
        assert err.code == "internal" and "RecursionError: deep" in err.message
