"""The Redis Cluster backend (asyncio): the lease scripts over a ``redis.asyncio.RedisCluster``.

An addition on `fencedlease._redis`, not a copy of the standalone backend: the same scripts, key
names, reply decoding and error mapping; what differs is where a call goes. Every script but
``renew_many.lua`` runs with the keys of one name, which share one hash slot, so redis-py sends
it to that slot's primary (it computes the slot itself for EVALSHA, no ``COMMAND GETKEYS``). A
renewal batch is split by slot (`fencedlease._redis.cluster`), one call per slot, each node's
slots in turn and the nodes at once, each node given its bound; one node's failure or silence
fails its own leases' renewals only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from redis.asyncio.cluster import RedisCluster

from .._errors import BackendError
from .._protocol import AcquireReply, InspectReply
from .._redis.aio import run_script
from .._redis.cluster import finish_batch, group_failed, shard_bound_s, slot_groups
from .._redis.errors import backend_errors
from .._redis.keys import fence_key, lease_key, lease_keys, renew_many_args
from .._redis.replies import (
    decode_acquire,
    decode_inspect,
    decode_release,
    decode_renew,
    decode_renew_many,
)
from .._redis.scripts import ACQUIRE, INSPECT, RELEASE, RENEW, RENEW_MANY
from .._validate import check_ms, check_prefix
from ._handoff import AsyncHandoff

__all__ = ["AsyncRedisClusterBackend"]

_Items = Sequence[tuple[str, str, int]]


class AsyncRedisClusterBackend:
    """Leases in a Redis Cluster under ``prefix``, over a ``redis.asyncio.RedisCluster`` (the key
    layout of `fencedlease._redis.keys`: every key of a name in one hash slot); an
    [`AsyncLeaseBackend`][fencedlease.AsyncLeaseBackend], the asyncio twin of
    [`RedisClusterBackend`][fencedlease.RedisClusterBackend].

    ``shard_timeout_ms``: how long a renewal batch waits for one node (None: a third of the
    batch's shortest TTL); a node that has not answered by then fails only its own leases'
    renewals, with a [`BackendError`][fencedlease.BackendError] (``timed_out``). ``owns_client``:
    close the client in [`close`][fencedlease.aio.AsyncRedisClusterBackend.close]. Every redis-py
    error, ``RedisClusterException`` and MOVED/ASK redirections redis-py gave up on included, is
    raised as a ``BackendError`` with the original in ``__cause__``. A waiter is woken by the
    release on any node (`fencedlease.aio._handoff.AsyncHandoff`: ``PUBLISH`` reaches every node
    of a cluster).

    Raises:
        ValidationError: ``prefix`` is not a non-empty str, or holds ``{`` or ``}`` (a brace would
            split a lease from its counter across slots); ``shard_timeout_ms`` is not an int >= 1.
    """

    def __init__(
        self,
        client: RedisCluster,
        prefix: str = "fencedlease",
        *,
        shard_timeout_ms: int | None = None,
        owns_client: bool = False,
    ) -> None:
        self.client = client
        self.prefix = check_prefix(prefix)
        self._bound_ms = (
            None if shard_timeout_ms is None else check_ms("shard_timeout_ms", shard_timeout_ms, 1)
        )
        self._owns_client = owns_client

    def release_waiter(self) -> AsyncHandoff:
        """The manager's release waiter: the hand-off queue and its listener task."""
        return AsyncHandoff(self.client, self.prefix)  # type: ignore[arg-type]

    def fencing_scope(self, key: str) -> str:
        """``<prefix>:{<escaped key>}:fence``, the name of ``key``'s fencing counter. No I/O."""
        return fence_key(self.prefix, key)

    async def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        with backend_errors(f"acquire {key!r}"):
            reply = await run_script(
                self.client, ACQUIRE, lease_keys(self.prefix, key), (owner_token, ttl_ms)
            )
        return decode_acquire(reply, key)

    async def renew(self, key: str, owner_token: str, ttl_ms: int) -> int:
        with backend_errors(f"renew {key!r}"):
            reply = await run_script(
                self.client, RENEW, (lease_key(self.prefix, key),), (owner_token, ttl_ms)
            )
        return decode_renew(reply, key)

    async def renew_many(self, items: _Items) -> list[int | BaseException]:
        """[`renew`][fencedlease.AsyncLeaseBackend.renew] for each item: one ``renew_many.lua``
        per hash slot, each node's slots in turn, the nodes at once (see the class).

        Raises:
            BackendError: every node failed (the first node's error; else each failed node's
                error stands in its leases' places).
        """
        if not items:
            return []
        bound_s = shard_bound_s(items, self._bound_ms)
        by_node: dict[str, list[list[int]]] = {}
        for slot, indices in slot_groups(self.prefix, items):
            by_node.setdefault(self._node_of(slot), []).append(indices)
        tasks = {
            node: asyncio.ensure_future(self._renew_node(items, groups))
            for node, groups in by_node.items()
        }
        done, pending = await asyncio.wait(tasks.values(), timeout=bound_s)
        for task in pending:
            task.cancel()
        results: list[int | BaseException | None] = [None] * len(items)
        failures: list[BaseException] = []
        for node, task in tasks.items():
            indices = [i for group in by_node[node] for i in group]
            if task in done:
                values, failed = task.result()
            else:
                error = group_failed(len(indices), node, bound_s)
                values, failed = [error] * len(indices), [error]
            for index, value in zip(indices, values, strict=True):
                results[index] = value
            failures.extend(failed)
        return finish_batch(results, failures)

    def _node_of(self, slot: int) -> str:
        """The name of the node serving ``slot`` as the client knows it (``slot:<n>`` before
        the client has read the slot map, or for a slot no node serves)."""
        try:
            return str(self.client.nodes_manager.get_node_from_slot(slot).name)
        except Exception:  # no slot map yet, or the slot is not covered: a group of its own
            return f"slot:{slot}"

    async def _renew_node(
        self, items: _Items, groups: list[list[int]]
    ) -> tuple[list[int | BaseException], list[BaseException]]:
        """The replies of one node's slots, in the order of ``groups``' indices, and the errors
        of the slots whose call failed (each in its leases' places)."""
        replies: list[int | BaseException] = []
        failed: list[BaseException] = []
        for indices in groups:
            batch = [items[i] for i in indices]
            keys, args = renew_many_args(self.prefix, batch)
            try:
                with backend_errors(f"renew {len(batch)} leases"):
                    reply = await run_script(self.client, RENEW_MANY, keys, args)
            except BackendError as exc:
                replies.extend([exc] * len(batch))
                failed.append(exc)
                continue
            replies.extend(decode_renew_many(batch, reply))
        return replies, failed

    async def release(self, key: str, owner_token: str) -> bool:
        with backend_errors(f"release {key!r}"):
            reply = await run_script(
                self.client, RELEASE, lease_keys(self.prefix, key), (owner_token,)
            )
        return decode_release(reply, key)

    async def inspect(self, key: str) -> InspectReply | None:
        keys = (lease_key(self.prefix, key), fence_key(self.prefix, key))
        with backend_errors(f"inspect {key!r}"):
            reply = await run_script(self.client, INSPECT, keys, ())
        return decode_inspect(reply, key)

    async def force_release(self, key: str) -> bool:
        with backend_errors(f"force_release {key!r}"):
            return bool(await self.client.delete(lease_key(self.prefix, key)))

    async def close(self) -> None:
        if self._owns_client:
            with backend_errors("close"):
                await self.client.aclose()
