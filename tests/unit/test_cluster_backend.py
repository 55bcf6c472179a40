"""The Redis Cluster backends without a server: every script's keys in one slot, prefixes that
would split them refused, renewals grouped by slot, cluster errors mapped, the
``redis+cluster://`` URL parsed and checked before any I/O."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import redis.asyncio
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MovedError,
    RedisClusterException,
    SlotNotCoveredError,
)

from fencedlease import BackendError, LeaseManager, RedisClusterBackend, ValidationError
from fencedlease._core.epochs import Named
from fencedlease._core.urls import cluster_url_options
from fencedlease._handoff.channels import Channels
from fencedlease._redis.cluster import (
    finish_batch,
    group_failed,
    merge_nodes,
    shard_bound_s,
    sharded_pubsub,
    slot_groups,
)
from fencedlease._redis.cluster_majority import (
    ClusterView,
    SlotTable,
    renewal_doubt,
    renewed_slots,
    settled,
    slot_owner,
    unconfirmed_renewals,
)
from fencedlease._redis.errors import backend_errors
from fencedlease._redis.keys import (
    enqueue_args,
    fence_key,
    handoff_channel,
    lease_key,
    lease_keys,
    renew_many_args,
    resource_keys,
)
from fencedlease.aio import AsyncLeaseManager, AsyncRedisClusterBackend

NAMES = st.text(min_size=1, max_size=30)
PREFIXES = st.text(min_size=1, max_size=12).filter(lambda p: "{" not in p and "}" not in p)


def _slot(key: str) -> int:
    return key_slot(key.encode())


@given(prefix=PREFIXES, name=NAMES)
def test_every_key_and_channel_of_a_name_shares_its_slot(prefix: str, name: str) -> None:
    enqueue_keys, _ = enqueue_args(prefix, name, "owner", 1000, 1000, False, 200)
    renew_keys, _ = renew_many_args(prefix, [(name, "owner", 1000)])
    every = [
        *lease_keys(prefix, name),  # acquire.lua, release.lua
        *enqueue_keys,  # enqueue.lua
        *renew_keys,  # renew_many.lua, one name
        lease_key(prefix, name),  # renew.lua
        fence_key(prefix, name),  # inspect.lua
        handoff_channel(prefix, name),  # the release's PUBLISH
        *resource_keys(prefix, name),  # RedisFencedResource's scripts
    ]
    assert {_slot(k) for k in every} == {_slot(lease_key(prefix, name))}


def test_a_brace_in_a_name_does_not_move_its_keys_out_of_the_slot() -> None:
    # Unescaped, "a}{b" would end the hash tag early and "{x}" would make the tag "x".
    for name in ("a}{b", "{x}", "}", "{", "%7B"):
        assert len({_slot(k) for k in lease_keys("p", name)}) == 1
    assert lease_key("p", "{x}") == "p:{%7Bx%7D}"


@pytest.mark.parametrize("prefix", ["a{b", "a}b", "{t}", ""])
def test_both_backends_refuse_a_prefix_that_would_split_a_lease_from_its_counter(
    prefix: str,
) -> None:
    client = redis.asyncio.RedisCluster(host="127.0.0.1", port=1)  # connects at the first command
    with pytest.raises(ValidationError) as caught:
        AsyncRedisClusterBackend(client, prefix)
    assert caught.value.argument == "prefix"
    with pytest.raises(ValidationError) as sync_caught:
        RedisClusterBackend(client, prefix)  # type: ignore[arg-type]
    assert sync_caught.value.argument == "prefix"


def test_shard_timeout_ms_is_checked() -> None:
    client = redis.asyncio.RedisCluster(host="127.0.0.1", port=1)
    with pytest.raises(ValidationError) as caught:
        AsyncRedisClusterBackend(client, shard_timeout_ms=0)
    assert caught.value.argument == "shard_timeout_ms"


def test_slot_groups_keep_batch_order_within_and_first_appearance_across_slots() -> None:
    items = [(k, "o", 1000) for k in ("a", "b", "a", "c", "b")]
    groups = slot_groups("p", items)
    slot = {k: _slot(lease_key("p", k)) for k in "abc"}
    assert groups == [(slot["a"], [0, 2]), (slot["b"], [1, 4]), (slot["c"], [3])]


def test_a_silent_node_fails_only_its_own_leases_in_their_places() -> None:
    nodes = {"a:1": [[0, 2]], "b:2": [[1], [3]]}
    replies = merge_nodes(4, nodes, {"a:1": ([5, 6], []), "b:2": None}, 0.5)
    assert replies[0::2] == [5, 6]
    down = replies[1]
    assert isinstance(down, BackendError) and replies[3] is down
    assert str(down) == "renew 2 leases on b:2: no reply within 500 ms"
    with pytest.raises(BackendError, match="on a:1"):
        merge_nodes(2, {"a:1": [[0, 1]]}, {"a:1": None}, 0.5)


def test_shard_bound_is_a_third_of_the_shortest_ttl_unless_given() -> None:
    items = [("a", "o", 3000), ("b", "o", 900)]
    assert shard_bound_s(items, None) == pytest.approx(0.3)
    assert shard_bound_s(items, 250) == pytest.approx(0.25)


def test_a_batch_raises_only_when_every_call_failed() -> None:
    down = group_failed(2, "127.0.0.1:7000", 1.0)
    assert (down.sent, down.wrote, down.timed_out) == ("maybe", "maybe", True)
    assert str(down) == "renew 2 leases on 127.0.0.1:7000: no reply within 1000 ms"
    assert finish_batch([7, down, down], [down]) == [7, down, down]
    with pytest.raises(BackendError) as caught:
        finish_batch([down, down], [down])
    assert caught.value is down
    refused = BackendError("renew 'a': ttl_ms 0 refused by Redis")  # an item's own error
    assert finish_batch([refused], []) == [refused]


@pytest.mark.parametrize(
    "cause",
    [
        RedisClusterException("No way to dispatch this command.\nCommand: ('EVALSHA', 'tok-9')"),
        SlotNotCoveredError("Slot 5 is not covered by the cluster. command: EVALSHA tok-9"),
        ClusterError("TTL exhausted."),
        ClusterDownError("The cluster is down"),
        MovedError("3999 127.0.0.1:7001"),
        AskError("3999 127.0.0.1:7001"),
    ],
)
def test_cluster_errors_are_backend_errors_that_may_have_run(cause: Exception) -> None:
    with pytest.raises(BackendError) as caught, backend_errors("acquire 'k'"):
        raise cause
    error = caught.value
    assert error.__cause__ is cause
    assert (error.sent, error.wrote) == ("maybe", "maybe")
    assert str(error).startswith(f"acquire 'k': {type(cause).__name__}: ")
    assert "tok-9" not in str(error)


def test_cluster_urls_name_their_start_nodes() -> None:
    nodes, single = cluster_url_options(
        "redis+cluster://u:pw@10.0.0.1:7000,10.0.0.2:7001/?socket_timeout=2", {}
    )
    assert nodes == [("10.0.0.1", 7000), ("10.0.0.2", 7001)]
    assert single == "redis://u:pw@10.0.0.1:7000/0?socket_timeout=2"
    nodes, single = cluster_url_options("rediss+cluster://h", {})
    assert (nodes, single) == ([("h", 6379)], "rediss://h:6379/0")


@pytest.mark.parametrize(
    ("url", "kwargs", "argument", "says"),
    [
        ("redis+cluster://:secret@h:port/", {}, "url", "host:port"),
        ("redis+cluster://:secret@h:70000/", {}, "url", "host:port"),
        ("redis+cluster://:secret@h:7000,/", {}, "url", "host:port"),
        ("redis+cluster://:secret@h:7000/1", {}, "url", "only database 0"),
        ("redis+cluster://:secret@h:7000/", {"host": "x"}, "host", "given by"),
        ("redis+cluster://:secret@h:7000/?retry=1", {}, "retry", "retry"),
    ],
)
def test_bad_cluster_urls_are_refused_before_any_io_on_both_faces(
    url: str, kwargs: dict[str, Any], argument: str, says: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        LeaseManager.from_url(url, **kwargs)
    assert caught.value.argument == argument
    assert says in str(caught.value)
    assert "secret" not in str(caught.value)
    with pytest.raises(ValidationError) as async_caught:
        AsyncLeaseManager.from_url(url, **kwargs)
    assert async_caught.value.argument == argument


def test_an_async_cluster_manager_from_a_url_makes_no_io_until_used() -> None:
    async def main() -> str:
        leases = AsyncLeaseManager.from_url("redis+cluster://127.0.0.1:1,127.0.0.1:2/")
        backend = leases.backend
        assert isinstance(backend, AsyncRedisClusterBackend)
        nodes = sorted(n.name for n in backend.cluster.nodes_manager.startup_nodes.values())
        await leases.close()
        return ",".join(nodes)

    assert asyncio.run(main()) == "127.0.0.1:1,127.0.0.1:2"


def test_a_cluster_url_takes_epoch_tokens_unless_told_otherwise() -> None:
    """A manager from a ``redis+cluster://`` URL grants epoch tokens by default (its grants and
    renewals confirmed by the primaries' majority); ``fencing="counter"`` is still taken."""

    async def main() -> list[str]:
        modes: list[str] = []
        for fencing in (None, "counter", "epoch"):
            leases = AsyncLeaseManager.from_url("redis+cluster://127.0.0.1:1/", fencing=fencing)
            assert isinstance(leases.backend, AsyncRedisClusterBackend)
            modes.append(leases.backend.grants.fencing)
            await leases.close()
        return modes

    assert asyncio.run(main()) == ["epoch", "counter", "epoch"]


