"""The admin plane's chart history (`scheduler/admin/history.py`): bounded rings, the ingest
rate between samples, the day ring's coarser step, the route's range check."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from dbclient.clock import now_ms
from scheduler.admin.cluster import SspInfo
from scheduler.admin.history import DAY_STEP_SECS, FILE, HOUR_STEP_SECS, History


class _Cluster:
    """The two reads the history takes from the scheduler (a seam, not the scheduler)."""

    def __init__(self) -> None:
        self.ingested = 0
        self.acked: int | None = None

    def scheduler_status(self) -> dict[str, Any]:
        return {"ingested": self.ingested}

    def ssps(self) -> list[SspInfo]:
        return [SspInfo(id="s1", url="http://s1", state="ready", flagged=None, clean=False,
                        registered_at=0.0, registered_at_ms=0, views=0, query_count=0,
                        cpu_usage=None, memory_usage=None, version=None,
                        last_heartbeat_secs=None, queued=3, sent_seq=50,
                        acked_seq=self.acked, send_failures=0)]


class _Presence:
    def rollup(self) -> dict[str, Any]:
        return {"views": 7}


def test_rates_lag_and_the_rings_bounds() -> None:
    c = _Cluster()
    hist = History(c, _Presence())  # type: ignore[arg-type]
    step = HOUR_STEP_SECS * 1000
    hist.sample(t=0)
    c.ingested, c.acked = 100, 40
    hist.sample(t=step)
    c.ingested = 5  # the counter went back (a restart): no rate, not a negative one
    hist.sample(t=2 * step)
    hour = hist.body("hour")
    assert hour["step_secs"] == HOUR_STEP_SECS and hour["capacity"] == 360
    got = [(x["t"], x["ingest_per_sec"], x["ssps"]["s1"]["lag"]) for x in hour["samples"]]
    assert got == [(0, None, None), (step, 10.0, 10), (2 * step, None, 10)]
    assert hour["samples"][0]["live_views"] == 7 and hour["samples"][0]["ssps"]["s1"]["queued"] == 3
    # the day ring takes one sample in DAY_STEP_SECS / HOUR_STEP_SECS, rate over that span
    per = DAY_STEP_SECS // HOUR_STEP_SECS
    for i in range(3, 2 * per + 1):
        c.ingested += 60
        hist.sample(t=i * step)
    day = hist.body("day")["samples"]
    assert [x["t"] for x in day] == [0, per * step, 2 * per * step]
    assert day[2]["ingest_per_sec"] == 6.0  # 60 events per 10 s
    for i in range(400):
        hist.sample(t=(100 + i) * step)
    assert len(hist.body("hour")["samples"]) == 360  # bounded: the oldest went


def test_the_rings_are_read_back_without_what_fell_out_of_their_span(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    c = _Cluster()
    now = now_ms()
    step = HOUR_STEP_SECS * 1000
    first = History(c, _Presence(), tmp_path)  # type: ignore[arg-type]
    # two hours of samples: the hour ring keeps the last hour's, the day ring all of its own
    times = [now - 7200_000 + i * step for i in range(721)]
    for t in times:
        c.ingested += 10
        first.sample(t=t)
    first.save()
    assert (tmp_path / FILE).exists()
    again = History(c, _Presence(), tmp_path)  # type: ignore[arg-type]
    hour = [x["t"] for x in again.body("hour")["samples"]]
    assert hour == [t for t in times if t > now - 3600_000]
    assert [x["t"] for x in again.body("day")["samples"]] == [
        x["t"] for x in first.body("day")["samples"]]
    # the first sample after a restart has no rate (the counter started again)
    again.sample(t=now + step)
    assert again.body("hour")["samples"][-1]["ingest_per_sec"] is None
    # a file that cannot be read starts empty, said once in the log
    (tmp_path / FILE).write_text("{not json")
    with caplog.at_level(logging.ERROR):
        empty = History(c, _Presence(), tmp_path)  # type: ignore[arg-type]
    assert empty.body("hour")["samples"] == [] and "chart history" in caplog.text
