"""Reproduce a failing differential seed, shrink it and save it as a regression fixture.

    python -m tests.engine.shrink SEED [SEED...] [--long | --family | --updated]

(``--long`` / ``--family``: the long-sequence / one-shape cases of test_differential; ``--updated``: the cases of
test_updated, shrunk and replayed with the ``delta.updated`` check on)

Writes ``tests/engine/fixtures/seed_<SEED>.json``; ``test_regressions.py`` replays it forever.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.engine.codec import dump_case
from tests.engine.gen import make_case, make_family_case
from tests.engine.runner import run_case, shrink

FIXTURES = Path(__file__).parent / "fixtures"


def save_fixture(seed: int, long: bool = False, updated: bool = False,
                 family: bool = False) -> Path | None:
    """Shrink the case of ``seed`` if it fails; return the fixture path (None if it passes)."""
    if family:
        case = make_family_case(seed)
    else:
        case = make_case(seed, views=6, writes=90) if long else make_case(seed)
    case.check_updated = updated
    mismatch = run_case(case, check_updated=updated)
    if mismatch is None:
        return None
    small = shrink(case)
    small.note = f"seed {seed}: {run_case(small, check_updated=updated)}"
    path = FIXTURES / f"seed_{seed}.json"
    path.write_text(dump_case(small) + "\n", encoding="utf-8")
    return path


def main(argv: list[str]) -> int:
    """Entry point: one fixture per failing seed."""
    long, updated, family = "--long" in argv, "--updated" in argv, "--family" in argv
    for arg in (a for a in argv if not a.startswith("--")):
        path = save_fixture(int(arg), long, updated, family)
        print(f"seed {arg}: {'passes' if path is None else f'saved {path}'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
