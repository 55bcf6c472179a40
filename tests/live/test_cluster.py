"""Leases on a real Redis Cluster (three primaries of the lab's), both faces: many slots renewed
per slot, a paused primary holding up only its own leases, the hand-off across nodes, redirections
and cluster errors never raw."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager

import pytest
import redis
import redis.asyncio
from redis.crc import key_slot
from redis.exceptions import ClusterDownError, ClusterError, MovedError, ResponseError

from conftest import first_epoch_token, unavailable
from fencedlease import (
    BackendError,
    LeaseEvent,
    LeaseLostError,
    LeaseManager,
    RedisClusterBackend,
    ReplicationError,
)
from fencedlease._core.protocol import AcquireReply
from fencedlease._redis.cluster import sharded_pubsub
from fencedlease._redis.keys import fence_key, lease_key, lease_keys
from fencedlease.aio import AsyncLeaseManager, AsyncRedisClusterBackend
from fencedlease_lab.servers.cluster import RedisClusterServers
from fencedlease_lab.servers.redis import RedisServer, RedisUnavailable

pytestmark = [pytest.mark.live, pytest.mark.cluster]

KEYS = [f"job:{i}" for i in range(200)]


def _wait_queued(cluster: RedisClusterServers, prefix: str, key: str) -> None:
    """Until a waiter is in ``key``'s queue."""
    client = _client(cluster)
    try:
        while not client.zcard(f"{prefix}:{{{key}}}:waiters"):
            threading.Event().wait(0.005)
    finally:
        client.close()


def _slot(prefix: str, key: str) -> int:
    return key_slot(lease_key(prefix, key).encode())


def _client(cluster: RedisClusterServers) -> redis.RedisCluster:
    host, port = cluster.startup_nodes[0]
    return redis.RedisCluster(host=host, port=port, socket_timeout=10)


class _Renewals:
    """Counts confirmed background renewals per key; ``reached`` is set once every key of
    ``keys`` has ``times`` more than it had at the last `expect`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.keys: set[str] = set()
        self.base: dict[str, int] = {}
        self.times = 0
        self.lost: set[str] = set()
        self.reached = threading.Event()
        self.async_reached: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def expect(self, keys: list[str], times: int) -> None:
        with self.lock:
            self.keys, self.times = set(keys), times
            self.base = {k: self.counts[k] for k in keys}
            self.reached.clear()

    def __call__(self, event: LeaseEvent) -> None:
        if event.kind == "lost":
            self.lost.add(event.key)
        if event.kind != "renew" or event.status != "confirmed":
            return
        with self.lock:
            self.counts[event.key] += 1
            if self.keys and all(self.counts[k] - self.base[k] >= self.times for k in self.keys):
                self.keys = set()
                self.reached.set()


@contextmanager
def _paused(server: RedisServer) -> Iterator[None]:
    server.pause()
    try:
        yield
    finally:
        server.resume()


def _key_token(cluster: RedisClusterServers, prefix: str, key: str) -> int:
    """`first_epoch_token` of the node serving ``key``'s slot."""
    return first_epoch_token(cluster.node_for_slot(_slot(prefix, key)))


def _check_held(cluster: RedisClusterServers, prefix: str, tokens: dict[str, int]) -> None:
    """Every key's lease is in Redis with its grant's token."""
    client = _client(cluster)
    try:
        for key, token in tokens.items():
            value = client.get(lease_key(prefix, key))
            assert isinstance(value, bytes) and value.split(b":")[0] == str(token).encode(), key
    finally:
        client.close()


def test_keys_of_the_batch_span_at_least_150_slots() -> None:
    assert len({_slot("many", k) for k in KEYS}) >= 150


def test_sync_200_leases_across_slots_held_through_three_heartbeats(
    redis_cluster: RedisClusterServers,
) -> None:
    renewals = _Renewals()
    renewals.expect(KEYS, 3)
    with (
        LeaseManager.from_url(redis_cluster.url, prefix="many", on_event=renewals) as leases,
        ExitStack() as stack,
    ):
        held = [stack.enter_context(leases.hold(k, ttl_ms=4000, heartbeat_ms=500)) for k in KEYS]
        assert renewals.reached.wait(60)
        assert [lease.lost for lease in held] == [False] * len(KEYS)
        _check_held(redis_cluster, "many", {lease.key: lease.fencing_token or 0 for lease in held})


def test_async_200_leases_across_slots_held_through_three_heartbeats(
    redis_cluster: RedisClusterServers,
) -> None:
    renewals = _Renewals()
    renewals.expect(KEYS, 3)

    async def main() -> dict[str, int]:
        url = redis_cluster.url
        async with (
            AsyncLeaseManager.from_url(url, prefix="amany", on_event=renewals) as leases,
            AsyncExitStack() as stack,
        ):
            held = [
                await stack.enter_async_context(leases.hold(k, ttl_ms=4000, heartbeat_ms=500))
                for k in KEYS
            ]
            assert await asyncio.to_thread(renewals.reached.wait, 60)
            assert [lease.lost for lease in held] == [False] * len(KEYS)
            tokens = {lease.key: lease.fencing_token or 0 for lease in held}
            await asyncio.to_thread(_check_held, redis_cluster, "amany", tokens)
            return tokens

    assert len(asyncio.run(main())) == len(KEYS)


