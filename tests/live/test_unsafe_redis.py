"""The library warns on its own about a Redis whose ``maxmemory-policy`` evicts keys: once per
backend (and cluster primary), on the first acquire the store answers or the first health check,
on both faces, over a plain server, Sentinel and Cluster; a server that refuses ``INFO`` is not
checked and nothing breaks.

Each test starts the servers it configures (``--maxmemory-policy`` on the command line), except
the cluster tests, which set one primary of the session's cluster and put it back.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import warnings
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio

from conftest import async_wait_until, url_password, wait_until
from fencedlease import LeaseManager, RedisBackend, UnsafeRedisWarning, acl_rules
from fencedlease.aio import AsyncLeaseManager, AsyncRedisBackend
from fencedlease_lab.servers.cluster import RedisClusterServers
from fencedlease_lab.servers.redis import RedisServer
from fencedlease_lab.servers.sentinel import SentinelDeployment

pytestmark = pytest.mark.live

T = TypeVar("T")

FIX = (
    "; set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in the"
    " server's configuration), or keep the library's keys on a Redis that evicts nothing"
)
ALLKEYS = (
    ": a full Redis may evict a fencing counter (it has no TTL), and the next grant of its name"
    " starts again at token 1: fencing tokens are reissued"
)
VOLATILE = (
    ": a full Redis may evict a held lease's key (it has a TTL) before its TTL ends, and the lease"
    " is granted again while its holder still works (the fencing counters have no TTL and stay)"
)
EXPECTED = {
    "allkeys-lru": "fencedlease: the Redis store has maxmemory-policy allkeys-lru" + ALLKEYS + FIX,
    "volatile-lru": "fencedlease: the Redis store has maxmemory-policy volatile-lru"
    + VOLATILE
    + FIX,
    "noeviction": None,
}


def run(coro_fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(coro_fn())


@pytest.fixture
def caught(caplog: pytest.LogCaptureFixture) -> Iterator[list[warnings.WarningMessage]]:
    """Every warning issued in the test (none filtered out), the ``fencedlease`` log captured."""
    caplog.set_level(logging.DEBUG, logger="fencedlease")
    with warnings.catch_warnings(record=True) as found:
        warnings.simplefilter("always")
        yield found


def unsafe(found: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in found if w.category is UnsafeRedisWarning]


def logged(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "fencedlease" and r.levelno == level
    ]


@pytest.fixture(params=list(EXPECTED))
def policy_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, RedisServer]]:
    """A redis-server of the test's own started with the parametrized ``maxmemory-policy``."""
    policy: str = request.param
    with RedisServer(extra_args=("--maxmemory-policy", policy)) as server:
        yield policy, server


