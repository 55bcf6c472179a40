"""The three topologies a run can put its leases on (``fencedlease check --topology``), and the
Redis client a worker makes for each from its URL.

- ``standalone``: one redis-server (or ``--redis-url``); workers use ``redis://``;
- ``sentinel``: a primary, one replica and three sentinels
  ([`SentinelDeployment`][fencedlease_lab.servers.sentinel.SentinelDeployment]); workers use
  ``redis+sentinel://<sentinel>,<sentinel>,.../<service>`` and follow the primary the sentinels
  name (redis-py's ``Sentinel.master_for``);
- ``cluster``: three masters, each with a replica
  ([`ReplicatedCluster`][fencedlease_lab.servers.replicated_cluster.ReplicatedCluster]); workers
  use ``redis+cluster://<node>,...`` (redis-py's ``RedisCluster``, which follows ``MOVED``).

The failover faults on them are in [`faults_topology`][fencedlease_lab.harness.faults_topology].
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

if TYPE_CHECKING:
    from ..servers.redis import RedisServer

__all__ = [
    "Deployment",
    "async_lease_client",
    "check_topology",
    "lease_client",
    "noting_connects",
    "quick_sync",
    "split_url",
    "start_deployment",
]

#: How long the sentinels wait before they call a silent primary down (milliseconds); the
#: cluster's node timeout is the same.
DOWN_AFTER_MS = 1000


class Deployment:
    """A topology the check started: ``kind`` (``sentinel`` or ``cluster``), the deployment
    object (``servers``: a ``SentinelDeployment`` or a ``ReplicatedCluster``), the URL the
    workers use and the ``redis://`` URL of the node an admin connection starts on."""

    def __init__(self, kind: str, servers: Any, url: str, admin_url: str, version: str) -> None:
        self.kind = kind
        self.servers = servers
        self.url = url
        self.admin_url = admin_url
        self.version = version

    def describe(self) -> str:
        """One line for the report's ``redis`` field."""
        if self.kind == "sentinel":
            return (
                f"embedded Sentinel deployment, redis-server {self.version} (a primary, one"
                " replica, three sentinels)"
            )
        return (
            f"embedded Redis Cluster, redis-server {self.version} (three masters, a replica each)"
        )


def check_topology(
    topology: str, *, redis_url: str | None = None, replica_acks: int = 0, fencing: str = "counter"
) -> None:
    """A run's topology settings (a ``CheckConfig``'s fields of these names) that cannot work,
    refused before anything starts.

    Raises:
        ValueError: an unknown topology; ``redis_url`` with a topology the check starts;
            ``replica_acks`` below 0, or above 0 off ``sentinel`` (the only topology whose
            workers' store takes it), or above the deployment's one replica; ``fencing`` other
            than ``counter`` or ``clock``, or ``clock`` on ``cluster`` (the cluster store takes
            neither option).
    """
    if topology not in ("standalone", "sentinel", "cluster"):
        raise ValueError(f"topology must be standalone, sentinel or cluster; got {topology!r}")
    if topology != "standalone" and redis_url:
        raise ValueError(f"--topology {topology} starts its own servers: leave out --redis-url")
    if fencing not in ("counter", "clock"):
        raise ValueError(f"fencing must be counter or clock; got {fencing!r}")
    if not 0 <= replica_acks <= (1 if topology == "sentinel" else 0):
        raise ValueError(
            f"replica_acks must be 0 (or 1 with --topology sentinel: its one replica);"
            f" got {replica_acks} on {topology}"
        )
    if topology == "cluster" and fencing != "counter":
        raise ValueError("the cluster store makes counter tokens only: --fencing counter")


def quick_sync(server: RedisServer) -> None:
    """No wait before a full resynchronisation (``repl-diskless-sync-delay 0``; Redis waits 5 s
    by default for more replicas to share the transfer): a node back after a failover is a
    replica in sync in well under a second, not five.

    Raises:
        redis.RedisError: the server does not answer.
    """
    with server.client(socket_timeout=5) as client:
        client.config_set("repl-diskless-sync-delay", 0)


def start_deployment(kind: str, stack: ExitStack) -> Deployment:
    """Start a ``sentinel`` or ``cluster`` topology on loopback, entered on ``stack`` (stopped
    when the run ends).

    Raises:
        RedisUnavailable: no redis-server binary, or the deployment did not come up.
    """
    if kind == "sentinel":
        from ..servers.sentinel import SentinelDeployment

        sentinel = stack.enter_context(SentinelDeployment(replicas=1, down_after_ms=DOWN_AFTER_MS))
        for server in sentinel.servers:
            quick_sync(server)
        primary = sentinel.primary
        return Deployment(kind, sentinel, sentinel.url, primary.url, primary.version())
    if kind == "cluster":
        from ..servers.replicated_cluster import ReplicatedCluster

        cluster = stack.enter_context(ReplicatedCluster(3, node_timeout_ms=DOWN_AFTER_MS))
        for server in cluster.servers:
            quick_sync(server)
        first = cluster.masters.servers[0]
        return Deployment(kind, cluster, cluster.url, first.url, first.version())
    raise ValueError(f"topology must be standalone, sentinel or cluster; got {kind!r}")