def test_one_renewal_batch_sends_one_script_per_slot_and_no_getkeys(
    redis_cluster: RedisClusterServers,
) -> None:
    client = _client(redis_cluster)
    backend = RedisClusterBackend(client, "perslot")
    try:
        grants = [backend.acquire(k, f"owner-{k}", 5000) for k in KEYS]
        assert [g.fencing_token for g in grants] == [1] * len(KEYS)
        items = [(k, f"owner-{k}", 5000) for k in KEYS]
        assert backend.renew_many(items) == [1] * len(KEYS)  # every node has the script cached
        for server in redis_cluster.servers:
            with server.client() as node:
                node.config_resetstat()
        replies = backend.renew_many(items)
        calls = Counter[str]()
        for server in redis_cluster.servers:
            with server.client() as node:
                stats = node.info("commandstats")
                for name in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_command|getkeys"):
                    calls[name] += int(stats.get(name, {}).get("calls", 0))
        assert replies == [1] * len(KEYS)
        assert calls == Counter({"cmdstat_evalsha": len({_slot("perslot", k) for k in KEYS})})
    finally:
        backend.close()
        client.close()


def _split(cluster: RedisClusterServers, prefix: str) -> tuple[list[str], list[str]]:
    """Thirty keys: (those on the first node, those on the others), neither empty."""
    first = cluster.servers[0]
    on = [k for k in KEYS[:30] if cluster.node_for_slot(_slot(prefix, k)) is first]
    others = [k for k in KEYS[:30] if k not in on]
    assert on and others
    return on, others


def test_sync_a_paused_primary_does_not_stall_other_shards(
    redis_cluster: RedisClusterServers,
) -> None:
    paused_keys, others = _split(redis_cluster, "pause")
    keys = paused_keys + others
    renewals = _Renewals()
    still: list[bool] = []
    # The paused shard's leases may lapse meanwhile: their holds then end with LeaseLostError.
    with (
        contextlib.suppress(LeaseLostError),
        LeaseManager.from_url(redis_cluster.url, prefix="pause", on_event=renewals) as leases,
        ExitStack() as stack,
    ):
        held = {k: stack.enter_context(leases.hold(k, ttl_ms=3000, heartbeat_ms=500)) for k in keys}
        with _paused(redis_cluster.servers[0]):
            renewals.expect(others, 3)  # 1.5 s of heartbeats at least, the shard bound is 1 s
            assert renewals.reached.wait(30)
            still = [held[k].lost for k in others]
    assert still == [False] * len(others)
    assert renewals.lost <= set(paused_keys)


def test_async_a_paused_primary_does_not_stall_other_shards(
    redis_cluster: RedisClusterServers,
) -> None:
    paused_keys, others = _split(redis_cluster, "apause")
    renewals = _Renewals()
    still: list[bool] = []

    async def hold_paused(leases: AsyncLeaseManager, entered: asyncio.Event) -> None:
        # A lost lease cancels its hold's block: the paused shard's leases are held in a task of
        # their own, beside the others (same manager, same renewal batches).
        with contextlib.suppress(LeaseLostError):
            async with AsyncExitStack() as stack:
                for k in paused_keys:
                    await stack.enter_async_context(leases.hold(k, ttl_ms=3000, heartbeat_ms=500))
                entered.set()
                await asyncio.Event().wait()

    async def main() -> None:
        url = redis_cluster.url
        async with (
            AsyncLeaseManager.from_url(url, prefix="apause", on_event=renewals) as leases,
            AsyncExitStack() as stack,
        ):
            entered = asyncio.Event()
            side = asyncio.ensure_future(hold_paused(leases, entered))
            await entered.wait()
            held = {
                k: await stack.enter_async_context(leases.hold(k, ttl_ms=3000, heartbeat_ms=500))
                for k in others
            }
            with _paused(redis_cluster.servers[0]):
                renewals.expect(others, 3)  # 1.5 s of heartbeats at least, the shard bound is 1 s
                assert await asyncio.to_thread(renewals.reached.wait, 30)
                still.extend(held[k].lost for k in others)
            side.cancel()
            await asyncio.gather(side, return_exceptions=True)

    asyncio.run(main())
    assert still == [False] * len(others)
    assert renewals.lost <= set(paused_keys)


def _cross_node_key(cluster: RedisClusterServers, prefix: str, control: str) -> str:
    """A key served by another node than the listener's (which subscribes where its control
    channel's slot lives)."""
    listener = cluster.node_for_slot(key_slot(control.encode()))
    return next(k for k in KEYS if cluster.node_for_slot(_slot(prefix, k)) is not listener)


def test_sync_waiter_is_woken_by_a_release_on_another_node(
    redis_cluster: RedisClusterServers,
) -> None:
    with (
        LeaseManager.from_url(redis_cluster.url, prefix="wake") as holder,
        LeaseManager.from_url(redis_cluster.url, prefix="wake") as waiter,
    ):
        handoff = waiter._release_waiter
        key = _cross_node_key(redis_cluster, "wake", handoff._control)  # type: ignore[attr-defined]
        lease = holder.acquire(key, ttl_ms=30_000).lease
        assert lease is not None
        got: list[int | None] = []
        thread = threading.Thread(
            target=lambda: got.append(
                waiter.acquire(
                    key, ttl_ms=5000, wait_ms=20_000, retry_delay_ms=20_000
                ).lease.fencing_token  # type: ignore[union-attr]
            )
        )
        thread.start()
        _wait_queued(redis_cluster, "wake", key)  # queued: now release
        assert lease.release()
        thread.join(15)
        # the holder's token is the floor of the node's epoch (the URL's default), the waiter's
        # the next one
        assert got == [_key_token(redis_cluster, "wake", key) + 1]
        assert handoff.notified == 1  # type: ignore[attr-defined]
        # Redis 7: SSUBSCRIBE on the slot's node, woken by the release's SPUBLISH (a sharded
        # listener hears no PUBLISH); 6.2: the plain listener, woken by PUBLISH.
        assert handoff.sharded is sharded_pubsub(redis_cluster.version())  # type: ignore[attr-defined]


