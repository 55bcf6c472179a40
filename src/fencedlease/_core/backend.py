"""The contract between a lease manager and the store that keeps leases.

Each method is one atomic step at the store: no other client can observe or interleave with half
of it. Keys here are the caller's keys; the backend applies its own layout (for Redis, the prefix
and the hash tag). Owner tokens are secrets: a backend never logs them.

Errors: every failure to reach the store or a refusal by it is raised as
[`BackendError`][fencedlease.BackendError] with the store's exception in ``__cause__``, saying what
may have happened at the store (``sent``, ``wrote``; the defaults fit a store whose every call is
one transaction).

Naming counters (optional): a backend that offers ``fencing_scope(key) -> str`` (no I/O) names
the counter of ``key``'s fencing tokens, ``"<prefix>:{<escaped key>}:fence"`` for the backends of
this library; the managers give it to every lease
([`fencing_scope`][fencedlease.Lease.fencing_scope]) so fenced stores tell counters apart. A backend
without it gives leases no scope (``None``).

Waking waiters (optional): a backend that can wake the callers waiting for a key when it is
released offers ``release_waiter()``, returning the manager's release waiter (the Redis backends
return their hand-off); the managers poll the others.

Queueing acquires (optional, with ``release_waiter``): a backend whose release waiter queues a
waiting caller (the Redis hand-off) takes the waiter's queueing arguments as ``acquire``'s fourth
argument, ``queue``, and queues the caller in the same atomic step when the key is held
(`QueueingBackend`, `AsyncQueueingBackend`). The managers pass ``queue`` to such a backend only,
and only arguments its own waiter made; the memory and SQLite backends do not queue (their
callers poll), so their ``acquire`` is never given one.

Storing extras (optional): a backend that offers ``acquire_with_extras(key, owner_token,
ttl_ms, extras[, queue])`` (``extras`` a `GrantExtras`, the grant's ``metadata`` and
``lock_delay_ms``, or None) acquires as ``acquire`` does and stores them in the same atomic step
as the grant, returns the metadata from ``inspect`` (`InspectReply.metadata`), deletes it with the
lease, and keeps a key whose lease ended without a release from being granted until
``lock_delay_ms`` after its deadline (a release, by its holder or ``force_release``, frees the key
at once). Every backend of this library does; the managers call it only for a grant that is not
plain, and refuse metadata or a lock-delay for a backend without it (`takes_extras`).

Following a failover (optional): a backend that sees its Redis primary change offers a
settable ``on_primary_switch`` (`FollowsPrimary`); the managers set it to renew every lease at
once on the new primary. The memory and SQLite backends have no primary to follow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from fencedlease._core.errors import BackendError
from fencedlease._core.protocol import AcquireReply, InspectReply

__all__ = [
    "AsyncLeaseBackend",
    "AsyncQueueingBackend",
    "AsyncReleases",
    "FollowsPrimary",
    "LeaseBackend",
    "QueueingBackend",
    "Releases",
    "RenewItem",
    "fencing_scope_of",
    "takes_extras",
]

RenewItem = tuple[str, str, int]
"""``(key, owner_token, ttl_ms)``: one renewal in a batch."""


def fencing_scope_of(backend: object, key: str) -> str | None:
    """``backend.fencing_scope(key)`` when the backend offers it (see the module docstring), else
    ``None``.

    Raises:
        BackendError: the backend's ``fencing_scope`` returned something else than a non-empty
            ``str``.
    """
    scope_of = getattr(backend, "fencing_scope", None)
    if scope_of is None:
        return None
    scope = scope_of(key)
    if not isinstance(scope, str) or not scope:
        raise BackendError(
            f"{type(backend).__name__}.fencing_scope returned {type(scope).__name__}, "
            "not a non-empty str"
        )
    return scope


def takes_extras(backend: object) -> bool:
    """Whether ``backend`` offers ``acquire_with_extras`` (see "Storing extras" in the module
    docstring). No I/O."""
    return callable(getattr(backend, "acquire_with_extras", None))


class Releases(Protocol):
    """What runs a lease's release: its `LeaseBackend`, or the manager's release of a hold on the
    caller's own thread (`fencedlease._redis.caller`). Same meaning as `LeaseBackend.release`."""

    def release(self, key: str, owner_token: str) -> bool:
        """Delete ``key`` if ``owner_token`` holds it; whether it did."""
        ...


class AsyncReleases(Protocol):
    """`Releases`, awaited (the asyncio face's `AsyncLeaseBackend`)."""

    async def release(self, key: str, owner_token: str) -> bool:
        """Delete ``key`` if ``owner_token`` holds it; whether it did."""
        ...


