"""The semaphore's slot stores for the asyncio face, and the adapter that runs slots as leases:
the twins of `fencedlease._sync.semaphore_stores` (the same steps, the same Lua scripts on Redis,
the memory store inline, the SQLite store on a worker thread)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from fencedlease._core.backend import RenewItem
from fencedlease._core.errors import ValidationError
from fencedlease._core.protocol import AcquireReply
from fencedlease._sync.semaphore_stores import MemorySlots, SlotStore, SqliteSlots, scope_of
from fencedlease.backends.memory import AsyncMemoryBackend
from fencedlease.backends.sqlite_async import AsyncSqliteBackend

from .redis_backend import AsyncRedisBackend
from .redis_slots import AsyncRedisSlots

__all__ = [
    "AsyncRedisSlots",
    "AsyncSlotStore",
    "AsyncSqliteSlots",
    "async_slot_store_for",
]

T = TypeVar("T")


class AsyncSlotStore(Protocol):
    """`fencedlease._sync.semaphore_stores.SlotStore`, awaited."""

    def fencing_scope(self, name: str) -> str: ...

    async def acquire(
        self, name: str, owner_token: str, ttl_ms: int, limit: int
    ) -> AcquireReply: ...

    async def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]: ...

    async def release(self, name: str, owner_token: str) -> bool: ...

    async def count(self, name: str) -> int: ...

    async def clear(self, name: str) -> bool: ...


class _InlineSlots:
    """A sync store that never blocks (memory: one short lock), run inline."""

    def __init__(self, store: SlotStore) -> None:
        self._store = store

    def fencing_scope(self, name: str) -> str:
        return self._store.fencing_scope(name)

    async def acquire(self, name: str, owner_token: str, ttl_ms: int, limit: int) -> AcquireReply:
        return self._store.acquire(name, owner_token, ttl_ms, limit)

    async def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]:
        return self._store.renew_many(items)

    async def release(self, name: str, owner_token: str) -> bool:
        return self._store.release(name, owner_token)

    async def count(self, name: str) -> int:
        return self._store.count(name)

    async def clear(self, name: str) -> bool:
        return self._store.clear(name)


class AsyncSqliteSlots:
    """The SQLite slot store of an
    [`AsyncSqliteBackend`][fencedlease.backends.AsyncSqliteBackend], each step on a worker thread
    (the tables are made at the first one)."""

    def __init__(self, backend: AsyncSqliteBackend) -> None:
        self._backend = backend
        self._store: SqliteSlots | None = None

    def fencing_scope(self, name: str) -> str:
        backend = self._backend
        return scope_of(backend._prefix if backend.sync is None else backend.sync.prefix, name)

    async def _slots(self, operation: str) -> SqliteSlots:
        if self._store is None:
            sync = await self._backend._backend(operation)
            self._store = await self._backend._run(SqliteSlots, sync)
        return self._store

    async def acquire(self, name: str, owner_token: str, ttl_ms: int, limit: int) -> AcquireReply:
        store = await self._slots("semaphore acquire")
        return await self._backend._run(store.acquire, name, owner_token, ttl_ms, limit)

    async def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]:
        store = await self._slots("semaphore renew")
        return await self._backend._run(store.renew_many, list(items))

    async def release(self, name: str, owner_token: str) -> bool:
        store = await self._slots("semaphore release")
        return await self._backend._run(store.release, name, owner_token)

    async def count(self, name: str) -> int:
        store = await self._slots("semaphore count")
        return await self._backend._run(store.count, name)

    async def clear(self, name: str) -> bool:
        store = await self._slots("semaphore clear")
        return await self._backend._run(store.clear, name)


def async_slot_store_for(backend: object) -> AsyncSlotStore:
    """The slot store beside an asyncio ``backend`` (the manager's).

    Raises:
        ValidationError: a backend with no semaphore store (only the library's Redis, memory and
            SQLite backends have one).
    """
    if isinstance(backend, AsyncRedisBackend):
        return AsyncRedisSlots(backend)
    if isinstance(backend, AsyncMemoryBackend):
        return _InlineSlots(MemorySlots(backend.sync))
    if isinstance(backend, AsyncSqliteBackend):
        return AsyncSqliteSlots(backend)
    raise ValidationError(
        "client",
        "semaphores need an AsyncRedisBackend, AsyncMemoryBackend or AsyncSqliteBackend; the"
        f" manager's backend is a {type(backend).__name__}",
    )