@pytest.mark.skipif(
    not hasattr(redis.asyncio.RedisCluster, "pubsub"),
    reason=f"redis-py {redis.__version__} has no asyncio cluster pub/sub: waiters poll",
)
def test_async_waiter_is_woken_by_a_release_on_another_node(
    redis_cluster: RedisClusterServers,
) -> None:
    async def main() -> tuple[int | None, int, bool | None]:
        url = redis_cluster.url
        async with (
            AsyncLeaseManager.from_url(url, prefix="awake") as holder,
            AsyncLeaseManager.from_url(url, prefix="awake") as waiter,
        ):
            handoff = waiter._release_waiter
            key = _cross_node_key(redis_cluster, "awake", handoff._control)  # type: ignore[attr-defined]
            lease = (await holder.acquire(key, ttl_ms=30_000)).lease
            assert lease is not None
            task = asyncio.ensure_future(
                waiter.acquire(key, ttl_ms=5000, wait_ms=20_000, retry_delay_ms=20_000)
            )
            client = redis.asyncio.RedisCluster(*redis_cluster.startup_nodes[0])
            try:
                while not await client.zcard(f"awake:{{{key}}}:waiters"):
                    await asyncio.sleep(0.005)
            finally:
                await client.aclose()
            assert await lease.release()
            got = await asyncio.wait_for(task, 15)
            assert got.lease is not None
            sharded = handoff.sharded  # type: ignore[attr-defined]
            after = (got.lease.fencing_token or 0) - (lease.fencing_token or 0)
            return after, handoff.notified, sharded  # type: ignore[attr-defined]

    # the waiter's token is the one after the holder's (both of the node's epoch)
    assert asyncio.run(main()) == (1, 1, sharded_pubsub(redis_cluster.version()))


def _node_id(server: RedisServer) -> str:
    with server.client() as node:
        return str(node.execute_command("CLUSTER MYID").decode())


def test_a_moved_slot_is_followed_not_raised(redis_cluster: RedisClusterServers) -> None:
    key = "moving"
    slot = _slot("moved", key)
    source = redis_cluster.node_for_slot(slot)
    target = next(s for s in redis_cluster.servers if s is not source)
    client = _client(redis_cluster)  # reads the slot map before the move: it will get MOVED
    backend = RedisClusterBackend(client, "moved")

    def move(to: RedisServer) -> None:
        node = _node_id(to)
        for server in [to, *(s for s in redis_cluster.servers if s is not to)]:
            with server.client() as c:
                c.execute_command("CLUSTER SETSLOT", slot, "NODE", node)

    move(target)
    try:
        grant = backend.acquire(key, "owner-moved", 5000)
        assert grant.fencing_token == 1
        with target.client() as direct:
            assert direct.get(lease_key("moved", key)) == b"1:owner-moved"
        assert backend.renew_many([(key, "owner-moved", 5000)]) == [1]
        assert backend.release(key, "owner-moved") is True
    finally:
        with target.client() as direct:  # a slot moves back only empty
            direct.delete(*lease_keys("moved", key))
        move(source)
        backend.close()
        client.close()


def test_sync_a_slot_nobody_serves_is_a_backend_error_naming_no_secret(
    redis_cluster: RedisClusterServers,
) -> None:
    key = "orphan"
    slot = _slot("down", key)
    owner = redis_cluster.node_for_slot(slot)
    client = redis.RedisCluster(*redis_cluster.startup_nodes[0], socket_timeout=10)
    backend = RedisClusterBackend(client, "down")
    with owner.client() as node:
        node.execute_command("CLUSTER DELSLOTS", slot)
    try:
        with pytest.raises(BackendError) as caught:
            backend.acquire(key, "owner-secret-token", 5000)
    finally:
        with owner.client() as node:
            node.execute_command("CLUSTER ADDSLOTS", slot)
        backend.close()
        client.close()
    assert isinstance(caught.value.__cause__, ClusterDownError)
    assert "owner-secret-token" not in str(caught.value)
    assert (caught.value.sent, caught.value.wrote) == ("maybe", "maybe")


def test_async_a_slot_nobody_serves_is_a_backend_error_naming_no_secret(
    redis_cluster: RedisClusterServers,
) -> None:
    from fencedlease.aio import AsyncRedisClusterBackend

    key = "aorphan"
    slot = _slot("adown", key)
    owner = redis_cluster.node_for_slot(slot)

    async def main() -> BaseException:
        client = redis.asyncio.RedisCluster(*redis_cluster.startup_nodes[0])
        backend = AsyncRedisClusterBackend(client, "adown", owns_client=True)
        await client.initialize()
        with owner.client() as node:
            node.execute_command("CLUSTER DELSLOTS", slot)
        try:
            with pytest.raises(BackendError) as caught:
                await backend.acquire(key, "owner-secret-token", 5000)
        finally:
            with owner.client() as node:
                node.execute_command("CLUSTER ADDSLOTS", slot)
            await backend.close()
        return caught.value

    error = asyncio.run(main())
    assert isinstance(error, BackendError)
    assert isinstance(error.__cause__, ClusterDownError)
    assert "owner-secret-token" not in str(error)
    assert (error.sent, error.wrote) == ("maybe", "maybe")


