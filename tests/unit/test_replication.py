"""The replication options (``replica_acks``, ``replica_ack_timeout_ms``, ``fencing``) on both
managers, the ``redis+sentinel://`` URL, and the replies that carry the primary's replication id;
no server needed."""

from __future__ import annotations

import asyncio
import pickle

import pytest
import redis
import redis.asyncio

from fencedlease import (
    BackendError,
    LeaseManager,
    MemoryBackend,
    RedisBackend,
    ReplicationError,
    ValidationError,
)
from fencedlease._redis.replication import default_fencing
from fencedlease._redis.replies import decode_acquire, decode_inspect
from fencedlease._redis.sentinel import SentinelURL, parse_sentinel_url, sentinel_clients
from fencedlease.aio import AsyncLeaseManager

REPLID = "a" * 40

BAD_OPTIONS = [
    ({"replica_acks": -1}, "replica_acks", "0 <= replica_acks <= 2147483647"),
    ({"replica_acks": True}, "replica_acks", "0 <= replica_acks <= 2147483647"),
    ({"replica_acks": 1.0}, "replica_acks", "0 <= replica_acks <= 2147483647"),
    ({"replica_acks": 2**31}, "replica_acks", "0 <= replica_acks <= 2147483647"),
    ({"replica_ack_timeout_ms": 0}, "replica_ack_timeout_ms", "between 1 and 2147483647"),
    ({"replica_ack_timeout_ms": None}, "replica_ack_timeout_ms", "1 <= replica_ack_timeout_ms"),
    ({"fencing": "wall"}, "fencing", "fencing must be 'counter', 'clock' or 'epoch'; got 'wall'"),
    ({"fencing": 0}, "fencing", "fencing must be 'counter', 'clock' or 'epoch'; got 0"),
]


@pytest.mark.parametrize(("options", "argument", "bound"), BAD_OPTIONS)
def test_bad_options_are_refused_on_both_faces(
    options: dict[str, object], argument: str, bound: str
) -> None:
    for make in (
        lambda: LeaseManager(redis.Redis(port=1), **options),  # type: ignore[arg-type]
        lambda: LeaseManager.from_url("redis://127.0.0.1:1", **options),  # type: ignore[arg-type]
        lambda: LeaseManager.from_url("redis+sentinel://127.0.0.1:1/s", **options),  # type: ignore[arg-type]
        lambda: AsyncLeaseManager(redis.asyncio.Redis(port=1), **options),  # type: ignore[arg-type]
        lambda: AsyncLeaseManager.from_url("redis://127.0.0.1:1", **options),  # type: ignore[arg-type]
        lambda: RedisBackend(redis.Redis(port=1), **options),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValidationError) as caught:
            make()
        assert caught.value.argument == argument
        assert bound in str(caught.value)


@pytest.mark.parametrize(
    ("url", "fencing"),
    [
        ("redis+sentinel://127.0.0.1:1/s", "epoch"),
        ("REDIS+SENTINEL://127.0.0.1:1/s", "epoch"),
        ("redis://127.0.0.1:1", "counter"),
    ],
)
def test_a_sentinel_url_takes_epoch_tokens_by_default(url: str, fencing: str) -> None:
    """A manager from a ``redis+sentinel://`` URL grants epoch tokens unless told otherwise;
    other Redis URLs keep the counter's (a cluster's: `test_cluster_backend.py`)."""
    with LeaseManager.from_url(url) as manager:
        assert manager._backend.grants.fencing == fencing  # type: ignore[attr-defined]
    with LeaseManager.from_url(url, fencing="clock") as manager:
        assert manager._backend.grants.fencing == "clock"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("options", "argument"),
    [({"replica_acks": 1}, "replica_acks"), ({"fencing": "clock"}, "fencing")],
)
def test_options_for_a_store_that_cannot_take_them_are_refused(
    options: dict[str, object], argument: str
) -> None:
    for make in (
        lambda: LeaseManager(MemoryBackend(), **options),  # type: ignore[arg-type]
        lambda: LeaseManager.from_url("memory://", **options),  # type: ignore[arg-type]
        lambda: LeaseManager.from_url("sqlite:///:memory:", **options),  # type: ignore[arg-type]
        # a Redis backend object the caller made keeps the options it was made with
        lambda: LeaseManager(RedisBackend(redis.Redis(port=1)), **options),  # type: ignore[arg-type]
        lambda: AsyncLeaseManager.from_url("memory://", **options),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValidationError) as caught:
            make()
        assert caught.value.argument == argument


