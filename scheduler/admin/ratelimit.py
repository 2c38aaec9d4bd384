"""Failed admin sign-ins: at most 10 per client address per 5 minutes (spec, Limits), and at
most ``MAX_GLOBAL_FAILURES`` from all addresses together in the same window.

A sliding window of failure times per address. Only failures count (a good sign-in does not
reset the window: an attacker who also knows one password gains nothing); a body that is not
a sign-in at all (malformed, too deep, too large) counts as a failure too, so garbage cannot
be sent at will. Once an address has 10 failures inside the window every further attempt is
refused without looking at the credentials, with the same 401 body as any other failure.

The address is the TCP peer (``scheduler.__main__``): uvicorn believes ``X-Forwarded-For``
only from ``SVC_ADMIN_TRUSTED_PROXIES``, so a client cannot rotate a forged header to get a
fresh window. Many real addresses still can (a botnet, or IPv6 addresses of one host): the
global window bounds what all of them together can try, at the price that during such an
attack every roster sign-in is refused for up to the window (break-glass included; the
tokens already issued keep working). The table of addresses is bounded (the oldest-touched
address is dropped first).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable

__all__ = ["LoginLimiter"]

MAX_FAILURES = 10
WINDOW_SECS = 300.0
MAX_ADDRESSES = 10_000
#: failures from all addresses together per window (a guess every second, on average)
MAX_GLOBAL_FAILURES = 300


class LoginLimiter:
    def __init__(self, max_failures: int = MAX_FAILURES, window_secs: float = WINDOW_SECS,
                 clock: Callable[[], float] = time.monotonic,
                 max_global_failures: int = MAX_GLOBAL_FAILURES) -> None:
        self.max_failures = max_failures
        self.max_global = max_global_failures
        self.window = window_secs
        self.clock = clock
        self._fails: OrderedDict[str, deque[float]] = OrderedDict()
        self._all: deque[float] = deque()

    def _recent(self, addr: str) -> deque[float] | None:
        q = self._fails.get(addr)
        if q is None:
            return None
        cutoff = self.clock() - self.window
        while q and q[0] <= cutoff:
            q.popleft()
        if not q:
            del self._fails[addr]
            return None
        return q

    def _global(self) -> int:
        cutoff = self.clock() - self.window
        while self._all and self._all[0] <= cutoff:
            self._all.popleft()
        return len(self._all)

    def blocked(self, addr: str) -> bool:
        """True when ``addr`` used up its failures in the window, or all addresses together
        used up the global allowance."""
        q = self._recent(addr)
        return (q is not None and len(q) >= self.max_failures) \
            or self._global() >= self.max_global

    def fail(self, addr: str) -> None:
        now = self.clock()
        q = self._recent(addr)
        if q is None:
            q = self._fails[addr] = deque(maxlen=self.max_failures)
        q.append(now)
        self._fails.move_to_end(addr)
        while len(self._fails) > MAX_ADDRESSES:
            self._fails.popitem(last=False)
        self._global()
        if len(self._all) < self.max_global:
            self._all.append(now)
