"""An acquire against a stopped (SIGSTOPped) Redis gives up within ``wait_ms`` plus one socket
timeout of the client, on both faces: whether Redis stops before the call or while it waits for a
held key."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
import redis
import redis.asyncio

from fencedlease import BackendError, LeaseEvent, LeaseManager
from fencedlease.aio import AsyncLeaseManager
from fencedlease_lab.servers.redis import RedisServer

pytestmark = pytest.mark.live

WAIT_MS = 2_000
SOCKET_TIMEOUT_S = 1.0
# Python's own work around the calls on two busy cores; far below a second socket timeout.
SLACK_S = 0.5
BOUND_S = WAIT_MS / 1000 + SOCKET_TIMEOUT_S + SLACK_S


def _pause_on_first_wait(server: RedisServer) -> Callable[[LeaseEvent], None]:
    """An on_event hook that stops ``server`` when the acquire first waits (the key was held)."""

    def hook(event: LeaseEvent) -> None:
        if event.kind == "wait":
            server.pause()

    return hook


@pytest.mark.parametrize("when", ["before", "while-waiting"])
def test_a_stalled_redis_ends_the_wait_within_one_socket_timeout(
    own_redis: RedisServer, when: str
) -> None:
    """Sync face: wait_ms=2000 on a stopped Redis raises BackendError (timed_out) within the wait
    plus one socket_timeout (1 s), never a second timeout for a resend after the wait."""
    client = redis.Redis.from_url(own_redis.url, socket_timeout=SOCKET_TIMEOUT_S)
    hook = _pause_on_first_wait(own_redis) if when == "while-waiting" else None
    leases = LeaseManager(client, prefix="w", on_event=hook)
    holder = LeaseManager(redis.Redis.from_url(own_redis.url), prefix="w")
    if when == "while-waiting":
        assert holder.acquire("k", ttl_ms=60_000).acquired
    assert leases.acquire("warm", ttl_ms=1_000).acquired  # connection and script cache warm
    if when == "before":
        own_redis.pause()
    try:
        started = time.monotonic()
        with pytest.raises(BackendError) as info:
            leases.acquire("k", ttl_ms=1_000, wait_ms=WAIT_MS)
        elapsed = time.monotonic() - started
    finally:
        own_redis.resume()
    assert info.value.timed_out is True
    assert elapsed <= BOUND_S, elapsed
    leases.close()
    holder.close()
    client.close()


@pytest.mark.parametrize("when", ["before", "while-waiting"])
def test_a_stalled_redis_ends_the_async_wait_within_one_socket_timeout(
    own_redis: RedisServer, when: str
) -> None:
    """asyncio face: wait_ms=2000 on a stopped Redis raises BackendError (timed_out) within the
    wait plus one socket_timeout (1 s)."""

    async def main() -> tuple[BackendError, float]:
        client = redis.asyncio.Redis.from_url(own_redis.url, socket_timeout=SOCKET_TIMEOUT_S)
        hook = _pause_on_first_wait(own_redis) if when == "while-waiting" else None
        leases = AsyncLeaseManager(client, prefix="w", on_event=hook)
        holder = LeaseManager(redis.Redis.from_url(own_redis.url), prefix="w")
        if when == "while-waiting":
            assert holder.acquire("k", ttl_ms=60_000).acquired
        assert (await leases.acquire("warm", ttl_ms=1_000)).acquired
        if when == "before":
            own_redis.pause()
        try:
            started = time.monotonic()
            with pytest.raises(BackendError) as info:
                await leases.acquire("k", ttl_ms=1_000, wait_ms=WAIT_MS)
            elapsed = time.monotonic() - started
        finally:
            own_redis.resume()
        await leases.close()
        await client.aclose()
        holder.close()
        return info.value, elapsed

    error, elapsed = asyncio.run(main())
    assert error.timed_out is True
    assert elapsed <= BOUND_S, elapsed
