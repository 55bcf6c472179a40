"""The backend contract, case by case, over memory, SQLite and Redis (the Redis cases are ``live``),
sync and asyncio (the async backends driven through :class:`SyncOverAsync`).

Time moves with ``store.advance``: a fake clock for memory and SQLite, ``PEXPIRE`` for Redis. Cases
are written in ``tick`` units (1 ms on a fake clock, 1 s on Redis) so the same numbers hold for
both; remaining TTLs are exact on a fake clock and within ``slack_ms`` below on Redis.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from contract.harness import (
    Store,
    async_memory_store,
    async_redis_store,
    async_sqlite_store,
    memory_store,
    redis_store,
    sqlite_store,
)
from fencedlease import LeaseBackend
from fencedlease._core.protocol import AcquireReply, GrantExtras, InspectReply, owner_fingerprint

OWNER, OTHER = "owner-token-1", "owner-token-2"


@pytest.fixture(
    params=[
        "memory",
        "sqlite",
        pytest.param("redis", marks=pytest.mark.live),
        "memory-async",
        "sqlite-async",
        pytest.param("redis-async", marks=pytest.mark.live),
    ],
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        made = memory_store()
    elif request.param == "sqlite":
        made = sqlite_store(tmp_path / "leases.db")
    elif request.param == "memory-async":
        made = async_memory_store()
    elif request.param == "sqlite-async":
        made = async_sqlite_store(tmp_path / "leases.db")
    else:
        client: redis.Redis = request.getfixturevalue("redis_client")
        if request.param == "redis":
            made = redis_store(client)
        else:
            made = async_redis_store(client, request.getfixturevalue("redis_url"))
    yield made
    made.close()


def ttl_is(store: Store, actual: int, expected: int) -> bool:
    """``actual`` is ``expected`` remaining ms: exactly, or (Redis) within ``slack_ms`` below."""
    return expected - store.slack_ms <= actual <= expected


def snapshot(backend: LeaseBackend, key: str) -> tuple[int, str, int | None] | None:
    """What a non-owner must never change: token, holder and counter (not the ticking TTL)."""
    reply = backend.inspect(key)
    if reply is None:
        return None
    return reply.fencing_token, reply.owner_fingerprint, reply.last_issued_token


# -- acquire ------------------------------------------------------------------------------------


def test_acquire_free_key_grants_token_one(store: Store) -> None:
    """The first grant of a key gets fencing token 1 and the asked TTL."""
    tick = store.tick_ms
    assert store.backend.acquire("k", OWNER, 100 * tick) == AcquireReply(True, 1, 100 * tick)


def test_inspect_shows_the_grant(store: Store) -> None:
    """inspect reports the token, the remaining TTL, the owner's fingerprint and the counter."""
    tick = store.tick_ms
    store.backend.acquire("k", OWNER, 100 * tick)
    store.advance(30 * tick)
    reply = store.backend.inspect("k")
    assert reply is not None
    assert (reply.fencing_token, reply.owner_fingerprint, reply.last_issued_token) == (
        1,
        owner_fingerprint(OWNER),
        1,
    )
    assert ttl_is(store, reply.ttl_ms, 70 * tick)


def test_inspect_free_key_is_none(store: Store) -> None:
    """A key never acquired has no lease to inspect."""
    assert store.backend.inspect("never") is None


def test_acquire_held_key_fails_and_reports_holder_ttl(store: Store) -> None:
    """Another owner's acquire of a held key gets token 0, the holder's remaining TTL, and
    changes nothing."""
    tick = store.tick_ms
    store.backend.acquire("k", OWNER, 100 * tick)
    store.advance(40 * tick)
    before = snapshot(store.backend, "k")
    reply = store.backend.acquire("k", OTHER, 500 * tick)
    assert (reply.acquired, reply.fencing_token, reply.retried) == (False, 0, False)
    assert ttl_is(store, reply.ttl_ms, 60 * tick)
    assert snapshot(store.backend, "k") == before == (1, owner_fingerprint(OWNER), 1)
    info = store.backend.inspect("k")
    assert info is not None
    assert ttl_is(store, info.ttl_ms, 60 * tick)


def test_retried_acquire_by_the_holder_returns_the_same_token(store: Store) -> None:
    """A repeated acquire by the same owner token returns the same token, resets the TTL and does
    not increment the counter."""
    tick = store.tick_ms
    store.backend.acquire("k", OWNER, 100 * tick)
    store.advance(60 * tick)
    assert store.backend.acquire("k", OWNER, 100 * tick) == AcquireReply(
        True, 1, 100 * tick, retried=True
    )
    info = store.backend.inspect("k")
    assert info is not None
    assert info.last_issued_token == 1
    assert ttl_is(store, info.ttl_ms, 100 * tick)


