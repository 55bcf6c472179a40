"""The asyncio face's semaphore: [`AsyncSemaphore`][fencedlease.aio.AsyncSemaphore], made by
[`AsyncLeaseManager.semaphore`][fencedlease.aio.AsyncLeaseManager.semaphore]; the twin of
[`Semaphore`][fencedlease.Semaphore] (`fencedlease._semaphore`), with the same stores' steps
(`fencedlease._semaphore_stores`) awaited: the same Lua scripts on Redis, the memory store inline,
the SQLite store on a worker thread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Literal, Protocol, TypeVar, cast

from .._decisions import DEFAULT_RETRY_DELAY_MS, DEFAULT_TTL_MS
from .._errors import LeaseNotAcquiredError, SemaphoreLeaseLostError
from .._semaphore import SemaphoreFacts, not_acquired, slot_lost_error, slot_manager
from ._lease import AsyncAcquireResult, AsyncLease, AsyncLeaseOutcome
from ._manager_base import _AsyncManagerBase
from ._renewer import AsyncRenewer
from ._semaphore_stores import AsyncSlotStore, async_slot_store_for
from ._slot_backend import AsyncSlotBackend, limit_of

__all__ = ["AsyncSemaphore", "AsyncSemaphoreLease", "async_slot_manager_for"]

T = TypeVar("T")


class AsyncSemaphoreLease(AsyncLease):
    """One slot of an [`AsyncSemaphore`][fencedlease.aio.AsyncSemaphore]: the twin of
    [`SemaphoreLease`][fencedlease.SemaphoreLease]; its loss raises
    [`SemaphoreLeaseLostError`][fencedlease.SemaphoreLeaseLostError]."""

    __slots__ = ()

    def _lost_error(self) -> SemaphoreLeaseLostError:
        return slot_lost_error(self)


class _AsyncSlotManager(Protocol):
    """What the semaphore uses of the manager it runs its slots with: an
    [`AsyncLeaseManager`][fencedlease.aio.AsyncLeaseManager] of the caller's manager's class over
    the slots' `AsyncSlotBackend` (named structurally: the manager module makes semaphores)."""

    _closed: bool
    _lease_class: type[AsyncLease]

    @property
    def backend(self) -> AsyncSlotBackend: ...

    @property
    def renewer(self) -> AsyncRenewer: ...

    async def acquire(
        self, key: str, *, ttl_ms: int = ..., wait_ms: int = ..., retry_delay_ms: int = ...
    ) -> AsyncAcquireResult: ...

    def hold(
        self,
        key: str,
        *,
        ttl_ms: int = ...,
        wait_ms: int = ...,
        retry_delay_ms: int = ...,
        heartbeat_ms: int | Literal[False] | None = ...,
        on_renew_error: Callable[[BaseException], object] | None = ...,
    ) -> AbstractAsyncContextManager[AsyncLease]: ...

    async def with_lease(
        self,
        key: str,
        fn: Callable[[AsyncLease], Awaitable[T]],
        *,
        ttl_ms: int = ...,
        wait_ms: int = ...,
        retry_delay_ms: int = ...,
        heartbeat_ms: int | Literal[False] | None = ...,
        on_renew_error: Callable[[BaseException], object] | None = ...,
    ) -> AsyncLeaseOutcome[T]: ...

    async def close(self, timeout_ms: int = ...) -> None: ...


def async_slot_manager_for(manager: _AsyncManagerBase) -> _AsyncSlotManager:
    """The slot manager of ``manager``'s semaphores, as
    `fencedlease._semaphore.slot_manager_for`; no I/O.

    Raises:
        ValidationError: ``manager``'s backend has no semaphore store.
    """
    backend = AsyncSlotBackend(async_slot_store_for(manager._backend))
    return cast(_AsyncSlotManager, slot_manager(manager, backend, AsyncSemaphoreLease))


class _SlotHold(AbstractAsyncContextManager[AsyncSemaphoreLease]):
    """The manager's hold on a slot, with the semaphore's not-acquired message."""

    def __init__(
        self, hold: AbstractAsyncContextManager[AsyncLease], name: str, limit: int
    ) -> None:
        self._hold, self._name, self._limit = hold, name, limit

    async def __aenter__(self) -> AsyncSemaphoreLease:
        try:
            with limit_of(self._limit):
                lease = await self._hold.__aenter__()
        except LeaseNotAcquiredError:
            raise not_acquired(self._name, self._limit) from None
        return cast(AsyncSemaphoreLease, lease)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return await self._hold.__aexit__(exc_type, exc, tb)


