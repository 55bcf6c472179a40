"""What ``fencedlease doctor`` checks behind a ``redis+cluster://`` or ``redis+sentinel://`` URL.

A Redis Cluster: every primary the cluster client finds (its slot map), each checked as a server
of its own; each check's name gets ``@host:port`` (``maxmemory-policy@10.0.0.1:7000``). Sentinel:
the primary the sentinels name now, checked as a server, after a ``sentinel`` check naming it and
the sentinels asked. The clients are the library's own (made as a manager makes them from the
URL), so the doctor sees what the leases would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import redis

from .. import LeaseManager, RedisBackend, RedisClusterBackend
from .doctor import Check

__all__ = ["TOPOLOGY_SCHEMES", "is_topology_url", "topology_checks"]

TOPOLOGY_SCHEMES = frozenset(
    {"redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"}
)
"""The URL schemes `topology_checks` takes (the others name one server)."""


def topology_checks(url: str, run: Callable[[redis.Redis], list[Check]]) -> list[Check]:
    """``run``'s checks on each server ``url`` (a scheme of `TOPOLOGY_SCHEMES`) stands for: a
    Cluster's primaries (each check named ``<check>@host:port``), or Sentinel's current primary
    (after a ``sentinel`` check naming it and the sentinels; a ``fail`` when no sentinel names
    one).

    Raises:
        FencedLeaseError: the URL (``ValidationError``) or no start node answering
            (``BackendError``), as the library raises them.
        redis.RedisError: a server failing midway.
    """
    with LeaseManager.from_url(url) as manager:
        backend = manager.backend
        if isinstance(backend, RedisClusterBackend):
            return _cluster_checks(backend, run)
        assert isinstance(backend, RedisBackend)
        return _sentinel_checks(backend.client, run)


def _cluster_checks(
    backend: RedisClusterBackend, run: Callable[[redis.Redis], list[Check]]
) -> list[Check]:
    checks: list[Check] = []
    primaries: list[Any] = backend.cluster.get_primaries()  # type: ignore[no-untyped-call]
    for node in sorted(primaries, key=lambda n: str(n.name)):
        for check in run(node.redis_connection):
            checks.append(
                Check(f"{check.name}@{node.name}", check.status, check.detail, check.remedy)
            )
    return checks


def _sentinel_checks(client: redis.Redis, run: Callable[[redis.Redis], list[Check]]) -> list[Check]:
    pool: Any = client.connection_pool
    sentinels = ", ".join(
        f"{s.connection_pool.connection_kwargs.get('host')}:"
        f"{s.connection_pool.connection_kwargs.get('port')}"
        for s in pool.sentinel_manager.sentinels
    )
    try:
        host, port = pool.get_master_address()
    except redis.exceptions.ConnectionError as exc:  # MasterNotFoundError: no sentinel names one
        return [
            Check(
                "sentinel",
                "fail",
                f"no primary for {pool.service_name!r} from the sentinels {sentinels}:"
                f" {type(exc).__name__}",
                "check the sentinels' addresses and the service name",
            )
        ]
    found = Check(
        "sentinel",
        "pass",
        f"primary of {pool.service_name!r} at {host}:{port}, named by the sentinels {sentinels}",
    )
    return [found, *run(client)]


def is_topology_url(url: str) -> bool:
    """Whether ``url``'s scheme is one of `TOPOLOGY_SCHEMES`. No I/O."""
    return urlsplit(url).scheme.lower() in TOPOLOGY_SCHEMES
