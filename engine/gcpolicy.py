"""The garbage collector's settings for a process that holds a view engine (an SSP shard) or
the view registry and edge publication (the SSP hub).

A shard keeps millions of long-lived objects (rows, projections, memberships, windows) and
makes many short-lived ones for every change (deltas, keys, tuples). With CPython's default
first-generation threshold (700 allocations) the collector runs every few changes and each
younger-generation collection promotes survivors that a full collection later walks again.
The engine builds no reference cycles on its hot path (its structures are trees of dicts,
lists and tuples freed by reference counting), so collections find almost nothing: their cost
is pure overhead. `configure` makes them rarer; cyclic garbage is still collected, only later.

`loadtests/bench_engine.py --gc default` measures the difference against the defaults (the
view mix: 13,108 -> 15,333 changes/s on an idle 2-core machine, 2026-11-26). In the hub,
registering 20 large views (90,000 edges) took 3.9 s of its CPU with the defaults and 2.9 s
with these settings (the collector walked its member sets at every few thousand
allocations).
"""

from __future__ import annotations

import gc

__all__ = ["GEN0_THRESHOLD", "configure"]

#: allocations (net of frees) between two first-generation collections (CPython: 700)
GEN0_THRESHOLD = 50_000


def configure() -> None:
    """Apply the engine process's thresholds (older generations keep CPython's ratios)."""
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)

