"""Renewal timing and the pool on a real Redis: a slow round trip is no loss, a release waiting
for a connection is no loss, and a waiting acquire never pins the caller's pool."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
import redis.asyncio

from fencedlease import LeaseManager
from fencedlease._redis.keys import lease_key
from fencedlease._redis.pool import connection_args
from fencedlease._redis.scripts import ACQUIRE, ENQUEUE, RELEASE, RENEW, RENEW_MANY
from fencedlease.aio import AsyncLease, AsyncLeaseManager
from fencedlease_lab.servers.redis import RedisEndpoint
from fencedlease_lab.servers.toxiproxy import toxiproxy_endpoint

pytestmark = pytest.mark.live

# The timing scaled so that a renewal's slack (ttl - heartbeat - round trip) is 300 ms: room for a
# renewer thread a busy machine wakes late, while each argument below (a deadline counted from a
# reply, a connection's handshake) still loses the lease.
LATENCY_MS = 600
TTL_MS = 1_800
HEARTBEAT_MS = 900


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def slow_url(redis_ep: RedisEndpoint, redis_client: redis.Redis) -> Iterator[tuple[str, Any]]:
    """A URL to the test Redis through a Toxiproxy proxy, and the proxy (no toxic yet). The
    scripts are loaded beforehand: a first EVALSHA answered NOSCRIPT costs a second round trip,
    which is script loading, not renewal timing."""
    for script in (ACQUIRE, RENEW, RENEW_MANY, RELEASE, ENQUEUE):
        assert redis_client.script_load(script.source) == script.sha
    yield from _proxied(redis_ep)


@pytest.fixture
def cold_url(redis_ep: RedisEndpoint, redis_client: redis.Redis) -> Iterator[tuple[str, Any]]:
    """:func:`slow_url` with Redis's script cache empty: the first EVALSHA of each script is
    answered NOSCRIPT, as on a fresh server."""
    redis_client.script_flush()
    assert redis_client.script_exists(ACQUIRE.sha, RENEW_MANY.sha, RELEASE.sha) == [False] * 3
    yield from _proxied(redis_ep)


def _proxied(redis_ep: RedisEndpoint) -> Iterator[tuple[str, Any]]:
    parts = urlsplit(redis_ep.url)
    upstream = f"{parts.hostname}:{parts.port or 6379}"
    with toxiproxy_endpoint(sources=("embedded",)) as endpoint:
        client = endpoint.client()
        port = _free_port()
        proxy = client.create(upstream=upstream, name="timing", listen=f"127.0.0.1:{port}")
        try:
            yield f"redis://127.0.0.1:{port}/{parts.path.lstrip('/') or 0}", proxy
        finally:
            proxy.destroy()


def _add_latency(proxy: Any) -> None:
    """Every reply is held ``LATENCY_MS``: a round trip of 600 ms."""
    proxy.add_toxic(type="latency", name="slow", attributes={"latency": LATENCY_MS, "jitter": 0})


def _holder(client: redis.Redis, key: str) -> bytes | None:
    """The lease key's value (``<fencing token>:<owner token>``), read around the proxy."""
    value = client.get(lease_key("t", key))
    return value if isinstance(value, bytes) else None


def test_slow_round_trip_is_no_loss_sync(
    slow_url: tuple[str, Any], redis_client: redis.Redis
) -> None:
    """A 600 ms round trip, ttl 1800, heartbeat 900: the lease survives four TTLs and releases
    cleanly. The first renewal goes out one heartbeat after the acquire was sent; counted from
    its reply, its own reply would land after the deadline."""
    url, proxy = slow_url
    client = redis.Redis.from_url(url)
    # Connections are made before the latency: a new connection's handshake is several round
    # trips, which is connection setup, not renewal timing.
    warm = [
        client.connection_pool.get_connection(*connection_args(client.connection_pool))
        for _ in range(3)
    ]
    for connection in warm:
        client.connection_pool.release(connection)
    _add_latency(proxy)
    errors: list[BaseException] = []
    with LeaseManager(client, prefix="t") as leases:
        with leases.hold(
            "k", ttl_ms=TTL_MS, heartbeat_ms=HEARTBEAT_MS, on_renew_error=errors.append
        ) as lease:
            assert lease.wait_lost(timeout_ms=4 * TTL_MS) is False
            assert _holder(redis_client, "k") is not None
            trips = leases.renewer.round_trips
        assert lease._state.released
        assert not lease.lost
    client.close()
    assert errors == []
    assert trips >= 4 * TTL_MS // HEARTBEAT_MS - 2
    assert _holder(redis_client, "k") is None


