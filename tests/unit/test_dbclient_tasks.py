"""Stopping tasks whose cancel can be lost (dbclient.tasks: Python 3.11's wait_for)."""

from __future__ import annotations

import asyncio

import pytest

from dbclient.tasks import cancel_and_wait, stop_loops


def _stubborn(lost: int, ended: list[str]) -> asyncio.Task[None]:
    """A loop that goes on after its first ``lost`` cancels, as one inside wait_for does when
    the cancel lands as its wait completes (until ``ended`` holds "stop")."""
    async def loop() -> None:
        left = lost
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if left and "stop" not in ended:
                    left -= 1
                    continue
                ended.append("cancelled")
                raise
    return asyncio.get_running_loop().create_task(loop())


async def test_a_task_that_loses_its_first_cancels_still_ends() -> None:
    ended: list[str] = []
    task = _stubborn(2, ended)
    await asyncio.sleep(0)
    guard = asyncio.timeout(10)  # a hang guard: a single cancel would leave the loop running
    async with guard:
        await cancel_and_wait(task, every=0.05)
    assert not guard.expired()
    assert task.cancelled() and ended == ["cancelled"]


async def test_outcomes_are_kept_and_finished_tasks_left_alone() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    async def returns() -> int:
        return 7

    bad = asyncio.get_running_loop().create_task(fails())
    good = asyncio.get_running_loop().create_task(returns())
    await asyncio.sleep(0)
    await cancel_and_wait(bad, good)
    assert isinstance(bad.exception(), ValueError)
    assert good.result() == 7


async def test_the_callers_cancel_propagates() -> None:
    ended: list[str] = []
    task = _stubborn(10**6, ended)  # never ends by cancel: only the caller's cancel can stop
    waiter = asyncio.get_running_loop().create_task(cancel_and_wait(task, every=0.05))
    await asyncio.sleep(0.2)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not task.done()
    ended.append("stop")  # let the loop end now
    await cancel_and_wait(task)
    assert task.cancelled()


async def test_stop_loops_raises_the_error_a_loop_died_of() -> None:
    async def dies() -> None:
        raise ValueError("loop broke")

    ended: list[str] = []
    broken = asyncio.get_running_loop().create_task(dies())
    running = _stubborn(1, ended)
    await asyncio.sleep(0)
    with pytest.raises(ValueError, match="loop broke"):
        await stop_loops(running, broken)
    assert running.cancelled()
    await stop_loops(_stubborn(0, ended))  # a loop that ends by its cancel: no error
