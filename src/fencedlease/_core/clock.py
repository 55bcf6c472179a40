"""Where the library reads time: the [`Clock`][fencedlease.Clock] protocol and the real clock.

``monotonic`` (seconds) dates every deadline; ``time`` (seconds since the epoch) only the
``expires_at`` estimate a caller may persist. A fake clock
([`fencedlease.testing.FakeClock`][]) drives the same code in tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Protocol

__all__ = [
    "SYSTEM_CLOCK",
    "AsyncClock",
    "Clock",
    "SendTime",
    "SystemClock",
    "mark_send",
    "marking_sends",
    "on_ns_grid",
    "send_mark",
]


class Clock(Protocol):
    """Where the library reads time, and how it waits. ``monotonic`` (seconds) for deadlines,
    ``time`` (seconds since the epoch) only for ``expires_at``, the wall-clock estimate a caller
    may persist; ``sleep(seconds)`` for the sync manager's wait between two acquire attempts
    (``retry_delay_ms``) on a store without release notifications, so a fake clock drives the
    waits too ([`FakeClock`][fencedlease.testing.FakeClock])."""

    def monotonic(self) -> float: ...

    def time(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class AsyncClock(Clock, Protocol):
    """A [`Clock`][fencedlease.Clock] the asyncio face can wait on: ``async_sleep(seconds)`` is its
    wait between two acquire attempts, as ``sleep`` is the sync face's. A clock without
    ``async_sleep`` (such as [`SystemClock`][fencedlease.SystemClock]) is waited on with
    `asyncio.sleep`, in real time."""

    async def async_sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock: `time.monotonic`, `time.time` and `time.sleep`. (The
    asyncio face waits on `asyncio.sleep` with it: the sync face imports no asyncio.)"""

    monotonic = staticmethod(time.monotonic)
    sleep = staticmethod(time.sleep)
    time = staticmethod(time.time)  # last: the name shadows the module in this class body


SYSTEM_CLOCK = SystemClock()


def on_ns_grid(seconds: float) -> float:
    """``seconds`` rounded to the nanosecond: how every moment the core computes by adding a
    duration (a deadline, a renewal's due time, an acquire's budget) is kept.

    Float sums drift from the decimal they stand for (``0.1 + 0.05`` is
    ``0.15000000000000002``), so a due time so computed would lie an ulp after the clock reading
    that should reach it: a [`FakeClock`][fencedlease.testing.FakeClock] stepped by exactly one
    heartbeat (its readings are whole nanoseconds, ``ns / 1e9``) would miss that step's renewal,
    and a renewer would wait a near-zero slice again and again. Rounded, the two are the same
    float; a real clock loses under half a nanosecond.
    """
    return round(seconds, 9)


_SEND_MARK: ContextVar[Callable[[], None] | None] = ContextVar(
    "fencedlease_send_mark", default=None
)


class marking_sends:
    """Within the block (this thread, or this asyncio task), a backend about to send the command
    whose send time dates a deadline calls ``mark()`` (`mark_send`) right before it goes
    out, so the time the caller took before the call is moved later.

    A deadline counts from the moment its command was sent and must never be later than the
    store's own expiry, so the caller takes the time before calling the backend; but what the
    backend does before the command really leaves (making a connection: a TCP and a handshake
    round trip or more; an EVALSHA refused with ``NOSCRIPT``, which ran nothing) would otherwise
    eat into the lease's margin. A later mark is still before the command runs, so the deadline
    stays conservative. A backend that never calls `mark_send` keeps the caller's time.

    A class rather than a generator-based context manager: it is entered on every acquire.
    """

    __slots__ = ("_mark", "_token")

    def __init__(self, mark: Callable[[], None]) -> None:
        self._mark = mark

    def __enter__(self) -> None:
        self._token = _SEND_MARK.set(self._mark)

    def __exit__(self, *exc_info: object) -> None:
        _SEND_MARK.reset(self._token)


def send_mark() -> Callable[[], None] | None:
    """The mark `marking_sends` set for the current context, or None (nobody dates a
    deadline from this command: a backend need not prepare anything)."""
    return _SEND_MARK.get()


def mark_send() -> None:
    """Call the current context's mark (see `marking_sends`), if any: the command the
    deadline counts from is going out now."""
    mark = _SEND_MARK.get()
    if mark is not None:
        mark()


class SendTime:
    """When a command was sent, on ``clock``: both readings taken at construction and again at each
    `mark` (pass ``mark`` to `marking_sends` so the backend moves it to the real send).
    ``mono`` (monotonic seconds) dates the deadline, ``wall`` (epoch seconds) ``expires_at``."""

    __slots__ = ("_clock", "mono", "wall")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.mono, self.wall = clock.monotonic(), clock.time()

    def mark(self) -> None:
        """The command is going out now."""
        self.mono, self.wall = self._clock.monotonic(), self._clock.time()
