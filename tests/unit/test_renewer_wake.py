"""A lease added to a renewer wakes its owner (the thread, the task) only when its first renewal is
due before the owner's planned wake-up; a later one waits for that wake-up, and is still renewed.

In-process memory backends on a FakeClock; a wake-up is counted at the renewer's ``_wake``.
"""

from __future__ import annotations

import asyncio

import pytest
from test_face_decisions import eventually

from fencedlease import Lease, LeaseManager
from fencedlease.aio import AsyncLease, AsyncLeaseManager
from fencedlease.backends import AsyncMemoryBackend, MemoryBackend
from fencedlease.testing import FakeClock


def _held(result: object) -> Lease:
    lease = getattr(result, "lease", None)
    assert isinstance(lease, Lease)
    return lease


def test_the_sync_renewer_is_woken_only_by_a_lease_due_before_its_planned_wakeup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    with LeaseManager(MemoryBackend(clock=clock), clock=clock) as leases:
        renewer = leases.renewer
        wakes: list[str] = []
        wake = renewer._wake

        def counted() -> None:
            wakes.append("wake")
            wake()

        monkeypatch.setattr(renewer, "_wake", counted)
        a, b, c = (_held(leases.acquire(key, ttl_ms=40_000)) for key in "abc")

        first = renewer.add(a._state, 10_000, None)  # starts the thread: it reads the schedule
        assert first.next_due == 10.0
        eventually(lambda: renewer._asleep_until == 10.0)
        later = renewer.add(b._state, 20_000, None)
        assert (later.next_due, wakes) == (20.0, [])
        sooner = renewer.add(c._state, 1_000, None)
        assert (sooner.next_due, wakes) == (1.0, ["wake"])
        eventually(lambda: renewer._asleep_until == 1.0)

        clock.advance(1_000)  # c is due: renewed alone (the others are far from due)
        eventually(lambda: renewer.round_trips == 1)
        eventually(lambda: sooner.next_due == 2.0)
        clock.advance(9_000)
        clock.advance(10_000)  # 20 s: b's first renewal is due, though b never woke the thread
        eventually(lambda: later.next_due > 20.0)
        assert not (a.lost or b.lost or c.lost)


def test_the_async_renewer_is_woken_only_by_a_lease_due_before_its_planned_wakeup() -> None:
    clock = FakeClock()

    async def settle() -> None:
        for _ in range(20):  # the renewal task runs within a few loop iterations
            await asyncio.sleep(0)

    async def main() -> None:
        async with AsyncLeaseManager(AsyncMemoryBackend(clock=clock), clock=clock) as leases:
            renewer = leases.renewer
            held = []
            for key in "abc":
                lease = (await leases.acquire(key, ttl_ms=40_000)).lease
                assert isinstance(lease, AsyncLease)
                held.append(lease)
            a, b, c = held

            first = renewer.add(a._state, 10_000, None)
            await settle()
            assert (first.next_due, renewer._asleep_until) == (10.0, 10.0)
            waker = renewer._wakeup
            later = renewer.add(b._state, 20_000, None)
            assert (later.next_due, waker.is_set()) == (20.0, False)
            sooner = renewer.add(c._state, 1_000, None)
            assert (sooner.next_due, waker.is_set()) == (1.0, True)
            await settle()
            assert renewer._asleep_until == 1.0

            clock.advance(1_000)
            renewer.wake()  # the task sleeps on the loop's real clock: tell it the time moved
            await settle()
            assert (renewer.round_trips, sooner.next_due) == (1, 2.0)
            for step_ms in (9_000, 10_000):
                clock.advance(step_ms)
                renewer.wake()
                await settle()
            assert later.next_due > 20.0  # b's first renewal came on time
            assert not (a.lost or b.lost or c.lost)

    asyncio.run(main())
