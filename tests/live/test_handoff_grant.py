"""The grant carried in the hand-off message, on a real Redis (both faces): a woken waiter takes the
lease from the message with no claim round trip, its deadline never later than the key's real
expiry; a waiter whose deadline would leave less than two heartbeats claims as before; a lost
message still ends in a grant by polling; backends that need the claim (``replica_acks``) keep it.

The release runs in one transaction with a ``PTTL`` of the key, so the PTTL is read at the
release's own instant: the key's real expiry is the transaction's send time plus that PTTL at the
earliest (it ran no earlier than it was sent).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from conftest import wait_until
from fencedlease import AcquireResult, LeaseManager
from fencedlease._core.protocol import AcquireReply
from fencedlease._redis.keys import lease_keys, waiters_key, waiters_meta_key
from fencedlease._redis.scripts import ACQUIRE, RELEASE
from fencedlease._sync.scripts import run_script
from fencedlease.aio import AsyncLeaseManager
from fencedlease.testing import FakeClock

pytestmark = pytest.mark.live

PREFIX = "hg"


def _queued(client: redis.Redis, key: str) -> bool:
    return int(client.zcard(waiters_key(PREFIX, key))) == 1


def _empty(client: redis.Redis, key: str) -> bool:
    return int(client.zcard(waiters_key(PREFIX, key))) == 0


def _scripts_run(client: redis.Redis) -> int:
    """How many EVAL and EVALSHA commands the server has run (every lease script is one)."""
    stats = client.info("commandstats")
    return sum(
        int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("eval", "evalsha")
    )


def _release_with_pttl(client: redis.Redis, key: str, owner_token: str) -> tuple[float, int]:
    """Release ``key`` (release.lua by EVAL) and read its PTTL in the same transaction: the
    monotonic send time of the transaction, and the PTTL the grant's SET left."""
    pipe = client.pipeline(transaction=True)
    pipe.eval(RELEASE.source, 4, *lease_keys(PREFIX, key), owner_token)
    pipe.pttl(lease_keys(PREFIX, key)[0])
    sent = time.monotonic()
    released, pttl = pipe.execute()
    assert released == 1
    return sent, int(pttl)


class _CountingAcquires:
    """Wraps a backend's ``acquire`` (sync or asyncio) to count the calls the manager makes."""

    def __init__(self, backend: Any) -> None:
        self.calls = 0
        self.queueing: list[tuple[str, ...]] = []  # the queueing arguments each acquire carried
        inner = backend.acquire
        if asyncio.iscoroutinefunction(inner):

            async def counted_async(
                key: str, owner_token: str, ttl_ms: int, *queue: Any
            ) -> AcquireReply:
                self.calls += 1
                self.queueing.append(tuple(*queue))
                reply: AcquireReply = await inner(key, owner_token, ttl_ms, *queue)
                return reply

            backend.acquire = counted_async
        else:

            def counted(key: str, owner_token: str, ttl_ms: int, *queue: Any) -> AcquireReply:
                self.calls += 1
                self.queueing.append(tuple(*queue))
                reply: AcquireReply = inner(key, owner_token, ttl_ms, *queue)
                return reply

            backend.acquire = counted


@pytest.fixture
def admin(redis_client: redis.Redis) -> redis.Redis:
    return redis_client


@pytest.fixture
def holder_side(redis_url: str) -> Iterator[LeaseManager]:
    with LeaseManager.from_url(redis_url, prefix=PREFIX) as leases:
        yield leases


def _hold(leases: LeaseManager, key: str) -> str:
    lease = leases.acquire(key, ttl_ms=10_000).lease
    assert lease is not None and lease.fencing_token == 1
    return lease.owner_token


def _subscribed(handoff: Any, key: str) -> bool:
    """Whether the manager's listener has its SUBSCRIBE to ``key``'s channel confirmed (a
    refused acquire queues itself only then)."""
    return handoff._channel(key) in handoff._channels.confirmed


