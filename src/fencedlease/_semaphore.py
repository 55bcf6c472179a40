"""The sync face's semaphore: [`Semaphore`][fencedlease.Semaphore], made by
[`LeaseManager.semaphore`][fencedlease.LeaseManager.semaphore].

A semaphore ``name`` lets at most ``limit`` holders in at once. Each holder has a *slot*: a lease
of its own with an owner token, a fencing token and a deadline, run by the same machinery as a
single lease (`fencedlease._semaphore_stores` has the store's steps). So the lease policy is the
same, rule for rule: fail fast by default or wait up to ``wait_ms``; renewed in the background by
a batched renewer (one script per batch of slots); lost on a renewal that finds the slot gone and
on the deadline passing with no confirmed renewal; a lost slot ends the ``hold`` in
[`SemaphoreLeaseLostError`][fencedlease.SemaphoreLeaseLostError].

Fencing tokens count per semaphore name, one counter for all its slots, incremented in the same
atomic step as the grant: tokens are unique and increasing across every holder of the name, so a
store downstream can fence the semaphore's holders as it fences a lease's (its scope is
``<prefix>:{<escaped name>}:semaphore:fence``). The idea is the counting semaphore (Dijkstra, 1965)
with leases in place of permanent permits, as in Redisson's ``RPermitExpirableSemaphore``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Generic, Literal, Protocol, TypeVar, cast

from ._decisions import DEFAULT_RETRY_DELAY_MS, DEFAULT_TTL_MS
from ._errors import LeaseNotAcquiredError, SemaphoreLeaseLostError
from ._lease import AcquireResult, Lease, LeaseOutcome
from ._manager_base import _ManagerBase
from ._renewer import Renewer
from ._semaphore_stores import SlotStore, check_limit, slot_store_for
from ._slot_backend import SlotBackend, limit_of
from ._validate import check_key
from ._view import LeaseView

__all__ = [
    "Semaphore",
    "SemaphoreFacts",
    "SemaphoreLease",
    "not_acquired",
    "slot_lost_error",
    "slot_manager",
    "slot_manager_for",
]

T = TypeVar("T")


def slot_lost_error(lease: LeaseView) -> SemaphoreLeaseLostError:
    """The error a lost slot raises (both faces): its semaphore's name, token and reason."""
    state = lease._state
    return SemaphoreLeaseLostError(
        state.key,
        f"a slot of semaphore {state.key!r} (fencing token {state.fencing_token}) was lost: "
        + (state.lost_reason or "unknown"),
    )


def not_acquired(name: str, limit: int) -> LeaseNotAcquiredError:
    """The error of a ``hold`` that found every slot taken (both faces)."""
    return LeaseNotAcquiredError(name, f"semaphore {name!r}: all {limit} slots are held")


class SemaphoreLease(Lease):
    """One slot of a [`Semaphore`][fencedlease.Semaphore]: a [`Lease`][fencedlease.Lease] whose
    ``key`` is the semaphore's name, whose ``fencing_token`` comes from the semaphore's counter,
    and whose loss ([`check`][fencedlease.Lease.check], the end of a ``hold``) raises
    [`SemaphoreLeaseLostError`][fencedlease.SemaphoreLeaseLostError]."""

    __slots__ = ()

    def _lost_error(self) -> SemaphoreLeaseLostError:
        return slot_lost_error(self)


class _SlotManager(Protocol):
    """What the semaphore uses of the manager it runs its slots with: a
    [`LeaseManager`][fencedlease.LeaseManager] of the caller's manager's class over the slots'
    `SlotBackend` (named structurally: the manager module makes semaphores)."""

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


class _Scoped(Protocol):
    def fencing_scope(self, name: str) -> str: ...


def slot_manager(manager: object, backend: object, lease_class: type) -> object:
    """A manager of ``manager``'s class (either face) over a semaphore's slot ``backend``, with
    ``manager``'s clock, batch size and event hook, whose grants are ``lease_class``."""
    source: Any = manager
    slots = type(source)(
        backend,
        clock=source._clock,
        renew_batch_size=source._renewer._batch_size,
        on_event=source._on_event,
    )
    slots._lease_class = lease_class
    return slots


def slot_manager_for(manager: _ManagerBase) -> _SlotManager:
    """The slot manager of ``manager``'s semaphores: one for all of them, so one renewer batches
    every slot's renewals (``manager.semaphore()`` makes it once).

    Raises:
        ValidationError: ``manager``'s backend has no semaphore store.
        BackendError: the SQLite backend could not make its semaphore tables.
    """
    backend = SlotBackend(slot_store_for(manager._backend))
    return cast(_SlotManager, slot_manager(manager, backend, SemaphoreLease))


S = TypeVar("S", bound=_Scoped)