def test_tokens_strictly_increase_per_key(store: Store) -> None:
    """Each new grant of a key gets the next token; another key has its own counter."""
    tokens = []
    for _ in range(5):
        reply = store.backend.acquire("k", OWNER, 100 * store.tick_ms)
        tokens.append(reply.fencing_token)
        assert store.backend.release("k", OWNER) is True
    assert tokens == [1, 2, 3, 4, 5]
    assert store.backend.acquire("other", OWNER, 100 * store.tick_ms).fencing_token == 1


def test_keys_are_taken_verbatim(store: Store) -> None:
    """Braces, newlines and non-ASCII keys are distinct keys with their own counters."""
    keys = ["a{b}c", "{a", "x\ny", "ключ", "a:b", "a"]
    for key in keys:
        assert store.backend.acquire(key, OWNER, 100 * store.tick_ms).fencing_token == 1
    for key in keys:
        info = store.backend.inspect(key)
        assert info is not None
        assert info.last_issued_token == 1


# -- expiry ---------------------------------------------------------------------------------------


def test_lease_is_held_until_its_ttl_and_free_from_then(store: Store) -> None:
    """ttl 100, advance 99: still held; advance 1 more: free; the next grant gets a larger token."""
    tick = store.tick_ms
    store.backend.acquire("k", OWNER, 100 * tick)
    store.advance(99 * tick)
    held = store.backend.inspect("k")
    assert held is not None
    assert held.fencing_token == 1
    assert not store.backend.acquire("k", OTHER, 100 * tick).acquired
    store.advance(1 * tick)
    assert store.backend.inspect("k") is None
    assert store.backend.acquire("k", OTHER, 100 * tick) == AcquireReply(True, 2, 100 * tick)


def test_expired_holder_acquires_anew_with_a_new_token(store: Store) -> None:
    """After expiry the same owner token is granted afresh: a new token, not a retry."""
    tick = store.tick_ms
    store.backend.acquire("k", OWNER, 10 * tick)
    store.advance(10 * tick)
    assert store.backend.acquire("k", OWNER, 10 * tick) == AcquireReply(True, 2, 10 * tick)


# -- renew ----------------------------------------------------------------------------------------


def test_renew_resets_the_ttl_and_keeps_the_token(store: Store) -> None:
    """The holder's renew returns its token and sets the remaining TTL to the new ttl."""
    tick = store.tick_ms
    store.backend.acquire("k", OWNER, 100 * tick)
    store.advance(90 * tick)
    assert store.backend.renew("k", OWNER, 200 * tick) == 1
    info = store.backend.inspect("k")
    assert info is not None
    assert (info.fencing_token, info.last_issued_token) == (1, 1)
    assert ttl_is(store, info.ttl_ms, 200 * tick)
    store.advance(150 * tick)
    assert store.backend.inspect("k") is not None


def test_renew_by_non_owner_changes_nothing(store: Store) -> None:
    """A non-owner's renew returns 0 and leaves the lease, its TTL and the counter alone."""
    tick = store.tick_ms
    store.backend.acquire("k", OWNER, 100 * tick)
    before = snapshot(store.backend, "k")
    assert store.backend.renew("k", OTHER, 1_000 * tick) == 0
    assert snapshot(store.backend, "k") == before
    info = store.backend.inspect("k")
    assert info is not None
    assert ttl_is(store, info.ttl_ms, 100 * tick)


def test_renew_never_recreates_an_expired_or_released_lease(store: Store) -> None:
    """Renewing after expiry or release returns 0 and the key stays free."""
    tick = store.tick_ms
    store.backend.acquire("k", OWNER, 10 * tick)
    store.advance(10 * tick)
    assert store.backend.renew("k", OWNER, 100 * tick) == 0
    assert store.backend.inspect("k") is None
    store.backend.acquire("j", OWNER, 10 * tick)
    store.backend.release("j", OWNER)
    assert store.backend.renew("j", OWNER, 100 * tick) == 0
    assert store.backend.inspect("j") is None
    assert store.backend.renew("never", OWNER, 100 * tick) == 0


