"""The `drift` object of /health/snapshot has exactly the spec's fields (no database needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scheduler.config import DriftConfig
from scheduler.drift import DriftChecker
from scheduler.replica import Replica


async def test_the_drift_object_has_exactly_the_spec_fields(tmp_path: Path) -> None:
    async def submit(events: list[dict[str, Any]]) -> list[int]:
        return []

    async def reclone(reason: str) -> None:
        return None

    with Replica.open(tmp_path / "r.sqlite") as rep:
        checker = DriftChecker(rep, None, submit, reclone,  # type: ignore[arg-type]
                               DriftConfig(auto_reclone=False, repair_max_rows=7), lambda: False)
        st = checker.status()
    assert set(st) == {"enabled", "auto_reclone_enabled", "checked_at", "tables", "mismatched",
                       "stuck", "last_auto_reclone", "auto_reclones", "last_auto_repair",
                       "auto_repairs", "repair_max_rows", "backfilling", "last_error"}
    assert st["enabled"] is True and st["auto_reclone_enabled"] is False
    assert st["repair_max_rows"] == 7 and st["checked_at"] is None and st["tables"] == {}
