"""Helpers for testing code that uses fencedlease, shipped publicly (in the spirit of
``trio.testing``).

[`FakeClock`][fencedlease.testing.FakeClock] is a [`Clock`][fencedlease.Clock] that moves only when
told to. Hand it to [`MemoryBackend`][fencedlease.MemoryBackend] (or
[`SqliteBackend`][fencedlease.SqliteBackend]) and to [`LeaseManager`][fencedlease.LeaseManager], and
expiry becomes a step of the test instead of a sleep:

```
from fencedlease import LeaseManager
from fencedlease.backends import MemoryBackend
from fencedlease.testing import FakeClock

clock = FakeClock()
leases = LeaseManager(MemoryBackend(clock=clock), clock=clock)
first = leases.acquire("job", ttl_ms=100).lease
clock.advance(100)                                  # the lease has expired now
assert leases.acquire("job", ttl_ms=100).lease.fencing_token > first.fencing_token
```

"""

from __future__ import annotations

import asyncio
import threading
from typing import Final

from fencedlease._core.errors import ValidationError
from fencedlease._core.validate import check_ms

__all__ = ["FakeClock"]

DEFAULT_START_TIME: Final = 1_700_000_000.0
"""The default wall-clock reading of a new [`FakeClock`][fencedlease.testing.FakeClock]:
2023-11-14T22:13:20Z."""


class FakeClock:
    """A clock that stands still until [`advance`][fencedlease.testing.FakeClock.advance] moves it;
    thread-safe.

    Both readings move together: ``monotonic()`` starts at ``0.0`` seconds and ``time()`` at
    ``start_time`` seconds since the epoch (default 1,700,000,000.0, a fixed instant, so tests do
    not depend on the day they run). Time is kept as an integer number of nanoseconds, so advancing
    by 99 ms and then 1 ms lands exactly where advancing by 100 ms does.

    A sleep on this clock takes no real time: [`sleep`][fencedlease.testing.FakeClock.sleep] (and
    [`async_sleep`][fencedlease.testing.FakeClock.async_sleep], which also yields to the event loop
    once) moves the clock forward by the time asked and returns. So an
    [`acquire`][fencedlease.LeaseManager.acquire] with ``wait_ms > 0`` on a store without release
    notifications (memory, SQLite) runs its whole wait at once, its attempts at exact fake times
    (``retry_delay_ms`` apart, give or take the ±50% jitter), and a test of it is deterministic.
    Moving the clock on sleep rather than blocking until another thread advances it is what keeps a
    single-threaded test free of deadlocks; a sleep in one thread moves the clock every other thread
    reads, as time would. (The Redis store's hand-off wait is woken by Redis, not by this clock.)

    Raises:
        ValidationError: ``start_time`` is not a finite ``int`` or ``float``.
    """

    def __init__(self, start_time: float = DEFAULT_START_TIME) -> None:
        if (
            isinstance(start_time, bool)
            or not isinstance(start_time, (int, float))
            or start_time != start_time  # NaN
            or start_time in (float("inf"), float("-inf"))
        ):
            raise ValidationError(
                "start_time", f"start_time must be a finite number of seconds; got {start_time!r}"
            )
        self._start_wall_ns = round(start_time * 1_000_000_000)
        self._elapsed_ns = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<FakeClock elapsed_ms={self.elapsed_ms}>"

    def monotonic(self) -> float:
        """Seconds since the clock was made (starts at ``0.0``)."""
        with self._lock:
            return self._elapsed_ns / 1_000_000_000

    def time(self) -> float:
        """Seconds since the epoch: ``start_time`` plus the time advanced so far."""
        with self._lock:
            return (self._start_wall_ns + self._elapsed_ns) / 1_000_000_000

    @property
    def elapsed_ms(self) -> int:
        """Milliseconds advanced so far (whole milliseconds, rounded down)."""
        with self._lock:
            return self._elapsed_ns // 1_000_000

    def advance(self, ms: int) -> None:
        """Move both readings forward by ``ms`` milliseconds (an ``int``, 0 or more).

        Raises:
            ValidationError: ``ms`` is not an int with 0 <= ms <= 2,147,483,647.
        """
        step = check_ms("ms", ms, 0)
        with self._lock:
            self._elapsed_ns += step * 1_000_000

    def sleep(self, seconds: float) -> None:
        """Move both readings forward by ``seconds`` (rounded to the nanosecond) and return at
        once: the clock's sleep takes no real time (see the class docstring).

        Raises:
            ValidationError: ``seconds`` is not a finite number >= 0.
        """
        step = _sleep_ns(seconds)
        with self._lock:
            self._elapsed_ns += step

    async def async_sleep(self, seconds: float) -> None:
        """[`sleep`][fencedlease.testing.FakeClock.sleep], then one yield to the event loop (``await
        asyncio.sleep(0)``), as a real sleep lets other tasks run.

        Raises:
            ValidationError: ``seconds`` is not a finite number >= 0.
        """
        self.sleep(seconds)
        await asyncio.sleep(0)


def _sleep_ns(seconds: float) -> int:
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not 0 <= seconds < float("inf")
    ):
        raise ValidationError("seconds", f"seconds must be a finite number >= 0; got {seconds!r}")
    return round(seconds * 1_000_000_000)
