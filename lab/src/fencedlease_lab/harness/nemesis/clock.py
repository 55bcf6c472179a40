"""The ``clock`` fault: every worker's wall clock jumps and strobes
([`faults_clock`][fencedlease_lab.harness.faults_clock]: libfaketime in each worker process)."""

from __future__ import annotations

import threading

from ..faults_clock import run_clock_fault
from ..history import Operation
from .core import NemesisCore
from .env import FaultSpec


class ClockActions(NemesisCore):
    """The action of the ``clock`` fault."""

    def _do_clock(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        wall_clock = self.env.wall_clock
        assert wall_clock is not None  # unavailable_reason leaves the fault out without one
        done = run_clock_fault(
            wall_clock.set, ttl_ms=self.env.ttl_ms, duration_s=spec.duration_s, stop=stop
        )
        self._finish(op, **done)