@pytest.mark.parametrize("name", ["a}{b", "{x}", "%7B", "plain:name"])
def test_names_with_braces_run_every_script_in_one_slot(
    redis_cluster: RedisClusterServers, name: str
) -> None:
    client = _client(redis_cluster)
    backend = RedisClusterBackend(client, "braces")
    try:
        grant = backend.acquire(name, "owner-b", 5000)
        assert grant.fencing_token is not None and grant.fencing_token >= 1
        assert backend.renew(name, "owner-b", 5000) == grant.fencing_token
        assert backend.renew_many([(name, "owner-b", 5000)]) == [grant.fencing_token]
        seen = backend.inspect(name)
        assert seen is not None and seen.fencing_token == grant.fencing_token
        assert backend.release(name, "owner-b") is True
        assert backend.inspect(name) is None
    finally:
        backend.close()
        client.close()


def test_a_forked_child_renews_through_node_workers_of_its_own(
    redis_cluster: RedisClusterServers,
) -> None:
    client = _client(redis_cluster)
    backend = RedisClusterBackend(client, "fork")
    try:
        items = [(k, f"owner-{k}", 5000) for k in KEYS[:20]]
        for key, owner, ttl_ms in items:
            backend.acquire(key, owner, ttl_ms)
        assert backend.renew_many(items) == [1] * len(items)  # the parent's workers exist now
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report its renewals' replies, then leave at once
            code = 0
            try:
                code = 0 if backend.renew_many(items) == [1] * len(items) else 3
            except BaseException:
                code = 4
            os.write(write, bytes([code]))
            os._exit(0)
        os.close(write)
        reply = os.read(read, 1)
        os.close(read)
        os.waitpid(pid, 0)
        assert reply == bytes([0])
    finally:
        backend.close()
        client.close()


@contextmanager
def _moved_storm(cluster: RedisClusterServers, slot: int) -> Iterator[None]:
    """The slot's owner redirects it to another node, which still redirects it back: MOVED
    ping-pong (no node claims the slot anew, so gossip does not settle it) until undone."""
    owner = cluster.node_for_slot(slot)
    other = next(s for s in cluster.servers if s is not owner)
    with owner.client() as node:
        node.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", _node_id(other))
        node.execute_command("CLUSTER SETSLOT", slot, "NODE", _node_id(other))
    try:
        yield
    finally:
        with owner.client() as node:
            node.execute_command("CLUSTER SETSLOT", slot, "NODE", _node_id(owner))


def _empty_slot_key(cluster: RedisClusterServers, prefix: str) -> str:
    """A name whose slot holds no key yet (a slot moves only empty)."""
    for i in range(1000):
        slot = _slot(prefix, f"k{i}")
        with cluster.node_for_slot(slot).client() as node:
            if node.execute_command("CLUSTER COUNTKEYSINSLOT", slot) == 0:
                return f"k{i}"
    raise AssertionError("no empty slot")


def test_sync_a_moved_storm_is_a_backend_error(redis_cluster: RedisClusterServers) -> None:
    client = _client(redis_cluster)
    backend = RedisClusterBackend(client, "storm")
    key = _empty_slot_key(redis_cluster, "storm")
    try:
        with (
            _moved_storm(redis_cluster, _slot("storm", key)),
            pytest.raises(BackendError) as caught,
        ):
            backend.acquire(key, "owner-secret-token", 5000)
        assert isinstance(caught.value.__cause__, ClusterError)
        assert str(caught.value) == f"acquire {key!r}: ClusterError: TTL exhausted."
        assert (caught.value.sent, caught.value.wrote) == ("maybe", "maybe")
        assert backend.acquire(key, "owner-secret-token", 5000).fencing_token == 1  # undone
    finally:
        client.delete(*lease_keys("storm", key))
        backend.close()
        client.close()


def test_async_a_moved_storm_is_a_backend_error(redis_cluster: RedisClusterServers) -> None:
    from fencedlease.aio import AsyncRedisClusterBackend

    key = _empty_slot_key(redis_cluster, "astorm")

    async def main() -> tuple[BaseException, int | None]:
        client = redis.asyncio.RedisCluster(*redis_cluster.startup_nodes[0])
        backend = AsyncRedisClusterBackend(client, "astorm", owns_client=True)
        try:
            await client.initialize()
            with (
                _moved_storm(redis_cluster, _slot("astorm", key)),
                pytest.raises(BackendError) as caught,
            ):
                await backend.acquire(key, "owner-secret-token", 5000)
            again = await backend.acquire(key, "owner-secret-token", 5000)
            return caught.value, again.fencing_token
        finally:
            for name in lease_keys("astorm", key):
                await client.delete(name)
            await backend.close()

    error, token = asyncio.run(main())
    assert isinstance(error, BackendError)
    assert isinstance(error.__cause__, ClusterError)
    assert "owner-secret-token" not in str(error)
    assert (error.sent, error.wrote) == ("maybe", "maybe")
    assert token == 1


@pytest.mark.parametrize("face", ["sync", "asyncio"])
def test_cluster_url_options_reach_every_node_connection(
    redis_cluster: RedisClusterServers, face: str
) -> None:
    """A query option (``client_name``) applies to the connections of every node, and a keyword
    option (``socket_timeout``) is taken, as on ``redis://``."""
    name = f"fl-cluster-{face}"
    url = redis_cluster.url + f"/?client_name={name}"
    keys = [
        next(k for k in KEYS if redis_cluster.node_for_slot(_slot(face, k)) is s)
        for s in redis_cluster.servers
    ]

    named: list[int] = []
    if face == "sync":
        with LeaseManager.from_url(url, prefix=face, socket_timeout=7) as leases:
            tokens = [leases.acquire(k, ttl_ms=5000).lease.fencing_token for k in keys]  # type: ignore[union-attr]
            named.extend(_named_connections(redis_cluster, name))
    else:

        async def main() -> list[int | None]:
            async with AsyncLeaseManager.from_url(url, prefix=face, socket_timeout=7) as leases:
                got = [(await leases.acquire(k, ttl_ms=5000)).lease for k in keys]
                named.extend(_named_connections(redis_cluster, name))
                return [lease.fencing_token if lease else None for lease in got]

        tokens = asyncio.run(main())
    assert tokens == [
        first_epoch_token(server) for server in redis_cluster.servers
    ]  # one grant each
    assert named == [1, 1, 1]


