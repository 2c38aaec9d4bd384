"""The index of materialisations by their constants answers exactly what the predicates say.

Intervals and equality keys are checked against ``engine.values`` (itself checked against
SurrealDB in tests/unit/test_values_*.py and tests/engine): mixed kinds, NONE/NULL, numbers
across int/float/decimal, boundaries equal to the constants.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from surrealdb import RecordID

from engine import values as V
from engine.matindex import WIDE_SEGMENTS, RangeIndex, bound, position, xkey

POOL: list[Any] = [V.NONE, None, False, True, -1, 0, 0.0, Decimal(0), 0.5, Decimal("0.5"),
                   1, 1.0, Decimal("1.00"), 2, 2.5, 3, 10, float("nan"), "", "0", "a", "b",
                   datetime(2024, 1, 1, tzinfo=UTC), [1], {"a": 1}, RecordID("t", 1),
                   RecordID("t", "x"), RecordID("u", 1)]
OPS = {">": V.greater, ">=": V.greater_equal, "<": V.less, "<=": V.less_equal}


@dataclass(eq=False)
class M:
    """A stand-in materialisation: its bounds as (op, constant)."""

    lo: tuple[str, Any] | None
    hi: tuple[str, Any] | None
    hi_pos: Any = None

    def holds(self, v: Any) -> bool:
        return all(OPS[b[0]](v, b[1]) for b in (self.lo, self.hi) if b is not None)


def _build(r: random.Random, n: int) -> tuple[RangeIndex, list[M]]:
    index = RangeIndex()
    mats = []
    for _ in range(n):
        kind = r.random()
        lo = (r.choice([">", ">="]), r.choice(POOL)) if kind < 0.7 else None
        hi = (r.choice(["<", "<="]), r.choice(POOL)) if kind > 0.4 or lo is None else None
        m = M(lo, hi)
        start = bound(*lo)[1] if lo else None
        end = bound(*hi)[1] if hi else None
        m.hi_pos = end
        index.add(m, start, end)
        mats.append(m)
    return index, mats


def test_stab_and_classify_match_the_operators() -> None:
    for seed in range(30):
        r = random.Random(seed)
        index, mats = _build(r, r.randint(1, 3 * WIDE_SEGMENTS))
        for a in POOL:
            want = {id(m) for m in mats if m.holds(a)}
            assert {id(m) for m in index.stab(position(a))} == want, (seed, a)
            for b in r.sample(POOL, 6):
                stays, left, entered = index.classify(position(a), position(b))
                both = {id(m) for m in mats if m.holds(a) and m.holds(b)}
                assert {id(m) for m in stays} == both
                assert {id(m) for m in left} == want - both
                assert {id(m) for m in entered} == {id(m) for m in mats if m.holds(b)} - both


def test_removal_leaves_the_index_equal_to_one_built_without_the_removed() -> None:
    r = random.Random(7)
    index, mats = _build(r, 80)
    for m in r.sample(mats, 50):
        index.remove(m, bound(*m.lo)[1] if m.lo else None, m.hi_pos)
        mats.remove(m)
    for a in POOL:
        assert {id(m) for m in index.stab(position(a))} == {id(m) for m in mats if m.holds(a)}
    assert len(index.all()) == len(mats)


def test_equality_keys_are_equal_exactly_when_surrealdb_equality_holds() -> None:
    for a in POOL:
        for b in POOL:
            assert (xkey(a) == xkey(b)) == V.equals(a, b), (a, b)
