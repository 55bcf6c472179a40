"""Clock readings as the backends compare them: whole milliseconds.

A reading is taken once and gives two numbers: ``now_ms``, the whole milliseconds that have
surely passed (rounded down), against which expiry is checked, and ``start_ms``, the reading
rounded up, from which a new expiry is counted. Counting a TTL from the later of the two keeps the
store's expiry at or after the manager's own deadline (sent time + ttl), never before it: a lease
granted at 0.4 ms for 100 ms is free from 101 ms, not from 100 ms while its holder still believes
it holds it until 100.4 ms. A millionth of a millisecond of slack absorbs float error, so a fake
clock's ``0.099 s`` reads 99 ms both ways.
"""

from __future__ import annotations

import math

__all__ = ["clock_ms"]

_SLACK = 1e-6


def clock_ms(seconds: float) -> tuple[int, int]:
    """``(now_ms, start_ms)``: the reading in whole milliseconds rounded down and rounded up."""
    ms = seconds * 1000
    return math.floor(ms + _SLACK), math.ceil(ms - _SLACK)
