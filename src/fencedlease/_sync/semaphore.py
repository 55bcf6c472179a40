# GENERATED from src/fencedlease/_async/semaphore.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""The semaphore: [`Semaphore`][fencedlease.Semaphore], made by
[`LeaseManager.semaphore`][fencedlease.LeaseManager.semaphore], over the stores'
steps (`fencedlease._sync.semaphore_stores`: the same Lua scripts on Redis, the memory store
inline, the SQLite store on a worker thread on the asyncio face). What a semaphore is, and what
both faces decide without I/O: `fencedlease._core.semaphore`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Literal, Protocol, TypeVar, cast

from fencedlease._core.context import WithOnly
from fencedlease._core.decisions import DEFAULT_RETRY_DELAY_MS, DEFAULT_TTL_MS
from fencedlease._core.errors import LeaseNotAcquiredError, SemaphoreLeaseLostError
from fencedlease._core.semaphore import SemaphoreFacts, not_acquired, slot_lost_error, slot_manager

from .lease import AcquireResult, Lease, LeaseOutcome
from .manager_base import _ManagerBase
from .renewer import Renewer
from .semaphore_stores import SlotStore, slot_store_for
from .slot_backend import SlotBackend, limit_of

__all__ = ["Semaphore", "SemaphoreLease", "slot_manager_for"]

T = TypeVar("T")


class SemaphoreLease(Lease):
    """One slot of a semaphore ([`Semaphore`][fencedlease.Semaphore]): a lease
    ([`Lease`][fencedlease.Lease]) whose ``key`` is the semaphore's name, whose
    ``fencing_token`` comes from the semaphore's counter, and whose loss
    ([`check`][fencedlease.Lease.check], the end of a ``hold``) raises
    [`SemaphoreLeaseLostError`][fencedlease.SemaphoreLeaseLostError]."""

    __slots__ = ()

    def _lost_error(self) -> SemaphoreLeaseLostError:
        return slot_lost_error(self)


class _SlotManager(Protocol):
    """What the semaphore uses of the manager it runs its slots with: a manager
    ([`LeaseManager`][fencedlease.LeaseManager]) of the caller's manager's class
    over the slots' `SlotBackend` (named structurally: the manager module makes semaphores)."""

    _closed: bool
    _lease_class: type[Lease]

    @property
    def backend(self) -> SlotBackend: ...

    @property
    def renewer(self) -> Renewer: ...

    def acquire(
        self, key: str, *, ttl_ms: int = ..., wait_ms: int = ..., retry_delay_ms: int = ...
    ) -> AcquireResult: ...

    def hold(
        self,
        key: str,
        *,
        ttl_ms: int = ...,
        wait_ms: int = ...,
        retry_delay_ms: int = ...,
        heartbeat_ms: int | Literal[False] | None = ...,
        on_renew_error: Callable[[BaseException], object] | None = ...,
    ) -> AbstractContextManager[Lease]: ...

    def with_lease(
        self,
        key: str,
        fn: Callable[[Lease], T],
        *,
        ttl_ms: int = ...,
        wait_ms: int = ...,
        retry_delay_ms: int = ...,
        heartbeat_ms: int | Literal[False] | None = ...,
        on_renew_error: Callable[[BaseException], object] | None = ...,
    ) -> LeaseOutcome[T]: ...

    def close(self, timeout_ms: int = ...) -> None: ...


def slot_manager_for(manager: _ManagerBase) -> _SlotManager:
    """The slot manager of ``manager``'s semaphores: one for all of them, so one renewer batches
    every slot's renewals (``manager.semaphore()`` makes it once).

    Raises:
        ValidationError: ``manager``'s backend has no semaphore store.
    """
    backend = SlotBackend(slot_store_for(manager._backend))
    return cast(_SlotManager, slot_manager(manager, backend, SemaphoreLease))


