"""The faults of a Sentinel deployment or a Redis Cluster
([`faults_topology`][fencedlease_lab.harness.faults_topology]): every kind it knows."""

from __future__ import annotations

import threading

from ..history import Operation
from .core import NemesisCore
from .env import FaultSpec


class TopologyActions(NemesisCore):
    """The action of every topology fault (Sentinel failovers, Cluster slot moves)."""

    def _do_topology(
        self, spec: FaultSpec, stop: threading.Event, op: Operation, target: int | None
    ) -> None:
        """A fault of [`faults_topology`][fencedlease_lab.harness.faults_topology]."""
        assert self._topology is not None
        self._finish(
            op, **self._topology.run(spec.kind, spec.duration_s, self.env.ttl_ms / 1000, stop)
        )