class _Waiter(threading.Thread):
    def __init__(self, leases: LeaseManager, key: str, **kwargs: Any) -> None:
        super().__init__()
        self.leases, self.key, self.kwargs = leases, key, kwargs
        self.result: AcquireResult | None = None

    def run(self) -> None:
        self.result = self.leases.acquire(self.key, **self.kwargs)


def test_sync_waiter_takes_the_grant_from_the_message(
    redis_url: str, admin: redis.Redis, holder_side: LeaseManager
) -> None:
    """The release hands the key to the queued waiter (token 2, PX its whole ttl_ms of 10 s) and
    the waiter holds it by the message alone: its manager sent one acquire (the refused one) and
    Redis ran no script after the release; the lease's deadline is no later than the key's real
    expiry, and a renewal and the release work on it."""
    owner = _hold(holder_side, "direct")
    with LeaseManager.from_url(redis_url, prefix=PREFIX) as leases:
        acquires = _CountingAcquires(leases.backend)
        waiter = _Waiter(leases, "direct", ttl_ms=10_000, wait_ms=60_000, retry_delay_ms=20_000)
        waiter.start()
        wait_until(lambda: _queued(admin, "direct"), "a waiter queued for 'direct'")
        scripts = _scripts_run(admin)
        sent, pttl = _release_with_pttl(admin, "direct", owner)
        waiter.join()
        assert _scripts_run(admin) - scripts == 1  # the release: no claim
        assert acquires.calls == 1
        assert leases._release_waiter.notified == 1  # type: ignore[attr-defined]
        assert waiter.result is not None and waiter.result.lease is not None
        lease = waiter.result.lease
        assert lease.fencing_token == 2
        assert 9_900 < pttl <= 10_000  # the whole ttl_ms (the transaction's own time aside)
        assert lease._state.deadline is not None
        assert lease._state.deadline <= sent + pttl / 1000
        assert admin.get(lease_keys(PREFIX, "direct")[0]) == f"2:{lease.owner_token}".encode()
        assert lease.renew() is True
        assert lease.release() is True
    assert admin.pttl(lease_keys(PREFIX, "direct")[0]) == -2


def test_asyncio_waiter_takes_the_grant_from_the_message(
    redis_url: str, admin: redis.Redis, holder_side: LeaseManager
) -> None:
    """The asyncio twin: one acquire sent (the refused one), no script after the release, token
    2, the deadline no later than the key's real expiry."""
    owner = _hold(holder_side, "direct-aio")

    async def scenario() -> tuple[int | None, int, int, float, int, int]:
        async with AsyncLeaseManager.from_url(redis_url, prefix=PREFIX) as leases:
            acquires = _CountingAcquires(leases.backend)
            task = asyncio.create_task(
                leases.acquire("direct-aio", ttl_ms=10_000, wait_ms=60_000, retry_delay_ms=20_000)
            )
            await asyncio.to_thread(
                wait_until, lambda: _queued(admin, "direct-aio"), "a waiter queued for 'direct-aio'"
            )
            scripts = _scripts_run(admin)
            sent, pttl = await asyncio.to_thread(_release_with_pttl, admin, "direct-aio", owner)
            result = await task
            ran = _scripts_run(admin) - scripts
            notified = leases._release_waiter.notified  # type: ignore[attr-defined]
            assert result.lease is not None
            state = result.lease._state
            assert state.deadline is not None
            key_value = admin.get(lease_keys(PREFIX, "direct-aio")[0])
            assert key_value == f"2:{result.lease.owner_token}".encode()
            assert await result.lease.release() is True
            token = result.lease.fencing_token
            return token, acquires.calls, ran, state.deadline - sent, pttl, notified

    token, calls, ran, deadline_after_send, pttl, notified = asyncio.run(scenario())
    assert (token, calls, ran, notified) == (2, 1, 1, 1)
    assert 9_900 < pttl <= 10_000  # the whole ttl_ms (the transaction's own time aside)
    assert deadline_after_send <= pttl / 1000