def test_a_sync_cluster_manager_refuses_an_asyncio_cluster_client() -> None:
    client = redis.asyncio.RedisCluster(host="127.0.0.1", port=1)
    with pytest.raises(ValidationError) as caught:
        LeaseManager(client)  # type: ignore[arg-type]
    assert caught.value.argument == "client"


@pytest.mark.parametrize(
    ("version", "sharded"),
    [("7.0.15", True), (b"7.2.4", True), ("8.0.0", True), ("6.2.5", False), ("", False)],
)
def test_sharded_pubsub_from_redis_7(version: object, sharded: bool) -> None:
    assert sharded_pubsub(version) is sharded


def test_sharded_messages_wake_as_plain_ones() -> None:
    channels = Channels(linger_s=5.0)
    event = threading.Event()
    assert channels.join("p:{k}:handoff", "waiter-a", event)
    channels.plan(0.0)
    confirm = {"type": "ssubscribe", "channel": b"p:{k}:handoff", "data": 1}
    assert channels.on_message(confirm) == [event]
    assert channels.confirmed == {"p:{k}:handoff"}
    wake = {"type": "smessage", "channel": b"p:{k}:handoff", "data": b"waiter-a"}
    assert channels.on_message(wake) == [event]
    other = {"type": "smessage", "channel": b"p:{k}:handoff", "data": b"waiter-b"}
    assert channels.on_message(other) == []


