"""Hand-off on a real Redis: waiters are woken by the release, served in arrival order, and fall
back to polling when a notification is lost; a release publishes its grant on the channel of the
granted waiter's own listener, so only that process hears it (an entry without a listener id is
woken on the key's shared channel; a malformed listener id is refused with nothing written)."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from conftest import expiry_ms, wait_until
from fencedlease import AcquireResult, LeaseManager
from fencedlease._async.handoff import AsyncHandoff
from fencedlease._core.protocol import new_owner_token
from fencedlease._handoff.base import waiter_name
from fencedlease._handoff.waiters import WaitRequest
from fencedlease._redis.keys import (
    enqueue_args,
    handoff_channel,
    lease_keys,
    waiters_key,
    waiters_meta_key,
)
from fencedlease._redis.replies import parse_grant
from fencedlease._redis.scripts import ENQUEUE, RELEASE
from fencedlease._sync.handoff import Handoff
from fencedlease._sync.scripts import run_script
from fencedlease_lab.servers.redis import RedisServer

pytestmark = pytest.mark.live


class _Waiter(threading.Thread):
    """Acquires ``key`` with a bounded wait on its own manager; records when it got the lease."""

    def __init__(self, leases: LeaseManager, key: str, **kwargs: Any) -> None:
        super().__init__()
        self.leases, self.key, self.kwargs = leases, key, kwargs
        self.result: AcquireResult | None = None
        self.held_at = 0.0

    def run(self) -> None:
        self.result = self.leases.acquire(self.key, **self.kwargs)
        self.held_at = time.monotonic()


@pytest.fixture
def managers(redis_url: str, redis_client: redis.Redis) -> Iterator[list[LeaseManager]]:
    """Three managers, each with its own client (three processes, as far as Redis can tell)."""
    made = [LeaseManager.from_url(redis_url, prefix="h") for _ in range(3)]
    yield made
    for leases in made:
        leases.close()


def _queued(client: redis.Redis, key: str) -> int:
    return int(client.zcard(waiters_key("h", key)))


def test_waiter_is_woken_by_the_release(
    managers: list[LeaseManager], redis_client: redis.Redis
) -> None:
    """With retry_delay_ms=20000 a waiter holds the lease well within the 10 s its next poll is
    at the earliest (jitter), by the hand-off message: it was woken, not polling; the hand-off is
    a new grant (token 2)."""
    holder = managers[0].acquire("wake", ttl_ms=10_000).lease
    assert holder is not None
    waiter = _Waiter(managers[1], "wake", ttl_ms=10_000, wait_ms=60_000, retry_delay_ms=20_000)
    waiter.start()
    wait_until(lambda: _queued(redis_client, "wake") == 1, "one waiter queued for 'wake'")
    released_at = time.monotonic()
    assert holder.release() is True
    waiter.join()
    assert waiter.result is not None
    assert waiter.result.lease is not None
    assert waiter.result.lease.fencing_token == 2
    assert waiter.held_at - released_at < 5.0
    assert managers[1]._release_waiter.notified == 1  # type: ignore[attr-defined]
    assert waiter.result.lease.release() is True
    assert redis_client.pttl("h:{wake}") == -2


def test_releasing_holder_cannot_barge(
    managers: list[LeaseManager], redis_client: redis.Redis
) -> None:
    """The holder releases and asks again at once: the key has gone to the oldest waiter, then to
    the next one, in arrival order; tokens 2 and 3."""
    holder = managers[0].acquire("fifo", ttl_ms=10_000).lease
    assert holder is not None
    first = _Waiter(managers[1], "fifo", ttl_ms=10_000, wait_ms=10_000, retry_delay_ms=2_000)
    first.start()
    wait_until(lambda: _queued(redis_client, "fifo") == 1, "one waiter queued for 'fifo'")
    second = _Waiter(managers[2], "fifo", ttl_ms=10_000, wait_ms=10_000, retry_delay_ms=2_000)
    second.start()
    wait_until(lambda: _queued(redis_client, "fifo") == 2, "two waiters queued for 'fifo'")
    assert holder.release() is True
    again = managers[0].acquire("fifo", ttl_ms=10_000)
    assert again.lease is None
    first.join()
    assert first.result is not None
    assert first.result.lease is not None
    assert first.result.lease.fencing_token == 2
    assert second.is_alive()
    assert first.result.lease.release() is True
    second.join()
    assert second.result is not None
    assert second.result.lease is not None
    assert second.result.lease.fencing_token == 3
    assert second.result.lease.release() is True
    assert redis_client.pttl("h:{fifo}") == -2


def test_lost_notification_costs_at_most_one_retry_delay(
    managers: list[LeaseManager], redis_client: redis.Redis
) -> None:
    """The listener's connection is killed in the same transaction as the release, so the
    hand-off message reaches nobody: the waiter still holds by its next poll, one retry delay (1 s,
    up to 1.5 s with jitter) after its last, well before its 60 s budget runs out; no message
    woke it."""
    holder = managers[0].acquire("lost", ttl_ms=10_000).lease
    assert holder is not None
    waiter = _Waiter(managers[1], "lost", ttl_ms=10_000, wait_ms=60_000, retry_delay_ms=1_000)
    waiter.start()
    wait_until(lambda: _queued(redis_client, "lost") == 1, "one waiter queued for 'lost'")
    released_at = time.monotonic()
    pipe = redis_client.pipeline(transaction=True)  # nothing runs between the kill and the release
    pipe.client_kill_filter(_type="pubsub")
    pipe.eval(RELEASE.source, 4, *lease_keys("h", "lost"), holder.owner_token)
    assert pipe.execute()[1] == 1
    waiter.join()
    assert waiter.result is not None
    assert waiter.result.lease is not None
    assert waiter.result.lease.fencing_token == 2
    assert waiter.held_at - released_at < 10.0
    assert managers[1]._release_waiter.notified == 0  # type: ignore[attr-defined]


def test_expiry_publishes_nothing_and_costs_one_retry_delay(
    managers: list[LeaseManager], redis_client: redis.Redis
) -> None:
    """A holder that never releases: its key expires after 300 ms, nobody is told, and the waiter
    holds by polling (every 0.5 s, up to 0.75 s with jitter), well before its 60 s budget runs
    out; no message woke it."""
    assert managers[0].acquire("expiry", ttl_ms=300).lease is not None
    started = time.monotonic()
    waiter = _Waiter(managers[1], "expiry", ttl_ms=10_000, wait_ms=60_000, retry_delay_ms=500)
    waiter.start()
    waiter.join()
    assert waiter.result is not None
    assert waiter.result.lease is not None
    assert waiter.result.lease.fencing_token == 2
    assert waiter.held_at - started < 10.0
    assert managers[1]._release_waiter.notified == 0  # type: ignore[attr-defined]


def test_waiter_that_gave_up_is_skipped(
    managers: list[LeaseManager], redis_client: redis.Redis
) -> None:
    """A waiter gives up (wait_ms=300); once its deadline (its last wait plus 200 ms of grace)
    has passed, the release deletes the key instead of handing it to nobody."""
    holder = managers[0].acquire("gave-up", ttl_ms=10_000).lease
    assert holder is not None
    result = managers[1].acquire("gave-up", ttl_ms=10_000, wait_ms=300, retry_delay_ms=100)
    assert result.lease is None
    time.sleep(0.25)
    assert holder.release() is True
    assert redis_client.pttl("h:{gave-up}") == -2
    assert redis_client.get("h:{gave-up}:fence") == b"1"
    assert redis_client.exists(waiters_key("h", "gave-up"), waiters_meta_key("h", "gave-up")) == 0


def test_queue_keys_expire_by_themselves(
    managers: list[LeaseManager], redis_client: redis.Redis
) -> None:
    """The waiter queue carries a TTL while a waiter waits (nothing is left for ever when waiters
    vanish), and a waiter that gives up takes itself out of it at once."""
    holder = managers[0].acquire("queue-ttl", ttl_ms=10_000).lease
    assert holder is not None
    names = (waiters_key("h", "queue-ttl"), waiters_meta_key("h", "queue-ttl"))
    waiter = threading.Thread(
        target=managers[1].acquire, args=("queue-ttl",), kwargs={"wait_ms": 400}
    )
    waiter.start()
    wait_until(
        lambda: redis_client.exists(*names) == 2, "the waiter queue and its metadata to exist"
    )
    for name in names:
        assert 0 < redis_client.pttl(name) <= 400 + 2 * 200
    first, second = expiry_ms(redis_client, *names)
    assert first == second
    waiter.join()
    wait_until(
        lambda: redis_client.exists(*names) == 0, "the waiter queue and its metadata to be gone"
    )


def test_the_queue_and_its_details_expire_at_one_moment(
    managers: list[LeaseManager], redis_client: redis.Redis
) -> None:
    """Details kept longer than the queue (a waiter of 5 s left them; a 400 ms waiter queues now):
    both keys take the later expiry, so the queue never goes before its details."""
    holder = managers[0].acquire("queue-apart", ttl_ms=10_000).lease
    assert holder is not None
    names = (waiters_key("h", "queue-apart"), waiters_meta_key("h", "queue-apart"))
    redis_client.hset(names[1], "departed", "1:1:1")
    redis_client.pexpire(names[1], 5_000)
    left_before = expiry_ms(redis_client, names[1])[0]
    waiter = threading.Thread(
        target=managers[1].acquire, args=("queue-apart",), kwargs={"wait_ms": 400}
    )
    waiter.start()
    wait_until(lambda: redis_client.exists(names[0]) == 1, "the waiter queue to exist")
    queue_at, details_at = expiry_ms(redis_client, *names)
    waiter.join()
    assert queue_at == details_at
    assert abs(queue_at - left_before) <= 1  # PTTL and TIME may read clocks a millisecond apart


def test_no_listener_thread_after_close(redis_url: str, redis_client: redis.Redis) -> None:
    """The listener starts with the first wait; close() joins it and the queueing pool's threads
    and frees its connection."""
    with LeaseManager.from_url(redis_url, prefix="h") as holder_side:
        leases = LeaseManager.from_url(redis_url, prefix="h")
        assert holder_side.acquire("closing", ttl_ms=10_000).lease is not None
        assert not any(t.name == "fencedlease-handoff" for t in threading.enumerate())
        assert leases.acquire("closing", wait_ms=100, retry_delay_ms=20).lease is None
        assert any(t.name == "fencedlease-handoff" for t in threading.enumerate())
        leases.close()
        left = [t.name for t in threading.enumerate() if t.name.startswith("fencedlease-handoff")]
        assert left == []
        wait_until(
            lambda: int(redis_client.pubsub_numpat()) == 0 and not _pubsub_clients(redis_client),
            "the listener's pub/sub connection to close",
        )


def _pubsub_clients(client: redis.Redis) -> list[Any]:
    return [c for c in client.client_list() if c.get("flags", "").find("P") >= 0]


def test_asyncio_twin_is_woken_by_the_release(
    managers: list[LeaseManager], redis_url: str, redis_client: redis.Redis
) -> None:
    """AsyncHandoff (the asyncio face's waiter) queues, is woken by the release's message long
    before its 20 s wait would end, finds the key handed to it (token 2), and leaves no task
    after aclose()."""
    holder = managers[0].acquire("aio", ttl_ms=10_000).lease
    assert holder is not None
    owner = new_owner_token()
    released_at: list[float] = []

    def release_when_queued() -> None:
        wait_until(lambda: _queued(redis_client, "aio") == 1, "one waiter queued for 'aio'")
        released_at.append(time.monotonic())
        assert holder.release() is True

    async def wait_for_it() -> tuple[float, int]:
        client = redis.asyncio.Redis.from_url(redis_url)
        handoff = AsyncHandoff(client, "h")
        thread = threading.Thread(target=release_when_queued)
        thread.start()
        await handoff.wait(WaitRequest("aio", owner, 10_000, 20.0))
        woken_at = time.monotonic()
        await asyncio.to_thread(thread.join)
        await handoff.aclose()
        assert {t.get_name() for t in asyncio.all_tasks()} == {asyncio.current_task().get_name()}  # type: ignore[union-attr]
        await client.aclose()
        return woken_at, handoff.notified

    woken_at, notified = asyncio.run(wait_for_it())
    assert woken_at - released_at[0] < 5.0
    assert notified == 1
    reply = managers[1].backend.acquire("aio", owner, 10_000)
    assert (reply.acquired, reply.fencing_token, reply.retried) == (True, 2, True)


def test_listener_survives_a_redis_restart(own_redis: RedisServer) -> None:
    """The listener's connection dies with a Redis restart; it reconnects and re-subscribes, and
    the next waiter is woken by the release's message again (retry delay 20 s: its next poll
    would come 10 s later at the earliest)."""
    admin = redis.Redis.from_url(own_redis.url)
    with (
        LeaseManager.from_url(own_redis.url, prefix="h") as holder_side,
        LeaseManager.from_url(own_redis.url, prefix="h") as waiter_side,
    ):
        assert holder_side.acquire("restart", ttl_ms=10_000).lease is not None
        assert waiter_side.acquire("restart", wait_ms=50, retry_delay_ms=10).lease is None
        own_redis.restart()
        holder = holder_side.acquire("restart", ttl_ms=10_000).lease
        assert holder is not None
        waiter = _Waiter(
            waiter_side, "restart", ttl_ms=10_000, wait_ms=60_000, retry_delay_ms=20_000
        )
        waiter.start()
        wait_until(lambda: _queued(admin, "restart") == 1, "one waiter queued for 'restart'")
        released_at = time.monotonic()
        assert holder.release() is True
        waiter.join()
        assert waiter.result is not None
        assert waiter.result.lease is not None
        assert waiter.held_at - released_at < 5.0
        assert waiter_side._release_waiter.notified >= 1  # type: ignore[attr-defined]
    admin.close()


def test_asyncio_queueing_that_fails_after_the_wait_gave_up_is_not_left_unretrieved(
    redis_url: str,
) -> None:
    """The wait gives up while its queueing command is still out; when that command then fails
    (a BackendError, e.g. a socket timeout), the failure is moot and nothing reports a task
    exception that was never retrieved (it used to, from the asyncio workers of the check)."""
    from fencedlease import BackendError

    async def scenario() -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        reported: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, context: reported.append(context))
        client = redis.asyncio.Redis.from_url(redis_url)
        handoff = AsyncHandoff(client, "h")
        started, fail = asyncio.Event(), asyncio.Event()

        async def stalled_enqueue(*_args: object) -> bool:
            started.set()
            await fail.wait()
            raise BackendError("wait for 'gone': Timeout reading from socket")

        handoff._enqueue = stalled_enqueue  # type: ignore[method-assign,assignment]
        await handoff.wait(WaitRequest("gone", new_owner_token(), 10_000, 1.0))
        assert started.is_set()  # the queueing was sent, and the wait gave up on it
        fail.set()
        while handoff._chores._tasks:
            await asyncio.sleep(0)
        gc.collect()
        await handoff.aclose()
        await client.aclose()
        return reported

    assert asyncio.run(scenario()) == []


@pytest.fixture
def monitor(redis_client: redis.Redis) -> Iterator[Any]:
    """A pub/sub connection that hears every hand-off channel of prefix ``h``."""
    pubsub = redis_client.pubsub()  # type: ignore[no-untyped-call, unused-ignore]
    pubsub.psubscribe("h:*:handoff*")
    assert pubsub.get_message(timeout=5.0)["type"] == "psubscribe"
    yield pubsub
    pubsub.close()


def _next_grant(monitor: Any) -> tuple[str, str]:
    """(channel, data) of the next hand-off message the monitor hears."""
    message = monitor.get_message(timeout=10.0)
    assert message is not None and message["type"] == "pmessage"
    return message["channel"].decode(), message["data"].decode()


def _heard(monitor: Any) -> tuple[str, str, int, int, str | None]:
    """The next hand-off message as (channel, waiter name, fencing token, px, primary id): the
    grant it carries, every field checked by the listener's parser."""
    channel, data = _next_grant(monitor)
    name, grant = parse_grant(data)
    assert grant is not None, data
    return channel, name, grant.fencing_token, grant.ttl_ms, grant.primary_id


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
            threading.Thread(target=h.wait, args=(WaitRequest("k", owner, 10_000, 30.0),))
            for h, owner in zip(handoffs, owners, strict=True)
        ]
        threads[0].start()
        wait_until(lambda: _queued(redis_client, "k") == 1, "one waiter queued for 'k'")
        threads[1].start()
        wait_until(lambda: _queued(redis_client, "k") == 2, "two waiters queued for 'k'")
        mine = [h._channel("k") for h in handoffs]
        assert mine[0] != mine[1] and _handoff_channels(redis_client, "k") == set(mine)
        assert dict(redis_client.pubsub_numsub(*mine)) == {c.encode(): 1 for c in mine}

        assert holder.release() is True
        channel, name, token, px, primary = _heard(monitor)
        assert (channel, name, token, primary) == (mine[0], waiter_name(owners[0]), 2, None)
        assert 0 < px <= 30_000 + 200 * 2  # a claimed grant: PX cut to its deadline plus grace
        threads[0].join(10.0)
        assert not threads[0].is_alive() and threads[1].is_alive()
        assert (handoffs[0].notified, handoffs[1].notified) == (1, 0)
        assert redis_client.get(lease_keys("h", "k")[0]) == f"2:{owners[0]}".encode()

        backend = holder_leases.backend
        assert backend.release("k", owners[0]) is True
        channel, name, token, px, primary = _heard(monitor)
        assert (channel, name, token, primary) == (mine[1], waiter_name(owners[1]), 3, None)
        assert 0 < px <= 10_000
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
            first = asyncio.create_task(handoffs[0].wait(WaitRequest("k", owners[0], 10_000, 30.0)))
            await asyncio.to_thread(
                wait_until, lambda: _queued(redis_client, "k") == 1, "one waiter queued for 'k'"
            )
            second = asyncio.create_task(
                handoffs[1].wait(WaitRequest("k", owners[1], 10_000, 30.0))
            )
            await asyncio.to_thread(
                wait_until, lambda: _queued(redis_client, "k") == 2, "two waiters queued for 'k'"
            )
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
    name, carried = parse_grant(grant[1])
    assert (grant[0], name) == (mine[0], waiter_name(owners[0]))
    assert carried is not None and carried.fencing_token == 2 and carried.primary_id is None
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
    assert isinstance(meta, bytes) and meta.count(b":") == 2  # the three fields alone
    assert run_script(redis_client, RELEASE, keys, ("holder",)) == 1
    assert _heard(monitor) == (handoff_channel("h", "k"), waiter_name("waiter"), 1, 5_000, None)
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
    channel = handoff_channel("h", "k", listener)
    assert _heard(monitor) == (channel, waiter_name("waiter"), 1, 5_000, None)
    assert redis_client.get(keys[0]) == b"1:waiter"
