"""What the database host holds in memory (`GET /debug/memory`).

The host is two heaps in one process: the embedded engine's (Rust: memtable, caches, changefeed
entries) and the host's own Python objects (connections, outboxes, LIVE feeds, statement
counters). Under a steady write load the process grows (issue 31); whether the growth is the
engine's or the host's decides where to look, so this reports the resident set beside the Python
heap's size. `sys.getallocatedblocks()` counts the interpreter's live small blocks at no cost;
a host started with `PYTHONTRACEMALLOC=1` (a diagnosis only: it slows the host) adds the traced
bytes and the source lines holding the most.
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
from typing import Any

from ipc.procmem import rss_bytes


def traced_top(n: int = 15) -> dict[str, Any]:
    """The traced Python heap and the `n` source lines holding the most of it."""
    snap = tracemalloc.take_snapshot()
    return {"bytes": tracemalloc.get_traced_memory()[0],
            "top": [{"where": str(s.traceback[0]), "bytes": s.size, "blocks": s.count}
                    for s in snap.statistics("lineno")[:n]]}


def report(**parts: Any) -> dict[str, Any]:
    """The process's figures plus the caller's own (`parts`: sizes of the host's structures)."""
    out: dict[str, Any] = {
        "rss_bytes": rss_bytes(),
        "python_blocks": sys.getallocatedblocks(),
        "gc_counts": list(gc.get_count()),
        "gc_frozen": gc.get_freeze_count(),
        "gc_threshold": list(gc.get_threshold()),
        **parts,
    }
    if tracemalloc.is_tracing():
        out["traced"] = traced_top()
    return out
