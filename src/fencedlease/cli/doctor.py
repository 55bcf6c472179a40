"""``fencedlease doctor``: does this Redis give fencing tokens their meaning?

Each check reads the server (``INFO``, ``CONFIG GET``, ``ACL DRYRUN``, ``TIME``, ``PING``), changes
nothing, and says ``pass``, ``warn`` or ``fail`` with the remedy. The deployment rules are those of
``docs/semantics.md`` ("The Redis deployment fencing needs"); ``docs/operations.md`` explains each
check. A command the server refuses (a managed Redis without ``CONFIG``, a user without ``ACL``)
turns its check into a warning saying what to look at by hand.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any, Literal

import attrs
import redis

from .doctor_acl import acl_commands, acl_refusals
from .doctor_acl import as_text as _text

__all__ = ["Check", "Status", "config_value", "exit_code", "info_section", "run_checks"]

Status = Literal["pass", "warn", "fail"]


@attrs.frozen
class Check:
    """One check's verdict: ``name`` (``maxmemory-policy``, ...), ``status``, what was found
    (``detail``) and what to do about it (``remedy``, empty on a pass)."""

    name: str
    status: Status
    detail: str
    remedy: str = ""


def exit_code(checks: list[Check], *, strict: bool) -> int:
    """0 when every check passed, 1 on a fail (``strict``: on a warning too)."""
    statuses = {check.status for check in checks}
    return 1 if "fail" in statuses or (strict and "warn" in statuses) else 0


_REFUSED = (redis.exceptions.NoPermissionError, redis.exceptions.ResponseError)


def config_value(client: redis.Redis, name: str) -> str | None:
    """``CONFIG GET name``, or None when the server refuses ``CONFIG`` (managed Redis, ACL)."""
    try:
        reply = client.config_get(name)
    except _REFUSED:
        return None
    for key, value in reply.items():
        if _text(key) == name:
            return _text(value)
    return None


def info_section(client: redis.Redis, section: str) -> dict[str, Any] | None:
    """``INFO section`` with str field names, or None when the server refuses it."""
    try:
        return {_text(k): v for k, v in client.info(section).items()}
    except _REFUSED:
        return None


def check_eviction(client: redis.Redis) -> Check:
    """``maxmemory-policy``: ``noeviction`` passes; ``allkeys-*`` and ``volatile-*`` fail (each
    evicts a key the library relies on); an unknown or unreadable policy warns."""
    memory = info_section(client, "memory") or {}
    policy = config_value(client, "maxmemory-policy") or memory.get("maxmemory_policy")
    name, fix = "maxmemory-policy", "CONFIG SET maxmemory-policy noeviction (and in redis.conf)"
    if policy is None:
        return Check(
            name,
            "warn",
            "CONFIG GET and INFO memory refused: not read",
            "check by hand that the policy is noeviction",
        )
    policy = _text(policy)
    if policy == "noeviction":
        return Check(name, "pass", "noeviction: a full Redis refuses a grant, it drops no key")
    if policy.startswith("allkeys-"):
        return Check(
            name,
            "fail",
            f"{policy}: eviction may drop a key's fencing counter (it has no TTL); the next grant"
            " then starts again at token 1, a token storage has already seen",
            fix + "; keep evicting caches on another Redis",
        )
    if policy.startswith("volatile-"):
        return Check(
            name,
            "fail",
            f"{policy}: the counters (no TTL) are never evicted, but a held lease (it has a TTL)"
            " can be, before its TTL ends: a second client is granted it while the first still"
            " works; fencing still refuses the older token downstream, unfenced work overlaps",
            fix,
        )
    return Check(name, "warn", f"{policy}: unknown policy", fix)


def check_persistence(client: redis.Redis, *, allow_rdb: bool = False) -> Check:
    """AOF with ``appendfsync`` ``always``/``everysec`` passes; ``appendfsync no`` warns; RDB
    snapshots only fail (a restart reissues the tokens granted since the last one), or warn with
    ``allow_rdb``; no persistence at all fails (a restart resets every counter)."""
    name = "persistence"
    aof = config_value(client, "appendonly")
    if aof is None:
        persistence = info_section(client, "persistence")
        if persistence is None:
            return Check(
                name,
                "warn",
                "CONFIG GET and INFO persistence refused: not read",
                "check by hand: appendonly yes, appendfsync always or everysec",
            )
        aof = "yes" if int(persistence.get("aof_enabled", 0)) else "no"
    fsync, save = config_value(client, "appendfsync"), config_value(client, "save")
    enable = "CONFIG SET appendonly yes; CONFIG SET appendfsync always (or everysec)"
    if aof == "yes":
        if fsync == "always":
            return Check(name, "pass", "AOF, appendfsync always: every grant is on disk")
        if fsync == "everysec":
            return Check(
                name,
                "pass",
                "AOF, appendfsync everysec: a crash of the host may lose"
                " up to a second of grants (always loses none)",
            )
        if fsync is None:
            return Check(
                name,
                "warn",
                "AOF on; appendfsync not readable (CONFIG GET refused)",
                "check by hand that appendfsync is always or everysec",
            )
        return Check(
            name,
            "warn",
            f"AOF, appendfsync {fsync}: the OS decides when grants reach"
            " disk; a crash can roll counters back",
            "CONFIG SET appendfsync always",
        )
    if save is None:
        return Check(
            name, "warn", "AOF off; RDB schedule not readable (CONFIG GET refused)", enable
        )
    if save.strip():
        return Check(
            name,
            "warn" if allow_rdb else "fail",
            f"RDB snapshots only (save {save!r}): a restart goes back to"
            " the last snapshot and reissues the tokens granted since",
            enable if allow_rdb else enable + "; or accept the risk with --allow-rdb",
        )
    return Check(
        name,
        "fail",
        "no persistence (AOF off, no RDB): a restart resets every fencing"
        " counter and the next grant gets token 1 again",
        enable,
    )


def check_version(client: redis.Redis) -> Check:
    """Redis 6.2 or later passes (the versions the library is tested on)."""
    server = info_section(client, "server")
    if server is None:
        return Check(
            "redis-version",
            "warn",
            "INFO server refused: version not read",
            "check by hand: Redis 6.2 or later",
        )
    version = str(server.get("redis_version", "?"))
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return Check(
            "redis-version",
            "warn",
            f"version {version!r} not understood",
            "check by hand: Redis 6.2 or later",
        )
    if (major, minor) >= (6, 2):
        return Check("redis-version", "pass", f"Redis {version}")
    return Check(
        "redis-version",
        "fail",
        f"Redis {version}: the scripts and ACL rules need 6.2",
        "upgrade to Redis 6.2 or later",
    )


def check_replication(client: redis.Redis) -> Check:
    """A replica fails (the library writes); a master with replicas but no
    ``min-replicas-to-write`` warns (a failover can roll a counter back)."""
    name, info = "replication", info_section(client, "replication")
    if info is None:
        return Check(
            name,
            "warn",
            "INFO replication refused: not read",
            "check by hand that this is the master and min-replicas-to-write",
        )
    role, replicas = str(info.get("role")), int(info.get("connected_slaves", 0))
    if role != "master":
        return Check(
            name,
            "fail",
            f"this server is a {role}: grants are writes",
            "point the library at the master (or at Sentinel)",
        )
    if replicas == 0:
        return Check(name, "pass", "master without replicas: no failover can roll a counter back")
    least = config_value(client, "min-replicas-to-write")
    detail = f"master with {replicas} replica(s), min-replicas-to-write {least or '?'}"
    remedy = (
        "replication is asynchronous: a promoted replica may have missed the last grants"
        " and reissue their tokens; CONFIG SET min-replicas-to-write 1 (with"
        " min-replicas-max-lag) and LeaseManager(replica_acks=1)"
    )
    if least is not None and int(least) >= 1:
        return Check(name, "pass", detail)
    return Check(name, "warn", detail, remedy)


def _sentinel(client: redis.Redis) -> Check:
    """A Sentinel is no data server: name the masters it watches, to run the checks on."""
    masters = client.execute_command("SENTINEL", "MASTERS")  # type: ignore[no-untyped-call]
    found = []
    for master in masters:
        fields = (
            master
            if isinstance(master, dict)
            else dict(zip(master[::2], master[1::2], strict=True))
        )
        fields = {_text(k): _text(v) for k, v in fields.items()}
        found.append(f"{fields.get('name')} at {fields.get('ip')}:{fields.get('port')}")
    return Check(
        "topology",
        "fail",
        f"this is a Sentinel, not a data server; it watches: {', '.join(found) or 'nothing'}",
        "run doctor on the master's redis:// URL; the library connects through Sentinel"
        " (redis+sentinel://<sentinels>/<master name>)",
    )


def check_topology(client: redis.Redis) -> Check:
    """What the URL points at: a standalone server, a Cluster node (``CLUSTER INFO``), a Sentinel,
    or a master that Sentinels watch (they publish on ``__sentinel__:hello`` there)."""
    name, server = "topology", info_section(client, "server")
    if server is None:
        return Check(name, "warn", "INFO server refused: not read", "check the topology by hand")
    mode = str(server.get("redis_mode", "standalone"))
    if mode == "cluster":
        state = _text(client.execute_command("CLUSTER", "INFO")).split()  # type: ignore[no-untyped-call]
        fields = dict(item.split(":", 1) for item in state if ":" in item)
        ok = fields.get("cluster_state") == "ok"
        return Check(
            name,
            "pass" if ok else "fail",
            f"a Redis Cluster node, cluster_state {fields.get('cluster_state', '?')},"
            f" {fields.get('cluster_known_nodes', '?')} nodes: use a cluster client"
            " (redis+cluster://)",
            "" if ok else "repair the cluster (CLUSTER INFO, CLUSTER NODES)",
        )
    if mode == "sentinel":
        return _sentinel(client)
    try:
        watched = bool(client.pubsub_channels("__sentinel__:hello"))
    except _REFUSED:
        return Check(name, "pass", "standalone (PUBSUB refused: Sentinel not looked for)")
    if watched:
        return Check(
            name,
            "pass",
            "a master watched by Sentinel: connect through Sentinel"
            " (redis+sentinel://) to follow a failover",
        )
    return Check(name, "pass", "standalone server")


def check_acl(client: redis.Redis, prefix: str, user: str | None) -> Check:
    """Whether ``user`` (default: this connection's) may run every command of the library on
    keys and channels under ``prefix``: ``ACL DRYRUN`` (Redis 7), ``ACL GETUSER`` (6.2)."""
    name = "acl"
    how = "connect as an admin and give --acl-user <the application's user>"
    db = int(client.connection_pool.connection_kwargs.get("db") or 0)
    try:
        user = user or _text(client.execute_command("ACL WHOAMI"))  # type: ignore[no-untyped-call]
        refused = acl_refusals(client, user, prefix, db)
    except _REFUSED as exc:
        return Check(name, "warn", f"ACL refused ({exc}): commands not checked", how)
    if refused:
        reasons = dict.fromkeys(reason for _, reason in refused)  # once each, in order
        rules = dict.fromkeys(rule for rule, _ in refused if rule is not None)
        remedy = (
            f"ACL SETUSER {user} {' '.join(rules)}"
            if rules
            else f"create it: the ACL SETUSER line in docs/semantics.md for prefix {prefix}"
        )
        return Check(name, "fail", f"user {user!r} may not run: {'; '.join(reasons)}", remedy)
    return Check(
        name,
        "pass",
        f"user {user!r} may run all {len(acl_commands(db))} commands on {prefix}:* keys and"
        " channels",
    )


def check_clock(client: redis.Redis, max_skew_ms: int, wall: Callable[[], float]) -> Check:
    """Server ``TIME`` against this host's clock, less half the round trip of uncertainty."""
    before = wall()
    seconds, micros = client.time()
    after = wall()
    skew_ms = (seconds + micros / 1e6 - (before + after) / 2) * 1000
    slack_ms = (after - before) * 500
    detail = f"server clock {round(skew_ms):+d} ms from this host's (within {slack_ms:.0f} ms)"
    if abs(skew_ms) - slack_ms > max_skew_ms:
        return Check(
            "clock",
            "warn",
            detail + f", over {max_skew_ms} ms",
            "run NTP (chrony) on both hosts; expires_at and fencing='clock' read wall clocks",
        )
    return Check("clock", "pass", detail)


def check_latency(client: redis.Redis, pings: int, max_latency_ms: int) -> Check:
    """``pings`` PING round trips: p50 and max, a warning when max is over ``max_latency_ms``."""
    rtts = []
    for _ in range(pings):
        start = time.perf_counter()
        client.ping()
        rtts.append((time.perf_counter() - start) * 1000)
    detail = f"PING x{pings}: p50 {statistics.median(rtts):.2f} ms, max {max(rtts):.2f} ms"
    if max(rtts) > max_latency_ms:
        return Check(
            "latency",
            "warn",
            detail + f", over {max_latency_ms} ms",
            "keep ttl_ms many round trips long (renewals run every ttl_ms / 4); move"
            " the client closer to Redis",
        )
    return Check("latency", "pass", detail)


def run_checks(
    client: redis.Redis,
    *,
    prefix: str,
    acl_user: str | None = None,
    pings: int = 20,
    max_skew_ms: int = 250,
    max_latency_ms: int = 100,
    allow_rdb: bool = False,
    wall: Callable[[], float] = time.time,
) -> list[Check]:
    """Every check, in order; a server that does not answer gives one failed ``connect`` check.
    ``allow_rdb``: RDB snapshots without AOF warn instead of failing.

    ``wall`` is this host's clock in seconds (``time.time``). Raises nothing for a refused
    command; other Redis errors (a dropped connection midway) propagate as ``redis.RedisError``.
    """
    try:
        client.ping()
    except redis.exceptions.AuthenticationError as exc:
        return [Check("connect", "fail", f"{type(exc).__name__}: {exc}", "check the password")]
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        return [
            Check(
                "connect",
                "fail",
                f"{type(exc).__name__}: {exc}",
                "check the URL, the network and the password",
            )
        ]
    checks: list[tuple[str, Callable[[], Check]]] = [
        ("maxmemory-policy", lambda: check_eviction(client)),
        ("persistence", lambda: check_persistence(client, allow_rdb=allow_rdb)),
        ("redis-version", lambda: check_version(client)),
        ("replication", lambda: check_replication(client)),
        ("topology", lambda: check_topology(client)),
        ("acl", lambda: check_acl(client, prefix, acl_user)),
        ("clock", lambda: check_clock(client, max_skew_ms, wall)),
        ("latency", lambda: check_latency(client, pings, max_latency_ms)),
    ]
    server = info_section(client, "server") or {}
    if server.get("redis_mode") == "sentinel":  # the other checks would describe the Sentinel
        checks = [(name, check) for name, check in checks if name == "topology"]
    results = []
    for name, check in checks:
        try:
            results.append(check())
        except _REFUSED as exc:  # a command the check needs, refused: say so, go on
            results.append(Check(name, "warn", f"refused: {exc}", "check it by hand"))
    return results