class SemaphoreFacts(Generic[S]):
    """What both faces' semaphore handles say without I/O: ``name``, ``limit`` and
    ``fencing_scope``.

    Raises:
        ValidationError: ``name`` not a non-empty str; ``limit`` not an int in 1..10,000.
    """

    def __init__(self, name: str, limit: int, store: S) -> None:
        self._name = check_key(name, "name")
        self._limit = check_limit(limit)
        self._store = store

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self._name!r} limit={self._limit}>"

    @property
    def name(self) -> str:
        """The semaphore's name (its key in the store)."""
        return self._name

    @property
    def limit(self) -> int:
        """The most slots this handle's acquires let be held at once."""
        return self._limit

    @property
    def fencing_scope(self) -> str:
        """The name of the counter its slots' fencing tokens come from,
        ``<prefix>:{<escaped name>}:semaphore:fence``."""
        return self._store.fencing_scope(self._name)


class Semaphore(SemaphoreFacts[SlotStore]):
    """At most ``limit`` holders of ``name`` at once, each with a fenced, renewed slot; made by
    [`LeaseManager.semaphore`][fencedlease.LeaseManager.semaphore].

    [`acquire`][fencedlease.Semaphore.acquire], [`hold`][fencedlease.Semaphore.hold] and
    [`with_lease`][fencedlease.Semaphore.with_lease] take the arguments of the manager's methods of
    the same names (without the key) and behave as they do, slot for lease. The limit is this
    handle's: every acquire compares the live slots with it, so two handles of one name with
    different limits each admit up to their own (the semaphore never holds more slots than the
    largest limit in use). The slots of every semaphore of a manager are renewed by one renewer
    of theirs (started on the first ``hold``, every due slot in one script call per batch), and
    closed with the manager (a slot in a ``hold`` then ends lost and is released).

    Raises:
        ValidationError: ``name`` not a non-empty str; ``limit`` not an int in 1..10,000; a
            manager whose backend has no semaphore store (the library's Redis, memory and
            SQLite backends have one).
        BackendError: the SQLite backend could not make its semaphore tables.
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
        [`LeaseManager.acquire`][fencedlease.LeaseManager.acquire] takes a lease: fail fast, or
        retry every ``retry_delay_ms`` up to ``wait_ms``; not renewed in the background.

        Returns:
            [`AcquireResult`][fencedlease.AcquireResult]: ``lease`` is a
            [`SemaphoreLease`][fencedlease.SemaphoreLease], or None with ``holder_ttl_ms`` (the
            milliseconds until the first slot expires) when every slot was held.

        Raises:
            ValidationError, BackendError, ManagerClosedError: as the manager's ``acquire``.
        """
        with limit_of(self._limit):
            return self._slots.acquire(
                self._name, ttl_ms=ttl_ms, wait_ms=wait_ms, retry_delay_ms=retry_delay_ms
            )

    @contextmanager
    def hold(
        self,
        *,
        ttl_ms: int = DEFAULT_TTL_MS,
        wait_ms: int = 0,
        retry_delay_ms: int = DEFAULT_RETRY_DELAY_MS,
        heartbeat_ms: int | Literal[False] | None = None,
        on_renew_error: Callable[[BaseException], object] | None = None,
    ) -> Iterator[SemaphoreLease]:
        """Hold a slot for the ``with`` block, renewed in the background, as
        [`LeaseManager.hold`][fencedlease.LeaseManager.hold] holds a lease.

        Raises:
            LeaseNotAcquiredError: every slot was held (after ``wait_ms``); the block never runs.
            SemaphoreLeaseLostError: the slot was lost while the block ran.
            ValidationError, BackendError, ManagerClosedError: as the manager's ``hold``.
        """
        held = self._slots.hold(
            self._name,
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            retry_delay_ms=retry_delay_ms,
            heartbeat_ms=heartbeat_ms,
            on_renew_error=on_renew_error,
        )
        try:
            with limit_of(self._limit):
                lease = held.__enter__()
        except LeaseNotAcquiredError:
            raise not_acquired(self._name, self._limit) from None
        try:
            yield cast(SemaphoreLease, lease)
        except BaseException:
            if not held.__exit__(*sys.exc_info()):
                raise
        else:
            held.__exit__(None, None, None)

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
        [`LeaseManager.with_lease`][fencedlease.LeaseManager.with_lease] does under a lease.

        Returns:
            [`LeaseOutcome`][fencedlease.LeaseOutcome]: ``skipped`` (and ``fn`` never ran) when
            every slot was held.

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
        [`LeaseManager.force_release`][fencedlease.LeaseManager.force_release] is for a lease. The
        counter is kept, so later grants still get larger tokens; each holder finds out at its next
        renewal (refused: the slot is lost). Returns whether a slot was live.

        Raises:
            BackendError: the store failed.
        """
        return self._store.clear(self._name)
