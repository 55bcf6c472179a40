"""What both faces' semaphores decide without I/O: the handle's facts (name, limit, fencing
scope), the errors of a lost slot and of a full semaphore, and how the slot manager is made.

A semaphore ``name`` lets at most ``limit`` holders in at once. Each holder has a *slot*: a lease
of its own with an owner token, a fencing token and a deadline, run by the same machinery as a
single lease (`fencedlease._async.semaphore_stores` has the store's steps). So the lease policy is
the same, rule for rule: fail fast by default or wait up to ``wait_ms``; renewed in the background
by a batched renewer (one script per batch of slots); lost on a renewal that finds the slot gone and
on the deadline passing with no confirmed renewal; a lost slot ends the ``hold`` in
[`SemaphoreLeaseLostError`][fencedlease.SemaphoreLeaseLostError].

Fencing tokens count per semaphore name, one counter for all its slots, incremented in the same
atomic step as the grant: tokens are unique and increasing across every holder of the name, so a
store downstream can fence the semaphore's holders as it fences a lease's (its scope is
``<prefix>:{<escaped name>}:semaphore:fence``). The idea is the counting semaphore (Dijkstra, 1965)
with leases in place of permanent permits, as in Redisson's ``RPermitExpirableSemaphore``.

The handles themselves are `fencedlease._async.semaphore` (written by hand) and
`fencedlease._sync.semaphore` (generated from it by ``scripts/unasync.py``).
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

from fencedlease._core.errors import LeaseNotAcquiredError, SemaphoreLeaseLostError
from fencedlease._core.validate import check_key, check_limit
from fencedlease._core.view import LeaseView

__all__ = ["SemaphoreFacts", "not_acquired", "slot_lost_error", "slot_manager"]


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


def slot_manager(manager: object, backend: object, lease_class: type) -> object:
    """A manager of ``manager``'s class (either face) over a semaphore's slot ``backend``, with
    ``manager``'s clock, batch size and event hook, whose grants are ``lease_class``. No I/O."""
    source: Any = manager
    slots = type(source)(
        backend,
        clock=source._clock,
        renew_batch_size=source._renewer._batch_size,
        on_event=source._on_event,
    )
    slots._lease_class = lease_class
    slots._refuse_nested = False  # many holders of one name: nested slots are no self-wait
    return slots


class _Scoped(Protocol):
    def fencing_scope(self, name: str) -> str: ...


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
