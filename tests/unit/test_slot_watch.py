"""The Redis Cluster's watch on each slot's primary, without a server: a slot moved to another
shard is a migration, a replica of the slot's shard taking over is a failover, and a case it
cannot tell apart counts as a failover."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from fencedlease._core.protocol import AcquireReply
from fencedlease._redis.cluster import SlotWatch, migrated


def _node(name: str, kind: str = "primary") -> Any:
    return SimpleNamespace(name=name, server_type=kind)


class _Map:
    """A cluster client's slot map: ``slots_cache`` and ``nodes_cache`` as redis-py has them."""

    def __init__(self) -> None:
        self.nodes_manager = SimpleNamespace(slots_cache={}, nodes_cache={})

    def serve(self, slot: int, *nodes: Any) -> None:
        self.nodes_manager.slots_cache[slot] = list(nodes)
        for node in nodes:
            self.nodes_manager.nodes_cache[node.name] = node


def _reply(primary_id: str) -> AcquireReply:
    return AcquireReply(True, 1, 3000, primary_id=primary_id)


def test_the_rule_a_move_to_another_shard_whose_former_primary_still_serves() -> None:
    """A slot now on a node outside its former shard, its former primary still a primary, was
    migrated; a former replica now serving it, or a former primary no longer a primary, is a
    failover."""
    before = ("a:1", ("a:1", "a:2"))
    assert migrated(before, "b:1", frozenset({"a:1", "b:1"})) is True
    assert migrated(before, "a:2", frozenset({"a:2", "b:1"})) is False
    assert migrated(before, "b:1", frozenset({"b:1"})) is False


def test_a_migration_is_counted_apart_and_a_failover_as_a_change() -> None:
    """Acquires on slot 7 first on shard a, then on shard b (a still serving): one migration,
    no change; then b's replica takes over: one change, the event hook called."""
    cluster = _Map()
    a, a_replica, b, b_replica = (
        _node("a:1"),
        _node("a:2", "replica"),
        _node("b:1"),
        _node("b:2", "replica"),
    )
    cluster.serve(7, a, a_replica)
    cluster.serve(8, b, b_replica)
    watch = SlotWatch(lambda key: 7, cluster)
    changed: list[tuple[str, str, str]] = []
    watch.on_change = lambda *args: changed.append(args)
    watch.seen(_reply("id-a"), "k")
    cluster.serve(7, b, b_replica)  # migrated: b serves it, a still serves slot 6
    cluster.serve(6, a, a_replica)
    watch.seen(_reply("id-b"), "k")
    assert (watch.migrations, watch.changes, changed) == (1, 0, [])
    promoted = _node("b:2")
    cluster.serve(7, promoted, _node("b:1", "replica"))
    cluster.serve(8, promoted)
    watch.seen(_reply("id-b2"), "k")
    assert (watch.migrations, watch.changes, changed) == (1, 1, [("k", "id-b", "id-b2")])
