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
    relaunched SSP could not serve. And its connections wait for their first request no longer
    than for later ones (`guard_first_request`)."""
    die_with_parent(signal.SIGKILL, parent_pid=server.pid)
    guard_first_request()


def guard_first_request() -> None:
    """gunicorn's ASGI worker arms its keep-alive timer only after a connection's first
    answer, so a connection that never sends a request, or sends its head a byte at a time,
    stays open for ever (file descriptors run out). Arm it when the connection opens too: the
    worker cancels it once a request's head has arrived, as for every later request.

    The worker builds its protocol by the module name `ASGIProtocol` (`gunicorn.workers.gasgi`),
    so that name is pointed at a subclass in this worker process only."""
    from gunicorn.asgi import protocol
    from gunicorn.workers import gasgi

    base = protocol.ASGIProtocol
    if getattr(gasgi.ASGIProtocol, "_svc_guarded", False):
        return

    class GuardedProtocol(base):  # type: ignore[misc, valid-type]
        _svc_guarded = True

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            # HTTP/1 only (an h2c connection still deciding has a timer of its own)
            if not self._closed and getattr(self, "_callback_parser", None) is not None:
                self._arm_keepalive_timer()

    gasgi.ASGIProtocol = GuardedProtocol