def test_sync_waiter_after_a_long_wait_claims(
    redis_url: str, admin: redis.Redis, holder_side: LeaseManager
) -> None:
    """On a fake clock moved 6 s past the waiter's queueing, a grant of 10 s leaves 4 s, less than
    two heartbeats (2 x 2.5 s): the waiter claims the grant with a second acquire ("already
    ours", no new token) and its deadline counts from that claim's send."""
    owner = _hold(holder_side, "long")
    clock = FakeClock()
    with LeaseManager.from_url(redis_url, prefix=PREFIX, clock=clock) as leases:
        acquires = _CountingAcquires(leases.backend)
        waiter = _Waiter(leases, "long", ttl_ms=10_000, wait_ms=60_000, retry_delay_ms=20_000)
        waiter.start()
        wait_until(lambda: _queued(admin, "long"), "a waiter queued for 'long'")
        clock.advance(6_000)
        _release_with_pttl(admin, "long", owner)
        waiter.join()
        assert acquires.calls == 2
        assert waiter.result is not None and waiter.result.lease is not None
        lease = waiter.result.lease
        assert lease.fencing_token == 2
        assert lease._state.deadline == clock.monotonic() + 10.0
        assert lease.release() is True


def test_asyncio_waiter_after_a_long_wait_claims(
    redis_url: str, admin: redis.Redis, holder_side: LeaseManager
) -> None:
    """The asyncio twin: 6 s of a fake clock after queueing, the grant is claimed (two acquires),
    token 2, the deadline from the claim's send."""
    owner = _hold(holder_side, "long-aio")
    clock = FakeClock()

    async def scenario() -> tuple[int, int | None, float | None, float]:
        async with AsyncLeaseManager.from_url(redis_url, prefix=PREFIX, clock=clock) as leases:
            acquires = _CountingAcquires(leases.backend)
            task = asyncio.create_task(
                leases.acquire("long-aio", ttl_ms=10_000, wait_ms=60_000, retry_delay_ms=20_000)
            )
            await asyncio.to_thread(
                wait_until, lambda: _queued(admin, "long-aio"), "a waiter queued for 'long-aio'"
            )
            clock.advance(6_000)
            await asyncio.to_thread(_release_with_pttl, admin, "long-aio", owner)
            result = await task
            assert result.lease is not None
            token, deadline = result.lease.fencing_token, result.lease._state.deadline
            assert await result.lease.release() is True
            return acquires.calls, token, deadline, clock.monotonic()

    calls, token, deadline, now = asyncio.run(scenario())
    assert (calls, token) == (2, 2)
    assert deadline == now + 10.0


def test_a_hold_with_a_long_heartbeat_claims(
    redis_url: str, admin: redis.Redis, holder_side: LeaseManager
) -> None:
    """hold(heartbeat_ms=5000) on ttl_ms=10000: two heartbeats are the whole TTL, which a grant
    counted from the queueing can never leave, so the waiter claims (two acquires)."""
    owner = _hold(holder_side, "beat")
    with LeaseManager.from_url(redis_url, prefix=PREFIX) as leases:
        acquires = _CountingAcquires(leases.backend)
        held: list[int | None] = []

        def hold() -> None:
            with leases.hold(
                "beat", ttl_ms=10_000, wait_ms=60_000, retry_delay_ms=20_000, heartbeat_ms=5_000
            ) as lease:
                held.append(lease.fencing_token)

        thread = threading.Thread(target=hold)
        thread.start()
        wait_until(lambda: _queued(admin, "beat"), "a waiter queued for 'beat'")
        _release_with_pttl(admin, "beat", owner)
        thread.join()
        assert (held, acquires.calls) == ([2], 2)


