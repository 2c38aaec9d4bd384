"""Unix time in milliseconds: the unit of every `*_at` field the services write to the
database and to their state files (job rows, incidents, operations, backups, pool machines).
Here, at the bottom of the layers, so every package that writes one shares it."""

from __future__ import annotations

import time


def now_ms() -> int:
    """Unix time in milliseconds."""
    return int(time.time() * 1000)
