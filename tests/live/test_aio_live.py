"""The asyncio face on a real Redis: the failure cases, tasks sharing a manager, cancellation at
every await point of acquire, renew and release (down into redis-py), and a clean close."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio
from redis.asyncio.connection import Connection as AsyncConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from conftest import async_wait_until, wait_until
from fencedlease import BackendError, LeaseLostError, LeaseManager, LeaseNotAcquiredError
from fencedlease._core.state import LossReason
from fencedlease._redis.scripts import ACQUIRE
from fencedlease.aio import AsyncLease, AsyncLeaseManager
from fencedlease.aio.testing import cancel_at_suspension
from fencedlease.testing import FakeClock
from fencedlease_lab.servers.redis import RedisServer

pytestmark = pytest.mark.live

T = TypeVar("T")


def run(coro_fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """asyncio.run, failing if any task but the test's own is still pending at its end."""

    async def main() -> T:
        result = await coro_fn()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert others == [], f"tasks left behind: {others}"
        return result

    return asyncio.run(main())


async def outcome(awaitable: Any) -> Any:
    """Run ``awaitable`` in a task of its own: its result, or the exception it ended with."""

    async def wrap() -> Any:
        return await awaitable

    task = asyncio.ensure_future(wrap())
    await asyncio.wait({task})
    if task.cancelled():
        return asyncio.CancelledError()
    return task.exception() or task.result()


def _expire_now(client: redis.Redis, key: str) -> None:
    client.pexpire(key, 1)
    wait_until(lambda: client.pttl(key) == -2, f"Redis to expire {key}")


def _connections(client: redis.Redis, name: str) -> int:
    return sum(1 for c in client.client_list() if c.get("name") == name)


# -- the documented semantics on a real server -------------------------------------------------


def test_racing_connections_one_winner(redis_url: str, redis_client: redis.Redis) -> None:
    """16 managers on their own connections race for one free key: exactly one wins, token 1."""

    async def main() -> None:
        managers = [AsyncLeaseManager.from_url(redis_url, prefix="t") for _ in range(16)]
        results = await asyncio.gather(*(m.acquire("race", ttl_ms=10_000) for m in managers))
        tokens = sorted((r.lease.fencing_token or -1) if r.lease else 0 for r in results)
        assert tokens == [0] * 15 + [1]
        for m in managers:
            await m.close()

    run(main)


def test_tokens_strictly_increase_over_1000_cycles(
    redis_url: str, redis_client: redis.Redis, decode_responses: bool
) -> None:
    """1,000 acquire/release cycles give tokens 1..1000 in order (both reply decodings)."""

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_url, decode_responses=decode_responses)
        async with AsyncLeaseManager(client, prefix="t") as leases:
            tokens = []
            for _ in range(1_000):
                lease = (await leases.acquire("cycle", ttl_ms=5_000)).lease
                assert lease is not None
                tokens.append(lease.fencing_token)
                assert await lease.release() is True
            assert tokens == list(range(1, 1_001))
        await client.aclose()

    run(main)


def test_held_up_release_leaves_the_new_holder_alone(
    redis_url: str, redis_client: redis.Redis, decode_responses: bool
) -> None:
    """A (ttl 200 ms) expires, B acquires, A's late release and renew say False: B's key, token
    and TTL are untouched."""

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_url, decode_responses=decode_responses)
        async with AsyncLeaseManager(client, prefix="t") as leases:
            a = (await leases.acquire("exp", ttl_ms=200)).lease
            assert a is not None
            _expire_now(redis_client, "t:{exp}")
            b = (await leases.acquire("exp", ttl_ms=10_000)).lease
            assert b is not None
            assert (a.fencing_token, b.fencing_token) == (1, 2)
            assert await a.release() is False
            assert await a.renew() is False
            assert a.lost is True
            info = await leases.inspect("exp")
            assert info is not None
            assert (info.fencing_token, info.owner_fingerprint) == (2, b.owner_fingerprint)
            assert info.ttl_ms > 9_000
            assert await b.release() is True
        await client.aclose()

    run(main)


