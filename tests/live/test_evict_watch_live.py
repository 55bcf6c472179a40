"""The evict nemesis' watch on a real Redis: after its compare-and-delete of a holder's key, the
key comes back under the holder's owner token only when something set the missing key again for
that owner (what a renewal that recreates a deleted key writes); the library's own renewal leaves
it missing, and the next owner's grant is no recreation."""

from __future__ import annotations

import threading

import pytest
import redis

from fencedlease import LeaseManager, redis_keys
from fencedlease_lab.harness.faults_lease import compare_and_delete, watch_comeback

pytestmark = pytest.mark.live


def evicted(client: redis.Redis, leases: LeaseManager) -> tuple[str, bytes, int]:
    """Acquire ``k``, delete its key as the nemesis does; the key, its deleted value and token."""
    lease = leases.acquire("k", ttl_ms=5000).lease
    assert lease is not None and lease.fencing_token is not None
    lease_key = redis_keys("t", "k").lease
    value = client.get(lease_key)
    assert isinstance(value, bytes)
    assert compare_and_delete(client, lease_key, lease.fencing_token)
    assert not lease.renew()  # the library's renewal answers 0 and writes nothing
    return lease_key, value, lease.fencing_token


def test_the_librarys_renewal_leaves_the_evicted_key_missing(redis_client: redis.Redis) -> None:
    with LeaseManager(redis_client, prefix="t") as leases:
        lease_key, value, _ = evicted(redis_client, leases)
        assert watch_comeback(redis_client, lease_key, value, 0.05, threading.Event()) is None
        assert redis_client.exists(lease_key) == 0


def test_a_key_set_again_for_its_owner_is_a_recreation(redis_client: redis.Redis) -> None:
    with LeaseManager(redis_client, prefix="t") as leases:
        lease_key, value, _ = evicted(redis_client, leases)
        owner = value.split(b":", 1)[1]
        redis_client.set(lease_key, b"1:" + owner, px=5000)  # the recreating renewal's write
        back = watch_comeback(redis_client, lease_key, value, 1.0, threading.Event())
        assert back is not None
        assert (back.token, back.recreated) == (1, True)


def test_the_next_owners_grant_is_no_recreation(redis_client: redis.Redis) -> None:
    with LeaseManager(redis_client, prefix="t") as leases:
        lease_key, value, token = evicted(redis_client, leases)
        with LeaseManager(redis_client, prefix="t") as others:
            taken = others.acquire("k", ttl_ms=5000).lease
            back = watch_comeback(redis_client, lease_key, value, 1.0, threading.Event())
            assert back is not None
            assert (back.token, back.recreated) == (token + 1, False)
            assert taken is not None and taken.fencing_token == token + 1
