"""Jobs survive an SSP crash (lease expiry + recovery sweep) and admission is exact: at most
`concurrency` calls in flight per table, oldest first (spec "States and transitions", issue 6).

Delivery is at-least-once: a job whose SSP died mid-call is called again by the SSP that
reclaims it, so the backend sees that call twice; no job is lost."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from surrealdb import RecordID

from dbclient import Database
from tests.support.job_stack import SECRET, TOKEN, job_stack
from tests.support.procs import DbHost


async def test_ssp_killed_mid_job_lease_expires_sweep_reclaims_and_every_job_completes(
        host: DbHost, tmp_path: Path) -> None:
    async with job_stack(host, tmp_path, tables={"main": {"lease_secs": 2}}) as st:
        keys = [f"c{i}" for i in range(6)]
        for k in keys:
            await st.add_job("job", k, "/hold", created_at=datetime.now(UTC))
        for k in keys[:4]:  # concurrency 4: four calls hang, two rows wait
            await st.wait_calls(f"job:{k}")
        first = await st.row(RecordID("job", "c0"))
        assert first["status"] == "processing"
        dead_ssp = first["assignee"]
        crashed_log = st.ssp.process.log_text()
        st.ssp.close_client()
        st.ssp.process.kill9()  # a crash: no hand-back, leases left to expire
        st.backend.release.set()  # from now on the backend answers
        st.restart_ssp()
        await st.ssp.wait_ready()
        rows = [await st.wait_status(RecordID("job", k), "completed") for k in keys]
        assert all(r["assignee"] != dead_ssp for r in rows)
        # At-least-once: the calls cut by the crash were made again; nothing was lost.
        assert [len(st.backend.calls_of(f"job:{k}")) for k in keys] == [2, 2, 2, 2, 1, 1]
        logs = crashed_log + st.ssp.process.log_text()
        assert "lease expired, back to pending" in logs
        assert TOKEN not in logs and SECRET not in logs


async def test_100_pending_rows_with_concurrency_3_run_at_most_3_at_once_oldest_first(
        host: DbHost, tmp_path: Path) -> None:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    keys = [f"k{random.randrange(10**9):09d}x{i}" for i in range(100)]  # id order != age order
    order = list(range(100))
    random.shuffle(order)

    async def insert(root: Database) -> None:
        for i in order:  # inserted in random order; age is `created_at`
            await root.query("CREATE $id CONTENT $c", {"id": RecordID("job_c3", keys[i]), "c": {
                "status": "pending", "path": "/work", "payload": {"i": i},
                "created_at": base + timedelta(seconds=i)}})

    async with job_stack(host, tmp_path, before_start=insert) as st:
        rows = [await st.wait_status(RecordID("job_c3", k), "completed") for k in keys]
        assert st.backend.max_inflight == 3
        claimed = sorted(range(100), key=lambda i: rows[i]["started_at"])
        assert claimed == list(range(100))  # claimed strictly oldest first
        arrived = [int(c.body["i"]) for c in st.backend.calls]
        assert sorted(arrived) == list(range(100))
        assert all(abs(pos - i) < 3 for pos, i in enumerate(arrived))  # within the 3 slots
