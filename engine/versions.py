"""The row-version rule shared by every copy of the data (engine, SSP hub, scheduler replica)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.values import NONE


def rv_is_stale(new_rv: Any, old_rv: Any) -> bool:
    """True when an incoming row version `new_rv` is older than the stored `old_rv`.

    A stored row without a version (written before the schema hooks existed) never makes an
    event stale. An incoming row WITHOUT a version over a stored row WITH one is stale: once a
    table is hooked every write carries a version, so a version-less row can only be a read
    taken before the hooks (a backfill or repair page read before a concurrent write), and
    applying it would roll the row back. Versions that do not compare are not stale.
    """
    if old_rv is NONE or old_rv is None or isinstance(old_rv, bool):
        return False
    if new_rv is NONE or new_rv is None:
        return True
    try:
        return bool(new_rv < old_rv)
    except TypeError:
        return False


def is_stale(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """True when the incoming row's ``_00_rv`` is older than the stored row's (see
    :func:`rv_is_stale`)."""
    return rv_is_stale(new.get("_00_rv", NONE), old.get("_00_rv", NONE))
