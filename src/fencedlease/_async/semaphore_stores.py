"""Where a semaphore's slots live, one store per backend kind; the adapter that lets the lease
machinery (acquire loop, renewer, loss rules) run slots as leases is
`fencedlease._async.slot_backend.AsyncSlotBackend`.

A semaphore ``name`` with ``limit`` N has at most N live *slots*; each slot is a lease of its own
(owner token, fencing token, deadline), so every rule of single leases applies to it unchanged:
fail fast or a bounded wait, background renewal, loss by a refused renewal or by the deadline.

The store's steps, each atomic:

- ``acquire(name, owner, ttl_ms, limit)``: drop the slots whose deadline has come, then, if the
  owner holds a live slot, move its deadline (the same token: a retried acquire); else, with fewer
  than ``limit`` live slots, grant one with the next token of the name's counter (one counter per
  semaphore name, incremented in the same step); else report the milliseconds until the first
  slot expires. The limit is the caller's: the store keeps no limit, each acquire compares the
  live slots with its own (callers that disagree are each held to their own number, so the
  semaphore never holds more slots than the largest limit in use).
- ``renew_many(items)``: for each ``(name, owner, ttl_ms)``, move the deadline of a live slot;
  its token, or 0 when the slot is gone or expired.
- ``release(name, owner)``: drop the owner's slot; whether it was live.
- ``count(name)``: the live slots.
- ``clear(name)``: delete every slot, whoever holds it (the counter is kept); whether one was live.

A slot is live while ``now < deadline``. Redis: a sorted set scored by deadline (server ``TIME``,
ms) and a hash of tokens, both with a TTL up to the latest deadline (``semaphore_*.lua``, run by
`AsyncRedisSlots`). Memory and SQLite: the steps of `fencedlease.backends._slots`, run by
`AsyncLocalSlots` where the backend runs its own operations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

from fencedlease._core.backend import RenewItem
from fencedlease._core.errors import ValidationError
from fencedlease._core.protocol import AcquireReply
from fencedlease.backends._slots import MemorySlots, SlotSteps, SqliteSlots, scope_of
from fencedlease.backends.memory import AsyncMemoryBackend
from fencedlease.backends.sqlite_async import AsyncSqliteBackend

from .redis_backend import AsyncRedisBackend
from .redis_slots import AsyncRedisSlots

__all__ = [
    "AsyncLocalSlots",
    "AsyncRedisSlots",
    "AsyncSlotStore",
    "async_slot_store_for",
]

T = TypeVar("T")
B = TypeVar("B")
B_co = TypeVar("B_co", covariant=True)


class AsyncSlotStore(Protocol):
    """The semaphore steps of one backend (see the module docstring); every method atomic."""

    def fencing_scope(self, name: str) -> str: ...

    async def acquire(
        self, name: str, owner_token: str, ttl_ms: int, limit: int
    ) -> AcquireReply: ...

    async def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]: ...

    async def release(self, name: str, owner_token: str) -> bool: ...

    async def count(self, name: str) -> int: ...

    async def clear(self, name: str) -> bool: ...


class _AsyncLocalBackend(Protocol[B_co]):
    """What a memory or SQLite backend lends its slot store: the prefix of its fencing scopes,
    the plain backend the steps are made on (opened first, or refused when closed, with the
    step's name), and the call that runs a step where the backend runs its own operations."""

    @property
    def _scope_prefix(self) -> str: ...

    async def _backend(self, operation: str) -> B_co: ...

    async def _run(self, fn: Callable[..., T], *args: object) -> T: ...


class AsyncLocalSlots(Generic[B]):
    """The slots of a store in this host (a memory or SQLite backend): ``steps`` made on the
    plain backend at the first step (SQLite makes its tables then), each step run through the
    backend's own ``_run``: inline for memory and for the sync face's SQLite, on a worker thread
    for the asyncio face's SQLite (a busy database never blocks the event loop).

    Raises (every step):
        BackendError: the backend is closed, or a step failed (as the backend's own operations).
    """

    def __init__(self, backend: _AsyncLocalBackend[B], steps: Callable[[B], SlotSteps]) -> None:
        self._backend = backend
        self._make = steps
        self._steps: SlotSteps | None = None

    def fencing_scope(self, name: str) -> str:
        return scope_of(self._backend._scope_prefix, name)

    async def _slots(self, operation: str) -> SlotSteps:
        if self._steps is None:
            plain = await self._backend._backend(operation)
            self._steps = await self._backend._run(self._make, plain)
        return self._steps

    async def acquire(self, name: str, owner_token: str, ttl_ms: int, limit: int) -> AcquireReply:
        steps = await self._slots("semaphore acquire")
        return await self._backend._run(steps.acquire, name, owner_token, ttl_ms, limit)

    async def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]:
        steps = await self._slots("semaphore renew")
        return await self._backend._run(steps.renew_many, list(items))

    async def release(self, name: str, owner_token: str) -> bool:
        steps = await self._slots("semaphore release")
        return await self._backend._run(steps.release, name, owner_token)

    async def count(self, name: str) -> int:
        steps = await self._slots("semaphore count")
        return await self._backend._run(steps.count, name)

    async def clear(self, name: str) -> bool:
        steps = await self._slots("semaphore clear")
        return await self._backend._run(steps.clear, name)


def async_slot_store_for(backend: object) -> AsyncSlotStore:
    """The slot store beside ``backend`` (the manager's). No I/O: a SQLite store makes its
    tables at its first step.

    Raises:
        ValidationError: a backend with no semaphore store (only the library's Redis, memory and
            SQLite backends have one); argument ``client``, the manager's.
    """
    if isinstance(backend, AsyncRedisBackend):
        return AsyncRedisSlots(backend)
    if isinstance(backend, AsyncMemoryBackend):
        return AsyncLocalSlots(backend, MemorySlots)
    if isinstance(backend, AsyncSqliteBackend):
        return AsyncLocalSlots(backend, SqliteSlots)
    raise ValidationError(
        "client",
        "semaphores need the library's AsyncRedisBackend, AsyncMemoryBackend or"
        f" AsyncSqliteBackend; the manager's backend is a {type(backend).__name__}",
    )