def _named_connections(cluster: RedisClusterServers, name: str) -> list[int]:
    """How many connections named ``name`` each node has (at least one where a lease went)."""
    counts = []
    for server in cluster.servers:
        with server.client() as node:
            counts.append(min(1, sum(1 for c in node.client_list() if c.get("name") == name)))
    return counts


def _is_moved(cause: BaseException | None) -> bool:
    """A MOVED reply as redis-py raises it: MovedError; in an older one (5.0.1) a ResponseError."""
    return isinstance(cause, MovedError) or (
        type(cause) is ResponseError and str(cause).startswith("MOVED ")
    )


def test_a_plain_client_on_a_cluster_node_is_told_to_use_the_cluster_url(
    redis_cluster: RedisClusterServers,
) -> None:
    node = redis_cluster.servers[0]
    key = next(k for k in KEYS if redis_cluster.node_for_slot(_slot("plain", k)) is not node)
    with (
        LeaseManager.from_url(node.url, prefix="plain") as leases,
        pytest.raises(BackendError) as caught,
    ):
        leases.acquire(key, ttl_ms=5000)
    assert _is_moved(caught.value.__cause__)
    assert str(caught.value).endswith(
        "(the server is a Redis Cluster node: use a redis+cluster:// URL or a RedisCluster client)"
    )


def test_async_a_plain_client_on_a_cluster_node_is_told_to_use_the_cluster_url(
    redis_cluster: RedisClusterServers,
) -> None:
    node = redis_cluster.servers[0]
    key = next(k for k in KEYS if redis_cluster.node_for_slot(_slot("aplain", k)) is not node)

    async def main() -> BaseException:
        async with AsyncLeaseManager.from_url(node.url, prefix="aplain") as leases:
            with pytest.raises(BackendError) as caught:
                await leases.acquire(key, ttl_ms=5000)
        return caught.value

    error = asyncio.run(main())
    assert _is_moved(error.__cause__)
    assert str(error).endswith(
        "(the server is a Redis Cluster node: use a redis+cluster:// URL or a RedisCluster client)"
    )


@pytest.fixture(scope="module")
def replicated_cluster() -> Iterator[RedisClusterServers]:
    """Three primaries with one replica each, for this module's acknowledged grants."""
    cluster = RedisClusterServers(3, replicas=1)
    try:
        cluster.start()
    except RedisUnavailable as exc:
        unavailable(str(exc))
    try:
        yield cluster
    finally:
        cluster.close()


def test_the_lab_cluster_with_replicas_replicates_a_grant(
    replicated_cluster: RedisClusterServers,
) -> None:
    """The lab's replicas: each primary's grant reaches its replica (``WAIT``), which serves it
    to a ``READONLY`` connection."""
    cluster = replicated_cluster
    client = _client(cluster)
    backend = RedisClusterBackend(client, "repl")
    try:
        assert len(client.get_replicas()) == 3  # type: ignore[no-untyped-call]
        grant = backend.acquire("k", "owner-r", 60_000)
        primary = cluster.node_for_slot(_slot("repl", "k"))
        (replica,) = cluster.replicas_of[primary.port]
        with primary.client() as node:
            assert node.execute_command("WAIT", 1, 5000) == 1
        with replica.client() as node:
            node.execute_command("READONLY")
            assert node.get(lease_key("repl", "k")) == f"{grant.fencing_token}:owner-r".encode()
    finally:
        backend.close()
        client.close()


def _replica_of(cluster: RedisClusterServers, prefix: str, key: str) -> RedisServer:
    (replica,) = cluster.replicas_of[cluster.node_for_slot(_slot(prefix, key)).port]
    return replica


def _replica_value(cluster: RedisClusterServers, prefix: str, key: str) -> bytes | None:
    with _replica_of(cluster, prefix, key).client() as node:
        node.execute_command("READONLY")
        value: bytes | None = node.get(lease_key(prefix, key))
        return value


@contextmanager
def _writes_paused(server: RedisServer) -> Iterator[None]:
    with server.client() as node:
        node.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
    try:
        yield
    finally:
        with server.client() as node:
            node.execute_command("CLIENT", "UNPAUSE")


def _two_nodes_keys(cluster: RedisClusterServers, prefix: str) -> tuple[str, str]:
    first = KEYS[0]
    node = cluster.node_for_slot(_slot(prefix, first)).port
    other = next(k for k in KEYS if cluster.node_for_slot(_slot(prefix, k)).port != node)
    return first, other


def test_sync_replica_acks_a_grant_is_held_by_the_keys_replica(
    replicated_cluster: RedisClusterServers,
) -> None:
    """The script's WAIT goes to the key's own node: once acquire returns, the replica of that
    node holds the grant; a renewal batch across two nodes is acknowledged per slot."""
    one, two = _two_nodes_keys(replicated_cluster, "acks")
    client = _client(replicated_cluster)
    backend = RedisClusterBackend(client, "acks", replica_acks=1, replica_ack_timeout_ms=10_000)
    try:
        first = backend.acquire(one, "owner-1", 60_000)
        second = backend.acquire(two, "owner-2", 60_000)
        assert (first.acquired, first.fencing_token, first.refused) == (True, 1, None)
        assert (second.acquired, second.fencing_token, second.refused) == (True, 1, None)
        assert _replica_value(replicated_cluster, "acks", one) == b"1:owner-1"
        assert _replica_value(replicated_cluster, "acks", two) == b"1:owner-2"
        items = [(one, "owner-1", 60_000), (two, "owner-2", 60_000)]
        assert backend.renew_many(items) == [1, 1]
    finally:
        backend.close()
        client.close()


