"""Write conflicts: a client write that lost to a concurrent one.

Over transport `http` the database's events post a client's write to the service from inside
that write, and the service may write the same record (or the edges of its view) before the
client's transaction commits; SurrealDB then fails one of the two with a conflict it calls
retryable."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

ATTEMPTS = 8


def is_conflict(message: str) -> bool:
    """A write that lost to a concurrent one (SurrealDB: "... can be retried")."""
    return "can be retried" in message or "conflict" in message.lower()


async def retried(op: Callable[[], Awaitable[T]], attempts: int = ATTEMPTS) -> T:
    """`op()`, again after a write conflict (a short growing pause), at most `attempts`
    times; any other error, or the last conflict, is raised."""
    for attempt in range(attempts):
        try:
            return await op()
        except Exception as e:
            if attempt == attempts - 1 or not is_conflict(str(e)):
                raise
            await asyncio.sleep(0.01 * (attempt + 1))
    raise AssertionError("unreachable")