class _SlotHold(WithOnly, AbstractContextManager[SemaphoreLease]):
    """The manager's hold on a slot, with the semaphore's not-acquired message."""

    def __init__(self, hold: AbstractContextManager[Lease], name: str, limit: int) -> None:
        self._hold, self._name, self._limit = hold, name, limit
        self._with_what = f"{Semaphore.__name__}.hold()"  # the face's own name

    def __enter__(self) -> SemaphoreLease:
        try:
            with limit_of(self._limit):
                lease = self._hold.__enter__()
        except LeaseNotAcquiredError:
            raise not_acquired(self._name, self._limit) from None
        return cast(SemaphoreLease, lease)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return self._hold.__exit__(exc_type, exc, tb)


class Semaphore(SemaphoreFacts[SlotStore]):
    """At most ``limit`` holders of ``name`` at once, each with a fenced, renewed slot; made by
    [`LeaseManager.semaphore`][fencedlease.LeaseManager.semaphore].

    [`acquire`][fencedlease.Semaphore.acquire],
    [`hold`][fencedlease.Semaphore.hold] and
    [`with_lease`][fencedlease.Semaphore.with_lease] take the arguments of the
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

    def __init__(self, slots: _SlotManager, name: str, limit: int) -> None:
        super().__init__(name, limit, slots.backend.store)
        self._slots = slots

    def acquire(
        self,
        *,
        ttl_ms: int = DEFAULT_TTL_MS,
        wait_ms: int = 0,
        retry_delay_ms: int = DEFAULT_RETRY_DELAY_MS,
    ) -> AcquireResult:
        """Take a slot for ``ttl_ms`` milliseconds, as
        [`LeaseManager.acquire`][fencedlease.LeaseManager.acquire] takes a lease:
        fail fast, or retry every ``retry_delay_ms`` up to ``wait_ms``; not renewed in the
        background.

        Returns:
            [`AcquireResult`][fencedlease.AcquireResult]: ``lease`` is an
            [`SemaphoreLease`][fencedlease.SemaphoreLease], or None with
            ``holder_ttl_ms`` (the milliseconds until the first slot expires) when every slot
            was held.

        Raises:
            ValidationError, BackendError, ManagerClosedError: as the manager's ``acquire``.
        """
        with limit_of(self._limit):
            return self._slots.acquire(
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
    ) -> AbstractContextManager[SemaphoreLease]:
        """Hold a slot for the block, renewed in the background, as
        [`LeaseManager.hold`][fencedlease.LeaseManager.hold] holds a lease;
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

    def with_lease(
        self,
        fn: Callable[[SemaphoreLease], T],
        *,
        ttl_ms: int = DEFAULT_TTL_MS,
        wait_ms: int = 0,
        retry_delay_ms: int = DEFAULT_RETRY_DELAY_MS,
        heartbeat_ms: int | Literal[False] | None = None,
        on_renew_error: Callable[[BaseException], object] | None = None,
    ) -> LeaseOutcome[T]:
        """Run ``fn(slot)`` holding a slot, as
        [`LeaseManager.with_lease`][fencedlease.LeaseManager.with_lease] does
        under a lease.

        Returns:
            [`LeaseOutcome`][fencedlease.LeaseOutcome]: ``skipped`` (and ``fn`` never
            ran) when every slot was held.

        Raises:
            SemaphoreLeaseLostError: the slot was lost while ``fn`` ran.
            ValidationError, BackendError, ManagerClosedError: as the manager's ``with_lease``.
        """
        with limit_of(self._limit):  # fn runs inside: its own semaphores set their own
            return self._slots.with_lease(
                self._name,
                cast(Callable[[Lease], T], fn),
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

    def holders(self) -> int:
        """How many slots are live now, as the store counts them.

        Raises:
            BackendError: the store failed.
        """
        return self._store.count(self._name)

    def force_release(self) -> bool:
        """Delete every slot of the semaphore, whoever holds it: the operator's escape hatch, as
        [`LeaseManager.force_release`][fencedlease.LeaseManager.force_release] is
        for a lease. The counter is kept, so later grants still get larger tokens; each holder
        finds out at its next renewal (refused: the slot is lost). Returns whether a slot was
        live.

        Raises:
            BackendError: the store failed.
        """
        return self._store.clear(self._name)
