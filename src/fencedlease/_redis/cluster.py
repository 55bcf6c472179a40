"""What the Redis Cluster backends of both faces share: renewals grouped by hash slot and by node,
the per-shard bound (no I/O), and the client a ``redis+cluster://`` URL names (`cluster_client`).

Every key of a name lies in one hash slot (`fencedlease._redis.keys`: the escaped name is the
hash tag, and a prefix may hold no brace), so each lease script runs unchanged on the slot's
primary. Only ``renew_many.lua`` takes keys of many names: the backends split a batch by slot
(`slot_groups`, with redis-py's own CRC16 ``key_slot``, so no ``COMMAND GETKEYS`` is sent), send
one call per slot, the slots of one node in turn and the nodes at once, and give each node
`shard_bound_s` to answer. A node that fails, or does not answer in time, fails its own leases'
renewals only (a `BackendError` in their places); the other nodes' replies are applied. This is
Redisson's renewal model (its ``RedissonBaseLock`` renews each lock on the node of its slot), in
batches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from redis.connection import parse_url
from redis.crc import key_slot

from fencedlease._core.errors import BackendError
from fencedlease._core.protocol import AcquireReply
from fencedlease._core.redact import redact_text, redact_url, url_error
from fencedlease._core.urls import cluster_url_options
from fencedlease._core.validate import check_ms

from .errors import backend_errors, without_secrets
from .keys import lease_key
from .options import check_connection_options, check_url_query, with_node_timeouts
from .replication import GrantOptions, PrimaryWatch, log
from .replies import text
from .scripts import AckedCall

T = TypeVar("T")

__all__ = [
    "SHARD_SLICE_S",
    "AckedCall",
    "NodeReplies",
    "SlotWatch",
    "by_node",
    "check_shard_timeout",
    "cluster_client",
    "finish_batch",
    "group_failed",
    "merge_nodes",
    "node_name",
    "shard_bound_s",
    "sharded_pubsub",
    "short_renewals",
    "slot_groups",
]

SlotGroup = tuple[int, list[int]]
"""``(slot, indices of the batch's items in that slot)``."""


def slot_groups(prefix: str, items: Sequence[tuple[str, str, int]]) -> list[SlotGroup]:
    """The batch's items by the hash slot of their lease key, in order of first appearance; each
    group's indices in batch order. Pure (CRC16 of the hash tag, as Redis computes it)."""
    groups: dict[int, list[int]] = {}
    for index, (key, _, _) in enumerate(items):
        groups.setdefault(key_slot(lease_key(prefix, key).encode()), []).append(index)
    return list(groups.items())


def by_node(
    prefix: str, items: Sequence[tuple[str, str, int]], node_of: Callable[[int], str]
) -> dict[str, list[list[int]]]:
    """The batch's slot groups (`slot_groups`) by the node ``node_of(slot)`` names."""
    nodes: dict[str, list[list[int]]] = {}
    for slot, indices in slot_groups(prefix, items):
        nodes.setdefault(node_of(slot), []).append(indices)
    return nodes


NodeReplies = tuple[list[int | BaseException], list[BaseException]]
"""One node's share of a batch: a reply per item in its slot groups' order, and the errors of its
failed calls (each standing in its leases' places)."""


def merge_nodes(
    count: int,
    nodes: dict[str, list[list[int]]],
    replies: dict[str, NodeReplies | None],
    bound_s: float,
) -> list[int | BaseException]:
    """The batch's ``count`` replies in order from each node's share (None: the node did not
    answer within ``bound_s``, `group_failed`), raised as `finish_batch` says."""
    results: list[int | BaseException | None] = [None] * count
    failures: list[BaseException] = []
    for node, groups in nodes.items():
        indices = [i for group in groups for i in group]
        share = replies.get(node)
        if share is None:
            error = group_failed(len(indices), node, bound_s)
            share = [error] * len(indices), [error]
        for index, value in zip(indices, share[0], strict=True):
            results[index] = value
        failures.extend(share[1])
    return finish_batch(results, failures)


def node_name(cluster: Any, slot: int) -> str:
    """The name (``host:port``) of the node serving ``slot`` as a cluster client of either face
    knows it; ``slot:<n>`` before the client has read the slot map, or for a slot no node serves
    (a group of its own). No I/O."""
    try:
        return str(cluster.nodes_manager.get_node_from_slot(slot).name)
    except Exception:  # no slot map yet, or the slot is not covered
        return f"slot:{slot}"


SlotHome = tuple[str, tuple[str, ...]]
"""Where a slot lives in a cluster client's map: its primary's name and the names of its shard's
nodes (the primary and its replicas)."""


def slot_home(cluster: Any, slot: int) -> SlotHome | None:
    """Where ``slot`` lives in the slot map of a cluster client of either face; None before the
    map is read or for a slot no node serves. No I/O."""
    nodes = cluster.nodes_manager.slots_cache.get(slot)
    if not nodes:
        return None
    names = tuple(str(node.name) for node in nodes)
    return names[0], names


def primary_names(cluster: Any) -> frozenset[str]:
    """The names of every primary in a cluster client's map (of either face). No I/O."""
    return frozenset(
        str(node.name)
        for node in list(cluster.nodes_manager.nodes_cache.values())
        if node.server_type == "primary"
    )


def migrated(before: SlotHome, now: str, primaries: frozenset[str]) -> bool:
    """Whether a slot that lived at ``before`` and is now served by primary ``now`` was migrated
    to another shard rather than failed over: ``now`` was no node of the slot's shard (a
    failover promotes one of its replicas), and the slot's former primary is still a primary (a
    failover demotes it, or it is gone). A slot whose former primary lost its last slot, or a
    replica the client had not heard of, counts as a failover: a rollback is never let pass in
    silence."""
    return now not in before[1] and before[0] in primaries


class SlotWatch(PrimaryWatch):
    """The `PrimaryWatch` of a Redis Cluster: each hash slot's primary watched apart (``slot_of``
    a name), and a slot migration (``CLUSTER SETSLOT ... NODE``, a reshard: the slot's keys,
    counter included, moved with ``MIGRATE`` to another shard's primary, which has a replication
    id of its own) told from a failover by where the slot lived in ``cluster``'s map at the
    previous acquire (`migrated`). A migration is logged at INFO and counted in `migrations`,
    not in ``changes``: no event, no warning. Thread-safe; no I/O."""

    def __init__(self, slot_of: Callable[[str], int], cluster: Any) -> None:
        super().__init__(slot_of)
        self._slot_of = slot_of
        self._cluster = cluster
        self._homes: dict[int, SlotHome] = {}
        self.migrations = 0

    def seen(self, reply: AcquireReply, key: str) -> None:
        """Note the primary that answered ``reply`` and where ``key``'s slot lives now; a
        migration is noted as such, any other change as `PrimaryWatch.seen` does."""
        primary = reply.primary_id
        if primary is None:
            return
        slot = self._slot_of(key)
        home = slot_home(self._cluster, slot)
        before = self._homes.get(slot)
        if home is None:
            super().seen(reply, key)
            return
        self._homes[slot] = home
        if before is None or before[0] == home[0]:
            super().seen(reply, key)
            return
        if not migrated(before, home[0], primary_names(self._cluster)):
            super().seen(reply, key)
            return
        with self._lock:
            if self._ids.get(slot) == primary:
                return
            self._ids[slot] = primary
            self.primary_id = primary
            self.migrations += 1
        log.info(
            "fencedlease: slot %d of %r moved from %s to %s: a slot migration, not a failover",
            slot,
            key,
            before[0],
            home[0],
        )


def short_renewals(
    grants: GrantOptions,
    batch: Sequence[tuple[str, str, int]],
    results: list[int | BaseException],
    acks: int | None,
) -> list[int | BaseException]:
    """One slot's renewal ``results`` with each renewed lease's token replaced by a
    `ReplicationError` when its call's ``WAIT`` saw fewer than ``grants.replica_acks`` replicas
    (``acks``; None: no ``WAIT`` was sent). No I/O."""
    if not grants.short(acks):
        return results
    return [
        grants.refusal(f"renew {key!r}", acks or 0)
        if isinstance(result, int) and result > 0
        else result
        for (key, _, _), result in zip(batch, results, strict=True)
    ]


def check_shard_timeout(value: int | None) -> int | None:
    """``shard_timeout_ms`` as the backends take it: None, or an int >= 1 (milliseconds).

    Raises:
        ValidationError: anything else.
    """
    return None if value is None else check_ms("shard_timeout_ms", value, 1)


def shard_bound_s(items: Sequence[tuple[str, str, int]], bound_ms: int | None) -> float:
    """How long, in seconds, a renewal batch waits for one node: ``bound_ms`` when given, else a
    third of the batch's shortest TTL (a reply later than that leaves the other leases too little
    of their TTL to wait for it)."""
    if bound_ms is not None:
        return bound_ms / 1000
    return min((ttl_ms for _, _, ttl_ms in items), default=3000) / 3000


def group_failed(count: int, node: str, bound_s: float) -> BackendError:
    """The error that stands in the place of each of a node's ``count`` renewals when the node
    did not answer within ``bound_s`` seconds: a timeout, the renewals possibly run."""
    return BackendError(
        f"renew {count} leases on {node}: no reply within {round(bound_s * 1000)} ms",
        sent="maybe",
        wrote="maybe",
        timed_out=True,
    )


def finish_batch(
    results: Sequence[int | BaseException | None], failures: Sequence[BaseException]
) -> list[int | BaseException]:
    """A batch's replies, in order, each a token, 0 or an error; raised instead when every call
    failed (``failures``: the errors of the failed calls, each standing in its leases' places):
    then the whole round trip failed, as on a single Redis.

    Raises:
        BackendError: every item's place holds one of ``failures`` (the first of them).
    """
    failed = {id(error) for error in failures}
    if failures and all(id(value) in failed for value in results):
        raise failures[0]
    return [value for value in results if value is not None]


def cluster_client(
    factory: Callable[..., T], node: Callable[[str, int], Any], url: str, kwargs: dict[str, Any]
) -> T:
    """``factory(startup_nodes=[node(host, port), ...], **options)`` (``RedisCluster`` of either
    face, ``node`` its ``ClusterNode``) for a ``redis+cluster://`` URL: credentials, TLS and the
    query as redis-py reads them for ``redis://`` (checked as there:
    `fencedlease._redis.options`), then ``kwargs``. The sync client reads the slot map here.

    Raises:
        ValidationError: the URL or an option (see `fencedlease._core.urls.cluster_url_options`);
        the
            URL's password shows as ``***``.
        BackendError: no start node answered (the sync client connects at once).
    """
    nodes, single = cluster_url_options(url, kwargs)
    check_url_query(single)
    try:
        options = dict(parse_url(single))  # type: ignore[no-untyped-call]
    except ValueError as exc:
        unusable = str(exc)
    else:
        unusable = ""
    if unusable:  # raised here, with no exception holding the URL chained to it
        raise url_error(url, "not a usable Redis Cluster URL", detail=unusable)
    for name in ("host", "port", "db", "path", "connection_class"):
        options.pop(name, None)
    if single.startswith("rediss:"):
        options["ssl"] = True
    options.update(kwargs)
    # A node cut off by a partition gives way within a second: the error refreshes the slot map.
    options = with_node_timeouts(options)
    check_connection_options(options)
    startup = [node(host, port) for host, port in nodes]
    try:
        with backend_errors(f"connect to the Redis Cluster at {redact_url(url)}"):
            try:
                return factory(startup_nodes=startup, **options)
            except TypeError as exc:
                unusable = str(exc)
    except BackendError as exc:
        error: Exception = without_secrets(exc, lambda text: redact_text(text, url))
    else:
        error = url_error(url, "an option redis-py's cluster client does not take", detail=unusable)
    raise error  # here, with no exception holding the URL chained to it


SHARD_SLICE_S = 0.05
"""The longest read of one node's sharded subscriptions by the cluster hand-off's listener, in
seconds: redis-py reads the nodes in turn, so this bounds how long a message on another node, or a
new waiter's subscription, waits."""


def sharded_pubsub(version: object) -> bool:
    """Whether a server reporting ``redis_version`` ``version`` has sharded pub/sub (7.0+)."""
    major = text(version).partition(".")[0]
    return major.isdigit() and int(major) >= 7
