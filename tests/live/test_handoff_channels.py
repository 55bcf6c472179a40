"""Hand-off channels on a real Redis: a release publishes its grant on the channel of the granted
waiter's own listener, so only that process hears it; an entry without a listener id is woken on
the key's shared channel; a malformed listener id is refused with nothing written."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from fencedlease import LeaseManager
from fencedlease._handoff import waiter_name
from fencedlease._handoff_sync import Handoff
from fencedlease._protocol import new_owner_token
from fencedlease._redis.keys import (
    enqueue_args,
    handoff_channel,
    lease_keys,
    waiters_key,
    waiters_meta_key,
)
from fencedlease._redis.scripts import ENQUEUE, RELEASE, run_script
from fencedlease.aio._handoff import AsyncHandoff

pytestmark = pytest.mark.live


def _wait_until(predicate: Any, timeout_s: float = 10.0) -> None:
    """Poll a condition the test cannot be told about by an event (a waiter queued in Redis)."""
    give_up = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > give_up:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)


@pytest.fixture
def monitor(redis_client: redis.Redis) -> Iterator[Any]:
    """A pub/sub connection that hears every hand-off channel of prefix ``h``."""
    pubsub = redis_client.pubsub()  # type: ignore[no-untyped-call]
    pubsub.psubscribe("h:*:handoff*")
    assert pubsub.get_message(timeout=5.0)["type"] == "psubscribe"
    yield pubsub
    pubsub.close()


def _next_grant(monitor: Any) -> tuple[str, str]:
    """(channel, data) of the next hand-off message the monitor hears."""
    message = monitor.get_message(timeout=10.0)
    assert message is not None and message["type"] == "pmessage"
    return message["channel"].decode(), message["data"].decode()


def _queued(client: redis.Redis, key: str) -> int:
    return int(client.zcard(waiters_key("h", key)))


def _handoff_channels(client: redis.Redis, key: str) -> set[str]:
    found = client.pubsub_channels(handoff_channel("h", key) + "*")
    return {c.decode() if isinstance(c, bytes) else c for c in found}


def test_sync_grant_is_published_to_the_granted_waiters_listener_only(
    redis_url: str, redis_client: redis.Redis, monitor: Any
) -> None:
    """Two processes' handoffs wait on one key, each subscribed to a channel of its own; the
    release grants the oldest (A) and publishes on A's channel alone (one subscriber), and A's
    release then grants B on B's channel: no message ever reaches the other listener."""
    holder_leases = LeaseManager.from_url(redis_url, prefix="h")
    clients = [redis.Redis.from_url(redis_url) for _ in range(2)]
    handoffs = [Handoff(client, "h") for client in clients]
    owners = [new_owner_token(), new_owner_token()]
    try:
        holder = holder_leases.acquire("k", ttl_ms=10_000).lease
        assert holder is not None
        threads = [
            threading.Thread(target=h.wait, args=("k", owner, 10_000, 30.0))
            for h, owner in zip(handoffs, owners, strict=True)
        ]
        threads[0].start()
        _wait_until(lambda: _queued(redis_client, "k") == 1)
        threads[1].start()
        _wait_until(lambda: _queued(redis_client, "k") == 2)
        mine = [h._channel("k") for h in handoffs]
        assert mine[0] != mine[1] and _handoff_channels(redis_client, "k") == set(mine)
        assert dict(redis_client.pubsub_numsub(*mine)) == {c.encode(): 1 for c in mine}

        assert holder.release() is True
        assert _next_grant(monitor) == (mine[0], waiter_name(owners[0]))
        threads[0].join(10.0)
        assert not threads[0].is_alive() and threads[1].is_alive()
        assert (handoffs[0].notified, handoffs[1].notified) == (1, 0)
        assert redis_client.get(lease_keys("h", "k")[0]) == f"2:{owners[0]}".encode()

        backend = holder_leases.backend
        assert backend.release("k", owners[0]) is True
        assert _next_grant(monitor) == (mine[1], waiter_name(owners[1]))
        threads[1].join(10.0)
        assert not threads[1].is_alive()
        assert (handoffs[0].notified, handoffs[1].notified) == (1, 1)
        assert redis_client.get(lease_keys("h", "k")[0]) == f"3:{owners[1]}".encode()
    finally:
        for h in handoffs:
            h.close()
        for client in clients:
            client.close()
        holder_leases.close()


