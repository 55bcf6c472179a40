"""How the topology faults ([`faults_topology`][fencedlease_lab.harness.faults_topology]) find
the nodes and wait for a deployment to settle: the primary now and its replicas, a failover
asked for again while it is refused, a promotion, and the end of a fault (every replica in sync,
every sentinel or cluster node agreeing)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Final

import redis
from redis.crc import key_slot

from ..servers.redis import RedisServer
from .topology import REPLICAS, Deployment

__all__ = ["MANUAL_FAILOVER_S", "SWITCH_TIMEOUT_S", "TopologyWaits"]

#: The most seconds a failover (and the old primary's return as a replica) is waited for.
SWITCH_TIMEOUT_S: Final = 30.0

#: How long a replica tries a manual failover (``CLUSTER FAILOVER``) before it gives up in
#: silence: Redis's own limit, 5 s; it is then asked again.
MANUAL_FAILOVER_S: Final = 5.5


class TopologyWaits:
    """The nodes of ``deployment`` (the check's own) and the waits on them; ``first_key``: a
    Redis key of the run's first lease (on a cluster, the faults act on the master of its
    slot)."""

    def __init__(self, deployment: Deployment, first_key: str) -> None:
        self.deployment = deployment
        self.slot = key_slot(first_key.encode())

    def primary(self) -> RedisServer:
        """The primary now: the sentinels' (sentinel) or the first key's master (cluster)."""
        servers = self.deployment.servers
        if self.deployment.kind == "sentinel":
            return servers.server_on(servers.primary_port())  # type: ignore[no-any-return]
        return servers.master_of(self.slot)  # type: ignore[no-any-return]

    def replicas(self, primary: RedisServer) -> list[RedisServer]:
        """The servers replicating ``primary`` now (connected)."""
        with primary.client(socket_timeout=2) as client:
            info = client.info("replication")
        ports = [
            int(value["port"])
            for key, value in info.items()
            if key.startswith("slave") and isinstance(value, dict)
        ]
        return [self.deployment.servers.server_on(port) for port in ports]

    def _failover(self) -> None:
        """``SENTINEL FAILOVER``, asked again while the sentinels answer ``NOGOODSLAVE``: they
        take a replica for a candidate only once they have seen it linked and in sync (its
        ``INFO``, which they read every second or ten), so one that just caught up may not be
        one yet.

        Raises:
            redis.ResponseError: another refusal, or ``NOGOODSLAVE`` still after
                `SWITCH_TIMEOUT_S`.
        """
        give_up = time.monotonic() + SWITCH_TIMEOUT_S
        while True:
            try:
                self.deployment.servers.failover()
                return
            except redis.ResponseError as exc:
                if "NOGOODSLAVE" not in str(exc) or time.monotonic() > give_up:
                    raise
            time.sleep(0.1)

    def _wait_link_down(self, ports: list[int]) -> None:
        """Until each replica on ``ports`` says its link to the primary is down."""
        give_up = time.monotonic() + SWITCH_TIMEOUT_S
        for port in ports:
            with self.deployment.servers.server_on(port).client(socket_timeout=2) as client:
                while client.info("replication").get("master_link_status") != "down":
                    if time.monotonic() > give_up:
                        raise TimeoutError(f"the replica on {port} still links to the primary")
                    time.sleep(0.01)

    def _wait_demotion_refused(self, server: RedisServer, stop: threading.Event) -> int | None:
        """Until ``server``'s ``ACL LOG`` shows a refused ``REPLICAOF``/``SLAVEOF`` (the
        sentinels tried to demote it: they do so once it has reported its role for 8 s); the
        milliseconds waited, None when none came."""
        began = time.monotonic()
        with server.client(socket_timeout=2, decode_responses=True) as client:
            while time.monotonic() - began < SWITCH_TIMEOUT_S:
                for entry in client.acl_log():
                    if str(entry.get("object", "")).lower() in ("replicaof", "slaveof"):
                        return round((time.monotonic() - began) * 1000)
                if stop.wait(0.1):
                    break
        return None

    def _wait_promoted(
        self,
        candidates: list[RedisServer],
        skip: RedisServer | None = None,
        again: Callable[[], None] | None = None,
    ) -> RedisServer:
        """Until one of ``candidates`` serves the first key's slot (as the nodes but ``skip``, a
        dead or stopped one, say); that one. ``again`` (asking for the failover) is called each
        `MANUAL_FAILOVER_S` until then: a manual failover the replica gave up on (its master did
        not answer, or it did not catch up in time) ends in silence."""
        cluster = self.deployment.servers
        ports = {server.port for server in candidates}
        now = time.monotonic()
        give_up, ask = now + SWITCH_TIMEOUT_S, now + MANUAL_FAILOVER_S
        while True:
            port = cluster.master_of(self.slot, skip=() if skip is None else (skip.port,)).port
            if port in ports:
                return cluster.server_on(port)  # type: ignore[no-any-return]
            if time.monotonic() > give_up:
                raise TimeoutError(f"no failover to {sorted(ports)} in {SWITCH_TIMEOUT_S} s")
            if again is not None and time.monotonic() > ask:
                again()
                ask = time.monotonic() + MANUAL_FAILOVER_S
            time.sleep(0.05)

    def _wait_replica_of(self, primary: RedisServer, replica: RedisServer) -> None:
        """Until ``replica`` and every other replica the topology gives a primary
        (`REPLICAS`) replicate ``primary`` in sync (``state=online``), on Cluster until every
        node names it (`_nodes_agree`), and on Sentinel until every sentinel agrees
        (`_sentinels_agree`): a failover the sentinels have not ended yet
        may still reconfigure a replica, and its new full sync leaves too few replicas to
        acknowledge a grant meanwhile; a replica they have not seen yet is no candidate for the
        next failover (``NOGOODSLAVE``)."""
        wanted = REPLICAS[self.deployment.kind]
        give_up = time.monotonic() + SWITCH_TIMEOUT_S
        while True:
            with contextlib.suppress(redis.RedisError), primary.client(socket_timeout=2) as client:
                info = client.info("replication")
                online = {
                    int(value["port"])
                    for key, value in info.items()
                    if key.startswith("slave")
                    and isinstance(value, dict)
                    and value.get("state") == "online"
                }
                if (
                    replica.port in online
                    and len(online) >= wanted
                    and self._sentinels_agree(primary, online)
                    and self._nodes_agree(primary)
                ):
                    return
            if time.monotonic() > give_up:
                raise TimeoutError(
                    f"{replica.port} (and {wanted} replicas in all) not replicating"
                    f" {primary.port} in {SWITCH_TIMEOUT_S} s"
                )
            time.sleep(0.05)

    def _nodes_agree(self, primary: RedisServer) -> bool:
        """Whether every node of the cluster names ``primary`` the master of the first key's
        slot (True off Cluster): until then a grant may be refused for an epoch a node has not
        heard of yet, which would count against the recovery from the fault.

        Raises:
            redis.RedisError: a node did not answer.
        """
        if self.deployment.kind != "cluster":
            return True
        for server in self.deployment.servers.servers:
            with server.client(socket_timeout=2, socket_connect_timeout=2) as client:
                ranges = client.execute_command("CLUSTER SLOTS")
            owners = [int(p[1]) for first, last, p, *_ in ranges if first <= self.slot <= last]
            if owners != [primary.port]:
                return False
        return True

    def _sentinels_agree(self, primary: RedisServer, replicas: set[int]) -> bool:
        """Whether every sentinel names ``primary``, has no failover of it in progress, and sees
        each replica on the ports ``replicas`` up and linked to it (True off Sentinel).

        Raises:
            redis.RedisError: a sentinel did not answer.
        """
        if self.deployment.kind != "sentinel":
            return True
        sentinels = self.deployment.servers
        for index in range(len(sentinels.sentinel_ports)):
            with sentinels.sentinel_client(index, socket_timeout=2) as client:
                master = client.sentinel_master(sentinels.service)
            flags = str(master.get("flags", ""))
            if int(master.get("port", 0)) != primary.port or "failover_in_progress" in flags:
                return False
            seen = sentinels.replicas_seen(index)
            for port in replicas:
                one = seen.get(port)
                if (
                    one is None
                    or int(one.get("master-port", 0)) != primary.port
                    or one.get("master-link-status") != "ok"
                    or {"s_down", "o_down", "disconnected"} & set(one["flags"].split(","))
                ):
                    return False
        return True
