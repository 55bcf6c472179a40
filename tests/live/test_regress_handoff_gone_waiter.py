"""Regression: no lease is handed to a waiter that has gone. A queueing command held back until its
acquire call has given up lands after the give-up: a release hands the key to that entry, and the
clean-up release that the command's late reply asks for passes it on to the next waiter (both
faces). A waiter's last attempt leaves the queue in its own script, with no release after it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from conftest import wait_until
from fencedlease import AcquireResult, Lease, LeaseManager
from fencedlease._redis.keys import lease_key, lease_keys, waiters_key
from fencedlease._redis.scripts import ACQUIRE, ENQUEUE
from fencedlease._sync.scripts import run_script
from fencedlease.aio import AsyncLeaseManager

pytestmark = pytest.mark.live

PREFIX = "gone"
TTL_MS = 30_000
# The gone waiter's wait: its queue entry, landing after the give-up, lives this long on Redis's
# clock, so the holder's release (right after the landing) hands the key to it.
WAIT_MS = 3_000
# How soon the next waiter must hold the key once the clean-up may land (a round trip or two;
# generous for two busy cores, and far below the ttl a gone waiter's grant would hold it).
GRANT_BOUND_S = 5.0


def _queued(client: redis.Redis, key: str) -> int:
    return int(client.zcard(waiters_key(PREFIX, key)))


def _holder_token(client: redis.Redis, key: str) -> tuple[int, str] | None:
    value = client.get(lease_key(PREFIX, key))
    if not isinstance(value, bytes):
        return None
    token, _, owner = value.decode().partition(":")
    return int(token), owner


class _Next(threading.Thread):
    """The next waiter: acquires ``key`` (another manager, as another process); when it got it."""

    def __init__(self, leases: LeaseManager, key: str) -> None:
        super().__init__()
        self.leases, self.key = leases, key
        self.result: AcquireResult | None = None
        self.at = 0.0

    def run(self) -> None:
        self.result = self.leases.acquire(self.key, ttl_ms=TTL_MS, wait_ms=30_000)
        self.at = time.monotonic()


@pytest.fixture
def managers(redis_url: str) -> Iterator[tuple[LeaseManager, LeaseManager]]:
    """The holder's and the next waiter's managers."""
    made = (
        LeaseManager.from_url(redis_url, prefix=PREFIX),
        LeaseManager.from_url(redis_url, prefix=PREFIX),
    )
    yield made
    for leases in made:
        leases.close()


def _hand_to_the_gone_waiter(
    admin: redis.Redis, holder: Lease, next_side: LeaseManager, key: str, gone_owner: str
) -> tuple[_Next, int]:
    """With the gone waiter's late entry queued: the next waiter queues behind it, the holder
    releases, and the key goes to the gone waiter (token 2, its owner token). Returns the next
    waiter (still waiting) and the key's PX then."""
    nxt = _Next(next_side, key)
    nxt.start()
    wait_until(lambda: _queued(admin, key) == 2, f"the next waiter queued behind for {key!r}")
    assert holder.release() is True
    handed = _holder_token(admin, key)
    assert handed == (2, gone_owner)  # the hand-off went to the entry of the gone waiter
    assert nxt.is_alive()
    return nxt, int(admin.pttl(lease_key(PREFIX, key)))


