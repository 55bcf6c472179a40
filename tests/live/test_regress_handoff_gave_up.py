"""Regression: a waiter that gives up leaves the queue and passes on anything handed to it, even
when its last wait did not queue (a final wait under 1 ms, or an attempt that overran the
budget): a release right after the give-up leaves the key free."""

from __future__ import annotations

import pytest
import redis

import fencedlease._manager as manager_module
from fencedlease import LeaseManager
from fencedlease._core import AcquireAttempt, Clock

pytestmark = pytest.mark.live


class _NoJitter(AcquireAttempt):
    """The manager's attempt with the ±50% jitter pinned to 1.0 (retry delay exactly as given)."""

    def __init__(
        self, key: str, ttl_ms: int, wait_ms: int, retry_delay_ms: int, clock: Clock
    ) -> None:
        super().__init__(key, ttl_ms, wait_ms, retry_delay_ms, clock, uniform=lambda a, b: 1.0)


def test_release_right_after_a_waiter_gave_up_leaves_the_key_free(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A final wait under 1 ms does not queue; the give-up still takes the waiter out of the queue,
    so the release right after it leaves the key free for a newcomer."""
    monkeypatch.setattr(manager_module, "AcquireAttempt", _NoJitter)
    holder_mgr = LeaseManager.from_url(redis_url, prefix="bg")
    waiter_mgr = LeaseManager.from_url(redis_url, prefix="bg")
    other = LeaseManager.from_url(redis_url, prefix="bg")
    holder = holder_mgr.acquire("k", ttl_ms=30_000).lease
    assert holder is not None
    # Warm the waiter's listener up so the timed wait below is queued on its first round.
    assert not waiter_mgr.acquire("k", ttl_ms=30_000, wait_ms=30, retry_delay_ms=10).acquired
    # wait_ms = retry delay + 1 ms: one full (non-final) wait, then a final wait of < 1 ms.
    result = waiter_mgr.acquire("k", ttl_ms=30_000, wait_ms=101, retry_delay_ms=100)
    assert not result.acquired  # the waiter gave up and went away
    assert holder.release() is True  # the holder is done right after
    # Nobody waits any more: the key must be free for the next comer.
    late = other.acquire("k", ttl_ms=30_000)
    info = other.inspect("k")
    for m in (holder_mgr, waiter_mgr, other):
        m.close()
    assert late.acquired, f"key handed to the waiter that gave up: {info}"