def test_lost_message_ends_in_a_grant_by_polling(
    redis_url: str, admin: redis.Redis, holder_side: LeaseManager
) -> None:
    """The listener's connection is killed in the release's transaction: no message arrives, and
    the waiter's next poll (retry delay 0.5 s) claims the grant (two acquires, token 2)."""
    owner = _hold(holder_side, "lost")
    with LeaseManager.from_url(redis_url, prefix=PREFIX) as leases:
        acquires = _CountingAcquires(leases.backend)
        waiter = _Waiter(leases, "lost", ttl_ms=10_000, wait_ms=60_000, retry_delay_ms=500)
        waiter.start()
        wait_until(lambda: _queued(admin, "lost"), "a waiter queued for 'lost'")
        pipe = admin.pipeline(transaction=True)
        pipe.client_kill_filter(_type="pubsub")
        pipe.eval(RELEASE.source, 4, *lease_keys(PREFIX, "lost"), owner)
        assert pipe.execute()[1] == 1
        waiter.join()
        assert waiter.result is not None and waiter.result.lease is not None
        assert waiter.result.lease.fencing_token == 2
        assert acquires.calls >= 2
        assert leases._release_waiter.notified == 0  # type: ignore[attr-defined]
        assert waiter.result.lease.release() is True


def test_replica_acks_keeps_the_claim(
    redis_url: str, admin: redis.Redis, holder_side: LeaseManager
) -> None:
    """With replica_acks the claim's WAIT acknowledges the grant, so the waiter queues without
    'direct': the release cuts the PX to the waiter's deadline plus grace (not its whole 10 s
    ttl_ms), publishes no primary id, and the waiter claims (two acquires). With no replica the
    claim is refused (ReplicationError) and the key is released again."""
    from fencedlease import ReplicationError

    owner = _hold(holder_side, "acks")
    leases = LeaseManager(
        redis.Redis.from_url(redis_url), prefix=PREFIX, replica_acks=1, replica_ack_timeout_ms=1
    )
    try:
        acquires = _CountingAcquires(leases.backend)
        errors: list[BaseException] = []

        def acquire() -> None:
            try:
                leases.acquire("acks", ttl_ms=10_000, wait_ms=1_000, retry_delay_ms=20_000)
            except ReplicationError as exc:
                errors.append(exc)

        thread = threading.Thread(target=acquire)
        thread.start()
        wait_until(lambda: _queued(admin, "acks"), "a waiter queued for 'acks'")
        _, pttl = _release_with_pttl(admin, "acks", owner)
        thread.join()
        assert 0 < pttl <= 1_000 + 2 * 200
        assert acquires.calls >= 2
        assert len(errors) == 1
    finally:
        leases.close()


def _details(client: redis.Redis, key: str, owner_token: Any) -> list[str]:
    value = client.hget(waiters_meta_key(PREFIX, key), owner_token)
    assert isinstance(value, bytes)
    return value.decode().split(":")


class _CountingEnqueues:
    """Wraps a hand-off's queueing command (``enqueue.lua``) to count the calls."""

    def __init__(self, handoff: Any) -> None:
        self.calls = 0
        inner = handoff._enqueue
        if asyncio.iscoroutinefunction(inner):

            async def counted_async(*args: Any) -> bool:
                self.calls += 1
                queued: bool = await inner(*args)
                return queued

            handoff._enqueue = counted_async
        else:

            def counted(*args: Any) -> bool:
                self.calls += 1
                queued: bool = inner(*args)
                return queued

            handoff._enqueue = counted


