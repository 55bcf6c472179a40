"""CLIENT KILL of a holder's connections: the client reconnects, and the renewal that follows
checks the owner token in Redis instead of assuming the lease is still its own."""

from __future__ import annotations

import time

import pytest
import redis

from fencedlease import LeaseLostError, LeaseManager
from fencedlease._redis.keys import lease_key
from fencedlease_lab.servers.redis import RedisServer

pytestmark = pytest.mark.chaos

NAME = "fencedlease-chaos-holder"


def kill_holder(admin: redis.Redis) -> int:
    """CLIENT KILL every connection named NAME; how many."""
    ids = [c["id"] for c in admin.client_list() if c.get("name") == NAME]
    return sum(int(admin.client_kill_filter(_id=i)) for i in ids)


def holder_client(server: RedisServer) -> redis.Redis:
    return redis.Redis.from_url(server.url, client_name=NAME, socket_timeout=0.5)


def wait_for_a_renewal(leases: LeaseManager) -> None:
    """Until the renewer has sent a round trip (the holder's connections are all open)."""
    give_up = time.monotonic() + 30
    while leases.renewer.round_trips < 1:
        assert time.monotonic() < give_up, "no renewal was sent"
        time.sleep(0.005)


def test_after_client_kill_the_lease_is_renewed_and_kept(own_redis: RedisServer) -> None:
    """Killed mid-body, the holder reconnects; its renewals go on; the body ends normally."""
    admin = redis.Redis.from_url(own_redis.url, decode_responses=True)
    with LeaseManager(holder_client(own_redis), prefix="ck") as leases:
        with leases.hold("job", ttl_ms=1000, heartbeat_ms=250) as lease:
            wait_for_a_renewal(leases)
            assert kill_holder(admin) >= 1
            time.sleep(1.5)  # past the ttl: only renewals after the kill can have kept it
            assert not lease.lost
            assert [c for c in admin.client_list() if c.get("name") == NAME]  # reconnected
        assert admin.exists(lease_key("ck", "job")) == 0  # released normally
    admin.close()


def test_after_client_kill_a_changed_owner_is_detected(own_redis: RedisServer) -> None:
    """Killed mid-body while the key passes to another owner: the next renewal, over the new
    connection, finds the key not ours and the hold raises LeaseLostError. The TTL is 10 s, so
    the loss's reason tells the renewal from the deadline however slow the machine is."""
    admin = redis.Redis.from_url(own_redis.url, decode_responses=True)
    with (
        LeaseManager(holder_client(own_redis), prefix="ck") as leases,
        pytest.raises(LeaseLostError),
        leases.hold("job", ttl_ms=10_000, heartbeat_ms=250) as lease,
    ):
        wait_for_a_renewal(leases)
        assert kill_holder(admin) >= 1
        admin.set(lease_key("ck", "job"), f"{lease.fencing_token}:someone-else", px=30_000)
        assert lease.wait_lost(timeout_ms=8_000)  # by a renewal, long before the ttl
        assert lease.lost_reason is not None
        assert "owned by another owner" in lease.lost_reason
    admin.close()
