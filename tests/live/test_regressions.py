"""Live defects found by an adversarial review, kept as regressions."""

from __future__ import annotations

import enum
import time

import pytest
import redis

from fencedlease import BackendError, LeaseManager, ValidationError
from fencedlease_lab.servers.redis import RedisServer

pytestmark = pytest.mark.live


class Timeouts(enum.IntEnum):
    LOCK = 1_000


def test_an_int_subclass_ttl_is_used_as_its_value(redis_client: redis.Redis) -> None:
    """ttl_ms=IntEnum member: sent as 1000 (not its repr), one token spent, renew works too."""
    leases = LeaseManager(redis_client, prefix="t")
    lease = leases.acquire("k", ttl_ms=Timeouts.LOCK).lease
    assert lease is not None and lease.ttl_ms == 1_000 and type(lease.ttl_ms) is int
    assert 0 < redis_client.pttl("t:{k}") <= 1_000
    assert lease.renew(ttl_ms=Timeouts.LOCK) is True
    assert lease.release() is True
    assert redis_client.get("t:{k}:fence") == b"1"


def test_acquire_script_refuses_a_bad_ttl_before_spending_a_token(
    redis_client: redis.Redis,
) -> None:
    """The script itself checks ARGV[2] before INCR: nothing is written for a bad TTL."""
    from fencedlease._redis.scripts import ACQUIRE

    with pytest.raises(redis.ResponseError, match="ttl_ms must be a positive integer"):
        redis_client.eval(ACQUIRE.source, 2, "t:{k}", "t:{k}:fence", "owner", "1.5")
    assert redis_client.exists("t:{k}", "t:{k}:fence") == 0


@pytest.mark.parametrize("op", ["acquire", "inspect", "force_release"])
def test_an_unencodable_key_is_a_validation_error(redis_client: redis.Redis, op: str) -> None:
    """A key with a lone surrogate (os.fsdecode output) is refused before any I/O."""
    leases = LeaseManager(redis_client, prefix="t")
    with pytest.raises(ValidationError, match="encodable as UTF-8"):
        getattr(leases, op)("report-\udcff")


def test_acquire_on_a_stalled_redis_keeps_its_wait_bound(own_redis: RedisServer) -> None:
    """Redis stopped (SIGSTOP), socket timeout 1 s, wait_ms=100: the call gives up after one
    timeout (wait_ms plus one round trip), not a second one for a resend (2 s)."""
    client = redis.Redis.from_url(own_redis.url, socket_timeout=1.0)
    leases = LeaseManager(client, prefix="t")
    assert leases.acquire("warm", ttl_ms=1_000).acquired  # connection and script cache warm
    own_redis.pause()
    try:
        started = time.monotonic()
        with pytest.raises(BackendError):
            leases.acquire("k", ttl_ms=1_000, wait_ms=100)
        elapsed = time.monotonic() - started
    finally:
        own_redis.resume()
    assert 1.0 <= elapsed < 1.9
    leases.close()
    client.close()


def test_a_waiter_that_gave_up_is_not_handed_the_lease(redis_client: redis.Redis) -> None:
    """A waiter whose wait_ms ran out is not handed the lease by a release right after: the key
    is free, not held for a ghost (its last wait was queued with no grace)."""
    leases = LeaseManager(redis_client, prefix="t")
    holder = leases.acquire("ghost", ttl_ms=10_000).lease
    assert holder is not None
    assert not leases.acquire("ghost", ttl_ms=10_000, wait_ms=150, retry_delay_ms=50)
    assert holder.release() is True
    assert redis_client.pttl("t:{ghost}") == -2
    assert redis_client.get("t:{ghost}:fence") == b"1"
    leases.close()


def test_one_bad_key_does_not_fail_a_renewal_batch(redis_client: redis.Redis) -> None:
    """A batch renewal (one script call) with a key of another type, or holding a value that is
    not a lease, in it: that lease gets an error, the others are renewed or reported lost as
    usual."""
    from fencedlease import RedisBackend

    backend = RedisBackend(redis_client, "t")
    good = backend.acquire("good", "owner-1", 1_000)
    redis_client.set("t:{poisoned}", "not-a-lease")
    redis_client.lpush("t:{wrongtype}", "x")
    results = backend.renew_many(
        [("good", "owner-1", 60_000), ("wrongtype", "o", 60_000), ("missing", "o", 60_000),
         ("poisoned", "o", 60_000)]
    )  # fmt: skip
    assert results[0] == good.fencing_token == 1
    assert isinstance(results[1], BackendError) and "WRONGTYPE" in str(results[1])
    assert results[2] == 0
    assert isinstance(results[3], BackendError) and "malformed" in str(results[3])
    assert 59_000 < redis_client.pttl("t:{good}") <= 60_000
    assert redis_client.pttl("t:{missing}") == -2
