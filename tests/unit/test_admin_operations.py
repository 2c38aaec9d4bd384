"""scheduler.admin.operations: the spec's 50 kept operations, newest first, and the file a
restarted scheduler reads."""

from __future__ import annotations

from pathlib import Path

from scheduler.admin.operations import KEPT, OperationLog
from scheduler.incidents import IncidentStore

WHO = {"subject": "ops@example.com", "mode": "roster"}


def _log(tmp_path: Path) -> OperationLog:
    return OperationLog(tmp_path, IncidentStore(tmp_path / "incidents"))


def test_fifty_are_kept_newest_first_and_a_running_one_is_never_evicted(tmp_path: Path) -> None:
    ops = _log(tmp_path)
    long_running = ops.start("ssps_restart_all", "ssps", WHO)
    made = []
    for i in range(KEPT + 15):
        op = ops.start("ssp_restart", f"ssp:{i}", WHO)
        ops.finish(op["id"], True, "done")
        made.append(op["id"])
    listing = ops.listing()
    assert KEPT == 50 and len(listing) == KEPT
    ids = [o["id"] for o in listing]
    assert long_running["id"] in ids  # still running: kept whatever its age
    finished = [i for i in ids if i != long_running["id"]]
    assert finished == list(reversed(made))[:KEPT - 1]  # the newest, newest first
    assert all(a["started_at"] >= b["started_at"] for a, b in zip(listing, listing[1:]))


def test_a_restart_fails_what_the_old_process_left_running_except_its_own_restart(
        tmp_path: Path) -> None:
    ops = _log(tmp_path)
    roll = ops.start("ssps_restart_all", "ssps", WHO)
    restart = ops.start("scheduler_restart", "scheduler:s1", WHO)
    ops.write()
    again = _log(tmp_path)
    assert again.get(roll["id"])["status"] == "failed"
    assert again.get(roll["id"])["message"] == "interrupted by a scheduler restart"
    assert [o["id"] for o in again.continued] == [restart["id"]]
    assert again.get(restart["id"])["status"] == "running"