def test_a_nodes_view_names_the_slots_primary_and_its_epoch() -> None:
    """``CLUSTER NODES`` as redis-py parses it gives the primary serving a slot and its
    ``configEpoch``; a replica, a slot nobody serves or a malformed view name nothing."""
    view = {
        "127.0.0.1:7000": {"flags": "myself,master", "epoch": "3", "slots": [["0", "5460"]]},
        "127.0.0.1:7001": {"flags": "master", "epoch": "5", "slots": [["5461", "10922"]]},
        "127.0.0.1:7003": {"flags": "slave", "epoch": "5", "slots": []},
        "127.0.0.1:7002": {"flags": "master", "epoch": "2", "slots": [["10923"]]},
    }
    assert slot_owner(view, 0) == ("127.0.0.1:7000", 3)
    assert slot_owner(view, 5461) == ("127.0.0.1:7001", 5)
    assert slot_owner(view, 10923) == ("127.0.0.1:7002", 2)
    assert slot_owner(view, 10924) is None
    assert slot_owner(None, 0) is None
    assert (
        slot_owner({"127.0.0.1:7000": {"flags": "master", "epoch": "x", "slots": [["0"]]}}, 0)
        is None
    )


NODES_7000 = {
    "127.0.0.1:7000": {"flags": "myself,master", "epoch": "3", "slots": [["0", "5460"]]},
    "127.0.0.1:7001": {"flags": "master", "epoch": "5", "slots": [["5461", "10922"]]},
    "127.0.0.1:7003": {"flags": "slave", "epoch": "5", "slots": []},
    "127.0.0.1:7002": {"flags": "master", "epoch": "2", "slots": [["10923", "16383"]]},
}
# the view of a primary that heard of the take-over: 7003 serves 7001's slots at epoch 6
NODES_TAKEN_OVER = {
    **NODES_7000,
    "127.0.0.1:7001": {"flags": "master", "epoch": "5", "slots": []},
    "127.0.0.1:7003": {"flags": "master", "epoch": "6", "slots": [["5461", "10922"]]},
}


