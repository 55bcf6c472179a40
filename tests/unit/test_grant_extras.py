"""Metadata and lock-delay through the managers, both faces, on the memory and SQLite backends
(a FakeClock moves time): validation, what ``inspect`` shows, and when a key is granted again.

The same rules on Redis, Sentinel and Cluster: tests/live/test_grant_extras_live.py; the backend
contract's cases: tests/contract/test_contract.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from fencedlease import (
    LeaseLostError,
    LeaseManager,
    MemoryBackend,
    SqliteBackend,
    ValidationError,
)
from fencedlease._core.extras import check_metadata
from fencedlease._core.protocol import AcquireReply
from fencedlease.aio import AsyncLeaseManager
from fencedlease.backends import AsyncMemoryBackend, AsyncSqliteBackend
from fencedlease.testing import FakeClock

T = TypeVar("T")

HOST = {"host": "web-1", "pid": "4242"}


class Face:
    """One face over one backend, driven synchronously: ``call(name, *args, **kwargs)`` runs the
    manager's method (awaited on the asyncio face, on a loop of the test's own)."""

    def __init__(self, manager: LeaseManager | AsyncLeaseManager, clock: FakeClock) -> None:
        self.manager, self.clock = manager, clock
        self._loop = asyncio.new_event_loop()

    def run(self, step: Any) -> Any:
        if isinstance(step, Awaitable):
            return self._loop.run_until_complete(_awaited(step))
        return step

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self.run(getattr(self.manager, name)(*args, **kwargs))

    def close(self) -> None:
        self.run(self.manager.close())
        self._loop.close()


async def _awaited(step: Awaitable[T]) -> T:
    return await step


@pytest.fixture(params=["memory", "sqlite", "memory-async", "sqlite-async"])
def face(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Face]:
    clock = FakeClock()
    path = tmp_path / "leases.db"
    manager: LeaseManager | AsyncLeaseManager
    if request.param == "memory":
        manager = LeaseManager(MemoryBackend(clock=clock), clock=clock)
    elif request.param == "sqlite":
        manager = LeaseManager(SqliteBackend(path, clock=clock), clock=clock)
    elif request.param == "memory-async":
        manager = AsyncLeaseManager(AsyncMemoryBackend(clock=clock), clock=clock)
    else:
        manager = AsyncLeaseManager(AsyncSqliteBackend(path, clock=clock), clock=clock)
    made = Face(manager, clock)
    yield made
    made.close()


# -- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({f"k{i}": "v" for i in range(17)}, "metadata must hold at most 16 entries; got 17"),
        (
            {"k": "x" * 1024},
            "metadata must hold at most 1024 bytes (UTF-8, names and values); got 1025",
        ),
        (
            {"k": "é" * 512},
            "metadata must hold at most 1024 bytes (UTF-8, names and values); got 1025",
        ),
        ({"k": 1}, "metadata['k'] must be a str; got int"),
        ({1: "v"}, "metadata names must be non-empty str; got 1"),
        ({"": "v"}, "metadata names must be non-empty str; got ''"),
        (["k", "v"], "metadata must be a mapping of str to str; got list"),
        ({"k": "\udc80"}, "metadata['k']: its value is not encodable as UTF-8"),
    ],
)
def test_bad_metadata_is_refused_naming_the_bound(metadata: object, message: str) -> None:
    """Metadata past 16 entries or 1,024 bytes, or not str to str, is a ValidationError naming
    ``metadata`` and the bound, from acquire, hold and with_lease on both faces, before any
    I/O."""
    clock = FakeClock()
    sync = LeaseManager(MemoryBackend(clock=clock), clock=clock)
    face = Face(AsyncLeaseManager(AsyncMemoryBackend(clock=clock), clock=clock), clock)
    calls: list[Callable[[], object]] = [
        lambda: sync.acquire("k", metadata=metadata),  # type: ignore[arg-type]
        lambda: sync.hold("k", metadata=metadata),  # type: ignore[arg-type]
        lambda: sync.with_lease("k", lambda lease: None, metadata=metadata),  # type: ignore[arg-type]
        lambda: face.call("acquire", "k", metadata=metadata),
        lambda: face.call("hold", "k", metadata=metadata),
        lambda: face.call("with_lease", "k", _async_noop, metadata=metadata),
    ]
    for call in calls:
        with pytest.raises(ValidationError) as caught:
            call()
        assert caught.value.argument == "metadata"
        assert str(caught.value) == message
    assert sync.inspect("k") is None
    face.close()


async def _async_noop(lease: object) -> None:
    return None


def test_the_bounds_themselves_are_taken() -> None:
    """16 entries and exactly 1,024 bytes are within the bounds; the result is sorted by name."""
    sixteen = {f"k{i:02}": "v" for i in range(16)}
    assert check_metadata(sixteen) == sixteen
    exact = {"k": "x" * 1023}
    assert check_metadata(exact) == exact
    assert list(check_metadata({"b": "1", "a": "2"})) == ["a", "b"]
    assert check_metadata(None) == {}


@pytest.mark.parametrize(
    ("delay", "shown"), [(-1, "-1"), (True, "True"), (1.5, "1.5"), ("5", "'5'")]
)
def test_bad_lock_delay_is_refused_on_the_call_and_the_manager(delay: Any, shown: str) -> None:
    """lock_delay_ms must be an int of milliseconds in 0..2,147,483,647, per call and for the
    manager, on both faces."""
    clock = FakeClock()
    for make in (
        lambda: LeaseManager(MemoryBackend(clock=clock), lock_delay_ms=delay),
        lambda: AsyncLeaseManager(AsyncMemoryBackend(clock=clock), lock_delay_ms=delay),
        lambda: LeaseManager(MemoryBackend(clock=clock)).acquire("k", lock_delay_ms=delay),
        lambda: LeaseManager(MemoryBackend(clock=clock)).hold("k", lock_delay_ms=delay),
    ):
        with pytest.raises(ValidationError) as caught:
            make()
        assert caught.value.argument == "lock_delay_ms"
        assert shown in str(caught.value)


class _PlainBackend:
    """A backend of someone else's that stores no extras: a MemoryBackend's methods but
    ``acquire_with_extras``."""

    def __init__(self) -> None:
        self._store = MemoryBackend()

    def __getattr__(self, name: str) -> Any:
        if name == "acquire_with_extras":
            raise AttributeError(name)
        return getattr(self._store, name)


def test_a_backend_without_extras_refuses_them_and_takes_plain_grants() -> None:
    """A backend without ``acquire_with_extras`` gets a ValidationError for metadata or a
    lock-delay, before any I/O, and still grants plain acquires."""
    leases = LeaseManager(_PlainBackend())
    with pytest.raises(ValidationError, match="_PlainBackend stores no metadata nor lock-delay"):
        leases.acquire("k", metadata=HOST)
    with pytest.raises(ValidationError) as caught:
        leases.acquire("k", lock_delay_ms=10)
    assert caught.value.argument == "lock_delay_ms"
    assert leases.inspect("k") is None
    assert leases.acquire("k").acquired


# -- metadata ---------------------------------------------------------------------------------


def test_metadata_is_stored_with_the_grant_and_goes_with_the_lease(face: Face) -> None:
    """inspect shows the metadata the grant stored, and never the owner token; a release
    deletes it, and the next grant without metadata shows none."""
    result = face.call("acquire", "k", ttl_ms=100, metadata=HOST)
    lease = result.lease
    info = face.call("inspect", "k")
    assert (info.fencing_token, info.metadata) == (1, HOST)
    assert lease.owner_token not in repr(info)
    assert face.run(lease.release()) is True
    assert face.call("inspect", "k") is None
    again = face.call("acquire", "k", ttl_ms=100)
    assert (face.call("inspect", "k").metadata, again.lease.fencing_token) == ({}, 2)


def test_an_expired_grant_s_metadata_is_not_the_next_one_s(face: Face) -> None:
    """A lease that expires takes its metadata with it: the next holder shows its own."""
    face.call("acquire", "k", ttl_ms=100, metadata=HOST)
    face.clock.advance(100)
    assert face.call("inspect", "k") is None
    face.call("acquire", "k", ttl_ms=100, metadata={"host": "web-2"})
    assert face.call("inspect", "k").metadata == {"host": "web-2"}
    face.clock.advance(100)
    face.call("acquire", "k", ttl_ms=100)
    assert face.call("inspect", "k").metadata == {}


def test_hold_and_with_lease_store_metadata(face: Face) -> None:
    """hold and with_lease store their metadata for the lease they hold."""
    seen: list[object] = []
    if isinstance(face.manager, LeaseManager):
        with face.manager.hold("k", ttl_ms=1_000, metadata=HOST):
            seen.append(face.call("inspect", "k").metadata)
        face.manager.with_lease(
            "k", lambda lease: seen.append(face.manager.inspect("k").metadata),  # type: ignore[union-attr]
            metadata={"job": "drain"},
        )  # fmt: skip
    else:
        manager = face.manager

        async def both() -> None:
            async with manager.hold("k", ttl_ms=1_000, metadata=HOST):
                seen.append((await manager.inspect("k")).metadata)  # type: ignore[union-attr]

            async def body(lease: object) -> None:
                seen.append((await manager.inspect("k")).metadata)  # type: ignore[union-attr]

            await manager.with_lease("k", body, metadata={"job": "drain"})

        face.run(both())
    assert seen == [HOST, {"job": "drain"}]
    assert face.call("inspect", "k") is None


# -- lock-delay -------------------------------------------------------------------------------


def test_an_expired_lease_blocks_its_key_until_deadline_plus_lock_delay(face: Face) -> None:
    """A lease that expired unreleased keeps its key from every grant until its deadline plus
    lock_delay_ms, the refusal naming the delay left; at that millisecond the key is granted,
    with the next token."""
    face.call("acquire", "k", ttl_ms=100, lock_delay_ms=50)
    face.clock.advance(100)
    assert face.call("inspect", "k") is None  # the lease itself is over
    refused = face.call("acquire", "k", ttl_ms=100)
    assert (refused.acquired, refused.holder_ttl_ms) == (False, 50)
    face.clock.advance(49)
    assert face.call("acquire", "k", ttl_ms=100).holder_ttl_ms == 1
    face.clock.advance(1)
    granted = face.call("acquire", "k", ttl_ms=100)
    assert granted.lease.fencing_token == 2


def test_a_released_lease_frees_its_key_at_once(face: Face) -> None:
    """A release ends the lock-delay with the lease: the key is granted at once."""
    lease = face.call("acquire", "k", ttl_ms=100, lock_delay_ms=10_000).lease
    assert face.run(lease.release()) is True
    assert face.call("acquire", "k", ttl_ms=100).lease.fencing_token == 2


def test_force_release_ends_a_lock_delay(face: Face) -> None:
    """The operator's force_release frees the key at once, lock-delay or not."""
    face.call("acquire", "k", ttl_ms=100, lock_delay_ms=10_000)
    face.clock.advance(100)
    assert face.call("acquire", "k", ttl_ms=100).acquired is False
    assert face.call("force_release", "k") is False  # no lease was held any more
    assert face.call("acquire", "k", ttl_ms=100).lease.fencing_token == 2