def test_renew_and_release_after_expiry_return_false(
    redis_url: str, redis_client: redis.Redis, decode_responses: bool
) -> None:
    """An expired lease's renew and release say False; renew never recreates the key."""

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_url, decode_responses=decode_responses)
        async with AsyncLeaseManager(client, prefix="t") as leases:
            lease = (await leases.acquire("gone", ttl_ms=200)).lease
            assert lease is not None
            _expire_now(redis_client, "t:{gone}")
            assert await lease.renew() is False
            assert redis_client.pttl("t:{gone}") == -2
            assert await lease.release() is False
        await client.aclose()

    run(main)


def test_two_tasks_share_a_manager(redis_url: str, redis_client: redis.Redis) -> None:
    """Task 1's lease expires and task 2 acquires; task 1 releases: False, and task 2's
    lease (token, owner, TTL) is untouched."""

    async def main() -> None:
        async with AsyncLeaseManager.from_url(redis_url, prefix="t") as leases:
            expired, acquired = asyncio.Event(), asyncio.Event()
            held: dict[str, AsyncLease] = {}
            released: list[bool] = []

            async def task1() -> None:
                lease = (await leases.acquire("shared", ttl_ms=200)).lease
                assert lease is not None
                held["1"] = lease
                await async_wait_until(
                    lambda: redis_client.pttl("t:{shared}") == -2, "Redis to expire t:{shared}"
                )
                expired.set()
                await acquired.wait()
                released.append(await lease.release())

            async def task2() -> None:
                await expired.wait()
                lease = (await leases.acquire("shared", ttl_ms=10_000)).lease
                assert lease is not None
                held["2"] = lease
                acquired.set()

            await asyncio.gather(task1(), task2())
            assert released == [False]
            assert (held["1"].fencing_token, held["2"].fencing_token) == (1, 2)
            info = await leases.inspect("shared")
            assert info is not None
            assert (info.fencing_token, info.owner_fingerprint) == (2, held["2"].owner_fingerprint)
            assert info.ttl_ms > 9_000
            assert await held["2"].release() is True

    run(main)


def test_bounded_wait_on_a_held_key(redis_url: str, redis_client: redis.Redis) -> None:
    """hold(wait_ms=200) on a key another owner holds: LeaseNotAcquiredError after its 200 ms,
    not before, and never a retry delay (5 s, 2.5 s at the least with jitter) past it; the body
    never runs."""

    async def main() -> None:
        async with AsyncLeaseManager.from_url(redis_url, prefix="t") as leases:
            assert await leases.acquire("busy", ttl_ms=10_000)
            ran = []
            started = time.monotonic()
            with pytest.raises(LeaseNotAcquiredError) as info:
                async with leases.hold("busy", wait_ms=200, retry_delay_ms=5_000):
                    ran.append(True)
            elapsed = time.monotonic() - started
            assert ran == []
            assert (info.value.key, info.value.status_code) == ("busy", 409)
            assert 0.2 <= elapsed < 2.5

    run(main)