def test_sync_refused_acquire_queues_the_waiter_itself(
    redis_url: str, admin: redis.Redis, holder_side: LeaseManager
) -> None:
    """Once its listener is subscribed to the key's channel (a first short wait), a waiting
    acquire that is refused queues itself in the same script: it carried the queueing
    arguments, its queue entry is the direct one, and no queueing command (enqueue.lua) was sent
    for the wait; the release's grant then reaches it by the message (one acquire in all)."""
    owner = _hold(holder_side, "queued")
    with LeaseManager.from_url(redis_url, prefix=PREFIX) as leases:
        assert leases.acquire("queued", wait_ms=50, retry_delay_ms=10).lease is None
        wait_until(
            lambda: _empty(admin, "queued"), "the queue for 'queued' to be empty"
        )  # that acquire left the queue
        handoff = leases._release_waiter
        # its SUBSCRIBE may still be unconfirmed when that short acquire gave up: wait for it
        wait_until(
            lambda: _subscribed(handoff, "queued"),
            "the listener's SUBSCRIBE to the channel of 'queued' to be confirmed",
        )
        enqueues = _CountingEnqueues(handoff)
        acquires = _CountingAcquires(leases.backend)
        waiter = _Waiter(leases, "queued", ttl_ms=10_000, wait_ms=60_000, retry_delay_ms=20_000)
        waiter.start()
        wait_until(lambda: _queued(admin, "queued"), "a waiter queued for 'queued'")
        [(wait_ms, grace_ms, listener, flag)] = acquires.queueing
        assert 10_000 <= int(wait_ms) <= 30_000 and (grace_ms, flag) == ("200", "direct")
        assert listener == handoff._listener  # type: ignore[attr-defined]
        [entry] = admin.zrange(waiters_key(PREFIX, "queued"), 0, -1)
        details = _details(admin, "queued", entry)
        assert details[1:] == ["10000", "200", listener, "direct"]
        sent, pttl = _release_with_pttl(admin, "queued", owner)
        waiter.join()
        assert (acquires.calls, enqueues.calls) == (1, 0)
        assert waiter.result is not None and waiter.result.lease is not None
        lease = waiter.result.lease
        assert lease.fencing_token == 2 and 9_900 < pttl <= 10_000
        assert lease._state.deadline is not None and lease._state.deadline <= sent + pttl / 1000
        assert lease.release() is True


def test_asyncio_refused_acquire_queues_the_waiter_itself(
    redis_url: str, admin: redis.Redis, holder_side: LeaseManager
) -> None:
    """The asyncio twin: the refused acquire queued the waiter (direct entry), no enqueue.lua
    was sent, and the grant came by the message (one acquire)."""
    owner = _hold(holder_side, "queued-aio")

    async def scenario() -> tuple[list[tuple[str, ...]], int, int, list[str], int | None]:
        async with AsyncLeaseManager.from_url(redis_url, prefix=PREFIX) as leases:
            assert (await leases.acquire("queued-aio", wait_ms=50, retry_delay_ms=10)).lease is None
            await asyncio.to_thread(
                wait_until,
                lambda: _empty(admin, "queued-aio"),
                "the queue for 'queued-aio' to be empty",
            )
            while not _subscribed(leases._release_waiter, "queued-aio"):  # see the sync test
                await asyncio.sleep(0.002)
            enqueues = _CountingEnqueues(leases._release_waiter)
            acquires = _CountingAcquires(leases.backend)
            task = asyncio.create_task(
                leases.acquire("queued-aio", ttl_ms=10_000, wait_ms=60_000, retry_delay_ms=20_000)
            )
            await asyncio.to_thread(
                wait_until, lambda: _queued(admin, "queued-aio"), "a waiter queued for 'queued-aio'"
            )
            [entry] = admin.zrange(waiters_key(PREFIX, "queued-aio"), 0, -1)
            details = _details(admin, "queued-aio", entry)
            await asyncio.to_thread(_release_with_pttl, admin, "queued-aio", owner)
            result = await task
            assert result.lease is not None
            token = result.lease.fencing_token
            assert await result.lease.release() is True
            return acquires.queueing, acquires.calls, enqueues.calls, details, token

    queueing, calls, enqueued, details, token = asyncio.run(scenario())
    assert [q[1:2] + q[3:] for q in queueing] == [("200", "direct")]
    assert (calls, enqueued, token) == (1, 0, 2)
    assert details[1:3] == ["10000", "200"] and details[4] == "direct"