def test_the_manager_s_lock_delay_is_the_default_and_a_call_overrides_it(tmp_path: Path) -> None:
    """LeaseManager(lock_delay_ms=...) applies to every grant; lock_delay_ms=0 on a call turns
    it off for that grant."""
    clock = FakeClock()
    leases = LeaseManager(
        SqliteBackend(tmp_path / "l.db", clock=clock), clock=clock, lock_delay_ms=30
    )
    leases.acquire("a", ttl_ms=100)
    leases.acquire("b", ttl_ms=100, lock_delay_ms=0)
    clock.advance(100)
    assert leases.acquire("a", ttl_ms=100).holder_ttl_ms == 30
    assert leases.acquire("b", ttl_ms=100).acquired
    leases.close()


def test_a_renewed_lease_s_delay_counts_from_its_last_deadline(face: Face) -> None:
    """Renewal moves the deadline, and the lock-delay with it."""
    lease = face.call("acquire", "k", ttl_ms=100, lock_delay_ms=50).lease
    face.clock.advance(80)
    assert face.run(lease.renew()) is True
    face.clock.advance(100)  # the renewed deadline
    assert face.call("acquire", "k", ttl_ms=100).holder_ttl_ms == 50
    face.clock.advance(50)
    assert face.call("acquire", "k", ttl_ms=100).acquired