def split_url(url: str) -> tuple[str, list[tuple[str, int]], str, dict[str, Any]]:
    """``(scheme, [(host, port), ...], path without its slash, auth)`` of a
    ``redis+sentinel://`` or ``redis+cluster://`` URL; ``auth`` holds ``username`` and
    ``password`` (None when absent).

    Raises:
        ValueError: a URL with no host or a port that is not a number.
    """
    parts = urlsplit(url)
    hosts_text = parts.netloc.rpartition("@")[2]
    hosts: list[tuple[str, int]] = []
    for item in hosts_text.split(","):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"a {parts.scheme} URL lists host:port pairs; got {item!r}")
        hosts.append((host, int(port)))
    auth: dict[str, Any] = {
        "username": unquote(parts.username) if parts.username else None,
        "password": unquote(parts.password) if parts.password else None,
    }
    return parts.scheme, hosts, parts.path.lstrip("/"), auth


Note = Callable[[], object]
"""Called as a connection of a worker's client starts connecting (see `noting_connects`)."""


def noting_connects(base: type[Any], note: Note) -> type[Any]:
    """A subclass of redis-py's connection class ``base`` (sync or asyncio) whose connections
    call ``note()`` each time one starts connecting: a new connection, or a dropped one made
    again. A worker records it in the history (``connect``): a connection made while a
    ``latency`` fault is in force pays redis-py's handshake (``CLIENT SETNAME``, ``CLIENT
    SETINFO``...: one round trip each) late by the fault's delay every time, which the checker
    counts as able to cost a lease, as it does a killed connection."""
    # Every path to a new socket (the pool's connect, a command sent on a connection dropped by
    # redis-py's retry) goes through ``_connect``: redis-py's socket step, in every version.
    if inspect.iscoroutinefunction(base._connect):

        class NotedAsync(base):  # type: ignore[misc]
            async def _connect(self) -> None:
                note()
                await super()._connect()

        return NotedAsync

    class Noted(base):  # type: ignore[misc]
        def _connect(self) -> Any:
            note()
            return super()._connect()

    return Noted


def _client(
    url: str, timeout_s: float, name: str, face: tuple[Any, ...], note: Note | None = None
) -> Any:
    """The client for ``url`` made of ``face``'s classes: ``(Sentinel, ClusterNode, Redis,
    RedisCluster, Retry, Connection)`` of redis-py's sync or asyncio face; a ``redis://``
    client's connections call ``note`` as they connect (`noting_connects`)."""
    sentinel_class, node_class, redis_class, cluster_class, retry_class, connection_class = face
    common: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "client_name": name,
    }
    scheme = urlsplit(url).scheme
    if scheme == "redis+sentinel":
        _, hosts, service, auth = split_url(url)
        sentinel = sentinel_class(hosts, sentinel_kwargs={"socket_timeout": timeout_s}, **auth)
        return sentinel.master_for(service, retry=retry_class(NoBackoff(), 1), **common)
    if scheme == "redis+cluster":
        _, hosts, _, auth = split_url(url)
        nodes = [node_class(host, port) for host, port in hosts]
        return cluster_class(startup_nodes=nodes, **auth, **common)
    if note is not None and scheme == "redis":
        common["connection_class"] = noting_connects(connection_class, note)
    return redis_class.from_url(url, retry=retry_class(NoBackoff(), 1), **common)


def lease_client(
    url: str, timeout_s: float, name: str, note: Note | None = None
) -> redis.Redis | redis.RedisCluster:
    """A worker's client: ``redis.Redis`` for ``redis://`` (one transparent retry on a dropped
    connection; ``note()`` called as each of its connections starts connecting, see
    [`noting_connects`][fencedlease_lab.harness.topology.noting_connects]), the primary the
    sentinels name for ``redis+sentinel://`` (the same retry), a ``RedisCluster`` for
    ``redis+cluster://``; every connection named ``name`` (``CLIENT SETNAME``), every command
    bounded by ``timeout_s`` seconds."""
    from redis.cluster import ClusterNode
    from redis.sentinel import Sentinel

    face = (Sentinel, ClusterNode, redis.Redis, redis.RedisCluster, Retry, redis.Connection)
    client: redis.Redis | redis.RedisCluster = _client(url, timeout_s, name, face, note)
    return client


def async_lease_client(
    url: str, timeout_s: float, name: str, note: Note | None = None
) -> redis.asyncio.Redis | redis.asyncio.RedisCluster:
    """[`lease_client`][fencedlease_lab.harness.topology.lease_client] for ``redis.asyncio``."""
    from redis.asyncio.cluster import ClusterNode
    from redis.asyncio.retry import Retry as AsyncRetry
    from redis.asyncio.sentinel import Sentinel

    face = (
        Sentinel, ClusterNode, redis.asyncio.Redis, redis.asyncio.RedisCluster, AsyncRetry,
        redis.asyncio.Connection,
    )  # fmt: skip
    client: redis.asyncio.Redis | redis.asyncio.RedisCluster = _client(
        url, timeout_s, name, face, note
    )
    return client
