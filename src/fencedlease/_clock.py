"""Where the library reads time: the :class:`Clock` protocol and the real clock.

``monotonic`` (seconds) dates every deadline; ``time`` (seconds since the epoch) only the
``expires_at`` estimate a caller may persist. A fake clock
(:class:`fencedlease.testing.FakeClock`) drives the same code in tests.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock"]


class Clock(Protocol):
    """Where the library reads time. ``monotonic`` (seconds) for deadlines, ``time`` (seconds since
    the epoch) only for ``expires_at``, the wall-clock estimate a caller may persist."""

    def monotonic(self) -> float: ...

    def time(self) -> float: ...


class SystemClock:
    """The real clock: :func:`time.monotonic` and :func:`time.time`."""

    monotonic = staticmethod(time.monotonic)
    time = staticmethod(time.time)


SYSTEM_CLOCK = SystemClock()
