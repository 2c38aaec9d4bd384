"""viewclient.query.Window: where an optimistic row goes in a view's window, judged by
SurrealDB itself (the embedded engine answers the query before and after the write)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from surrealdb import RecordID

from tests.engine.judge import Judge
from viewclient.query import Window


def test_a_row_is_placed_by_order_by_and_cut_by_the_window() -> None:
    w = Window("SELECT id, n FROM post WHERE n > 0 ORDER BY n DESC LIMIT 3")
    rows = [{"id": "post:a", "n": 9}, {"id": "post:b", "n": 5}, {"id": "post:c", "n": 2}]
    assert w.place(rows, {"n": 7}, {}) == 1
    assert w.place(rows, {"n": 10}, {}) == 0
    assert w.place(rows, {"n": 1}, {}) == -1  # after a full window
    assert w.place(rows[:2], {"n": 1}, {}) == 2  # the window has room: nothing comes after
    assert w.place(rows, {"n": 5}, {}) is None  # a tie: SurrealDB's own order decides
    assert w.place(rows, {"n": "7"}, {}) is None  # a string among numbers
    assert w.place(rows, {}, {}) is None  # NONE
    assert w.limit({}) == 3


@pytest.mark.parametrize(("surql", "params", "want"), [
    ("SELECT * FROM post ORDER BY n LIMIT $k", {"k": 2}, 2),
    ("SELECT * FROM post ORDER BY n LIMIT $k", {}, None),
    ("SELECT * FROM post ORDER BY n LIMIT BY 4", {}, 4),
    ("SELECT * FROM post ORDER BY n", {}, None),
])
def test_limit_reads_literals_and_parameters(surql: str, params: dict[str, Any],
                                             want: int | None) -> None:
    assert Window(surql).limit(params) == want


@pytest.mark.parametrize("surql", [
    "SELECT * FROM post ORDER BY string::len(title) LIMIT 3",
    "SELECT * FROM post ORDER BY title COLLATE LIMIT 3",
    "SELECT * FROM post ORDER BY rand() LIMIT 3",
    "SELECT * FROM post ORDER BY n LIMIT $missing",
])
def test_what_the_client_cannot_read_is_left_to_the_database(surql: str) -> None:
    assert Window(surql).place([{"n": 1, "title": "a"}], {"n": 0, "title": "b"}, {}) is None


def _ids(rows: list[dict[str, Any]]) -> list[str]:
    return [str(r["id"]) for r in rows]


def test_placement_agrees_with_surrealdb() -> None:
    claims = [_placements_agree(seed) for seed in range(16)]
    # a placement that always said "cannot tell" would agree with anything
    assert sum(claims) > 16 * 8 // 2, claims


def _placements_agree(seed: int) -> int:
    """Eight new rows placed in one random view; returns how many the client could tell."""
    rng = random.Random(seed)
    judge = Judge()
    try:
        for i in range(rng.randint(0, 9)):
            judge.write("thread", "CREATE", RecordID("thread", i), {
                "n": rng.choice([rng.randint(0, 6), rng.random() * 6]),
                "title": rng.choice("abcdXY"), "k": rng.randint(0, 2)})
        terms = rng.sample(["n", "title", "k"], rng.randint(1, 2))
        order = ", ".join(f"{t} {rng.choice(['ASC', 'DESC', ''])}".strip() for t in terms)
        window = rng.choice(["", " LIMIT 3", " LIMIT 4 START 2", " START 1", " LIMIT $k"])
        surql = f"SELECT id, n, title, k FROM thread ORDER BY {order}{window}"
        params = {"k": 2}
        w = Window(surql)
        claims = 0
        for attempt in range(8):
            before = judge.query(surql, params)
            new = {"id": RecordID("thread", f"new{attempt}"), "n": rng.randint(0, 6),
                   "title": rng.choice("abcdXY"), "k": rng.randint(0, 2)}
            at = w.place(before, new, params)
            judge.write("thread", "CREATE", new["id"],
                        {k: v for k, v in new.items() if k != "id"})
            after = judge.query(surql, params)
            if at is not None:
                claims += 1
                guess = list(before)
                if at >= 0:
                    guess.insert(at, new)
                    limit = w.limit(params)
                    if limit is not None and len(guess) > limit:
                        guess.pop()
                assert _ids(guess) == _ids(after), (seed, surql, new, at)
            judge.write("thread", "DELETE", new["id"], None)
        return claims
    finally:
        judge.close()
