"""What ``fencedlease doctor`` checks behind a URL: the one server of a ``redis://`` URL, or each
node a ``redis+cluster://`` or ``redis+sentinel://`` URL stands for.

A Redis Cluster: every primary the cluster client finds (its slot map), each checked as a server
of its own, with its ``role`` (its replicas and how far behind each is) and ``full-coverage``;
then every replica: its ``role``, ``maxmemory-policy`` and ``persistence`` (a promoted replica
holds the leases then). Each check's name gets ``@host:port`` (``maxmemory-policy@10.0.0.1:7000``).
Sentinel: a ``sentinel`` check saying how many of the configured sentinels name which primary
(`fencedlease.cli.doctor_nodes.sentinel_agreement`), the primary the client resolves checked as a
server with its ``role``, then each replica the sentinels list, named ``@host:port`` as on a
cluster. The clients are the library's own
([`open_target`][fencedlease.cli.redis_target.open_target]), so the doctor sees what the leases
would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from .doctor import Check
from .doctor_nodes import check_full_coverage, check_role, sentinel_agreement
from .redis_target import RedisTarget

__all__ = ["topology_checks"]

Run = Callable[[redis.Redis], list[Check]]


def topology_checks(target: RedisTarget, run: Run, run_replica: Run) -> list[Check]:
    """``run``'s checks on each primary ``target`` stands for and ``run_replica``'s on each
    replica of a Cluster or a Sentinel deployment (see the module): a Cluster's nodes (each check
    named ``<check>@host:port``), Sentinel's current primary and its replicas (after the
    ``sentinel`` check), or the one server.

    Raises:
        redis.RedisError: a server failing midway.
    """
    (_, client), *_ = primaries = target.primaries()
    if target.kind == "sentinel":
        return _sentinel_checks(client, run, run_replica)
    if target.kind == "server":
        return run(client)
    checks = [
        _named(check, name)
        for name, node in primaries
        for check in [*run(node), check_role(node), check_full_coverage(node)]
    ]
    return checks + _replica_checks(target.replicas(), run_replica)


def _named(check: Check, node: str) -> Check:
    return Check(f"{check.name}@{node}", check.status, check.detail, check.remedy)


def _replica_checks(replicas: list[tuple[str, redis.Redis]], run_replica: Run) -> list[Check]:
    checks: list[Check] = []
    for name, node in replicas:
        try:
            found = [check_role(node), *run_replica(node)]
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            found = [
                Check(
                    "role",
                    "warn",
                    f"a replica in the client's view did not answer: {type(exc).__name__}",
                    "a replica down cannot take over: start it, or remove it from the topology",
                )
            ]
        checks.extend(_named(check, name) for check in found)
    return checks


def _sentinel_checks(client: redis.Redis, run: Run, run_replica: Run) -> list[Check]:
    pool: Any = client.connection_pool
    manager = pool.sentinel_manager
    agreement = sentinel_agreement(manager.sentinels, pool.service_name)
    try:
        pool.get_master_address()
    except redis.exceptions.ConnectionError as exc:  # MasterNotFoundError: no sentinel names one
        return [
            agreement,
            Check(
                "primary",
                "fail",
                f"no primary for {pool.service_name!r} from the sentinels: {type(exc).__name__}",
                "check the sentinels' addresses and the service name",
            ),
        ]
    replicas = []
    for host, port in manager.discover_slaves(pool.service_name):
        replica = redis.Redis(host=host, port=port, **manager.connection_kwargs)
        replicas.append((f"{host}:{port}", replica))
    try:
        return [
            agreement,
            *run(client),
            check_role(client),
            *_replica_checks(replicas, run_replica),
        ]
    finally:
        for _, replica in replicas:
            replica.close()