def test_the_first_acquire_warns_once_sync(
    policy_server: tuple[str, RedisServer],
    caught: list[warnings.WarningMessage],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An evicting policy is warned about and logged once, after the first acquire (read in the
    background), not again on later grants; noeviction warns nothing."""
    policy, server = policy_server
    expected = EXPECTED[policy]
    with LeaseManager.from_url(server.url, prefix="unsafe") as leases:
        first = leases.acquire("a", ttl_ms=10_000)
        assert first.lease is not None
        if expected:  # read off the acquire's path, right after it
            wait_until(lambda: unsafe(caught) == [expected], "the warning")
        for name in ("b", "c"):
            assert leases.acquire(name, ttl_ms=10_000).lease is not None
    assert unsafe(caught) == ([expected] if expected else [])
    assert logged(caplog, logging.WARNING) == ([expected] if expected else [])


def test_the_first_acquire_warns_once_asyncio(
    policy_server: tuple[str, RedisServer],
    caught: list[warnings.WarningMessage],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The asyncio face: of ten acquires at once on a new manager, the first to be answered
    starts the one read of the policy, off the acquires' path: all ten are answered while that
    read is held, and none reads again; one warning; noeviction warns nothing."""
    policy, server = policy_server
    expected = EXPECTED[policy]
    real = AsyncRedisBackend._memory_policies
    reads: list[object] = []
    go_on = asyncio.Event()

    async def held(self: AsyncRedisBackend, client: Any = None) -> dict[str, str | None]:
        reads.append(client)
        await go_on.wait()
        return await real(self, client)

    monkeypatch.setattr(AsyncRedisBackend, "_memory_policies", held)

    async def main() -> None:
        async with AsyncLeaseManager.from_url(server.url, prefix="unsafe") as leases:
            tasks = [
                asyncio.ensure_future(leases.acquire(f"k{i}", ttl_ms=10_000)) for i in range(10)
            ]
            await async_wait_until(
                lambda: all(task.done() for task in tasks) and len(reads) == 1,
                "ten acquires answered, the one read begun and held",
            )
            go_on.set()
            reading = leases.backend._eviction_read  # type: ignore[attr-defined]
            await async_wait_until(
                lambda: reading._task is None or reading._task.done(), "the read to end"
            )
            results = await asyncio.gather(*tasks)
            assert all(result.lease is not None for result in results)
            await leases.acquire("k0", ttl_ms=10_000)

    run(main)
    assert unsafe(caught) == ([expected] if expected else [])
    assert logged(caplog, logging.WARNING) == ([expected] if expected else [])
    assert len(reads) == 1


def test_check_health_and_from_env_report_it(
    caught: list[warnings.WarningMessage], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``from_env(connect=True)`` warns at start-up, its acquire later does not again, and every
    ``check_health`` reports the policy and the finding (both faces)."""
    expected = EXPECTED["allkeys-lru"]
    with RedisServer(extra_args=("--maxmemory-policy", "allkeys-lru")) as server:
        environ = {"FENCEDLEASE_URL": server.url, "FENCEDLEASE_PREFIX": "env"}
        with LeaseManager.from_env(environ, connect=True) as leases:
            assert unsafe(caught) == [expected]
            assert leases.acquire("a", ttl_ms=10_000).lease is not None
            report = leases.check_health()
            assert (report.maxmemory_policy, report.findings) == ("allkeys-lru", (expected,))
        assert unsafe(caught) == [expected]

        async def main() -> None:
            leases = await AsyncLeaseManager.from_env(environ, connect=True)
            async with leases:
                assert unsafe(caught) == [expected] * 2
                assert (await leases.acquire("b", ttl_ms=10_000)).lease is not None
                report = await leases.check_health()
                assert (report.maxmemory_policy, report.findings) == ("allkeys-lru", (expected,))

        run(main)
        assert unsafe(caught) == [expected] * 2  # one per manager
    with RedisServer() as server, LeaseManager.from_url(server.url) as leases:
        report = leases.check_health()
        assert (report.maxmemory_policy, report.findings) == ("noeviction", ())
    with LeaseManager.from_url("memory://") as memory:
        report = memory.check_health()
        assert (report.maxmemory_policy, report.findings) == (None, ())
    assert unsafe(caught) == [expected] * 2


def test_a_server_that_refuses_info_is_not_checked(
    caught: list[warnings.WarningMessage], caplog: pytest.LogCaptureFixture
) -> None:
    """A user without ``INFO`` acquires and checks health as before: no warning, the policy
    reported None, and a debug line saying the check was skipped (both faces)."""
    with RedisServer(extra_args=("--maxmemory-policy", "allkeys-lru")) as server:
        password = url_password()
        rules = [rule for rule in acl_rules("fencedlease") if rule != "+info"]
        admin = server.client()
        admin.execute_command("ACL", "SETUSER", "app", "reset", "on", f">{password}", *rules)  # type: ignore[no-untyped-call]
        admin.close()
        url = f"redis://app:{password}@127.0.0.1:{server.port}/0"

        def skips() -> list[str]:
            found = logged(caplog, logging.DEBUG)
            return [m for m in found if "maxmemory-policy not checked" in m]

        with LeaseManager.from_url(url) as leases:
            assert leases.acquire("a", ttl_ms=10_000).lease is not None
            wait_until(lambda: len(skips()) == 1, "the background read's skip")
            assert leases.check_health().maxmemory_policy is None

        async def main() -> None:
            async with AsyncLeaseManager.from_url(url) as leases:
                assert (await leases.acquire("b", ttl_ms=10_000)).lease is not None
                await async_wait_until(lambda: len(skips()) == 3, "the background read's skip")
                assert (await leases.check_health()).maxmemory_policy is None

        run(main)
    assert unsafe(caught) == []
    skipped = skips()
    assert len(skipped) == 4
    refused = "fencedlease: maxmemory-policy not checked: INFO memory refused (NoPermissionError"
    assert all(m.startswith(refused) for m in skipped)
    assert all(password not in m for m in skipped)


def test_a_failed_read_is_tried_again_on_the_next_acquire(
    caught: list[warnings.WarningMessage], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``INFO memory`` that breaks does not fail the acquire that answered; the next acquire
    reads the policy and warns."""
    real = RedisBackend._memory_policies
    calls: list[int] = []

    def breaks_once(self: RedisBackend, client: Any = None) -> dict[str, str | None]:
        calls.append(1)
        if len(calls) == 1:
            raise redis.ConnectionError("connection reset")
        return real(self, client)

    monkeypatch.setattr(RedisBackend, "_memory_policies", breaks_once)
    with (
        RedisServer(extra_args=("--maxmemory-policy", "allkeys-lru")) as server,
        LeaseManager.from_url(server.url) as leases,
    ):
        assert leases.acquire("a", ttl_ms=10_000).lease is not None
        assert unsafe(caught) == []
        assert leases.acquire("b", ttl_ms=10_000).lease is not None
        leases.acquire("c", ttl_ms=10_000)
    assert (len(calls), unsafe(caught)) == (2, [EXPECTED["allkeys-lru"]])


@pytest.fixture
def one_primary_evicts(redis_cluster: RedisClusterServers) -> Iterator[str]:
    """The session's cluster with its second primary on ``allkeys-lru``; its ``host:port``."""
    server = redis_cluster.servers[1]
    client = server.client()
    client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        yield f"127.0.0.1:{server.port}"
    finally:
        client.config_set("maxmemory-policy", "noeviction")
        client.close()


@pytest.mark.cluster
def test_a_cluster_primary_that_evicts_is_named(
    redis_cluster: RedisClusterServers,
    one_primary_evicts: str,
    caught: list[warnings.WarningMessage],
) -> None:
    """On a cluster every primary is read on the first acquire and the one that evicts is named,
    once per manager (both faces)."""
    expected = f"fencedlease: the Redis primary {one_primary_evicts} has maxmemory-policy"
    expected += " allkeys-lru" + ALLKEYS + FIX
    prefix = "unsafe-" + secrets.token_hex(4)
    with LeaseManager.from_url(redis_cluster.url, prefix=prefix) as leases:
        for name in ("a", "b", "c"):
            assert leases.acquire(name, ttl_ms=10_000).lease is not None
        wait_until(lambda: unsafe(caught) == [expected], "the warning after the first acquire")
        assert leases.check_health().findings == (expected,)

    async def main() -> None:
        async with AsyncLeaseManager.from_url(redis_cluster.url, prefix=prefix) as leases:
            for name in ("d", "e"):
                assert (await leases.acquire(name, ttl_ms=10_000)).lease is not None
            await async_wait_until(lambda: unsafe(caught) == [expected] * 2, "the warning")
            report = await leases.check_health()
            assert (report.maxmemory_policy, report.findings) == ("allkeys-lru", (expected,))

    run(main)
    assert unsafe(caught) == [expected] * 2


@pytest.mark.sentinel
def test_a_sentinel_primary_that_evicts_is_warned_about(
    sentinel_deployment: SentinelDeployment, caught: list[warnings.WarningMessage]
) -> None:
    """Through Sentinel the primary it names is read, after the first acquire (both faces)."""
    primary = sentinel_deployment.server_on(sentinel_deployment.primary_port())
    with primary.client() as client:
        client.config_set("maxmemory-policy", "allkeys-lru")
    with LeaseManager.from_url(sentinel_deployment.url) as leases:
        assert leases.acquire("a", ttl_ms=10_000).lease is not None
        assert leases.acquire("b", ttl_ms=10_000).lease is not None
        wait_until(lambda: len(unsafe(caught)) == 1, "the read after the first acquire")

    async def main() -> None:
        async with AsyncLeaseManager.from_url(sentinel_deployment.url) as leases:
            assert (await leases.acquire("c", ttl_ms=10_000)).lease is not None
            await async_wait_until(lambda: len(unsafe(caught)) == 2, "the asyncio face's read")

    run(main)
    assert unsafe(caught) == [EXPECTED["allkeys-lru"]] * 2
