"""The worker processes: started (``spawn``), restarted in place of a killed one, waited for,
and every one stopped when the run ends (SIGCONT, the stop event, SIGTERM, SIGKILL, each
bounded in time)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..environment import Network
from ..faults_clock import spawning_under
from ..resources import ResourceSpec
from ..schedule import worker_seed
from ..workers import worker_main
from ..workload import Board, WorkerConfig
from .prepare import _Run


def _start_workers(
    run: _Run,
    ctx: Any,
    board: Board,
    go: Any,
    stop: Any,
    procs: list[Any],
    spec: ResourceSpec,
    network: Network,
    wait_ms: int,
    only: int | None = None,
) -> None:
    """Start one process per worker (each joins ``procs`` as soon as it runs); with ``only``,
    that worker's alone, in place of its dead process (``kill-holder``)."""
    config = run.config
    for index, name in enumerate(run.names):
        if only is not None and index != only:
            continue
        worker = WorkerConfig(
            index=index,
            name=name,
            redis_url=network.worker_urls[index],
            prefix=run.prefix,
            keys=config.lease_keys,
            mode=config.mode,
            resource=network.resource_spec or spec,
            history_path=str(run.parts_dir / f"history-{name}.jsonl"),
            ttl_ms=config.ttl_ms,
            heartbeat_ms=config.heartbeat,
            body_ms=config.body,
            wait_ms=wait_ms,
            socket_timeout_ms=max(100, config.ttl_ms // 2),
            duration_s=config.duration_s,
            seed=worker_seed(run.seed, index),
            kind=run.worker_kinds[index],
            wait_share=config.wait_share,
            netns=network.netns[index] if network.netns else None,
            replica_acks=config.replica_acks,
            fencing=config.fencing,
            # A list-append resource records each critical section as one transaction.
            stale_share=0.0 if config.resource.endswith("-append") else config.stale_share,
        )
        proc = ctx.Process(
            target=worker_main,
            args=(worker, board, go, stop),
            name=f"fencedlease-check-{name}",
            daemon=True,
        )
        with spawning_under(run.wall_clock):
            proc.start()
        if only is None:
            procs.append(proc)
        else:
            procs[only] = proc


def _restart_worker(procs: list[Any], stop: Any, start: Callable[..., None], index: int) -> None:
    """Start a fresh process for worker ``index`` (``start(only=index)``) once its dead one is
    reaped, unless the run is stopping; it continues the worker's history file."""
    procs[index].join(5.0)
    if not stop.is_set():
        start(only=index)


@contextlib.contextmanager
def _processes(ctx: Any, stop: Any, join_s: float) -> Iterator[list[Any]]:
    """A list to put started processes in; all of them are stopped when the block ends."""
    procs: list[Any] = []
    try:
        yield procs
    finally:
        stop.set()
        for proc in procs:
            if proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
        give_up = time.monotonic() + join_s
        for proc in procs:
            proc.join(max(0.1, give_up - time.monotonic()))
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(3.0)
            if proc.is_alive():
                proc.kill()
                proc.join(3.0)


def _wait_ready(board: Board, procs: list[Any], timeout_s: float) -> None:
    give_up = time.monotonic() + timeout_s
    while not all(board.get(i, "pid") for i in range(board.workers)):
        dead = [p.name for p in procs if not p.is_alive()]
        if dead:
            raise RuntimeError(f"worker(s) {dead} exited before they were ready")
        if time.monotonic() > give_up:
            raise RuntimeError(f"workers not ready within {timeout_s} s")
        time.sleep(0.02)
