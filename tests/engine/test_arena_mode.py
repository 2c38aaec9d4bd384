"""The engine with a file-backed row arena answers exactly as SurrealDB does (and as without)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.gen import make_case
from tests.engine.runner import run_case


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40_000, 40_030))
def test_engine_with_arena_dir_agrees_with_surrealdb(seed: int, tmp_path: Path) -> None:
    mismatch = run_case(make_case(seed), check_batch=False,
                        engine_kwargs={"arena_dir": str(tmp_path), "segment_mb": 1})
    assert mismatch is None, f"seed {seed}: {mismatch}"
    assert any(tmp_path.iterdir()), "the arena wrote nothing to arena_dir"
