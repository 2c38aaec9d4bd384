"""`ipc.exitnow.exit_now`: the exit code, the atexit callbacks (log handlers flushed,
`weakref.finalize` cleanups) and buffered output all survive skipping the interpreter's
teardown."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.procs import ROOT


def test_exit_now_keeps_the_code_the_exit_callbacks_and_buffered_output(tmp_path: Path) -> None:
    marker = tmp_path / "finalized"
    logfile = tmp_path / "log.txt"
    script = textwrap.dedent(f"""
        import atexit, logging, sys, weakref
        from ipc.exitnow import exit_now

        class Owner:
            pass

        owner = Owner()  # alive until exit: only the atexit pass of weakref.finalize runs it
        weakref.finalize(owner, lambda: open({str(marker)!r}, "w").write("done"))
        atexit.register(lambda: print("atexit ran", file=sys.stderr))
        handler = logging.FileHandler({str(logfile)!r}, delay=False)
        handler.terminator = ""
        logging.getLogger().addHandler(handler)
        logging.getLogger().warning("last words")
        sys.stdout.write("buffered, no newline")  # a pipe: block-buffered until flushed
        exit_now(7)
    """)
    r = subprocess.run([sys.executable, "-c", script], cwd=str(ROOT), capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 7, r.stderr
    assert r.stdout == "buffered, no newline"
    assert "atexit ran" in r.stderr
    assert marker.read_text() == "done"
    assert logfile.read_text() == "last words"
