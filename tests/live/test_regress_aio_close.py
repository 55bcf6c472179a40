"""Regression: AsyncLeaseManager.close() while an acquire(wait_ms>0) waits: the acquire stops
(RuntimeError) instead of polling on the client close() just closed, so no connection of the
manager's client is left open."""

from __future__ import annotations

import asyncio

import pytest
import redis

from conftest import async_wait_until, wait_until
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

    async def main() -> tuple[int, object]:
        leases = AsyncLeaseManager.from_url(redis_url, prefix="bac", client_name="bk-probe")
        waiter = asyncio.create_task(
            leases.acquire("k", ttl_ms=5_000, wait_ms=60_000, retry_delay_ms=50)
        )
        # the acquire is waiting (queued, listener up)
        await async_wait_until(
            lambda: redis_client.zcard(waiters_key("bac", "k")) == 1,
            "the acquire queued for 'k'",
            timeout_s=30,
        )
        await leases.close()
        outcome: object
        try:
            outcome = await waiter
        except BaseException as exc:
            outcome = exc
        # the server drops a closed connection from its list a moment later
        await async_wait_until(
            lambda: probe_connections() == 0, "no bk-probe connection left", timeout_s=30
        )
        return probe_connections(), outcome

    left_open, outcome = asyncio.run(main())
    holder.close()
    assert isinstance(outcome, RuntimeError) and "closed" in str(outcome)
    assert left_open == 0, (
        f"{left_open} connection(s) of the client the closed manager made are still open"
        f" (the waiting acquire ended with {outcome!r})"
    )


@pytest.mark.parametrize("again", [False, True], ids=["once", "then-again"])
def test_close_awaited_inside_a_hold_body_completes(
    redis_url: str, redis_client: redis.Redis, again: bool
) -> None:
    """close() awaited inside a hold body cancels that body (its lease is marked lost), but its
    own teardown is shielded and runs to the end: the lease is released, the client the manager
    made is closed (no connection of it left) and a later close() returns at once."""

    def probe_connections() -> int:
        return sum(1 for c in redis_client.client_list() if c.get("name") == "bk-inside")

    async def main() -> tuple[str, int]:
        leases = AsyncLeaseManager.from_url(redis_url, prefix="bin", client_name="bk-inside")
        outcome = "no error"
        try:
            async with leases.hold("k", ttl_ms=30_000):
                assert probe_connections() == 1
                await leases.close()
        except BaseException as exc:
            outcome = type(exc).__name__
        if again:
            await leases.close()  # waits for the teardown if it still runs
        else:
            assert leases._close_task is not None
            await leases._close_task.result()
        # the server drops a closed connection a moment later
        await async_wait_until(
            lambda: probe_connections() == 0, "no bk-inside connection left", timeout_s=30
        )
        return outcome, probe_connections()

    outcome, left_open = asyncio.run(main())
    assert outcome == "LeaseLostError"
    assert left_open == 0
    assert redis_client.exists("bin:{k}") == 0


def test_close_inside_a_hold_body_is_done_when_the_block_ends(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """The hold block that awaited close() ends only once close()'s teardown has: a program
    that returns right after (asyncio.run cancels what is left) still closes its client."""

    def probe_connections() -> int:
        return sum(1 for c in redis_client.client_list() if c.get("name") == "bk-return")

    async def main() -> str:
        leases = AsyncLeaseManager.from_url(redis_url, prefix="bre", client_name="bk-return")
        try:
            async with leases.hold("k", ttl_ms=30_000):
                await leases.close()
        except BaseException as exc:
            assert leases._close_task is not None and leases._close_task.done()
            return type(exc).__name__
        return "no error"

    assert asyncio.run(main()) == "LeaseLostError"
    # the server drops a closed connection a moment later
    wait_until(lambda: probe_connections() == 0, "no bk-return connection left", timeout_s=30)
    assert redis_client.exists("bre:{k}") == 0