def test_async_replica_acks_a_grant_is_held_by_the_keys_replica(
    replicated_cluster: RedisClusterServers,
) -> None:
    """The asyncio face of the test above, through a manager made from the cluster URL (its
    default epoch tokens: each node's first grant is the floor of its epoch)."""
    one, two = _two_nodes_keys(replicated_cluster, "aacks")
    tokens = (
        _key_token(replicated_cluster, "aacks", one),
        _key_token(replicated_cluster, "aacks", two),
    )

    async def main() -> list[int | BaseException]:
        manager = AsyncLeaseManager.from_url(
            replicated_cluster.url,
            prefix="aacks",
            replica_acks=1,
            replica_ack_timeout_ms=10_000,
        )
        async with manager:
            first = await manager.acquire(one, ttl_ms=60_000)
            second = await manager.acquire(two, ttl_ms=60_000)
            assert first.lease is not None and second.lease is not None
            assert (first.lease.fencing_token, second.lease.fencing_token) == tokens
            assert _replica_value(replicated_cluster, "aacks", one) == (
                f"{tokens[0]}:{first.lease.owner_token}".encode()
            )
            assert _replica_value(replicated_cluster, "aacks", two) == (
                f"{tokens[1]}:{second.lease.owner_token}".encode()
            )
            backend = manager._backend
            assert isinstance(backend, AsyncRedisClusterBackend)
            items = [
                (one, first.lease.owner_token, 60_000),
                (two, second.lease.owner_token, 60_000),
            ]
            return await backend.renew_many(items)

    assert asyncio.run(main()) == list(tokens)


@pytest.mark.parametrize("face", ["sync", "asyncio"])
def test_replica_acks_a_grant_its_replica_did_not_take_is_taken_back(
    replicated_cluster: RedisClusterServers, face: str
) -> None:
    """With the key's replica paused (CLIENT PAUSE WRITE), WAIT counts 0 of 1: the grant is
    refused with a ReplicationError and released, so the key is free on its primary; in a renewal
    batch the lease on that node is refused the same way while the one on another node renews."""
    prefix = f"back-{face}"
    one, two = _two_nodes_keys(replicated_cluster, prefix)
    node = replicated_cluster.node_for_slot(_slot(prefix, one)).port
    near = next(
        k for k in KEYS[1:] if replicated_cluster.node_for_slot(_slot(prefix, k)).port == node
    )
    host, port = replicated_cluster.startup_nodes[0]
    client = _client(replicated_cluster)
    plain = RedisClusterBackend(client, prefix)
    items = [(near, "owner-n", 60_000), (two, "owner-2", 60_000)]
    try:
        assert plain.acquire(near, "owner-n", 60_000).acquired
        assert plain.acquire(two, "owner-2", 60_000).acquired
        with _writes_paused(_replica_of(replicated_cluster, prefix, one)):
            if face == "sync":
                backend = RedisClusterBackend(
                    client, prefix, replica_acks=1, replica_ack_timeout_ms=200
                )
                reply = backend.acquire(one, "owner-1", 60_000)
                renewed = backend.renew_many(items)
            else:

                async def main() -> tuple[AcquireReply, list[int | BaseException]]:
                    aclient = redis.asyncio.RedisCluster(host=host, port=port)
                    abackend = AsyncRedisClusterBackend(
                        aclient, prefix, replica_acks=1, replica_ack_timeout_ms=200,
                        owns_client=True,
                    )  # fmt: skip
                    try:
                        got = await abackend.acquire(one, "owner-1", 60_000)
                        return got, await abackend.renew_many(items)
                    finally:
                        await abackend.close()

                reply, renewed = asyncio.run(main())
            assert isinstance(reply.refused, ReplicationError)
            assert (reply.acquired, reply.refused.acks, reply.refused.wanted) == (False, 0, 1)
            assert client.exists(lease_key(prefix, one)) == 0
            refused, token = renewed
            assert isinstance(refused, ReplicationError)
            assert (refused.acks, refused.wanted, token) == (0, 1, 1)
    finally:
        client.close()


@pytest.mark.parametrize("face", ["sync", "asyncio"])
def test_clock_fencing_on_a_cluster_gives_tokens_above_the_counter(
    redis_cluster: RedisClusterServers, face: str
) -> None:
    """fencing="clock" reaches the cluster's scripts: a grant's token is above the name's
    counter (raised to 10**6 first) and at least the primary's clock in microseconds."""
    prefix = f"clock-{face}"
    client = _client(redis_cluster)
    try:
        client.set(fence_key(prefix, "job:1"), 10**6)
        seconds, micros = client.time()
        floor = int(seconds) * 1_000_000 + int(micros)
        if face == "sync":
            with LeaseManager.from_url(redis_cluster.url, prefix=prefix, fencing="clock") as m:
                result = m.acquire("job:1", ttl_ms=60_000)
                assert result.lease is not None
                token = result.lease.fencing_token
        else:

            async def main() -> int | None:
                async with AsyncLeaseManager.from_url(
                    redis_cluster.url, prefix=prefix, fencing="clock"
                ) as manager:
                    got = await manager.acquire("job:1", ttl_ms=60_000)
                    assert got.lease is not None
                    return got.lease.fencing_token

            token = asyncio.run(main())
        assert token is not None
        assert token > 10**6
        assert token >= floor
        assert int(client.get(fence_key(prefix, "job:1")) or 0) == token
    finally:
        client.close()


