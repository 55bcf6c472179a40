"""Shared fixtures: a real Redis found as ``fencedlease_lab.servers.redis`` documents; and
`wait_until` (`async_wait_until`), the one way a test polls for a state no event tells it about.

Where a server cannot be had a test skips with the reason; with ``FENCEDLEASE_REQUIRE_SERVERS=1``
(CI) that skip is a failure instead.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from fencedlease._redis.lean import LEAN
from fencedlease.pytest_plugin import skip_unavailable
from fencedlease_lab.servers.cluster import RedisClusterServers
from fencedlease_lab.servers.redis import (
    RedisEndpoint,
    RedisServer,
    RedisUnavailable,
    redis_endpoint,
)
from fencedlease_lab.servers.sentinel import SentinelDeployment

unavailable = skip_unavailable  # skip, or fail when CI requires every server


def wait_until(
    condition: Callable[[], object], what: str, *, timeout_s: float = 10.0, poll_s: float = 0.005
) -> None:
    """Poll ``condition`` every ``poll_s`` seconds until it is true, for a state no event tells the
    test about (a waiter queued in Redis, Redis's own expiry, replication).

    Raises:
        AssertionError: ``condition`` was still false after ``timeout_s`` seconds; the message
            says what was awaited (``what``, e.g. ``"a waiter queued for 'k'"``).
    """
    give_up = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > give_up:
            raise AssertionError(f"gave up after {timeout_s} s waiting for {what}")
        time.sleep(poll_s)


_EXPIRY_SNAPSHOT = """
local before = redis.call('TIME')
local left = {}
for i, key in ipairs(KEYS) do
  left[i] = redis.call('PTTL', key)
end
local after = redis.call('TIME')
return {before[1], before[2], after[1], after[2], unpack(left)}
"""


def expiry_ms(client: redis.Redis, *keys: str) -> list[int]:
    """Each key's expiry as an absolute Redis ``TIME`` in ms (PEXPIRETIME, which Redis 6.2 lacks),
    read in one script whose two clock readings fall in one millisecond, so two keys that expire
    at one moment read equal; -1 (no TTL) and -2 (no key) are given as they are."""
    while True:
        reply = client.eval(_EXPIRY_SNAPSHOT, len(keys), *keys)
        before = int(reply[0]) * 1000 + int(reply[1]) // 1000
        after = int(reply[2]) * 1000 + int(reply[3]) // 1000
        if before == after:
            return [before + int(left) if int(left) >= 0 else int(left) for left in reply[4:]]


async def async_wait_until(
    condition: Callable[[], object], what: str, *, timeout_s: float = 10.0, poll_s: float = 0.005
) -> None:
    """`wait_until` in a coroutine: the event loop runs between the polls (``condition`` itself is
    called on the loop, so it must be quick).

    Raises:
        AssertionError: ``condition`` was still false after ``timeout_s`` seconds; the message
            says what was awaited (``what``, e.g. ``"a waiter queued for 'k'"``).
    """
    give_up = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > give_up:
            raise AssertionError(f"gave up after {timeout_s} s waiting for {what}")
        await asyncio.sleep(poll_s)


@pytest.fixture(scope="session")
def redis_ep() -> Iterator[RedisEndpoint]:
    try:
        with redis_endpoint() as endpoint:
            yield endpoint
    except RedisUnavailable as exc:
        unavailable(str(exc))


@pytest.fixture(scope="session")
def redis_url(redis_ep: RedisEndpoint) -> str:
    return redis_ep.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client on a flushed database (decode_responses off)."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture(params=[False, True], ids=["bytes", "str"])
def decode_responses(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server process of this test's own (to stop, restart, pause or kill)."""
    try:
        server = RedisServer()
    except RedisUnavailable as exc:
        unavailable(str(exc))
    with server:
        yield server


@pytest.fixture
def sentinel_deployment(request: pytest.FixtureRequest) -> Iterator[SentinelDeployment]:
    """A primary, replicas and three sentinels of this test's own (``@pytest.mark.replicas(n)``:
    n replicas, default 1); its failovers are the test's."""
    marker = request.node.get_closest_marker("replicas")
    replicas = int(marker.args[0]) if marker is not None else 1
    try:
        deployment = SentinelDeployment(replicas=replicas)
        deployment.start()
    except RedisUnavailable as exc:
        unavailable(str(exc))
    try:
        yield deployment
    finally:
        deployment.close()


def started_cluster(cluster: RedisClusterServers) -> Iterator[RedisClusterServers]:
    """For a fixture: ``cluster`` started, yielded, and stopped afterwards; the test skipped (or
    failed, in CI) when it cannot start."""
    try:
        cluster.start()
    except RedisUnavailable as exc:
        unavailable(str(exc))
    try:
        yield cluster
    finally:
        cluster.close()


def first_epoch_token(server: RedisServer) -> int:
    """The first token a Redis Cluster node grants a name with epoch tokens (a cluster URL's
    default): the floor of its ``configEpoch`` (``cluster_my_epoch`` of ``CLUSTER INFO``)."""
    with server.client(socket_timeout=5, decode_responses=True) as node:
        info = str(node.execute_command("CLUSTER", "INFO"))
    fields = dict(line.split(":", 1) for line in info.split() if ":" in line)
    return int(fields["cluster_my_epoch"]) << 40


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServers]:
    """A Redis Cluster of three primaries of the session's own (the lab's
    ``RedisClusterServers``); a test that pauses a node resumes it before it ends."""
    yield from started_cluster(RedisClusterServers(3))


def _caller_releases() -> bool:
    from fencedlease._redis.caller import _bounds_reads

    return _bounds_reads(redis.Connection)


needs_caller_releases = pytest.mark.skipif(
    not _caller_releases(),
    reason=f"redis-py {redis.__version__} reads no reply with a timeout of the caller's: a"
    " release runs on the worker thread, not the caller's",
)
"""For the tests of releases on the caller's thread (`fencedlease._redis.caller`)."""


@pytest.fixture(params=["hiredis", "redis-py"])
def wire_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The path the hot commands (acquire, release, renewal batch) take for this test: the
    library's own send and hiredis's reader, or redis-py's send and parser (the hiredis run
    skipped where the optional extra is not installed)."""
    if request.param == "hiredis" and not LEAN.available():
        pytest.skip("hiredis (the optional extra) is not installed: redis-py's path only")
    monkeypatch.setattr(LEAN, "enabled", request.param == "hiredis")
    return str(request.param)


def acl_log(admin: redis.Redis) -> list[dict[bytes, Any]]:
    """``ACL LOG``'s entries as dicts: RESP3 (or redis-py's own parsing) gives a dict per entry,
    an older redis-py over RESP2 a flat ``[field, value, ...]`` list."""
    entries = admin.execute_command("ACL", "LOG")  # type: ignore[no-untyped-call, unused-ignore]
    return [e if isinstance(e, dict) else dict(zip(e[::2], e[1::2], strict=True)) for e in entries]


def url_password(length: int = 16) -> str:
    """A random password for a test's URL: letters g-z only, so that no 3-character piece of it
    (which the library masks wherever it appears) can stand in a host, a port or a hex id the
    test reads back."""
    return "".join(secrets.choice("ghijklmnopqrstuvwxyz") for _ in range(length))