def test_waiter_gets_the_lease_when_the_holder_releases(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """A waiter with wait_ms acquires once the holder releases, with the next token."""

    async def main() -> None:
        async with AsyncLeaseManager.from_url(redis_url, prefix="t") as leases:
            holder = (await leases.acquire("handoff", ttl_ms=10_000)).lease
            assert holder is not None
            waiter = asyncio.create_task(
                leases.acquire("handoff", ttl_ms=10_000, wait_ms=3_000, retry_delay_ms=10)
            )
            await asyncio.sleep(0.02)
            assert await holder.release() is True
            result = await waiter
            assert result.lease is not None
            assert result.lease.fencing_token == 2

    run(main)


class _LossyConnection(AsyncConnection):
    """Drops the reply of the first acquire it carries: the command ran, the caller never hears."""

    dropped = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        # every command goes out here, packed by redis-py or by the library
        parts: list[bytes] = [command] if isinstance(command, bytes) else list(command)
        self._is_acquire = any(
            isinstance(part, bytes)
            and any(s.encode() in part for s in (ACQUIRE.sha, ACQUIRE.source))
            for part in parts
        )
        await super().send_packed_command(parts, check_health)

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        response = await super().read_response(*args, **kwargs)
        if getattr(self, "_is_acquire", False) and _LossyConnection.dropped == 0:
            _LossyConnection.dropped += 1
            await self.disconnect()
            raise redis.ConnectionError("reply lost on the way back")
        return response


def test_lost_acquire_reply_is_retried_with_the_same_owner(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """The acquire reply is lost and the same acquire is sent again: one INCR, the same token,
    and the caller holds the lease (not 'not acquired')."""

    async def main() -> None:
        _LossyConnection.dropped = 0
        pool = redis.asyncio.ConnectionPool.from_url(redis_url, connection_class=_LossyConnection)
        client = redis.asyncio.Redis(connection_pool=pool, retry=Retry(NoBackoff(), 0))
        async with AsyncLeaseManager(client, prefix="t") as leases:
            result = await leases.acquire("lost-reply", ttl_ms=10_000)
            assert _LossyConnection.dropped == 1
            assert result.lease is not None
            assert result.lease.fencing_token == 1
            assert redis_client.get("t:{lost-reply}:fence") == b"1"
            assert await result.lease.release() is True
        await client.aclose()

    run(main)


def test_script_flush_everywhere(redis_url: str, redis_client: redis.Redis) -> None:
    """SCRIPT FLUSH before acquire, during a hold's renewals, and before release: all succeed,
    and no renewal fails."""

    async def main() -> None:
        errors: list[BaseException] = []
        async with AsyncLeaseManager.from_url(redis_url, prefix="t") as leases:
            redis_client.script_flush()
            async with leases.hold(
                "flush", ttl_ms=300, heartbeat_ms=50, on_renew_error=errors.append
            ) as lease:
                trips = leases.renewer.round_trips
                redis_client.script_flush()
                await async_wait_until(
                    lambda: leases.renewer.round_trips >= trips + 3,
                    "three more renewal round trips",
                )
                redis_client.script_flush()
            assert lease.lost is False
            assert redis_client.pttl("t:{flush}") == -2
            redis_client.script_flush()
            assert await leases.inspect("flush") is None
            assert await leases.force_release("flush") is False
        assert errors == []

    run(main)


def test_redis_down_before_acquire(own_redis: RedisServer) -> None:
    """Redis stopped: BackendError with redis-py's ConnectionError as cause; with_lease never
    calls fn."""

    async def main() -> None:
        leases = AsyncLeaseManager.from_url(own_redis.url, prefix="t", socket_connect_timeout=1)
        own_redis.stop()
        with pytest.raises(BackendError) as info:
            await leases.acquire("down", ttl_ms=1_000)
        assert isinstance(info.value.__cause__, redis.ConnectionError)

        async def fn(lease: AsyncLease) -> None:
            pytest.fail("fn ran")

        with pytest.raises(BackendError):
            await leases.with_lease("down", fn, ttl_ms=1_000)
        await leases.close()

    run(main)


def test_connection_reset_during_hold_is_survived(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """One connection reset (CLIENT KILL) during a 3 s hold with ttl 1 s: the renewal task
    reconnects and the hold completes without loss."""

    async def main() -> None:
        async with AsyncLeaseManager.from_url(redis_url, prefix="t") as leases:
            started = time.monotonic()
            async with leases.hold("reset", ttl_ms=1_000) as lease:
                await async_wait_until(
                    lambda: leases.renewer.round_trips >= 1, "a first renewal round trip"
                )
                killed = redis_client.client_kill_filter(_type="normal", skipme=True)
                assert killed >= 1
                await async_wait_until(
                    lambda: leases.renewer.round_trips >= 6, "six renewal round trips", timeout_s=5
                )
                await asyncio.sleep(max(0.0, 3.0 - (time.monotonic() - started)))
                assert lease.lost is False
            assert lease.lost is False
            assert redis_client.pttl("t:{reset}") == -2

    run(main)


def test_client_pause_longer_than_ttl_is_a_loss(redis_url: str, redis_client: redis.Redis) -> None:
    """CLIENT PAUSE 6 s during a hold with ttl 1 s: the body is cancelled at the deadline (ttl +
    one heartbeat of the last renewal, 1.25 s), long before the hung round trip comes back with
    the pause's end, and hold raises LeaseLostError."""

    async def main() -> None:
        async with AsyncLeaseManager.from_url(redis_url, prefix="t") as leases:
            noticed: list[float] = []
            with pytest.raises(LeaseLostError) as info:
                async with leases.hold("pause", ttl_ms=1_000):
                    await async_wait_until(
                        lambda: leases.renewer.round_trips >= 1, "a first renewal round trip"
                    )
                    paused_at = time.monotonic()
                    redis_client.execute_command("CLIENT", "PAUSE", 6_000, "ALL")  # type: ignore[no-untyped-call]
                    try:
                        await asyncio.sleep(5.5)
                    except asyncio.CancelledError:
                        noticed.append(time.monotonic() - paused_at)
                        raise
            assert len(noticed) == 1
            assert noticed[0] < 5.0
            assert info.value.key == "pause"
            assert LossReason.DEADLINE in str(info.value)

    started = time.monotonic()
    try:
        run(main)
    finally:  # the next test must not find the server paused: wait for the pause's own end
        time.sleep(max(0.0, started + 6.5 - time.monotonic()))


def test_lease_lost_even_if_the_body_returns(redis_url: str, redis_client: redis.Redis) -> None:
    """An operator deletes the key mid-body and the body swallows the cancellation and returns:
    hold still raises LeaseLostError. The TTL is 10 s: the renewal, not the deadline, finds the
    loss."""

    async def main() -> None:
        async with AsyncLeaseManager.from_url(redis_url, prefix="t") as leases:
            with pytest.raises(LeaseLostError) as info:
                async with leases.hold("del", ttl_ms=10_000, heartbeat_ms=50) as lease:
                    redis_client.delete("t:{del}")
                    with contextlib.suppress(asyncio.CancelledError):  # swallowed
                        await asyncio.sleep(8)
                    assert lease.lost is True
            assert LossReason.RENEW_REFUSED in str(info.value)

    run(main)


def test_blocked_holder_is_not_silently_reacquired(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """A holds (ttl 300, heartbeat 100) and blocks its event loop 500 ms; B acquires and releases
    in the gap; A ends lost (LeaseLostError) and the key stays free, counter at 2."""

    async def main() -> None:
        b_done = threading.Event()
        b_token: list[int | None] = []

        def b() -> None:
            with LeaseManager.from_url(redis_url, prefix="t") as other:
                give_up = time.monotonic() + 5
                while redis_client.pttl("t:{blocked}") != -2 and time.monotonic() < give_up:
                    time.sleep(0.005)
                lease = other.acquire("blocked", ttl_ms=10_000).lease
                assert lease is not None
                b_token.append(lease.fencing_token)
                assert lease.release() is True
            b_done.set()

        async with AsyncLeaseManager.from_url(redis_url, prefix="t") as leases:
            with pytest.raises(LeaseLostError):
                async with leases.hold("blocked", ttl_ms=300, heartbeat_ms=100) as lease:
                    assert lease.fencing_token == 1
                    threading.Thread(target=b).start()
                    started = time.monotonic()
                    assert b_done.wait(5)  # blocks the loop: no renewal can run
                    time.sleep(max(0.0, 0.5 - (time.monotonic() - started)))
                    await asyncio.sleep(1)  # the renewal task runs now, and finds the loss
        assert b_token == [2]
        assert redis_client.pttl("t:{blocked}") == -2
        assert redis_client.get("t:{blocked}:fence") == b"2"

    run(main)


def test_release_deletes_and_renewal_stops(own_redis: RedisServer) -> None:
    """After a hold ends the key is gone (PTTL -2) and no renewal is sent for it again. A batch
    already on its way when the hold ended may still reach Redis; the count starts once every
    batch sent has come back."""

    async def main() -> None:
        client = redis.Redis.from_url(own_redis.url)
        async with AsyncLeaseManager.from_url(own_redis.url, prefix="t") as leases:
            renew_many = leases.backend.renew_many
            landed = 0

            async def spy(items: Any) -> list[int | BaseException]:
                nonlocal landed
                try:
                    return await renew_many(items)
                finally:
                    landed += 1

            leases.backend.renew_many = spy  # type: ignore[method-assign]
            async with leases.hold("stop", ttl_ms=5_000, heartbeat_ms=20) as lease:
                await async_wait_until(
                    lambda: leases.renewer.round_trips >= 3, "three renewal round trips"
                )
                assert lease.lost is False
            assert client.pttl("t:{stop}") == -2
            await async_wait_until(
                lambda: landed == leases.renewer.round_trips,
                "every renewal round trip to land",
                timeout_s=30,
            )
            calls = client.info("commandstats")["cmdstat_evalsha"]["calls"]
            trips = leases.renewer.round_trips
            await asyncio.sleep(0.2)  # ten heartbeats: an absence is only seen over a window
            assert client.info("commandstats")["cmdstat_evalsha"]["calls"] == calls
            assert leases.renewer.round_trips == trips
            assert len(leases.renewer) == 0
        client.close()

    run(main)


def test_acquire_and_release_are_two_commands(own_redis: RedisServer) -> None:
    """acquire + release cost exactly two Redis commands, both EVALSHA."""

    async def main() -> None:
        client = redis.Redis.from_url(own_redis.url)
        async with AsyncLeaseManager.from_url(own_redis.url, prefix="t") as leases:
            warm = (await leases.acquire("warm", ttl_ms=1_000)).lease
            assert warm is not None
            assert await warm.release()
            client.config_resetstat()
            lease = (await leases.acquire("count", ttl_ms=1_000)).lease
            assert lease is not None
            assert await lease.release()
            stats = client.info("commandstats")
            counted = {
                name: stat["calls"]
                for name, stat in stats.items()
                if name in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_script", "cmdstat_set")
            }
            assert counted == {"cmdstat_evalsha": 2, "cmdstat_set": 1}
        client.close()

    run(main)


def test_renewals_are_batched_in_one_pipeline(own_redis: RedisServer) -> None:
    """200 holds, renew_batch_size 50, heartbeat 500 ms: each heartbeat's renewals go out as
    ceil(200 / 50) = 4 pipelines of 50, not a round trip per lease, and nothing is sent between
    heartbeats; three heartbeats, 12 batches. A fake clock steps the heartbeats, so the count
    does not depend on how fast a loaded machine runs the loop."""

    async def main() -> None:
        clock = FakeClock()
        pool = redis.asyncio.BlockingConnectionPool.from_url(own_redis.url, max_connections=20)
        client = redis.asyncio.Redis(connection_pool=pool)
        batches: list[tuple[int, int]] = []  # (fake ms when sent, size)
        landed = 0
        async with AsyncLeaseManager(
            client, prefix="t", renew_batch_size=50, clock=clock
        ) as leases:
            backend = leases.backend
            renew_many = backend.renew_many

            async def spy(items: Any) -> list[int | BaseException]:
                nonlocal landed
                batches.append((clock.elapsed_ms, len(items)))
                replies = await renew_many(items)
                landed += 1
                return replies

            backend.renew_many = spy  # type: ignore[method-assign]
            go, stop = asyncio.Event(), asyncio.Event()
            held = 0

            async def holder(i: int) -> None:
                nonlocal held
                # ttl 60 s: Redis expires keys on real time, which a loaded machine stretches
                async with leases.hold(f"k{i}", ttl_ms=60_000, heartbeat_ms=500) as lease:
                    held += 1
                    if held == 200:
                        go.set()
                    await stop.wait()
                    assert lease.lost is False

            tasks = [asyncio.create_task(holder(i)) for i in range(200)]
            await asyncio.wait_for(go.wait(), 60)
            for _ in range(20):  # the renewal task looks at the clock: nothing is due yet
                await asyncio.sleep(0)
            assert batches == []
            for beat in (1, 2, 3):
                clock.advance(500)
                leases.renewer.wake()
                await async_wait_until(
                    lambda: landed == 4 * beat,  # noqa: B023
                    f"the renewals of heartbeat {beat} to land",
                    timeout_s=60,
                )
                for _ in range(20):  # the heartbeat's renewals are all out: the task rests
                    await asyncio.sleep(0)
                assert len(batches) == 4 * beat
            stop.set()
            await asyncio.gather(*tasks)
        await client.aclose()
        assert batches == [(500, 50)] * 4 + [(1_000, 50)] * 4 + [(1_500, 50)] * 4

    run(main)


# -- cancellation ------------------------------------------------------------------------------


def test_wait_for_firing_mid_acquire(redis_url: str, redis_client: redis.Redis) -> None:
    """asyncio.wait_for(acquire(k), 0.001), 300 times: afterwards the key is either free or
    held by the lease the caller got back."""

    async def main() -> None:
        async with AsyncLeaseManager.from_url(redis_url, prefix="t") as leases:
            got, timed_out = 0, 0
            for _ in range(300):
                try:
                    result = await asyncio.wait_for(leases.acquire("wf", ttl_ms=60_000), 0.001)
                except asyncio.TimeoutError:
                    timed_out += 1
                    assert redis_client.get("t:{wf}") is None
                    continue
                got += 1
                lease = result.lease
                assert lease is not None
                info = await leases.inspect("wf")
                assert info is not None
                assert info.owner_fingerprint == lease.owner_fingerprint
                assert await lease.release() is True
            assert got + timed_out == 300

    run(main)


def _fresh_manager(redis_url: str, name: str) -> AsyncLeaseManager:
    return AsyncLeaseManager.from_url(redis_url, prefix="t", client_name=name)


# On Python 3.11 a cancellation can be swallowed inside redis-py: it wraps socket writes in
# asyncio.wait_for, which returns the result instead of raising when the cancel and the write's
# completion meet (CPython gh-86296, fixed in 3.12). The call then completes normally, and the
# tests below accept that, as long as the caller holds what the call returned.


def _check_propagated(cancelled: int, fired: int) -> None:
    """Every cancel raised CancelledError (3.12+); on 3.11 at least those at connect and read."""
    if sys.version_info >= (3, 12):
        assert cancelled == fired
    else:
        assert cancelled >= 2


def test_acquire_cancelled_at_every_await_point(redis_url: str, redis_client: redis.Redis) -> None:
    """For n = 1, 2, ...: a fresh client's acquire is cancelled at its n-th suspension (connect,
    handshake, send, read, inside redis-py). Each time the key ends free with CancelledError
    raised, or held by the lease the call returned; never held by nobody."""

    async def main() -> None:
        n, cancelled = 0, 0
        while True:
            n += 1
            name = f"fl-{uuid.uuid4().hex[:8]}"
            leases = _fresh_manager(redis_url, name)
            call = cancel_at_suspension(leases.acquire("cx", ttl_ms=60_000), n)
            result = await outcome(call)
            if isinstance(result, asyncio.CancelledError):
                cancelled += 1
                assert redis_client.get("t:{cx}") is None, f"held after a cancel at {n}"
            else:
                assert result.lease is not None
                info = await leases.inspect("cx")
                assert info is not None
                assert info.owner_fingerprint == result.lease.owner_fingerprint
                assert await result.lease.release() is True
            await leases.close()
            # The server drops a closed connection from CLIENT LIST when it reads the FIN: wait
            # for that, not for a time (a leaked connection never leaves, and fails this).
            await async_wait_until(
                lambda: _connections(redis_client, name) == 0,  # noqa: B023
                f"no connection named {name} in CLIENT LIST",
                timeout_s=10,
            )
            if not call.fired:
                break
        assert n > 3  # connecting, sending and reading were each interrupted
        _check_propagated(cancelled, n - 1)

    run(main)


def test_renew_cancelled_at_every_await_point(redis_url: str, redis_client: redis.Redis) -> None:
    """A renew() (on a fresh connection) cancelled at each of its suspensions: CancelledError and
    nothing changed locally, or the renewal's answer; the lease is never lost and the next
    renew() works."""

    async def main() -> None:
        n, cancelled = 0, 0
        async with AsyncLeaseManager.from_url(redis_url, prefix="t") as leases:
            lease = (await leases.acquire("rx", ttl_ms=60_000)).lease
            assert lease is not None
            while True:
                n += 1
                await leases.backend.client.connection_pool.disconnect()  # type: ignore[attr-defined]
                deadline = lease._state.deadline
                call = cancel_at_suspension(lease.renew(), n)
                result = await outcome(call)
                if isinstance(result, asyncio.CancelledError):
                    cancelled += 1
                    assert lease._state.deadline == deadline
                else:
                    assert result is True
                assert lease.lost is False
                assert await lease.renew() is True
                if not call.fired:
                    break
            assert await lease.release() is True
        assert n > 3
        _check_propagated(cancelled, n - 1)

    run(main)


def test_release_cancelled_at_every_await_point(redis_url: str, redis_client: redis.Redis) -> None:
    """A release() cancelled at each of its suspensions keeps the owner token: releasing again
    answers True if the first had not reached Redis, False if it had, and the key ends free."""

    async def main() -> None:
        n, answers = 0, []
        async with AsyncLeaseManager.from_url(redis_url, prefix="t") as leases:
            while True:
                n += 1
                lease = (await leases.acquire("lx", ttl_ms=60_000)).lease
                assert lease is not None
                token = lease.owner_token
                await leases.backend.client.connection_pool.disconnect()  # type: ignore[attr-defined]
                call = cancel_at_suspension(lease.release(), n)
                result = await outcome(call)
                if isinstance(result, asyncio.CancelledError):
                    assert lease.owner_token == token
                    still_held = redis_client.get("t:{lx}") is not None
                    assert await lease.release() is still_held
                    answers.append(still_held)
                else:
                    assert result is True
                assert redis_client.get("t:{lx}") is None
                if not call.fired:
                    break
        assert n > 3
        assert answers[0] is True  # cancelled before anything was sent: retrying releases it

    run(main)


def test_hold_cancelled_while_acquiring_never_leaves_the_key_held(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """A with_lease cancelled at each suspension (acquire, body, release): it ends in
    CancelledError or a finished outcome, and the key is free afterwards every time."""

    async def main() -> None:
        n = 0
        while True:
            n += 1
            leases = _fresh_manager(redis_url, f"fl-{uuid.uuid4().hex[:8]}")

            async def body(lease: AsyncLease) -> int | None:
                await asyncio.sleep(0)
                return lease.fencing_token

            call = cancel_at_suspension(leases.with_lease("hx", body, ttl_ms=60_000), n)
            result = await outcome(call)
            await leases.close()
            assert isinstance(result, asyncio.CancelledError) or result.acquired is True
            assert redis_client.get("t:{hx}") is None, f"held after a cancel at {n}"
            if not call.fired:
                break
        assert n > 5

    run(main)


# -- close ---------------------------------------------------------------------------------------


def test_close_leaves_no_task_and_no_connection(redis_url: str, redis_client: redis.Redis) -> None:
    """After close(): no task of ours is pending (asyncio.all_tasks) and the server lists no
    connection of ours (CLIENT LIST by client name), with holds, a waiter and a cancelled acquire
    in the mix."""

    async def main() -> None:
        name = f"fl-{uuid.uuid4().hex[:8]}"
        leases = _fresh_manager(redis_url, name)
        entered = asyncio.Event()

        async def holder(key: str) -> None:
            async with leases.hold(key, ttl_ms=1_000, heartbeat_ms=50):
                entered.set()
                await asyncio.Event().wait()

        holders = [asyncio.create_task(holder(f"h{i}")) for i in range(5)]
        await entered.wait()
        await async_wait_until(lambda: leases.renewer.round_trips >= 2, "two renewal round trips")
        assert await leases.acquire("h0", ttl_ms=1_000, wait_ms=10) is not None
        assert _connections(redis_client, name) >= 1
        assert any(t.get_name() == "fencedlease-renewer" for t in asyncio.all_tasks())
        await leases.close()
        results = await asyncio.gather(*holders, return_exceptions=True)
        assert all(isinstance(r, LeaseLostError) for r in results), results
        mine = [t for t in asyncio.all_tasks() if t.get_name().startswith("fencedlease")]
        assert mine == []
        await async_wait_until(
            lambda: _connections(redis_client, name) == 0,
            f"no connection named {name} in CLIENT LIST",
            timeout_s=2,
        )
        assert [redis_client.get(f"t:{{h{i}}}") for i in range(5)] == [None] * 5

    run(main)


_CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    from datetime import datetime
    from fencedlease.aio import AsyncLeaseManager

    async def main(url, step):
        async with AsyncLeaseManager.from_url(url, prefix="t") as leases:
            if step == "acquire":
                lease = (await leases.acquire("restore", ttl_ms=60_000)).lease
                print(json.dumps({"owner": lease.owner_token, "token": lease.fencing_token,
                                  "expires_at": lease.expires_at.isoformat()}))
            else:
                saved = json.loads(sys.stdin.read())
                lease = leases.restore("restore", saved["owner"], ttl_ms=60_000,
                                       expires_at=datetime.fromisoformat(saved["expires_at"]),
                                       fencing_token=saved["token"])
                print(json.dumps({"lost": lease.lost, "renew": await lease.renew(),
                                  "token": lease.fencing_token, "release": await lease.release()}))

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


def test_restore_across_two_processes(redis_url: str, redis_client: redis.Redis) -> None:
    """One process acquires and persists; a later process restores, renews and releases."""
    first = subprocess.run(
        [sys.executable, "-c", _CHILD, redis_url, "acquire"],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    saved = json.loads(first.stdout)
    second = subprocess.run(
        [sys.executable, "-c", _CHILD, redis_url, "restore"],
        input=first.stdout, capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    assert json.loads(second.stdout) == {
        "lost": False,
        "renew": True,
        "token": saved["token"],
        "release": True,
    }
    assert redis_client.pttl("t:{restore}") == -2
