"""The ``clock`` fault: every worker's wall clock jumps and strobes
([`faults_clock`][fencedlease_lab.harness.faults_clock])."""

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
        offsets = self.env.board.wall_offsets
        workers = range(self.env.board.workers)
        done = run_clock_fault(
            offsets, workers, ttl_ms=self.env.ttl_ms, duration_s=spec.duration_s, stop=stop
        )
        self._finish(op, **done)
