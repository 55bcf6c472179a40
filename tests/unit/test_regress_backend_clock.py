"""Regression: the memory and SQLite backends count a TTL from the clock reading rounded up, so
a store never frees a lease before the manager's own deadline (sent time + ttl) says it is lost:
never two holders both told "held"."""

from __future__ import annotations

from fencedlease import LeaseManager
from fencedlease.backends import MemoryBackend, SqliteBackend


class StepClock:
    """A settable clock (any Clock the manager and backend accept)."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0 + self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _two_holders(backend_factory) -> tuple[bool, bool]:  # type: ignore[no-untyped-def]
    clock = StepClock()
    backend = backend_factory(clock)
    first = LeaseManager(backend, clock=clock)
    second = LeaseManager(backend, clock=clock)
    clock.now = 0.0004  # the grant is sent at 0.4 ms
    a = first.acquire("k", ttl_ms=100).lease
    assert a is not None
    clock.now = 0.0996  # 99.6 ms: less than ttl since a's acquire was sent (0.4 + 100 = 100.4)
    b = second.acquire("k", ttl_ms=100).lease
    return b is not None, not a.lost


def test_memory_backend_expires_before_the_managers_deadline() -> None:
    b_granted, a_still_held = _two_holders(lambda clock: MemoryBackend(clock=clock))
    assert not (b_granted and a_still_held), "two leases on 'k' both report held"


def test_sqlite_backend_expires_before_the_managers_deadline() -> None:
    b_granted, a_still_held = _two_holders(lambda clock: SqliteBackend(":memory:", clock=clock))
    assert not (b_granted and a_still_held), "two leases on 'k' both report held"
