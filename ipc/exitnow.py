"""End a server process once its own shutdown is done, without the interpreter's teardown.

After a graceful stop (requests answered, snapshot written, connections closed) nothing is
left to do but exit, yet CPython's finalisation still tears down every module and runs a
last collection over every object the process holds: for an SSP hub or shard that is a
second or more of CPU spent on memory the kernel frees anyway, on every stop (a test suite
stops ~100 SSPs). :func:`exit_now` runs what finalisation is for (the `atexit` callbacks,
which include `weakref.finalize` cleanups, and flushing the logs and standard streams), then
ends the process with :func:`os._exit`.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """Run the exit callbacks, flush stdout/stderr, and exit with `code` at once."""
    try:
        atexit._run_exitfuncs()  # logging.shutdown and weakref.finalize cleanups among them
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # closed or a broken pipe: nothing more to say
                pass
        os._exit(code)
