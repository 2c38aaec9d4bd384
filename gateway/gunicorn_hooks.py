"""gunicorn server hooks of the SSP's gateway (`-c python:gateway.gunicorn_hooks`).

Only hooks live here: gunicorn reads every module-level name that matches one of its settings.
"""

from __future__ import annotations

import signal
from typing import Any

from ipc.lifeline import die_with_parent


def post_fork(server: Any, worker: Any) -> None:
    """A worker dies with its master: the master itself dies with the SSP (it is started
    through `ipc.lifeline`), and a worker left behind would keep the SSP's port bound, so a
    relaunched SSP could not serve."""
    die_with_parent(signal.SIGKILL, parent_pid=server.pid)
