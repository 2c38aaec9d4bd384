"""This process's resident set, read from /proc (the one reader the SSP's heartbeat and the
database host's `/debug/memory` share)."""

from __future__ import annotations

import os


def rss_bytes() -> int:
    """This process's resident set in bytes (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0
