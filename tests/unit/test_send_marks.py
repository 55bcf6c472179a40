"""A deadline counts from the real send: the backend moves the caller's send time to the moment
its command goes out (after connecting, and again before an EVAL after NOSCRIPT)."""

from __future__ import annotations

import asyncio

from fencedlease._core.clock import SendTime, mark_send, marking_sends, send_mark
from fencedlease.testing import FakeClock


def test_a_mark_moves_the_send_time_to_the_real_send() -> None:
    clock = FakeClock()
    sent = SendTime(clock)
    assert (sent.mono, sent.wall) == (0.0, clock.time())
    with marking_sends(sent.mark):
        clock.advance(800)  # the connection's handshake: two round trips
        mark_send()
        assert sent.mono == 0.8
        clock.advance(400)  # the EVALSHA answered NOSCRIPT
        mark_send()
    assert sent.mono == 1.2
    assert sent.wall == clock.time()
    clock.advance(1000)
    mark_send()  # outside the block: nobody is marked
    assert sent.mono == 1.2
    assert send_mark() is None


def test_marks_are_per_task() -> None:
    """Two acquires in flight on one loop each move their own send time."""
    clock = FakeClock()

    async def send(sent: SendTime, step_ms: int, started: asyncio.Event) -> None:
        with marking_sends(sent.mark):
            started.set()
            await asyncio.sleep(0)
            clock.advance(step_ms)
            mark_send()

    async def main() -> tuple[float, float]:
        first, second = SendTime(clock), SendTime(clock)
        a, b = asyncio.Event(), asyncio.Event()
        await asyncio.gather(send(first, 1000, a), send(second, 2000, b))
        return first.mono, second.mono

    assert asyncio.run(main()) == (1.0, 3.0)
    assert send_mark() is None
