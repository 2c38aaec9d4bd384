"""SurrealDB value kinds the SDK has no type for: NONE, and a fast RecordID builder.

Part of :mod:`engine.values` (import from there).
"""

from __future__ import annotations

from typing import Any, Self

from surrealdb import RecordID


class NoneType:
    """The type of :data:`NONE`, SurrealDB's "no value" (an absent field), distinct from NULL."""

    _instance: NoneType | None = None

    def __new__(cls) -> Self:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance  # type: ignore[return-value]

    def __repr__(self) -> str:
        return "NONE"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        # Pickling (multiprocessing) must give back the singleton, so identity checks hold.
        return "NONE"


NONE: Any = NoneType()
"""SurrealDB NONE (absent field). Python ``None`` is NULL."""


class ValueSyntaxError(ValueError):
    """A SurrealQL value literal (e.g. a record id text) could not be parsed."""


_new_object = object.__new__


def make_record_id(table: str, key: Any) -> RecordID:
    """Build a ``surrealdb.RecordID`` without its constructor's per-call import (5x faster)."""
    rid = _new_object(RecordID)
    rid.table_name = table
    rid.id = key
    return rid
