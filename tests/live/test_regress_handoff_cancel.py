"""Regression: a waiter handed the lease by release.lua, then cancelled or interrupted before it
claims it, gives the key back (it used to stay held under an owner token nobody knew)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis
import redis.asyncio

from fencedlease import LeaseManager
from fencedlease._redis.keys import waiters_key
from fencedlease.aio import AsyncLeaseManager

pytestmark = pytest.mark.live


def _queued(client: redis.Redis, prefix: str, key: str) -> int:
    return int(client.zcard(waiters_key(prefix, key)))


def test_cancelled_async_waiter_orphans_the_handed_off_key(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """docs/asyncio.md: "A cancelled acquire never orphans a key ... after the cancellation the key
    is either free or held by the lease the call returned". The hand-off makes the *waiter* the
    holder in Redis while it sleeps between attempts (attempt.uncertain is False then); a cancel
    landing before it claims leaves the key held by a forgotten owner token."""
    sync = LeaseManager.from_url(redis_url, prefix="bk")
    holder = sync.acquire("k", ttl_ms=30_000).lease
    assert holder is not None

    async def main() -> Any:
        leases = AsyncLeaseManager.from_url(redis_url, prefix="bk")
        task = asyncio.create_task(
            leases.acquire("k", ttl_ms=30_000, wait_ms=30_000, retry_delay_ms=10_000)
        )
        give_up = time.monotonic() + 5
        while _queued(redis_client, "bk", "k") == 0:
            assert time.monotonic() < give_up
            await asyncio.sleep(0.005)
        # The release (from another process) and the caller's cancel land in the same loop turn.
        assert holder.release() is True  # blocking: the listener has not read the PUBLISH yet
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await leases.close()

    asyncio.run(main())
    info = sync.inspect("k")
    sync.close()
    # Expected: free (the cancelled call must give back what was handed to its owner token).
    assert info is None, f"key orphaned after the cancelled acquire: {info}"


def test_interrupted_sync_waiter_orphans_the_handed_off_key(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """The sync face's _abandon() releases on an interrupt (KeyboardInterrupt) only while a
    command is in flight; an interrupt during the hand-off wait after the release handed the key
    over leaves it orphaned for up to the waiter's retry delay + 2 * grace."""
    holder_mgr = LeaseManager.from_url(redis_url, prefix="bk")
    leases = LeaseManager.from_url(redis_url, prefix="bk")
    holder = holder_mgr.acquire("s", ttl_ms=30_000).lease
    assert holder is not None
    real_wait = leases._release_waiter.wait
    released = threading.Event()

    def wait_then_interrupt(*args: Any, **kwargs: Any) -> None:
        # Ctrl-C arrives on the first wake-up after the release handed the key over. A wake-up
        # before it (a loaded machine: the thread below had not seen the queue yet) sleeps
        # again, so the interrupt never comes while the holder still holds.
        real_wait(*args, **kwargs)
        while not released.is_set():
            real_wait(*args, **kwargs)
        raise KeyboardInterrupt

    leases._release_waiter.wait = wait_then_interrupt  # type: ignore[method-assign]

    def release_when_queued() -> None:
        give_up = time.monotonic() + 5
        while _queued(redis_client, "bk", "s") == 0:
            assert time.monotonic() < give_up
            time.sleep(0.005)
        assert holder.release() is True
        released.set()

    t = threading.Thread(target=release_when_queued)
    t.start()
    with pytest.raises(KeyboardInterrupt):
        leases.acquire("s", ttl_ms=30_000, wait_ms=30_000, retry_delay_ms=10_000)
    t.join()
    info = holder_mgr.inspect("s")
    leases.close()
    holder_mgr.close()
    assert info is None, f"key orphaned after the interrupted acquire: {info}"
