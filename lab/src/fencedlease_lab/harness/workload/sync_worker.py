"""The ``sync`` and ``threads`` workers: a [`LeaseManager`][fencedlease.LeaseManager] on a warmed
connection pool, one lane per thread, each looping over its cycles until the run stops it."""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from fencedlease import LeaseManager, LeaseNotAcquiredError

from ..recorder import Recorder
from ..resources import open_store
from ..topology import lease_client
from .board import BODY, RELEASING, WRITING, Board
from .config import THREADS, WorkerConfig, client_name, lane_rng
from .cycle import Cycle
from .lane import lane_record
from .stale import LateWrites, stale_ttl_ms, stale_turn


def run_sync_worker(
    config: WorkerConfig, board: Board, go: Any, stop: Any, recorder: Recorder
) -> None:
    """Run a ``sync`` or ``threads`` worker (see
    [`worker_main`][fencedlease_lab.harness.workers.worker_main]) until ``stop``, ``duration_s`` or
    ``max_cycles`` (per thread), on the library's default clock (the ``clock`` fault moves the
    process's wall clock)."""
    # One transparent retry on a dropped connection (redis:// and Sentinel): a CLIENT KILL is
    # survived by reconnecting, and the renewal that follows still checks the owner token.
    note, arm = connect_notes(recorder)
    client = lease_client(
        config.redis_url,
        config.socket_timeout_ms / 1000,
        client_name(config.prefix, config.name),
        note,
    )
    threads = THREADS if config.kind == "threads" else 1
    if isinstance(client, redis.Redis):
        _warm_pool(client, 5 + threads)
    arm()
    manager = LeaseManager(
        client,
        prefix=config.prefix,
        on_event=recorder,
        replica_acks=config.replica_acks,
        fencing=config.fencing,
    )
    board.set(config.index, "pid", os.getpid())  # ready: the run waits for every pid
    try:
        if not go.wait(60.0):
            return
        deadline = time.monotonic() + config.duration_s
        runners = [
            threading.Thread(
                target=_loop,
                args=(config, board, manager, recorder, n, stop, deadline),
                name=f"worker-{n}",
                daemon=True,
            )
            for n in range(threads)
        ]
        for runner in runners:
            runner.start()
        for runner in runners:
            runner.join()
    finally:
        with contextlib.suppress(Exception):
            manager.close()
        with contextlib.suppress(Exception):
            client.close()


def _loop(
    config: WorkerConfig,
    board: Board,
    manager: LeaseManager,
    recorder: Recorder,
    lane: int,
    stop: Any,
    deadline: float,
) -> None:
    """One lane (thread) of a sync worker, with a store of its own (opened in this thread: an
    SQLite connection may be used only in the thread that made it), which also makes the
    writes its stale cycles put off."""
    rng = lane_rng(config, lane)
    late = LateWrites(config) if config.stale_share > 0 else None
    with lane_record(recorder.writer, lane) as tally:
        store = open_lane_store(config, recorder, lane)
        try:
            while tally.next_cycle(stop, deadline, config.max_cycles):
                if late is None:
                    _cycle(config, board, manager, store, recorder, rng, None)
                    continue
                late.write(store)
                if stale_turn(config, rng):
                    stale = Cycle(config, board, recorder, rng, stale=True, prefer=late.wanted())
                    _stale_cycle(stale, manager, store, late)
                else:
                    _cycle(config, board, manager, store, recorder, rng, late)
            if late is not None:
                late.drain(store)
        finally:
            with contextlib.suppress(Exception):
                store.close()


def open_lane_store(config: WorkerConfig, recorder: Recorder, lane: int) -> Any:
    """The counter store of one lane (opened in the thread that uses it); a list-append
    resource also records its transactions in the worker's history, the values it appends named
    after the worker and the lane."""
    store = open_store(config.resource)
    attach = getattr(store, "attach_history", None)
    if attach is not None:
        attach(recorder.writer, lane=lane)
    return store


def connect_notes(recorder: Recorder) -> tuple[Callable[[], None], Callable[[], None]]:
    """``(note, arm)``: ``note()`` records a ``connect`` info event of the worker once ``arm()``
    has been called (after the pool is warmed): a connection of the worker started connecting
    during the run (see [`noting_connects`][fencedlease_lab.harness.topology.noting_connects])."""
    armed = threading.Event()

    def note() -> None:
        if armed.is_set():
            recorder.writer.record("connect", "info")

    return note, armed.set


def _warm_pool(client: redis.Redis, size: int) -> None:
    """Open ``size`` pooled connections now, as a long-running service has them.

    Otherwise the release that ends the first critical section may need a new connection (the
    renewer's thread holds the pooled one) in the middle of a latency fault, and redis-py's
    handshake (HELLO, CLIENT SETNAME, CLIENT SETINFO...) costs about six round trips: more than
    a ttl under ttl/4 of latency, so the lease would expire while being released. That is real
    (and reported correctly as a loss), but it is connection setup, not the fault under test.
    A worker's manager uses up to six at once: the body's, the renewer's, the hand-off listener's
    and its queueing threads'.
    """
    pool = client.connection_pool
    connections = []
    with contextlib.suppress(redis.RedisError):
        for _ in range(size):
            try:
                connections.append(pool.get_connection())
            except TypeError:  # redis-py before 5.3 requires a command's name (unused here)
                connections.append(pool.get_connection("PING"))
    for connection in connections:
        pool.release(connection)


def _cycle(
    config: WorkerConfig,
    board: Board,
    manager: LeaseManager,
    store: Any,
    recorder: Recorder,
    rng: random.Random,
    late: LateWrites | None,
) -> None:
    """One cycle; with ``late``, on the key of a write put off (if any), which is made right
    after the read."""
    cycle = Cycle(config, board, recorder, rng, prefer=None if late is None else late.wanted())
    try:
        with manager.hold(cycle.key, **cycle.hold_args()) as lease:
            cycle.granted(lease.fencing_token)
            try:
                value = cycle.read(store, lease) if late is None else late.read(store, cycle, lease)
                if late is not None:
                    late.write(store, cycle.key)
                cycle.phase(BODY)
                until = time.monotonic() + config.body_ms / 1000
                while (left := cycle.body_left(until)) > 0:
                    time.sleep(min(left, 0.02))
                cycle.phase(WRITING)
                cycle.write(store, lease, value + 1)
            finally:
                cycle.body_end = time.monotonic()
            cycle.phase(RELEASING)
        cycle.completed()
    except Exception as exc:
        time.sleep(cycle.failed(exc))
    finally:
        cycle.finish()


def _stale_cycle(cycle: Cycle, manager: LeaseManager, store: Any, late: LateWrites) -> None:
    """A stale writer's ``cycle`` ([`stale`][fencedlease_lab.harness.workload.stale]): acquire
    without renewal, read, check, and the write put off in ``late``."""
    handed = False
    try:
        result = manager.acquire(
            cycle.key, ttl_ms=stale_ttl_ms(cycle.config), wait_ms=cycle.wait_ms, retry_delay_ms=50
        )
        granted_at = time.monotonic()
        if result.lease is None:
            raise LeaseNotAcquiredError(cycle.key)
        cycle.granted(result.lease.fencing_token)
        value = cycle.read(store, result.lease)
        late.write(store, cycle.key)
        late.put_off(cycle, result.lease, value, granted_at)
        handed = True
        time.sleep(cycle.config.body_ms / 1000)  # the holder's pause after its check
    except Exception as exc:
        cycle.body_end = time.monotonic()  # its claim ends here (property f judges it)
        time.sleep(cycle.failed(exc))
    finally:
        if not handed:
            cycle.finish()
