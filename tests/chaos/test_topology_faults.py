"""The replicated topologies ``fencedlease check --topology`` starts, and their faults driven
directly (no workers): the shape of each deployment, and that each failover fault moves the
primary the way it says. One deployment per topology serves the module's tests."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
import redis

from fencedlease_lab.harness.faults_topology import TopologyFaults
from fencedlease_lab.harness.topology import (
    DOWN_AFTER_MS,
    PRIMARY_PRIORITY,
    REPLICA_PRIORITIES,
    Deployment,
    start_deployment,
)
from fencedlease_lab.servers.redis import find_redis_binary

pytestmark = [pytest.mark.chaos, pytest.mark.failover]

KEY = "fencedlease:{check:counter}"


def _deployment(kind: str) -> Iterator[Deployment]:
    if find_redis_binary() is None:
        pytest.skip("no redis-server binary")
    with ExitStack() as stack:
        yield start_deployment(kind, stack)


@pytest.fixture(scope="module")
def sentinel() -> Iterator[Deployment]:
    yield from _deployment("sentinel")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Deployment]:
    yield from _deployment("cluster")


@pytest.mark.sentinel
def test_sentinel_has_two_replicas_of_different_priorities(sentinel: Deployment) -> None:
    """The Sentinel deployment: a primary and two replicas in sync, which every sentinel sees
    with the priorities 50 and 100."""
    faults = TopologyFaults(sentinel, KEY)
    primary = faults.primary()
    assert len(faults.replicas(primary)) == 2
    servers = sentinel.servers
    for index in range(len(servers.sentinel_ports)):
        seen = servers.replicas_seen(index)
        priorities = sorted(int(fields["slave-priority"]) for fields in seen.values())
        assert priorities == sorted(REPLICA_PRIORITIES)


@pytest.mark.cluster
def test_cluster_has_two_replicas_per_shard(cluster: Deployment) -> None:
    """The Redis Cluster: three masters, each with two replicas in sync."""
    servers = cluster.servers
    faults = TopologyFaults(cluster, KEY)
    masters = {servers.master_of(slot).port for slot in (0, 8000, 16383)}
    assert len(masters) == 3
    for port in masters:
        assert len(faults.replicas(servers.server_on(port))) == 2
    assert len(servers.servers) == 9


def _run(deployment: Deployment, kind: str, duration_s: float = 1.0) -> dict[str, Any]:
    faults = TopologyFaults(deployment, KEY)
    try:
        return faults.run(kind, duration_s, 1.0, threading.Event())
    finally:
        faults.heal_all()


def _replica_ports(deployment: Deployment, port: int) -> list[int]:
    faults = TopologyFaults(deployment, KEY)
    return sorted(r.port for r in faults.replicas(deployment.servers.server_on(port)))


@pytest.mark.sentinel
def test_priority_inversion_promotes_the_preferred_replica_that_lagged(
    sentinel: Deployment,
) -> None:
    """``priority-inversion``: the replica of the best priority is the one paused, and the
    sentinels promote it over the one that kept up, losing what the primary acknowledged in
    the lag; the old primary and the other replica then replicate it."""
    faults = TopologyFaults(sentinel, KEY)
    primary = faults.primary()
    old = primary.port
    acknowledged: list[int] = []
    writing = threading.Event()

    def write() -> None:  # INCR on the old primary until it is killed
        with primary.client(socket_timeout=2) as client, contextlib.suppress(redis.RedisError):
            while True:
                acknowledged.append(int(client.incr("inversion")))
                writing.set()

    writer = threading.Thread(target=write)
    writer.start()
    assert writing.wait(10)
    try:
        detail = _run(sentinel, "priority-inversion")
    finally:
        writer.join(10)
    lagging = detail["lagging"]
    with sentinel.servers.server_on(lagging).client(socket_timeout=2) as client:
        kept = int(client.get("inversion") or 0)
    assert kept < acknowledged[-1]  # the promoted replica lacks the last acknowledged ones
    assert detail["paused"] == [lagging]
    assert detail["new_primary"] == lagging
    assert detail["old_primary"] == old
    priorities = detail["priorities"]
    assert priorities[str(lagging)] == min(priorities.values()) == 50
    assert sentinel.servers.primary_port() == lagging
    assert old in _replica_ports(sentinel, lagging)
    assert len(_replica_ports(sentinel, lagging)) == 2
    # The old primary is a replica with a priority of its own: no two replicas tie.
    seen = sentinel.servers.replicas_seen(0)
    after = sorted(int(seen[port]["slave-priority"]) for port in _replica_ports(sentinel, lagging))
    assert after == [PRIMARY_PRIORITY, 100]


@pytest.mark.cluster
@pytest.mark.parametrize("kind", ["cluster-failover-force", "cluster-takeover"])
def test_cluster_forced_failovers_move_the_slot(cluster: Deployment, kind: str) -> None:
    """``CLUSTER FAILOVER FORCE`` and ``TAKEOVER``: the replica asked serves the first key's
    slot, and the old master replicates it, as does the shard's other replica."""
    old = TopologyFaults(cluster, KEY).primary().port
    replicas = _replica_ports(cluster, old)
    detail = _run(cluster, kind)
    assert detail["old_master"] == old
    assert detail["new_master"] in replicas
    assert TopologyFaults(cluster, KEY).primary().port == detail["new_master"]
    assert old in _replica_ports(cluster, detail["new_master"])
    assert len(_replica_ports(cluster, detail["new_master"])) == 2


@pytest.mark.cluster
def test_cluster_stall_past_the_node_timeout_fails_the_master_over(cluster: Deployment) -> None:
    """``cluster-stall``: the master stopped longer than the node timeout is replaced by one of
    its replicas; resumed, it rejoins as the new master's replica."""
    old = TopologyFaults(cluster, KEY).primary().port
    replicas = _replica_ports(cluster, old)
    detail = _run(cluster, "cluster-stall")
    assert detail["old_master"] == old
    assert detail["new_master"] in replicas
    assert detail["switch_ms"] >= DOWN_AFTER_MS
    assert old in _replica_ports(cluster, detail["new_master"])
