"""gunicorn server hooks of the SSP's gateway (`-c python:gateway.gunicorn_hooks`).

Only hooks live here: gunicorn reads every module-level name that matches one of its settings.
"""

from __future__ import annotations

import signal
import weakref
from typing import Any

from ipc.lifeline import die_with_parent


def post_fork(server: Any, worker: Any) -> None:
    """A worker dies with its master: the master itself dies with the SSP (it is started
    through `ipc.lifeline`), and a worker left behind would keep the SSP's port bound, so a
    relaunched SSP could not serve. And its connections wait for their first request no longer
    than for later ones (`guard_first_request`). And a SIGTERM stops it at once
(`stop_without_delay`)."""
    die_with_parent(signal.SIGKILL, parent_pid=server.pid)
    guard_first_request()
    stop_without_delay(worker)


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
            _OPEN.add(self)
            # HTTP/1 only (an h2c connection still deciding has a timer of its own)
            if not self._closed and getattr(self, "_callback_parser", None) is not None:
                self._arm_keepalive_timer()

    gasgi.ASGIProtocol = GuardedProtocol


# The worker's open connections (`GuardedProtocol`), for `close_idle` at SIGTERM.
_OPEN: weakref.WeakSet[Any] = weakref.WeakSet()


def close_idle() -> int:
    """Close every connection that waits for its next request, as its keep-alive timer would
    (the one armed between requests, `guard_first_request`); returns how many. gunicorn's
    graceful stop waits for every open connection, an idle pooled one too, so a stop while a
    client held one took the whole graceful timeout (5 s). A connection whose request is in
    flight has no timer armed: it finishes, and the worker closes it after its answer because
    it is no longer alive."""
    closed = 0
    for proto in list(_OPEN):
        if getattr(proto, "_keepalive_handle", None) is not None and not proto._closed:
            proto._cancel_keepalive_timer()
            proto._keepalive_timeout()
            closed += 1
    return closed


def stop_without_delay(worker: Any) -> None:
    """gunicorn's ASGI worker answers SIGTERM by clearing its `alive` flag, which its main loop
    reads once a second (`await asyncio.sleep(1.0)` between heartbeats): every graceful stop
    of an SSP waited up to a second, half a second on average, before the gateway even began
    to stop. Wake the loop instead: the handler also cancels that sleep, which the worker
    treats as the end of its loop and goes on to its graceful shutdown (in-flight requests
    finish, then the lifespan shutdown), as after the flag.

    Only while the worker is in that loop (every listener served, still alive): a cancel
    during the lifespan startup would abort the worker instead."""
    import asyncio

    serve_code = getattr(getattr(type(worker), "_serve", None), "__code__", None)
    plain = getattr(worker, "handle_exit_signal", None)
    if serve_code is None or plain is None:
        return  # another worker class: keep its own handling

    def handle_exit_signal() -> None:
        in_loop = (worker.alive and len(getattr(worker, "servers", ()))
                   == len(getattr(worker, "sockets", ())) > 0)
        plain()
        close_idle()
        if not in_loop:
            return
        for task in asyncio.all_tasks(worker.loop):
            if getattr(task.get_coro(), "cr_code", None) is serve_code:
                task.cancel()

    worker.handle_exit_signal = handle_exit_signal
