"""The row-version rule shared by every copy of the data (engine, scheduler replica)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.values import NONE


def is_stale(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """True when the incoming row's ``_00_rv`` is older than the stored row's.

    A missing or NULL version on either side never makes an event stale (rows written before
    the schema hooks existed carry none); versions that do not compare are not stale either.
    """
    new_rv = new.get("_00_rv", NONE)
    old_rv = old.get("_00_rv", NONE)
    if new_rv is NONE or new_rv is None or old_rv is NONE or old_rv is None:
        return False
    try:
        return bool(new_rv < old_rv)
    except TypeError:
        return False
