"""`ops/run` brings the database host up, answers /health, and Ctrl-C leaves no process behind
(the default stack, `--memory`, also runs clients/README.md's top-10 example as written there);
a database host killed with SIGKILL is relaunched with its data (`--data`), or stops the stack
with a message saying the data is gone (`--memory`)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import lifeline, proctable
from tests.support.procs import ROOT, base_env, free_port, http_status
from tests.support.readme_example import run_readme_example


def _descendants(pid: int) -> list[int]:
    return proctable.descendants(pid)


@pytest.mark.parametrize(("sig", "with_ssp"), [(signal.SIGINT, True), (signal.SIGTERM, False)])
def test_ops_run_serves_health_and_stops_every_child(tmp_path: Path, sig: int, with_ssp: bool) -> None:
    port = free_port()
    ssp_port = free_port()
    data = tmp_path / "data"
    # The default stack as the clients' README starts it (memory only); the host alone on disk.
    storage = ["--memory"] if with_ssp else ["--data", str(data)]
    sched_port, admin_port = free_port(), free_port()
    extra = (["--ssp-bind", f"127.0.0.1:{ssp_port}", "--scheduler-bind",
              f"127.0.0.1:{sched_port}", "--admin-bind", f"127.0.0.1:{admin_port}"]
             if with_ssp else ["--no-ssp"])
    log = tmp_path / "ops-run.log"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(ROOT / "ops" / "run"), "--db-bind", f"127.0.0.1:{port}", *storage, *extra],
            env=base_env(SVC_DB_USER="root", SVC_DB_PASS="ops-run-test", TMPDIR=str(tmp)),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        lifeline.adopt(proc.pid)  # dies with this run, killed or not
    try:
        deadline = time.monotonic() + 180
        # ops/run announces the stack only once every service is healthy.
        while time.monotonic() < deadline and "service is up" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")
            time.sleep(0.1)
        assert http_status(f"http://127.0.0.1:{port}/health") == 200
        if with_ssp:  # the default stack: scheduler + one SSP + the admin plane
            assert http_status(f"http://127.0.0.1:{ssp_port}/health") == 200
            assert http_status(f"http://127.0.0.1:{admin_port}/admin/api/config") == 200
            assert http_status(f"http://127.0.0.1:{admin_port}/admin/api/overview") == 401
            text = log.read_text(errors="replace")
            assert f"http://127.0.0.1:{admin_port}/admin/" in text
            assert "break-glass password" in text  # generated for the run, printed once
            asyncio.run(run_readme_example(port, f"http://127.0.0.1:{sched_port}",
                                           "ops-run-test"))
        kids = _descendants(proc.pid)
        assert kids, "ops/run started no child process"
        os.kill(proc.pid, sig)  # what Ctrl-C (SIGINT) or a service manager (SIGTERM) sends
        proc.wait(timeout=60)
        text = log.read_text(errors="replace")
        assert proc.returncode == 0, text
        assert "database host" in text and str(port) in text
        left = proctable.wait_gone(kids, timeout=10)
        assert left == [], f"processes left behind: {left}"
        assert http_status(f"http://127.0.0.1:{port}/health") is None
        assert http_status(f"http://127.0.0.1:{ssp_port}/health") is None
        assert data.is_dir() != with_ssp  # storage in the given directory, or memory only
        assert list(tmp.iterdir()) == []  # its temporary directories (svc-stack-*) are gone
        # The password the stack was given never appears in its output.
        assert "ops-run-test" not in text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _launch(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """ops/run with `args`, its output in a log file and TMPDIR in tmp_path; waits until it
    announced the stack."""
    log, tmp = tmp_path / "ops-run.log", tmp_path / "tmp"
    tmp.mkdir()
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(ROOT / "ops" / "run"), *args],
                                env=base_env(SVC_DB_USER="root", SVC_DB_PASS="ops-run-test",
                                             TMPDIR=str(tmp)),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        lifeline.adopt(proc.pid)  # dies with this run, killed or not
    deadline = time.monotonic() + 180
    while "service is up" not in log.read_text(errors="replace"):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    return proc, log, tmp


def _db_pid(proc: subprocess.Popen[bytes]) -> int:
    pids = [p for p in proctable.descendants(proc.pid)
            if proctable.cmdline(p)[1:3] == ["-m", "dbhost"]]
    assert len(pids) == 1, pids
    return pids[0]


def test_a_killed_memory_database_host_stops_the_stack_and_says_the_data_is_gone(
        tmp_path: Path) -> None:
    port = free_port()
    proc, log, tmp = _launch(tmp_path, "--memory", "--no-ssp", "--db-bind", f"127.0.0.1:{port}")
    try:
        kids = proctable.descendants(proc.pid)
        os.kill(_db_pid(proc), signal.SIGKILL)
        assert proc.wait(timeout=60) == 1
        text = log.read_text(errors="replace")
        assert "svc-db was killed by SIGKILL. It kept the database in memory only (--memory): " \
               "every table, row and view is gone with it" in text
        assert "started svc-db" in text and text.count("started svc-db") == 1  # not relaunched
        assert proctable.wait_gone(kids, timeout=10) == []
        assert list(tmp.iterdir()) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def test_a_killed_stored_database_host_is_relaunched_with_its_data(tmp_path: Path) -> None:
    from dbclient import Database, DbConfig

    port = free_port()
    proc, log, _tmp = _launch(tmp_path, "--data", str(tmp_path / "data"), "--no-ssp",
                              "--db-bind", f"127.0.0.1:{port}")
    cfg = DbConfig.from_env({"SVC_DB_URL": f"ws://127.0.0.1:{port}/rpc", "SVC_DB_USER": "root",
                             "SVC_DB_PASS": "ops-run-test"})
    try:
        async with Database(cfg) as db:
            await db.query("CREATE kept:1 SET v = 'acknowledged'")
        victim = _db_pid(proc)
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while "svc-db is healthy again" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            await asyncio.sleep(0.1)
        assert _db_pid(proc) != victim
        async with Database(cfg) as db:
            assert await db.query_one("SELECT VALUE v FROM kept:1") == ["acknowledged"]
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