def test_a_slot_table_is_the_nodes_view_read_once() -> None:
    """A `SlotTable` names, for every slot, what `slot_owner` names from the same reply (the
    primary and its epoch), by a binary search of the parsed ranges."""
    table = SlotTable.of(NODES_7000)
    assert table.ranges == (
        (0, 5460, "127.0.0.1:7000", 3),
        (5461, 10922, "127.0.0.1:7001", 5),
        (10923, 16383, "127.0.0.1:7002", 2),
    )
    for slot in (0, 1, 5460, 5461, 10922, 10923, 16383):
        assert table.owner(slot) == slot_owner(NODES_7000, slot)
    gap = SlotTable.of({"127.0.0.1:7000": {"flags": "master", "epoch": "1", "slots": [["5", "9"]]}})
    assert [gap.owner(s) for s in (4, 5, 9, 10)] == [
        None,
        ("127.0.0.1:7000", 1),
        ("127.0.0.1:7000", 1),
        None,
    ]
    assert SlotTable.of("not a view").owner(0) is None


def test_a_cluster_view_decides_each_slot_by_the_majority_of_the_configured() -> None:
    """Two of three primaries that heard of a take-over name its node for the slot; a lone
    stale primary names nothing; a silent one counts against."""
    old, new = SlotTable.of(NODES_7000), SlotTable.of(NODES_TAKEN_OVER)
    view = ClusterView(3, [old, new, new])
    assert view.majority(6000).named == Named("127.0.0.1:7003", 6)
    assert view.majority(0).named == Named("127.0.0.1:7000", 3)
    minority = ClusterView(3, [old, None, None])
    assert minority.majority(6000).named is None
    assert minority.majority(6000).why == (
        "no majority: 1 of 3 configured voters agree on the primary and its epoch, 2 needed"
    )


def test_a_renewal_counts_only_where_the_majority_names_its_node_at_its_epoch() -> None:
    """A renewal that ran on a node the majority no longer names, or whose slot's epoch moved
    since, does not count; one on the named node at its epoch does."""
    old, new = SlotTable.of(NODES_7000), SlotTable.of(NODES_TAKEN_OVER)
    taken = ClusterView(3, [old, new, new]).majority(6000)
    assert renewal_doubt(taken, "127.0.0.1:7001", 5) == (
        "the majority names '127.0.0.1:7003' the primary, not '127.0.0.1:7001'"
    )
    assert renewal_doubt(taken, "127.0.0.1:7003", 6) is None
    assert renewal_doubt(taken, "127.0.0.1:7003", None) is None  # no epoch known before
    assert renewal_doubt(taken, "127.0.0.1:7003", 5) == (
        "the primary's epoch moved from 5 to 6 meanwhile"
    )


def test_unconfirmed_renewals_replace_only_the_tokens_of_the_doubted_places() -> None:
    """Each lease renewed on a doubted (node, slot) gets the majority's reason in its place; a
    lost lease (0), an error, and the leases of a confirmed place keep their results."""
    items = [("a", "o", 1000), ("b", "o", 1000), ("a", "p", 1000)]
    slot_a, slot_b = (key_slot(lease_key("p", k).encode()) for k in ("a", "b"))
    nodes = {"n1": [[0, 2]], "n2": [[1]]}
    failed = BackendError("boom")
    results: list[int | BaseException] = [7, 9, 0]
    renewed = renewed_slots("p", items, nodes, results)
    assert renewed == {("n1", slot_a): [0], ("n2", slot_b): [1]}
    checked = unconfirmed_renewals(
        items, renewed, results, {("n1", slot_a): "gone", ("n2", slot_b): None}
    )
    assert isinstance(checked[0], BackendError)
    assert str(checked[0]) == "renew 'a': not confirmed by the cluster's majority: gone"
    assert checked[1:] == [9, 0]
    assert renewed_slots("p", items, nodes, [failed, 0, 0]) == {}


def test_a_read_is_settled_once_a_majority_answered_alike() -> None:
    """The view's read ends early only when a majority of the configured primaries answered and
    every answer so far is alike; a failed primary counts for nothing."""
    old, new = SlotTable.of(NODES_7000), SlotTable.of(NODES_TAKEN_OVER)
    assert settled(3, {"a": old, "b": old})
    assert not settled(3, {"a": old})
    assert not settled(3, {"a": old, "b": new})
    assert not settled(3, {"a": old, "b": None})
    assert settled(3, {"a": old, "b": None, "c": old})
