"""A worker process of the check: [`worker_main`][fencedlease_lab.harness.workers.worker_main] runs
one of the ways of [`workload`][fencedlease_lab.harness.workload] (``sync``, ``threads``) or of
[`aio_worker`][fencedlease_lab.harness.aio_worker] (``asyncio``), as its
[`WorkerConfig`][fencedlease_lab.harness.workload.WorkerConfig] says."""

from __future__ import annotations

import logging
import signal
from typing import Any

from ..servers.netns import enter_netns
from .aio_worker import run_asyncio_worker
from .history import HistoryWriter
from .recorder import Recorder
from .workload import IDLE, Board, WorkerConfig, run_sync_worker

__all__ = ["worker_main"]


def worker_main(config: WorkerConfig, board: Board, go: Any, stop: Any) -> None:
    """The body of one worker process: publish its pid, wait (at most 60 s) for the ``go``
    event, then loop over lease cycles until ``stop`` is set, ``duration_s`` has passed or
    ``max_cycles`` is reached. Everything it sees goes into its history.

    ``config.kind`` says how: ``sync`` (one thread, a [`LeaseManager`][fencedlease.LeaseManager]),
    ``threads`` ([`THREADS`][] threads sharing one [`LeaseManager`][fencedlease.LeaseManager]),
    ``asyncio`` ([`THREADS`][] tasks sharing one
    [`AsyncLeaseManager`][fencedlease.aio.AsyncLeaseManager]). Every lease event the manager reports
    goes into the history through [`Recorder`][fencedlease_lab.harness.recorder.Recorder].

    With ``config.netns`` the process first enters that network namespace (its link for the
    kernel faults). The manager runs on the library's default clock; the process was started on
    the run's wall clock ([`WallClock`][fencedlease_lab.harness.faults_clock.WallClock]), which
    the ``clock`` fault moves, so the manager and the history's ``wall`` readings see each jump."""
    if config.netns is not None:
        enter_netns(config.netns)  # before any thread or socket exists
    # The parent stops a straggler with SIGTERM; leave through the finally blocks.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    # The library's warnings (a cleanup release that failed under a fault) are expected here and
    # would scribble over the live display; what matters is in the history.
    logging.getLogger("fencedlease").addHandler(logging.NullHandler())
    writer = HistoryWriter(config.history_path, config.name)
    recorder = Recorder(writer)
    try:
        if config.kind == "asyncio":
            run_asyncio_worker(config, board, go, stop, recorder)
        else:
            run_sync_worker(config, board, go, stop, recorder)
    finally:
        board.set_phase(config.index, IDLE)
        board.set(config.index, "token", 0)
        writer.close()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)