def test_a_hold_whose_lease_lapsed_leaves_the_delay(tmp_path: Path) -> None:
    """A hold that lost its lease (no renewal, the TTL passed) ends in LeaseLostError, and its
    release finds nothing to free: the key stays blocked for the lock-delay."""
    clock = FakeClock()
    leases = LeaseManager(MemoryBackend(clock=clock), clock=clock)
    hold = leases.hold("k", ttl_ms=100, heartbeat_ms=False, lock_delay_ms=40)
    with pytest.raises(LeaseLostError), hold:
        clock.advance(100)
    assert leases.acquire("k", ttl_ms=100).holder_ttl_ms == 40
    clock.advance(40)
    assert leases.acquire("k", ttl_ms=100).acquired
    leases.close()


def test_a_retried_acquire_by_the_holder_is_no_new_grant(face: Face) -> None:
    """The same owner token asking again (a retry after a lost reply) keeps its token and its
    metadata: a repeat, not a new grant."""
    backend = face.manager.backend
    first = face.run(backend.acquire_with_extras("k", "owner", 100, None))  # type: ignore[union-attr]
    assert first == AcquireReply(True, 1, 100)
    extras = face.manager._extras(HOST, None)
    again = face.run(backend.acquire_with_extras("k", "owner", 100, extras))  # type: ignore[union-attr]
    assert again == AcquireReply(True, 1, 100, retried=True)
    assert face.call("inspect", "k").metadata == HOST
