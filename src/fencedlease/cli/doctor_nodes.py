"""What ``fencedlease doctor`` reports of each node of a replicated Redis (Sentinel, Cluster): the
node's role with its replicas and how far behind each is (`check_role`), the Cluster setting that
decides whether one failed shard stops the others (`check_full_coverage`), and how many sentinels
name which primary (`sentinel_agreement`).

A lease lives on one primary; a failover hands its keys to a replica, so a replica's persistence
and eviction policy matter as much as the primary's (the targets run those checks on replicas
too: `fencedlease.cli.doctor_targets`), and a replica far behind is one whose promotion loses the
last grants. Every check reads (``INFO replication``, ``CONFIG GET``,
``SENTINEL GET-MASTER-ADDR-BY-NAME``) and changes nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import redis

from .doctor import Check, config_value, info_section
from .doctor_acl import as_text

__all__ = ["LAG_WARN_S", "check_full_coverage", "check_role", "sentinel_agreement"]

LAG_WARN_S: Final = 1
"""A replica acknowledges its primary's stream every second (``REPLCONF ACK``): a ``lag`` (seconds
since its last acknowledgement) over this is a replica that has stopped keeping up."""


def _replica_entries(info: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``slaveN`` fields of a primary's ``INFO replication``, in N order (redis-py parses
    each into a dict)."""
    entries = [
        (int(key[5:]), value)
        for key, value in info.items()
        if key.startswith("slave") and key[5:].isdigit() and isinstance(value, dict)
    ]
    return [value for _, value in sorted(entries, key=lambda entry: entry[0])]


def check_role(client: redis.Redis) -> Check:
    """``role``: a primary with each replica, its link state and how far behind it is (bytes of
    the replication stream not acknowledged, seconds since its last acknowledgement); a replica
    with its primary and link. Warns when a replica is not ``online``, acknowledges later than
    `LAG_WARN_S` seconds, or a replica's link to its primary is down."""
    info = info_section(client, "replication")
    if info is None:
        return Check(
            "role",
            "warn",
            "INFO replication refused: not read",
            "check by hand: ROLE on every node, each replica online and in sync",
        )
    role = str(info.get("role"))
    if role != "master":
        link = str(info.get("master_link_status", "?"))
        detail = (
            f"replica of {info.get('master_host')}:{info.get('master_port')}, link {link},"
            f" last heard from it {info.get('master_last_io_seconds_ago', '?')} s ago"
        )
        if link == "up":
            return Check("role", "pass", detail)
        return Check(
            "role",
            "warn",
            detail,
            "a replica without its primary's stream falls behind: its promotion would lose"
            " grants; check the link (INFO replication on both)",
        )
    offset = int(info.get("master_repl_offset", 0))
    replicas = _replica_entries(info)
    shown = [
        f"{entry.get('ip')}:{entry.get('port')} {entry.get('state')},"
        f" {offset - int(entry.get('offset', 0))} bytes and {entry.get('lag', '?')} s behind"
        for entry in replicas
    ]
    if not replicas:
        return Check("role", "pass", "primary, no replicas")
    detail = f"primary, {len(replicas)} replica(s): " + "; ".join(shown)
    late = [
        entry
        for entry in replicas
        if entry.get("state") != "online" or int(entry.get("lag", 0)) > LAG_WARN_S
    ]
    if not late:
        return Check("role", "pass", detail)
    return Check(
        "role",
        "warn",
        detail,
        f"a replica not online, or acknowledging later than {LAG_WARN_S} s, misses the last"
        " grants: promoted, it hands their tokens out again (replica_acks=1 waits for one that"
        " holds them); check its link and load",
    )


def check_full_coverage(client: redis.Redis) -> Check:
    """``cluster-require-full-coverage``: ``no`` passes; ``yes`` (Redis's default) warns: when a
    shard has no primary, every node answers ``CLUSTERDOWN`` and the leases on the shards that
    are still served cannot be renewed either."""
    name = "full-coverage"
    value = config_value(client, "cluster-require-full-coverage")
    fix = (
        "CONFIG SET cluster-require-full-coverage no on every node (and in redis.conf);"
        " see 'One shard down' in docs/deployment.md"
    )
    if value is None:
        return Check(
            name, "warn", "CONFIG GET refused: cluster-require-full-coverage not read", fix
        )
    if value == "no":
        return Check(
            name,
            "pass",
            "cluster-require-full-coverage no: a shard without a primary stops only its own leases",
        )
    return Check(
        name,
        "warn",
        f"cluster-require-full-coverage {value}: once a shard has no primary (failed, no replica"
        " took over), every node answers CLUSTERDOWN: the leases on the shards still served are"
        " not renewed and are lost",
        fix,
    )


def _named_by(sentinel: redis.Redis, service: str) -> str:
    """``host:port`` of the primary ``sentinel`` names for ``service``; ``none`` when it names
    none; ``<ErrorType>`` when it did not answer."""
    try:
        reply: Any = sentinel.execute_command(  # type: ignore[no-untyped-call]
            "SENTINEL GET-MASTER-ADDR-BY-NAME", service
        )
    except redis.RedisError as exc:
        return f"<{type(exc).__name__}>"
    if not reply:
        return "none"
    host, port = reply
    return f"{as_text(host)}:{port}"


def _address(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"{kwargs.get('host')}:{kwargs.get('port')}"


def sentinel_agreement(sentinels: Sequence[redis.Redis], service: str) -> Check:
    """``sentinel``: what each configured sentinel names as ``service``'s primary, all asked at
    once (each bounded by its client's socket timeout). Passes when every sentinel names the
    same primary; warns when a majority of the configured sentinels names one and others name
    another, none or do not answer; fails when no primary has a majority (a failover then cannot
    be agreed, and a client may follow a minority's word)."""
    with ThreadPoolExecutor(max_workers=max(1, len(sentinels))) as pool:
        named = list(pool.map(lambda s: _named_by(s, service), sentinels))
    counts = Counter(named)
    groups = [
        f"{count} of {len(sentinels)} name {answer}"
        f" ({', '.join(_address(s) for s, n in zip(sentinels, named, strict=True) if n == answer)})"
        for answer, count in counts.most_common()
    ]
    detail = f"primary of {service!r}: " + "; ".join(groups)
    (top, votes), *_ = counts.most_common(1)
    usable = not top.startswith("<") and top != "none"
    if usable and votes == len(sentinels):
        return Check("sentinel", "pass", detail)
    if usable and votes > len(sentinels) // 2:
        return Check(
            "sentinel",
            "warn",
            detail,
            "a sentinel that names another primary, none, or does not answer cannot help a"
            " failover's vote; check it (SENTINEL MASTER, its logs, the network)",
        )
    return Check(
        "sentinel",
        "fail",
        detail,
        "no primary is named by a majority of the sentinels: a failover cannot be agreed;"
        " check the sentinels' addresses, the service name and the network",
    )
