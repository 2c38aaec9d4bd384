"""The garbage collector around a view engine: paused inside the engine's entry points, what
they keep moved out of its reach, and the settings of a process that holds an engine (an
SSP shard) or the view registry and edge publication (the SSP hub).

A shard keeps millions of long-lived objects (rows, projections, memberships, windows) and
makes many short-lived ones for every change (deltas, keys, tuples). The engine builds no
reference cycles on its hot path (its structures are trees of dicts, lists and tuples freed by
reference counting), so collections find almost nothing: their cost is pure overhead, and a
full collection walks every object the process holds (1.2-1.4 s inside a registration of
issue 33's shop mix with CPython's default thresholds).

Two measures, one for any process and one for the engine's own:

- :func:`pause` / :func:`resume` bracket every entry point of :class:`engine.ViewEngine`
  (load, register, unregister, the ingest calls, complete): no collection starts inside one,
  whatever the process's thresholds. When the calls have kept more than
  :data:`FREEZE_AFTER` new objects since the last time, :func:`resume` moves every object
  of the process into the collector's permanent generation (``gc.freeze()``): later
  collections no longer walk them, so a full collection costs what the process allocated
  since, not what it holds. Frozen objects are still freed by reference counting; only
  cyclic garbage among them would stay (the engine makes none: ``tests/unit/
  test_engine_gc.py`` tears down every kind of view and finds no cycle).
- :func:`configure` (the shards and the hub) makes first-generation collections rarer for
  the code outside the engine's calls. `loadtests/bench_engine.py --gc default` measures
  the difference against the defaults (the view mix: 13,108 -> 15,333 changes/s on an idle
  2-core machine, 2026-11-26). In the hub, registering 20 large views (90,000 edges) took
  3.9 s of its CPU with the defaults and 2.9 s with these settings.
"""

from __future__ import annotations

import gc

__all__ = ["FREEZE_AFTER", "GEN0_THRESHOLD", "configure", "pause", "resume"]

#: allocations (net of frees) between two first-generation collections (CPython: 700)
GEN0_THRESHOLD = 50_000
#: new objects kept by the engine's calls before they are moved out of the collector's reach
FREEZE_AFTER = 20_000

_kept = [0]  # objects kept by the calls since the last freeze (a list: compiled or not)
_disable = gc.disable
_enable = gc.enable
_isenabled = gc.isenabled
_count = gc.get_count


def configure() -> None:
    """Apply the engine process's thresholds (older generations keep CPython's ratios)."""
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)


def pause() -> int:
    """Stop the collector for an entry point's call; the token goes to :func:`resume` (-1
    when the collector was already stopped, by the caller or by an outer call)."""
    if _isenabled():
        _disable()
        return _count()[0]
    return -1


def resume(token: int) -> None:
    """End an entry point's call: freeze what the calls kept once it adds up, and start the
    collector again if :func:`pause` stopped it."""
    if token < 0:
        return
    # while the collector is stopped the first generation's count is exactly the objects
    # allocated and not yet freed since `pause`
    kept = _kept[0] + _count()[0] - token
    if kept > FREEZE_AFTER:
        gc.freeze()  # also sets the generations' counts to zero
        kept = 0
    _kept[0] = max(kept, 0)
    _enable()
