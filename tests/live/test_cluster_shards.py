"""Shards of a real Redis Cluster isolated from each other: a slot migrated to another shard is no
failover, and a primary stalled past the node timeout costs the leases of the other shards
nothing when ``cluster-require-full-coverage`` is ``no`` (and all of them when it is ``yes``,
Redis's default)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from redis.crc import key_slot

from conftest import first_epoch_token, started_cluster, wait_until
from fencedlease import AcquireResult, BackendError, LeaseEvent, LeaseLostError, LeaseManager
from fencedlease._redis.keys import fence_key, lease_key
from fencedlease.aio import AsyncLeaseManager
from fencedlease_lab.servers.cluster import RedisClusterServers
from fencedlease_lab.servers.redis import RedisServer

pytestmark = [pytest.mark.live, pytest.mark.cluster]


def _slot(prefix: str, key: str) -> int:
    return key_slot(lease_key(prefix, key).encode())


def _node_id(server: RedisServer) -> str:
    with server.client() as node:
        return str(node.execute_command("CLUSTER MYID").decode())


def _start_migration(slot: int, source: RedisServer, target: RedisServer) -> None:
    """The start of a reshard of ``slot``: ``IMPORTING`` on the target, ``MIGRATING`` on the
    source."""
    with target.client() as to, source.client() as source_node:
        to.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", _node_id(source))
        source_node.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", _node_id(target))


def _migrate_rest(
    cluster: RedisClusterServers, slot: int, source: RedisServer, target: RedisServer
) -> None:
    """The end of a reshard of ``slot``: its keys sent with ``MIGRATE``, then every node told
    the slot's new node."""
    with source.client() as source_node:
        keys = source_node.execute_command("CLUSTER GETKEYSINSLOT", slot, 1000)
        if keys:
            source_node.execute_command(
                "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys
            )
    new_node = _node_id(target)
    for server in [target, source, *(s for s in cluster.servers if s not in (source, target))]:
        with server.client() as node:
            node.execute_command("CLUSTER SETSLOT", slot, "NODE", new_node)


def _migrate(
    cluster: RedisClusterServers, slot: int, source: RedisServer, target: RedisServer
) -> None:
    """Move ``slot`` with its keys from ``source`` to ``target`` the way a reshard does."""
    _start_migration(slot, source, target)
    _migrate_rest(cluster, slot, source, target)