def test_sync_queueing_that_lands_after_the_give_up_is_passed_on(
    redis_url: str, redis_client: redis.Redis, managers: tuple[LeaseManager, LeaseManager]
) -> None:
    """The wait's queueing command is held until the call has given up, then lands: the key a
    release hands to that entry (its whole ttl, the manager's listener still hears the channel)
    is passed on by the clean-up release the command's reply asks for, so the next waiter holds
    it within a bound, and nothing is left held or queued."""
    holder_side, _ = managers
    holder = holder_side.acquire("s", ttl_ms=TTL_MS).lease
    assert holder is not None
    owners: list[str] = []
    with LeaseManager.from_url(redis_url, prefix=PREFIX) as gone:
        handoff: Any = gone._release_waiter
        real_enqueue, real_release = handoff._enqueue, gone.backend.release
        sent, land, landed = threading.Event(), threading.Event(), threading.Event()
        cleanup_sent, cleanup_go = threading.Event(), threading.Event()

        def held_enqueue(key: str, owner_token: str, *args: Any) -> bool:
            owners.append(owner_token)
            sent.set()
            land.wait(30)  # held back until the call has given up
            try:
                return bool(real_enqueue(key, owner_token, *args))
            finally:
                landed.set()

        def held_release(key: str, owner_token: str) -> bool:
            if landed.is_set():  # the clean-up after the landing (none is sent before it)
                cleanup_sent.set()
                cleanup_go.wait(30)  # held back until the key was handed to the gone waiter
            return bool(real_release(key, owner_token))

        handoff._enqueue = held_enqueue
        gone.backend.release = held_release  # type: ignore[method-assign]
        result = gone.acquire("s", ttl_ms=TTL_MS, wait_ms=WAIT_MS, retry_delay_ms=60_000)
        assert not result.acquired and sent.is_set()
        land.set()
        assert landed.wait(30)
        assert _queued(redis_client, "s") == 1  # the gone waiter's entry
        assert cleanup_sent.wait(10), "the late queueing asked for no release"
        nxt, pttl = _hand_to_the_gone_waiter(redis_client, holder, managers[1], "s", owners[0])
        assert pttl > WAIT_MS  # the gone waiter's grant: its whole ttl_ms
        go = time.monotonic()
        cleanup_go.set()
        nxt.join(30)
        assert nxt.result is not None and nxt.result.lease is not None
        assert nxt.at - go < GRANT_BOUND_S
        assert nxt.result.lease.fencing_token == 3
        assert len(getattr(handoff, "_late", ())) == 0
        assert nxt.result.lease.release() is True
    assert _holder_token(redis_client, "s") is None
    assert _queued(redis_client, "s") == 0


def test_asyncio_queueing_that_lands_after_the_give_up_is_passed_on(
    redis_url: str, redis_client: redis.Redis, managers: tuple[LeaseManager, LeaseManager]
) -> None:
    """The asyncio twin: the queueing task is held until the call has given up, then lands; the
    key handed to its entry is passed on by the clean-up release, and the next waiter holds it
    within a bound."""
    holder_side, _ = managers
    holder = holder_side.acquire("a", ttl_ms=TTL_MS).lease
    assert holder is not None
    owners: list[str] = []

    async def scenario() -> tuple[_Next, float, int, int]:
        async with AsyncLeaseManager.from_url(redis_url, prefix=PREFIX) as gone:
            handoff: Any = gone._release_waiter
            real_enqueue, real_release = handoff._enqueue, gone.backend.release
            sent, land, landed = asyncio.Event(), asyncio.Event(), asyncio.Event()
            cleanup_sent, cleanup_go = asyncio.Event(), asyncio.Event()

            async def held_enqueue(key: str, owner_token: str, *args: Any) -> bool:
                owners.append(owner_token)
                sent.set()
                await land.wait()
                try:
                    return bool(await real_enqueue(key, owner_token, *args))
                finally:
                    landed.set()

            async def held_release(key: str, owner_token: str) -> bool:
                if landed.is_set():
                    cleanup_sent.set()
                    await cleanup_go.wait()
                return bool(await real_release(key, owner_token))

            handoff._enqueue = held_enqueue
            gone.backend.release = held_release  # type: ignore[method-assign]
            result = await gone.acquire("a", ttl_ms=TTL_MS, wait_ms=WAIT_MS, retry_delay_ms=60_000)
            assert not result.acquired and sent.is_set()
            land.set()
            await asyncio.wait_for(landed.wait(), 30)
            assert _queued(redis_client, "a") == 1
            await asyncio.wait_for(cleanup_sent.wait(), 10)  # the late queueing's clean-up
            nxt, pttl = await asyncio.to_thread(
                _hand_to_the_gone_waiter, redis_client, holder, managers[1], "a", owners[0]
            )
            go = time.monotonic()
            cleanup_go.set()
            await asyncio.to_thread(nxt.join, 30)
            return nxt, go, pttl, len(getattr(handoff, "_late", ()))

    nxt, go, pttl, late = asyncio.run(scenario())
    assert pttl > WAIT_MS
    assert nxt.result is not None and nxt.result.lease is not None
    assert nxt.at - go < GRANT_BOUND_S
    assert (nxt.result.lease.fencing_token, late) == (3, 0)
    assert nxt.result.lease.release() is True
    assert _holder_token(redis_client, "a") is None
    assert _queued(redis_client, "a") == 0


