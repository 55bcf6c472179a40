"""The semaphore: [`AsyncSemaphore`][fencedlease.aio.AsyncSemaphore], made by
[`AsyncLeaseManager.semaphore`][fencedlease.aio.AsyncLeaseManager.semaphore], over the stores'
steps (`fencedlease._async.semaphore_stores`: the same Lua scripts on Redis, the memory store
inline, the SQLite store on a worker thread on the asyncio face). What a semaphore is, and what
both faces decide without I/O: `fencedlease._core.semaphore`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Literal, Protocol, TypeVar, cast

from fencedlease._core.context import AsyncWithOnly
from fencedlease._core.decisions import DEFAULT_RETRY_DELAY_MS, DEFAULT_TTL_MS
from fencedlease._core.errors import LeaseNotAcquiredError, SemaphoreLeaseLostError
from fencedlease._core.semaphore import SemaphoreFacts, not_acquired, slot_lost_error, slot_manager

from .lease import AsyncAcquireResult, AsyncLease, AsyncLeaseOutcome
from .manager_base import _AsyncManagerBase
from .renewer import AsyncRenewer
from .semaphore_stores import AsyncSlotStore, async_slot_store_for
from .slot_backend import AsyncSlotBackend, limit_of

__all__ = ["AsyncSemaphore", "AsyncSemaphoreLease", "async_slot_manager_for"]

T = TypeVar("T")


class AsyncSemaphoreLease(AsyncLease):
    """One slot of a semaphore ([`AsyncSemaphore`][fencedlease.aio.AsyncSemaphore]): a lease
    ([`AsyncLease`][fencedlease.aio.AsyncLease]) whose ``key`` is the semaphore's name, whose
    ``fencing_token`` comes from the semaphore's counter, and whose loss
    ([`check`][fencedlease.aio.AsyncLease.check], the end of a ``hold``) raises
    [`SemaphoreLeaseLostError`][fencedlease.SemaphoreLeaseLostError]."""

    __slots__ = ()

    def _lost_error(self) -> SemaphoreLeaseLostError:
        return slot_lost_error(self)


class _AsyncSlotManager(Protocol):
    """What the semaphore uses of the manager it runs its slots with: a manager
    ([`AsyncLeaseManager`][fencedlease.aio.AsyncLeaseManager]) of the caller's manager's class
    over the slots' `AsyncSlotBackend` (named structurally: the manager module makes semaphores)."""

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
    """The slot manager of ``manager``'s semaphores: one for all of them, so one renewer batches
    every slot's renewals (``manager.semaphore()`` makes it once).

    Raises:
        ValidationError: ``manager``'s backend has no semaphore store.
    """
    backend = AsyncSlotBackend(async_slot_store_for(manager._backend))
    return cast(_AsyncSlotManager, slot_manager(manager, backend, AsyncSemaphoreLease))


class _SlotHold(AsyncWithOnly, AbstractAsyncContextManager[AsyncSemaphoreLease]):
    """The manager's hold on a slot, with the semaphore's not-acquired message."""

    def __init__(
        self, hold: AbstractAsyncContextManager[AsyncLease], name: str, limit: int
    ) -> None:
        self._hold, self._name, self._limit = hold, name, limit
        self._with_what = f"{AsyncSemaphore.__name__}.hold()"  # the face's own name

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
    """At most ``limit`` holders of ``name`` at once, each with a fenced, renewed slot; made by
    [`AsyncLeaseManager.semaphore`][fencedlease.aio.AsyncLeaseManager.semaphore].

    [`acquire`][fencedlease.aio.AsyncSemaphore.acquire],
    [`hold`][fencedlease.aio.AsyncSemaphore.hold] and
    [`with_lease`][fencedlease.aio.AsyncSemaphore.with_lease] take the arguments of the
    manager's methods of the same names (without the key) and behave as they do, slot for lease.
    The limit is this handle's: every acquire compares the live slots with it, so two handles of
    one name with different limits each admit up to their own (the semaphore never holds more
    slots than the largest limit in use). The slots of every semaphore of a manager are renewed
    by one renewer of theirs (started on the first ``hold``, every due slot in one script call
    per batch), and closed with the manager (a slot in a ``hold`` then ends lost and is released).

    Raises:
        ValidationError: ``name`` not a non-empty str; ``limit`` not an int in 1..10,000; a
            manager whose backend has no semaphore store (the library's Redis, memory and
            SQLite backends have one). Making it does no I/O: a SQLite backend makes its
            semaphore tables at the first step, whose BackendError says why it could not.
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
        """Take a slot for ``ttl_ms`` milliseconds, as
        [`AsyncLeaseManager.acquire`][fencedlease.aio.AsyncLeaseManager.acquire] takes a lease:
        fail fast, or retry every ``retry_delay_ms`` up to ``wait_ms``; not renewed in the
        background.

        Returns:
            [`AsyncAcquireResult`][fencedlease.aio.AsyncAcquireResult]: ``lease`` is an
            [`AsyncSemaphoreLease`][fencedlease.aio.AsyncSemaphoreLease], or None with
            ``holder_ttl_ms`` (the milliseconds until the first slot expires) when every slot
            was held.

        Raises:
            ValidationError, BackendError, ManagerClosedError: as the manager's ``acquire``.
        """
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
        """Hold a slot for the block, renewed in the background, as
        [`AsyncLeaseManager.hold`][fencedlease.aio.AsyncLeaseManager.hold] holds a lease;
        arguments are checked when ``hold()`` is called.

        Raises:
            LeaseNotAcquiredError: every slot was held (after ``wait_ms``); the block never runs.
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
        """Run ``fn(slot)`` holding a slot, as
        [`AsyncLeaseManager.with_lease`][fencedlease.aio.AsyncLeaseManager.with_lease] does
        under a lease.

        Returns:
            [`AsyncLeaseOutcome`][fencedlease.aio.AsyncLeaseOutcome]: ``skipped`` (and ``fn`` never
            ran) when every slot was held.

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
        """Delete every slot of the semaphore, whoever holds it: the operator's escape hatch, as
        [`AsyncLeaseManager.force_release`][fencedlease.aio.AsyncLeaseManager.force_release] is
        for a lease. The counter is kept, so later grants still get larger tokens; each holder
        finds out at its next renewal (refused: the slot is lost). Returns whether a slot was
        live.

        Raises:
            BackendError: the store failed.
        """
        return await self._store.clear(self._name)
