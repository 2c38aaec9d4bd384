"""`dbhost.admission.Admission`: at most `limit` ordinary requests inside the engine, in
arrival order; the view service's lane goes in at once."""

from __future__ import annotations

import asyncio

import pytest

from dbhost.admission import Admission


async def test_ordinary_requests_wait_for_a_slot_in_arrival_order() -> None:
    adm = Admission(2)
    await adm.enter(False)
    await adm.enter(False)
    order: list[int] = []

    async def req(i: int) -> None:
        await adm.enter(False)
        order.append(i)

    waiters = [asyncio.create_task(req(i)) for i in range(3)]
    await asyncio.sleep(0)
    assert order == [] and adm.snapshot()["waiting"] == 3
    adm.leave(False)
    await asyncio.sleep(0)
    assert order == [0]
    adm.leave(False)
    adm.leave(False)
    await asyncio.gather(*waiters)
    assert order == [0, 1, 2]
    assert adm.inside == 2
    st = adm.snapshot()
    assert st["queued"] == 3 and st["waiting_peak"] == 3 and st["waiting"] == 0


async def test_the_service_lane_goes_in_at_once_however_full() -> None:
    adm = Admission(1)
    await adm.enter(False)
    queued = asyncio.create_task(adm.enter(False))
    await asyncio.sleep(0)
    for _ in range(5):
        await asyncio.wait_for(adm.enter(True), 1)  # never waits, takes no slot
    assert adm.inside == 1 and adm.service_inside == 5 and not queued.done()
    for _ in range(5):
        adm.leave(True)  # the service requests leave: the ordinary one still holds the slot
    await asyncio.sleep(0)
    assert not queued.done()
    adm.leave(False)
    await asyncio.wait_for(queued, 1)
    assert adm.inside == 1 and adm.service_inside == 0


async def test_a_cancelled_waiter_gives_up_its_place_and_a_granted_one_hands_it_on() -> None:
    adm = Admission(1)
    await adm.enter(False)
    a = asyncio.create_task(adm.enter(False))
    b = asyncio.create_task(adm.enter(False))
    await asyncio.sleep(0)
    a.cancel()  # cancelled while queued
    with pytest.raises(asyncio.CancelledError):
        await a
    assert adm.snapshot()["waiting"] == 1
    adm.leave(False)  # grants b
    b.cancel()  # ... which is cancelled before it runs: the slot must not leak
    with pytest.raises(asyncio.CancelledError):
        await b
    assert adm.inside == 0
    await asyncio.wait_for(adm.enter(False), 1)
    assert adm.inside == 1


async def test_no_limit_admits_everything() -> None:
    adm = Admission(0)
    for _ in range(100):
        await asyncio.wait_for(adm.enter(False), 1)
    assert adm.inside == 100
