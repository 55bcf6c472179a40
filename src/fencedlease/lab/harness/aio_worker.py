"""The asyncio worker: :data:`~fencedlease.lab.harness.workload.THREADS` tasks sharing one
:class:`~fencedlease.aio.AsyncLeaseManager`, each doing the cycle of
:mod:`~fencedlease.lab.harness.workload` (pick a key, hold its lease, read, sleep, write).

The counter stores are blocking (sqlite3, psycopg, redis-py), so each task has its own store in
a thread of its own (opened there: an SQLite connection may be used only in the thread that made
it) and runs its accesses there; the lease (acquire, renewals, release)
is the asyncio face's own. Lease events go into the history through the same
:class:`~fencedlease.lab.harness.workload.Recorder` as the sync workers'.
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

import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from fencedlease import BackendError, LeaseLostError, LeaseNotAcquiredError, StaleTokenError
from fencedlease.aio import AsyncLeaseManager

from .history import Operation
from .resources import open_store
from .workload import (
    ACQUIRING,
    BODY,
    HOLDING,
    IDLE,
    RELEASING,
    THREADS,
    WRITING,
    Board,
    Recorder,
    WorkerConfig,
    access,
    client_name,
    end_cycle,
    lane_rng,
    pick,
)

__all__ = ["run_asyncio_worker"]

T = TypeVar("T")


def run_asyncio_worker(
    config: WorkerConfig, board: Board, go: Any, stop: Any, recorder: Recorder
) -> None:
    """Run the worker's tasks until ``stop``, ``duration_s`` or ``max_cycles`` (per task)."""
    asyncio.run(_main(config, board, go, stop, recorder))


async def _main(config: WorkerConfig, board: Board, go: Any, stop: Any, recorder: Recorder) -> None:
    timeout_s = config.socket_timeout_ms / 1000
    client = redis.asyncio.Redis.from_url(
        config.redis_url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        client_name=client_name(config.prefix, config.name),
        retry=Retry(NoBackoff(), 1),
    )
    manager = AsyncLeaseManager(client, prefix=config.prefix, on_event=recorder)
    board.set(config.index, "pid", os.getpid())  # ready: the run waits for every pid
    try:
        if not await asyncio.to_thread(go.wait, 60.0):
            return
        deadline = time.monotonic() + config.duration_s
        await asyncio.gather(
            *(
                _loop(config, board, manager, recorder, lane_rng(config, n), stop, deadline)
                for n in range(THREADS)
            )
        )  # fmt: skip
    finally:
        with contextlib.suppress(Exception):
            await manager.close()
        with contextlib.suppress(Exception):
            await client.aclose()


async def _loop(
    config: WorkerConfig,
    board: Board,
    manager: AsyncLeaseManager,
    recorder: Recorder,
    rng: random.Random,
    stop: Any,
    deadline: float,
) -> None:
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(1, thread_name_prefix="store") as thread:

        def run(fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
            return loop.run_in_executor(thread, fn, *args)

        store = await run(open_store, config.resource)
        try:
            cycles = 0
            while not stop.is_set() and time.monotonic() < deadline and cycles < config.max_cycles:
                cycles += 1
                await _cycle(config, board, manager, store, recorder, rng, run)
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
) -> None:
    me = config.index
    writer = recorder.writer
    key, wait_ms = pick(config, rng)
    board.set_phase(me, ACQUIRING)
    acquire = writer.invoke("acquire", key=key, detail={"wait_ms": wait_ms})
    grant = acquire.id
    hold: Operation | None = None
    body_end: float | None = None
    recorder.expect(acquire)
    try:
        async with manager.hold(
            key,
            ttl_ms=config.ttl_ms,
            wait_ms=wait_ms,
            retry_delay_ms=50,
            heartbeat_ms=config.heartbeat_ms,
        ) as lease:
            token = lease.fencing_token
            if not acquire.done:  # the event hook records it; never twice
                acquire.ok(token=token, outcome="granted")
            board.set(me, "token", token or 0)
            board.set_phase(me, HOLDING)
            board.bump(me, "grants")
            hold = Operation(writer, "hold", grant, {"grant": grant, "key": key, "token": token})
            try:
                value = await run(
                    access, writer, board, me, "read", grant, key, token, None,
                    lambda: store.read(lease, fenced=config.mode == "fenced"),
                )  # fmt: skip
                board.set_phase(me, BODY)
                await asyncio.sleep(config.body_ms / 1000)
                board.set_phase(me, WRITING)
                await run(
                    access, writer, board, me, "write", grant, key, token, value + 1,
                    lambda: store.write(value + 1, lease, fenced=config.mode != "unfenced"),
                )  # fmt: skip
            finally:
                body_end = time.monotonic()
            board.set_phase(me, RELEASING)
        hold.ok(detail={"body_end": body_end})
    except LeaseNotAcquiredError:
        if not acquire.done:
            acquire.fail(outcome="not-acquired")
        if wait_ms == 0:
            await asyncio.sleep(rng.uniform(0.005, 0.02))
    except LeaseLostError as exc:
        board.bump(me, "lost")
        end_cycle(hold, acquire, "fail", "lease-lost", exc, body_end)
    except StaleTokenError as exc:
        end_cycle(hold, acquire, "fail", "stale", exc, body_end)
    except BackendError as exc:
        board.bump(me, "errors")
        end_cycle(hold, acquire, "info", "backend-error", exc, body_end)
        await asyncio.sleep(rng.uniform(0.05, 0.15))
    except Exception as exc:  # anything else is recorded, not fatal: the run goes on
        board.bump(me, "errors")
        end_cycle(hold, acquire, "info", "error", exc, body_end)
        await asyncio.sleep(rng.uniform(0.02, 0.08))
    finally:
        board.set_phase(me, IDLE)
        board.set(me, "token", 0)
