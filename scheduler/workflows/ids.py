"""Record ids and times of the workflow records (shared by the engine, its actions, the views)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from surrealdb import RecordID

__all__ = ["key_of", "ms", "rid", "step_rid"]


def rid(table: str, key: str) -> RecordID:
    return RecordID(table, key)


def key_of(record: Any) -> str:
    """A record id's key as text (the text itself when given text)."""
    return str(record.id) if isinstance(record, RecordID) else str(record)


def ms(at: datetime) -> int:
    """Epoch milliseconds."""
    return int(at.timestamp() * 1000)


def step_rid(run_key: str, step: str) -> RecordID:
    """`_00_step_run:<run key>_<step>`."""
    return RecordID("_00_step_run", f"{run_key}_{step}")
