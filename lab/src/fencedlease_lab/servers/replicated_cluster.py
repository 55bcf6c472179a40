"""A Redis Cluster with replicas of each master, for the harness's failover faults: the masters
of [`RedisClusterServers`][fencedlease_lab.servers.cluster.RedisClusterServers], then
``replicas`` more nodes per master (one by default), each joined with ``CLUSTER MEET`` and made
the master's replica with ``CLUSTER REPLICATE``.

```
with ReplicatedCluster(3, node_timeout_ms=2000) as cluster:
    cluster.url                       # redis+cluster://... (every master a start node)
    cluster.master_of(slot)           # the server that serves the slot now
    cluster.replica_of(server)        # a server replicating it now
```

``node_timeout_ms`` is every node's ``cluster-node-timeout``: a master silent that long is failed
over to one of its replicas (the unplanned failover of ``cluster-kill-master``).
"""

from __future__ import annotations

import time
from collections.abc import Collection

import redis

from .cluster import RedisClusterServers, cluster_port
from .redis import RedisServer, RedisUnavailable

__all__ = ["ReplicatedCluster"]


class ReplicatedCluster:
    """``masters`` masters (the slots split evenly), each with ``replicas`` replicas; started on
    entry, every node stopped on exit.

    Raises:
        ValueError: fewer than one replica per master.
        RedisUnavailable: no binary, a node that does not start, or replicas not in sync within
            ``timeout_s`` of ``start``.
    """

    def __init__(
        self,
        masters: int = 3,
        *,
        binary: str | None = None,
        node_timeout_ms: int = 2000,
        replicas: int = 1,
    ) -> None:
        if replicas < 1:
            raise ValueError(f"replicas must be at least 1 per master; got {replicas}")
        self.masters = RedisClusterServers(masters, binary=binary, node_timeout_ms=node_timeout_ms)
        self.replicas_per_master = replicas
        args = self.masters.servers[0].extra_args
        taken = {p for s in self.masters.servers for p in (s.port, s.port + 10000)}
        # Master i's replicas are replicas[i], replicas[i + masters], ...
        self.replicas = [
            RedisServer(binary, port=cluster_port(taken), extra_args=args)
            for _ in range(masters * replicas)
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
        """Start the masters, then their replicas; wait until every replica is in sync.

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
            masters = self.masters.servers
            for index, replica in enumerate(self.replicas):
                with masters[index % len(masters)].client(socket_timeout=5) as client:
                    master_id = client.execute_command("CLUSTER MYID")
                self._replicate(replica, master_id, give_up)
            for master in masters:
                self._wait_replica(master, self.replicas_per_master, give_up)
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
    def _wait_replica(master: RedisServer, count: int, give_up: float) -> None:
        """Until ``count`` replicas of ``master`` are in sync."""
        with master.client(socket_timeout=5) as client:
            while True:
                info = client.info("replication")
                replicas = [v for k, v in info.items() if k.startswith("slave")]
                online = [v for v in replicas if isinstance(v, dict) and v.get("state") == "online"]
                if len(online) >= count:
                    return
                if time.monotonic() > give_up:
                    raise RedisUnavailable(f"not {count} replicas of {master.port} in sync")
                time.sleep(0.05)

    def role(self, server: RedisServer) -> str:
        """``master`` or ``slave`` as ``server`` says now (``down`` when it does not answer)."""
        try:
            with server.client(socket_timeout=2, socket_connect_timeout=2) as client:
                return str(client.info("replication")["role"])
        except redis.RedisError:
            return "down"

    def master_of(self, slot: int, *, skip: Collection[int] = ()) -> RedisServer:
        """The node serving ``slot`` now, as the first answering node's ``CLUSTER SLOTS`` says;
        the nodes on the ports ``skip`` are not asked (a stopped node would answer nothing, each
        time after a timeout).

        Raises:
            RedisUnavailable: no node answers, or none serves the slot.
        """
        for server in self.servers:
            if server.port in skip:
                continue
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
