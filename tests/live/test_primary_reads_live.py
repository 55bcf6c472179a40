"""The primary's replication id is read once per connection, not on every acquire: INFO runs on a
connection's first acquire, again after it reconnected or answered an error, and every acquire's
reply still names the primary (both faces, a real Redis)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest
import redis
import redis.asyncio

from fencedlease import BackendError, RedisBackend
from fencedlease._protocol import AcquireReply
from fencedlease._redis.scripts import ACQUIRE
from fencedlease.aio import AsyncRedisBackend

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
    the script is cached already (after a NOSCRIPT the EVAL reads the primary's id too)."""
    redis_client.script_load(ACQUIRE.source)
    if request.param == "sync":
        client = redis.Redis.from_url(redis_url, decode_responses=decode_responses)
        backend = RedisBackend(client, "p")
        yield lambda key: backend.acquire(key, "owner", 60_000)
        client.close()
        return
    loop = asyncio.new_event_loop()
    aclient = redis.asyncio.Redis.from_url(redis_url, decode_responses=decode_responses)
    aio = AsyncRedisBackend(aclient, "p")
    yield lambda key: loop.run_until_complete(aio.acquire(key, "owner", 60_000))
    loop.run_until_complete(aclient.aclose())
    loop.close()


def info_calls(client: redis.Redis) -> int:
    """INFO calls since the last CONFIG RESETSTAT, before this one (counted once it ran)."""
    return int(client.info("commandstats").get("cmdstat_info", {}).get("calls", 0))


def test_info_runs_once_per_connection(acquire: Acquire, redis_client: redis.Redis) -> None:
    replid = str(redis_client.info("replication")["master_replid"])
    redis_client.config_resetstat()
    replies = [acquire(f"k{i}") for i in range(20)]
    assert info_calls(redis_client) == 1  # the first acquire's
    assert [(r.acquired, r.fencing_token, r.primary_id) for r in replies] == [
        (True, 1, replid)
    ] * 20
    assert acquire("k0").retried and acquire("k0").primary_id == replid  # already ours
    assert info_calls(redis_client) == 2  # and the one above: no acquire ran it again


def test_a_new_connection_reads_it_again(acquire: Acquire, redis_client: redis.Redis) -> None:
    replid = str(redis_client.info("replication")["master_replid"])
    acquire("a")
    assert redis_client.client_kill_filter(_type="normal", skipme=True) >= 1
    redis_client.config_resetstat()
    assert acquire("b").primary_id == replid  # on a new connection: read there
    assert acquire("c").primary_id == replid  # known to that connection
    assert info_calls(redis_client) == 1  # by the script, on the new connection


def test_an_error_reply_makes_the_next_acquire_read_it(
    acquire: Acquire, redis_client: redis.Redis
) -> None:
    replid = str(redis_client.info("replication")["master_replid"])
    acquire("a")
    redis_client.hset("p:{bad}", "f", "v")  # the lease key holds a hash: an error reply
    redis_client.config_resetstat()
    with pytest.raises(BackendError):
        acquire("bad")
    assert acquire("b").primary_id == replid
    assert acquire("c").primary_id == replid
    assert info_calls(redis_client) == 1  # by the script, once, after the error
