"""fencedlease.testing.FakeClock: stands still, advances exactly, moves both readings."""

from __future__ import annotations

import threading

import pytest

from fencedlease import ValidationError
from fencedlease.testing import FakeClock


def test_fake_clock_starts_at_fixed_readings() -> None:
    """monotonic() starts at 0.0 and time() at the given start (default 1,700,000,000.0)."""
    assert (FakeClock().monotonic(), FakeClock().time()) == (0.0, 1_700_000_000.0)
    assert FakeClock(start_time=5.5).time() == 5.5


def test_fake_clock_stands_still_until_advanced() -> None:
    """Reading the clock does not move it."""
    clock = FakeClock()
    assert [clock.monotonic() for _ in range(3)] == [0.0, 0.0, 0.0]


def test_advance_moves_both_readings_by_whole_milliseconds() -> None:
    """advance(ms) moves monotonic() and time() by ms / 1000 seconds, with no float drift."""
    clock = FakeClock(start_time=1_000.0)
    for _ in range(99):
        clock.advance(1)
    clock.advance(1)
    assert clock.monotonic() == 0.1
    assert clock.time() == 1_000.1
    assert clock.elapsed_ms == 100
    assert repr(clock) == "<FakeClock elapsed_ms=100>"


def test_advance_zero_is_allowed() -> None:
    """advance(0) is a no-op, not an error."""
    clock = FakeClock()
    clock.advance(0)
    assert clock.elapsed_ms == 0


@pytest.mark.parametrize("bad", [-1, 1.5, True, None, "1", 2_147_483_648])
def test_advance_refuses_what_is_not_a_millisecond_count(bad: object) -> None:
    """advance() takes an int of milliseconds 0..2,147,483,647; else ValidationError naming ms."""
    with pytest.raises(ValidationError) as info:
        FakeClock().advance(bad)  # type: ignore[arg-type]
    assert info.value.argument == "ms"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), True, "0", None])
def test_start_time_must_be_a_finite_number(bad: object) -> None:
    """start_time NaN, infinite or not a number raises ValidationError naming start_time."""
    with pytest.raises(ValidationError) as info:
        FakeClock(start_time=bad)  # type: ignore[arg-type]
    assert info.value.argument == "start_time"


def test_advance_from_many_threads_adds_up() -> None:
    """Concurrent advances are not lost."""
    clock = FakeClock()

    def tick() -> None:
        for _ in range(1_000):
            clock.advance(1)

    threads = [threading.Thread(target=tick) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert clock.elapsed_ms == 8_000
