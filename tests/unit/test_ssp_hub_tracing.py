"""ssp.hub.introspection's heap tracing (`SVC_SSP_HUB_TRACEMALLOC`): off unless asked, starts
at the first `/debug/memory` call, and names what grew since the second."""

from __future__ import annotations

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
