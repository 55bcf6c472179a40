"""A lane's life in the history: each lane (the thread of a ``sync`` worker, a thread of a
``threads`` one, a task of an ``asyncio`` one) records a ``lane`` operation around its loop of
cycles, so that a lane that dies (an exception the cycle does not catch, such as a stray
``CancelledError`` in an asyncio task) or stops recording (a hung call, a process that died) is
seen by the checker ([`lanes`][fencedlease_lab.harness.lanes]) instead of leaving the run to go on
quietly with less workload than it claims."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import attrs

from ..history import HistoryWriter
from ..lanes import LANE_OP

__all__ = ["LANE_OP", "LaneTally", "lane_record"]


@attrs.define
class LaneTally:
    """What a lane did so far: the ``cycles`` it began."""

    cycles: int = 0

    def next_cycle(self, stop: Any, deadline: float, max_cycles: int) -> bool:
        """Whether the lane begins another cycle (then counted): not once ``stop`` (an event)
        is set, ``deadline`` (monotonic seconds) has passed or ``max_cycles`` were begun."""
        if stop.is_set() or time.monotonic() >= deadline or self.cycles >= max_cycles:
            return False
        self.cycles += 1
        return True


@contextlib.contextmanager
def lane_record(writer: HistoryWriter, lane: int) -> Iterator[LaneTally]:
    """Record lane number ``lane`` of ``writer``'s process as a ``lane`` operation: ``invoke``
    when its loop begins, ``ok`` (outcome ``finished``, ``detail.cycles``) when it ends, ``fail``
    (outcome ``died``, ``detail.error``) when an exception of any kind, ``CancelledError``
    included, leaves the loop; the exception goes on. A lane that never completes (its process
    killed, or the loop hung until the run stopped it) leaves the invocation alone."""
    op = writer.invoke(LANE_OP, detail={"lane": lane})
    tally = LaneTally()
    try:
        yield tally
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}".rstrip(": ")
        op.fail(outcome="died", detail={"lane": lane, "cycles": tally.cycles, "error": error})
        raise
    op.ok(outcome="finished", detail={"lane": lane, "cycles": tally.cycles})
