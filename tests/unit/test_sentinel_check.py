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
from fencedlease._core.epochs import Majority
from fencedlease._redis.sentinel import doubt, master_epoch, named_address
from fencedlease._sync.sentinel import PrimaryCheck, SwitchWatcher


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
    """A renewal counts only on the address a majority of the sentinels name."""
    ran_on, other = ("127.0.0.1", 7001), ("127.0.0.1", 7002)
    assert doubt(ran_on, Majority.decide(3, [(ran_on, 1), (ran_on, 1), None]), "svc") is None
    assert doubt(ran_on, Majority.decide(3, [(ran_on, 1), None, None]), "svc") == (
        "not confirmed: the sentinels of 'svc' name no primary: no majority: 1 of 3 configured"
        " voters agree on the primary and its epoch, 2 needed"
    )
    assert doubt(ran_on, Majority.decide(3, [(other, 2), (other, 2), (ran_on, 1)]), "svc") == (
        "not confirmed: it ran on 127.0.0.1:7001, the sentinels name 127.0.0.1:7002 the primary"
        " of 'svc'"
    )


def test_a_sentinel_master_reply_gives_the_primary_and_its_epoch() -> None:
    """``SENTINEL MASTER`` as redis-py parses it (str or bytes keys) gives address and epoch."""
    client = _master_for()
    reply = {"ip": "10.0.0.2", "port": 6380, "config-epoch": 7, "flags": "master"}
    assert master_epoch(client, reply) == (("10.0.0.2", 6380), 7)
    raw = {b"ip": b"10.0.0.2", b"port": b"6380", b"config-epoch": b"7"}
    assert master_epoch(client, raw) == (("10.0.0.2", 6380), 7)
    assert master_epoch(client, {"ip": "10.0.0.2", "port": 6380}) is None
    assert master_epoch(client, None) is None


def test_no_sentinel_answering_names_nothing() -> None:
    """Nothing listens on the sentinels' ports: each is asked once, without redis-py's retry
    backoff, and the check names no primary."""
    check = PrimaryCheck(_master_for(socket_connect_timeout=1))
    decided = check.majority()
    assert decided.named is None
    assert decided.why == (
        "no majority: 0 of 2 configured voters agree on the primary and its epoch, 2 needed"
    )
    assert check.checks == 1
    assert check.epoch is None
    check.close()


class _Pool:
    """A pool that records how it was asked to disconnect."""

    def __init__(self) -> None:
        self.calls: list[dict[str, object]] = []

    def disconnect(self, **kwargs: object) -> None:
        self.calls.append(kwargs)


class _Client:
    def __init__(self) -> None:
        self.connection_pool = _Pool()


def test_a_switch_drops_only_the_idle_connections() -> None:
    """``+switch-master`` disconnects the idle connections only: a read in flight on another
    thread keeps its socket (the pool drops that connection when it is given back)."""
    client = _Client()
    switched: list[int] = []
    watcher = SwitchWatcher(client, lambda: switched.append(1))  # type: ignore[arg-type]
    watcher.switched()
    assert client.connection_pool.calls == [{"inuse_connections": False}]
    assert (switched, watcher.switches) == ([1], 1)
