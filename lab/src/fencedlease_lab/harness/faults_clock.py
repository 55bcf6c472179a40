"""The ``clock`` fault: the workers' wall clocks jump and strobe; their leases must not notice.

A lease's deadline is counted on the monotonic clock only; the wall clock dates nothing but the
``expires_at`` estimate a caller may persist. Jepsen's clock nemesis (Kingsbury, "Jepsen:
clocks") bumps and strobes the nodes' clocks to find code that trusts wall time; here every
worker reads wall time through an [`OffsetClock`][fencedlease_lab.harness.faults_clock.OffsetClock],
whose offset the nemesis sets in shared memory (one ``double`` per worker,
[`make_offsets`][fencedlease_lab.harness.faults_clock.make_offsets]): the worker's
[`LeaseManager`][fencedlease.LeaseManager] gets it as its ``clock=``, and the worker's history
writer takes its ``wall`` readings from it, so the history shows the jumps as the worker saw them.

The fault ([`run_clock_fault`][fencedlease_lab.harness.faults_clock.run_clock_fault]) takes the
``duration_s`` it is given in four steps: every worker jumps forwards by several TTLs, then
backwards by several TTLs, then strobes (its wall clock flips between the two every few
milliseconds), then all offsets are set back to 0. A jump that shortened a lease would show as a
loss with no fault to explain it (the clock fault never explains one); one that lengthened it would
let two leases of the key overlap. Both are properties the checker judges.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

__all__ = [
    "JUMP_TTLS",
    "STROBE_PERIOD_S",
    "OffsetClock",
    "make_offsets",
    "run_clock_fault",
]

#: How far a jump goes, in TTLs (forwards, then backwards).
JUMP_TTLS: Final = 5
#: How long a strobe keeps each of its two offsets, in seconds.
STROBE_PERIOD_S: Final = 0.01


def make_offsets(ctx: Any, workers: int) -> Any:
    """One wall-clock offset (seconds, a C ``double``) per worker, in shared memory made by the
    multiprocessing context ``ctx``; all 0. Handed to the workers when they start."""
    return ctx.Array("d", workers, lock=False)


class OffsetClock:
    """A [`fencedlease.Clock`][] whose wall time is ``base.time()`` plus ``offsets[index]``
    (seconds, read at every call); ``monotonic`` and ``sleep`` are ``base``'s. ``base``: any
    clock (default the real one: `time.monotonic`, `time.time`,
    `time.sleep`; a [`FakeClock`][fencedlease.testing.FakeClock] in tests)."""

    def __init__(self, offsets: Any, index: int, base: Any = None) -> None:
        self._offsets = offsets
        self._index = index
        self._base = time if base is None else base
        self.monotonic: Callable[[], float] = self._base.monotonic
        self.sleep: Callable[[float], None] = self._base.sleep

    def time(self) -> float:
        """Seconds since the epoch, as the jumped clock reads."""
        return float(self._base.time()) + float(self._offsets[self._index])


def _set_all(offsets: Any, workers: Sequence[int], value_s: float) -> None:
    for worker in workers:
        offsets[worker] = value_s


def run_clock_fault(
    offsets: Any,
    workers: Sequence[int],
    *,
    ttl_ms: int,
    duration_s: float,
    stop: threading.Event,
) -> dict[str, Any]:
    """Jump the wall clocks of ``workers`` forwards by
    [`JUMP_TTLS`][fencedlease_lab.harness.faults_clock.JUMP_TTLS] x ``ttl_ms``, then backwards as
    far, then strobe between the two, each for a third of ``duration_s`` (seconds); then set them
    back to 0 (also when ``stop`` is set or an error is raised).

    Returns what was done, for the history: ``steps`` (``{"step", "offset_ms", "at_ms"}``:
    ``"forward"``, ``"backward"``, ``"strobe"`` (``offset_ms`` the amplitude, ± that) and
    ``"reset"``; ``at_ms`` milliseconds after the fault began), ``strobe_flips`` (how many
    times the strobe flipped) and ``jump_ms``.
    """
    jump_s = JUMP_TTLS * ttl_ms / 1000
    third = duration_s / 3
    began = time.monotonic()
    steps: list[dict[str, Any]] = []

    def step(name: str, offset_s: float) -> None:
        _set_all(offsets, workers, offset_s)
        at_ms = round((time.monotonic() - began) * 1000)
        steps.append({"step": name, "offset_ms": round(offset_s * 1000), "at_ms": at_ms})

    flips = 0
    try:
        step("forward", jump_s)
        if not stop.wait(third):
            step("backward", -jump_s)
            if not stop.wait(third):
                step("strobe", jump_s)
                strobe_end = time.monotonic() + third
                sign = 1.0
                while time.monotonic() < strobe_end and not stop.is_set():
                    _set_all(offsets, workers, sign * jump_s)
                    flips += 1
                    sign = -sign
                    time.sleep(STROBE_PERIOD_S)
    finally:
        step("reset", 0.0)
    return {"steps": steps, "strobe_flips": flips, "jump_ms": round(jump_s * 1000)}
