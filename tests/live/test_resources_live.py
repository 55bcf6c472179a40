"""The harness's resources on real servers: Redis (a RedisFencedResource per key) and
PostgreSQL (guard rows, fenced rows, list-append transactions), with leases from a real Redis.

The same story on each: the old holder's lease expires, the new holder reads, the old holder's
write is refused with the new token as the last accepted; each key has its own counter; a plain
access checks nothing; a Redis resource deletes exactly the keys it made. Through a worker's
resource link (a Toxiproxy proxy) a fault leaves an access of unknown outcome, which may have
happened.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from pg_fixtures import postgres_dsn  # noqa: F401 (the fixture)

from fencedlease import BackendError, Lease, LeaseManager, StaleTokenError
from fencedlease_lab.harness.history import HistoryWriter, read_history
from fencedlease_lab.harness.resource_links import proxied_spec
from fencedlease_lab.harness.resources import (
    ResourceSpec,
    open_store,
    prepare_resource,
    read_final_counters,
)
from fencedlease_lab.servers.toxiproxy import toxiproxy_endpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_fencing_model import FakeLease, lease
from test_resources import shows_strict_rechecks

pytestmark = pytest.mark.live


class Leases:
    """Two holders of ``k`` in turn from a real Redis (``old`` expired), ``other`` of ``k2``."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.manager = LeaseManager(self.client, prefix=f"t-{uuid.uuid4().hex[:8]}")
        self.old: Lease = self.manager.acquire("k", ttl_ms=100).lease  # type: ignore[assignment]
        # waits (retrying) until the old lease has expired on the server
        self.new: Lease = self.manager.acquire("k", ttl_ms=60_000, wait_ms=10_000).lease  # type: ignore[assignment]
        self.other: Lease = self.manager.acquire("k2", ttl_ms=60_000).lease  # type: ignore[assignment]

    def close(self) -> None:
        self.manager.close()
        self.client.close()


@pytest.fixture
def leases(redis_url: str) -> Iterator[Leases]:
    held = Leases(redis_url)
    yield held
    held.close()


@pytest.fixture(params=["redis", "redis-strict", "postgres", "postgres-rows", "postgres-append"])
def spec(request: pytest.FixtureRequest, redis_url: str) -> ResourceSpec:
    kind = request.param
    if kind.startswith("redis"):
        return ResourceSpec(kind, redis_url, name=f"res-{uuid.uuid4().hex[:8]}")
    dsn = request.getfixturevalue("postgres_dsn")
    return ResourceSpec(kind, dsn)


def test_a_stale_holder_is_refused_and_each_key_has_its_counter(
    spec: ResourceSpec, leases: Leases
) -> None:
    prepare_resource(spec)
    store = open_store(spec)
    try:
        assert (leases.old.fencing_token, leases.new.fencing_token) == (1, 2)
        assert store.read(leases.old, fenced=True) == 0
        store.write(1, leases.old, fenced=True)
        assert store.read(leases.new, fenced=True) == 1
        with pytest.raises(StaleTokenError) as refused:
            store.write(7, leases.old, fenced=True)
        assert (refused.value.token, refused.value.last_token) == (1, 2)
        store.write(2, leases.new, fenced=True)
        store.write(5, leases.other, fenced=True, key="k2")
        assert store.read(leases.old, fenced=False) == 2  # plain: nothing checked
        store.write(3, leases.old, fenced=False)
        assert store.finals() == {"k": 3, "k2": 5}
    finally:
        store.close()
    assert read_final_counters(spec) == {"k": 3, "k2": 5}


def test_the_strict_redis_resource_refuses_a_recheck(redis_url: str, leases: Leases) -> None:
    """``redis-strict``: the lease's first access is strict, its own write after its read
    lands, a recheck (its token once more, strict) is refused and moves nothing, a second lease
    with the same token is refused as strict; ``redis`` is not strict."""
    name = f"res-{uuid.uuid4().hex[:8]}"
    plain = open_store(ResourceSpec("redis", redis_url, name=name))
    assert plain.strict_key("k") is False
    plain.close()
    spec = ResourceSpec("redis-strict", redis_url, name=name)
    prepare_resource(spec)
    store = open_store(spec)
    try:
        assert store.strict_key("k") is True
        assert store.read(leases.new, fenced=True) == 0
        shows_strict_rechecks(store, leases.new)
    finally:
        store.close()


def test_a_redis_resource_names_every_key_it_made(redis_url: str, leases: Leases) -> None:
    spec = ResourceSpec("redis", redis_url, name=f"res-{uuid.uuid4().hex[:8]}")
    prepare_resource(spec)
    store = open_store(spec)
    try:
        store.write(1, leases.new, fenced=True)
        store.write(1, leases.other, fenced=True)
        made = store.data_keys()
        client = redis.Redis.from_url(redis_url)
        assert made[0] == f"fencedlease:fenced:{{{spec.name}}}:resource:keys"
        assert sorted(made[1:]) == sorted(
            [
                f"fencedlease:fenced:{{{spec.name}/k}}:resource",
                f"fencedlease:fenced:{{{spec.name}/k}}:resource:fence",
                f"fencedlease:fenced:{{{spec.name}/k2}}:resource",
                f"fencedlease:fenced:{{{spec.name}/k2}}:resource:fence",
            ]
        )
        assert client.exists(*made) == 5
        store.prepare()  # an earlier run's keys go, and only those
        assert client.exists(*made) == 0
        client.close()
    finally:
        store.close()


