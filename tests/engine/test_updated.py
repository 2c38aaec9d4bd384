"""`delta.updated` names every member whose own content in the result changed.

"Own content" is the member's dict without the fields that hold other members (those report
their own updates); the comparison is type-exact, as a client sees it (1 -> 1.0 is a change).
A record shown with several different contents in one answer is skipped (ambiguous).
Kept apart from test_differential so a miss here does not hide membership failures.
"""

from __future__ import annotations

import pytest

from tests.engine.gen import make_case
from tests.engine.runner import run_case

SEEDS = range(20_000, 20_120)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_updated_names_every_member_whose_content_changed(seed: int) -> None:
    mismatch = run_case(make_case(seed), check_batch=False, check_results=False,
                        check_updated=True)
    assert mismatch is None, (f"seed {seed}: {mismatch}\n"
                              f"keep it: python -m tests.engine.shrink {seed} --updated")