class AsyncSemaphore(SemaphoreFacts[AsyncSlotStore]):
    """The asyncio twin of [`Semaphore`][fencedlease.Semaphore]: at most ``limit`` holders of
    ``name`` at once, each with a fenced, renewed slot; made by
    [`AsyncLeaseManager.semaphore`][fencedlease.aio.AsyncLeaseManager.semaphore]. The methods take
    the arguments of the manager's methods of the same names (without the key), are awaited, and
    behave as they do, slot for lease; on loss the body's task is cancelled and the ``hold`` ends
    in [`SemaphoreLeaseLostError`][fencedlease.SemaphoreLeaseLostError].

    Raises:
        ValidationError: as [`Semaphore`][fencedlease.Semaphore].
    """

    def __init__(self, slots: _AsyncSlotManager, name: str, limit: int) -> None:
        super().__init__(name, limit, slots.backend.store)
        self._slots = slots

    async def acquire(
        self,
        *,
        ttl_ms: int = DEFAULT_TTL_MS,
        wait_ms: int = 0,
        retry_delay_ms: int = DEFAULT_RETRY_DELAY_MS,
    ) -> AsyncAcquireResult:
        """As [`Semaphore.acquire`][fencedlease.Semaphore.acquire], awaited; ``lease`` is an
        [`AsyncSemaphoreLease`][fencedlease.aio.AsyncSemaphoreLease]."""
        with limit_of(self._limit):
            return await self._slots.acquire(
                self._name, ttl_ms=ttl_ms, wait_ms=wait_ms, retry_delay_ms=retry_delay_ms
            )

    def hold(
        self,
        *,
        ttl_ms: int = DEFAULT_TTL_MS,
        wait_ms: int = 0,
        retry_delay_ms: int = DEFAULT_RETRY_DELAY_MS,
        heartbeat_ms: int | Literal[False] | None = None,
        on_renew_error: Callable[[BaseException], object] | None = None,
    ) -> AbstractAsyncContextManager[AsyncSemaphoreLease]:
        """As [`Semaphore.hold`][fencedlease.Semaphore.hold], with ``async with``; arguments are
        checked when ``hold()`` is called.

        Raises:
            LeaseNotAcquiredError: every slot was held (after ``wait_ms``).
            SemaphoreLeaseLostError: the slot was lost while the block ran.
            ValidationError, BackendError, ManagerClosedError: as the manager's ``hold``.
        """
        hold = self._slots.hold(
            self._name,
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            retry_delay_ms=retry_delay_ms,
            heartbeat_ms=heartbeat_ms,
            on_renew_error=on_renew_error,
        )
        return _SlotHold(hold, self._name, self._limit)

    async def with_lease(
        self,
        fn: Callable[[AsyncSemaphoreLease], Awaitable[T]],
        *,
        ttl_ms: int = DEFAULT_TTL_MS,
        wait_ms: int = 0,
        retry_delay_ms: int = DEFAULT_RETRY_DELAY_MS,
        heartbeat_ms: int | Literal[False] | None = None,
        on_renew_error: Callable[[BaseException], object] | None = None,
    ) -> AsyncLeaseOutcome[T]:
        """As [`Semaphore.with_lease`][fencedlease.Semaphore.with_lease], awaiting ``fn(slot)``.

        Raises:
            SemaphoreLeaseLostError: the slot was lost while ``fn`` ran.
            ValidationError, BackendError, ManagerClosedError: as the manager's ``with_lease``.
        """
        with limit_of(self._limit):  # fn runs inside: its own semaphores set their own
            return await self._slots.with_lease(
                self._name,
                cast(Callable[[AsyncLease], Awaitable[T]], fn),
                ttl_ms=ttl_ms,
                wait_ms=wait_ms,
                retry_delay_ms=retry_delay_ms,
                heartbeat_ms=heartbeat_ms,
                on_renew_error=on_renew_error,
            )

    @property
    def closed(self) -> bool:
        """Whether the handle is closed (its manager is)."""
        return self._slots._closed

    async def holders(self) -> int:
        """How many slots are live now, as the store counts them.

        Raises:
            BackendError: the store failed.
        """
        return await self._store.count(self._name)

    async def force_release(self) -> bool:
        """As [`Semaphore.force_release`][fencedlease.Semaphore.force_release], awaited.

        Raises:
            BackendError: the store failed.
        """
        return await self._store.clear(self._name)
