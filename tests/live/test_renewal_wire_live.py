"""A renewal batch packed by the library, on a real Redis, both faces: one EVALSHA per batch, each
lease's outcome of its own, the fallback after SCRIPT FLUSH, and a pooled connection the server
closed replaced without an error."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence

import pytest
import redis
import redis.asyncio

from fencedlease import BackendError, RedisBackend
from fencedlease._core.schedule import RenewalItem
from fencedlease.aio import AsyncRedisBackend

pytestmark = pytest.mark.live

Renew = Callable[[Sequence[tuple[str, str, int]]], list[int | BaseException]]


@pytest.fixture(params=["sync", "asyncio"])
def renew_many(
    request: pytest.FixtureRequest,
    redis_url: str,
    redis_client: redis.Redis,
    decode_responses: bool,
    wire_path: str,
) -> Iterator[Renew]:
    """The face's ``renew_many`` on a backend of its own (prefix ``p``), called synchronously,
    its batch sent on ``wire_path`` (hiredis's or redis-py's)."""
    if request.param == "sync":
        client = redis.Redis.from_url(redis_url, decode_responses=decode_responses)
        yield RedisBackend(client, "p").renew_many
        client.close()
        return
    loop = asyncio.new_event_loop()
    aclient = redis.asyncio.Redis.from_url(redis_url, decode_responses=decode_responses)
    backend = AsyncRedisBackend(aclient, "p")
    yield lambda items: loop.run_until_complete(backend.renew_many(items))
    loop.run_until_complete(aclient.aclose())
    loop.close()


def calls(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name: stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval")}


def test_one_evalsha_renews_each_lease_on_its_own(
    renew_many: Renew, redis_client: redis.Redis
) -> None:
    redis_client.set("p:{a}", "7:o1", px=1000)
    redis_client.set("p:{b}", "8:someone", px=1000)
    redis_client.hset("p:{c}", "f", "v")
    redis_client.set("p:{e}", "9:o5", px=1000)
    items = [RenewalItem(("a", "o1", 60_000)), ("b", "o2", 60_000), ("c", "o3", 60_000),
             ("d", "o4", 60_000), RenewalItem(("e", "o5", 60_000))]  # fmt: skip
    renew_many(items[:1])  # the script is cached from here
    redis_client.config_resetstat()
    results = renew_many(items)
    assert calls(redis_client) == {"evalsha": 1, "eval": 0}
    assert results[:2] == [7, 0] and results[3:] == [0, 9]
    assert isinstance(results[2], BackendError)
    assert str(results[2]) == (
        "renew 'c': WRONGTYPE, the lease key holds another type (or cannot be read)"
    )
    assert redis_client.pttl("p:{a}") > 1000 and redis_client.pttl("p:{e}") > 1000  # renewed
    assert redis_client.pttl("p:{b}") <= 1000  # another owner's: untouched
    assert redis_client.exists("p:{d}") == 0  # never recreated
    renew_many(items)  # the kept parts, sent again
    assert calls(redis_client) == {"evalsha": 2, "eval": 0}


def test_after_script_flush_a_batch_falls_back_to_eval(
    renew_many: Renew, redis_client: redis.Redis
) -> None:
    redis_client.set("p:{a}", "3:o1", px=1000)
    redis_client.script_flush()
    redis_client.config_resetstat()
    assert renew_many([("a", "o1", 60_000)]) == [3]
    # the packed EVALSHA and the general path's are refused (NOSCRIPT), then one EVAL
    assert calls(redis_client) == {"evalsha": 2, "eval": 1}
    assert redis_client.pttl("p:{a}") > 1000
    assert renew_many([("a", "o1", 60_000)]) == [3]
    assert calls(redis_client) == {"evalsha": 3, "eval": 1}


def test_a_connection_the_server_closed_is_replaced(
    renew_many: Renew, redis_client: redis.Redis
) -> None:
    redis_client.set("p:{a}", "4:o1", px=1000)
    assert renew_many([("a", "o1", 60_000)]) == [4]
    killed = redis_client.client_kill_filter(_type="normal", skipme=True)
    assert killed >= 1  # the backend's pooled connection
    redis_client.config_resetstat()
    assert renew_many([("a", "o1", 60_000)]) == [4]  # no error: sent again on a new connection
    assert calls(redis_client)["evalsha"] == 1