def test_the_options_reach_the_backend_of_a_client_or_url() -> None:
    sync = LeaseManager(redis.Redis(port=1), replica_acks=2, replica_ack_timeout_ms=50)
    backend = sync.backend
    assert isinstance(backend, RedisBackend)
    assert (backend.grants.replica_acks, backend.grants.replica_ack_timeout_ms) == (2, 50)
    assert backend.grants.fencing == "counter"
    sync.close()
    made = LeaseManager.from_url("redis://127.0.0.1:1", fencing="clock")
    assert made.backend.grants.fencing == "clock"  # type: ignore[attr-defined]
    made.close()

    async def main() -> str:
        async with AsyncLeaseManager.from_url("redis://127.0.0.1:1", fencing="clock") as manager:
            return str(manager.backend.grants.fencing)  # type: ignore[attr-defined]

    assert asyncio.run(main()) == "clock"


def test_sentinel_urls_parse() -> None:
    assert parse_sentinel_url("redis+sentinel://a:1,b,[::1]:3/svc/4") == SentinelURL(
        (("a", 1), ("b", 26379), ("::1", 3)), "svc", 4, None, None
    )
    assert parse_sentinel_url("redis+sentinel://u:p%40ss@h:5/m") == SentinelURL(
        (("h", 5),), "m", 0, "u", "p@ss"
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+sentinel://h:1", "names the service"),
        ("redis+sentinel://h:1/", "names the service"),
        ("redis+sentinel://h:1/s/1/2", "names the service"),
        ("redis+sentinel://h:0/s", "port in 1..65535"),
        ("redis+sentinel://h:x/s", "port in 1..65535"),
        ("redis+sentinel://,h/s", "port in 1..65535"),
        ("redis+sentinel://h/s/x", "db of a redis+sentinel URL is an int"),
        ("redis+sentinel://h/s/2147483648", "db of a redis+sentinel URL is an int"),
        ("redis+sentinel://u:secret@h/s?db=1", "takes no query"),
    ],
)
def test_bad_sentinel_urls_are_refused_without_their_secret(url: str, message: str) -> None:
    for make in (
        lambda: LeaseManager.from_url(url),
        lambda: AsyncLeaseManager.from_url(url),
    ):
        with pytest.raises(ValidationError) as caught:
            make()
        assert caught.value.argument == "url"
        assert message in str(caught.value)
        assert "secret" not in str(caught.value)


def test_a_sentinel_url_makes_a_master_for_client() -> None:
    manager = LeaseManager.from_url("redis+sentinel://127.0.0.1:1,127.0.0.1:2/svc/3", password="pw")
    client = manager.backend.client  # type: ignore[attr-defined]
    pool = client.connection_pool
    assert (pool.service_name, pool.connection_kwargs["db"]) == ("svc", 3)
    assert pool.connection_kwargs["password"] == "pw"
    assert len(sentinel_clients(client)) == 2
    manager.close()
    with pytest.raises(ValidationError) as caught:
        LeaseManager.from_url("redis+sentinel://u:pw@127.0.0.1:1/svc", password="other")
    assert caught.value.argument == "password"
    with pytest.raises(ValidationError) as caught:
        LeaseManager.from_url("redis+sentinel://127.0.0.1:1/svc", socket_timeout=-1)
    assert caught.value.argument == "socket_timeout"


def test_the_acquire_reply_names_the_primary() -> None:
    reply = decode_acquire([1, "7", 1000, REPLID])
    assert (reply.acquired, reply.fencing_token, reply.primary_id) == (True, 7, REPLID)
    assert decode_acquire([1, "7", 1000]).primary_id is None  # a script without it
    assert decode_acquire([0, 0, 5, ""]).primary_id is None  # INFO refused by the ACL
    with pytest.raises(BackendError, match="not a replication id"):
        decode_acquire([1, "7", 1000, "x" * 40])
    info = decode_inspect(["3:owner", 100, "3", REPLID, "b" * 40])
    assert info is not None and (info.primary_id, info.promoted_from) == (REPLID, "b" * 40)
    info = decode_inspect(["3:owner", 100, "3", REPLID, ""])
    assert info is not None and info.promoted_from is None


def test_replication_error_is_a_backend_error_that_pickles() -> None:
    error = ReplicationError("acquire 'k': 0 of 1", acks=0, wanted=1, wrote="maybe")
    assert isinstance(error, BackendError)
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy), copy.acks, copy.wanted, copy.wrote, copy.sent) == (
        ReplicationError,
        "acquire 'k': 0 of 1",
        0,
        1,
        "maybe",
        "yes",
    )


def test_each_url_names_its_default_fencing() -> None:
    """Sentinel and Cluster URLs (any case) default to epoch tokens, every other to the counter
    (a cluster's grants and renewals are confirmed by its primaries' majority by default)."""
    assert default_fencing("redis+cluster://127.0.0.1:7000") == "epoch"
    assert default_fencing("REDIS+CLUSTER://127.0.0.1:7000") == "epoch"
    assert default_fencing("Redis+Sentinel://127.0.0.1:1/s") == "epoch"
    assert default_fencing("redis://127.0.0.1:1") == "counter"
    assert default_fencing("memory://") == "counter"
    assert default_fencing(None) == "counter"
