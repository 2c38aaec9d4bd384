"""`ops/run --objstore` for real: the stack starts `rclone serve s3` before the scheduler and
points the backup plane at it; a backup through the scheduler's ingest listener lands in
`<data>/objstore`, a restore of it brings a deleted row back, and Ctrl-C stops the S3 server
with every other child."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from backup.config import DEFAULT_BUCKET
from dbclient import Database, DbConfig
from tests.support import lifeline, proctable
from tests.support.procs import ROOT, base_env, free_port, http_status

pytestmark = pytest.mark.slow

PASSWORD = "ops-run-objstore"


def _call(method: str, url: str, body: Any = None) -> tuple[int | None, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
    except (urllib.error.URLError, OSError, ValueError):
        return None, None


def _wait(pred: Any, proc: subprocess.Popen[bytes], log: Path, what: str,
          timeout: float = 240) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"ops/run exited while waiting for {what}:\n" + \
            log.read_text(errors="replace")[-5000:]
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"{what} not reached:\n" + log.read_text(errors="replace")[-5000:])


def _sql(port: int, statement: str) -> Any:
    """`statement` through the project's database client (root, ns/db `app`): its last
    statement's result."""

    async def run() -> Any:
        db = Database(DbConfig.from_env({
            "SVC_DB_URL": f"ws://127.0.0.1:{port}/rpc", "SVC_DB_USER": "root",
            "SVC_DB_PASS": PASSWORD, "SVC_DB_NS": "app", "SVC_DB_NAME": "app"}))
        await db.connect()
        try:
            return (await db.query(statement))[-1]
        finally:
            await db.close()

    return asyncio.run(run())


def test_ops_run_objstore_backs_up_and_restores_through_the_local_s3_server(
        tmp_path: Path) -> None:
    db_port, ssp_port, sched_port, admin_port, s3_port = (free_port() for _ in range(5))
    data = tmp_path / "data"
    log = tmp_path / "ops-run.log"
    sched = f"http://127.0.0.1:{sched_port}"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(ROOT / "ops" / "run"), "--db-bind", f"127.0.0.1:{db_port}", "--data", str(data),
             "--ssp-bind", f"127.0.0.1:{ssp_port}", "--scheduler-bind", f"127.0.0.1:{sched_port}",
             "--admin-bind", f"127.0.0.1:{admin_port}", "--objstore", "--objstore-bind",
             f"127.0.0.1:{s3_port}"],
            env=base_env(SVC_DB_USER="root", SVC_DB_PASS=PASSWORD, SVC_DB_NS="app",
                         SVC_DB_NAME="app"),
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        lifeline.adopt(proc.pid)  # dies with this run, killed or not
    try:
        _wait(lambda: "service is up" in log.read_text(errors="replace"), proc, log,
              "the stack up")
        assert http_status(f"http://127.0.0.1:{s3_port}/") is not None  # the S3 server answers
        _sql(db_port, "DEFINE TABLE note SCHEMALESS; CREATE note:1 SET v = 'kept'; "
             "CREATE note:2 SET v = 'deleted later'")

        st, rec = _call("POST", f"{sched}/backup/create", {"backup_id": "bk-opsrun"})
        assert st == 202, rec

        def backup_done() -> Any:
            st, rec = _call("GET", f"{sched}/backup/status/bk-opsrun")
            return rec if st == 200 and rec["status"] in ("done", "failed") else None

        done = _wait(backup_done, proc, log, "the backup")
        assert done["status"] == "done", done
        stored = [p for p in (data / "objstore" / DEFAULT_BUCKET).rglob("*") if p.is_file()]
        assert any("bk-opsrun" in str(p) for p in stored), stored  # on the server's disk

        _sql(db_port, "DELETE note:2")
        assert len(_sql(db_port, "SELECT * FROM note")) == 1
        st, rec = _call("POST", f"{sched}/backup/restore", {"backup_id": "bk-opsrun"})
        assert st == 202, rec
        rid = rec["restore_id"]

        def restore_done() -> Any:
            st, rec = _call("GET", f"{sched}/backup/restore/status/{rid}")
            return rec if st == 200 and rec["stage"] in ("done", "failed") else None

        restored = _wait(restore_done, proc, log, "the restore")
        assert restored["stage"] == "done", restored
        assert sorted(r["v"] for r in _sql(db_port, "SELECT * FROM note")) == [
            "deleted later", "kept"]

        kids = proctable.descendants(proc.pid)
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
        assert proc.returncode == 0, log.read_text(errors="replace")[-5000:]
        assert proctable.wait_gone(kids, timeout=10) == []
        assert http_status(f"http://127.0.0.1:{s3_port}/") is None  # rclone stopped too
        text = log.read_text(errors="replace")
        assert "svc-local-secret" not in text and PASSWORD not in text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
