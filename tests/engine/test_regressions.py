"""Replays every kept regression fixture (shrunk failing cases) against engine and SurrealDB."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.codec import load_case
from tests.engine.runner import run_case

FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("*.json"))


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_regression_fixture_agrees_with_surrealdb(path: Path) -> None:
    case = load_case(path)
    mismatch = run_case(case, check_updated=case.check_updated)
    assert mismatch is None, f"{path.name} ({case.note}): {mismatch}"


def test_fixtures_exist() -> None:
    # the directory holds at least the hand-kept cases; an empty glob would test nothing
    assert FIXTURES
