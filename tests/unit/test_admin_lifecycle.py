"""SSP lifecycle incidents (scheduler.admin.lifecycle) from the scheduler's SSP events and the
entries' states, over a stand-in for the cluster adapter."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from scheduler.admin.cluster import SspInfo
from scheduler.admin.lifecycle import Lifecycle
from scheduler.incidents import IncidentStore


def info(ssp_id: str, state: str, queued: int = 0, flagged: str | None = None,
         publication: dict[str, Any] | None = None, trusted: bool = True) -> SspInfo:
    return SspInfo(id=ssp_id, url="http://x", state=state, flagged=flagged, clean=False,
                   registered_at=1.0, registered_at_ms=1, views=0, query_count=0,
                   cpu_usage=None, memory_usage=None, version="0.1.0",
                   last_heartbeat_secs=0.1, queued=queued, sent_seq=0, acked_seq=None,
                   send_failures=0, publication=publication, trusted=trusted)


class FakeCluster:
    scheduler_id = "sched-1"
    version = "0.1.0"

    def __init__(self, secret: str | None = "a-secret") -> None:
        # with a secret every SSP proved it holds it when it registered (all trusted)
        self.cfg = SimpleNamespace(auth_secret=secret)
        self.incidents = IncidentStore(None)
        self.entries: list[SspInfo] = []
        self.hooks: list[Any] = []
        self.sched_state = "ready"

    def on_ssp_event(self, fn: Any) -> None:
        self.hooks.append(fn)

    def ssps(self) -> list[SspInfo]:
        return list(self.entries)

    def ssp(self, ssp_id: str) -> SspInfo | None:
        return next((e for e in self.entries if e.id == ssp_id), None)

    def state(self) -> str:
        return self.sched_state

    def emit(self, *a: str) -> None:
        for h in self.hooks:
            h(*a)


def kinds(c: FakeCluster, state: str) -> list[str]:
    return [i["kind"] for i in c.incidents.query(state=state)[0]]


def test_lag_opens_keeps_the_maxima_and_recovers_when_ready() -> None:
    c = FakeCluster()
    life = Lifecycle(c)  # type: ignore[arg-type]
    c.entries = [info("a", "ready")]
    life.poll()
    pub = {"pending_operations": 900, "pending_bytes": 90_000, "oldest_age_ms": 1500.0,
           "worst_views": [{"view_id": f"query:v{i}"} for i in range(12)]}
    c.entries = [info("a", "lagging", queued=12_000, publication=pub)]
    life.poll()
    c.entries = [info("a", "lagging", queued=15_000)]
    life.poll()
    assert kinds(c, "open") == ["ssp_lagging"]
    c.entries = [info("a", "ready")]
    life.poll()
    (inc,) = c.incidents.query(state="recovered")[0]
    assert inc["max_buffered_events"] == 15_000 and inc["max_publication_operations"] == 900
    assert len(inc["publication"]["worst_views"]) == 8


def test_heartbeat_loss_and_bootstrap_failures_recover_on_ready() -> None:
    c = FakeCluster()
    life = Lifecycle(c)  # type: ignore[arg-type]
    c.emit("a", "removed", "no heartbeat for 15.2s")
    c.emit("b", "flagged", "bootstrap not finished within 120s")
    c.emit("c", "reregistered", "bootstrapping")
    c.emit("d", "flagged", "operator restart (op-1)")  # told by the operation itself
    c.emit("e", "reregistered", "ready")
    assert sorted(kinds(c, "open")) == ["ssp_bootstrap_failed", "ssp_bootstrap_failed",
                                        "ssp_heartbeat_lost"]
    assert kinds(c, "recorded") == ["ssp_reregistered"]
    c.entries = [info(x, "ready") for x in "abc"]
    life.poll()
    assert kinds(c, "open") == [] and len(kinds(c, "recovered")) == 3


def test_a_reclone_after_start_is_recorded_but_not_the_start_up_clone() -> None:
    c = FakeCluster()
    c.sched_state = "cloning"
    life = Lifecycle(c)  # type: ignore[arg-type]
    life.poll()
    assert kinds(c, "open") == []
    c.sched_state = "ready"
    life.poll()
    c.sched_state = "cloning"
    life.poll()
    assert kinds(c, "open") == ["scheduler_reclone"]
    c.sched_state = "ready"
    life.poll()
    assert kinds(c, "recovered") == ["scheduler_reclone"]
    assert replace(info("a", "ready"), flagged="x").serving is False


def test_without_a_secret_failures_of_ssps_never_ready_fold_into_one_incident() -> None:
    # Anyone on the private network may register without SVC_AUTH_SECRET: forty fake SSPs
    # that never bootstrap must not open forty incidents (nor push real ones out).
    c = FakeCluster(secret=None)
    life = Lifecycle(c)  # type: ignore[arg-type]
    c.entries = [info("real", "ready", trusted=True)]
    life.poll()
    for i in range(40):
        c.entries.append(info(f"fake{i}", "bootstrapping", trusted=False))
        c.emit(f"fake{i}", "flagged", "bootstrap not finished within 120s")
        c.entries.pop()
        c.emit(f"fake{i}", "removed", "its URL never answered a health poll")
    (agg,) = c.incidents.query()[0]
    assert agg["kind"] == "ssp_unverified" and agg["component"] == "scheduler:sched-1"
    assert agg["event_count"] == 80 and len(agg["events"]) <= 64
    # a trusted SSP still gets its own incident
    c.emit("real", "removed", "no heartbeat for 16.0s")
    assert sorted(kinds(c, "open")) == ["ssp_heartbeat_lost", "ssp_unverified"]