def test_a_postgres_failure_is_a_backend_error(
    postgres_dsn: str,  # noqa: F811 (the fixture)
    leases: Leases,
) -> None:
    """The counter table gone under the store: BackendError with psycopg's error as cause."""
    import psycopg

    spec = ResourceSpec("postgres-rows", postgres_dsn)
    prepare_resource(spec)
    store = open_store(spec)
    try:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE fencedlease_check_counter")
        with pytest.raises(BackendError) as failed:
            store.read(leases.new, fenced=True)
        assert isinstance(failed.value.__cause__, psycopg.Error)
    finally:
        store.close()


def test_postgres_list_append_transactions(
    postgres_dsn: str,  # noqa: F811 (the fixture)
    leases: Leases,
    tmp_path: Path,
) -> None:
    """The new holder's transaction commits its appends; the old holder's is refused and
    leaves no element behind."""
    spec = ResourceSpec("postgres-append", postgres_dsn)
    prepare_resource(spec)
    store: Any = open_store(spec)
    path = tmp_path / "w1.jsonl"
    with HistoryWriter(path, "w1") as writer:
        store.attach_history(writer)
        store.read(leases.old, fenced=True)
        store.read(leases.new, fenced=True)  # abandons the old holder's open transaction
        store.write(1, leases.new, fenced=True)
        store.read(leases.old, fenced=False)
        with pytest.raises(StaleTokenError):
            store.write(2, leases.old, fenced=True)
        lists = store.lists()
        store.close()
    done = [(e.id, e.type, e.outcome) for e in read_history(path) if e.type != "invoke"]
    assert done == [(0, "fail", "abandoned"), (1, "ok", "committed"), (2, "fail", "stale")]
    committed = next(e for e in read_history(path) if e.type == "ok").detail["txn"]
    assert lists == {op[1]: [op[2]] for op in committed if op[0] == "append"}


def test_a_duplicate_grant_is_refused(spec: ResourceSpec) -> None:
    """Two leases with one token (a rolled-back lease counter): the second one's first access
    is refused, the first lease's own write after its read lands."""
    prepare_resource(spec)
    store = open_store(spec)
    first, twin = FakeLease("k", "owner-one", 13), FakeLease("k", "owner-two", 13)
    try:
        assert store.read(first, fenced=True) == 0
        with pytest.raises(StaleTokenError) as refused:
            store.read(twin, fenced=True)
        assert refused.value.last_token == 13
        store.write(1, first, fenced=True)
        assert store.finals() == {"k": 1}
    finally:
        store.close()


# --- through a resource link -----------------------------------------------------------------


@pytest.fixture
def make_proxy() -> Iterator[Any]:
    """Makes proxies on an embedded Toxiproxy, each destroyed after the test."""
    with toxiproxy_endpoint(sources=("embedded",)) as endpoint:
        client = endpoint.client()
        made: list[Any] = []

        def make(upstream: str) -> Any:
            made.append(client.create(upstream=upstream, name=f"data-{len(made)}"))
            return made[-1]

        yield make
        for proxy in made:
            proxy.destroy()


def test_a_redis_write_whose_reply_is_late_fails_yet_happened(
    redis_url: str, make_proxy: Any
) -> None:
    """A reply later than the client's timeout: the write is a BackendError (sent once), and
    the counter holds its value: an unknown outcome that happened."""
    direct = ResourceSpec("redis", redis_url, name=f"res-{uuid.uuid4().hex[:8]}")
    spec, (proxy,) = proxied_spec(direct, make_proxy, 200)
    prepare_resource(direct)
    store = open_store(spec)
    try:
        store.write(1, lease(3), fenced=True)
        proxy.add_toxic(type="latency", name="late", stream="downstream",
                        attributes={"latency": 600, "jitter": 0})  # fmt: skip
        with pytest.raises(BackendError):
            store.write(2, lease(3), fenced=True)
        proxy.destroy_toxic("late")
        assert read_final_counters(direct) == {lease(3).key: 2}
    finally:
        store.close()


def test_a_postgres_access_after_a_reset_reconnects(
    postgres_dsn: str,  # noqa: F811 (the fixture)
    make_proxy: Any,
) -> None:
    """A reset of the link fails the access in flight (BackendError); once the link is healthy
    the next access goes through on a new connection."""
    direct = ResourceSpec("postgres-rows", postgres_dsn)
    spec, (proxy,) = proxied_spec(direct, make_proxy, 1000)
    prepare_resource(direct)
    store = open_store(spec)
    try:
        store.write(5, lease(3), fenced=True)
        proxy.add_toxic(type="reset_peer", name="reset", attributes={"timeout": 0})
        with pytest.raises(BackendError):
            store.read(lease(3), fenced=True)
        proxy.destroy_toxic("reset")
        assert store.read(lease(3), fenced=True) == 5
    finally:
        store.close()
