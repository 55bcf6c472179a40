"""Redis Sentinel on a deployment of the test's own: ``redis+sentinel://`` URLs and
``Sentinel.master_for`` clients on both faces, replica acknowledgements, and a lease that keeps its
token across a planned failover (``SENTINEL FAILOVER``)."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import pytest
import redis
import redis.asyncio.sentinel
import redis.sentinel

from fencedlease import (
    Lease,
    LeaseEvent,
    LeaseLostError,
    LeaseManager,
    ReplicationError,
    ValidationError,
)
from fencedlease._core.state import LossReason
from fencedlease.aio import AsyncLeaseManager
from fencedlease_lab.servers.sentinel import SentinelDeployment

pytestmark = [
    pytest.mark.live,
    pytest.mark.sentinel,
    pytest.mark.timeout(300),  # a failover takes seconds; more with both cores busy
]

#: Where the replica must acknowledge: a bound a busy machine meets (the tests of too few
#: acknowledgements keep the default 100 ms).
ACK_MS = 5_000


def _granted_while_healthy(manager: LeaseManager, key: str, ttl_ms: int = 60_000) -> Lease:
    """A grant while the replica is healthy. The manager's 100 ms acknowledgement bound is the one
    the test is about, and a loaded machine's replica can miss it: each miss took the grant back
    (its token burnt), so the grant is asked again, a bounded number of times."""
    for _ in range(50):
        try:
            lease = manager.acquire(key, ttl_ms=ttl_ms).lease
        except ReplicationError:
            continue
        assert lease is not None
        return lease
    raise AssertionError(f"50 grants of {key!r} on a healthy replica all missed 100 ms")


def _replid(deployment: SentinelDeployment, port: int) -> str:
    with deployment.server_on(port).client() as client:
        return str(client.info("replication")["master_replid"])


def test_from_url_grants_on_the_primary_and_names_it(
    sentinel_deployment: SentinelDeployment,
) -> None:
    deployment = sentinel_deployment
    with LeaseManager.from_url(
        deployment.url, replica_acks=1, replica_ack_timeout_ms=ACK_MS
    ) as manager:
        lease = manager.acquire("k", ttl_ms=5_000).lease
        assert lease is not None and lease.fencing_token == 1
        assert manager.primary_id == _replid(deployment, deployment.primary.port)
        with deployment.primary.client() as primary:
            assert primary.get("fencedlease:{k}:fence") == b"1"
        # acknowledged by the replica: it holds the grant before the acquire returned
        with deployment.replicas[0].client() as replica:
            assert replica.get("fencedlease:{k}:fence") == b"1"
        info = manager.inspect("k")
        assert info is not None and info.fencing_token == 1
        assert info.primary_id == manager.primary_id and info.promoted_from is None
        assert manager.primary_changes == 0


def test_a_master_for_client_is_taken_on_both_faces(
    sentinel_deployment: SentinelDeployment,
) -> None:
    deployment = sentinel_deployment
    sentinel = redis.sentinel.Sentinel(deployment.sentinel_addresses)  # type: ignore[no-untyped-call, unused-ignore]
    client = sentinel.master_for(deployment.service)  # type: ignore[no-untyped-call, unused-ignore]
    with LeaseManager(client, fencing="clock") as manager:
        lease = manager.acquire("k", ttl_ms=5_000).lease
        assert lease is not None and lease.fencing_token is not None
        assert lease.fencing_token > 1_000_000_000_000_000  # microseconds since 1970
        assert lease.release()
    client.close()
    for one in sentinel.sentinels:
        one.close()

    async def main() -> int | None:
        sentinels = redis.asyncio.sentinel.Sentinel(deployment.sentinel_addresses)  # type: ignore[no-untyped-call, unused-ignore]
        aclient = sentinels.master_for(deployment.service)
        async with AsyncLeaseManager(
            aclient, replica_acks=1, replica_ack_timeout_ms=ACK_MS
        ) as manager:
            result = await manager.acquire("k", ttl_ms=5_000)
            token = None if result.lease is None else result.lease.fencing_token
        await aclient.aclose()
        for one in sentinels.sentinels:
            await one.aclose()
        return token

    # the counter follows the clock-mode token: still increasing
    assert asyncio.run(main()) == lease.fencing_token + 1


def test_too_few_acks_take_the_grant_back_on_both_faces(
    sentinel_deployment: SentinelDeployment,
) -> None:
    """The replica stops applying writes: the grant is refused (fail fast) and released, so
    the key is free and the next caller gets the next token; a renewal is not confirmed."""
    deployment = sentinel_deployment
    with LeaseManager.from_url(deployment.url, replica_acks=1) as manager:
        held = _granted_while_healthy(manager, "held")
        with deployment.replicas[0].client() as replica:
            replica.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
        with pytest.raises(ReplicationError) as caught:
            manager.acquire("k", ttl_ms=60_000)
        assert (caught.value.acks, caught.value.wanted, caught.value.wrote) == (0, 1, "no")
        assert str(caught.value) == "acquire 'k': 0 of 1 replicas acknowledged it within 100 ms"
        with deployment.primary.client() as primary:
            assert primary.get("fencedlease:{k}") is None  # released again
            assert primary.get("fencedlease:{k}:fence") == b"1"
            deadline_before = held.expires_at
            with pytest.raises(ReplicationError):
                held.renew()
            assert held.expires_at == deadline_before  # the deadline did not move

    async def main() -> None:
        async with AsyncLeaseManager.from_url(deployment.url, replica_acks=1) as manager:
            with pytest.raises(ReplicationError) as caught:
                await manager.acquire("a", ttl_ms=60_000)
            assert (caught.value.acks, caught.value.wanted) == (0, 1)

    asyncio.run(main())
    with deployment.primary.client() as primary:
        assert primary.get("fencedlease:{a}") is None
    with deployment.replicas[0].client() as replica:
        replica.execute_command("CLIENT", "UNPAUSE")


@pytest.mark.failover
def test_a_lease_keeps_its_token_across_sentinel_failover(
    sentinel_deployment: SentinelDeployment,
) -> None:
    deployment = sentinel_deployment
    old_port = deployment.primary.port
    switched = threading.Event()
    renewed_after: list[LeaseEvent] = []
    confirmed = threading.Event()

    def on_event(event: LeaseEvent) -> None:
        if switched.is_set() and event.kind == "renew" and event.status == "confirmed":
            renewed_after.append(event)
            confirmed.set()

    with LeaseManager.from_url(
        deployment.url, replica_acks=1, replica_ack_timeout_ms=ACK_MS, on_event=on_event
    ) as manager:
        # a heartbeat far longer than the test: the renewal that follows the switch is the
        # manager's answer to +switch-master, not its schedule
        with manager.hold("k", ttl_ms=300_000, heartbeat_ms=150_000) as lease:
            token = lease.fencing_token
            with deployment.watch_switch() as watch:
                deployment.failover()
                new_port = watch.wait()
            switched.set()
            assert new_port != old_port
            assert confirmed.wait(60)
            assert not lease.lost
            assert renewed_after[0].fencing_token == token
            with deployment.server_on(new_port).client() as new_primary:
                stored = new_primary.get("fencedlease:{k}")
                assert stored is not None and stored.startswith(f"{token}:".encode())
            info = manager.inspect("k")
            assert info is not None and info.fencing_token == token
            assert info.primary_id == _replid(deployment, new_port)
        with deployment.server_on(new_port).client() as new_primary:
            assert new_primary.get("fencedlease:{k}") is None  # released on the new primary
        second = manager.acquire("k", ttl_ms=5_000).lease
        # the first grant of epoch 1 (the failover's): its floor
        assert token == 1 and second is not None and second.fencing_token == 2**40


def _note_on_pool(manager: LeaseManager, primary: str) -> None:
    """Every idle connection of ``manager``'s pool taken to know ``primary`` as the primary's
    replication id (what an acquire reads and keeps on its connection)."""
    pool: Any = manager._backend.client.connection_pool  # type: ignore[attr-defined]
    for conn in pool._available_connections:
        conn.fencedlease_primary = primary


@pytest.mark.failover
def test_over_sentinel_a_grant_takes_its_connections_id_and_a_failover_is_still_seen(
    sentinel_deployment: SentinelDeployment,
) -> None:
    """Over Sentinel a grant runs no INFO on a connection that read the primary's id (counter
    and epoch fencing alike): the sentinels close every connection of the replica they
    promote, so after a failover the next grant names the new primary."""
    deployment = sentinel_deployment
    old_port, new_port = deployment.primary.port, deployment.replicas[0].port
    switched = threading.Event()
    renewed: set[str] = set()
    both = threading.Event()

    def on_event(event: LeaseEvent) -> None:
        if switched.is_set() and event.kind == "renew" and event.status == "confirmed":
            renewed.add(event.key)
            if len(renewed) == 2:
                both.set()

    with (
        socket.create_connection(("127.0.0.1", new_port), timeout=30) as on_replica,
        LeaseManager.from_url(deployment.url, fencing="counter", on_event=on_event) as counter,
        LeaseManager.from_url(deployment.url, on_event=on_event) as epoch,
        counter.hold("hc", ttl_ms=300_000, heartbeat_ms=150_000),
        epoch.hold("he", ttl_ms=300_000, heartbeat_ms=150_000),
    ):
        on_replica.sendall(b"PING\r\n")
        assert on_replica.recv(16) == b"+PONG\r\n"
        old_id = _replid(deployment, old_port)
        assert (counter.primary_id, epoch.primary_id) == (old_id, old_id)
        with deployment.watch_switch() as watch:
            deployment.failover()
            assert watch.wait() == new_port
        switched.set()
        assert both.wait(60)  # each manager renewed on the new primary: it saw the switch
        assert on_replica.recv(16) == b""  # closed by the promotion, with every other client
        new_id = _replid(deployment, new_port)
        for key, manager in (("c", counter), ("e", epoch)):
            lease = manager.acquire(key, ttl_ms=5_000).lease
            assert lease is not None
            lease.release()
            assert (manager.primary_id, manager.primary_changes) == (new_id, 1)
            _note_on_pool(manager, "f" * 40)  # a grant that runs INFO would answer new_id
            assert manager.acquire(key, ttl_ms=5_000).lease is not None
            assert manager.primary_id == "f" * 40


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"replica_acks": -1}, "replica_acks"),
        ({"replica_acks": True}, "replica_acks"),
        ({"replica_ack_timeout_ms": 0}, "replica_ack_timeout_ms"),
        ({"fencing": "wall"}, "fencing"),
    ],
)
def test_bad_replication_options_are_refused_before_any_io(
    options: dict[str, object], argument: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        LeaseManager.from_url("redis+sentinel://127.0.0.1:1/svc", **options)  # type: ignore[arg-type]
    assert caught.value.argument == argument
    with pytest.raises(ValidationError) as caught:
        AsyncLeaseManager(redis.asyncio.Redis(port=1), **options)  # type: ignore[arg-type]
    assert caught.value.argument == argument


def test_a_holder_no_replica_acknowledges_is_lost_within_its_ttl(
    sentinel_deployment: SentinelDeployment,
) -> None:
    """What a holder left with a deposed primary sees: its renewals are answered, but no replica
    acknowledges them, so none moves the deadline and the lease is lost at ttl_ms."""
    deployment = sentinel_deployment
    errors: list[LeaseEvent] = []
    with LeaseManager.from_url(deployment.url, replica_acks=1, on_event=errors.append) as manager:
        granted = _granted_while_healthy(manager, "k", ttl_ms=2_000)
        with pytest.raises(LeaseLostError), manager.keep_alive(granted) as lease:
            with deployment.replicas[0].client() as replica:
                replica.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
            assert lease.wait_lost(60_000)
            assert lease.lost_reason == LossReason.DEADLINE
        with deployment.replicas[0].client() as replica:
            replica.execute_command("CLIENT", "UNPAUSE")
    renewals = [e for e in errors if e.kind == "renew"]
    assert renewals and {e.status for e in renewals} <= {"error", "confirmed"}
    assert any(e.status == "error" and "ReplicationError" in (e.reason or "") for e in renewals)


@pytest.mark.failover
def test_an_asyncio_lease_keeps_its_token_across_sentinel_failover(
    sentinel_deployment: SentinelDeployment,
) -> None:
    deployment = sentinel_deployment
    old_port = deployment.primary.port

    async def main() -> tuple[int | None, int, int | None, bool, int | None]:
        loop = asyncio.get_running_loop()
        switched = asyncio.Event()
        confirmed = asyncio.Event()
        tokens: list[int | None] = []

        def on_event(event: LeaseEvent) -> None:
            if switched.is_set() and event.kind == "renew" and event.status == "confirmed":
                tokens.append(event.fencing_token)
                confirmed.set()

        async with (
            AsyncLeaseManager.from_url(
                deployment.url, replica_acks=1, replica_ack_timeout_ms=ACK_MS, on_event=on_event
            ) as manager,
            manager.hold("k", ttl_ms=300_000, heartbeat_ms=150_000) as lease,
        ):
            with deployment.watch_switch() as watch:
                await loop.run_in_executor(None, deployment.failover)
                new_port = await loop.run_in_executor(None, watch.wait)
            switched.set()
            await asyncio.wait_for(confirmed.wait(), 60)
            info = await manager.inspect("k")
            return (
                lease.fencing_token,
                new_port,
                tokens[0],
                lease.lost,
                None if info is None else info.fencing_token,
            )

    token, new_port, renewed, lost, stored = asyncio.run(main())
    assert new_port != old_port
    assert token is not None and renewed == token and stored == token and not lost
    with deployment.server_on(new_port).client() as new_primary:
        assert new_primary.get("fencedlease:{k}") is None  # released on the new primary