class _Releases:
    """Records the releases a backend sends (and sends them)."""

    def __init__(self, backend: Any) -> None:
        self.calls: list[str] = []
        self._release = backend.release
        backend.release = self

    def __call__(self, key: str, owner_token: str) -> bool:
        self.calls.append(key)
        return bool(self._release(key, owner_token))


def test_sync_last_attempt_leaves_the_queue_with_no_release(
    redis_url: str, redis_client: redis.Redis, managers: tuple[LeaseManager, LeaseManager]
) -> None:
    """A waiter that gives up is out of the queue when the call returns, by its last attempt's
    own script: no release follows it (one that would, behind others, leaves the entry to be
    handed the key)."""
    holder = managers[0].acquire("l", ttl_ms=TTL_MS).lease
    assert holder is not None
    with LeaseManager.from_url(redis_url, prefix=PREFIX) as leases:
        # Warm the listener up, so the refused acquire queues the caller itself.
        assert not leases.acquire("l", ttl_ms=TTL_MS, wait_ms=300, retry_delay_ms=60_000).acquired
        wait_until(lambda: _queued(redis_client, "l") == 0, "the warm-up's entry gone")
        releases = _Releases(leases.backend)
        result = leases.acquire("l", ttl_ms=TTL_MS, wait_ms=300, retry_delay_ms=60_000)
        assert not result.acquired
        assert (_queued(redis_client, "l"), releases.calls) == (0, [])
    assert holder.release() is True
    assert _holder_token(redis_client, "l") is None


def test_asyncio_last_attempt_leaves_the_queue_with_no_release(
    redis_url: str, redis_client: redis.Redis, managers: tuple[LeaseManager, LeaseManager]
) -> None:
    """The asyncio twin: out of the queue when the call returns, with no release."""
    holder = managers[0].acquire("la", ttl_ms=TTL_MS).lease
    assert holder is not None

    async def scenario() -> tuple[int, list[str]]:
        async with AsyncLeaseManager.from_url(redis_url, prefix=PREFIX) as leases:
            warm = await leases.acquire("la", ttl_ms=TTL_MS, wait_ms=300, retry_delay_ms=60_000)
            assert not warm.acquired
            await asyncio.to_thread(
                wait_until, lambda: _queued(redis_client, "la") == 0, "the warm-up's entry gone"
            )
            releases = _AsyncReleases(leases.backend)
            result = await leases.acquire("la", ttl_ms=TTL_MS, wait_ms=300, retry_delay_ms=60_000)
            assert not result.acquired
            return _queued(redis_client, "la"), releases.calls

    assert asyncio.run(scenario()) == (0, [])
    assert holder.release() is True


class _AsyncReleases:
    """`_Releases` for an asyncio backend."""

    def __init__(self, backend: Any) -> None:
        self.calls: list[str] = []
        self._release = backend.release
        backend.release = self

    async def __call__(self, key: str, owner_token: str) -> bool:
        self.calls.append(key)
        return bool(await self._release(key, owner_token))


def test_leave_takes_only_the_refused_caller_out_of_the_queue(redis_client: redis.Redis) -> None:
    """acquire.lua with ``'leave'``: refused, the caller's entry is gone and another's kept; given
    with more arguments it is refused as a queueing argument, with nothing written."""
    keys = lease_keys(PREFIX, "lua")
    redis_client.set(keys[0], "7:holder", px=TTL_MS)
    for owner in ("me", "other"):
        enqueue = (keys[0], keys[2], keys[3]), (owner, 5_000, TTL_MS, 200)
        assert run_script(redis_client, ENQUEUE, *enqueue) == 1
    with pytest.raises(redis.ResponseError, match=r"ARGV\[5\] must be an integer"):
        run_script(redis_client, ACQUIRE, keys, ("me", TTL_MS, "counter", "", "leave", "0"))
    assert redis_client.zrange(keys[2], 0, -1) == [b"me", b"other"]
    reply = run_script(redis_client, ACQUIRE, keys, ("me", TTL_MS, "counter", "", "leave"))
    assert reply[:2] == [0, 0]
    assert redis_client.zrange(keys[2], 0, -1) == [b"other"]
    assert redis_client.hkeys(keys[3]) == [b"other"]
    assert redis_client.get(keys[0]) == b"7:holder"
