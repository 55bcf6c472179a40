"""Regression: close() while several threads wait in acquire(wait_ms>0): each ends at once with
RuntimeError (the manager is closed); none sleeps its wait out, none queues behind the others (the
closed hand-off used to sleep while holding its lock, so waiters took turns past their bound)."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from fencedlease import LeaseManager
from fencedlease._redis.keys import waiters_key

pytestmark = pytest.mark.live


def test_waiters_end_promptly_when_the_manager_closes(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """Six waiters with wait_ms=60000, all queued: close() ends every wait far inside its
    budget."""
    client = redis.Redis.from_url(redis_url)
    leases = LeaseManager(client, prefix="bc")
    holder = LeaseManager.from_url(redis_url, prefix="bc")
    assert holder.acquire("busy", ttl_ms=30_000).acquired
    outcomes: list[tuple[float, BaseException | None]] = []
    lock = threading.Lock()
    started = threading.Barrier(7)

    def waiter() -> None:
        started.wait()
        t0 = time.monotonic()
        error: BaseException | None = None
        try:
            leases.acquire("busy", ttl_ms=1_000, wait_ms=60_000, retry_delay_ms=100)
        except RuntimeError as exc:
            error = exc
        with lock:
            outcomes.append((time.monotonic() - t0, error))

    threads = [threading.Thread(target=waiter) for _ in range(6)]
    for t in threads:
        t.start()
    started.wait()
    give_up = time.monotonic() + 30
    while redis_client.zcard(waiters_key("bc", "busy")) < 6:  # every waiter is inside its wait
        assert time.monotonic() < give_up, "the waiters never queued"
        time.sleep(0.005)
    leases.close()
    for t in threads:
        t.join()
    holder.close()
    client.close()
    assert len(outcomes) == 6
    assert all(isinstance(error, RuntimeError) for _, error in outcomes), outcomes
    # Ended soon after the close, far inside the 60 s budget.
    assert max(took for took, _ in outcomes) < 10.0
