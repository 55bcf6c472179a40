"""The primary's replication id: INFO runs on every grant (where a rolled-back counter repeats a
token), and for a refusal only on a connection's first acquire, again after it reconnected or
answered an error; every acquire's reply still names the primary (both faces, a real Redis). A
server demoted and promoted again under an open connection is seen by the next grant."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest
import redis
import redis.asyncio

from fencedlease import BackendError, RedisBackend
from fencedlease._core.protocol import AcquireReply
from fencedlease._redis.scripts import ACQUIRE
from fencedlease.aio import AsyncRedisBackend
from fencedlease_lab.servers.redis import RedisServer

pytestmark = pytest.mark.live

Acquire = Callable[[str], AcquireReply]


@pytest.fixture(params=["sync", "asyncio"])
def acquire(
    request: pytest.FixtureRequest,
    redis_url: str,
    redis_client: redis.Redis,
    decode_responses: bool,
) -> Iterator[Acquire]:
    """The face's ``acquire(key, "owner", 60_000)`` on a backend of its own, run to its end;
    the script is cached already (after a NOSCRIPT the EVAL reads the primary's id too), and
    the backend's eviction check is done (it reads INFO once, in the background)."""
    redis_client.script_load(ACQUIRE.source)
    if request.param == "sync":
        client = redis.Redis.from_url(redis_url, decode_responses=decode_responses)
        backend = RedisBackend(client, "p")
        backend.read_eviction()  # the once-per-backend INFO memory, done before any count
        assert not backend.eviction.due
        yield lambda key: backend.acquire(key, "owner", 60_000)
        client.close()
        return
    loop = asyncio.new_event_loop()
    aclient = redis.asyncio.Redis.from_url(redis_url, decode_responses=decode_responses)
    aio = AsyncRedisBackend(aclient, "p")
    loop.run_until_complete(aio.read_eviction())
    assert not aio.eviction.due
    yield lambda key: loop.run_until_complete(aio.acquire(key, "owner", 60_000))
    loop.run_until_complete(aclient.aclose())
    loop.close()


def info_calls(client: redis.Redis) -> int:
    """INFO calls since the last CONFIG RESETSTAT, before this one (counted once it ran)."""
    return int(client.info("commandstats").get("cmdstat_info", {}).get("calls", 0))


def test_info_runs_on_every_grant_and_once_per_connection_for_a_refusal(
    acquire: Acquire, redis_client: redis.Redis
) -> None:
    replid = str(redis_client.info("replication")["master_replid"])
    redis_client.config_resetstat()
    replies = [acquire(f"k{i}") for i in range(20)]
    assert info_calls(redis_client) == 20  # every grant reads it
    assert [(r.acquired, r.fencing_token, r.primary_id) for r in replies] == [
        (True, 1, replid)
    ] * 20
    assert acquire("k0").retried and acquire("k0").primary_id == replid  # already ours: a grant
    assert info_calls(redis_client) == 21 + 2  # the count above was an INFO too
    redis_client.set("p:{held}", "7:another-owner", px=60_000)
    refusals = [acquire("held") for _ in range(10)]
    assert [(r.acquired, r.primary_id) for r in refusals] == [(False, replid)] * 10
    assert info_calls(redis_client) == 24  # a refusal on a connection that knows it: none


def test_a_new_connection_reads_it_again(acquire: Acquire, redis_client: redis.Redis) -> None:
    replid = str(redis_client.info("replication")["master_replid"])
    redis_client.set("p:{held}", "7:another-owner", px=60_000)
    acquire("held")
    assert redis_client.client_kill_filter(_type="normal", skipme=True) >= 1
    redis_client.config_resetstat()
    assert acquire("held").primary_id == replid  # on a new connection: read there
    assert acquire("held").primary_id == replid  # known to that connection
    assert info_calls(redis_client) == 1  # by the script, on the new connection


def test_an_error_reply_makes_the_next_acquire_read_it(
    acquire: Acquire, redis_client: redis.Redis
) -> None:
    replid = str(redis_client.info("replication")["master_replid"])
    redis_client.set("p:{held}", "7:another-owner", px=60_000)
    acquire("held")
    redis_client.hset("p:{bad}", "f", "v")  # the lease key holds a hash: an error reply
    redis_client.config_resetstat()
    with pytest.raises(BackendError):
        acquire("bad")
    assert acquire("held").primary_id == replid
    assert acquire("held").primary_id == replid
    assert info_calls(redis_client) == 1  # by the script, once, after the error


def _replicate(replica: redis.Redis, primary: RedisServer) -> None:
    """``replica`` made a replica of ``primary``, waited for until its link is up."""
    replica.replicaof("127.0.0.1", primary.port)
    while replica.info("replication").get("master_link_status") != "up":
        time.sleep(0.02)  # polled: a full sync has no event to wait on


def test_a_server_demoted_and_promoted_again_under_an_open_connection_is_seen() -> None:
    """Split brain: B is promoted while the client still writes to A (token 2, never
    replicated); A rejoins as B's replica (its counter back at 1) and is promoted again. The
    client's pooled connection to A stays open all along, and no error is answered on it: the
    next grant, token 2 again, must name A's new replication id, and the backend count the
    change."""
    with RedisServer() as a, RedisServer() as b:
        admin_a, admin_b = redis.Redis.from_url(a.url), redis.Redis.from_url(b.url)
        _replicate(admin_b, a)
        client = redis.Redis.from_url(a.url)
        backend = RedisBackend(client, "t")
        first = backend.acquire("k", "owner-1", 10_000)
        assert backend.release("k", "owner-1")
        admin_a.wait(1, 5_000)
        admin_b.replicaof("NO", "ONE")  # B promoted; A still takes writes
        second = backend.acquire("k", "owner-2", 10_000)
        assert backend.release("k", "owner-2")
        _replicate(admin_a, b)  # A's own writes are lost: the counter is back at 1
        admin_a.replicaof("NO", "ONE")
        third = backend.acquire("k", "owner-3", 10_000)
        assert (first.fencing_token, second.fencing_token, third.fencing_token) == (1, 2, 2)
        replid = str(admin_a.info("replication")["master_replid"])
        assert third.primary_id == replid != first.primary_id
        assert backend.primary.changes == 1
        client.close()
        admin_a.close()
        admin_b.close()


def test_known_runs_no_info_and_leaves_the_id_to_the_client(redis_client: redis.Redis) -> None:
    """``'known'`` in ARGV[4]: neither a grant (common or queued), an own lease's retry nor a
    refusal runs INFO, each reply's id is empty (the client's connection fills it in), and the
    common grant answers its token alone."""
    redis_client.script_load(ACQUIRE.source)
    keys = ["q:{k}", "q:{k}:fence", "q:{k}:waiters", "q:{k}:waiters:meta"]
    queue = ("1000", "0", "", "")
    redis_client.config_resetstat()
    replies = [
        redis_client.evalsha(ACQUIRE.sha, 4, *keys, "owner", 5_000, "counter", "known"),
        redis_client.evalsha(ACQUIRE.sha, 4, *keys, "owner", 5_000, "counter", "known"),
        redis_client.evalsha(ACQUIRE.sha, 4, *keys, "other", 5_000, "counter", "known", *queue),
    ]
    assert info_calls(redis_client) == 0
    assert replies[0] == b"1"  # the common grant: its token alone
    assert [(r[0], r[1], r[3]) for r in replies[1:]] == [(2, b"1", b""), (0, 0, b"")]
    redis_client.delete(keys[0], keys[2], keys[3])  # the lease and the queue: free again
    granted = redis_client.evalsha(
        ACQUIRE.sha, 4, *keys, "owner", 5_000, "counter", "known", *queue
    )
    assert info_calls(redis_client) == 1  # the count above was an INFO
    assert (granted[0], granted[1], granted[3]) == (1, b"2", b"")
    redis_client.delete(*keys)
