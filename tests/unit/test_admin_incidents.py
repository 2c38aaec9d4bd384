"""The incident store (scheduler.incidents): merging, states, limits, the history file,
older files, storage errors and sanitised summaries."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from pathlib import Path

from maintenance.backends import incident_record
from scheduler.incidents import IncidentStore, sanitize

NOW = 1_800_000_000_000


class Clock:
    def __init__(self, t: int = 1_800_000_000_000) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


def test_a_change_merges_by_id_and_moves_the_state(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path)
    t = store.clock()
    opened = incident_record("inc-1", "pay", "backend_down", "warning", "open", "down",
                             started_at=t, at=t, ended_at=None, source="s")
    store.record(opened)
    store.record(incident_record("inc-1", "pay", "backend_down", "warning", "recovered", "up",
                                 started_at=t, at=t + 5, ended_at=t + 5, source="s"))
    inc = store.get("inc-1")
    assert inc is not None and inc["state"] == "recovered" and inc["ended_at"] == t + 5
    assert [e["state"] for e in inc["events"]] == ["open", "recovered"]
    assert inc["event_count"] == 2


def test_open_incidents_are_interrupted_by_the_next_process(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path)
    iid = store.open("ssp:a", "ssp_lagging", "lagging")
    done = store.note("scheduler:x", "scheduler_started", "started")
    store.shutdown()
    again = IncidentStore(tmp_path)
    inc = again.get(iid)
    assert inc is not None and inc["state"] == "interrupted" and inc["ended_at"] is not None
    assert inc["events"][-1]["state"] == "interrupted"
    assert again.get(done)["state"] == "recorded"  # type: ignore[index]


def test_events_keep_the_first_and_the_newest(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path)
    iid = store.open("c", "k", "event 0")
    for i in range(1, 100):
        store.event(iid, f"event {i}")
    inc = store.get(iid)
    assert inc is not None and len(inc["events"]) == 64 and inc["event_count"] == 100
    assert inc["events"][0]["summary"] == "event 0"
    assert [e["summary"] for e in inc["events"][1:3]] == ["event 37", "event 38"]
    assert inc["events"][-1]["summary"] == "event 99"


def test_retention_by_age_and_count_keeps_open_incidents(tmp_path: Path) -> None:
    clock = Clock()
    store = IncidentStore(tmp_path, clock=clock, max_incidents=5)
    old = store.note("c", "k", "old")
    still_open = store.open("c", "k", "open and old")
    clock.t += 31 * 86_400_000
    items, total = store.query()
    assert store.get(old) is None and store.get(still_open) is not None and total == 1
    for i in range(10):
        store.note("c", "k", f"n{i}")
    items, total = store.query(limit=200)
    assert total == 5 and store.get(still_open) is not None
    assert [i["events"][0]["summary"] for i in items][:2] == ["n9", "n8"]  # newest first


def test_the_file_stays_under_its_size_cap(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path, max_bytes=20_000)
    for i in range(200):
        store.note("c", "k", "x" * 200 + str(i))
    store.flush()
    size = (tmp_path / "incidents.json").stat().st_size
    assert size <= 20_000
    kept = json.loads((tmp_path / "incidents.json").read_text())["incidents"]
    assert 0 < len(kept) < 200 and kept[-1]["events"][0]["summary"].endswith("199")


def test_an_older_file_without_optional_fields_loads(tmp_path: Path) -> None:
    (tmp_path / "incidents.json").write_text(json.dumps({"incidents": [
        {"id": "inc-old", "component": "pay", "kind": "backend_down", "state": "recovered",
         "started_at": NOW, "events": [{"at": NOW, "summary": "down"}]},
        {"id": "inc-bare"}, {"no": "id"}]}))
    store = IncidentStore(tmp_path, clock=Clock())
    old = store.get("inc-old")
    assert old is not None and old["severity"] == "warning" and old["ended_at"] is None
    assert old["max_buffered_events"] == 0 and old["events"][0]["operation_id"] is None
    assert old["events"][0]["state"] == "recovered"
    assert store.get("inc-bare") is not None and store.summary()["total"] == 2


def test_the_legacy_jsonl_lines_are_imported_once(tmp_path: Path) -> None:
    lines = [incident_record("inc-9", "pay", "backend_down", "warning", s, s,
                             started_at=NOW, at=t, ended_at=None if s == "open" else t,
                             source="s")
             for s, t in (("open", NOW), ("recovered", NOW + 2))]
    (tmp_path / "incidents.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    store = IncidentStore(tmp_path, clock=Clock())
    assert store.get("inc-9")["state"] == "recovered"  # type: ignore[index]
    assert not (tmp_path / "incidents.jsonl").exists()
    assert (tmp_path / "incidents.jsonl.imported").exists()
    store.shutdown()
    assert IncidentStore(tmp_path, clock=Clock()).summary()["total"] == 1


def test_a_write_failure_surfaces_as_storage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = IncidentStore(blocker)  # its "directory" is a file: every write fails
    store.note("c", "k", "x")
    assert "cannot write" in (store.summary()["storage_error"] or "")
    store.path = tmp_path / "incidents.json"
    store.note("c", "k", "y")
    assert store.summary()["storage_error"] is None


async def test_flushes_at_most_once_per_second(tmp_path: Path) -> None:
    """Changes are written at most once per flush interval (0.3 s here), however long the
    50 changes take on a busy machine: consecutive writes are an interval apart. (The count
    of writes was bounded before, which assumed the changes took about 0.5 s.)"""
    store = IncidentStore(tmp_path, flush_interval=0.3)
    at: list[float] = []
    real = store.flush

    def counting() -> bool:
        at.append(time.monotonic())
        return real()

    store.flush = counting  # type: ignore[method-assign]
    for i in range(50):
        store.note("c", "k", str(i))
        await asyncio.sleep(0.01)
    # the last change is written one interval after the write before it, at the latest
    deadline = time.monotonic() + 30  # only stops a hang
    while len(json.loads((tmp_path / "incidents.json").read_text())["incidents"]) < 50:
        assert time.monotonic() < deadline, "the last changes were never written"
        await asyncio.sleep(0.05)
    assert at and len(at) < 50
    # asyncio may run a timer up to its clock's resolution early
    assert all(b - a >= 0.3 - 0.01 for a, b in itertools.pairwise(at)), at


def test_summaries_hold_no_sql_bindings_or_credentials() -> None:
    secret = "sup3r-s3cret-value"
    raw = (f"query failed: SELECT * FROM user WHERE pass = 'hunter2' AND token = $tok; "
           f"with $tok = {secret} via http://admin:{secret}@db.local:8000/rpc "
           f"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.abc password=pw123 "
           f"vars {{'q': 'x', 'n': {{'k': 1}}}}")
    out = sanitize(raw, [secret])
    for leaked in (secret, "hunter2", "SELECT", "FROM user", "pw123", "eyJ", "'q'"):
        assert leaked not in out, (leaked, out)
    assert out.startswith("query failed:")
    store = IncidentStore(None, secrets=[secret])
    iid = store.open("ssp:a", "ssp_resync", "backend refused: " + raw)
    text = json.dumps(store.get(iid))
    assert secret not in text and "hunter2" not in text and "SELECT" not in text
    assert sanitize("backend pay answers its health check") == \
        "backend pay answers its health check"
    assert len(sanitize("x" * 1000)) == 300
