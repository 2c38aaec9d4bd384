"""How the scheduler's listeners (ingest, admin, pool) are served: uvicorn with a deadline on
reading each request.

uvicorn closes a keep-alive connection only after it answered a request on it, and any byte
received cancels that timer: a connection that never sends a request, or sends its head a
byte at a time, is held open for ever, and enough of them exhaust the process's file
descriptors. :class:`GuardedH11Protocol` arms a timer whenever the connection waits for a
request (when it opens, and after each answer) and cancels it only once a whole request (head
and body) has arrived; when it fires while the connection is still waiting or reading, the
connection is closed. A request being answered (a long server-sent event stream included) is
never cut.

The deadline is ``SERVER_KEEPALIVE_SECS`` unless configured (``SVC_HTTP_READ_TIMEOUT_SECS``):
an idle keep-alive connection closes when it would have anyway, and a request must arrive
within that time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["GuardedH11Protocol", "guarded_protocol"]


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a request-read deadline (see the module docstring)."""

    read_timeout_secs: float = 30.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._read_timer: asyncio.TimerHandle | None = None
        self._reading = True
        super().connection_made(transport)
        self._arm_read()

    def _arm_read(self) -> None:
        self._reading = True
        if self._read_timer is not None:
            self._read_timer.cancel()
        self._read_timer = self.loop.call_later(self.read_timeout_secs, self._read_expired)

    def _read_expired(self) -> None:
        self._read_timer = None
        if self._reading and not self.transport.is_closing():
            self.transport.close()

    def handle_events(self) -> None:
        super().handle_events()
        # A whole request read (h11 waits for our answer now): the deadline is met.
        if self._reading and self.conn.their_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED):
            self._reading = False
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Waiting for the next request, or for the rest of one (not: a pipelined request was
        # read whole by the call above and is being answered).
        if not self.transport.is_closing() and self.conn.their_state in (h11.IDLE,
                                                                          h11.SEND_BODY):
            self._arm_read()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        super().connection_lost(exc)


def guarded_protocol(read_timeout_secs: float) -> type[GuardedH11Protocol]:
    """The protocol class for ``uvicorn.Config(http=...)`` with this deadline."""
    attrs: dict[str, Any] = {"read_timeout_secs": float(read_timeout_secs)}
    return type("GuardedH11Protocol", (GuardedH11Protocol,), attrs)
