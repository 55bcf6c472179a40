"""On a real Redis: leases of two prefixes are two counters, and no fenced store mixes them.

The adversarial case: appB's lease of "orders" (its own counter, moved on) presented to a store
fenced by appA's "orders" is refused with LeaseKeyMismatchError naming both counters' Redis keys,
and appA's next holder is still accepted (not locked out by appB's larger token). Leases of both
faces, restored leases too; RedisFencedResource (its fence hash and the Lua check), FencedResource
and the SQLite guard. See tests/unit/test_fencing_scope.py for the memory and SQLite backends.
"""

from __future__ import annotations

import sqlite3
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from hypothesis import HealthCheck, given, settings

from fencedlease import LeaseKeyMismatchError, LeaseManager, redis_keys
from fencedlease.aio import AsyncLeaseManager
from fencedlease.redis_fencing import RedisFencedResource

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_fencing_scope import (
    INITIAL,
    KEY,
    RESOURCE,
    Grants,
    Step,
    _async_grants,
    _sync_grants,
    check_against_rule,
    check_counters_kept_apart,
    check_migration,
    memory_resource,
    sqlite_guard,
    steps_strategy,
)

pytestmark = pytest.mark.live


def redis_grants(redis_url: str, face: str, prefix_a: str, prefix_b: str) -> Grants:
    if face == "sync":
        return _sync_grants(
            LeaseManager(redis.Redis.from_url(redis_url), prefix=prefix_a),
            LeaseManager(redis.Redis.from_url(redis_url), prefix=prefix_b),
        )
    return _async_grants(
        AsyncLeaseManager(redis.asyncio.Redis.from_url(redis_url), prefix=prefix_a),
        AsyncLeaseManager(redis.asyncio.Redis.from_url(redis_url), prefix=prefix_b),
    )


@pytest.mark.parametrize("store", ["RedisFencedResource", "FencedResource", "sqlite fence_guard"])
@pytest.mark.parametrize("face", ["sync", "aio"])
def test_the_same_key_under_another_prefix_is_refused(
    redis_url: str, decode_responses: bool, face: str, store: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    prefix_a, prefix_b = f"appA-{tag}", f"appB-{tag}"
    g = redis_grants(redis_url, face, prefix_a, prefix_b)
    # the scope is the counter's own Redis key, and that key holds the lease's token
    admin = redis.Redis.from_url(redis_url, decode_responses=decode_responses)
    try:
        for lease, prefix in ((g.la2, prefix_a), (g.lb, prefix_b)):
            assert lease.fencing_scope == redis_keys(prefix, KEY).fence
            counter = admin.get(lease.fencing_scope)
            assert counter is not None and int(counter) == lease.fencing_token
        accept: Callable[[Any], int]
        if store == "RedisFencedResource":
            res = RedisFencedResource(admin, f"{RESOURCE}-{tag}")
            accept, recorded = res.accept, lambda: res.lease_key
            check_counters_kept_apart(accept, recorded, g)
            assert admin.hget(res.fence_key, "key") in (
                g.la.fencing_scope,
                g.la.fencing_scope.encode(),
            )
        elif store == "FencedResource":
            check_counters_kept_apart(*memory_resource(), g)
        else:
            conn = sqlite3.connect(":memory:", isolation_level=None)
            try:
                check_counters_kept_apart(*sqlite_guard(conn), g)
            finally:
                conn.close()
    finally:
        admin.close()


def test_redis_fenced_set_refuses_another_prefix_and_writes_nothing(
    client_of: Callable[[], redis.Redis],
) -> None:
    """The review's exact sequence through RedisFencedResource.set: B's lease writes nothing, and
    A's next holder writes."""
    admin = client_of()
    tag = uuid.uuid4().hex[:8]
    g = _sync_grants(
        LeaseManager(client_of(), prefix=f"a{tag}"), LeaseManager(client_of(), prefix=f"b{tag}")
    )
    res = RedisFencedResource(admin, f"orders-data-{tag}")
    res.set("A", g.la)
    with pytest.raises(LeaseKeyMismatchError) as info:
        res.set("B", g.lb)
    assert (info.value.lease_key, info.value.presented_key) == (
        g.la.fencing_scope,
        g.lb.fencing_scope,
    )
    assert res.get(g.la2) in ("A", b"A")
    res.set("A2", g.la2)
    assert res.get(g.la2) in ("A2", b"A2")
    assert res.last_token == 2


@pytest.fixture
def client_of(redis_url: str, decode_responses: bool) -> Any:
    made: list[redis.Redis] = []

    def make() -> redis.Redis:
        c = redis.Redis.from_url(redis_url, decode_responses=decode_responses)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def test_redis_fence_of_the_earlier_shape_migrates(client_of: Callable[[], redis.Redis]) -> None:
    """A fence hash holding a bare key (written by an earlier version) is taken over by the first
    lease of that key, which records its scope; then the same key of another prefix is refused."""
    admin = client_of()
    res = RedisFencedResource(admin, f"orders-data-{uuid.uuid4().hex[:8]}")
    admin.hset(res.fence_key, mapping={"token": "5", "fp": "", "key": "orders"})
    check_migration(res.accept, lambda: res.lease_key)
    assert res.last_token == 8


@pytest.mark.parametrize("initial", INITIAL)
@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=steps_strategy)
def test_redis_fenced_resource_follows_the_rule(
    client_of: Callable[[], redis.Redis], initial: str | None, steps: list[Step]
) -> None:
    """The Lua check against the rule, over leases of several counters (two prefixes, another key,
    a lease without a scope, a key shaped like a scope) and a fence of either shape."""
    admin = client_of()
    res = RedisFencedResource(admin, f"rule-{uuid.uuid4().hex}")
    if initial is not None:
        admin.hset(res.fence_key, mapping={"token": "5", "fp": "", "key": initial})
    check_against_rule(res.accept, lambda: res.lease_key, initial, steps)
