"""ssp.hub.introspection's heap tracing (`SVC_SSP_HUB_TRACEMALLOC`): off unless asked, starts
at the first `/debug/memory` call, and names what grew since the second."""

from __future__ import annotations

import gc
import sys
import tracemalloc
from collections.abc import Iterator

import pytest

from ssp.hub import introspection


@pytest.fixture
def fresh() -> Iterator[None]:
    introspection._trace_frames = 0
    introspection._traced_baseline = None
    yield
    tracemalloc.stop()
    introspection._trace_frames = 0
    introspection._traced_baseline = None


def test_off_unless_asked(fresh: None) -> None:
    introspection.start_hub_tracing({})
    assert introspection.traced_top() is None and not tracemalloc.is_tracing()
    introspection.start_hub_tracing({"SVC_SSP_HUB_TRACEMALLOC": "x"})
    assert introspection.traced_top() is None


def test_names_the_traceback_that_grew(fresh: None) -> None:
    introspection.start_hub_tracing({"SVC_SSP_HUB_TRACEMALLOC": "4"})
    assert not tracemalloc.is_tracing()  # not at start: a traced start is slow
    assert introspection.traced_top() == {"started": True}
    first = introspection.traced_top()
    assert first is not None and first["bytes"] > 0 and "grown" not in first
    kept = [bytearray(1000) for _ in range(500)]  # ~0.5 MB that stays
    later = introspection.traced_top()
    assert later is not None and len(kept) == 500
    where, size, count = later["grown"][0]
    assert where[0].endswith(f"test_ssp_hub_tracing.py:{_line_of('bytearray(1000)')}")
    assert size >= 500_000 and count >= 500


def _line_of(text: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if text in line and "kept" in line)


class _Keeper:
    """Stands in for a hub structure that keeps what it is given."""

    def __init__(self) -> None:
        self.kept: dict[str, _Held] = {}


class _Held:
    pass


def test_object_counts_name_a_growing_structure_and_its_holder() -> None:
    """`/debug/memory?objects=N&holders=T` without tracing: the most numerous types, the
    longest containers with what holds them, and the chain that holds objects of type T."""
    keeper = _Keeper()
    keeper.kept.update((f"k{i}", _Held()) for i in range(30_000))
    out = introspection.object_counts(10, "_Held")
    assert ("_Held", 30_000) in out["top"]
    assert out["gc"]["enabled"] is True and len(out["gc"]["counts"]) == 3
    assert out["largest"][0][0] == 30_000, out["largest"]
    assert out["largest"][0][1] == "dict[30000]"
    assert out["largest"][0][2] in ("_Keeper", "_Keeper.__dict__"), out["largest"]
    chains = dict(out["holders"]["chains"])
    assert out["holders"]["type"] == "_Held"
    assert sum(n for chain, n in chains.items() if chain.startswith("dict[30000] <- _Keeper")) \
        == 20, chains
    assert introspection.object_counts(3)["top"] and "holders" not in introspection.object_counts(3)


def test_pymalloc_figures_count_arenas_and_restore_stderr(capfd: pytest.CaptureFixture[str]
                                                          ) -> None:
    """The allocator's arenas beside its live bytes, read without leaving fd 2 redirected."""
    before = introspection.pymalloc_figures()
    kept = [object() for _ in range(200_000)]  # ~3 MB of 16-byte blocks
    after = introspection.pymalloc_figures()
    assert set(before) == {"arenas", "allocated_bytes", "available_bytes"}
    assert after["allocated_bytes"] - before["allocated_bytes"] >= 3_000_000
    # (free pools of arenas already held may take them: arenas need not grow, but hold them)
    assert after["arenas"] << 20 >= after["allocated_bytes"] and len(kept) == 200_000
    sys.stderr.write("still here\n")
    sys.stderr.flush()
    assert capfd.readouterr().err == "still here\n"


GROWING: dict[str, list[int]] = {}


@pytest.mark.parametrize("frozen", [False, True], ids=["unfrozen", "after-gc-freeze"])
def test_object_counts_name_a_module_level_container(frozen: bool) -> None:
    # (lists as values: CPython stops tracking a dict that holds only atomic values, and the
    # census sees only what the collector tracks). After `gc.freeze()`, as in a hub after
    # start-up, the module's namespace is in the permanent generation, where
    # `gc.get_referrers` does not look; the empty dict was untracked then, so it is not
    # frozen and shows once it fills.
    global GROWING
    GROWING = {}  # empty: untracked until it holds a list, so a freeze leaves it out
    was_frozen = gc.get_freeze_count()
    if frozen:
        gc.freeze()
    GROWING.update((f"g{i}", [i]) for i in range(40_000))
    try:
        largest = introspection.object_counts(3)["largest"]
        assert [40_000, "dict[40000]", f"{__name__}.GROWING"] in largest, largest
    finally:
        GROWING.clear()
        if frozen and not was_frozen:
            gc.unfreeze()
