"""Hand-off on a real Redis: waiters are woken by the release, served in arrival order, and fall
back to polling when a notification is lost."""

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

from fencedlease import AcquireResult, LeaseManager
from fencedlease._protocol import new_owner_token
from fencedlease._redis.keys import lease_keys, waiters_key, waiters_meta_key
from fencedlease._redis.scripts import RELEASE
from fencedlease.aio._handoff import AsyncHandoff
from fencedlease.lab.servers.redis import RedisServer

pytestmark = pytest.mark.live


def _wait_until(predicate: Any, timeout_s: float = 5.0) -> None:
    """Poll a condition the test cannot be told about by an event (a waiter queued in Redis)."""
    give_up = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > give_up:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)


class _Waiter(threading.Thread):
    """Acquires ``key`` with a bounded wait on its own manager; records when it got the lease."""

    def __init__(self, leases: LeaseManager, key: str, **kwargs: int) -> None:
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
    _wait_until(lambda: _queued(redis_client, "wake") == 1)
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
    _wait_until(lambda: _queued(redis_client, "fifo") == 1)
    second = _Waiter(managers[2], "fifo", ttl_ms=10_000, wait_ms=10_000, retry_delay_ms=2_000)
    second.start()
    _wait_until(lambda: _queued(redis_client, "fifo") == 2)
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
    _wait_until(lambda: _queued(redis_client, "lost") == 1)
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
    _wait_until(lambda: redis_client.exists(*names) == 2)
    for name in names:
        assert 0 < redis_client.pttl(name) <= 400 + 2 * 200
    waiter.join()
    _wait_until(lambda: redis_client.exists(*names) == 0)


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
        _wait_until(
            lambda: int(redis_client.pubsub_numpat()) == 0 and not _pubsub_clients(redis_client)
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
        _wait_until(lambda: _queued(redis_client, "aio") == 1)
        released_at.append(time.monotonic())
        assert holder.release() is True

    async def wait_for_it() -> tuple[float, int]:
        client = redis.asyncio.Redis.from_url(redis_url)
        handoff = AsyncHandoff(client, "h")
        thread = threading.Thread(target=release_when_queued)
        thread.start()
        await handoff.wait("aio", owner, 10_000, 20.0)
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
        _wait_until(lambda: _queued(admin, "restart") == 1)
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
        await handoff.wait("gone", new_owner_token(), 10_000, 1.0)
        assert started.is_set()  # the queueing was sent, and the wait gave up on it
        fail.set()
        while handoff._chores:
            await asyncio.sleep(0)
        gc.collect()
        await handoff.aclose()
        await client.aclose()
        return reported

    assert asyncio.run(scenario()) == []
