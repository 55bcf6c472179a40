"""``fencing="clock"`` and ``replica_acks`` on a single Redis (no replica: every ``WAIT`` counts 0),
on both faces: clock tokens for grants and hand-off grants, switching modes, the largest token,
and grants and renewals taken back or left unconfirmed for want of acknowledgements."""

from __future__ import annotations

import asyncio

import pytest
import redis

from fencedlease import BackendError, LeaseManager, RedisBackend, ReplicationError
from fencedlease._core.protocol import MAX_FENCING_TOKEN, new_owner_token
from fencedlease._redis.keys import lease_keys
from fencedlease._redis.scripts import ACQUIRE, ENQUEUE, RELEASE
from fencedlease._sync.scripts import run_script
from fencedlease.aio import AsyncLeaseManager

pytestmark = pytest.mark.live


def _server_us(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return seconds * 1_000_000 + micros


def test_clock_tokens_follow_the_server_clock_and_modes_switch_both_ways(
    redis_client: redis.Redis, redis_url: str
) -> None:
    with LeaseManager(redis_client) as counter_manager:
        first = counter_manager.acquire("k", ttl_ms=10_000).lease
        assert first is not None and first.fencing_token == 1
        assert first.release()
    with LeaseManager.from_url(redis_url, fencing="clock") as clock_manager:
        before = _server_us(redis_client)
        lease = clock_manager.acquire("k", ttl_ms=10_000).lease
        after = _server_us(redis_client)
        assert lease is not None and lease.fencing_token is not None
        assert before <= lease.fencing_token <= after
        assert redis_client.get("fencedlease:{k}:fence") == str(lease.fencing_token).encode()
        assert lease.release()
        clock_token = lease.fencing_token
    with LeaseManager(redis_client) as counter_manager:  # back to the counter: still increasing
        again = counter_manager.acquire("k", ttl_ms=10_000).lease
        assert again is not None and again.fencing_token == clock_token + 1

    async def main() -> int | None:
        async with AsyncLeaseManager.from_url(redis_url, fencing="clock") as manager:
            result = await manager.acquire("a", ttl_ms=10_000)
            return None if result.lease is None else result.lease.fencing_token

    before = _server_us(redis_client)
    token = asyncio.run(main())
    assert token is not None and before <= token <= _server_us(redis_client)


def test_a_hand_off_grant_takes_a_clock_token(redis_client: redis.Redis) -> None:
    backend = RedisBackend(redis_client, fencing="clock")
    holder, waiter = new_owner_token(), new_owner_token()
    granted = backend.acquire("h", holder, 10_000)
    assert granted.acquired
    keys = lease_keys("fencedlease", "h")
    assert (
        run_script(redis_client, ENQUEUE, keys[::2] + keys[3:], (waiter, 10_000, 10_000, 1_000))
        == 1
    )
    before = _server_us(redis_client)
    assert backend.release("h", holder)
    value = redis_client.get("fencedlease:{h}")
    assert isinstance(value, bytes)
    token, _, owner = value.decode().partition(":")
    assert owner == waiter
    assert int(token) >= before and int(token) > granted.fencing_token
    assert redis_client.get("fencedlease:{h}:fence") == token.encode()
    claimed = backend.acquire("h", waiter, 10_000)  # the waiter claims what was handed to it
    assert (claimed.acquired, claimed.retried, claimed.fencing_token) == (True, True, int(token))


@pytest.mark.parametrize("fencing", ["counter", "clock"])
def test_the_largest_token_is_issued_once_in_either_mode(
    redis_client: redis.Redis, fencing: str
) -> None:
    backend = RedisBackend(redis_client, fencing=fencing)  # type: ignore[arg-type]
    redis_client.set("fencedlease:{m}:fence", MAX_FENCING_TOKEN - 1)
    last = backend.acquire("m", new_owner_token(), 10_000)
    assert last.fencing_token == MAX_FENCING_TOKEN  # the counter's successor beats the clock
    redis_client.delete("fencedlease:{m}")
    with pytest.raises(BackendError, match="is at 2\\^63-1"):
        backend.acquire("m", new_owner_token(), 10_000)
    assert redis_client.get("fencedlease:{m}") is None  # nothing written


def test_without_acknowledgements_a_grant_is_taken_back_on_both_faces(
    redis_client: redis.Redis, redis_url: str
) -> None:
    with LeaseManager.from_url(redis_url, replica_acks=1, replica_ack_timeout_ms=10) as manager:
        with pytest.raises(ReplicationError) as caught:
            manager.acquire("k", ttl_ms=10_000)
        assert str(caught.value) == "acquire 'k': 0 of 1 replicas acknowledged it within 10 ms"
        assert redis_client.get("fencedlease:{k}") is None  # released again
        assert redis_client.get("fencedlease:{k}:fence") == b"1"  # its token burnt, not handed out
        # a waiting acquire keeps trying until its wait is spent, then says why it got nothing
        with pytest.raises(ReplicationError):
            manager.acquire("k", ttl_ms=10_000, wait_ms=200, retry_delay_ms=20)
        burnt = int(redis_client.get("fencedlease:{k}:fence") or 0)
        assert burnt > 2  # it tried more than once
        assert redis_client.get("fencedlease:{k}") is None

    async def main() -> None:
        async with AsyncLeaseManager.from_url(
            redis_url, replica_acks=1, replica_ack_timeout_ms=10
        ) as manager:
            with pytest.raises(ReplicationError) as caught:
                await manager.acquire("a", ttl_ms=10_000)
            assert (caught.value.acks, caught.value.wanted) == (0, 1)

    asyncio.run(main())
    assert redis_client.get("fencedlease:{a}") is None


def test_without_acknowledgements_a_renewal_confirms_nothing_on_both_faces(
    redis_client: redis.Redis, redis_url: str
) -> None:
    with LeaseManager(redis_client) as plain:
        granted = plain.acquire("k", ttl_ms=10_000).lease
        assert granted is not None
        owner = granted.owner_token
    with LeaseManager.from_url(redis_url, replica_acks=1, replica_ack_timeout_ms=10) as manager:
        lease = manager.restore("k", owner, ttl_ms=10_000, fencing_token=granted.fencing_token)
        with pytest.raises(ReplicationError):
            lease.renew()
        assert lease.expires_at is None  # no deadline was ever confirmed
        results = manager.backend.renew_many([("k", owner, 10_000), ("gone", owner, 10_000)])
        assert isinstance(results[0], ReplicationError) and results[1] == 0

    async def main() -> None:
        async with AsyncLeaseManager.from_url(
            redis_url, replica_acks=1, replica_ack_timeout_ms=10
        ) as manager:
            lease = manager.restore("k", owner, ttl_ms=10_000)
            with pytest.raises(ReplicationError):
                await lease.renew()
            assert lease.fencing_token is None  # not learnt from an unacknowledged renewal

    asyncio.run(main())


def test_wait_follows_the_script_on_its_connection_in_one_round_trip(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """WAIT counts the replicas holding the writes of the connection it runs on: it must go out on
    the script's connection, right behind it (MONITOR shows each command's client address)."""
    with (
        redis_client.monitor() as monitor,  # type: ignore[no-untyped-call]
        LeaseManager.from_url(redis_url, replica_acks=1, replica_ack_timeout_ms=10) as manager,
    ):
        with pytest.raises(ReplicationError):
            manager.acquire("k", ttl_ms=10_000)
        seen: list[tuple[str, str]] = []
        while not any(command.startswith("WAIT") for _, command in seen):
            entry = monitor.next_command()
            if entry["client_type"] != "lua":
                seen.append((f"{entry['client_address']}:{entry['client_port']}", entry["command"]))
    scripts = [i for i, (_, command) in enumerate(seen) if command.startswith("EVAL")]
    wait = len(seen) - 1
    assert seen[wait][1] == "WAIT 1 10"
    assert scripts and scripts[-1] == wait - 1  # right behind the acquire script
    assert seen[scripts[-1]][0] == seen[wait][0]  # on the same connection


def test_a_hand_off_grant_no_replica_acknowledges_is_not_handed_to_its_waiter(
    redis_client: redis.Redis,
) -> None:
    """The waiter's claim writes the handed key, so its WAIT covers the hand-off grant: without
    acknowledgements the claim is refused and the key given up, not handed out."""
    plain = RedisBackend(redis_client)
    acked = RedisBackend(redis_client, replica_acks=1, replica_ack_timeout_ms=10)
    holder, waiter = new_owner_token(), new_owner_token()
    assert plain.acquire("h", holder, 10_000).acquired
    keys = lease_keys("fencedlease", "h")
    assert (
        run_script(redis_client, ENQUEUE, keys[::2] + keys[3:], (waiter, 10_000, 10_000, 1_000))
        == 1
    )
    assert acked.release("h", holder)  # handed to the waiter: token 2
    assert redis_client.get("fencedlease:{h}:fence") == b"2"
    claim = acked.acquire("h", waiter, 10_000)
    assert (claim.acquired, claim.fencing_token, type(claim.refused)) == (
        False,
        0,
        ReplicationError,
    )
    assert redis_client.get("fencedlease:{h}") is None  # given up, not left to the waiter


def test_after_script_flush_the_eval_fallback_is_waited_for_too(
    redis_client: redis.Redis, redis_url: str
) -> None:
    redis_client.script_flush()
    manager = LeaseManager.from_url(redis_url, replica_acks=1, replica_ack_timeout_ms=10)
    with manager, pytest.raises(ReplicationError):
        manager.acquire("k", ttl_ms=10_000)
    assert redis_client.get("fencedlease:{k}:fence") == b"1"  # the EVAL ran once, then WAIT
    assert redis_client.get("fencedlease:{k}") is None
    redis_client.script_flush()

    async def main() -> None:
        async with AsyncLeaseManager.from_url(
            redis_url, replica_acks=1, replica_ack_timeout_ms=10
        ) as manager:
            with pytest.raises(ReplicationError):
                await manager.acquire("k", ttl_ms=10_000)

    asyncio.run(main())
    assert redis_client.get("fencedlease:{k}:fence") == b"2"


def test_a_floor_lifts_the_grant_and_the_hand_off_to_it(redis_client: redis.Redis) -> None:
    """``floor:<token>`` grants ``max(counter + 1, floor)`` and stores it as the counter, for a
    grant and for a release's hand-off grant; a malformed floor is refused, nothing written."""
    keys = lease_keys("fencedlease", "f")
    holder, waiter, other = new_owner_token(), new_owner_token(), new_owner_token()

    def acquire(owner: str, mode: str) -> object:
        return run_script(redis_client, ACQUIRE, keys, (owner, 10_000, mode))

    assert acquire(holder, "counter")[:2] == [1, b"1"]  # type: ignore[index]
    assert run_script(redis_client, RELEASE, keys, (holder,)) == 1
    floor = str(2**40)
    assert acquire(holder, f"floor:{floor}")[:2] == [1, floor.encode()]  # type: ignore[index]
    assert redis_client.get("fencedlease:{f}:fence") == floor.encode()
    assert run_script(redis_client, RELEASE, keys, (holder,)) == 1
    # above the floor, the counter's successor
    assert acquire(holder, "floor:5")[:2] == [1, str(2**40 + 1).encode()]  # type: ignore[index]
    assert (
        run_script(redis_client, ENQUEUE, keys[::2] + keys[3:], (waiter, 10_000, 10_000, 1_000))
        == 1
    )
    lifted = str(2 * 2**40)
    assert run_script(redis_client, RELEASE, keys, (holder, f"floor:{lifted}")) == 1
    assert redis_client.get("fencedlease:{f}") == f"{lifted}:{waiter}".encode()
    assert redis_client.get("fencedlease:{f}:fence") == lifted.encode()
    for bad in ("floor:", "floor:0", "floor:-1", "floor:01", "wall"):
        with pytest.raises(redis.ResponseError, match=f"cannot take the fencing mode {bad}"):
            run_script(redis_client, RELEASE, keys, (waiter,))  # free it first
            acquire(other, bad)
        assert redis_client.get("fencedlease:{f}") is None
        assert redis_client.get("fencedlease:{f}:fence") == lifted.encode()


def test_a_script_error_with_replica_acks_is_raised_as_it_is(redis_client: redis.Redis) -> None:
    """With ``replica_acks`` a script's own error (a lease key of a foreign type) is raised as the
    script said it, not taken for a grant a failover cut and refused."""
    redis_client.hset("fencedlease:{typed}", "a", "b")
    backend = RedisBackend(redis_client, replica_acks=1)
    with pytest.raises(BackendError) as caught:
        backend.acquire("typed", new_owner_token(), 10_000)
    assert not isinstance(caught.value, ReplicationError)
    assert "fencedlease acquire: the lease key fencedlease:{typed} " in str(caught.value)
    assert redis_client.hgetall("fencedlease:{typed}") == {b"a": b"b"}  # nothing written
