"""MemoryBackend on a FakeClock: the expiry case, threads, validation, the asyncio twin."""

from __future__ import annotations

import asyncio
import threading

import pytest

from fencedlease import LeaseManager, ValidationError
from fencedlease._core.protocol import AcquireReply, InspectReply, owner_fingerprint
from fencedlease.backends import AsyncMemoryBackend, MemoryBackend
from fencedlease.testing import FakeClock

OWNER, OTHER = "owner-token-1", "owner-token-2"


def test_ttl_100_is_held_at_99_and_free_at_100() -> None:
    """Acquire ttl 100, advance 99: still held; advance 1 more: free; the next acquire gets a
    larger token."""
    clock = FakeClock()
    backend = MemoryBackend(clock=clock)
    assert backend.acquire("k", OWNER, 100) == AcquireReply(True, 1, 100)
    clock.advance(99)
    assert backend.inspect("k") == InspectReply(1, 1, owner_fingerprint(OWNER), 1)
    assert backend.acquire("k", OTHER, 100) == AcquireReply(False, 0, 1)
    clock.advance(1)
    assert backend.inspect("k") is None
    assert backend.acquire("k", OTHER, 100) == AcquireReply(True, 2, 100)


def test_expiry_case_through_the_manager() -> None:
    """The same case through LeaseManager: the second lease's token is larger, the first is lost
    when it tries to renew."""
    clock = FakeClock()
    leases = LeaseManager(MemoryBackend(clock=clock), clock=clock)
    first = leases.acquire("job", ttl_ms=100).lease
    assert first is not None
    assert first.fencing_token == 1
    clock.advance(99)
    assert not leases.acquire("job", ttl_ms=100).acquired
    clock.advance(1)
    second = leases.acquire("job", ttl_ms=100).lease
    assert second is not None
    assert second.fencing_token == 2
    assert first.renew() is False
    assert first.lost
    info = leases.inspect("job")
    assert info is not None
    assert info.owner_fingerprint == second.owner_fingerprint


def test_threads_never_hold_one_key_at_once() -> None:
    """Eight threads racing for one key 200 times each: never two holders, tokens 1..n."""
    backend = MemoryBackend()
    holders: list[str] = []
    overlaps: list[str] = []
    tokens: list[int] = []
    lock = threading.Lock()

    def race(name: str) -> None:
        for attempt in range(200):
            owner = f"{name}-{attempt}"
            reply = backend.acquire("k", owner, 60_000)
            if not reply.acquired:
                continue
            with lock:
                if holders:
                    overlaps.append(owner)
                holders.append(owner)
                tokens.append(reply.fencing_token)
            with lock:
                holders.remove(owner)
            assert backend.release("k", owner)

    threads = [threading.Thread(target=race, args=(f"t{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == []
    assert sorted(tokens) == list(range(1, len(tokens) + 1))
    assert len(tokens) >= 200


def test_stores_are_private_to_their_object() -> None:
    """Two MemoryBackend objects share nothing."""
    one, two = MemoryBackend(), MemoryBackend()
    one.acquire("k", OWNER, 1_000)
    assert two.inspect("k") is None
    assert two.acquire("k", OTHER, 1_000).fencing_token == 1


def test_close_keeps_the_leases() -> None:
    """close() has nothing to release; the store stays usable."""
    backend = MemoryBackend()
    backend.acquire("k", OWNER, 1_000)
    backend.close()
    assert backend.renew("k", OWNER, 1_000) == 1


def test_repr_hides_owner_tokens() -> None:
    """The repr counts leases and never shows an owner token."""
    backend = MemoryBackend()
    backend.acquire("k", OWNER, 1_000)
    assert repr(backend) == "<MemoryBackend keys=1 counters=1>"


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda b: b.acquire("", OWNER, 1), "key"),
        (lambda b: b.acquire("k", None, 1), "owner_token"),
        (lambda b: b.acquire("k", OWNER, 0), "ttl_ms"),
        (lambda b: b.acquire("k", OWNER, 2_147_483_648), "ttl_ms"),
        (lambda b: b.renew("k", OWNER, 1.0), "ttl_ms"),
        (lambda b: b.release("k", ""), "owner_token"),
        (lambda b: b.inspect(b"k"), "key"),
        (lambda b: b.force_release(""), "key"),
    ],
)
def test_bad_arguments_are_named(call: object, argument: str) -> None:
    """Each method refuses a bad key, owner token or ttl_ms with ValidationError naming it."""
    assert callable(call)
    with pytest.raises(ValidationError) as info:
        call(MemoryBackend())
    assert info.value.argument == argument


def test_renew_many_renews_at_one_instant_and_places_errors() -> None:
    """renew_many answers item by item; an invalid item gets its ValidationError in place."""
    clock = FakeClock()
    backend = MemoryBackend(clock=clock)
    backend.acquire("a", OWNER, 100)
    backend.acquire("b", OTHER, 100)
    clock.advance(50)
    results = backend.renew_many([("a", OWNER, 200), ("b", OWNER, 200), ("a", OWNER, -1)])
    assert results[:2] == [1, 0]
    assert isinstance(results[2], ValidationError)
    assert results[2].argument == "ttl_ms"
    assert backend.inspect("a") == InspectReply(1, 200, owner_fingerprint(OWNER), 1)


def test_async_memory_backend_shares_a_sync_store() -> None:
    """AsyncMemoryBackend over a given MemoryBackend sees and changes the same leases."""
    clock = FakeClock()
    sync = MemoryBackend(clock=clock)

    async def main() -> None:
        backend = AsyncMemoryBackend(sync=sync)
        assert await backend.acquire("k", OWNER, 100) == AcquireReply(True, 1, 100)
        assert sync.acquire("k", OTHER, 100) == AcquireReply(False, 0, 100)
        assert await backend.renew("k", OWNER, 200) == 1
        assert await backend.renew_many([("k", OWNER, 300)]) == [1]
        assert await backend.inspect("k") == InspectReply(1, 300, owner_fingerprint(OWNER), 1)
        assert await backend.release("k", OWNER) is True
        sync.acquire("k", OTHER, 100)
        assert await backend.force_release("k") is True
        await backend.close()
        clock.advance(1)
        assert await AsyncMemoryBackend(clock=clock).acquire("k", OWNER, 1) == AcquireReply(
            True, 1, 1
        )

    asyncio.run(main())
