"""The replicated topologies ``fencedlease check --topology`` starts, and their faults driven
directly (no workers): the shape of each deployment, and that each failover fault moves the
primary the way it says. One deployment per topology serves the module's tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from fencedlease_lab.harness.faults_topology import TopologyFaults
from fencedlease_lab.harness.topology import REPLICA_PRIORITIES, Deployment, start_deployment
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
