"""The local stack's supervisor: backoff and crash budget, relaunch of any crash (signals
included), requested relaunches (the SSP's exits 2-6) and restarts, a child whose loss cannot
be repaired, nothing left behind. Children are tiny real Python processes."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stack import rundir
from stack.supervisor import (
    RELAUNCH_CODES,
    Child,
    CrashLog,
    RestartPolicy,
    Supervisor,
    describe_exit,
)

FAST = RestartPolicy(backoff_base_secs=0.01, backoff_cap_secs=0.05, max_crashes=3,
                     window_secs=60.0, stop_timeout_secs=10.0)


def _script(tmp: Path, body: str, name: str = "child.py") -> list[str]:
    path = tmp / name
    path.write_text(body)
    return [sys.executable, str(path)]


def _counting(tmp: Path, body: str) -> tuple[list[str], Path]:
    """A child that counts its runs in a file (`n`: runs before this one) and then runs
    `body`."""
    counter = tmp / "runs"
    argv = _script(tmp, "import os,pathlib,signal,sys,time\n"
                        f"p=pathlib.Path({str(counter)!r})\n"
                        "n=int(p.read_text()) if p.exists() else 0\n"
                        "p.write_text(str(n+1))\n" + body)
    return argv, counter


def _runs(counter: Path) -> int:
    try:
        return int(counter.read_text() or 0)
    except (OSError, ValueError):
        return 0


def _when(pred: Callable[[], bool], then: Callable[[], None], timeout: float = 60.0) -> None:
    """In a thread: call `then` once `pred` holds (or after `timeout`, to end a hung test)."""
    def watch() -> None:
        deadline = time.monotonic() + timeout
        while not pred() and time.monotonic() < deadline:
            time.sleep(0.02)
        then()
    threading.Thread(target=watch, daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _wait_gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


SLEEP_FOREVER = "while True: time.sleep(1)\n"


# ---------------------------------------------------------------- policy


def test_backoff_doubles_from_half_a_second_up_to_thirty() -> None:
    p = RestartPolicy()
    assert [p.delay(k) for k in range(8)] == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    assert p.delay(50) == 30.0


def test_crash_budget_counts_only_crashes_within_the_window() -> None:
    log = CrashLog(RestartPolicy(max_crashes=5, window_secs=120.0))
    counts = [log.record(t) for t in (0.0, 10.0, 20.0, 30.0, 40.0)]
    assert counts == [1, 2, 3, 4, 5]
    assert not log.exhausted(5)
    assert log.exhausted(log.record(50.0))  # the sixth within 120 s
    # Long after: the old crashes dropped out of the window.
    assert log.record(300.0) == 1


def test_exits_are_described_by_code_or_signal() -> None:
    assert describe_exit(4) == "exited with 4"
    assert describe_exit(-9) == "was killed by SIGKILL"


# ---------------------------------------------------------------- supervisor


def test_a_child_killed_by_a_signal_is_relaunched(tmp_path: Path) -> None:
    argv, counter = _counting(tmp_path, "if n == 0: os.kill(os.getpid(), signal.SIGKILL)\n"
                                        + SLEEP_FOREVER)
    child = Child("svc", argv, {})
    sup = Supervisor([child], poll=0.02, policy=FAST)
    _when(lambda: _runs(counter) >= 2, sup.request_stop)
    assert sup.run() == 0
    assert _runs(counter) == 2 and child.restarts == 1


def test_a_child_exiting_zero_by_itself_is_relaunched_too(tmp_path: Path) -> None:
    argv, counter = _counting(tmp_path, "if n == 0: time.sleep(0.2); sys.exit(0)\n"
                                        + SLEEP_FOREVER)
    sup = Supervisor([Child("svc", argv, {})], poll=0.02, policy=FAST)
    _when(lambda: _runs(counter) >= 2, sup.request_stop)
    assert sup.run() == 0
    assert _runs(counter) == 2


def test_a_child_that_keeps_crashing_exhausts_the_budget_and_stops_the_stack(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    argv, counter = _counting(tmp_path, "time.sleep(0.2); sys.exit(1)\n")
    sleeper = Child("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], {})
    crasher = Child("crasher", argv, {})
    with caplog.at_level(logging.INFO, logger="stack"):
        rc = Supervisor([sleeper, crasher], poll=0.02, policy=FAST).run()
    assert rc == 1
    assert _runs(counter) == FAST.max_crashes + 1  # relaunched 3 times, given up on the 4th
    assert "crasher exited with 1: 4 crashes within 60s, more than the budget of 3; giving up" \
        in caplog.text
    assert sleeper.proc is None  # stopped with the stack


def test_a_requested_relaunch_of_a_healthy_child_is_not_a_crash(tmp_path: Path) -> None:
    # More exits 2-6 than the crash budget allows: each is a relaunch the child asked for.
    argv, counter = _counting(tmp_path, "if n < 5: time.sleep(0.1); sys.exit(3 + n % 2)\n"
                                        + SLEEP_FOREVER)
    child = Child("ssp", argv, {}, relaunch_codes=RELAUNCH_CODES)
    sup = Supervisor([child], poll=0.02, policy=FAST)
    _when(lambda: _runs(counter) >= 6, sup.request_stop)
    assert sup.run() == 0
    assert _runs(counter) == 6 and child.restarts == 5


def test_a_child_exiting_with_a_relaunch_code_before_it_was_healthy_is_started_again(
        tmp_path: Path) -> None:
    # An SSP flagged while it bootstraps exits 4 before its /health ever answered 200: the
    # start-up relaunches it (counted as a crash: a loop of those would exhaust the budget).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv, counter = _counting(
        tmp_path,
        "import http.server\n"
        "if n == 0: sys.exit(4)\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers()\n"
        "    def log_message(self, *a): pass\n"
        f"http.server.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n")
    child = Child("ssp", argv, {}, health_url=f"http://127.0.0.1:{port}/health",
                  relaunch_codes=RELAUNCH_CODES)
    ready = threading.Event()
    sup = Supervisor([child], poll=0.02, policy=FAST)
    _when(ready.is_set, sup.request_stop)
    assert sup.run(on_ready=ready.set) == 0
    assert _runs(counter) == 2 and child.restarts == 1
    assert child.crashes is not None and child.crashes.count(time.monotonic()) == 1


def test_a_child_that_exits_before_it_was_ever_healthy_fails_the_start(tmp_path: Path) -> None:
    argv, counter = _counting(tmp_path, "sys.exit(9)\n")
    first = Child("first", [sys.executable, "-c", "import time; time.sleep(60)"], {})
    broken = Child("broken", argv, {}, health_url="http://127.0.0.1:9/health")
    announced = threading.Event()
    rc = Supervisor([first, broken], poll=0.02, policy=FAST).run(on_ready=announced.set)
    assert rc == 9 and _runs(counter) == 1  # not relaunched: a bad start is reported at once
    assert not announced.is_set() and first.proc is None


def test_a_child_whose_loss_cannot_be_repaired_stops_the_stack_loudly(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pid_file = tmp_path / "db.pid"
    db = Child("svc-db", _script(tmp_path, f"import os,pathlib,time\n"
                                           f"pathlib.Path({str(pid_file)!r}).write_text("
                                           f"str(os.getpid()))\n" + "import time\n"
                                           + SLEEP_FOREVER),
               {}, relaunch=False, fatal_note="Its data is gone.")
    other = Child("svc", [sys.executable, "-c", "import time; time.sleep(60)"], {})
    sup = Supervisor([db, other], poll=0.02, policy=FAST)
    ready = threading.Event()
    _when(lambda: ready.is_set() and pid_file.exists() and pid_file.read_text().strip() != "",
          lambda: os.kill(int(pid_file.read_text()), signal.SIGKILL))
    with caplog.at_level(logging.INFO, logger="stack"):
        assert sup.run(on_ready=ready.set) == 1
    assert "svc-db was killed by SIGKILL. Its data is gone. Stopping the stack." in caplog.text
    assert db.restarts == 0 and other.proc is None


def test_restart_on_request_stops_the_child_and_starts_it_again_without_a_crash(
        tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    argv = _script(tmp_path, "import os,signal,sys,time\n"
                             f"open({str(pids)!r}, 'a').write(f'{{os.getpid()}} "
                             "{os.environ.get(\"SVC_SUPERVISED\")}\\n')\n"
                             "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
                             + SLEEP_FOREVER)
    child = Child("svc-scheduler", argv, {})
    sup = Supervisor([child], poll=0.02, policy=FAST)
    with pytest.raises(KeyError):
        sup.restart("nobody")

    def lines() -> list[list[str]]:
        return [ln.split() for ln in pids.read_text().splitlines()] if pids.exists() else []

    _when(lambda: len(lines()) >= 1, lambda: sup.restart("svc-scheduler"))
    _when(lambda: len(lines()) >= 2, sup.request_stop)
    assert sup.run() == 0
    (first, flag1), (second, flag2) = lines()
    assert first != second and child.restarts == 1
    assert flag1 == flag2 == "1"  # SVC_SUPERVISED=1: the child knows it is relaunched
    assert child.crashes is not None and child.crashes.count(time.monotonic()) == 0


def test_what_a_dead_child_started_in_its_group_is_killed_with_it(tmp_path: Path) -> None:
    grandchild = tmp_path / "grandchild.pid"
    argv, counter = _counting(
        tmp_path,
        "import subprocess\n"
        "if n == 0:\n"
        "    g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"    pathlib.Path({str(grandchild)!r}).write_text(str(g.pid))\n"
        "    time.sleep(0.2)\n"
        "    os._exit(1)\n" + SLEEP_FOREVER)
    sup = Supervisor([Child("svc", argv, {})], poll=0.02, policy=FAST)
    _when(lambda: _runs(counter) >= 2, sup.request_stop)
    assert sup.run() == 0
    assert _wait_gone(int(grandchild.read_text()))


def test_children_get_sigterm_when_the_supervisor_itself_is_killed(tmp_path: Path) -> None:
    marker, pid_file = tmp_path / "term", tmp_path / "child.pid"
    child_argv = _script(tmp_path, "import os,pathlib,signal,sys,time\n"
                                   f"def bye(*a): pathlib.Path({str(marker)!r}).write_text("
                                   "'term'); sys.exit(0)\n"
                                   "signal.signal(signal.SIGTERM, bye)\n"
                                   f"pathlib.Path({str(pid_file)!r}).write_text("
                                   "str(os.getpid()))\n" + SLEEP_FOREVER, "sleeper.py")
    sup_argv = _script(tmp_path, "from stack.supervisor import Child, Supervisor\n"
                                 f"Supervisor([Child('svc', {child_argv!r}, {{}})]).run()\n",
                                 "sup.py")
    sup = subprocess.Popen(sup_argv, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        # Wait for the pid itself: write_text creates the file before it writes to it.
        while (not pid_file.exists() or not pid_file.read_text().strip()) \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        child = int(pid_file.read_text())
        os.kill(sup.pid, signal.SIGKILL)
        sup.wait()
        assert _wait_gone(child)
        assert marker.read_text() == "term"  # a graceful stop, not a kill
    finally:
        if sup.poll() is None:
            os.killpg(sup.pid, signal.SIGKILL)


# ---------------------------------------------------------------- temporary state


def test_the_stack_directory_is_swept_only_when_its_owner_is_gone(tmp_path: Path) -> None:
    mine = rundir.create(tmp_path)
    dead = rundir.create(tmp_path)
    pid, start = (dead / "owner").read_text().split()
    # Same pid, another start time: the process that wrote it is gone (the pid was reused).
    (dead / "owner").write_text(f"{pid} {int(start) + 1}\n")
    unknown = tmp_path / (rundir.PREFIX + "nofile")
    unknown.mkdir()
    assert rundir.sweep(tmp_path) == [dead]
    assert mine.is_dir() and unknown.is_dir() and not dead.exists()
    rundir.remove(mine)
    assert not mine.exists()


def test_a_health_port_answering_something_else_than_http_is_not_healthy_yet() -> None:
    # Seen in a soak: the SSP's port answered the request line back, and the probe's
    # BadStatusLine stopped the whole stack instead of counting as "not up yet".
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]

    def echo() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.sendall(conn.recv(1024))

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    child = Child("ssp", [sys.executable, "-c", "import time; time.sleep(60)"], {},
                  health_url=f"http://127.0.0.1:{port}/health")
    child.start()
    try:
        assert child.probe(time.monotonic()) is False
        assert not child.healthy
    finally:
        child.signal(signal.SIGKILL)
        child.wait_exit(5)
        srv.close()