def test_slow_round_trip_is_no_loss_asyncio(
    slow_url: tuple[str, Any], redis_client: redis.Redis
) -> None:
    """The same on the asyncio face (its renewer also abandons a batch at the earliest deadline
    in it, which must not happen either)."""
    url, proxy = slow_url

    async def main() -> tuple[bool, int, list[BaseException]]:
        client = redis.asyncio.Redis.from_url(url)
        pool = client.connection_pool
        warm = [await pool.get_connection(*connection_args(pool)) for _ in range(3)]  # type: ignore[no-untyped-call]
        for connection in warm:
            await client.connection_pool.release(connection)
        _add_latency(proxy)
        errors: list[BaseException] = []
        async with AsyncLeaseManager(client, prefix="t") as leases:
            async with leases.hold(
                "k", ttl_ms=TTL_MS, heartbeat_ms=HEARTBEAT_MS, on_renew_error=errors.append
            ) as lease:
                assert await lease.wait_lost(timeout_ms=4 * TTL_MS) is False
                assert _holder(redis_client, "k") is not None
                trips = leases.renewer.round_trips
            released = lease._state.released and not lease.lost
        await client.aclose()
        return released, trips, errors

    released, trips, errors = asyncio.run(main())
    assert released
    assert errors == []
    assert trips >= 4 * TTL_MS // HEARTBEAT_MS - 2
    assert _holder(redis_client, "k") is None


def test_cold_client_slow_round_trip_is_no_loss_sync(
    cold_url: tuple[str, Any], redis_client: redis.Redis
) -> None:
    """A new client (no connection yet) on a server without the scripts cached, 600 ms round trip,
    ttl 1800, heartbeat 900: the first hold survives four TTLs. Its acquire makes a connection
    (a TCP and a handshake round trip) and is answered NOSCRIPT before the EVAL that grants it;
    the deadline counts from that EVAL, so neither is taken from the lease's margin."""
    url, proxy = cold_url
    _add_latency(proxy)
    client = redis.Redis.from_url(url)
    errors: list[BaseException] = []
    with LeaseManager(client, prefix="t") as leases:
        with leases.hold(
            "k", ttl_ms=TTL_MS, heartbeat_ms=HEARTBEAT_MS, on_renew_error=errors.append
        ) as lease:
            assert not lease.lost
            # The acquire's EVAL fallback brought the renewal and release scripts along.
            cached = redis_client.script_exists(ACQUIRE.sha, RENEW_MANY.sha, RELEASE.sha)
            assert cached == [True] * 3
            assert lease.wait_lost(timeout_ms=4 * TTL_MS) is False
            assert _holder(redis_client, "k") is not None
        assert lease._state.released
        assert not lease.lost
    client.close()
    assert errors == []
    assert _holder(redis_client, "k") is None


def test_cold_client_slow_round_trip_is_no_loss_asyncio(
    cold_url: tuple[str, Any], redis_client: redis.Redis
) -> None:
    """The same on the asyncio face."""
    url, proxy = cold_url
    _add_latency(proxy)

    async def main() -> tuple[bool, list[bool], bool, list[BaseException]]:
        client = redis.asyncio.Redis.from_url(url)
        errors: list[BaseException] = []
        async with AsyncLeaseManager(client, prefix="t") as leases:
            async with leases.hold(
                "k", ttl_ms=TTL_MS, heartbeat_ms=HEARTBEAT_MS, on_renew_error=errors.append
            ) as lease:
                lost_at_entry = lease.lost
                cached = redis_client.script_exists(ACQUIRE.sha, RENEW_MANY.sha, RELEASE.sha)
                assert await lease.wait_lost(timeout_ms=4 * TTL_MS) is False
                assert _holder(redis_client, "k") is not None
            released = lease._state.released and not lease.lost
        await client.aclose()
        return lost_at_entry, cached, released, errors

    lost_at_entry, cached, released, errors = asyncio.run(main())
    assert lost_at_entry is False
    assert cached == [True] * 3
    assert released
    assert errors == []
    assert _holder(redis_client, "k") is None


STAGGERED = [(3, 450), (4, 225)]  # leases, ms between their acquires


