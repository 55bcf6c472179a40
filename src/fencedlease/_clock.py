"""Where the library reads time: the :class:`Clock` protocol and the real clock.

``monotonic`` (seconds) dates every deadline; ``time`` (seconds since the epoch) only the
``expires_at`` estimate a caller may persist. A fake clock
(:class:`fencedlease.testing.FakeClock`) drives the same code in tests.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "AsyncClock", "Clock", "SystemClock", "on_ns_grid"]


class Clock(Protocol):
    """Where the library reads time, and how it waits. ``monotonic`` (seconds) for deadlines,
    ``time`` (seconds since the epoch) only for ``expires_at``, the wall-clock estimate a caller
    may persist; ``sleep(seconds)`` for the sync manager's wait between two acquire attempts
    (``retry_delay_ms``) on a store without release notifications, so a fake clock drives the
    waits too (:class:`~fencedlease.testing.FakeClock`)."""

    def monotonic(self) -> float: ...

    def time(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class AsyncClock(Clock, Protocol):
    """A :class:`Clock` the asyncio face can wait on: ``async_sleep(seconds)`` is its wait between
    two acquire attempts, as ``sleep`` is the sync face's. A clock without ``async_sleep`` (such as
    :class:`SystemClock`) is waited on with :func:`asyncio.sleep`, in real time."""

    async def async_sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock: :func:`time.monotonic`, :func:`time.time` and :func:`time.sleep`. (The
    asyncio face waits on :func:`asyncio.sleep` with it: the sync face imports no asyncio.)"""

    monotonic = staticmethod(time.monotonic)
    sleep = staticmethod(time.sleep)
    time = staticmethod(time.time)  # last: the name shadows the module in this class body


SYSTEM_CLOCK = SystemClock()


def on_ns_grid(seconds: float) -> float:
    """``seconds`` rounded to the nanosecond: how every moment the core computes by adding a
    duration (a deadline, a renewal's due time, an acquire's budget) is kept.

    Float sums drift from the decimal they stand for (``0.1 + 0.05`` is
    ``0.15000000000000002``), so a due time so computed would lie an ulp after the clock reading
    that should reach it: a :class:`~fencedlease.testing.FakeClock` stepped by exactly one
    heartbeat (its readings are whole nanoseconds, ``ns / 1e9``) would miss that step's renewal,
    and a renewer would wait a near-zero slice again and again. Rounded, the two are the same
    float; a real clock loses under half a nanosecond.
    """
    return round(seconds, 9)
