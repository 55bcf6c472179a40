"""Clock readings as the backends compare them: whole milliseconds."""

from __future__ import annotations

__all__ = ["clock_ms"]


def clock_ms(seconds: float) -> int:
    """A clock reading in seconds as whole milliseconds, rounded to the nearest.

    Rounding (not truncating) keeps a fake clock's ``0.099 s`` at 99 ms whatever the float error.
    """
    return round(seconds * 1000)
