"""Capped exponential backoff: the one helper every retry loop of ours waits with.

`Backoff(first, cap=...)` yields `first`, `first * factor`, ... up to `cap`; `reset()` starts
over after a success. `delay(attempt)` is the same sequence as a pure function, for code that
counts attempts itself (job retries, the supervisor's crash count).
"""

from __future__ import annotations

import asyncio
import math

__all__ = ["Backoff", "delay"]


def delay(attempt: int, first: float, *, factor: float = 2.0, cap: float = math.inf) -> float:
    """The wait before retry number `attempt` (1, 2, ...): `first * factor ** (attempt - 1)`,
    at most `cap`."""
    n = max(0, attempt - 1)
    # Bounded exponent: a long outage must not overflow the float.
    return min(cap, first * factor ** min(n, 64))


class Backoff:
    """A retry loop's waits: `next()` returns the current wait and grows it for the next."""

    def __init__(self, first: float, *, factor: float = 2.0, cap: float = math.inf) -> None:
        self.first = first
        self.factor = factor
        self.cap = cap
        self.attempt = 0

    @property
    def current(self) -> float:
        """The wait `next()` returns now."""
        return delay(self.attempt + 1, self.first, factor=self.factor, cap=self.cap)

    def next(self) -> float:
        """The wait before the next attempt (then grown, up to `cap`)."""
        wait = self.current
        self.attempt += 1
        return wait

    def reset(self) -> None:
        """Start over from `first` (after a success)."""
        self.attempt = 0

    async def sleep(self, limit: float = math.inf) -> float:
        """Wait `next()` seconds (at most `limit`); returns the wait."""
        wait = max(0.0, min(self.next(), limit))
        await asyncio.sleep(wait)
        return wait
