"""Errors a user meets say what to do: the wrong ``with`` for a face, a nested hold of a key the
caller already holds, and a fencing guard given ``None`` (an acquire that failed)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis

from fencedlease import (
    FencedResource,
    LeaseManager,
    LeaseNotAcquiredError,
    NestedHoldError,
    RedisFencedResource,
    ValidationError,
    db,
)
from fencedlease._core.protocol import AcquireReply
from fencedlease.aio import AsyncLeaseManager
from fencedlease.backends import AsyncMemoryBackend, MemoryBackend

SYNC_WITH = (
    " is a sync context manager: use `with`, not `async with` (asyncio code uses"
    " fencedlease.aio.AsyncLeaseManager)"
)
ASYNC_WITH = (
    " is an asyncio context manager: use `async with`, not `with` (sync code uses"
    " fencedlease.LeaseManager)"
)


class CountingBackend(MemoryBackend):
    """A memory backend that counts acquire round trips and tells of the first refused one."""

    def __init__(self) -> None:
        super().__init__()
        self.acquires = 0
        self.refused = threading.Event()

    def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        self.acquires += 1
        reply = super().acquire(key, owner_token, ttl_ms)
        if not reply.acquired:
            self.refused.set()
        return reply


class AsyncCountingBackend(AsyncMemoryBackend):
    """An asyncio memory backend that counts acquire round trips."""

    def __init__(self) -> None:
        super().__init__()
        self.acquires = 0
        self.refused = asyncio.Event()

    async def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        self.acquires += 1
        reply = await super().acquire(key, owner_token, ttl_ms)
        if not reply.acquired:
            self.refused.set()
        return reply


# -- the wrong `with` -------------------------------------------------------------------------


def _sync_context_managers(leases: LeaseManager) -> list[tuple[str, Any]]:
    lease = leases.acquire("kept", ttl_ms=10_000).lease
    assert lease is not None
    return [
        ("LeaseManager", leases),
        ("LeaseManager.hold()", leases.hold("k", ttl_ms=10_000)),
        ("LeaseManager.keep_alive()", leases.keep_alive(lease)),
        ("Semaphore.hold()", leases.semaphore("s", limit=2).hold(ttl_ms=10_000)),
    ]


def test_async_with_on_the_sync_face_names_with() -> None:
    """`async with` on each sync context manager raises a TypeError naming `with`, and nothing
    is acquired."""
    backend = CountingBackend()
    leases = LeaseManager(backend)

    async def enter(cm: Any) -> None:
        async with cm:
            pytest.fail("entered")

    managers = _sync_context_managers(leases)
    before = backend.acquires
    for what, cm in managers:
        with pytest.raises(TypeError) as info:
            asyncio.run(enter(cm))
        assert str(info.value) == what + SYNC_WITH
    assert backend.acquires == before
    leases.close()


def test_with_on_the_asyncio_face_names_async_with() -> None:
    """`with` on each asyncio context manager raises a TypeError naming `async with`, and
    nothing is acquired."""

    async def main() -> None:
        backend = AsyncCountingBackend()
        leases = AsyncLeaseManager(backend)
        lease = (await leases.acquire("kept", ttl_ms=10_000)).lease
        assert lease is not None
        managers: list[tuple[str, Any]] = [
            ("AsyncLeaseManager", leases),
            ("AsyncLeaseManager.hold()", leases.hold("k", ttl_ms=10_000)),
            ("AsyncLeaseManager.keep_alive()", leases.keep_alive(lease)),
            ("AsyncSemaphore.hold()", leases.semaphore("s", limit=2).hold(ttl_ms=10_000)),
        ]
        for what, cm in managers:
            with pytest.raises(TypeError) as info, cm:
                pytest.fail("entered")
            assert str(info.value) == what + ASYNC_WITH
        assert backend.acquires == 1
        await leases.close()

    asyncio.run(main())


# -- a nested hold of a key the caller holds ----------------------------------------------


@pytest.mark.parametrize("wait_ms", [0, 60_000])
def test_a_nested_hold_says_the_caller_holds_the_key(wait_ms: int) -> None:
    """A hold of a key this thread holds through the same manager raises NestedHoldError (a
    LeaseNotAcquiredError) at once, with no acquire round trip, whatever wait_ms."""
    backend = CountingBackend()
    leases = LeaseManager(backend)
    with leases.hold("k", ttl_ms=10_000):
        with (
            pytest.raises(NestedHoldError) as info,
            leases.hold("k", ttl_ms=10_000, wait_ms=wait_ms),
        ):
            pytest.fail("entered")
        with pytest.raises(NestedHoldError):
            leases.with_lease("k", lambda lease: None, ttl_ms=10_000, wait_ms=wait_ms)
    assert backend.acquires == 1
    assert isinstance(info.value, LeaseNotAcquiredError)
    assert info.value.key == "k"
    assert info.value.status_code == 409
    assert str(info.value) == (
        "this manager already holds 'k' in this thread (an enclosing hold or keep_alive): a"
        " nested hold of the same key would wait for itself (hold it with reentrant=True to"
        " nest)"
    )
    leases.close()


def test_a_hold_in_another_thread_still_waits_for_the_holder() -> None:
    """Another thread's hold of a key held by the same manager is contention, not nesting: it
    is refused by the store, waits, and takes the key once the holder releases it."""
    backend = CountingBackend()
    leases = LeaseManager(backend)
    got: list[int | None] = []

    def other() -> None:
        with leases.hold("k", ttl_ms=10_000, wait_ms=60_000, retry_delay_ms=5) as lease:
            got.append(lease.fencing_token)

    with leases.hold("k", ttl_ms=10_000):
        thread = threading.Thread(target=other)
        thread.start()
        assert backend.refused.wait(30)  # the other thread is waiting for this hold
    thread.join(30)
    assert got == [2]
    leases.close()


def test_a_nested_semaphore_hold_takes_a_second_slot() -> None:
    """Slots of a semaphore are not a nested hold: one thread may hold two slots of one name."""
    leases = LeaseManager(MemoryBackend())
    sem = leases.semaphore("s", limit=2)
    with sem.hold(ttl_ms=10_000) as first, sem.hold(ttl_ms=10_000) as second:
        assert (first.fencing_token, second.fencing_token) == (1, 2)
    leases.close()


@pytest.mark.parametrize("wait_ms", [0, 60_000])
def test_a_nested_async_hold_says_the_task_holds_the_key(wait_ms: int) -> None:
    """asyncio: a hold of a key this task holds through the same manager raises NestedHoldError
    at once, with no acquire round trip, whatever wait_ms; with_lease raises it too."""

    async def never(lease: object) -> None:
        pytest.fail("fn ran")

    async def main() -> NestedHoldError:
        backend = AsyncCountingBackend()
        leases = AsyncLeaseManager(backend)
        async with leases.hold("k", ttl_ms=10_000):
            with pytest.raises(NestedHoldError) as info:
                async with leases.hold("k", ttl_ms=10_000, wait_ms=wait_ms):
                    pytest.fail("entered")
            with pytest.raises(NestedHoldError):
                await leases.with_lease("k", never, ttl_ms=10_000, wait_ms=wait_ms)
        assert backend.acquires == 1
        await leases.close()
        return info.value

    error = asyncio.run(main())
    assert error.key == "k"
    assert str(error) == (
        "this manager already holds 'k' in this task (an enclosing hold or keep_alive): a"
        " nested hold of the same key would wait for itself (hold it with reentrant=True to"
        " nest)"
    )


def test_an_async_hold_in_another_task_still_waits_for_the_holder() -> None:
    """asyncio: another task's hold of a key held by the same manager is refused by the store,
    waits, and takes the key once the holder releases it."""

    async def main() -> int | None:
        backend = AsyncCountingBackend()
        leases = AsyncLeaseManager(backend)

        async def other() -> int | None:
            async with leases.hold("k", ttl_ms=10_000, wait_ms=60_000, retry_delay_ms=5) as lease:
                return lease.fencing_token

        async with leases.hold("k", ttl_ms=10_000):
            task = asyncio.create_task(other())
            await backend.refused.wait()  # the other task is waiting for this hold
        token = await task
        await leases.close()
        return token

    assert asyncio.run(main()) == 2


# -- a fencing guard given None ------------------------------------------------------------

NONE_HINT = (
    "token_or_lease is None, not a lease or a fencing token: did the acquire fail? acquire()"
    " returns a result whose .lease is None when it was not acquired; check result.acquired"
    " before using result.lease"
)


def _guards() -> list[tuple[str, Callable[[Any], object]]]:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT, fencing_token INT)")
    db.create_guard_table(conn)
    # Never connected: the token is checked before any command.
    client = redis.Redis(host="127.0.0.1", port=1)
    return [
        ("FencedResource.accept", FencedResource("orders").accept),
        ("RedisFencedResource.accept", RedisFencedResource(client, "orders").accept),
        ("RedisFencedResource.set", lambda t: RedisFencedResource(client, "o").set("v", t)),
        ("db.fence_guard", lambda t: db.fence_guard(conn, "orders", t)),
        (
            "db.fenced_update",
            lambda t: db.fenced_update(conn, "orders", {"status": "x"}, {"id": 1}, t),
        ),
        ("db.fenced_read", lambda t: db.fenced_read(conn, "orders", {"id": 1}, t)),
    ]


@pytest.mark.parametrize("name", [name for name, _ in _guards()])
def test_a_guard_given_none_hints_that_the_acquire_failed(name: str) -> None:
    """Every fencing guard given None (the lease of a result not acquired) raises a
    ValidationError naming token_or_lease that says the acquire probably failed."""
    guard = dict(_guards())[name]
    leases = LeaseManager(MemoryBackend())
    assert leases.acquire("k", ttl_ms=10_000).acquired
    result = leases.acquire("k", ttl_ms=10_000)  # held: not acquired, .lease is None
    with pytest.raises(ValidationError) as info:
        guard(result.lease)
    assert info.value.argument == "token_or_lease"
    assert str(info.value) == NONE_HINT
    leases.close()
