"""The run itself: the workers started, the schedule run while they work with the progress
reported, every worker stopped, and the notes and the final counter recorded."""

from __future__ import annotations

import functools
import multiprocessing
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import attrs

from ..environment import LeaseRedis, Network
from ..faults_clock import WallClock, find_libfaketime
from ..history import HistoryWriter
from ..nemesis import Nemesis
from ..resources import ResourceSpec, read_final_counter, read_final_counters
from ..workload import Board
from .faults import _make_nemesis
from .prepare import _Run
from .processes import _processes, _restart_worker, _start_workers, _wait_ready


@attrs.frozen
class Progress:
    """A snapshot for a live display: seconds ``elapsed`` of ``duration``, each worker's board
    fields, the fault in force (or None), and the faults done so far."""

    elapsed_s: float
    duration_s: float
    workers: list[dict[str, int]]
    current_fault: str | None
    faults_done: list[str]
    faults_planned: int


def _run_workers(
    run: _Run,
    stack: ExitStack,
    lease_redis: LeaseRedis,
    spec: ResourceSpec,
    network: Network,
    on_progress: Callable[[Progress], None] | None,
) -> None:
    """Start the workers, run the nemesis schedule while they work, stop them all, and record
    the notes and the final counter in the run's history part."""
    config = run.config
    ctx = multiprocessing.get_context("spawn")
    board = Board(ctx, config.workers)
    library = find_libfaketime()
    if library is not None:
        run.wall_clock = WallClock.in_folder(run.parts_dir, library)
    go, stop = ctx.Event(), ctx.Event()
    run_writer = stack.enter_context(HistoryWriter(run.parts_dir / "history-run.jsonl", "run"))
    nemesis_writer = stack.enter_context(
        HistoryWriter(run.parts_dir / "history-nemesis.jsonl", "nemesis")
    )
    nemesis = _make_nemesis(run, stack, board, nemesis_writer, lease_redis, spec, network)
    wait_ms = 2 * config.ttl_ms + config.body
    join_s = (wait_ms + config.body + 2 * config.ttl_ms) / 1000 + 5.0
    with _processes(ctx, stop, join_s) as procs:
        nemesis.env.alive = lambda worker: worker < len(procs) and procs[worker].is_alive()
        _start_workers(run, ctx, board, go, stop, procs, spec, network, wait_ms)
        nemesis.env.restart_worker = functools.partial(
            _restart_worker,
            procs,
            stop,
            functools.partial(
                _start_workers, run, ctx, board, go, stop, procs, spec, network, wait_ms
            ),
        )
        _wait_ready(board, procs, timeout_s=60.0)
        _record_start(run, run_writer, spec, lease_redis, network)
        _run_schedule(run, board, procs, nemesis, go, stop, run_writer, on_progress)
    # every worker is stopped here
    _record_outcome(run, nemesis, spec, run_writer)
    run_writer.close()
    nemesis_writer.close()


def _record_start(
    run: _Run,
    writer: HistoryWriter,
    spec: ResourceSpec,
    lease_redis: LeaseRedis,
    network: Network,
) -> None:
    config = run.config
    writer.record(
        "start",
        "info",
        detail={
            "ttl_ms": config.ttl_ms,
            "heartbeat_ms": config.heartbeat,
            "margin_ms": config.margin_ms,
            "body_ms": config.body,
            "duration_s": config.duration_s,
            "mode": config.mode,
            "workers": config.workers,
            "worker_kinds": list(run.worker_kinds),
            "resource": spec.kind,
            "faults": list(config.faults),
            "seed": run.seed,
            "redis": lease_redis.kind,
            "toxiproxy": network.kind,
            "key": config.key,
            "keys": list(config.lease_keys),
            "prefix": run.prefix,
            "topology": config.topology,
            "replica_acks": config.replica_acks,
            "fencing": config.fencing,
        },
    )


def _run_schedule(
    run: _Run,
    board: Board,
    procs: list[Any],
    nemesis: Nemesis,
    go: Any,
    stop: Any,
    writer: HistoryWriter,
    on_progress: Callable[[Progress], None] | None,
) -> None:
    """Let the workers go and run the nemesis schedule for ``duration_s`` (or until every worker
    has exited), reporting progress; then stop the workers and the nemesis."""
    config = run.config
    t0 = time.monotonic()
    end = t0 + config.duration_s
    go.set()
    nemesis_stop = threading.Event()
    nemesis.start(t0, end, nemesis_stop)
    while True:
        now = time.monotonic()
        if on_progress is not None:
            on_progress(
                Progress(
                    now - t0,
                    config.duration_s,
                    board.snapshot(),
                    nemesis.current,
                    list(nemesis.done),
                    len(nemesis.schedule.faults),
                )
            )
        if now >= end or not any(p.is_alive() for p in procs):
            break
        time.sleep(min(0.2, max(0.0, end - now)))
    writer.record("stop", "info")
    stop.set()
    nemesis_stop.set()
    nemesis.join(timeout_s=10.0)


def _record_outcome(run: _Run, nemesis: Nemesis, spec: ResourceSpec, writer: HistoryWriter) -> None:
    """The skipped faults and other notes (secrets scrubbed), and the counter's final value."""
    for kind, reason in nemesis.skipped:
        run.notes.append(f"fault {kind} skipped: {reason}")
    if nemesis.error is not None:
        run.notes.append(
            f"the nemesis stopped with {type(nemesis.error).__name__}: {nemesis.error}"
        )
    run.notes[:] = [run.scrub(note) for note in run.notes]
    for note in run.notes:
        writer.record("note", "info", outcome="run-note", detail={"message": note})
    try:
        if len(spec.keys) > 1:
            for key, value in read_final_counters(spec).items():
                writer.record("final", "ok", key=key, value=value)
        else:
            writer.record("final", "ok", value=read_final_counter(spec))
    except Exception as exc:
        writer.record("final", "fail", detail={"error": f"{type(exc).__name__}: {exc}"})
