"""The row-version rule shared by every copy of the data (engine, SSP hub, scheduler replica)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.values import NONE


def rv_is_stale(new_rv: Any, old_rv: Any) -> bool:
    """True when an incoming row version `new_rv` is older than the stored `old_rv`.

    A missing or NULL version on either side never makes an event stale: rows written before
    the schema hooks existed carry none, and an event posted by hand to `/ingest` need not
    carry one (the spec names `record._00_rv` only for tables the CLI hooked). Versions that do
    not compare are not stale either.
    """
    if new_rv is NONE or new_rv is None or old_rv is NONE or old_rv is None:
        return False
    if isinstance(new_rv, bool) or isinstance(old_rv, bool):
        return False
    try:
        return bool(new_rv < old_rv)
    except TypeError:
        return False


def is_stale(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """True when the incoming row's ``_00_rv`` is older than the stored row's (see
    :func:`rv_is_stale`)."""
    return rv_is_stale(new.get("_00_rv", NONE), old.get("_00_rv", NONE))