@pytest.mark.parametrize("face", ["sync", "asyncio"])
def test_a_slot_migration_while_renewing_is_no_primary_change(
    redis_cluster: RedisClusterServers, face: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A name's slot moved to another shard while its lease renews: the lease is kept and
    renewed on its new node, the next grant's token is the floor of the new node's epoch (the
    move gave it a newer one; epoch tokens are a cluster URL's default), and the move counts no
    failover, sends no ``failover`` event and logs no primary change."""
    prefix = f"migrate-{face}"
    key = "job"
    slot = _slot(prefix, key)
    source = redis_cluster.node_for_slot(slot)
    target = next(s for s in redis_cluster.servers if s is not source)
    events: list[LeaseEvent] = []
    renewed_there = threading.Event()
    moved = threading.Event()

    def on_event(event: LeaseEvent) -> None:
        events.append(event)
        if moved.is_set() and event.kind == "renew" and event.status == "confirmed":
            renewed_there.set()

    caplog.set_level(logging.INFO, logger="fencedlease")

    def migrate() -> None:
        _migrate(redis_cluster, slot, source, target)
        moved.set()

    if face == "sync":
        with LeaseManager.from_url(redis_cluster.url, prefix=prefix, on_event=on_event) as leases:
            with leases.hold(key, ttl_ms=3000, heartbeat_ms=200) as lease:
                first = lease.fencing_token
                migrate()
                assert renewed_there.wait(30)
                lost = lease.lost
            again = leases.acquire(key, ttl_ms=3000)
            assert again.lease is not None
            second = again.lease.fencing_token
            again.lease.release()
            changes = leases.primary_changes
            migrations = getattr(leases.backend.primary, "migrations", None)  # type: ignore[attr-defined]
    else:

        async def main() -> tuple[int | None, bool, int | None, int, int | None]:
            async with AsyncLeaseManager.from_url(
                redis_cluster.url, prefix=prefix, on_event=on_event
            ) as leases:
                async with leases.hold(key, ttl_ms=3000, heartbeat_ms=200) as lease:
                    first = lease.fencing_token
                    await asyncio.to_thread(migrate)
                    assert await asyncio.to_thread(renewed_there.wait, 30)
                    lost = lease.lost
                again = await leases.acquire(key, ttl_ms=3000)
                assert again.lease is not None
                second = again.lease.fencing_token
                await again.lease.release()
                watch = leases.backend.primary  # type: ignore[attr-defined]
                return (
                    first,
                    lost,
                    second,
                    leases.primary_changes,
                    getattr(watch, "migrations", None),
                )

        first, lost, second, changes, migrations = asyncio.run(main())
    try:
        assert with_target(target, prefix, key)
        assert first is not None
        assert (lost, second, changes, migrations) == (False, first_epoch_token(target), 0, 1)
        assert (second or 0) > first
        assert [e for e in events if e.kind == "failover"] == []
        assert not [r for r in caplog.records if "the Redis primary changed" in r.getMessage()]
        assert [r.getMessage() for r in caplog.records if "slot migration" in r.getMessage()] == [
            f"fencedlease: slot {slot} of {key!r} moved from 127.0.0.1:{source.port} to"
            f" 127.0.0.1:{target.port}: a slot migration, not a failover"
        ]
    finally:
        _migrate(redis_cluster, slot, target, source)


def _token(result: AcquireResult) -> int | None:
    return None if result.lease is None else result.lease.fencing_token


def with_target(target: RedisServer, prefix: str, key: str) -> bool:
    """Whether the name's fencing counter lives on ``target`` now."""
    with target.client() as node:
        return bool(node.exists(fence_key(prefix, key)))


class _Renewals:
    """Confirmed renewals and losses per key, from the manager's events: ``reached`` is set once
    every key of `expect`'s has renewed ``times`` more, ``all_lost`` once every key of
    `expect_lost`'s is lost."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.want: dict[str, int] = {}
        self.lost: set[str] = set()
        self.lose: set[str] = set()
        self.reached = threading.Event()
        self.all_lost = threading.Event()

    def expect(self, keys: list[str], times: int) -> None:
        with self.lock:
            self.want = {k: self.counts.get(k, 0) + times for k in keys}
            self.reached.clear()

    def expect_lost(self, keys: list[str]) -> None:
        with self.lock:
            self.lose = set(keys)
            if self.lose <= self.lost:
                self.all_lost.set()

    def __call__(self, event: LeaseEvent) -> None:
        with self.lock:
            if event.kind == "lost":
                self.lost.add(event.key)
                if self.lose and self.lose <= self.lost:
                    self.all_lost.set()
            if event.kind == "renew" and event.status == "confirmed":
                self.counts[event.key] = self.counts.get(event.key, 0) + 1
                if self.want and all(self.counts.get(k, 0) >= n for k, n in self.want.items()):
                    self.want = {}
                    self.reached.set()


def _marked_failed(cluster: RedisClusterServers, stalled: RedisServer) -> bool:
    """Whether every other node flags ``stalled`` as failed (``fail`` in ``CLUSTER NODES``)."""
    for server in cluster.servers:
        if server is stalled:
            continue
        with server.client(socket_timeout=5) as node:
            nodes = node.execute_command("CLUSTER NODES")  # by address, parsed by redis-py
        if "fail" not in nodes[f"127.0.0.1:{stalled.port}"]["flags"].split(","):
            return False
    return True


def _keys_by_node(cluster: RedisClusterServers, prefix: str) -> tuple[list[str], list[str]]:
    """Names on the first node, and names on each of the others (two per node)."""
    first = cluster.servers[0]
    names = [f"job:{i}" for i in range(200)]
    on_first = [n for n in names if cluster.node_for_slot(_slot(prefix, n)) is first][:2]
    others = [
        n
        for server in cluster.servers[1:]
        for n in [n for n in names if cluster.node_for_slot(_slot(prefix, n)) is server][:2]
    ]
    return on_first, others


@pytest.fixture
def fast_failing_cluster(request: pytest.FixtureRequest) -> Iterator[RedisClusterServers]:
    """Three primaries, no replicas, a node silent for a second flagged failed; with
    ``cluster-require-full-coverage`` as the test's parameter."""
    yield from started_cluster(
        RedisClusterServers(3, node_timeout_ms=1000, require_full_coverage=request.param)
    )


def _hold_through_stall(
    cluster: RedisClusterServers,
    prefix: str,
    renewals: _Renewals,
    during: Callable[[list[str], list[str]], None],
) -> None:
    """Hold two leases on each node, stall the first node (SIGSTOP) until the others flag it
    failed, then run ``during(stalled keys, other keys)``; the node resumes afterwards."""
    stalled, others = _keys_by_node(cluster, prefix)
    with (
        contextlib.suppress(LeaseLostError),
        LeaseManager.from_url(cluster.url, prefix=prefix, on_event=renewals) as leases,
        ExitStack() as stack,
    ):
        for k in stalled + others:
            stack.enter_context(leases.hold(k, ttl_ms=3000, heartbeat_ms=250))
        cluster.servers[0].pause()
        try:
            wait_until(
                lambda: _marked_failed(cluster, cluster.servers[0]),
                "the stalled node flagged failed by the others",
                timeout_s=60.0,
                poll_s=0.05,
            )
            during(stalled, others)
        finally:
            cluster.servers[0].resume()


@pytest.mark.parametrize("fast_failing_cluster", [False], indirect=True)
def test_a_primary_stalled_past_the_node_timeout_costs_the_other_shards_nothing(
    fast_failing_cluster: RedisClusterServers,
) -> None:
    """``cluster-require-full-coverage no``: a primary stalled until the cluster flags it failed
    loses its own leases; those on the other shards keep renewing and none is lost."""
    renewals = _Renewals()
    kept: list[str] = []

    def during(stalled: list[str], others: list[str]) -> None:
        renewals.expect_lost(stalled)
        assert renewals.all_lost.wait(30)  # told: its own shard does not answer
        renewals.expect(others, 4)  # a second of heartbeats after the flag, at least
        assert renewals.reached.wait(30)
        kept.extend(k for k in others if k not in renewals.lost)

    _hold_through_stall(fast_failing_cluster, "stall-no", renewals, during)
    _, others = _keys_by_node(fast_failing_cluster, "stall-no")
    assert kept == others


@pytest.mark.parametrize("fast_failing_cluster", [True], indirect=True)
def test_with_full_coverage_a_stalled_primary_costs_every_shard_its_leases(
    fast_failing_cluster: RedisClusterServers,
) -> None:
    """``cluster-require-full-coverage yes`` (Redis's default): once the stalled primary is
    flagged failed, the other nodes answer ``CLUSTERDOWN`` and the leases on their shards are
    lost too."""
    renewals = _Renewals()
    down: list[bool] = []

    def during(stalled: list[str], others: list[str]) -> None:
        for server in fast_failing_cluster.servers[1:]:
            _until_node(
                server,
                lambda node: node.execute_command("CLUSTER INFO")["cluster_state"] == "fail",
                "a healthy node in cluster_state:fail",
            )
            down.append(True)
        renewals.expect_lost(stalled + others)
        assert renewals.all_lost.wait(30)

    _hold_through_stall(fast_failing_cluster, "stall-yes", renewals, during)
    stalled, others = _keys_by_node(fast_failing_cluster, "stall-yes")
    assert down == [True, True]
    assert renewals.lost == set(stalled + others)


def _until_node(server: RedisServer, holds: Callable[[Any], bool], what: str) -> None:
    """Poll ``server`` until ``holds(its client)``, for a state of the cluster no event tells."""
    with server.client(socket_timeout=5) as node:
        wait_until(lambda: holds(node), what, timeout_s=60.0, poll_s=0.02)


def _tryagains(cluster: RedisClusterServers) -> int:
    """How many ``TRYAGAIN`` replies the nodes of ``cluster`` have sent (``INFO errorstats``).

    Summed over the nodes because the node that turns a call away depends on the Redis version:
    7.0's migrating source answers ``TRYAGAIN`` itself, 6.2's answers ``ASK`` and the importing
    target answers ``TRYAGAIN``. redis-py 8 parses a stat's fields into a dict, 5.0 leaves the
    text ``count=N``."""
    total = 0
    for server in cluster.servers:
        with server.client(socket_timeout=5) as node:
            stat = node.info("errorstats").get("errorstat_TRYAGAIN")
        if isinstance(stat, dict):
            total += int(stat["count"])
        elif stat is not None:
            fields = dict(field.split("=") for field in str(stat).split(","))
            total += int(fields["count"])
    return total


def test_an_acquire_during_a_slot_migration_waits_it_out(
    redis_cluster: RedisClusterServers,
) -> None:
    """While a name's slot is being migrated (its counter still on the source, the lease free)
    every node turns the acquire away with TRYAGAIN: a fail-fast acquire raises a busy
    BackendError (not a grant cut before the majority's word: nothing ran), one with time left
    waits until the slot has moved and is granted a token on the slot's new node, above the
    last."""
    prefix, key = "migrating", "job"
    slot = _slot(prefix, key)
    source = redis_cluster.node_for_slot(slot)
    target = next(s for s in redis_cluster.servers if s is not source)
    with LeaseManager.from_url(redis_cluster.url, prefix=prefix) as leases:
        first = leases.acquire(key, ttl_ms=3000)
        assert first.lease is not None
        token = first.lease.fencing_token
        first.lease.release()
        _start_migration(slot, source, target)
        try:
            with pytest.raises(BackendError) as caught:
                leases.acquire(key, ttl_ms=3000)
            assert (str(caught.value), caught.value.busy) == (
                f"acquire {key!r}: ClusterError: TTL exhausted.",
                True,
            )
            turned_away = _tryagains(redis_cluster)
            got: list[int | None] = []
            waiting = threading.Thread(
                target=lambda: got.append(_token(leases.acquire(key, ttl_ms=3000, wait_ms=60_000)))
            )
            waiting.start()
            # redis-py tries a call 16 times: an acquire that gave up after its resend (and
            # the release of its cleanup) is turned away 48 times at most
            wait_until(
                lambda: _tryagains(redis_cluster) > turned_away + 6 * 16,
                "the waiting acquire turned away six times",
                timeout_s=30.0,
                poll_s=0.01,
            )
        finally:
            _migrate_rest(redis_cluster, slot, source, target)
        waiting.join(60)
        # the next token on the slot's new node: the floor of the epoch the move gave it
        assert token is not None and got == [first_epoch_token(target)] and (got[0] or 0) > token
        assert with_target(target, prefix, key)
    _migrate(redis_cluster, slot, target, source)


@pytest.fixture
def failing_over_cluster() -> Iterator[RedisClusterServers]:
    """Three primaries with a replica each; a primary silent for a second is failed over."""
    yield from started_cluster(RedisClusterServers(3, replicas=1, node_timeout_ms=1000))


class _Refreshes:
    """Counts the slot-map reads of a cluster client (its ``nodes_manager.initialize``) and
    notes the count when `mark` is called."""

    def __init__(self, nodes_manager: Any) -> None:
        self.count = 0
        self.marked: int | None = None
        original = nodes_manager.initialize

        def counted(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            finally:
                self.count += 1

        nodes_manager.initialize = counted

    def mark(self) -> None:
        self.marked = self.count


@pytest.mark.parametrize("fault", ["kill", "stall"])
def test_after_a_promotion_the_new_primary_is_reached_within_two_slot_map_reads(
    failing_over_cluster: RedisClusterServers, fault: str
) -> None:
    """A primary killed (or stalled) until its replica is promoted: the next acquire of a name
    of its slot is granted by the new primary after at most two slot-map reads from the moment
    the promotion is seen (the first may still come from a node that has not heard of it; the
    next follows redis-py's refresh interval, a second)."""
    cluster = failing_over_cluster
    prefix = f"promote-{fault}"
    primary = cluster.servers[0]
    (replica,) = cluster.replicas_of[primary.port]
    key = next(
        k
        for k in (f"job:{i}" for i in range(200))
        if cluster.node_for_slot(_slot(prefix, k)) is primary
    )
    # A stalled node answers nothing: only a socket timeout ends a read from it (redis-py 8
    # defaults to 5 s, redis-py 5 to none, and the library bounds no call without one).
    with LeaseManager.from_url(
        cluster.url, prefix=prefix, socket_timeout=5, socket_connect_timeout=5
    ) as leases:
        first = leases.acquire(key, ttl_ms=3000)
        assert first.lease is not None
        first.lease.release()
        refreshes = _Refreshes(leases.backend.cluster.nodes_manager)  # type: ignore[attr-defined]
        if fault == "kill":
            primary.kill()
        else:
            primary.pause()
        try:
            _until_node(
                replica, lambda node: node.info("replication")["role"] == "master", "a promotion"
            )
            refreshes.mark()
            granted: AcquireResult | None = None
            for _ in range(10):
                try:
                    granted = leases.acquire(key, ttl_ms=3000)
                    break
                except BackendError:
                    continue
            assert granted is not None and granted.lease is not None
            with replica.client(socket_timeout=5) as node:
                assert node.get(lease_key(prefix, key)) is not None
            assert refreshes.marked is not None
            assert refreshes.count - refreshes.marked <= 2
        finally:
            if fault == "stall":
                primary.resume()
