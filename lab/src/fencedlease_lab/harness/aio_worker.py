"""The asyncio worker: [`THREADS`][fencedlease_lab.harness.workload.THREADS] tasks sharing one
[`AsyncLeaseManager`][fencedlease.aio.AsyncLeaseManager], each doing the cycle of
[`workload`][fencedlease_lab.harness.workload] (pick a key, hold its lease, read, sleep, write).

The counter stores are blocking (sqlite3, psycopg, redis-py), so each task has its own store in
a thread of its own (opened there: an SQLite connection may be used only in the thread that made
it) and runs its accesses there; the lease (acquire, renewals, release)
is the asyncio face's own. Lease events go into the history through the same
[`Recorder`][fencedlease_lab.harness.recorder.Recorder] as the sync workers'.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import redis

from fencedlease import LeaseNotAcquiredError
from fencedlease.aio import AsyncLeaseManager

from .recorder import Recorder
from .topology import async_lease_client
from .workload import (
    BODY,
    RELEASING,
    THREADS,
    WRITING,
    Board,
    Cycle,
    WorkerConfig,
    client_name,
    connect_notes,
    lane_record,
    lane_rng,
    open_lane_store,
)
from .workload.stale import LateWrites, stale_ttl_ms, stale_turn

__all__ = ["run_asyncio_worker"]

T = TypeVar("T")


def run_asyncio_worker(
    config: WorkerConfig, board: Board, go: Any, stop: Any, recorder: Recorder
) -> None:
    """Run the worker's tasks until ``stop``, ``duration_s`` or ``max_cycles`` (per task), on
    the library's default clock (the ``clock`` fault moves the process's wall clock)."""
    asyncio.run(_main(config, board, go, stop, recorder))


async def _main(config: WorkerConfig, board: Board, go: Any, stop: Any, recorder: Recorder) -> None:
    note, arm = connect_notes(recorder)
    client = async_lease_client(
        config.redis_url,
        config.socket_timeout_ms / 1000,
        client_name(config.prefix, config.name),
        note,
    )
    await _warm_pool(client, 5 + THREADS)
    arm()
    manager = AsyncLeaseManager(
        client,
        prefix=config.prefix,
        on_event=recorder,
        replica_acks=config.replica_acks,
        fencing=config.fencing,
    )
    board.set(config.index, "pid", os.getpid())  # ready: the run waits for every pid
    try:
        if not await asyncio.to_thread(go.wait, 60.0):
            return
        deadline = time.monotonic() + config.duration_s
        # A lane that dies (recorded as such) leaves the others running, as a thread's death
        # leaves the other threads of a ``threads`` worker.
        await asyncio.gather(
            *(
                _loop(config, board, manager, recorder, n, stop, deadline)
                for n in range(THREADS)
            ),
            return_exceptions=True,
        )  # fmt: skip
    finally:
        with contextlib.suppress(Exception):
            await manager.close()
        with contextlib.suppress(Exception):
            await client.aclose()


async def _warm_pool(client: Any, size: int) -> None:
    """Open ``size`` pooled connections of ``client`` now, as a long-running service has them
    (the sync worker's ``_warm_pool``, for the same reason: a connection opened during a
    ``latency`` fault pays redis-py's handshake, several round trips, each late by the fault's
    delay, which can outlast a ttl; the lanes' commands, the renewer's batch and the hand-off's
    queueing may each hold one at once). A client without a pool (a cluster's) is left alone."""
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        return
    connections = []
    with contextlib.suppress(redis.RedisError):
        for _ in range(size):
            try:
                connections.append(await pool.get_connection())
            except TypeError:  # redis-py before 5.3 requires a command's name (unused here)
                connections.append(await pool.get_connection("PING"))
    for connection in connections:
        await pool.release(connection)


async def _loop(
    config: WorkerConfig,
    board: Board,
    manager: AsyncLeaseManager,
    recorder: Recorder,
    lane: int,
    stop: Any,
    deadline: float,
) -> None:
    rng = lane_rng(config, lane)
    late = LateWrites(config) if config.stale_share > 0 else None
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(1, thread_name_prefix="store") as thread:

        def run(fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
            return loop.run_in_executor(thread, fn, *args)

        with lane_record(recorder.writer, lane) as tally:
            store = await run(open_lane_store, config, recorder, lane)
            try:
                while tally.next_cycle(stop, deadline, config.max_cycles):
                    if late is None:
                        await _cycle(config, board, manager, store, recorder, rng, run, None)
                        continue
                    await run(late.write, store)
                    if stale_turn(config, rng):
                        stale = Cycle(
                            config, board, recorder, rng, stale=True, prefer=late.wanted()
                        )
                        await _stale_cycle(stale, manager, store, run, late)
                    else:
                        await _cycle(config, board, manager, store, recorder, rng, run, late)
                if late is not None:
                    await run(late.drain, store)
            finally:
                with contextlib.suppress(Exception):
                    await run(store.close)


async def _cycle(
    config: WorkerConfig,
    board: Board,
    manager: AsyncLeaseManager,
    store: Any,
    recorder: Recorder,
    rng: random.Random,
    run: Callable[..., asyncio.Future[Any]],
    late: LateWrites | None,
) -> None:
    """One cycle, as the sync workers' ``_cycle``, the accesses in the lane's store thread."""
    cycle = Cycle(config, board, recorder, rng, prefer=None if late is None else late.wanted())
    try:
        async with manager.hold(cycle.key, **cycle.hold_args()) as lease:
            cycle.granted(lease.fencing_token)
            try:
                if late is None:
                    value = await run(cycle.read, store, lease)
                else:
                    value = await run(late.read, store, cycle, lease)
                if late is not None:
                    await run(late.write, store, cycle.key)
                cycle.phase(BODY)
                until = time.monotonic() + config.body_ms / 1000
                while (left := cycle.body_left(until)) > 0:
                    await asyncio.sleep(min(left, 0.02))
                cycle.phase(WRITING)
                # Two store calls: a loss notice while the recheck runs cancels the write.
                await run(cycle.recheck, store, lease)
                await run(cycle.write_only, store, lease, value + 1)
            finally:
                cycle.body_end = time.monotonic()
            cycle.phase(RELEASING)
        cycle.completed()
    except Exception as exc:
        await asyncio.sleep(cycle.failed(exc))
    finally:
        cycle.finish()


async def _stale_cycle(
    cycle: Cycle,
    manager: AsyncLeaseManager,
    store: Any,
    run: Callable[..., asyncio.Future[Any]],
    late: LateWrites,
) -> None:
    """A stale writer's ``cycle`` ([`stale`][fencedlease_lab.harness.workload.stale]), as the
    sync workers' ``_stale_cycle``, the read in the lane's store thread."""
    handed = False
    try:
        result = await manager.acquire(
            cycle.key, ttl_ms=stale_ttl_ms(cycle.config), wait_ms=cycle.wait_ms, retry_delay_ms=50
        )
        granted_at = time.monotonic()
        if result.lease is None:
            raise LeaseNotAcquiredError(cycle.key)
        cycle.granted(result.lease.fencing_token)
        value = await run(cycle.read, store, result.lease)
        await run(late.write, store, cycle.key)
        late.put_off(cycle, result.lease, value, granted_at)
        handed = True
        await asyncio.sleep(cycle.config.body_ms / 1000)  # the holder's pause after its check
    except Exception as exc:
        cycle.body_end = time.monotonic()  # its claim ends here (property f judges it)
        await asyncio.sleep(cycle.failed(exc))
    finally:
        if not handed:
            cycle.finish()