def test_acquire_queueing_arguments_are_checked_before_any_write(admin: redis.Redis) -> None:
    """acquire.lua's queueing arguments: a bad one is an error reply naming it, with nothing
    written; on a free key the caller is granted and not queued; on a held key with a waiter
    queue of another type the refusal is an error, with nothing written."""
    keys = lease_keys(PREFIX, "args")
    queue = waiters_key(PREFIX, "args")
    admin.set(keys[0], "1:holder", px=60_000)
    for bad, words in (
        (("x", "200", "ab", "direct"), r"ARGV\[5\] must be an integer"),
        (("100", "-1", "ab", "direct"), r"ARGV\[6\] must be an integer"),
        (("100", "200", "AB", ""), r"ARGV\[7\] must be 1\.\.32 lowercase hex"),
        (("100", "200", "", "direct"), r"ARGV\[8\] must be 'direct' \(with a listener id\)"),
        (("100", "200", "ab", "claim"), r"ARGV\[8\] must be 'direct'"),
    ):
        with pytest.raises(redis.ResponseError, match=words):
            run_script(admin, ACQUIRE, keys, ("w", 5_000, "counter", "", *bad))
    assert admin.exists(queue, waiters_meta_key(PREFIX, "args")) == 0
    reply = run_script(admin, ACQUIRE, keys, ("w", 5_000, "counter", "", "100", "200", "ab", ""))
    assert reply[:3] == [0, 0, reply[2]] and 0 < reply[2] <= 60_000
    assert _details(admin, "args", "w")[1:] == ["5000", "200", "ab"]
    assert 0 < admin.pttl(queue) <= 100 + 2 * 200
    admin.delete(keys[0], queue, waiters_meta_key(PREFIX, "args"))
    reply = run_script(admin, ACQUIRE, keys, ("w", 5_000, "counter", "", "100", "200", "ab", ""))
    assert reply[:3] == [1, b"1", 5_000]
    assert admin.exists(queue, waiters_meta_key(PREFIX, "args")) == 0
    admin.set(keys[0], "1:holder", px=60_000)
    admin.set(queue, "not a queue")
    with pytest.raises(redis.ResponseError, match=r"waiter queue .* hold a string, not a zset"):
        run_script(admin, ACQUIRE, keys, ("w", 5_000, "counter", "", "100", "200", "ab", ""))
    assert admin.exists(waiters_meta_key(PREFIX, "args")) == 0
    assert admin.get(queue) == b"not a queue"


def test_clock_fencing_grant_from_the_message_carries_the_stored_token(
    redis_url: str, admin: redis.Redis
) -> None:
    """fencing="clock": the release's grant token is max(counter + 1, Redis TIME in us); the
    waiter taking it from the message holds exactly the token the key stores (above the
    holder's, and a microsecond clock reading), with one acquire sent."""
    with (
        LeaseManager.from_url(redis_url, prefix=PREFIX, fencing="clock") as holder_side,
        LeaseManager.from_url(redis_url, prefix=PREFIX, fencing="clock") as leases,
    ):
        held = holder_side.acquire("clock", ttl_ms=10_000).lease
        assert held is not None and held.fencing_token is not None
        acquires = _CountingAcquires(leases.backend)
        waiter = _Waiter(leases, "clock", ttl_ms=10_000, wait_ms=60_000, retry_delay_ms=20_000)
        waiter.start()
        wait_until(lambda: _queued(admin, "clock"), "a waiter queued for 'clock'")
        assert held.release() is True
        waiter.join()
        assert waiter.result is not None and waiter.result.lease is not None
        lease = waiter.result.lease
        stored = admin.get(lease_keys(PREFIX, "clock")[0])
        assert stored == f"{lease.fencing_token}:{lease.owner_token}".encode()
        assert lease.fencing_token is not None and lease.fencing_token > held.fencing_token
        assert lease.fencing_token > 10**15 and acquires.calls == 1
        assert lease.release() is True


