"""Metadata and lock-delay on a real Redis, a Redis Cluster and Sentinel, both faces: stored with
the grant in ``<base>:grant`` (renewed with the lease, deleted by its release), a lock-delay
that Redis's own expiry ends, and a hand-off whose grant carries the waiter's metadata.

The same rules on the memory and SQLite backends: tests/unit/test_grant_extras.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from conftest import expiry_ms
from fencedlease import AcquireResult, LeaseManager, redis_keys
from fencedlease.aio import AsyncLeaseManager
from fencedlease_lab.servers.cluster import RedisClusterServers
from fencedlease_lab.servers.sentinel import SentinelDeployment

pytestmark = pytest.mark.live

HOST = {"host": "web-1", "pid": "4242"}
WAITER = {"host": "web-2"}


class Target:
    """One Redis deployment: its URL and a sync client on it (a cluster client for a cluster)."""

    def __init__(self, url: str, client: Any) -> None:
        self.url, self.client = url, client

    def until(self, condition: Callable[[], bool], what: str) -> None:
        """Wait, polling Redis, until ``condition`` holds (an event Redis makes: an expiry, a
        waiter queued), at most 20 s."""
        stop = threading.Event()
        for _ in range(4000):
            if condition():
                return
            stop.wait(0.005)
        raise AssertionError(f"gave up waiting for {what}")


@pytest.fixture(params=["redis", pytest.param("cluster", marks=pytest.mark.cluster)])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        client: Any = redis.Redis.from_url(url, socket_timeout=10)
        client.flushdb()
    else:
        cluster: RedisClusterServers = request.getfixturevalue("redis_cluster")
        url = cluster.url
        host, port = cluster.startup_nodes[0]
        client = redis.RedisCluster(host=host, port=port, socket_timeout=10)
    yield Target(url, client)
    client.close()


def _prefix(request: pytest.FixtureRequest) -> str:
    """A prefix of this test's own (the cluster is shared by the session)."""
    return "extras-" + str(abs(hash(request.node.nodeid)))


def _both_faces(url: str, prefix: str, steps: Callable[[Any, Callable[[Any], Any]], None]) -> None:
    """``steps(manager, run)`` on the sync face, then on the asyncio face (``run`` awaits what
    the asyncio manager returns), each over a manager of its own from ``url``, with counter tokens
    (a cluster URL's default is epoch tokens, tested in test_cluster.py; the tokens these tests
    pin are the counter's 1, 2, ...)."""
    with LeaseManager.from_url(url, prefix=prefix, fencing="counter") as manager:
        steps(manager, lambda value: value)
    loop = asyncio.new_event_loop()
    try:
        amanager = AsyncLeaseManager.from_url(url, prefix=prefix + "-aio", fencing="counter")

        def run(value: Any) -> Any:
            return loop.run_until_complete(value) if asyncio.iscoroutine(value) else value

        try:
            steps(amanager, run)
        finally:
            run(amanager.close())
    finally:
        loop.close()


def test_metadata_is_stored_renewed_and_released_with_the_lease(
    target: Target, request: pytest.FixtureRequest
) -> None:
    """The metadata lives in ``<base>:grant`` with the lease's expiry, moves with a renewal,
    shows in inspect, and a release deletes it with the lease."""
    prefix = _prefix(request)

    def steps(manager: Any, run: Callable[[Any], Any]) -> None:
        keys = redis_keys(manager_prefix(manager), "job")
        lease = run(manager.acquire("job", ttl_ms=60_000, metadata=HOST)).lease
        info = run(manager.inspect("job"))
        assert (info.fencing_token, info.metadata) == (1, HOST)
        assert run(lease.renew(ttl_ms=120_000)) is True
        lease_at, grant_at = expiry_ms(target.client, keys.lease, keys.base + ":grant")
        assert grant_at == lease_at  # no lock-delay: the details expire with the lease
        assert run(lease.release()) is True
        assert target.client.exists(keys.lease, keys.base + ":grant") == 0
        assert run(manager.inspect("job")) is None

    _both_faces(target.url, prefix, steps)


def manager_prefix(manager: Any) -> str:
    return str(manager.backend.prefix)


