"""The pure rules of the workflow engine: cron due times and the catch-up bound
(`scheduler.workflows.clock`), run and step transitions (`scheduler.workflows.runs`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from scheduler.workflows import clock, runs
from scheduler.workflows.errors import CODES, run_error

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def hm(ds: list[datetime]) -> list[str]:
    return [d.strftime("%H:%M:%S") for d in ds]


def test_due_times_follow_the_time_zone_and_seconds_fields() -> None:
    assert clock.next_due("0 3 * * *", "Europe/Berlin", T0) == T0 + timedelta(hours=2)
    assert clock.next_due("0 3 * * *", "UTC", T0) == T0 + timedelta(hours=3)
    assert clock.next_due("*/10 * * * * *", "UTC", T0) == T0 + timedelta(seconds=10)
    dues, more = clock.due_between("* * * * *", "UTC", T0, T0 + timedelta(minutes=3))
    assert hm(dues) == ["00:01:00", "00:02:00", "00:03:00"] and not more
    dues, more = clock.due_between("* * * * * *", "UTC", T0, T0 + timedelta(hours=1), cap=10)
    assert len(dues) == 10 and more


def test_on_time_fires_are_never_dropped_whatever_the_bound() -> None:
    p = clock.plan("* * * * *", "UTC", T0, T0 + timedelta(seconds=62), 0)
    assert hm(p.fire) == ["00:01:00"] and p.late == [False] and p.missed_count == 0
    # a pass a few seconds behind a per-second schedule fires every due time it finds
    p = clock.plan("* * * * * *", "UTC", T0, T0 + timedelta(seconds=3), 0)
    assert len(p.fire) == 3 and p.late == [False] * 3 and p.missed_count == 0


def test_an_outage_fires_the_newest_catch_up_and_records_the_rest_as_missed() -> None:
    now = T0 + timedelta(minutes=10, seconds=30)  # down since 00:00, ten minutes missed
    p = clock.plan("* * * * *", "UTC", T0, now, 2)
    assert hm(p.fire) == ["00:09:00", "00:10:00"] and p.late == [True, True]
    assert p.missed_count == 8
    assert hm([p.missed_since, p.missed_until]) == ["00:01:00", "00:08:00"]  # type: ignore[list-item]
    p = clock.plan("* * * * *", "UTC", T0, now, 0)
    assert p.fire == [] and p.missed_count == 10
    p = clock.plan("* * * * * *", "UTC", T0, T0 + timedelta(days=3), 1)
    assert p.count_truncated and p.missed_count == clock.SCAN_CAP
    # on time: the six due times within 5 s of now; one catch-up before them; the rest missed
    assert p.missed_until == T0 + timedelta(days=3) - timedelta(seconds=7)
    assert len(p.fire) == 7 and p.late == [True] + [False] * 6
    assert clock.plan("0 3 * * *", "UTC", T0, T0 + timedelta(hours=1), 1).fire == []


@dataclass
class S:
    status: str = runs.BLOCKED
    depends_on: list[str] = field(default_factory=list)


def diamond(**status: str) -> dict[str, S]:
    d = {"a": S(), "b": S(depends_on=["a"]), "c": S(depends_on=["a"]),
         "d": S(depends_on=["b", "c"]), "e": S(depends_on=["d"])}
    for k, v in status.items():
        d[k].status = v
    return d


def test_steps_start_when_every_dependency_completed() -> None:
    assert runs.ready(diamond()) == ["a"]
    assert runs.ready(diamond(a=runs.COMPLETED)) == ["b", "c"]
    assert runs.ready(diamond(a=runs.COMPLETED, b=runs.COMPLETED, c=runs.RUNNING)) == []
    assert runs.ready(diamond(a=runs.COMPLETED, b=runs.COMPLETED, c=runs.COMPLETED)) == ["d"]


def test_a_failed_step_dooms_its_dependants_transitively_but_not_other_branches() -> None:
    steps = diamond(a=runs.COMPLETED, b=runs.FAILED, c=runs.RUNNING)
    assert runs.doomed(steps) == {"d": ["b"], "e": ["d"]}
    assert runs.ready(steps) == []
    assert runs.outcome(steps, False) is None  # c still runs
    for k in ("c",):
        steps[k].status = runs.COMPLETED
    for k in ("d", "e"):
        steps[k].status = runs.SKIPPED
    assert runs.outcome(steps, False) == ("failed", ["b"])
    assert runs.outcome(steps, True) == ("killed", ["b"])
    done = diamond(**dict.fromkeys("abcde", runs.COMPLETED))
    assert runs.outcome(done, False) == ("completed", [])


def test_job_ids_are_deterministic_per_attempt_and_errors_are_structured() -> None:
    assert runs.job_key("k1", "load", 0) == "wf_k1_load"
    assert runs.job_key("k1", "load", 2) == "wf_k1_load_r2"
    assert run_error("step_failed", "x", failed_steps=["a"], since=None) == {
        "code": "step_failed", "message": "x", "failed_steps": ["a"]}
    assert len(CODES) == 14 and len(set(CODES)) == 14
