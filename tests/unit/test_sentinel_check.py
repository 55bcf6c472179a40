"""The Sentinel renewal check without a server: which clients are checked, the address a
sentinel's reply names (as the client connects to it), and the reason a renewal does not count.
The check on real sentinels: tests/live/test_sentinel_deposed.py."""

from __future__ import annotations

import inspect
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel

from fencedlease._async.sentinel import AsyncPrimaryCheck
from fencedlease._redis.sentinel import doubt, named_address
from fencedlease._sync.sentinel import PrimaryCheck


def _master_for(**kwargs: Any) -> redis.Redis:
    sentinel = redis.sentinel.Sentinel([("127.0.0.1", 1), ("127.0.0.1", 2)], **kwargs)  # type: ignore[no-untyped-call, unused-ignore]
    client: redis.Redis = sentinel.master_for("svc")  # type: ignore[no-untyped-call, unused-ignore]
    return client


def test_only_a_master_for_client_is_checked() -> None:
    assert PrimaryCheck(_master_for()).active
    assert not PrimaryCheck(redis.Redis(port=1)).active
    sentinels = redis.asyncio.sentinel.Sentinel([("127.0.0.1", 1)])  # type: ignore[no-untyped-call, unused-ignore]
    assert AsyncPrimaryCheck(sentinels.master_for("svc")).active
    assert not AsyncPrimaryCheck(redis.asyncio.Redis(port=1)).active


def test_the_named_address_is_where_the_client_connects() -> None:
    client = _master_for()
    assert named_address(client, (b"10.0.0.2", 6380)) == ("10.0.0.2", 6380)
    assert named_address(client, ("10.0.0.2", 6380)) == ("10.0.0.2", 6380)
    assert named_address(client, None) is None  # a sentinel that does not know the service
    forced = _master_for(force_master_ip="192.0.2.7")
    # an older redis-py (5.0.1) has no force_master_ip: its clients connect to the address named.
    forces = "force_master_ip" in inspect.signature(redis.sentinel.Sentinel).parameters
    assert named_address(forced, (b"10.0.0.2", 6380)) == (
        ("192.0.2.7", 6380) if forces else ("10.0.0.2", 6380)
    )


def test_why_a_renewal_does_not_count() -> None:
    ran_on = ("127.0.0.1", 7001)
    assert doubt(ran_on, ran_on, "svc") is None
    assert doubt(ran_on, None, "svc") == "not confirmed: no sentinel named the primary of 'svc'"
    assert doubt(ran_on, ("127.0.0.1", 7002), "svc") == (
        "not confirmed: it ran on 127.0.0.1:7001, the sentinels name 127.0.0.1:7002 the primary"
        " of 'svc'"
    )


def test_no_sentinel_answering_names_nothing() -> None:
    """Nothing listens on the sentinels' ports: each is asked once, without redis-py's retry
    backoff, and the check names no primary."""
    check = PrimaryCheck(_master_for(socket_connect_timeout=1))
    assert check.named() is None
    assert check.checks == 1
    check.close()
