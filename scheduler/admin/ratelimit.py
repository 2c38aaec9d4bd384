"""Failed admin sign-ins: at most 10 per client address per 5 minutes (spec, Limits).

A sliding window of failure times per address. Only failures count (a good sign-in does not
reset the window: an attacker who also knows one password gains nothing). Once an address has
10 failures inside the window every further attempt is refused without looking at the
credentials, with the same 401 body as any other failure. The address is the TCP peer: a
forwarded-for header could be forged. The table of addresses is bounded (the oldest-touched
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


class LoginLimiter:
    def __init__(self, max_failures: int = MAX_FAILURES, window_secs: float = WINDOW_SECS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_failures = max_failures
        self.window = window_secs
        self.clock = clock
        self._fails: OrderedDict[str, deque[float]] = OrderedDict()

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

    def blocked(self, addr: str) -> bool:
        """True when ``addr`` used up its failures in the window."""
        q = self._recent(addr)
        return q is not None and len(q) >= self.max_failures

    def fail(self, addr: str) -> None:
        q = self._recent(addr)
        if q is None:
            q = self._fails[addr] = deque(maxlen=self.max_failures)
        q.append(self.clock())
        self._fails.move_to_end(addr)
        while len(self._fails) > MAX_ADDRESSES:
            self._fails.popitem(last=False)
