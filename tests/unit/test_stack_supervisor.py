"""The supervisor relaunches a child on the spec's exit codes 2-6 and stops on any other."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from stack.supervisor import RELAUNCH_CODES, Child, Supervisor


def _script(tmp: Path, body: str) -> list[str]:
    path = tmp / "child.py"
    path.write_text(body)
    return [sys.executable, str(path)]


def test_child_exiting_with_a_relaunch_code_is_started_again(tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    # Exits 4 (resync directive) twice, then 0 on the third run.
    argv = _script(
        tmp_path,
        "import pathlib,sys\n"
        f"p=pathlib.Path({str(counter)!r})\n"
        "n=int(p.read_text()) if p.exists() else 0\n"
        "p.write_text(str(n+1))\n"
        "sys.exit(4 if n < 2 else 0)\n",
    )
    child = Child("ssp", argv, {}, relaunch_on=RELAUNCH_CODES)
    rc = Supervisor([child], poll=0.02).run()
    assert counter.read_text() == "3"
    assert child.restarts == 2
    # The third run exited 0, which is not a relaunch code: the stack stops.
    assert rc == 1


def test_child_exiting_with_another_code_stops_the_stack(tmp_path: Path) -> None:
    argv = _script(tmp_path, "import sys; sys.exit(9)\n")
    sleeper = Child("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], {})
    crasher = Child("crasher", argv, {}, relaunch_on=RELAUNCH_CODES)
    started = time.monotonic()
    rc = Supervisor([sleeper, crasher], poll=0.02).run()
    assert rc == 9
    assert sleeper.proc is not None and sleeper.proc.returncode is not None
    assert time.monotonic() - started < 30


def test_stop_request_terminates_every_child(tmp_path: Path) -> None:
    kids = [Child(f"k{i}", [sys.executable, "-c", "import time; time.sleep(60)"], {}) for i in range(3)]
    sup = Supervisor(kids, poll=0.02)
    threading.Timer(0.5, sup.request_stop).start()
    # run() installs signal handlers, which only works in the main thread: that is where we are.
    assert sup.run() == 0
    for k in kids:
        assert k.proc is not None and k.proc.poll() is not None


def test_child_exiting_with_a_relaunch_code_before_it_was_healthy_is_started_again(
        tmp_path: Path) -> None:
    # An SSP flagged while it bootstraps exits 4 before its /health ever answered 200: the
    # start-up wait must relaunch it, not stop the stack.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    counter = tmp_path / "runs"
    argv = _script(
        tmp_path,
        "import http.server,pathlib,sys,threading\n"
        f"p=pathlib.Path({str(counter)!r})\n"
        "n=int(p.read_text()) if p.exists() else 0\n"
        "p.write_text(str(n+1))\n"
        "if n == 0: sys.exit(4)\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers()\n"
        "        threading.Thread(target=srv.shutdown).start()\n"
        "    def log_message(self, *a): pass\n"
        f"srv=http.server.HTTPServer(('127.0.0.1', {port}), H)\n"
        "srv.serve_forever()\n"
        "sys.exit(9)\n",
    )
    child = Child("ssp", argv, {}, health_url=f"http://127.0.0.1:{port}/health",
                  relaunch_on=RELAUNCH_CODES)
    rc = Supervisor([child], poll=0.02).run()
    assert counter.read_text() == "2"
    assert child.restarts == 1
    assert rc == 9  # the second run answered healthy, then exited 9: the stack stops
