"""``fencedlease.redis_keys`` on a real Redis: the keys and the channel it names are the ones a
``LeaseManager`` writes, reads and publishes on, and there are no others."""

from __future__ import annotations

import threading

import pytest
import redis

from conftest import wait_until
from fencedlease import AcquireResult, LeaseManager, owner_fingerprint, redis_keys

pytestmark = pytest.mark.live

NAME = "orders:{42}%"  # braces and a percent sign: the escaped layout


def test_the_named_keys_are_the_ones_the_manager_uses(
    redis_url: str, redis_client: redis.Redis
) -> None:
    keys = redis_keys("rk", NAME)
    holder_manager = LeaseManager.from_url(redis_url, prefix="rk")
    waiter_manager = LeaseManager.from_url(redis_url, prefix="rk")
    listener = redis_client.pubsub()  # type: ignore[no-untyped-call, unused-ignore]
    try:
        holder = holder_manager.acquire(NAME, ttl_ms=10_000).lease
        assert holder is not None
        assert holder.fencing_token == 1
        raw = redis_client.get(keys.lease)
        assert isinstance(raw, bytes)
        token, owner = raw.decode().split(":", 1)
        assert int(token) == 1
        info = holder_manager.inspect(NAME)
        assert info is not None
        assert owner_fingerprint(owner) == info.owner_fingerprint
        assert 0 < redis_client.pttl(keys.lease) <= 10_000
        assert redis_client.get(keys.fence) == b"1"

        # A manager's waiters are woken on the hand-off channel + ":" + its listener id.
        listener.psubscribe(keys.handoff + ":*")
        subscribed = listener.get_message(timeout=5.0)
        assert subscribed is not None
        assert subscribed["type"] == "psubscribe"
        result: list[AcquireResult] = []
        waiter = threading.Thread(
            target=lambda: result.append(
                waiter_manager.acquire(NAME, ttl_ms=10_000, wait_ms=10_000, retry_delay_ms=2_000)
            )
        )
        waiter.start()
        wait_until(lambda: redis_client.zcard(keys.waiters) == 1, "a waiter queued")
        assert redis_client.hlen(keys.waiters_meta) == 1
        assert sorted(redis_client.keys("rk:*")) == sorted(
            k.encode() for k in (keys.lease, keys.fence, keys.waiters, keys.waiters_meta)
        )

        assert holder.release() is True
        message = listener.get_message(timeout=5.0)
        assert message is not None
        assert message["type"] == "pmessage"
        listener_id = waiter_manager._release_waiter._listener  # type: ignore[attr-defined]
        assert message["channel"] == f"{keys.handoff}:{listener_id}".encode()
        waiter.join(10.0)
        assert result
        assert result[0].lease is not None
        assert result[0].lease.fencing_token == 2
        assert redis_client.get(keys.fence) == b"2"
        assert redis_client.exists(keys.waiters, keys.waiters_meta) == 0
        assert result[0].lease.release() is True
        assert redis_client.keys("rk:*") == [keys.fence.encode()]
    finally:
        listener.close()
        holder_manager.close()
        waiter_manager.close()
