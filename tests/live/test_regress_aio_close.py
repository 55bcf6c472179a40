"""Regression: AsyncLeaseManager.close() while an acquire(wait_ms>0) waits: the acquire stops
(RuntimeError) instead of polling on the client close() just closed, so no connection of the
manager's client is left open."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
import redis

from fencedlease import LeaseManager
from fencedlease._redis.keys import waiters_key
from fencedlease.aio import AsyncLeaseManager

pytestmark = pytest.mark.live


def test_close_during_a_waiting_acquire_leaves_no_connection(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """The waiting acquire ends in RuntimeError and no connection of the manager's is left."""
    holder = LeaseManager.from_url(redis_url, prefix="bac")
    assert holder.acquire("k", ttl_ms=30_000).acquired

    def probe_connections() -> int:
        return sum(1 for c in redis_client.client_list() if c.get("name") == "bk-probe")

    async def until(predicate: Callable[[], bool]) -> None:
        """Poll what only Redis can tell (the queue, its client list), with a generous deadline."""
        give_up = time.monotonic() + 30
        while not predicate():
            assert time.monotonic() < give_up, "condition not reached in time"
            await asyncio.sleep(0.005)

    async def main() -> tuple[int, object]:
        leases = AsyncLeaseManager.from_url(redis_url, prefix="bac", client_name="bk-probe")
        waiter = asyncio.create_task(
            leases.acquire("k", ttl_ms=5_000, wait_ms=60_000, retry_delay_ms=50)
        )
        # the acquire is waiting (queued, listener up)
        await until(lambda: redis_client.zcard(waiters_key("bac", "k")) == 1)
        await leases.close()
        outcome: object
        try:
            outcome = await waiter
        except BaseException as exc:
            outcome = exc
        # the server drops a closed connection from its list a moment later
        await until(lambda: probe_connections() == 0)
        return probe_connections(), outcome

    left_open, outcome = asyncio.run(main())
    holder.close()
    assert isinstance(outcome, RuntimeError) and "closed" in str(outcome)
    assert left_open == 0, (
        f"{left_open} connection(s) of the client the closed manager made are still open"
        f" (the waiting acquire ended with {outcome!r})"
    )