@pytest.mark.parametrize("face", ["sync", "asyncio"])
def test_a_semaphore_holds_its_limit_on_a_cluster(
    redis_cluster: RedisClusterServers, face: str
) -> None:
    """A semaphore of limit 2 on a cluster: two slots granted, the third refused, a slot freed
    by a release is granted again, and a slot renews on its node."""
    prefix = f"sem-{face}"
    if face == "sync":
        with LeaseManager.from_url(redis_cluster.url, prefix=prefix) as manager:
            semaphore = manager.semaphore("pool", limit=2)
            first = semaphore.acquire(ttl_ms=60_000)
            second = semaphore.acquire(ttl_ms=60_000)
            third = semaphore.acquire(ttl_ms=60_000)
            assert first.lease is not None and second.lease is not None
            assert third.lease is None
            first.lease.release()
            fourth = semaphore.acquire(ttl_ms=60_000)
            assert fourth.lease is not None
            assert fourth.lease.renew() is True  # a slot's renewal goes to its node
            tokens = [first.lease.fencing_token, second.lease.fencing_token]
            tokens.append(fourth.lease.fencing_token)
    else:

        async def main() -> list[int | None]:
            async with AsyncLeaseManager.from_url(redis_cluster.url, prefix=prefix) as manager:
                semaphore = manager.semaphore("pool", limit=2)
                first = await semaphore.acquire(ttl_ms=60_000)
                second = await semaphore.acquire(ttl_ms=60_000)
                third = await semaphore.acquire(ttl_ms=60_000)
                assert first.lease is not None and second.lease is not None
                assert third.lease is None
                await first.lease.release()
                fourth = await semaphore.acquire(ttl_ms=60_000)
                assert fourth.lease is not None
                assert await fourth.lease.renew() is True
                return [x.fencing_token for x in (first.lease, second.lease, fourth.lease)]

        tokens = asyncio.run(main())
    assert tokens == [1, 2, 3]


@pytest.mark.parametrize("face", ["sync", "asyncio"])
def test_acquires_on_every_node_are_no_primary_change(
    redis_cluster: RedisClusterServers, face: str
) -> None:
    """Each node of a cluster has its own replication id: acquires of names on all three nodes,
    twice over, count no failover and send no event (each slot's primary is watched apart)."""
    prefix = f"watch-{face}"
    names: dict[int, str] = {}
    for key in KEYS:
        names.setdefault(redis_cluster.node_for_slot(_slot(prefix, key)).port, key)
    assert len(names) == 3
    events: list[LeaseEvent] = []
    if face == "sync":
        with LeaseManager.from_url(redis_cluster.url, prefix=prefix, on_event=events.append) as m:
            for _ in range(2):
                for key in names.values():
                    result = m.acquire(key, ttl_ms=60_000)
                    assert result.lease is not None
                    result.lease.release()
            changes = m.primary_changes
    else:

        async def main() -> int:
            async with AsyncLeaseManager.from_url(
                redis_cluster.url, prefix=prefix, on_event=events.append
            ) as manager:
                for _ in range(2):
                    for key in names.values():
                        got = await manager.acquire(key, ttl_ms=60_000)
                        assert got.lease is not None
                        await got.lease.release()
                return manager.primary_changes

        changes = asyncio.run(main())
    assert changes == 0
    assert [e for e in events if e.kind == "failover"] == []


def test_replica_acks_a_hand_off_claim_is_acknowledged_by_the_keys_replica(
    replicated_cluster: RedisClusterServers,
) -> None:
    """A waiter queued behind a holder claims the lease the release hands it through acquire's
    script and its WAIT on the key's node: the claimed grant (the holder's token plus one) is on
    the replica when the waiter's acquire returns."""
    url, prefix, key = replicated_cluster.url, "claim", KEYS[3]
    options = {"prefix": prefix, "replica_acks": 1, "replica_ack_timeout_ms": 10_000}
    with (
        LeaseManager.from_url(url, **options) as holder,  # type: ignore[arg-type]
        LeaseManager.from_url(url, **options) as waiter,  # type: ignore[arg-type]
    ):
        lease = holder.acquire(key, ttl_ms=30_000).lease
        assert lease is not None
        got: list[tuple[bytes, bytes | None]] = []

        def wait() -> None:
            claimed = waiter.acquire(key, ttl_ms=30_000, wait_ms=20_000, retry_delay_ms=100)
            assert claimed.lease is not None
            expected = f"{claimed.lease.fencing_token}:{claimed.lease.owner_token}".encode()
            got.append((expected, _replica_value(replicated_cluster, prefix, key)))
            claimed.lease.release()

        thread = threading.Thread(target=wait)
        thread.start()
        _wait_queued(replicated_cluster, prefix, key)  # queued: now release
        assert lease.release()
        thread.join(15)
        assert len(got) == 1
        expected, held = got[0]
        assert expected.startswith(f"{(lease.fencing_token or 0) + 1}:".encode())
        assert held == expected