def test_renew_many_answers_each_item_in_order(store: Store) -> None:
    """renew_many renews what each owner holds and answers 0 for the rest, item by item."""
    tick = store.tick_ms
    store.backend.acquire("a", OWNER, 100 * tick)
    store.backend.acquire("b", OTHER, 100 * tick)
    store.backend.acquire("b2", OTHER, 100 * tick)
    store.backend.release("b2", OTHER)
    store.backend.acquire("b2", OWNER, 100 * tick)
    store.advance(50 * tick)
    items = [("a", OWNER, 300 * tick), ("b", OWNER, 300 * tick), ("free", OWNER, 300 * tick)]
    items.append(("b2", OWNER, 300 * tick))
    assert store.backend.renew_many(items) == [1, 0, 0, 2]
    a, b = store.backend.inspect("a"), store.backend.inspect("b")
    assert a is not None
    assert ttl_is(store, a.ttl_ms, 300 * tick)
    assert b is not None
    assert ttl_is(store, b.ttl_ms, 50 * tick)
    assert store.backend.renew_many([]) == []


# -- release --------------------------------------------------------------------------------------


def test_release_by_owner_frees_the_key_and_keeps_the_counter(store: Store) -> None:
    """The holder's release returns True; the key is free; the next grant gets token 2."""
    tick = store.tick_ms
    store.backend.acquire("k", OWNER, 100 * tick)
    assert store.backend.release("k", OWNER) is True
    assert store.backend.inspect("k") is None
    assert store.backend.release("k", OWNER) is False
    assert store.backend.acquire("k", OTHER, 100 * tick).fencing_token == 2


def test_release_by_non_owner_changes_nothing(store: Store) -> None:
    """A non-owner's release returns False and the holder keeps the lease."""
    tick = store.tick_ms
    store.backend.acquire("k", OWNER, 100 * tick)
    before = snapshot(store.backend, "k")
    assert store.backend.release("k", OTHER) is False
    assert snapshot(store.backend, "k") == before == (1, owner_fingerprint(OWNER), 1)
    assert store.backend.renew("k", OWNER, 100 * tick) == 1


def test_release_after_expiry_is_false(store: Store) -> None:
    """An expired holder's release returns False and cannot free a later holder's lease."""
    tick = store.tick_ms
    store.backend.acquire("k", OWNER, 10 * tick)
    store.advance(10 * tick)
    assert store.backend.release("k", OWNER) is False
    store.backend.acquire("k", OTHER, 100 * tick)
    assert store.backend.release("k", OWNER) is False
    assert snapshot(store.backend, "k") == (2, owner_fingerprint(OTHER), 2)


# -- force_release --------------------------------------------------------------------------------


def test_force_release_frees_whoever_holds_and_keeps_the_counter(store: Store) -> None:
    """force_release deletes another owner's lease (True), then finds nothing (False); the counter
    goes on."""
    tick = store.tick_ms
    store.backend.acquire("k", OWNER, 100 * tick)
    assert store.backend.force_release("k") is True
    assert store.backend.inspect("k") is None
    assert store.backend.force_release("k") is False
    assert store.backend.renew("k", OWNER, 100 * tick) == 0
    assert store.backend.acquire("k", OTHER, 100 * tick).fencing_token == 2


def test_force_release_of_an_expired_lease_is_false(store: Store) -> None:
    """An expired lease does not exist any more: force_release says False."""
    tick = store.tick_ms
    store.backend.acquire("k", OWNER, 10 * tick)
    store.advance(10 * tick)
    assert store.backend.force_release("k") is False
    assert store.backend.acquire("k", OWNER, 10 * tick).fencing_token == 2


# -- metadata and lock-delay (acquire_with_extras) ------------------------------------------------

HOST = {"host": "web-1", "pid": "4242"}


def test_metadata_is_stored_with_the_grant_and_deleted_with_it(store: Store) -> None:
    """A grant's metadata is inspected with its lease, kept by a renewal and the holder's repeat,
    gone with a release; a later plain grant (even once the key's lease expired) shows none."""
    tick, backend = store.tick_ms, store.backend
    grant = getattr(backend, "acquire_with_extras")  # noqa: B009  (optional, not in the protocol)
    assert grant("k", OWNER, 100 * tick, GrantExtras(HOST)) == AcquireReply(True, 1, 100 * tick)
    assert backend.renew("k", OWNER, 100 * tick) == 1
    assert grant("k", OWNER, 100 * tick, GrantExtras(HOST)).retried
    info = backend.inspect("k")
    assert info is not None and (info.fencing_token, info.metadata) == (1, HOST)
    assert backend.release("k", OWNER) is True
    assert backend.acquire("k", OTHER, 100 * tick).fencing_token == 2
    info = backend.inspect("k")
    assert info is not None and info.metadata == {}
    assert grant("j", OWNER, 10 * tick, GrantExtras({"a": "b"})).fencing_token == 1
    store.advance(10 * tick)
    assert backend.acquire("j", OTHER, 100 * tick).fencing_token == 2
    info = backend.inspect("j")
    assert info is not None and info.metadata == {}