@pytest.mark.parametrize(("count", "gap_ms"), STAGGERED)
def test_staggered_leases_at_a_slow_round_trip_are_no_loss_sync(
    slow_url: tuple[str, Any], redis_client: redis.Redis, count: int, gap_ms: int
) -> None:
    """Leases acquired ``gap_ms`` apart on warm connections, 600 ms round trip, ttl 1800,
    heartbeat 900: each comes due while another's batch is in flight, and none is lost. (With one
    batch in flight, a lease due just after a batch was sent waited a round trip for its reply,
    then another for its own, and its deadline passed although Redis had renewed it.)"""
    url, proxy = slow_url
    client = redis.Redis.from_url(url)
    warm = [
        client.connection_pool.get_connection(*connection_args(client.connection_pool))
        for _ in range(count + 3)
    ]
    for connection in warm:
        client.connection_pool.release(connection)
    _add_latency(proxy)
    errors: list[BaseException] = []
    outcomes: dict[str, tuple[bool, bool, bool]] = {}

    def hold(leases: LeaseManager, name: str, delay_s: float) -> None:
        time.sleep(delay_s)
        with leases.hold(
            name, ttl_ms=TTL_MS, heartbeat_ms=HEARTBEAT_MS, on_renew_error=errors.append
        ) as lease:
            survived = lease.wait_lost(timeout_ms=3 * TTL_MS) is False
            held = _holder(redis_client, name) is not None
        outcomes[name] = (survived, held, lease._state.released and not lease.lost)

    with LeaseManager(client, prefix="t") as leases:
        threads = [
            threading.Thread(target=hold, args=(leases, f"k{i}", i * gap_ms / 1000))
            for i in range(count)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    client.close()
    assert outcomes == {f"k{i}": (True, True, True) for i in range(count)}
    assert errors == []


@pytest.mark.parametrize(("count", "gap_ms"), STAGGERED)
def test_staggered_leases_at_a_slow_round_trip_are_no_loss_asyncio(
    slow_url: tuple[str, Any], redis_client: redis.Redis, count: int, gap_ms: int
) -> None:
    """The same on the asyncio face."""
    url, proxy = slow_url

    async def hold(
        leases: AsyncLeaseManager, name: str, delay_s: float, errors: list[BaseException]
    ) -> tuple[bool, bool, bool]:
        await asyncio.sleep(delay_s)
        async with leases.hold(
            name, ttl_ms=TTL_MS, heartbeat_ms=HEARTBEAT_MS, on_renew_error=errors.append
        ) as lease:
            survived = await lease.wait_lost(timeout_ms=3 * TTL_MS) is False
            held = _holder(redis_client, name) is not None
        return survived, held, lease._state.released and not lease.lost

    async def main() -> tuple[list[tuple[bool, bool, bool]], list[BaseException]]:
        client = redis.asyncio.Redis.from_url(url)
        pool = client.connection_pool
        warm = [await pool.get_connection(*connection_args(pool)) for _ in range(count + 3)]  # type: ignore[no-untyped-call]
        for connection in warm:
            await pool.release(connection)
        _add_latency(proxy)
        errors: list[BaseException] = []
        async with AsyncLeaseManager(client, prefix="t") as leases:
            outcomes = await asyncio.gather(
                *(hold(leases, f"a{i}", i * gap_ms / 1000, errors) for i in range(count))
            )
        await client.aclose()
        return list(outcomes), errors

    outcomes, errors = asyncio.run(main())
    assert outcomes == [(True, True, True)] * count
    assert errors == []


# -- a waiting acquire never pins the caller's pool ------------------------------------------------

WAIT_MS = 300
SLACK_S = 0.5  # scheduling on two loaded cores, far below the pool timeout a pinned pool costs
POOL_TIMEOUT_S = 3


def _round_trip_s(client: redis.Redis) -> float:
    """The slowest of five PINGs (seconds): the round trip the acquire's bound adds."""
    times = []
    for _ in range(5):
        started = time.monotonic()
        client.ping()
        times.append(time.monotonic() - started)
    return max(times)


@pytest.mark.parametrize("max_connections", [1, 2])
def test_waiting_never_pins_a_small_blocking_pool_sync(
    redis_url: str, redis_client: redis.Redis, max_connections: int
) -> None:
    """A blocking pool of one or two connections: acquire(wait_ms=300) on a held key returns,
    not acquired, within wait_ms plus one round trip (and scheduling slack), again with the
    hand-off listener running, and on a second key the listener must subscribe to; after the
    holder releases, the next acquires get the key. The listener's connection is not one of the
    pool's."""
    pool = redis.BlockingConnectionPool.from_url(
        redis_url, max_connections=max_connections, timeout=POOL_TIMEOUT_S
    )
    client = redis.Redis(connection_pool=pool)
    with LeaseManager(redis_client, prefix="t") as holder, LeaseManager(client, prefix="t") as me:
        held = holder.acquire("k", ttl_ms=30_000).lease
        other = holder.acquire("k2", ttl_ms=30_000).lease
        assert held is not None
        assert other is not None
        rtt = _round_trip_s(client)
        # "k" starts the listener; "k2" then asks the running listener for a new channel.
        for key in ("k", "k", "k2", "k2"):
            started = time.monotonic()
            result = me.acquire(key, ttl_ms=5_000, wait_ms=WAIT_MS)
            elapsed = time.monotonic() - started
            assert result.lease is None
            assert elapsed <= WAIT_MS / 1000 + rtt + SLACK_S, (key, elapsed)
        assert me._release_waiter.listening  # type: ignore[attr-defined]
        assert held.release() is True
        got = me.acquire("k", ttl_ms=5_000, wait_ms=WAIT_MS).lease
        assert got is not None
        assert got.fencing_token == held.fencing_token + 1  # type: ignore[operator]
        assert got.release() is True
        assert me.acquire("k", ttl_ms=5_000).lease is not None
    client.close()
    pool.disconnect()


@pytest.mark.parametrize("max_connections", [1, 2])
def test_waiting_never_pins_a_small_blocking_pool_asyncio(
    redis_url: str, redis_client: redis.Redis, max_connections: int
) -> None:
    """The same on the asyncio face, with ``redis.asyncio.BlockingConnectionPool``."""

    async def main() -> list[float]:
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            redis_url, max_connections=max_connections, timeout=POOL_TIMEOUT_S
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        waits: list[float] = []
        with LeaseManager(redis_client, prefix="t") as holder:
            held = holder.acquire("k", ttl_ms=30_000).lease
            other = holder.acquire("k2", ttl_ms=30_000).lease
            assert held is not None
            assert other is not None
            async with AsyncLeaseManager(client, prefix="t") as me:
                rtt = 0.0
                for _ in range(5):
                    started = time.monotonic()
                    await client.ping()
                    rtt = max(rtt, time.monotonic() - started)
                for key in ("k", "k", "k2", "k2"):
                    started = time.monotonic()
                    result = await me.acquire(key, ttl_ms=5_000, wait_ms=WAIT_MS)
                    waits.append(time.monotonic() - started - rtt)
                    assert result.lease is None
                assert held.release() is True
                got = (await me.acquire("k", ttl_ms=5_000, wait_ms=WAIT_MS)).lease
                assert got is not None
                assert got.fencing_token == held.fencing_token + 1  # type: ignore[operator]
                assert await got.release() is True
                assert (await me.acquire("k", ttl_ms=5_000)).lease is not None
        await client.aclose()
        await pool.disconnect()
        return waits

    waits = asyncio.run(main())
    assert all(wait <= WAIT_MS / 1000 + SLACK_S for wait in waits), waits


# -- a release waiting for a connection is not a loss ----------------------------------------------

RENEWALS_PAST_TTL = 6  # heartbeats of 150 ms: 900 ms, longer than the 600 ms TTL


def test_release_waiting_for_the_pool_past_the_ttl_is_no_loss_sync(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """A blocking pool of one connection, taken by someone else as the body ends and given back
    only after the renewer has renewed six more times (longer than the 600 ms TTL): the renewal
    goes on (on a connection of its own) while the release waits for the pool, so the release
    finds the key still held, and ``hold`` returns normally, the lease released, never lost."""
    pool = redis.BlockingConnectionPool.from_url(redis_url, max_connections=1, timeout=10)
    client = redis.Redis(connection_pool=pool)
    client.ping()
    renewed_meanwhile: list[int] = []
    with LeaseManager(client, prefix="t") as leases:
        with leases.hold("k", ttl_ms=600, heartbeat_ms=150) as lease:
            assert _holder(redis_client, "k") is not None
            busy = pool.get_connection(*connection_args(pool))  # type: ignore[no-untyped-call]
            trips = leases.renewer.round_trips

            def give_back() -> None:
                give_up = time.monotonic() + 10
                while leases.renewer.round_trips < trips + RENEWALS_PAST_TTL:
                    if time.monotonic() > give_up:
                        break
                    time.sleep(0.01)
                renewed_meanwhile.append(leases.renewer.round_trips - trips)
                pool.release(busy)  # type: ignore[no-untyped-call]

            thread = threading.Thread(target=give_back)
            thread.start()
        thread.join()
        assert (lease.lost, lease._state.released) == (False, True)
    client.close()
    assert renewed_meanwhile[0] >= RENEWALS_PAST_TTL
    assert _holder(redis_client, "k") is None


def test_release_waiting_for_the_pool_past_the_ttl_is_no_loss_asyncio(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """The same on the asyncio face: ``hold`` returns normally (no ``LeaseLostError``)."""

    async def main() -> tuple[int, bool, bool]:
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            redis_url, max_connections=1, timeout=10
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        await client.ping()
        renewed_meanwhile: list[int] = []
        async with AsyncLeaseManager(client, prefix="t") as leases:
            async with leases.hold("k", ttl_ms=600, heartbeat_ms=150) as lease:
                assert _holder(redis_client, "k") is not None
                busy = await pool.get_connection(*connection_args(pool))  # type: ignore[no-untyped-call]
                trips = leases.renewer.round_trips

                async def give_back() -> None:
                    give_up = time.monotonic() + 10
                    while leases.renewer.round_trips < trips + RENEWALS_PAST_TTL:
                        if time.monotonic() > give_up:
                            break
                        await asyncio.sleep(0.01)
                    renewed_meanwhile.append(leases.renewer.round_trips - trips)
                    await pool.release(busy)

                helper = asyncio.get_running_loop().create_task(give_back())
            await helper
        await client.aclose()
        await pool.disconnect()
        return renewed_meanwhile[0], lease.lost, lease._state.released

    renewed, lost, released = asyncio.run(main())
    assert renewed >= RENEWALS_PAST_TTL
    assert (lost, released) == (False, True)
    assert _holder(redis_client, "k") is None


def test_a_cleanup_release_waiting_for_the_pool_does_not_hold_renewals_back(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """The release that cleans up after an abandoned acquire runs in the background; waiting
    for the only connection of a blocking pool, it must not stall the renewal of a held lease
    (sync face: it has a thread of its own, not the renewer's I/O thread)."""
    pool = redis.BlockingConnectionPool.from_url(redis_url, max_connections=1, timeout=10)
    client = redis.Redis(connection_pool=pool)
    client.ping()
    with LeaseManager(client, prefix="t") as leases:
        with leases.hold("k", ttl_ms=600, heartbeat_ms=150) as lease:
            busy = pool.get_connection(*connection_args(pool))  # type: ignore[no-untyped-call]
            trips = leases.renewer.round_trips
            leases._clean_up("other", "an-abandoned-owner-token")
            give_up = time.monotonic() + 10
            while leases.renewer.round_trips < trips + RENEWALS_PAST_TTL:
                assert time.monotonic() < give_up, "renewals stalled"
                time.sleep(0.01)
            assert lease.lost is False
            pool.release(busy)  # type: ignore[no-untyped-call]
        assert (lease.lost, lease._state.released) == (False, True)
    client.close()


def test_close_while_a_release_waits_for_the_pool_is_no_loss_asyncio(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """The manager is closed while a hold's release waits for the only connection of a blocking
    pool (the lease still renewed): closing stops the renewal but does not mark the lease lost;
    the release's reply decides, and ``hold`` returns normally."""

    async def main() -> tuple[bool, bool, BaseException | None]:
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            redis_url, max_connections=1, timeout=10
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        await client.ping()
        leases = AsyncLeaseManager(client, prefix="t")
        exited = asyncio.Event()
        error: list[BaseException] = []

        async def holder() -> AsyncLease:
            try:
                async with leases.hold("k", ttl_ms=5_000, heartbeat_ms=1_000) as lease:
                    busy.append(await pool.get_connection(*connection_args(pool)))  # type: ignore[no-untyped-call]
                return lease
            except BaseException as exc:
                error.append(exc)
                raise
            finally:
                exited.set()

        busy: list[Any] = []
        task = asyncio.get_running_loop().create_task(holder())
        while not busy or len(leases.renewer) != 1 or not leases._chores:
            await asyncio.sleep(0.005)  # the body ended, its release waits for the pool
        closing = asyncio.get_running_loop().create_task(leases.close())
        while len(leases.renewer) != 0:
            await asyncio.sleep(0.005)  # the renewer has stopped
        await pool.release(busy[0])
        await closing
        await exited.wait()
        lease = task.result() if not error else None
        await client.aclose()
        await pool.disconnect()
        assert lease is not None, error
        return lease.lost, lease._state.released, error[0] if error else None

    lost, released, error = asyncio.run(main())
    assert (lost, released, error) == (False, True, None)
    assert _holder(redis_client, "k") is None


def test_close_while_a_release_waits_for_the_pool_is_no_loss_sync(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """The same on the sync face: another thread closes the manager while the hold's release
    waits for the pool's only connection."""
    pool = redis.BlockingConnectionPool.from_url(redis_url, max_connections=1, timeout=10)
    client = redis.Redis(connection_pool=pool)
    client.ping()
    leases = LeaseManager(client, prefix="t")
    busy: list[Any] = []
    outcome: list[BaseException | None] = []
    held: list[Any] = []

    def holder() -> None:
        try:
            with leases.hold("k", ttl_ms=5_000, heartbeat_ms=1_000) as lease:
                held.append(lease)
                busy.append(pool.get_connection(*connection_args(pool)))  # type: ignore[no-untyped-call]
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=holder)
    thread.start()
    give_up = time.monotonic() + 10
    while not (busy and held and held[0]._state.releasing):
        assert time.monotonic() < give_up
        time.sleep(0.005)  # the body ended, its release waits for the pool
    closing = threading.Thread(target=leases.close)
    closing.start()
    while len(leases.renewer) != 0:
        assert time.monotonic() < give_up
        time.sleep(0.005)  # the renewer has stopped
    pool.release(busy[0])  # type: ignore[no-untyped-call]
    closing.join()
    thread.join()
    client.close()
    assert outcome == [None]
    assert (held[0].lost, held[0]._state.released) == (False, True)
    assert _holder(redis_client, "k") is None


# -- the manager's own connections are closed with it --------------------------------------------


def _named(client: redis.Redis, name: str) -> int:
    return sum(1 for c in client.client_list() if c.get("name") == name)


def _until_none_named(client: redis.Redis, name: str) -> None:
    """Redis drops a closed connection from CLIENT LIST once it has read the close."""
    give_up = time.monotonic() + 5
    while _named(client, name):
        assert time.monotonic() < give_up, f"{_named(client, name)} connections left"
        time.sleep(0.01)


def test_renewal_and_listener_connections_close_with_the_manager_sync(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """With a blocking pool the renewer and the hand-off listener each have a connection of their
    own (same settings: same client name); closing the manager closes both, and once the caller
    closes its own pool no connection of that name is left."""
    name = "timing-close-sync"
    pool = redis.BlockingConnectionPool.from_url(
        redis_url, max_connections=2, timeout=5, client_name=name
    )
    client = redis.Redis(connection_pool=pool)
    with LeaseManager(redis_client, prefix="t") as holder, LeaseManager(client, prefix="t") as me:
        other = holder.acquire("busy", ttl_ms=30_000).lease
        assert other is not None
        assert me.acquire("busy", ttl_ms=5_000, wait_ms=100).lease is None  # starts the listener
        with me.hold("k", ttl_ms=600, heartbeat_ms=150):
            trips = me.renewer.round_trips
            give_up = time.monotonic() + 5
            while me.renewer.round_trips < trips + 2:
                assert time.monotonic() < give_up
                time.sleep(0.01)
            assert _named(redis_client, name) >= 3  # the pool's, the renewer's, the listener's
    pool.disconnect()
    _until_none_named(redis_client, name)


def test_renewal_and_listener_connections_close_with_the_manager_asyncio(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """The same on the asyncio face."""
    name = "timing-close-aio"

    async def main() -> None:
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            redis_url, max_connections=2, timeout=5, client_name=name
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        with LeaseManager(redis_client, prefix="t") as holder:
            other = holder.acquire("busy", ttl_ms=30_000).lease
            assert other is not None
            async with AsyncLeaseManager(client, prefix="t") as me:
                assert (await me.acquire("busy", ttl_ms=5_000, wait_ms=100)).lease is None
                async with me.hold("k", ttl_ms=600, heartbeat_ms=150):
                    trips = me.renewer.round_trips
                    give_up = time.monotonic() + 5
                    while me.renewer.round_trips < trips + 2:
                        assert time.monotonic() < give_up
                        await asyncio.sleep(0.01)
                    assert _named(redis_client, name) >= 3
        await client.aclose()
        await pool.disconnect()

    asyncio.run(main())
    _until_none_named(redis_client, name)
