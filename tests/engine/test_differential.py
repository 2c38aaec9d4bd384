"""Differential test: random rows, views and writes; the engine must agree with SurrealDB.

Each seed is one case (about 5 views x 25 writes, checked after every write, plus the batch and
hash checks of ``runner.run_case``). A failure prints the shrunk case as JSON; keep it with
``python -m tests.engine.shrink SEED`` so ``test_regressions.py`` replays it forever.
"""

from __future__ import annotations

import pytest

from tests.engine.codec import Case, dump_case
from tests.engine.gen import make_case, make_family_case
from tests.engine.runner import run_case, shrink

SEEDS = range(400)
LONG_SEEDS = range(10_000, 10_050)  # fewer cases, long write sequences (state drifts further)
FAMILY_SEEDS = range(50_000, 50_150)  # many views of one shape, different parameters
_SHRINK_BUDGET = [3]  # shrinking is slow: only the first few failures of a run are shrunk


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_engine_agrees_with_surrealdb_after_every_write(seed: int) -> None:
    _check(seed, make_case(seed))


@pytest.mark.slow
@pytest.mark.parametrize("seed", LONG_SEEDS)
def test_engine_agrees_with_surrealdb_over_long_write_sequences(seed: int) -> None:
    _check(seed, make_case(seed, views=6, writes=90))


@pytest.mark.slow
@pytest.mark.parametrize("seed", FAMILY_SEEDS)
def test_views_sharing_one_shape_agree_with_surrealdb(seed: int) -> None:
    _check(seed, make_family_case(seed))


def _check(seed: int, case: Case) -> None:
    mismatch = run_case(case)
    if mismatch is None:
        return
    detail = ""
    if _SHRINK_BUDGET[0] > 0:
        _SHRINK_BUDGET[0] -= 1
        small = shrink(case)
        detail = f"\nshrunk case ({run_case(small)}):\n{dump_case(small)}"
    pytest.fail(f"seed {seed}: {mismatch}{detail}\n"
                f"keep it: python -m tests.engine.shrink {seed}"
                f"{' --long' if len(case.writes) > 30 else ''}"
                f"{' --family' if case.note.startswith('family') else ''}", pytrace=False)
