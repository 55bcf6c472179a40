"""Health checks for the asyncio face: the twin of `fencedlease._sync.health` (what is checked and
the report are there). Here the caller's client is used and the whole check runs under one
``timeout_ms`` bound (a command cut off by it leaves no half-read reply: redis-py drops that
connection)."""

from __future__ import annotations

import asyncio
import time

import redis.asyncio

from fencedlease._core.backend import AsyncLeaseBackend
from fencedlease._core.clock import Clock
from fencedlease._core.errors import BackendError
from fencedlease._core.validate import check_ms
from fencedlease._redis.clients import client_redactor
from fencedlease._redis.errors import backend_errors, without_secrets
from fencedlease._sync.health import (
    HEALTH_PROBE_KEY,
    NOOP,
    NOT_READ,
    Eviction,
    HealthReport,
    connect_backoff_s,
    connect_error,
    too_slow,
)

from .redis_backend import AsyncRedisBackend
from .scripts import run_script

__all__ = ["check_health", "connect"]


async def _check(backend: AsyncLeaseBackend, start: float) -> tuple[float, float | None, Eviction]:
    client = getattr(backend, "client", None)
    if isinstance(client, redis.asyncio.Redis):
        with backend_errors("health check: PING"):
            await client.ping()
        pinged = time.perf_counter()
        with backend_errors("health check: script"):
            await run_script(client, NOOP, (), ())
        script_ms = (time.perf_counter() - pinged) * 1000
        return (pinged - start) * 1000, script_ms, await _eviction(backend)
    await backend.inspect(HEALTH_PROBE_KEY)
    return (time.perf_counter() - start) * 1000, None, await _eviction(backend)


async def _eviction(backend: AsyncLeaseBackend) -> Eviction:
    """`fencedlease._sync.health._eviction`, awaited, over the backend's client."""
    if not isinstance(backend, AsyncRedisBackend):
        return NOT_READ
    with backend_errors("health check: INFO memory"):
        return await backend.read_eviction()


async def check_health(backend: AsyncLeaseBackend, timeout_ms: int) -> HealthReport:
    """Check ``backend``, ``timeout_ms`` in all (see `fencedlease._sync.health`).

    Raises:
        ValidationError: ``timeout_ms`` is not an int in 1..2,147,483,647.
        BackendError: the store failed, or gave no answer within ``timeout_ms``; with no
            piece of the client's password in it (as on the sync face).
    """
    bound = check_ms("timeout_ms", timeout_ms, 1)
    start = time.perf_counter()
    try:
        ping_ms, script_ms, eviction = await asyncio.wait_for(_check(backend, start), bound / 1000)
    except asyncio.TimeoutError as exc:  # builtin TimeoutError on 3.11+
        raise too_slow((time.perf_counter() - start) * 1000, bound) from exc
    except BackendError as exc:
        error = without_secrets(exc, client_redactor(getattr(backend, "client", None)))
        if error is exc:
            raise
    else:
        total_ms = (time.perf_counter() - start) * 1000
        return HealthReport(ping_ms, script_ms, total_ms, *eviction)
    raise error  # here: ``exc`` may name a host or a path that holds the password


async def connect(
    backend: AsyncLeaseBackend, attempts: int, timeout_ms: int, clock: Clock
) -> HealthReport:
    """`fencedlease._sync.health.connect`, awaited: the waits are the clock's ``async_sleep`` (or
    `asyncio.sleep`).

    Raises:
        BackendError: every attempt failed (the last failure in ``__cause__``).
    """
    for attempt in range(1, attempts + 1):
        try:
            return await check_health(backend, timeout_ms)
        except BackendError as exc:
            if attempt == attempts:
                raise connect_error(attempts, exc) from exc
        sleep = getattr(clock, "async_sleep", asyncio.sleep)
        await sleep(connect_backoff_s(attempt))
    raise AssertionError("unreachable")  # pragma: no cover
