"""The lab's means of partitions, their pure parts: where each member runs, the arguments a split
refuses before any rule is made, and how a server in a namespace is started; no root needed."""

from __future__ import annotations

import pytest

from fencedlease_lab.servers.netns import KernelFirewall
from fencedlease_lab.servers.partitions import Partitions
from fencedlease_lab.servers.redis import LOOPBACK, Placement, RedisServer


def test_each_member_has_a_namespace_and_an_address_of_its_own() -> None:
    """Member i runs in the run's namespace w<i>, on the far end of link i; this process's link
    is the one after the members'."""
    net = Partitions(["primary", "replica-0", "client-a"], run_id="a1b2c3d4")
    assert [net.placement(m) for m in ("primary", "replica-0", "client-a")] == [
        Placement("10.97.178.2", "fencedlease-a1b2c3d4-w0"),
        Placement("10.97.178.6", "fencedlease-a1b2c3d4-w1"),
        Placement("10.97.178.10", "fencedlease-a1b2c3d4-w2"),
    ]
    assert net.hub == "fencedlease-a1b2c3d4-hub"
    assert net.address("client-a") == "10.97.178.10"
    with pytest.raises(KeyError):
        net.address("sentinel-0")


def test_bad_members_and_sides_are_refused_before_anything_is_made() -> None:
    """Duplicate or too many members, fewer than two sides, an empty side, a member on two
    sides: a ValueError naming them, and no nft command is run."""
    with pytest.raises(ValueError, match="members must be distinct"):
        Partitions(["a", "a"])
    with pytest.raises(ValueError, match="at most 59 members"):
        Partitions([str(i) for i in range(60)])
    net = Partitions(["a", "b", "c"], run_id="a1b2c3d4")
    with pytest.raises(ValueError, match="a member is on two sides"):
        net.split({"a", "b"}, {"b", "c"})
    firewall = KernelFirewall("a1b2c3d4", netns="nowhere")
    with pytest.raises(ValueError, match="two sides or more, none empty"):
        firewall.split([["10.0.0.1"]])
    with pytest.raises(ValueError, match="two sides or more, none empty"):
        firewall.split([["10.0.0.1"], []])


def test_a_placed_server_runs_in_its_namespace_on_its_address() -> None:
    """A server placed in a namespace binds its address there, without protected mode (it has no
    password and its clients are not on loopback), and is started through ip netns exec; one on
    loopback keeps protected mode."""
    placement = Placement("10.97.178.2", "ns-0")
    assert placement.argv(["redis-server", "--port", "1"]) == [
        "ip", "netns", "exec", "ns-0", "redis-server", "--port", "1",
    ]  # fmt: skip
    assert LOOPBACK.argv(["redis-server"]) == ["redis-server"]
    placed, local = (
        RedisServer("redis-server", port=7000, placement=p) for p in (placement, LOOPBACK)
    )
    try:  # never started: their arguments only
        args = placed._args()
        assert args[args.index("--bind") + 1] == "10.97.178.2"
        assert args[args.index("--protected-mode") + 1] == "no"
        assert placed.url == "redis://10.97.178.2:7000/0"
        args = local._args()
        assert args[args.index("--protected-mode") + 1] == "yes"
    finally:
        placed.close()
        local.close()