def test_lock_delay_refuses_an_expired_key_until_it_ends(store: Store) -> None:
    """A lease that expired unreleased keeps its key from every owner (its own included) for its
    lock-delay past the deadline, refused with the delay left; then the next token is granted."""
    tick, backend = store.tick_ms, store.backend
    grant = getattr(backend, "acquire_with_extras")  # noqa: B009
    assert grant("k", OWNER, 100 * tick, GrantExtras({}, 50 * tick)).fencing_token == 1
    store.advance(100 * tick)
    assert backend.inspect("k") is None
    for owner in (OTHER, OWNER):
        refused = backend.acquire("k", owner, 100 * tick)
        assert (refused.acquired, refused.fencing_token) == (False, 0)
        assert ttl_is(store, refused.ttl_ms, 50 * tick)
    assert backend.renew("k", OWNER, 100 * tick) == 0
    assert backend.release("k", OWNER) is False  # no lease to release: the delay stays
    assert backend.acquire("k", OTHER, 100 * tick).acquired is False
    store.advance(50 * tick)
    assert backend.acquire("k", OTHER, 100 * tick) == AcquireReply(True, 2, 100 * tick)


def test_a_release_or_force_release_ends_the_lock_delay(store: Store) -> None:
    """A released lease frees its key at once, lock-delay or not; force_release does too for an
    expired one."""
    tick, backend = store.tick_ms, store.backend
    grant = getattr(backend, "acquire_with_extras")  # noqa: B009
    grant("k", OWNER, 100 * tick, GrantExtras({}, 500 * tick))
    assert backend.release("k", OWNER) is True
    assert backend.acquire("k", OTHER, 100 * tick).fencing_token == 2
    assert backend.release("k", OTHER) is True
    grant("k", OWNER, 10 * tick, GrantExtras({}, 500 * tick))
    store.advance(10 * tick)
    assert backend.acquire("k", OTHER, 100 * tick).acquired is False
    assert backend.force_release("k") is False
    assert backend.acquire("k", OTHER, 100 * tick).fencing_token == 4


# -- through the manager --------------------------------------------------------------------------


def test_manager_acquire_renew_release_over_the_backend(store: Store) -> None:
    """LeaseManager works over the backend: grant, renew, inspect, release, next token."""
    tick = store.tick_ms
    manager = store.manager()
    first = manager.acquire("job", ttl_ms=100 * tick)
    assert first.acquired
    assert first.lease is not None
    assert first.lease.fencing_token == 1
    assert not manager.acquire("job", ttl_ms=100 * tick).acquired
    assert first.lease.renew() is True
    info = manager.inspect("job")
    assert info is not None
    assert (info.fencing_token, info.last_issued_token) == (1, 1)
    assert first.lease.release() is True
    second = manager.acquire("job", ttl_ms=100 * tick)
    assert second.lease is not None
    assert second.lease.fencing_token == 2
    assert manager.force_release("job") is True


def test_restored_lease_renews_and_releases_only_while_held(store: Store) -> None:
    """A lease restored from its owner token renews and releases; once another owner holds the key
    the restored one can do neither."""
    tick = store.tick_ms
    manager = store.manager()
    lease = manager.acquire("job", ttl_ms=100 * tick).lease
    assert lease is not None
    restored = manager.restore("job", lease.owner_token, ttl_ms=100 * tick)
    assert restored.fencing_token is None
    assert restored.renew() is True
    assert restored.fencing_token == 1
    store.advance(100 * tick)
    assert manager.acquire("job", ttl_ms=100 * tick).acquired
    stale = manager.restore("job", lease.owner_token, ttl_ms=100 * tick, fencing_token=1)
    assert stale.renew() is False
    assert stale.lost
    assert stale.release() is False
    info = manager.inspect("job")
    assert info is not None
    assert info.fencing_token == 2


def test_inspect_reply_type(store: Store) -> None:
    """inspect returns an InspectReply (the type every manager decodes)."""
    store.backend.acquire("k", OWNER, 100 * store.tick_ms)
    assert isinstance(store.backend.inspect("k"), InspectReply)
