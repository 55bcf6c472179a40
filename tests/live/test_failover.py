"""An unplanned failover with a lagging replica: the replica stops applying writes
(``CLIENT PAUSE ... WRITE``), a grant lands on the primary only, the primary is killed and the
replica promoted. Every token handed to a caller stays unique with ``replica_acks=1`` (the grant
the replica did not acknowledge is never handed out) and with ``fencing="clock"`` (the promoted
counter is overtaken by the clock); with both off the token repeats, and the repeat is reported:
the manager counts the new primary and ``inspect`` names the primary it was promoted from."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from fencedlease import LeaseEvent, LeaseManager, ReplicationError
from fencedlease.aio import AsyncLeaseManager
from fencedlease_lab.servers.sentinel import SentinelDeployment

pytestmark = [
    pytest.mark.live,
    pytest.mark.sentinel,
    pytest.mark.failover,
    pytest.mark.timeout(300),  # a failover takes seconds; more with both cores busy
]

PAUSE_MS = 60_000  # ended by CLIENT UNPAUSE once the primary is gone (see _kill_primary)


def _pause_replicas(deployment: SentinelDeployment) -> None:
    """Stop the replicas applying writes, once every write so far has reached them (WAIT): the
    grants before the pause are theirs too, whatever the load (the tests count on it)."""
    with deployment.primary.client() as client:
        replicas = len(deployment.replicas)
        assert client.execute_command("WAIT", replicas, 60_000) == replicas
    for replica in deployment.replicas:
        with replica.client() as client:
            client.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")


def _kill_primary(deployment: SentinelDeployment) -> int:
    """Kill the primary, let the paused replicas go once each has dropped its link to it (so the
    writes they had not applied are gone with it), and wait for the sentinels to promote one; its
    port."""
    with deployment.watch_switch() as watch:
        deployment.primary.kill()
        for replica in deployment.replicas:
            with replica.client() as client:
                while client.info("replication")["master_link_status"] != "down":
                    time.sleep(0.01)  # polls a state change; no assertion depends on the time
                client.execute_command("CLIENT", "UNPAUSE")
        return watch.wait(90)


def _healthy_token(manager: LeaseManager, key: str) -> int:
    """A grant's token while the replicas are healthy, released: asked again (bounded) when the
    100 ms acknowledgement bound is missed on a loaded machine (each miss burnt its token)."""
    for _ in range(50):
        token = _acquire_token(manager, key)
        if token is not None:
            return token
    raise AssertionError(f"50 grants of {key!r} on healthy replicas all missed 100 ms")


def _acquire_token(manager: LeaseManager, key: str, wait_ms: int = 0) -> int | None:
    """The token handed to the caller, or None when none was (a ReplicationError)."""
    try:
        result = manager.acquire(key, ttl_ms=60_000, wait_ms=wait_ms)
    except ReplicationError:
        return None
    assert result.lease is not None
    token = result.lease.fencing_token
    result.lease.release()
    return token


@pytest.mark.replicas(2)
def test_replica_acks_hand_out_no_token_twice(sentinel_deployment: SentinelDeployment) -> None:
    deployment = sentinel_deployment
    with LeaseManager.from_url(deployment.url, replica_acks=1) as manager:
        tokens: list[int | None] = [_healthy_token(manager, "k")]
        _pause_replicas(deployment)
        assert _acquire_token(manager, "k") is None  # granted on the primary only: taken back
        _kill_primary(deployment)
        # the other replica follows the new primary, acknowledges, and the grant goes through
        tokens.append(_acquire_token(manager, "k", wait_ms=60_000))
        assert manager.primary_changes == 1
    # Each grant the replicas did not acknowledge yet was taken back (its token burnt, never
    # handed out); the one handed out is past them all.
    first, after = tokens
    assert first is not None and after is not None and after > first


def test_clock_fencing_hands_out_no_token_twice(sentinel_deployment: SentinelDeployment) -> None:
    deployment = sentinel_deployment
    with LeaseManager.from_url(deployment.url, fencing="clock") as manager:
        first = _acquire_token(manager, "k")
        _pause_replicas(deployment)
        lost_grant = _acquire_token(manager, "k")  # never reaches the replica
        _kill_primary(deployment)
        after = _acquire_token(manager, "k", wait_ms=60_000)
        info_counter = manager.inspect("k")
        assert manager.primary_changes == 1
    assert first is not None and lost_grant is not None and after is not None
    assert first < lost_grant < after
    assert info_counter is None  # released


def test_both_off_a_repeated_token_is_reported(
    sentinel_deployment: SentinelDeployment, caplog: pytest.LogCaptureFixture
) -> None:
    deployment = sentinel_deployment
    old_primary = None
    events: list[LeaseEvent] = []
    # the counter's tokens (a redis+sentinel URL's default is epoch tokens): the control
    with LeaseManager.from_url(
        deployment.url, fencing="counter", on_event=events.append
    ) as manager:
        assert _acquire_token(manager, "k") == 1
        old_primary = manager.primary_id
        _pause_replicas(deployment)
        assert _acquire_token(manager, "k") == 2  # never reaches the replica
        _kill_primary(deployment)
        with caplog.at_level(logging.WARNING, logger="fencedlease"):
            result = manager.acquire("k", ttl_ms=60_000, wait_ms=60_000)
        assert result.lease is not None and result.lease.fencing_token == 2  # the repeat
        # ... and it is not silent: the manager saw the new primary, inspect names the old one
        assert manager.primary_changes == 1
        assert manager.primary_id not in (None, old_primary)
        info = manager.inspect("k")
        assert info is not None and info.promoted_from == old_primary
        assert info.primary_id == manager.primary_id
        assert any("the Redis primary changed" in r.getMessage() for r in caplog.records)
        # ... and the on_event hook is told, once
        failovers = [e for e in events if e.kind == "failover"]
        assert [(e.status, e.key, e.reason) for e in failovers] == [
            ("primary-changed", "k", f"replication id {old_primary} -> {manager.primary_id}")
        ]


def test_clock_fencing_on_the_asyncio_face(sentinel_deployment: SentinelDeployment) -> None:
    deployment = sentinel_deployment

    async def grant(manager: AsyncLeaseManager, wait_ms: int = 0) -> int:
        result = await manager.acquire("k", ttl_ms=60_000, wait_ms=wait_ms)
        assert result.lease is not None and result.lease.fencing_token is not None
        await result.lease.release()
        return result.lease.fencing_token

    async def main() -> tuple[int, int, int, int]:
        async with AsyncLeaseManager.from_url(deployment.url, fencing="clock") as manager:
            first = await grant(manager)
            _pause_replicas(deployment)
            lost_grant = await grant(manager)
            await asyncio.to_thread(_kill_primary, deployment)
            after = await grant(manager, wait_ms=60_000)
            return first, lost_grant, after, manager.primary_changes

    first, lost_grant, after, changes = asyncio.run(main())
    assert first < lost_grant < after
    assert changes == 1
