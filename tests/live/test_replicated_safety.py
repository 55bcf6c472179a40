"""Where replicated Redis hands a fencing token out twice today with ``replica_acks=1`` (the
setting the docs recommend for it): each failover shape reproduced on purpose (a replica's writes
paused with ``CLIENT PAUSE WRITE``, the primary killed, ``SENTINEL FAILOVER``, ``CLUSTER FAILOVER
FORCE``, ``replica-priority`` set with ``CONFIG SET``); every wait is on a state the servers report.

Each test asserts what the library must do: no token handed out twice, and every token granted after
a failover greater than every token handed out before it. Where the library does not do it yet the
test is marked ``xfail(strict=True)``, narrowed to the failure it reproduces (`Reissued`,
`NotAReplicationError`): it passes while the defect is there and turns red the day it is gone; a
test whose setup broke fails as any other test.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import pytest
import redis
from redis.crc import key_slot

from conftest import started_cluster, wait_until
from fencedlease import BackendError, LeaseManager, ReplicationError
from fencedlease._core.epochs import floor
from fencedlease._redis.replication import Fencing
from fencedlease_lab.servers.cluster import RedisClusterServers
from fencedlease_lab.servers.redis import RedisServer
from fencedlease_lab.servers.sentinel import SentinelDeployment

pytestmark = [
    pytest.mark.live,
    pytest.mark.failover,
    pytest.mark.timeout(300),  # a failover takes seconds; more with both cores busy
]

ACK_MS = 5_000  # a bound a loaded machine's healthy replica meets: no grant is burnt by a miss
PAUSE_MS = 120_000  # every pause is ended by CLIENT UNPAUSE once the test has what it needs
BOUND_S = 120.0  # a safety bound on waits that a state change ends
TTL_MS = 120_000  # longer than the test: no lease ends by itself


class Reissued(AssertionError):
    """A grant after a failover took a token already handed out, or a lower one."""


class NotAReplicationError(AssertionError):
    """A grant the failover interrupted was not reported as a ``ReplicationError``."""


def reproduces(failure: type[AssertionError], reason: str) -> pytest.MarkDecorator:
    """``xfail(strict=True)`` for a test that fails today with ``failure`` only (``reason``: what
    goes wrong, in one line): it turns red the day the defect is gone."""
    return pytest.mark.xfail(strict=True, raises=failure, reason=reason)


def check_never_reissued(handed: list[int], later: int) -> None:
    """The safety property: ``later`` (a token granted after a failover) is none of ``handed``
    (the tokens handed out before it) and greater than all of them.

    Raises:
        Reissued: it is not.
    """
    if later in handed or later <= max(handed):
        raise Reissued(f"token {later} granted after tokens {handed} were handed out")


def grant(manager: LeaseManager, key: str, *, wait_ms: int = 0) -> int:
    """A grant of ``key`` held by nobody afterwards (released); its token."""
    result = manager.acquire(key, ttl_ms=TTL_MS, wait_ms=wait_ms)
    assert result.lease is not None and result.lease.fencing_token is not None
    result.lease.release()
    return result.lease.fencing_token


def granted_on(manager: LeaseManager, key: str, primary: RedisServer) -> int:
    """Once ``primary`` (promoted by a failover) is followed by a replica in sync, a grant of
    ``key`` (it acknowledges it: no grant is burnt waiting for the replica); its token."""
    wait_until(
        lambda: serves_a_replica(primary),
        f"the primary on {primary.port} to be followed by a replica",
        timeout_s=BOUND_S,
    )
    return grant(manager, key, wait_ms=60_000)


def fence(server: RedisServer, key: str, *, cluster: bool = False) -> int:
    """The fencing counter of ``key`` as ``server`` holds it now (0: none); ``cluster``: it is a
    Redis Cluster node (a replica serves the read once told ``READONLY``)."""
    with server.client(socket_timeout=5) as client:
        if cluster:
            client.execute_command("READONLY")
        return int(client.get(f"fencedlease:{{{key}}}:fence") or 0)


def replication(server: RedisServer) -> dict[str, object]:
    """``INFO replication`` of ``server``; ``{"role": "down"}`` when it does not answer (a
    promotion closes every client connection)."""
    try:
        with server.client(socket_timeout=5, socket_connect_timeout=5) as client:
            return dict(client.info("replication"))
    except redis.RedisError:
        return {"role": "down"}


def replicates(replica: RedisServer, primary: RedisServer) -> bool:
    """Whether ``replica`` follows ``primary`` with its link up."""
    info = replication(replica)
    return info.get("master_port") == primary.port and info.get("master_link_status") == "up"


def serves_a_replica(primary: RedisServer) -> bool:
    """Whether ``primary`` is a primary with a replica in sync (so a grant can be acknowledged)."""
    info = replication(primary)
    online = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
    return info.get("role") == "master" and any(v.get("state") == "online" for v in online)


def in_sync(primary: RedisServer, replicas: int) -> None:
    """Wait until ``replicas`` replicas hold every write ``primary`` made so far (``WAIT``)."""
    with primary.client(socket_timeout=BOUND_S) as client:
        assert client.execute_command("WAIT", replicas, int(BOUND_S * 1000)) == replicas


@contextlib.contextmanager
def writes_paused(server: RedisServer) -> Iterator[None]:
    """``CLIENT PAUSE WRITE`` on ``server`` (a replica stops applying its primary's stream)."""
    with server.client(socket_timeout=5) as client:
        client.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")
    try:
        yield
    finally:
        unpause(server)


def unpause(server: RedisServer) -> None:
    """``CLIENT UNPAUSE`` (nothing when the server is gone)."""
    with contextlib.suppress(redis.RedisError), server.client(socket_timeout=5) as client:
        client.execute_command("CLIENT", "UNPAUSE")


def interrupted_grant(
    manager: LeaseManager,
    key: str,
    primary: RedisServer,
    paused: list[RedisServer],
    fail_over: Callable[[], object],
) -> object:
    """After a first grant of ``key``, a second on another thread whose ``WAIT`` blocks on
    ``primary`` (the writes of ``paused`` are paused: too few replicas acknowledge), then
    ``fail_over()`` while it waits: what the second grant gave (its result, or the error it
    raised).

    The manager's ``replica_ack_timeout_ms`` must outlast the failover."""
    assert grant(manager, key) == 1
    outcome: list[object] = []

    def ask() -> None:
        try:
            outcome.append(manager.acquire(key, ttl_ms=TTL_MS))
        except BackendError as exc:
            outcome.append(exc)

    with contextlib.ExitStack() as pauses:
        for replica in paused:
            pauses.enter_context(writes_paused(replica))
        asking = threading.Thread(target=ask)
        asking.start()
        wait_until(
            lambda: blocked_in_wait(primary),
            "the grant's WAIT to block on the primary",
            timeout_s=BOUND_S,
        )
        fail_over()
        # the failover unblocks the WAIT; only then do the paused replicas resume, so that the
        # grant cannot have been acknowledged, and the take-back of the grant (a write: on a
        # promoted replica it would wait out the pause) runs at once
        wait_until(
            lambda: not blocked_in_wait(primary),
            "the failover to end the grant's WAIT",
            timeout_s=BOUND_S,
        )
    asking.join(BOUND_S)
    assert not asking.is_alive()
    (given,) = outcome
    return given


def blocked_in_wait(server: RedisServer) -> bool:
    """Whether a client of ``server`` is blocked in ``WAIT`` (``CLIENT LIST``)."""
    with server.client(socket_timeout=5, decode_responses=True) as client:
        listing = str(client.execute_command("CLIENT", "LIST"))
    return any("cmd=wait" in line.split() and "b" in _flags(line) for line in listing.splitlines())


def _flags(line: str) -> str:
    return next((f[len("flags=") :] for f in line.split() if f.startswith("flags=")), "")


def check_a_replication_error(outcome: object, promoted: RedisServer, key: str) -> None:
    """The safe answer to a grant whose ``WAIT`` a failover cut: no lease of ``key`` on the
    ``promoted`` primary, and a ``ReplicationError``.

    Raises:
        NotAReplicationError: it was anything else.
    """
    with promoted.client(socket_timeout=5) as client:
        left = client.get(f"fencedlease:{{{key}}}")  # nothing handed out may survive
    if left is not None or not isinstance(outcome, ReplicationError):
        # Either is the unsafe answer this reproduces (on redis-py 5.0.1 the grant also survives).
        raise NotAReplicationError(
            f"the interrupted grant gave {outcome!r}; the key holds {left!r}"
        )


# --- Sentinel -------------------------------------------------------------------------------


def sentinel_manager(deployment: SentinelDeployment, fencing: Fencing = "epoch") -> LeaseManager:
    """A manager of ``fencing`` (the URL's default: epoch tokens), with one replica's acks."""
    return LeaseManager.from_url(
        deployment.url, replica_acks=1, replica_ack_timeout_ms=ACK_MS, fencing=fencing
    )


def agreed_epoch(deployment: SentinelDeployment, primary: RedisServer) -> int:
    """The ``config-epoch`` every sentinel reports once all name ``primary`` (a deployment that
    started at epoch 0 is at 1 after one failover)."""
    seen: list[tuple[int, int]] = []

    def agree() -> bool:
        seen[:] = [deployment.master_seen(i) for i in range(len(deployment.sentinel_ports))]
        return all(s == (primary.port, seen[0][1]) for s in seen)

    wait_until(agree, f"every sentinel to name {primary.port}", timeout_s=BOUND_S)
    return seen[0][1]


def kill_primary(deployment: SentinelDeployment, paused: RedisServer) -> int:
    """Kill the primary; once ``paused`` (a replica whose writes are paused) has dropped its link,
    let it go: the stream it had not applied is gone with the link. Wait for the sentinels to
    promote a replica; its port."""
    with deployment.watch_switch() as watch:
        deployment.primary.kill()
        wait_until(
            lambda: replication(paused).get("master_link_status") == "down",
            "the paused replica to see its primary gone",
            timeout_s=BOUND_S,
        )
        unpause(paused)
        return watch.wait(BOUND_S)


@contextlib.contextmanager
def unreachable_for_the_sentinels(
    deployment: SentinelDeployment, replica: RedisServer
) -> Iterator[None]:
    """The sentinels' PINGs to ``replica`` refused (its default user loses ``PING``), until
    every sentinel calls it down; its replication from the primary goes on (the stream is not
    a client's command). What a partition between the sentinels and one replica looks like to
    a failover: the replica is not re-pointed."""
    with replica.client(socket_timeout=5) as client:
        client.execute_command("ACL", "SETUSER", "default", "-ping")
    try:
        wait_until(
            lambda: all(
                _sentinel_calls_down(deployment, index, replica.port)
                for index in range(len(deployment.sentinel_ports))
            ),
            f"every sentinel to call the replica on {replica.port} down",
            timeout_s=BOUND_S,
        )
        yield
    finally:
        with replica.client(socket_timeout=5) as client:
            client.execute_command("ACL", "SETUSER", "default", "+ping")


def _sentinel_calls_down(deployment: SentinelDeployment, index: int, port: int) -> bool:
    flags = deployment.replicas_seen(index).get(port, {}).get("flags", "")
    return "s_down" in flags.split(",")


@pytest.mark.sentinel
@pytest.mark.replicas(2)
@pytest.mark.parametrize("fencing", ["epoch", "counter"])
def test_a_laggard_promoted_for_its_priority_grants_no_token_again(
    sentinel_deployment: SentinelDeployment, fencing: Fencing
) -> None:
    """Killing the primary while the replica with the better replica-priority lags hands no
    token out twice with epoch tokens (the promoted laggard's first grant is the floor of the
    new epoch); with the counter's, ``replica_acks=1`` does not prevent the repeat (the
    control)."""
    deployment = sentinel_deployment
    laggard, healthy = deployment.replicas
    deployment.set_replica_priority(laggard, 1)  # lower wins; the healthy one keeps 100
    with sentinel_manager(deployment, fencing) as manager:
        handed = [grant(manager, "k") for _ in range(3)]
        in_sync(deployment.primary, 2)
        with writes_paused(laggard):
            # WAIT 1 is met by the healthy replica alone
            handed += [grant(manager, "k") for _ in range(3)]
            assert handed == [1, 2, 3, 4, 5, 6]
            assert (fence(healthy, "k"), fence(laggard, "k")) == (6, 3)
            assert kill_primary(deployment, laggard) == laggard.port
        later = granted_on(manager, "k", laggard)
    if fencing == "counter":
        assert later == 4  # the laggard's counter was 3: token 4 again
        return
    check_never_reissued(handed, later)
    assert later == floor(agreed_epoch(deployment, laggard)) == 2**40  # the laggard's counter: 3


@pytest.mark.sentinel
@pytest.mark.replicas(2)
@pytest.mark.parametrize("fencing", ["epoch", "counter"])
def test_grants_on_a_primary_deposed_by_sentinel_failover_are_not_granted_again(
    sentinel_deployment: SentinelDeployment, fencing: Fencing
) -> None:
    """Grants a deposed primary takes after ``SENTINEL FAILOVER``, acknowledged by a replica the
    sentinels have not re-pointed (the majority still names it: the voters of the election do
    not carry the new configuration yet), leave no token to be handed out twice with epoch
    tokens: the promoted replica's first grant is the floor of the new epoch. With the
    counter's, ``replica_acks=1`` does not prevent the repeat (the control)."""
    deployment = sentinel_deployment
    old = deployment.primary
    promoted, follower = deployment.replicas
    with sentinel_manager(deployment, fencing) as manager:
        handed = [grant(manager, "k") for _ in range(3)]
        in_sync(old, 2)
        with (
            unreachable_for_the_sentinels(deployment, follower),
            deployment.watch_switch() as watch,
        ):
            deployment.failover()  # the follower is down to the sentinels: not a candidate
            wait_until(
                lambda: replication(promoted).get("role") == "master",
                "the replica's promotion",
                timeout_s=BOUND_S,
            )
            # The old primary stays a writable master until the sentinels turn it into a
            # replica (seconds after +switch-master); the follower still acknowledges it.
            assert replicates(follower, old)
            handed += [grant(manager, "k") for _ in range(3)]
            assert handed == [1, 2, 3, 4, 5, 6]
            assert (fence(old, "k"), fence(follower, "k"), fence(promoted, "k")) == (6, 6, 3)
            assert watch.wait(BOUND_S) == promoted.port
        later = granted_on(manager, "k", promoted)
    if fencing == "counter":
        assert later == 4  # the promoted replica's counter was 3: token 4 again
        return
    check_never_reissued(handed, later)
    assert later == floor(agreed_epoch(deployment, promoted)) == 2**40  # its counter: 3


@pytest.mark.sentinel
@pytest.mark.replicas(2)
def test_a_grant_whose_wait_a_sentinel_failover_cuts_is_a_replication_error(
    sentinel_deployment: SentinelDeployment,
) -> None:
    """A grant whose ``WAIT`` is still out when ``SENTINEL FAILOVER`` switches the primary raises
    ``ReplicationError`` and hands out no lease."""
    deployment = sentinel_deployment
    old = deployment.primary
    promoted, lagging = deployment.replicas
    deployment.set_replica_priority(promoted, 1)
    # WAIT 2 blocks while one replica's writes are paused; the other, healthy, is promoted (a
    # paused replica cannot answer the sentinels: PUBLISH, which they send it, waits too)
    # A socket timeout above the WAIT's bound: only the failover ends the WAIT (redis-py's
    # default of 5 s would cut the read before the sentinels demote the old primary).
    with LeaseManager.from_url(
        deployment.url,
        replica_acks=2,
        replica_ack_timeout_ms=PAUSE_MS,
        socket_timeout=PAUSE_MS / 1000 + BOUND_S,
    ) as manager:

        def fail_over() -> None:
            with deployment.watch_switch() as watch:
                deployment.failover()
                assert watch.wait(BOUND_S) == promoted.port

        outcome = interrupted_grant(manager, "k", old, [lagging], fail_over)
    check_a_replication_error(outcome, promoted, "k")


# --- Cluster --------------------------------------------------------------------------------


@pytest.fixture
def shards() -> Iterator[RedisClusterServers]:
    """Three primaries with two replicas each, of this test's own (its failovers are the
    test's)."""
    yield from started_cluster(RedisClusterServers(3, replicas=2, node_timeout_ms=5_000))


def key_on(cluster: RedisClusterServers, node: RedisServer) -> str:
    """A lease name whose slot ``node`` serves (the slot map the cluster started with)."""
    return next(
        name
        for name in (f"k{i}" for i in range(1_000))
        if cluster.node_for_slot(key_slot(name.encode())) is node
    )


def cluster_manager(
    cluster: RedisClusterServers, replica_ack_timeout_ms: int = ACK_MS, fencing: Fencing = "counter"
) -> LeaseManager:
    """A cluster manager of ``fencing`` tokens, with one replica's acks."""
    return LeaseManager.from_url(
        cluster.url,
        replica_acks=1,
        replica_ack_timeout_ms=replica_ack_timeout_ms,
        fencing=fencing,
    )


def force_failover(replica: RedisServer) -> None:
    """``CLUSTER FAILOVER FORCE`` on ``replica`` (no word from its primary, which may be
    reachable still; the other primaries vote), and wait until it is a primary."""
    with replica.client(socket_timeout=5) as client:
        client.execute_command("CLUSTER", "FAILOVER", "FORCE")
    wait_until(
        lambda: replication(replica).get("role") == "master",
        f"the replica on {replica.port} to take over",
        timeout_s=BOUND_S,
    )


@pytest.mark.cluster
@pytest.mark.parametrize("fencing", ["epoch", "counter"])
def test_a_laggard_forced_over_in_a_cluster_grants_no_token_again(
    shards: RedisClusterServers, fencing: Fencing
) -> None:
    """``CLUSTER FAILOVER FORCE`` to the lagging one of a shard's two replicas hands no token
    out twice with epoch tokens (the laggard's first grant is the floor of its new
    ``configEpoch``); with the counter's, ``replica_acks=1`` does not prevent the repeat (the
    control)."""
    cluster = shards
    old = cluster.servers[0]
    laggard, healthy = cluster.replicas_of[old.port]
    key = key_on(cluster, old)
    low = floor(my_epoch(old)) if fencing == "epoch" else 0
    first = [low + n for n in (range(6) if low else range(1, 7))]  # max(counter + 1, floor)
    with cluster_manager(cluster, fencing=fencing) as manager:
        handed = [grant(manager, key) for _ in range(3)]
        in_sync(old, 2)
        with writes_paused(laggard):
            handed += [grant(manager, key) for _ in range(3)]  # WAIT 1: the healthy one's ack
            assert handed == first
            assert fence(healthy, key, cluster=True) == first[5]
            assert fence(laggard, key, cluster=True) == first[2]
            force_failover(laggard)  # its link to the old primary, and what it had not applied, go
        later = granted_on(manager, key, laggard)
    if fencing == "counter":
        assert later == 4  # the laggard's counter was 3: token 4 again
        return
    check_never_reissued(handed, later)
    assert later == floor(my_epoch(laggard)) > handed[-1]  # the laggard's counter: first[2]


def my_epoch(node: RedisServer) -> int:
    """``node``'s own ``configEpoch`` (``cluster_my_epoch`` of ``CLUSTER INFO``)."""
    with node.client(socket_timeout=5, decode_responses=True) as client:
        info = str(client.execute_command("CLUSTER", "INFO"))
    fields = dict(line.split(":", 1) for line in info.split() if ":" in line)
    return int(fields["cluster_my_epoch"])


@pytest.mark.cluster
def test_a_grant_whose_wait_a_cluster_failover_interrupts_is_a_replication_error(
    shards: RedisClusterServers,
) -> None:
    """A grant whose ``WAIT`` a ``CLUSTER FAILOVER FORCE`` interrupts raises
    ``ReplicationError`` and hands out no lease."""
    cluster = shards
    old = cluster.servers[0]
    promoted, other = cluster.replicas_of[old.port]
    key = key_on(cluster, old)
    # the replicas' acknowledgement would take longer than the test: only the failover ends it
    with cluster_manager(cluster, replica_ack_timeout_ms=PAUSE_MS) as manager:
        outcome = interrupted_grant(
            manager, key, old, [promoted, other], lambda: force_failover(promoted)
        )
    check_a_replication_error(outcome, promoted, key)
