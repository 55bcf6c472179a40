"""A holder left with a deposed Redis Cluster primary: the shard's replica takes over (``CLUSTER
FAILOVER TAKEOVER``: a new ``configEpoch``, no vote, no word from its primary) while the old
primary has forgotten it (``CLUSTER FORGET``: for a minute it ignores every message about that
node), so the old primary goes on serving the slot as a writable master and answers the holder's
renewals; the other primaries name the new one, whose writes are paused (``CLIENT PAUSE WRITE``:
a renewal that follows the slot there gets no answer). The renewals the old primary answers must
not count: the holder is told of its loss within ``ttl_ms`` of the majority naming the new
primary. Every wait is on a state the servers report."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator

import pytest
from redis.crc import key_slot

from conftest import started_cluster, wait_until
from fencedlease import LeaseEvent, LeaseLostError, LeaseManager
from fencedlease._core.state import LossReason
from fencedlease._redis.keys import lease_key
from fencedlease.aio import AsyncLeaseManager
from fencedlease_lab.servers.cluster import RedisClusterServers
from fencedlease_lab.servers.redis import RedisServer

pytestmark = [
    pytest.mark.live,
    pytest.mark.cluster,
    pytest.mark.failover,
    pytest.mark.timeout(120),
]

TTL_MS = 3_000
SLACK_S = 1.0  # the renewer marks a loss at its deadline; a loaded machine wakes it late
BOUND_S = 30.0  # a safety bound on waits that a state change ends (the FORGET lasts 60 s)


@pytest.fixture(scope="module")
def shards() -> Iterator[RedisClusterServers]:
    """Three primaries with a replica each; each test deposes a primary of its own."""
    yield from started_cluster(RedisClusterServers(3, replicas=1))


def _node_id(server: RedisServer) -> str:
    with server.client(socket_timeout=5) as node:
        return str(node.execute_command("CLUSTER MYID").decode())


def _owner(server: RedisServer, slot: int) -> str | None:
    """The primary serving ``slot`` (``host:port``) as ``server``'s ``CLUSTER NODES`` says."""
    with server.client(socket_timeout=5) as node:
        view = node.execute_command("CLUSTER NODES")
    for address, fields in view.items():
        flags = str(fields["flags"]).split(",")
        if "master" in flags and any(int(a) <= slot <= int(b[-1]) for a, *b in fields["slots"]):
            return str(address)
    return None


def _key_on(cluster: RedisClusterServers, prefix: str, server: RedisServer) -> tuple[str, int]:
    """A lease name whose slot ``server`` serves, and that slot."""
    for name in (f"job:{i}" for i in range(1_000)):
        slot = key_slot(lease_key(prefix, name).encode())
        if cluster.node_for_slot(slot) is server:
            return name, slot
    raise AssertionError("no name on that node")


def _depose(cluster: RedisClusterServers, old: RedisServer, slot: int) -> str:
    """Make ``old``'s replica take its slots over, its writes paused, while ``old`` goes on as a
    primary: ``old`` forgets the replica, the replica takes over; until every other primary
    names the replica the slot's primary, and ``old`` still names itself. The replica's
    address."""
    (new,) = cluster.replicas_of[old.port]
    with old.client(socket_timeout=5) as node:
        node.execute_command("CLUSTER", "FORGET", _node_id(new))
    with new.client(socket_timeout=5) as node:
        node.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")  # ended by `_unpaused`
        node.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
    address = f"127.0.0.1:{new.port}"
    others = [server for server in cluster.servers if server is not old]
    wait_until(
        lambda: all(_owner(server, slot) == address for server in others),
        "every other primary to name the replica",
        timeout_s=BOUND_S,
    )
    assert _owner(old, slot) == f"127.0.0.1:{old.port}"  # deposed, and unaware of it
    return address


@contextlib.contextmanager
def _unpaused(cluster: RedisClusterServers, old: RedisServer) -> Iterator[None]:
    """At the end, the writes of ``old``'s replica resume."""
    try:
        yield
    finally:
        (new,) = cluster.replicas_of[old.port]
        with new.client(socket_timeout=5) as node:
            node.execute_command("CLIENT", "UNPAUSE")


class _Events:
    """The holder's renew and lost events, each with the time it was seen."""

    def __init__(self) -> None:
        self.refusals: list[str] = []
        self.lost_at: float | None = None
        self.lost = threading.Event()

    def __call__(self, event: LeaseEvent) -> None:
        if event.kind == "renew" and event.status == "error" and event.reason:
            self.refusals.append(event.reason)
        if event.kind == "lost":
            self.lost_at = time.monotonic()
            self.lost.set()


def _refusal(key: str, old: RedisServer, new: str) -> str:
    return (
        f"BackendError: renew {key!r}: not confirmed by the cluster's majority: the majority"
        f" names {new!r} the primary, not '127.0.0.1:{old.port}'"
    )


def test_sync_a_holder_on_a_deposed_primary_is_told_within_ttl(shards: RedisClusterServers) -> None:
    """Renewals the deposed primary still answers are not confirmed (the majority names the
    replica that took over): the lease is lost at its deadline, within ``ttl_ms`` of the
    majority naming the new primary."""
    old = shards.servers[0]
    key, slot = _key_on(shards, "deposed", old)
    events = _Events()
    with (
        _unpaused(shards, old),
        LeaseManager.from_url(shards.url, prefix="deposed", on_event=events) as manager,
        pytest.raises(LeaseLostError),
        manager.hold(key, ttl_ms=TTL_MS) as lease,
    ):
        new = _depose(shards, old, slot)
        named_at = time.monotonic()
        assert events.lost.wait(BOUND_S)
    assert lease.lost_reason == LossReason.DEADLINE
    assert events.lost_at is not None and events.lost_at - named_at <= TTL_MS / 1000 + SLACK_S
    assert _refusal(key, old, new) in events.refusals  # the deposed primary answered them


def test_async_a_holder_on_a_deposed_primary_is_told_within_ttl(
    shards: RedisClusterServers,
) -> None:
    """The asyncio face of the test above, on another shard of the same cluster."""
    old = shards.servers[1]
    key, slot = _key_on(shards, "adeposed", old)
    events = _Events()

    async def main() -> tuple[str, float, str | None]:
        loop = asyncio.get_running_loop()
        async with AsyncLeaseManager.from_url(
            shards.url, prefix="adeposed", on_event=events
        ) as manager:
            with pytest.raises(LeaseLostError):
                async with manager.hold(key, ttl_ms=TTL_MS) as lease:
                    new = await loop.run_in_executor(None, _depose, shards, old, slot)
                    named_at = time.monotonic()
                    assert await lease.wait_lost(int(BOUND_S * 1000))
        return new, named_at, lease.lost_reason

    with _unpaused(shards, old):
        new, named_at, reason = asyncio.run(main())
    assert reason == LossReason.DEADLINE
    assert events.lost_at is not None and events.lost_at - named_at <= TTL_MS / 1000 + SLACK_S
    assert _refusal(key, old, new) in events.refusals
