"""The faults of the replicated topologies (``--topology sentinel`` or ``cluster``): a replica
that lags, planned, forced and unplanned failovers, a preferred replica that lagged, a stalled
master, and a primary deposed without knowing it.

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
- ``priority-inversion``: ``lag-failover`` with the pause on one replica only, the one of the
  best ``replica-priority`` (made so first when two share it): the sentinels rank replicas by
  priority before replication offset, so they promote the one that lagged over the one that
  kept up, and what the primary acknowledged in that ttl is gone;
- ``cluster-failover``: ``CLUSTER FAILOVER`` on a replica of the first key's master;
  ``cluster-failover-force``: ``CLUSTER FAILOVER FORCE`` (no catch-up with the master first);
  ``cluster-takeover``: ``CLUSTER FAILOVER TAKEOVER`` (a new epoch without a vote);
- ``cluster-kill-master``: ``kill -9`` of that master; a replica takes over after the node
  timeout; the old master is started again and rejoins as a replica;
- ``cluster-stall``: SIGSTOP of that master until a replica took over (past the node timeout),
  then SIGCONT: it wakes a master of an old epoch and rejoins as a replica.

Each returns the ``detail`` fields of its history event (ports, how long the switch took) and
undoes its own doing; [`heal_all`][fencedlease_lab.harness.faults_topology.TopologyFaults.heal_all]
undoes whatever is still in force.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import redis

from ..servers.redis import RedisServer
from .topology import Deployment, quick_sync
from .topology_waits import SWITCH_TIMEOUT_S, TopologyWaits

__all__ = ["SWITCH_TIMEOUT_S", "TopologyFaults"]


class TopologyFaults(TopologyWaits):
    """The topology faults on ``deployment`` (the check's own); ``first_key``: a Redis key of the
    run's first lease (the cluster faults act on the master that serves its slot). Finding the
    nodes and waiting for them:
    [`TopologyWaits`][fencedlease_lab.harness.topology_waits.TopologyWaits]."""

    def __init__(self, deployment: Deployment, first_key: str) -> None:
        super().__init__(deployment, first_key)
        self._lock = threading.Lock()
        self._paused: set[int] = set()  # ports of replicas under CLIENT PAUSE
        self._acl: set[int] = set()  # ports of servers whose default user lost REPLICAOF
        self._killed: dict[int, RedisServer] = {}  # killed, not yet started again
        self._stalled: dict[int, RedisServer] = {}  # stopped (SIGSTOP), not yet resumed

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
        # Over when the replicas have caught up and the sentinels see them so again: a failover
        # asked for before then finds no replica to promote (NOGOODSLAVE).
        self._wait_replica_of(primary, self.deployment.servers.server_on(paused[0]))
        return {"primary": primary.port, "paused": paused}

    def _sentinel_failover(
        self, duration_s: float, ttl_s: float, stop: threading.Event
    ) -> dict[str, Any]:
        sentinel = self.deployment.servers
        old = self.primary()
        began = time.monotonic()
        with sentinel.watch_switch() as watch:
            self._failover()
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

    def _priority_inversion(
        self, duration_s: float, ttl_s: float, stop: threading.Event
    ) -> dict[str, Any]:
        old = self.primary()
        preferred, priorities = self._prefer_one(old)
        detail = self._kill_primary(duration_s, ttl_s, stop, lagging=preferred)
        return {**detail, "lagging": preferred.port, "priorities": priorities}

    def _prefer_one(self, primary: RedisServer) -> tuple[RedisServer, dict[str, int]]:
        """The replica of ``primary`` the sentinels would promote first (the lowest
        ``replica-priority`` they see), made so when two share the lowest (the check's own
        deployment gives each server a priority of its own, so only one changed by hand): one
        of them is given a lower priority and every sentinel waits to see it. With the
        priorities by port."""
        sentinels = self.deployment.servers
        replicas = self.replicas(primary)
        seen = sentinels.replicas_seen(0)
        priorities = {r.port: int(seen[r.port]["slave-priority"]) for r in replicas}
        best = min(priorities.values())
        preferred = [r for r in replicas if priorities[r.port] == best]
        if len(preferred) > 1:
            best = max(1, best - 1)
            sentinels.set_replica_priority(preferred[0], best)
            priorities[preferred[0].port] = best
        return preferred[0], {str(port): value for port, value in sorted(priorities.items())}

    def _kill_primary(
        self,
        lag_s: float,
        kill_after_s: float,
        stop: threading.Event,
        lagging: RedisServer | None = None,
    ) -> dict[str, Any]:
        """Kill the primary (``kill_after_s`` into a lag of ``lag_s`` on its replicas, or on
        ``lagging`` alone when given, when ``lag_s``), wait for the switch, start the old one
        again and wait until it is a replica in sync."""
        sentinel = self.deployment.servers
        old = self.primary()
        paused = []
        if lag_s:
            paused = self._pause(lagging, lag_s) if lagging else self._pause_replicas(old, lag_s)
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
                self._failover()
                new = watch.wait(SWITCH_TIMEOUT_S)
            switched = time.monotonic() - began
            refused = self._wait_demotion_refused(old, stop)
            with old.client(socket_timeout=2) as client:
                role = str(client.info("replication")["role"])
            stop.wait(2 * ttl_s)
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
        return self._manual_failover(())

    def _cluster_failover_force(
        self, duration_s: float, ttl_s: float, stop: threading.Event
    ) -> dict[str, Any]:
        return self._manual_failover(("FORCE",))

    def _cluster_takeover(
        self, duration_s: float, ttl_s: float, stop: threading.Event
    ) -> dict[str, Any]:
        return self._manual_failover(("TAKEOVER",))

    def _manual_failover(self, option: tuple[str, ...]) -> dict[str, Any]:
        """``CLUSTER FAILOVER [FORCE|TAKEOVER]`` on a replica of the first key's master: plain,
        the master stops its clients until the replica has caught up; ``FORCE``, the replica
        asks for the vote without that handshake (what the master wrote meanwhile may be lost);
        ``TAKEOVER``, it takes a new epoch without any vote."""
        old = self.primary()
        replica = self.replicas(old)[0]
        began = time.monotonic()

        def ask() -> None:
            with replica.client(socket_timeout=5) as client:
                client.execute_command("CLUSTER FAILOVER", *option)

        ask()
        self._wait_promoted([replica], again=ask)
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
        return self._replace_master(stall=False)

    def _cluster_stall(
        self, duration_s: float, ttl_s: float, stop: threading.Event
    ) -> dict[str, Any]:
        return self._replace_master(stall=True)

    def _replace_master(self, *, stall: bool) -> dict[str, Any]:
        """``kill -9`` of the first key's master, or its SIGSTOP (``stall``), until one of its
        replicas took over (past the node timeout); then the old one is started again, or
        resumed: it comes back a master of an old epoch, learns of the new one and becomes its
        replica (a stalled one may still answer the clients it had until then)."""
        old = self.primary()
        candidates = self.replicas(old)
        began = time.monotonic()
        try:
            with self._lock:
                if stall:
                    old.pause()
                    self._stalled[old.port] = old
                else:
                    old.kill()
                    self._killed[old.port] = old
            new = self._wait_promoted(candidates, skip=old)
            switched = time.monotonic() - began
        finally:
            self._resume_stalled()
            self._start_killed()
        self._wait_replica_of(new, old)
        return {
            "old_master": old.port,
            "new_master": new.port,
            "switch_ms": round(switched * 1000),
        }

    # -- helpers --------------------------------------------------------------------------------

    def _pause_replicas(self, primary: RedisServer, duration_s: float) -> list[int]:
        """``CLIENT PAUSE`` (writes) every replica of ``primary`` for ``duration_s`` (it ends by
        itself too, should the run die); their ports."""
        ports = []
        for replica in self.replicas(primary):
            ports += self._pause(replica, duration_s)
        return ports

    def _pause(self, replica: RedisServer, duration_s: float) -> list[int]:
        """``CLIENT PAUSE`` (writes) ``replica`` for ``duration_s``; ``[its port]``."""
        with self._lock, replica.client(socket_timeout=2) as client:
            client.execute_command("CLIENT", "PAUSE", round(duration_s * 1000), "WRITE")
            self._paused.add(replica.port)
        return [replica.port]

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

    def _resume_stalled(self) -> None:
        """SIGCONT every stopped node."""
        with self._lock:
            stalled, self._stalled = list(self._stalled.values()), {}
        for server in stalled:
            server.resume()

    def heal_all(self) -> None:
        """Unpause the replicas, resume what was stopped, give the default user its rights
        back, start what was killed. Idempotent; every step is tried."""
        self._unpause(list(self._paused))
        with contextlib.suppress(Exception):
            self._resume_stalled()
        for port in list(self._acl):
            with contextlib.suppress(Exception):
                self._restore_acl(self.deployment.servers.server_on(port))
        with contextlib.suppress(Exception):
            self._start_killed()
