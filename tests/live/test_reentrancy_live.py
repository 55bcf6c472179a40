"""Reentrant holds on a real Redis and a Redis Cluster, both faces: one grant from the key's
counter for every level, the key held with its TTL until the outermost block releases it, and an
operator's deletion seen as a loss at every level."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio

from fencedlease import LeaseLostError, LeaseManager
from fencedlease.aio import AsyncLeaseManager
from fencedlease_lab.servers.cluster import RedisClusterServers

pytestmark = pytest.mark.live

LONG = 60_000  # a TTL no step of a test outlives


def test_reentrant_holds_take_one_grant_and_release_once_on_redis(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """Nested reentrant holds share the first grant (the counter at 1); the key keeps its
    owner and TTL after the inner block, and is gone after the outermost."""
    redis_client.delete("reent:{k}", "reent:{k}:fence")
    with (
        LeaseManager(redis.Redis.from_url(redis_url, socket_timeout=10), prefix="reent") as leases,
        leases.hold("k", ttl_ms=LONG, reentrant=True) as outer,
    ):
        owner = redis_client.get("reent:{k}")
        with leases.hold("k", ttl_ms=LONG, reentrant=True) as inner:
            assert inner is outer and inner.fencing_token == 1
        assert redis_client.get("reent:{k}") == owner
        assert 0 < redis_client.pttl("reent:{k}") <= LONG
        assert redis_client.get("reent:{k}:fence") == b"1"
    assert redis_client.exists("reent:{k}") == 0
    assert redis_client.get("reent:{k}:fence") == b"1"


def test_an_operators_delete_is_a_loss_at_every_level_on_redis(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """An operator deletes the key under nested reentrant holds: the renewal finds it gone and
    both the nested and the enclosing block end in LeaseLostError."""

    async def main() -> list[str]:
        client = redis.asyncio.Redis.from_url(redis_url, socket_timeout=10)
        ended: list[str] = []
        async with AsyncLeaseManager(client, prefix="reent") as leases:
            try:
                async with leases.hold("gone", ttl_ms=2_000, heartbeat_ms=50, reentrant=True):
                    try:
                        async with leases.hold("gone", ttl_ms=LONG, reentrant=True) as inner:
                            await client.delete("reent:{gone}")
                            assert await inner.wait_lost(30_000)
                    except LeaseLostError:
                        ended.append("inner lost")
            except LeaseLostError:
                ended.append("outer lost")
        return ended

    assert asyncio.run(main()) == ["inner lost", "outer lost"]


def test_reentrant_holds_on_a_cluster_both_faces(redis_cluster: RedisClusterServers) -> None:
    """On a Redis Cluster, nested reentrant holds on each face share one grant and one release:
    the next plain hold of the key gets the counter's next token."""
    with LeaseManager.from_url(redis_cluster.url, prefix="reent") as leases:
        with leases.hold("c", ttl_ms=LONG, reentrant=True) as outer:
            with leases.hold("c", ttl_ms=LONG, reentrant=True) as inner:
                assert inner is outer
            first = outer.fencing_token
        with leases.hold("c", ttl_ms=LONG) as after:
            assert after.fencing_token == (first or 0) + 1

    async def main() -> tuple[int | None, int | None]:
        async with AsyncLeaseManager.from_url(redis_cluster.url, prefix="reent") as aleases:
            async with (
                aleases.hold("c", ttl_ms=LONG, reentrant=True) as outer,
                aleases.hold("c", ttl_ms=LONG, reentrant=True) as inner,
            ):
                assert inner is outer
            async with aleases.hold("c", ttl_ms=LONG) as after:
                return outer.fencing_token, after.fencing_token

    token, next_token = asyncio.run(main())
    assert token is not None and next_token == token + 1