class LeaseBackend(Protocol):
    """What [`LeaseManager`][fencedlease.LeaseManager] needs from a store; every method atomic."""

    def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        """If ``key`` is free (or expired): grant it to ``owner_token`` for ``ttl_ms`` with the next
        fencing token. If ``owner_token`` already holds it: reset its TTL, same token, no increment.
        Otherwise change nothing and report the holder's remaining TTL."""
        ...

    def renew(self, key: str, owner_token: str, ttl_ms: int) -> int:
        """Reset the TTL if ``owner_token`` holds ``key``; return its fencing token, else 0. Never
        recreates a missing key."""
        ...

    def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]:
        """[`renew`][fencedlease.LeaseBackend.renew] for each item, in as few round trips as the
        store allows. A failure of one item is returned in its place; a failure of the whole round
        trip is raised."""
        ...

    def release(self, key: str, owner_token: str) -> bool:
        """Delete ``key`` if ``owner_token`` holds it; return whether it did. Keeps the counter."""
        ...

    def inspect(self, key: str) -> InspectReply | None:
        """The lease on ``key`` as stored, or None when nobody holds it."""
        ...

    def force_release(self, key: str) -> bool:
        """Delete ``key`` whoever holds it (an operator's escape hatch); return whether it
        existed."""
        ...

    def close(self) -> None:
        """Release the backend's own resources (connections it created)."""
        ...


class AsyncLeaseBackend(Protocol):
    """What [`AsyncLeaseManager`][fencedlease.aio.AsyncLeaseManager] needs from a store:
    [`LeaseBackend`][fencedlease.LeaseBackend] with every method awaited, the same meanings, the
    same atomicity and the same errors.

    Cancellation: a cancelled call may or may not have run at the store (the command can land
    after the caller stopped listening). The manager relies on every method being safe to repeat
    or to follow by a release with the same owner token; it never assumes a cancelled call did
    nothing.
    """

    async def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        """As [`LeaseBackend.acquire`][fencedlease.LeaseBackend.acquire]."""
        ...

    async def renew(self, key: str, owner_token: str, ttl_ms: int) -> int:
        """As [`LeaseBackend.renew`][fencedlease.LeaseBackend.renew]."""
        ...

    async def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]:
        """As [`LeaseBackend.renew_many`][fencedlease.LeaseBackend.renew_many]: one round trip where
        the store allows."""
        ...

    async def release(self, key: str, owner_token: str) -> bool:
        """As [`LeaseBackend.release`][fencedlease.LeaseBackend.release]."""
        ...

    async def inspect(self, key: str) -> InspectReply | None:
        """As [`LeaseBackend.inspect`][fencedlease.LeaseBackend.inspect]."""
        ...

    async def force_release(self, key: str) -> bool:
        """As [`LeaseBackend.force_release`][fencedlease.LeaseBackend.force_release]."""
        ...

    async def close(self) -> None:
        """Release the backend's own resources (connections it created)."""
        ...


@runtime_checkable
class QueueingBackend(Protocol):
    """A backend whose release waiter queues callers (see "Queueing acquires" in the module
    docstring): the Redis backends. ``queue``: the waiter's queueing arguments (``()``: none,
    the plain [`acquire`][fencedlease.LeaseBackend.acquire])."""

    def acquire(
        self, key: str, owner_token: str, ttl_ms: int, queue: Sequence[str] = ()
    ) -> AcquireReply:
        """[`LeaseBackend.acquire`][fencedlease.LeaseBackend.acquire]; refused, ``owner_token``
        queued by ``queue`` in the same atomic step."""
        ...

    def release_waiter(self) -> object:
        """The release waiter that makes the ``queue`` arguments."""
        ...


@runtime_checkable
class AsyncQueueingBackend(Protocol):
    """`QueueingBackend`, awaited (the asyncio Redis backends)."""

    async def acquire(
        self, key: str, owner_token: str, ttl_ms: int, queue: Sequence[str] = ()
    ) -> AcquireReply:
        """As `QueueingBackend.acquire`."""
        ...

    def release_waiter(self) -> object:
        """The release waiter that makes the ``queue`` arguments."""
        ...


@runtime_checkable
class FollowsPrimary(Protocol):
    """A backend that sees its Redis primary change (see "Following a failover" in the module
    docstring): the manager sets ``on_primary_switch``, called (no arguments, its result unused)
    on each switch."""

    on_primary_switch: Callable[[], object] | None