def test_asyncio_grant_is_published_to_the_granted_waiters_listener_only(
    redis_url: str, redis_client: redis.Redis, monitor: Any
) -> None:
    """The asyncio twin: two AsyncHandoffs wait on one key; the release wakes the oldest on its
    own channel (one subscriber) and the other's wait goes on unwoken."""
    holder_leases = LeaseManager.from_url(redis_url, prefix="h")
    holder = holder_leases.acquire("k", ttl_ms=10_000).lease
    assert holder is not None
    owners = [new_owner_token(), new_owner_token()]

    async def scenario() -> tuple[list[str], tuple[str, str], list[int], bool]:
        clients = [redis.asyncio.Redis.from_url(redis_url) for _ in range(2)]
        handoffs = [AsyncHandoff(client, "h") for client in clients]
        try:
            first = asyncio.create_task(handoffs[0].wait("k", owners[0], 10_000, 30.0))
            await asyncio.to_thread(_wait_until, lambda: _queued(redis_client, "k") == 1)
            second = asyncio.create_task(handoffs[1].wait("k", owners[1], 10_000, 30.0))
            await asyncio.to_thread(_wait_until, lambda: _queued(redis_client, "k") == 2)
            mine = [h._channel("k") for h in handoffs]
            assert _handoff_channels(redis_client, "k") == set(mine)
            assert await asyncio.to_thread(holder.release) is True
            grant = await asyncio.to_thread(_next_grant, monitor)
            await asyncio.wait_for(first, 10.0)
            still_waiting = not second.done()
            notified = [h.notified for h in handoffs]
            second.cancel()
            return mine, grant, notified, still_waiting
        finally:
            for h in handoffs:
                await h.aclose()
            for client in clients:
                await client.aclose()

    try:
        mine, grant, notified, still_waiting = asyncio.run(scenario())
    finally:
        holder_leases.close()
    assert mine[0] != mine[1]
    assert grant == (mine[0], waiter_name(owners[0]))
    assert notified == [1, 0] and still_waiting
    assert redis_client.get(lease_keys("h", "k")[0]) == f"2:{owners[0]}".encode()


def test_an_entry_without_a_listener_id_is_woken_on_the_shared_channel(
    redis_client: redis.Redis, monitor: Any
) -> None:
    """An entry queued without a listener id (ARGV[5] missing: "<deadline>:<ttl>:<grace>", the
    layout before listener ids) is granted and woken on ``<lease key>:handoff``."""
    keys = lease_keys("h", "k")
    redis_client.set(keys[0], "1:holder", px=60_000)
    equeue_keys, args = enqueue_args("h", "k", "waiter", 5_000, 30_000, False, 200)
    assert run_script(redis_client, ENQUEUE, equeue_keys, args[:4]) == 1
    meta = redis_client.hget(waiters_meta_key("h", "k"), "waiter")
    assert isinstance(meta, bytes) and meta.count(b":") == 3 and meta.endswith(b":")
    redis_client.hset(waiters_meta_key("h", "k"), "waiter", meta[:-1])
    assert run_script(redis_client, RELEASE, keys, ("holder",)) == 1
    assert _next_grant(monitor) == (handoff_channel("h", "k"), waiter_name("waiter"))
    assert redis_client.get(keys[0]) == b"1:waiter"


@pytest.mark.parametrize("listener", ["A1", "x", "0" * 33, "ab:cd", " ab"])
def test_enqueue_refuses_a_malformed_listener_id_with_nothing_written(
    redis_client: redis.Redis, listener: str
) -> None:
    """ARGV[5] must be 1..32 lowercase hex digits (or empty): anything else is an error reply
    naming the argument, and no queue key is written."""
    keys = lease_keys("h", "k")
    redis_client.set(keys[0], "1:holder", px=60_000)
    equeue_keys, args = enqueue_args("h", "k", "waiter", 5_000, 30_000, False, 200, listener)
    with pytest.raises(redis.ResponseError, match=r"ARGV\[5\] must be 1\.\.32 lowercase hex"):
        run_script(redis_client, ENQUEUE, equeue_keys, args)
    assert redis_client.exists(waiters_key("h", "k"), waiters_meta_key("h", "k")) == 0


def test_enqueue_stores_the_listener_id_the_release_publishes_to(
    redis_client: redis.Redis, monitor: Any
) -> None:
    """The details entry ends in the listener id given, and the grant goes to that channel."""
    keys = lease_keys("h", "k")
    redis_client.set(keys[0], "1:holder", px=60_000)
    listener = "0123456789abcdef" * 2
    equeue_keys, args = enqueue_args("h", "k", "waiter", 5_000, 30_000, False, 200, listener)
    assert run_script(redis_client, ENQUEUE, equeue_keys, args) == 1
    meta = redis_client.hget(waiters_meta_key("h", "k"), "waiter")
    assert isinstance(meta, bytes) and meta.decode().split(":")[1:] == ["5000", "200", listener]
    assert run_script(redis_client, RELEASE, keys, ("holder",)) == 1
    assert _next_grant(monitor) == (handoff_channel("h", "k", listener), waiter_name("waiter"))
    assert redis_client.get(keys[0]) == b"1:waiter"
