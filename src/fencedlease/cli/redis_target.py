"""The Redis an operator's URL names, reached as the application's leases reach it: ``redis://``,
``rediss://`` and ``unix://`` (one server), ``redis+sentinel://`` (the primary the sentinels name
now) and ``redis+cluster://`` / ``rediss+cluster://`` (every primary of the cluster). The clients
are the library's own, made by [`LeaseManager.from_url`][fencedlease.LeaseManager.from_url], so
``fencedlease doctor``, ``list``, ``inspect`` and ``release`` see what the leases would.

On a cluster the keys of one name share a hash slot (the escaped name is their hash tag,
``docs/reference/key-layout.md``), so every command about one name runs on the one primary
serving that slot (`RedisTarget.client_for`): ``MULTI`` and ``WATCH`` work there as on a single
server. A walk over the keys (``SCAN``) visits every primary (`RedisTarget.primaries`): one node
holds only its own shards' keys.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final, Literal

import attrs
import redis

from fencedlease import (
    LeaseManager,
    RedisBackend,
    RedisClusterBackend,
    ValidationError,
    redact_text,
)
from fencedlease import redis_keys as layout

__all__ = ["REDIS_URL_SCHEMES", "RedisTarget", "open_target"]

REDIS_URL_SCHEMES: Final = (
    "redis",
    "rediss",
    "unix",
    "redis+sentinel",
    "redis+cluster",
    "rediss+cluster",
)
"""The URL schemes the operator's commands take: the library's Redis URLs (``memory://`` and
``sqlite://`` stores live inside the application's process or file, out of an operator's reach)."""

#: Seconds a command waits to connect and for each reply: an operator tool gives up, it never hangs.
TIMEOUT_S: Final = 5.0


@attrs.frozen
class RedisTarget:
    """The store behind a URL: ``manager`` (a [`LeaseManager`][fencedlease.LeaseManager] with
    the command's prefix) and ``kind``, ``"server"``, ``"sentinel"`` or ``"cluster"``."""

    manager: LeaseManager
    kind: Literal["server", "sentinel", "cluster"]

    def primaries(self) -> list[tuple[str, redis.Redis]]:
        """Each primary holding keys, as ``(name, client)``: a cluster's primaries by
        ``host:port`` (from the client's slot map), else the one server (name ``""``).

        Raises:
            redis.RedisError: the cluster client cannot read its slot map.
        """
        backend = self.manager.backend
        if isinstance(backend, RedisClusterBackend):
            nodes: list[Any] = backend.cluster.get_primaries()  # type: ignore[no-untyped-call]
            return [(str(n.name), n.redis_connection) for n in sorted(nodes, key=lambda n: n.name)]
        assert isinstance(backend, RedisBackend)
        return [("", backend.client)]

    def replicas(self) -> list[tuple[str, redis.Redis]]:
        """Each replica of a cluster's primaries as ``(host:port, client)``, from the client's
        slot map, sorted by name; none for a server or Sentinel (the sentinels list those:
        `fencedlease.cli.doctor_targets`)."""
        backend = self.manager.backend
        if not isinstance(backend, RedisClusterBackend):
            return []
        nodes: list[Any] = backend.cluster.get_replicas()  # type: ignore[no-untyped-call]
        return [(str(n.name), n.redis_connection) for n in sorted(nodes, key=lambda n: n.name)]

    def walk(self) -> list[tuple[str, redis.Redis]]:
        """The `primaries` to ``SCAN`` for every key: refused for one node of a cluster, whose
        walk would silently see only its own shards' keys.

        Raises:
            ValidationError: a ``redis://`` URL naming a node of a Redis Cluster.
            redis.RedisError: the server or the cluster client failed.
        """
        primaries = self.primaries()
        if self.kind == "server" and _cluster_node(primaries[0][1]):
            raise ValidationError(
                "url",
                "the URL names one node of a Redis Cluster, which holds only its own shards'"
                " keys: give the cluster's redis+cluster://host:port[,host:port...] URL",
            )
        return primaries

    def client_for(self, name: str) -> redis.Redis:
        """The client of the primary holding the keys of lease or semaphore ``name`` (its hash
        slot's, on a cluster). No I/O.

        Raises:
            ValidationError: ``name`` is no lease name (empty, not a str).
            redis.exceptions.RedisClusterException: no node serves the name's slot.
        """
        backend = self.manager.backend
        if isinstance(backend, RedisClusterBackend):
            key = layout(backend.prefix, name).lease
            node: Any = backend.cluster.get_node_from_key(key)  # type: ignore[no-untyped-call]
            client: redis.Redis = node.redis_connection
            return client
        assert isinstance(backend, RedisBackend)
        return backend.client


def _cluster_node(client: redis.Redis) -> bool:
    """Whether ``client``'s server runs in cluster mode (``INFO cluster``); a user who may not
    run ``INFO`` is taken at their word (False)."""
    try:
        info = client.info("cluster")
    except redis.exceptions.ResponseError:  # NOPERM: a least-privilege user
        return False
    return bool(info.get("cluster_enabled"))


@contextmanager
def open_target(url: str, prefix: str) -> Iterator[RedisTarget]:
    """The [`RedisTarget`][fencedlease.cli.redis_target.RedisTarget] ``url`` names, closed on
    exit; timeouts of `TIMEOUT_S` seconds. A cluster's client reads its slot map here.

    Raises:
        ValidationError: ``url`` is no Redis URL (`REDIS_URL_SCHEMES`) or one the library
            refuses, or ``prefix`` is refused; the password shows as ``***``.
        BackendError: no start node of a cluster answered.
    """
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in REDIS_URL_SCHEMES:
        raise ValidationError(
            "url",
            "the URL must name a Redis: "
            + ", ".join(f"{s}://" for s in REDIS_URL_SCHEMES)
            + f"; got {redact_text(url, url)!r}",
        )
    with LeaseManager.from_url(
        url, prefix=prefix, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S
    ) as manager:
        backend = manager.backend
        if isinstance(backend, RedisClusterBackend):
            yield RedisTarget(manager, "cluster")
        else:
            sentinel = scheme == "redis+sentinel"
            yield RedisTarget(manager, "sentinel" if sentinel else "server")
