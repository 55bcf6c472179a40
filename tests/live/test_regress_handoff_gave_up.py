"""Regression: a waiter that gives up leaves the queue and passes on anything handed to it, even
when its last wait did not queue (a final wait under 1 ms, or an attempt that overran the
budget): a release right after the give-up's clean-up (its last attempt's own script, or a
release in the background) leaves the key free."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis

import fencedlease._sync.acquire_loop as manager_module  # where the acquire loop looks it up
from fencedlease import LeaseManager
from fencedlease._core.attempt import AcquireAttempt
from fencedlease._core.clock import Clock

pytestmark = pytest.mark.live


class _NoJitter(AcquireAttempt):
    """The manager's attempt with the ±50% jitter pinned to 1.0 (retry delay exactly as given)."""

    def __init__(
        self, key: str, ttl_ms: int, wait_ms: int, retry_delay_ms: int, clock: Clock, **kw: Any
    ) -> None:
        super().__init__(
            key, ttl_ms, wait_ms, retry_delay_ms, clock, uniform=lambda a, b: 1.0, **kw
        )


def test_release_right_after_a_waiter_gave_up_leaves_the_key_free(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A final wait under 1 ms does not queue; the give-up still takes the waiter out of the queue:
    by its last attempt's own script when that attempt was refused after the budget was spent,
    else (an attempt sent before and answered after) by a release with its owner token, sent in
    the background so the call keeps its time bound. So a release right after that leaves the
    key free for a newcomer. The test waits for the clean-up itself, not for a time: on a loaded
    machine the background release may land well after the call returns (until then the queue
    entry is alive, and the hand-off to it is the documented window)."""
    monkeypatch.setattr(manager_module, "AcquireAttempt", _NoJitter)
    holder_mgr = LeaseManager.from_url(redis_url, prefix="bg")
    waiter_mgr = LeaseManager.from_url(redis_url, prefix="bg")
    other = LeaseManager.from_url(redis_url, prefix="bg")
    holder = holder_mgr.acquire("k", ttl_ms=30_000).lease
    assert holder is not None
    # Warm the waiter's listener up so the timed wait below is queued on its first round.
    assert not waiter_mgr.acquire("k", ttl_ms=30_000, wait_ms=30, retry_delay_ms=10).acquired
    backend = waiter_mgr.backend
    release = backend.release
    cleaned_up: list[bool] = []
    cleanup_landed = threading.Event()
    submitted: list[str] = []
    release_later = waiter_mgr._release_later

    def spy(key: str, owner_token: str) -> bool:
        released = release(key, owner_token)
        cleaned_up.append(released)
        cleanup_landed.set()
        return released

    def submit(key: str, owner_token: str) -> None:
        submitted.append(key)
        release_later(key, owner_token)

    backend.release = spy  # type: ignore[method-assign]
    waiter_mgr._release_later = submit  # type: ignore[method-assign]
    # wait_ms = retry delay + 1 ms: one full (non-final) wait, then a final wait of < 1 ms.
    result = waiter_mgr.acquire("k", ttl_ms=30_000, wait_ms=101, retry_delay_ms=100)
    assert not result.acquired  # the waiter gave up and went away
    if submitted:  # the last attempt was sent before the budget ran out: a release follows
        assert cleanup_landed.wait(30), "the give-up's release never landed"
        assert cleaned_up == [False]  # nothing had been handed to it: it only left the queue
    else:  # the last attempt left the queue itself, and nothing else is sent
        assert cleaned_up == []
    assert redis_client.exists("bg:{k}:waiters") == 0
    assert holder.release() is True  # the holder is done right after
    # Nobody waits any more: the key must be free for the next comer.
    late = other.acquire("k", ttl_ms=30_000)
    info = other.inspect("k")
    for m in (holder_mgr, waiter_mgr, other):
        m.close()
    assert late.acquired, f"key handed to the waiter that gave up: {info}"
