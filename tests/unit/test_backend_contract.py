"""The managers talk to a backend through the backend contract (fencedlease._core.backend)
only: a queueing backend's acquire gets its own waiter's queue, and a backend that follows a
primary is told to renew every lease on a switch, whatever the backend's class."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import grimp
import pytest

from fencedlease import LeaseManager, MemoryBackend
from fencedlease._core.backend import (
    AsyncQueueingBackend,
    FollowsPrimary,
    LeaseBackend,
    QueueingBackend,
)
from fencedlease._core.protocol import AcquireReply
from fencedlease._sync.handoff import SleepWaiter
from fencedlease.aio import AsyncLeaseManager
from fencedlease.backends import AsyncMemoryBackend

QUEUE = ("250", "0", "listener-1", "0")


class _QueueingWaiter(SleepWaiter):
    """A polling waiter that asks for every refused acquire to queue its caller."""

    queues = True

    def queue_args(
        self, key: str, owner_token: str, wait_ms: int, final: bool
    ) -> tuple[str, str, str, str] | None:
        return QUEUE


class _QueueingMemory(MemoryBackend):
    """A memory store that offers the queueing capability: it records each queue it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.queues: list[tuple[str, ...]] = []

    def acquire(
        self, key: str, owner_token: str, ttl_ms: int, queue: Sequence[str] = ()
    ) -> AcquireReply:
        self.queues.append(tuple(queue))
        return super().acquire(key, owner_token, ttl_ms)

    def release_waiter(self) -> _QueueingWaiter:
        return _QueueingWaiter()


class _FollowingMemory(MemoryBackend):
    """A memory store that offers a settable ``on_primary_switch``."""

    on_primary_switch = None


class _AsyncFollowingMemory(AsyncMemoryBackend):
    """`_FollowingMemory`, awaited."""

    on_primary_switch = None


def test_a_queueing_backend_of_any_class_gets_its_waiters_queue() -> None:
    """A refused acquire that waits sends the waiter's queueing arguments to the backend's own
    acquire: the manager asks the contract, not the Redis backend class."""
    backend = _QueueingMemory()
    assert isinstance(backend, QueueingBackend)
    with LeaseManager(backend) as leases:
        holder = leases.acquire("k", ttl_ms=60_000)
        assert holder.acquired
        backend.queues.clear()
        waiter = leases.acquire("k", ttl_ms=60_000, wait_ms=1, retry_delay_ms=1)
        assert not waiter.acquired
        assert backend.queues[0] == QUEUE


def test_the_built_in_stores_without_a_hand_off_are_no_queueing_backends() -> None:
    """Memory and SQLite have no release waiter: the managers never give them a queue."""
    backend: LeaseBackend = MemoryBackend()
    assert not isinstance(backend, QueueingBackend)
    assert not isinstance(AsyncMemoryBackend(), AsyncQueueingBackend)
    assert not isinstance(backend, FollowsPrimary)


def test_a_backend_that_follows_a_primary_is_told_to_renew_on_a_switch() -> None:
    """Both managers set on_primary_switch on any backend that offers it to their renewer's
    renew-now, not only on the Redis backend class."""
    backend = _FollowingMemory()
    with LeaseManager(backend) as leases:
        assert backend.on_primary_switch == leases._renewer.renew_now

    async def main() -> None:
        async_backend = _AsyncFollowingMemory()
        async with AsyncLeaseManager(async_backend) as leases:
            assert async_backend.on_primary_switch == leases._renewer.renew_now

    asyncio.run(main())


@pytest.mark.parametrize(
    ("base", "redis_backend"),
    [
        ("fencedlease._sync.manager_base", "fencedlease._sync.redis_backend"),
        ("fencedlease._async.manager_base", "fencedlease._async.redis_backend"),
        ("fencedlease._sync.acquire_loop", "fencedlease._sync.redis_backend"),
        ("fencedlease._async.acquire_loop", "fencedlease._async.redis_backend"),
    ],
)
def test_the_manager_base_does_not_import_the_redis_backend(base: str, redis_backend: str) -> None:
    """The shared manager base reaches every backend through the contract: it imports no Redis
    backend module."""
    graph = grimp.build_graph("fencedlease", cache_dir=None)
    assert base in graph.modules and redis_backend in graph.modules  # the names are current
    assert redis_backend not in graph.find_modules_directly_imported_by(base)