def test_lock_delay_holds_an_expired_key_until_redis_expires_the_delay(
    target: Target, request: pytest.FixtureRequest
) -> None:
    """The grant details expire lock_delay_ms after the lease (renewals move both); once Redis
    expired the lease (renewed last for 1 ms, never released), every acquire is refused with
    the delay left, and once Redis expired the details a waiting acquire is granted the next
    token."""
    prefix = _prefix(request)

    def steps(manager: Any, run: Callable[[Any], Any]) -> None:
        keys = redis_keys(manager_prefix(manager), "job")
        grant = keys.base + ":grant"
        lease = run(manager.acquire("job", ttl_ms=60_000, lock_delay_ms=60_000)).lease
        assert run(lease.renew(ttl_ms=120_000)) is True
        lease_at, grant_at = expiry_ms(target.client, keys.lease, grant)
        assert grant_at - lease_at == 60_000
        # a last renewal of 1 ms: Redis itself expires the lease, unreleased
        assert run(lease.renew(ttl_ms=1)) is True
        target.until(lambda: not target.client.exists(keys.lease), "the lease to expire")
        refused: AcquireResult = run(manager.acquire("job", ttl_ms=1_000))
        assert refused.acquired is False
        assert refused.holder_ttl_ms is not None and 50_000 < refused.holder_ttl_ms <= 60_000
        assert run(lease.release()) is False  # nothing to release: the delay stays
        assert run(manager.acquire("job", ttl_ms=1_000)).acquired is False
        target.client.pexpire(grant, 200)  # the rest of the delay, which Redis ends
        # a waiting acquire (queued for a hand-off where the backend queues) is refused while
        # the delay lasts, and granted by its polls once Redis expired it
        granted = run(manager.acquire("job", ttl_ms=1_000, wait_ms=20_000, retry_delay_ms=20))
        assert granted.lease.fencing_token == 2
        assert not target.client.exists(grant)
        assert run(granted.lease.release()) is True

    _both_faces(target.url, prefix, steps)


def test_a_released_lease_with_a_lock_delay_frees_its_key_at_once(
    target: Target, request: pytest.FixtureRequest
) -> None:
    """A release deletes the lease and its lock-delay together: the next acquire is granted."""
    prefix = _prefix(request)

    def steps(manager: Any, run: Callable[[Any], Any]) -> None:
        lease = run(manager.acquire("job", ttl_ms=60_000, lock_delay_ms=60_000)).lease
        assert run(lease.release()) is True
        assert run(manager.acquire("job", ttl_ms=1_000)).lease.fencing_token == 2

    _both_faces(target.url, prefix, steps)


def test_a_hand_off_grant_carries_the_waiter_s_metadata(redis_url: str) -> None:
    """A waiter queued with metadata and woken by the holder's release holds the key with its
    own metadata (the holder's went with its release), on both faces."""
    client = redis.Redis.from_url(redis_url, socket_timeout=10)
    client.flushdb()
    with LeaseManager.from_url(redis_url) as holder, LeaseManager.from_url(redis_url) as waiter:
        lease = holder.acquire("job", ttl_ms=30_000, metadata=HOST).lease
        assert lease is not None
        got: list[AcquireResult] = []
        thread = threading.Thread(
            target=lambda: got.append(
                waiter.acquire("job", ttl_ms=30_000, wait_ms=20_000, metadata=WAITER)
            )
        )
        thread.start()
        Target(redis_url, client).until(
            lambda: bool(client.zcard(redis_keys("fencedlease", "job").waiters)), "the waiter"
        )
        assert lease.release()
        thread.join(20)
        assert got[0].lease is not None and got[0].lease.fencing_token == 2
        info = waiter.inspect("job")
        assert info is not None and (info.fencing_token, info.metadata) == (2, WAITER)
        assert got[0].lease.release()

    async def main() -> tuple[int | None, dict[str, str]]:
        async with (
            AsyncLeaseManager.from_url(redis_url) as aholder,
            AsyncLeaseManager.from_url(redis_url) as awaiter,
        ):
            held = (await aholder.acquire("job", ttl_ms=30_000, metadata=HOST)).lease
            assert held is not None
            waiting = asyncio.ensure_future(
                awaiter.acquire("job", ttl_ms=30_000, wait_ms=20_000, metadata=WAITER)
            )
            aclient = redis.asyncio.Redis.from_url(redis_url)
            while not await aclient.zcard(redis_keys("fencedlease", "job").waiters):
                await asyncio.sleep(0.005)
            await aclient.aclose()
            assert await held.release()
            result = await waiting
            info = await awaiter.inspect("job")
            assert info is not None and result.lease is not None
            await result.lease.release()
            return result.lease.fencing_token, dict(info.metadata)

    assert asyncio.run(main()) == (4, WAITER)
    client.close()


@pytest.mark.sentinel
@pytest.mark.timeout(120)
def test_metadata_and_lock_delay_through_sentinel(sentinel_deployment: SentinelDeployment) -> None:
    """Over Sentinel (epoch tokens), both faces store metadata with the grant and keep an
    expired key for its lock-delay."""
    deployment = sentinel_deployment
    with deployment.primary.client() as primary:

        def steps(manager: Any, run: Callable[[Any], Any]) -> None:
            keys = redis_keys(manager_prefix(manager), "job")
            result = run(manager.acquire("job", ttl_ms=60_000, metadata=HOST, lock_delay_ms=60_000))
            assert result.lease is not None
            assert run(manager.inspect("job")).metadata == HOST
            run(result.lease.renew(ttl_ms=1))  # Redis itself expires the lease, unreleased
            Target(deployment.url, primary).until(
                lambda: not primary.exists(keys.lease), "the lease to expire"
            )
            refused = run(manager.acquire("job", ttl_ms=1_000))
            assert refused.acquired is False and refused.holder_ttl_ms > 50_000

        _both_faces(deployment.url, "sentinel", steps)
