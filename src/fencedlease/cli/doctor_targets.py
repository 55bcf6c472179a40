"""What ``fencedlease doctor`` checks behind a URL: the one server of a ``redis://`` URL, or each
server a ``redis+cluster://`` or ``redis+sentinel://`` URL stands for.

A Redis Cluster: every primary the cluster client finds (its slot map), each checked as a server
of its own; each check's name gets ``@host:port`` (``maxmemory-policy@10.0.0.1:7000``). Sentinel:
the primary the sentinels name now, checked as a server, after a ``sentinel`` check naming it and
the sentinels asked. The clients are the library's own
([`open_target`][fencedlease.cli.redis_target.open_target]), so the doctor sees what the leases
would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from .doctor import Check
from .redis_target import RedisTarget

__all__ = ["topology_checks"]


def topology_checks(target: RedisTarget, run: Callable[[redis.Redis], list[Check]]) -> list[Check]:
    """``run``'s checks on each server ``target`` stands for: a Cluster's primaries (each check
    named ``<check>@host:port``), Sentinel's current primary (after a ``sentinel`` check naming
    it and the sentinels; a ``fail`` when no sentinel names one), or the one server.

    Raises:
        redis.RedisError: a server failing midway.
    """
    (_, client), *_ = primaries = target.primaries()
    if target.kind == "sentinel":
        return _sentinel_checks(client, run)
    if target.kind == "server":
        return run(client)
    return [
        Check(f"{check.name}@{name}", check.status, check.detail, check.remedy)
        for name, node in primaries
        for check in run(node)
    ]


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