def test_asyncio_lost_message_ends_in_a_grant_by_polling(
    redis_url: str, admin: redis.Redis, holder_side: LeaseManager
) -> None:
    """The asyncio twin: the listener's connection is killed in the release's transaction, no
    message arrives, and the waiter's next poll (retry delay 0.5 s) claims the grant (token 2,
    a second acquire), well before its 60 s budget ends."""
    owner = _hold(holder_side, "lost-aio")

    async def scenario() -> tuple[int | None, int, int]:
        async with AsyncLeaseManager.from_url(redis_url, prefix=PREFIX) as leases:
            acquires = _CountingAcquires(leases.backend)
            task = asyncio.create_task(
                leases.acquire("lost-aio", ttl_ms=10_000, wait_ms=60_000, retry_delay_ms=500)
            )
            await asyncio.to_thread(
                wait_until, lambda: _queued(admin, "lost-aio"), "a waiter queued for 'lost-aio'"
            )

            def release_unheard() -> None:
                pipe = admin.pipeline(transaction=True)
                pipe.client_kill_filter(_type="pubsub")
                pipe.eval(RELEASE.source, 4, *lease_keys(PREFIX, "lost-aio"), owner)
                assert pipe.execute()[1] == 1

            await asyncio.to_thread(release_unheard)
            result = await task
            assert result.lease is not None
            token = result.lease.fencing_token
            assert await result.lease.release() is True
            notified: int = leases._release_waiter.notified  # type: ignore[attr-defined]
            return token, acquires.calls, notified

    token, calls, notified = asyncio.run(scenario())
    assert (token, notified) == (2, 0) and calls >= 2


@pytest.mark.parametrize("face", ["sync", "asyncio"])
def test_a_closed_managers_waiter_gets_no_whole_ttl_grant(
    redis_url: str, admin: redis.Redis, holder_side: LeaseManager, face: str
) -> None:
    """A manager closed while its caller waited leaves a queue entry behind (until its deadline,
    the wait plus grace); the release that finds it sees no listener on the waiter's channel
    (PUBSUB NUMSUB), so the dead waiter gets the short PX of a claiming waiter (at most its wait
    plus twice the grace: 1.5 x 2 s + 2 x 0.2 s), not its whole ttl_ms of 60 s: the key is free
    again soon."""
    key = f"closed-{face}"
    owner = _hold(holder_side, key)
    args: dict[str, Any] = {"ttl_ms": 60_000, "wait_ms": 10_000, "retry_delay_ms": 2_000}
    errors: list[BaseException] = []
    if face == "sync":
        leases = LeaseManager.from_url(redis_url, prefix=PREFIX)

        def wait() -> None:
            try:
                leases.acquire(key, **args)
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=wait)
        thread.start()
        wait_until(lambda: _queued(admin, key), f"a waiter queued for {key!r}")
        leases.close()
        thread.join()
    else:

        async def main() -> None:
            async with AsyncLeaseManager.from_url(redis_url, prefix=PREFIX) as aleases:
                task = asyncio.create_task(aleases.acquire(key, **args))
                while not _queued(admin, key):
                    await asyncio.sleep(0.002)
                await aleases.close()
                try:
                    await task
                except BaseException as exc:
                    errors.append(exc)

        asyncio.run(main())
    assert [type(e).__name__ for e in errors] == ["ManagerClosedError"]
    assert _queued(admin, key)  # the entry outlives the manager until its deadline
    _, pttl = _release_with_pttl(admin, key, owner)
    assert 0 < pttl <= 3_400
    assert str(admin.get(lease_keys(PREFIX, key)[0])).startswith("b'2:")


def test_a_message_granting_more_than_asked_is_not_taken(
    redis_url: str, admin: redis.Redis, holder_side: LeaseManager
) -> None:
    """A message whose PX exceeds the ttl_ms the waiter asked for is no release's (a release
    never grants more): the waiter asks Redis instead, which says the key is still held, and
    ends without a lease; the forged token never reaches it."""
    import hashlib

    _hold(holder_side, "forged")
    with LeaseManager.from_url(redis_url, prefix=PREFIX) as leases:
        waiter = _Waiter(leases, "forged", ttl_ms=2_000, wait_ms=1_500, retry_delay_ms=10_000)
        waiter.start()
        wait_until(lambda: _queued(admin, "forged"), "a waiter queued for 'forged'")
        (member,) = admin.zrange(waiters_key(PREFIX, "forged"), 0, -1)
        assert isinstance(member, bytes)
        name = hashlib.sha1(member).hexdigest()
        channels = admin.pubsub_channels(f"{PREFIX}:{{forged}}:handoff:*")
        assert len(channels) == 1
        assert admin.publish(channels[0], f"{name}:999999:600000") == 1
        waiter.join()
    assert waiter.result is not None
    assert waiter.result.acquired is False and waiter.result.lease is None
