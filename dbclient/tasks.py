"""Stopping asyncio tasks that wait on the database.

On Python 3.11, ``asyncio.wait_for`` returns its inner result when a cancel lands in the same
event-loop turn as what it waits on completes (CPython gh-86296, fixed in 3.12): the cancel is
lost and the task goes on. Every database call of ours runs under ``wait_for``
(``dbclient.database``), so a loop that is cancelled while a call returns may never end, and
whoever awaits it after ``cancel()`` waits forever (a restore stuck at its hold, an import
stuck after a failed batch). :func:`cancel_and_wait` cancels again until the task has ended.
"""

from __future__ import annotations

import asyncio

__all__ = ["RECANCEL_SECS", "cancel_and_wait", "stop_loops"]

RECANCEL_SECS = 0.5  # a lost cancel is repeated this often


async def cancel_and_wait(*tasks: asyncio.Task[object] | asyncio.Future[object],
                          every: float = RECANCEL_SECS) -> None:
    """Cancel ``tasks`` and return when each has ended. Their outcomes count as retrieved
    (no "exception was never retrieved" at exit); read them from the tasks. A cancel of the
    caller is not swallowed: it propagates from here."""
    pending = [t for t in tasks if not t.done()]
    while pending:
        for t in pending:
            t.cancel()
        await asyncio.wait(pending, timeout=every)
        pending = [t for t in pending if not t.done()]
    for t in tasks:
        if not t.cancelled():
            t.exception()


async def stop_loops(*tasks: asyncio.Task[object]) -> None:
    """:func:`cancel_and_wait`, then raise the first error a loop died of (as awaiting it
    after ``cancel()`` did; a cancelled loop is the normal end)."""
    await cancel_and_wait(*tasks)
    for t in tasks:
        if not t.cancelled():
            t.result()