def _acquire_acked(
    cluster: RedisClusterServers, face: str, prefix: str, key: str, before: Callable[[], object]
) -> AcquireReply:
    """``acquire(key)`` on ``face``'s cluster backend with ``replica_acks=1`` (a 1 ms ``WAIT``),
    ``before()`` run once the client has read the slot map; the backend closed again."""
    host, port = cluster.startup_nodes[0]
    if face == "sync":
        client = redis.RedisCluster(host=host, port=port, socket_timeout=10)
        backend = RedisClusterBackend(
            client, prefix, replica_acks=1, replica_ack_timeout_ms=1, owns_client=True
        )
        try:
            before()
            return backend.acquire(key, "owner-acked", 5000)
        finally:
            backend.close()

    async def main() -> AcquireReply:
        aclient = redis.asyncio.RedisCluster(host=host, port=port)
        abackend = AsyncRedisClusterBackend(
            aclient, prefix, replica_acks=1, replica_ack_timeout_ms=1, owns_client=True
        )
        try:
            await aclient.initialize()  # the slot map
            before()
            return await abackend.acquire(key, "owner-acked", 5000)
        finally:
            await abackend.close()

    return asyncio.run(main())


@pytest.mark.parametrize("face", ["sync", "asyncio"])
def test_replica_acks_a_moved_slot_is_followed_not_raised(
    redis_cluster: RedisClusterServers, face: str
) -> None:
    """The script and its WAIT go to a node the client chose from its slot map: when the slot
    has moved since, the MOVED reply makes the backend read the map again and run the call on
    the slot's new node. This cluster has no replicas, so WAIT counts 0 of 1: the grant is made
    on the new node, then taken back (a ReplicationError, not a MovedError)."""
    prefix, key = f"amoved-{face}", "moving"
    slot = _slot(prefix, key)
    source = redis_cluster.node_for_slot(slot)
    target = next(s for s in redis_cluster.servers if s is not source)

    def move(to: RedisServer) -> None:
        node = _node_id(to)
        for server in [to, *(s for s in redis_cluster.servers if s is not to)]:
            with server.client() as c:
                c.execute_command("CLUSTER SETSLOT", slot, "NODE", node)

    try:
        reply = _acquire_acked(redis_cluster, face, prefix, key, lambda: move(target))
        assert isinstance(reply.refused, ReplicationError)
        assert (reply.acquired, reply.refused.acks) == (False, 0)
        with target.client() as direct:  # granted there (the counter moved to 1), taken back
            assert direct.get(fence_key(prefix, key)) == b"1"
            assert direct.exists(lease_key(prefix, key)) == 0
    finally:
        with target.client() as direct:  # a slot moves back only empty
            direct.delete(*lease_keys(prefix, key))
        move(source)


@pytest.mark.parametrize("face", ["sync", "asyncio"])
def test_replica_acks_a_flushed_script_cache_is_loaded_once_on_the_keys_node(
    redis_cluster: RedisClusterServers, face: str
) -> None:
    """With ``replica_acks`` the script and its WAIT go to the key's node as a pipeline: after
    SCRIPT FLUSH that node answers NOSCRIPT (the script did not run), and the backend sends the
    pair once more with EVAL. The grant runs exactly once (the counter is 1; this cluster has no
    replicas, so it is taken back as a ReplicationError) and the node has the script again."""
    from fencedlease._redis.scripts import ACQUIRE

    prefix, key = f"noscript-{face}", "flushed"
    node = redis_cluster.node_for_slot(_slot(prefix, key))

    def flush() -> None:
        with node.client() as direct:
            direct.script_flush()
            assert direct.script_exists(ACQUIRE.sha) == [False]

    try:
        reply = _acquire_acked(redis_cluster, face, prefix, key, flush)
        assert isinstance(reply.refused, ReplicationError)
        assert (reply.acquired, reply.refused.acks) == (False, 0)
        with node.client() as direct:
            assert direct.get(fence_key(prefix, key)) == b"1"
            assert direct.exists(lease_key(prefix, key)) == 0
            assert direct.script_exists(ACQUIRE.sha) == [True]
    finally:
        with node.client() as direct:
            direct.delete(*lease_keys(prefix, key))


SEMAPHORES = ("pool-a", "pool-zz")  # their keys hash to different slots (asserted below)


@pytest.mark.parametrize("face", ["sync", "asyncio"])
def test_slots_of_semaphores_in_different_hash_slots_renew_together(
    redis_cluster: RedisClusterServers, face: str
) -> None:
    """Slots of two semaphores whose keys lie in different hash slots, held by one manager, are
    renewed by the background renewer (one script per hash slot): every renewal is confirmed,
    none fails with a cross-slot error."""
    prefix = f"sem2-{face}"
    assert len({key_slot(lease_key(prefix, name).encode()) for name in SEMAPHORES}) == 2
    renewed: dict[str, threading.Event] = {name: threading.Event() for name in SEMAPHORES}
    statuses: list[str] = []

    def on_event(event: LeaseEvent) -> None:
        if event.kind == "renew":
            statuses.append(event.status)
            if event.status == "confirmed":
                renewed[event.key].set()

    def all_renewed() -> bool:
        return all(done.wait(30) for done in renewed.values())

    if face == "sync":
        with (
            LeaseManager.from_url(redis_cluster.url, prefix=prefix, on_event=on_event) as m,
            ExitStack() as stack,
        ):
            for name in SEMAPHORES:
                stack.enter_context(m.semaphore(name, limit=1).hold(ttl_ms=60_000, heartbeat_ms=50))
            assert all_renewed()
    else:

        async def main() -> None:
            async with (
                AsyncLeaseManager.from_url(
                    redis_cluster.url, prefix=prefix, on_event=on_event
                ) as m,
                AsyncExitStack() as stack,
            ):
                for name in SEMAPHORES:
                    await stack.enter_async_context(
                        m.semaphore(name, limit=1).hold(ttl_ms=60_000, heartbeat_ms=50)
                    )
                assert await asyncio.to_thread(all_renewed)

        asyncio.run(main())
    assert set(statuses) == {"confirmed"}
