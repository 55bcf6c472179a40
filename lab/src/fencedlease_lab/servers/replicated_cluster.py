"""A Redis Cluster with a replica per master, for the harness's failover faults: the masters of
[`RedisClusterServers`][fencedlease_lab.servers.cluster.RedisClusterServers], then one more node
per master joined with ``CLUSTER MEET`` and made its replica with ``CLUSTER REPLICATE``.

```
with ReplicatedCluster(3, node_timeout_ms=2000) as cluster:
    cluster.url                       # redis+cluster://... (every master a start node)
    cluster.master_of(slot)           # the server that serves the slot now
    cluster.replica_of(server)        # a server replicating it now
```

``node_timeout_ms`` is every node's ``cluster-node-timeout``: a master silent that long is failed
over to its replica (the unplanned failover of ``cluster-kill-master``).
"""

from __future__ import annotations

import time

import redis

from .cluster import RedisClusterServers, cluster_port
from .redis import RedisServer, RedisUnavailable

__all__ = ["ReplicatedCluster"]


class ReplicatedCluster:
    """``masters`` masters (the slots split evenly), each with one replica; started on entry,
    every node stopped on exit.

    Raises:
        RedisUnavailable: no binary, a node that does not start, or replicas not in sync within
            ``timeout_s`` of ``start``.
    """

    def __init__(
        self, masters: int = 3, *, binary: str | None = None, node_timeout_ms: int = 2000
    ) -> None:
        self.masters = RedisClusterServers(masters, binary=binary, node_timeout_ms=node_timeout_ms)
        args = self.masters.servers[0].extra_args
        taken = {p for s in self.masters.servers for p in (s.port, s.port + 10000)}
        self.replicas = [
            RedisServer(binary, port=cluster_port(taken), extra_args=args) for _ in range(masters)
        ]

    @property
    def servers(self) -> list[RedisServer]:
        """Every node: the masters it started with, then their replicas (roles change)."""
        return [*self.masters.servers, *self.replicas]

    @property
    def url(self) -> str:
        """``redis+cluster://`` with every node as a start node."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{s.port}" for s in self.servers)

    def start(self, timeout_s: float = 60.0) -> ReplicatedCluster:
        """Start the masters, then a replica of each; wait until every replica is in sync.

        Raises:
            RuntimeError: it was started already (and not closed since).
        """
        if self._started():
            raise RuntimeError(f"the cluster on {self.url} is started already")
        give_up = time.monotonic() + timeout_s
        try:
            self.masters.start()
            first = self.masters.servers[0]
            for replica in self.replicas:
                replica.start()
                with replica.client(socket_timeout=5) as client:
                    client.execute_command("CLUSTER MEET", "127.0.0.1", first.port)
            for master, replica in zip(self.masters.servers, self.replicas, strict=True):
                with master.client(socket_timeout=5) as client:
                    master_id = client.execute_command("CLUSTER MYID")
                self._replicate(replica, master_id, give_up)
            for master in self.masters.servers:
                self._wait_replica(master, give_up)
        except BaseException:
            self.close()
            raise
        return self

    @staticmethod
    def _replicate(replica: RedisServer, master_id: str | bytes, give_up: float) -> None:
        """``CLUSTER REPLICATE`` once the replica has heard of the master (gossip)."""
        with replica.client(socket_timeout=5) as client:
            while True:
                try:
                    client.execute_command("CLUSTER REPLICATE", master_id)
                    return
                except redis.ResponseError:  # "Unknown node": the MEET not spread yet
                    if time.monotonic() > give_up:
                        raise RedisUnavailable("a cluster replica could not join") from None
                    time.sleep(0.05)

    @staticmethod
    def _wait_replica(master: RedisServer, give_up: float) -> None:
        with master.client(socket_timeout=5) as client:
            while True:
                info = client.info("replication")
                replicas = [v for k, v in info.items() if k.startswith("slave")]
                if any(isinstance(v, dict) and v.get("state") == "online" for v in replicas):
                    return
                if time.monotonic() > give_up:
                    raise RedisUnavailable(f"no replica of {master.port} in sync")
                time.sleep(0.05)

    def role(self, server: RedisServer) -> str:
        """``master`` or ``slave`` as ``server`` says now (``down`` when it does not answer)."""
        try:
            with server.client(socket_timeout=2, socket_connect_timeout=2) as client:
                return str(client.info("replication")["role"])
        except redis.RedisError:
            return "down"

    def master_of(self, slot: int) -> RedisServer:
        """The node serving ``slot`` now, as the first answering node's ``CLUSTER SLOTS`` says.

        Raises:
            RedisUnavailable: no node answers, or none serves the slot.
        """
        for server in self.servers:
            try:
                with server.client(socket_timeout=2, socket_connect_timeout=2) as client:
                    ranges = client.execute_command("CLUSTER SLOTS")
            except redis.RedisError:
                continue
            for first, last, primary, *_ in ranges:
                if int(first) <= slot <= int(last):
                    return self.server_on(int(primary[1]))
        raise RedisUnavailable(f"no node serves slot {slot}")

    def replica_of(self, master: RedisServer) -> RedisServer:
        """A node replicating ``master`` now (connected).

        Raises:
            RedisUnavailable: it has none.
        """
        with master.client(socket_timeout=2) as client:
            info = client.info("replication")
        for key, value in info.items():
            if key.startswith("slave") and isinstance(value, dict):
                return self.server_on(int(value["port"]))
        raise RedisUnavailable(f"the node on {master.port} has no replica")

    def server_on(self, port: int) -> RedisServer:
        """The node listening on ``port``."""
        for server in self.servers:
            if server.port == port:
                return server
        raise KeyError(port)

    def close(self) -> None:
        """Stop every node and remove their directories."""
        for server in self.replicas:
            server.close()
        self.masters.close()

    def _started(self) -> bool:
        return any(server.process is not None for server in self.servers)

    def __enter__(self) -> ReplicatedCluster:
        """Start it, unless it was started already (then the ``with`` block stops it)."""
        return self if self._started() else self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()
