"""The slots of every semaphore of a manager as one lease backend, for the lease machinery:
`AsyncSlotBackend` over the slot store (`fencedlease._async.semaphore_stores`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from fencedlease._core.backend import RenewItem
from fencedlease._core.protocol import AcquireReply, InspectReply

from .semaphore_stores import AsyncSlotStore

__all__ = ["AsyncSlotBackend", "limit_of"]

_LIMIT: ContextVar[int] = ContextVar("fencedlease_semaphore_limit")


@contextmanager
def limit_of(limit: int) -> Iterator[None]:
    """The ``limit`` the slot acquires made inside the block (in this thread or task) hold to:
    the semaphore handle sets it around its call of the slot manager (see `AsyncSlotBackend`)."""
    token = _LIMIT.set(limit)
    try:
        yield
    finally:
        _LIMIT.reset(token)


class AsyncSlotBackend:
    """The [`AsyncLeaseBackend`][fencedlease.AsyncLeaseBackend] of every semaphore of a manager,
    for the lease machinery (one slot manager, so one renewer, batches the renewals of all their
    slots): ``acquire(name, ...)`` takes a slot under the limit of the handle that asked
    (`limit_of`, set in the caller's thread or task, where the acquire runs); renewals and
    releases need no limit; ``force_release`` deletes every slot of the name; ``close`` leaves the
    manager's backend open. ``inspect`` has no meaning for one slot among several and raises
    ``NotImplementedError`` (the semaphore handle never calls it)."""

    def __init__(self, store: AsyncSlotStore) -> None:
        self.store = store

    @property
    def limit(self) -> int:
        """The limit of the acquire under way (`limit_of`)."""
        return _LIMIT.get()

    def fencing_scope(self, name: str) -> str:
        return self.store.fencing_scope(name)

    async def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        return await self.store.acquire(key, owner_token, ttl_ms, self.limit)

    async def renew(self, key: str, owner_token: str, ttl_ms: int) -> int:
        reply = (await self.store.renew_many([(key, owner_token, ttl_ms)]))[0]
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]:
        return await self.store.renew_many(items)

    async def release(self, key: str, owner_token: str) -> bool:
        return await self.store.release(key, owner_token)

    async def inspect(self, key: str) -> InspectReply | None:
        raise NotImplementedError("a semaphore slot has no single-lease view")

    async def force_release(self, key: str) -> bool:
        return await self.store.clear(key)

    async def close(self) -> None:
        """Nothing of its own to close: the store is the manager's backend's."""
