"""The faults of the replicated topologies (``--topology sentinel`` or ``cluster``): a replica
that lags, a planned and an unplanned failover, and a primary deposed without knowing it.

Redis replicates asynchronously: a write the primary acknowledged may not have reached any
replica when a replica is promoted, and is then gone (the Redis replication and Sentinel
documentation say so; Kleppmann, "How to do distributed locking", 2016, draws the consequence for
locks). A fencing counter that loses its last increments hands out the same tokens again: the
checker's property ``d`` (grant-tokens) reports those duplicate grants and the tokens that went
down. ``replica_acks`` (``WAIT`` after each grant and renewal) or ``fencing="clock"`` are the
library's answers; the control pair in ``docs/harness.md`` shows both sides.

- ``replica-lag``: ``CLIENT PAUSE <ms> WRITE`` on the replicas (of the master that serves the
  run's first key, on a cluster): they keep answering the sentinels, but stop applying the
  primary's stream until the pause ends;
- ``sentinel-failover``: ``SENTINEL FAILOVER``, then until the old primary is a replica in sync;
- ``sentinel-kill-primary``: ``kill -9`` of the primary; the sentinels promote the replica after
  ``down-after-milliseconds``; the old primary is started again (empty) and made a replica;
- ``lag-failover``: ``replica-lag``, and one ttl into it the primary killed; the replica is
  resumed as soon as its link is down (the stream it had not applied goes with the link), so
  the promoted replica missed what the primary granted during that ttl;
- ``deposed-primary``: the primary's default user loses ``REPLICAOF``/``SLAVEOF`` (``ACL
  SETUSER``), then ``SENTINEL FAILOVER``: the sentinels promote the replica but cannot demote
  the old primary, which stays writable for the workers still connected to it; once the
  sentinels' demotion was refused (``ACL LOG``) it stays so for the fault's duration more; then
  the right is given back and the sentinels demote it. (A plain ``sentinel-failover`` leaves the
  old primary writable too, until the sentinels demote it: they wait until it has reported its
  role for 8 s, so about ten seconds.)
- ``cluster-failover``: ``CLUSTER FAILOVER`` on the replica of the first key's master;
- ``cluster-kill-master``: ``kill -9`` of that master; its replica takes over after the node
  timeout; the old master is started again and rejoins as a replica.

Each returns the ``detail`` fields of its history event (ports, how long the switch took) and
undoes its own doing; [`heal_all`][fencedlease_lab.harness.faults_topology.TopologyFaults.heal_all]
undoes whatever is still in force.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Final

import redis
from redis.crc import key_slot

from ..servers.redis import RedisServer
from .topology import Deployment, quick_sync

__all__ = ["SWITCH_TIMEOUT_S", "TopologyFaults"]

#: The most seconds a failover (and the old primary's return as a replica) is waited for.
SWITCH_TIMEOUT_S: Final = 30.0


class TopologyFaults:
    """The topology faults on ``deployment`` (the check's own); ``first_key``: a Redis key of the
    run's first lease (the cluster faults act on the master that serves its slot)."""

    def __init__(self, deployment: Deployment, first_key: str) -> None:
        self.deployment = deployment
        self.slot = key_slot(first_key.encode())
        self._lock = threading.Lock()
        self._paused: set[int] = set()  # ports of replicas under CLIENT PAUSE
        self._acl: set[int] = set()  # ports of servers whose default user lost REPLICAOF
        self._killed: dict[int, RedisServer] = {}  # killed, not yet started again

    # -- finding the nodes ----------------------------------------------------------------------

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

    # -- the faults -----------------------------------------------------------------------------

    def run(
        self, kind: str, duration_s: float, ttl_s: float, stop: threading.Event
    ) -> dict[str, Any]:
        """Inject ``kind`` for ``duration_s`` seconds (the failovers: until they are done);
        the detail of its history event."""
        action = getattr(self, "_" + kind.replace("-", "_"))
        detail: dict[str, Any] = action(duration_s, ttl_s, stop)
        return detail

    def _replica_lag(
        self, duration_s: float, ttl_s: float, stop: threading.Event
    ) -> dict[str, Any]:
        primary = self.primary()
        paused = self._pause_replicas(primary, duration_s)
        try:
            stop.wait(duration_s)
        finally:
            self._unpause(paused)
        return {"primary": primary.port, "paused": paused}

    def _sentinel_failover(
        self, duration_s: float, ttl_s: float, stop: threading.Event
    ) -> dict[str, Any]:
        sentinel = self.deployment.servers
        old = self.primary()
        began = time.monotonic()
        with sentinel.watch_switch() as watch:
            sentinel.failover()
            new = watch.wait(SWITCH_TIMEOUT_S)
        switched = time.monotonic() - began
        self._wait_replica_of(sentinel.server_on(new), old)
        return {"old_primary": old.port, "new_primary": new, "switch_ms": round(switched * 1000)}

    def _sentinel_kill_primary(
        self, duration_s: float, ttl_s: float, stop: threading.Event
    ) -> dict[str, Any]:
        return self._kill_primary(0.0, 0.0, stop)

    def _lag_failover(
        self, duration_s: float, ttl_s: float, stop: threading.Event
    ) -> dict[str, Any]:
        return self._kill_primary(duration_s, ttl_s, stop)

    def _kill_primary(
        self, lag_s: float, kill_after_s: float, stop: threading.Event
    ) -> dict[str, Any]:
        """Kill the primary (``kill_after_s`` into a lag of ``lag_s`` on its replicas, when
        ``lag_s``), wait for the switch, start the old one again and wait until it is a replica
        in sync."""
        sentinel = self.deployment.servers
        old = self.primary()
        paused = self._pause_replicas(old, lag_s) if lag_s else []
        try:
            if stop.wait(kill_after_s):
                return {"old_primary": old.port, "paused": paused, "killed": False}
            began = time.monotonic()
            with sentinel.watch_switch() as watch:
                with self._lock:
                    old.kill()
                    self._killed[old.port] = old
                # Resumed once their link is down: what they had not applied is dropped with
                # it, and a paused replica would hold the promotion up.
                self._wait_link_down(paused)
                self._unpause(paused)
                new = watch.wait(SWITCH_TIMEOUT_S)
            switched = time.monotonic() - began
            # Started as the new primary's replica, as a restarted node whose configuration
            # the sentinels rewrote would be (they themselves demote a returning primary only
            # after it has reported its role for 8 s).
            self._start_killed(replica_of=new)
        finally:
            self._unpause(paused)
            self._start_killed()
        self._wait_replica_of(sentinel.server_on(new), old)
        return {
            "old_primary": old.port,
            "new_primary": new,
            "paused": paused,
            "switch_ms": round(switched * 1000),
        }

    def _deposed_primary(
        self, duration_s: float, ttl_s: float, stop: threading.Event
    ) -> dict[str, Any]:
        sentinel = self.deployment.servers
        old = self.primary()
        with self._lock, old.client(socket_timeout=2) as client:
            client.execute_command("ACL", "SETUSER", "default", "-replicaof", "-slaveof")
            self._acl.add(old.port)
        try:
            began = time.monotonic()
            with sentinel.watch_switch() as watch:
                sentinel.failover()
                new = watch.wait(SWITCH_TIMEOUT_S)
            switched = time.monotonic() - began
            refused = self._wait_demotion_refused(old, stop)
            with old.client(socket_timeout=2) as client:
                role = str(client.info("replication")["role"])
            stop.wait(duration_s)
        finally:
            self._restore_acl(old)
        self._wait_replica_of(sentinel.server_on(new), old)
        return {
            "old_primary": old.port,
            "new_primary": new,
            "old_role_after_switch": role,
            "switch_ms": round(switched * 1000),
            "demotion_refused_ms": refused,
        }

    def _cluster_failover(
        self, duration_s: float, ttl_s: float, stop: threading.Event
    ) -> dict[str, Any]:
        old = self.primary()
        replica = self.replicas(old)[0]
        began = time.monotonic()
        with replica.client(socket_timeout=5) as client:
            client.execute_command("CLUSTER FAILOVER")
        self._wait_master(replica)
        switched = time.monotonic() - began
        self._wait_replica_of(replica, old)
        return {
            "old_master": old.port,
            "new_master": replica.port,
            "switch_ms": round(switched * 1000),
        }

    def _cluster_kill_master(
        self, duration_s: float, ttl_s: float, stop: threading.Event
    ) -> dict[str, Any]:
        old = self.primary()
        replica = self.replicas(old)[0]
        began = time.monotonic()
        try:
            with self._lock:
                old.kill()
                self._killed[old.port] = old
            self._wait_master(replica)
            switched = time.monotonic() - began
        finally:
            self._start_killed()
        self._wait_replica_of(replica, old)
        return {
            "old_master": old.port,
            "new_master": replica.port,
            "switch_ms": round(switched * 1000),
        }

    # -- helpers --------------------------------------------------------------------------------

    def _pause_replicas(self, primary: RedisServer, duration_s: float) -> list[int]:
        """``CLIENT PAUSE`` (writes) every replica of ``primary`` for ``duration_s`` (it ends by
        itself too, should the run die); their ports."""
        ports = []
        for replica in self.replicas(primary):
            with self._lock, replica.client(socket_timeout=2) as client:
                client.execute_command("CLIENT", "PAUSE", round(duration_s * 1000), "WRITE")
                self._paused.add(replica.port)
            ports.append(replica.port)
        return ports

    def _unpause(self, ports: list[int]) -> None:
        for port in ports:
            with self._lock:
                if port not in self._paused:
                    continue
                self._paused.discard(port)
                with (
                    contextlib.suppress(redis.RedisError),
                    self.deployment.servers.server_on(port).client(socket_timeout=2) as client,
                ):
                    client.execute_command("CLIENT", "UNPAUSE")

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

    def _restore_acl(self, server: RedisServer) -> None:
        with self._lock:
            if server.port not in self._acl:
                return
            self._acl.discard(server.port)
            with contextlib.suppress(redis.RedisError), server.client(socket_timeout=2) as client:
                client.execute_command("ACL", "SETUSER", "default", "+@all")

    def _start_killed(self, replica_of: int | None = None) -> None:
        """Start every killed node again (``REPLICAOF 127.0.0.1 <replica_of>`` when given)."""
        with self._lock:
            killed, self._killed = list(self._killed.values()), {}
        for server in killed:
            server.start()
            quick_sync(server)
            if replica_of is not None:
                with server.client(socket_timeout=5) as client:
                    client.replicaof("127.0.0.1", replica_of)

    def _wait_master(self, server: RedisServer) -> None:
        """Until ``server`` serves the first key's slot."""
        give_up = time.monotonic() + SWITCH_TIMEOUT_S
        while self.deployment.servers.master_of(self.slot).port != server.port:
            if time.monotonic() > give_up:
                raise TimeoutError(f"no failover to {server.port} in {SWITCH_TIMEOUT_S} s")
            time.sleep(0.05)

    def _wait_replica_of(self, primary: RedisServer, replica: RedisServer) -> None:
        """Until ``replica`` replicates ``primary`` and is in sync (``state=online``), and on
        Sentinel until every sentinel agrees (`_sentinels_agree`): a failover the sentinels
        have not ended yet may still reconfigure the replica, and its new full sync (after
        ``repl-diskless-sync-delay``, 5 s) leaves no replica to acknowledge a grant meanwhile;
        a replica they have not seen yet is no candidate for the next failover
        (``NOGOODSLAVE``)."""
        give_up = time.monotonic() + SWITCH_TIMEOUT_S
        while True:
            with contextlib.suppress(redis.RedisError), primary.client(socket_timeout=2) as client:
                info = client.info("replication")
                for key, value in info.items():
                    if (
                        key.startswith("slave")
                        and isinstance(value, dict)
                        and int(value["port"]) == replica.port
                        and value.get("state") == "online"
                        and self._sentinels_agree(primary, replica)
                    ):
                        return
            if time.monotonic() > give_up:
                raise TimeoutError(
                    f"{replica.port} not a replica of {primary.port} in {SWITCH_TIMEOUT_S} s"
                )
            time.sleep(0.05)

    def _sentinels_agree(self, primary: RedisServer, replica: RedisServer) -> bool:
        """Whether every sentinel names ``primary``, has no failover of it in progress, and sees
        ``replica`` up and linked to it (True off Sentinel).

        Raises:
            redis.RedisError: a sentinel did not answer.
        """
        if self.deployment.kind != "sentinel":
            return True
        sentinels = self.deployment.servers
        for index in range(len(sentinels.sentinel_ports)):
            with sentinels.sentinel_client(index, socket_timeout=2) as client:
                master = client.sentinel_master(sentinels.service)
                seen = client.sentinel_slaves(sentinels.service)
            flags = str(master.get("flags", ""))
            if int(master.get("port", 0)) != primary.port or "failover_in_progress" in flags:
                return False
            if not any(
                int(one.get("port", 0)) == replica.port
                and int(one.get("master-port", 0)) == primary.port
                and one.get("master-link-status") == "ok"
                and not {"s_down", "o_down", "disconnected"} & set(str(one["flags"]).split(","))
                for one in seen
            ):
                return False
        return True

    def heal_all(self) -> None:
        """Unpause the replicas, give the default user its rights back, start what was killed.
        Idempotent; every step is tried."""
        self._unpause(list(self._paused))
        for port in list(self._acl):
            with contextlib.suppress(Exception):
                self._restore_acl(self.deployment.servers.server_on(port))
        with contextlib.suppress(Exception):
            self._start_killed()
