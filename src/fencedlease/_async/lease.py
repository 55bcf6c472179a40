"""The lease handle and the small result types of the manager."""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

import attrs

from fencedlease._core.backend import AsyncLeaseBackend, AsyncReleases
from fencedlease._core.clock import Clock
from fencedlease._core.decisions import lost_wait_s
from fencedlease._core.events import release_ended, release_sent
from fencedlease._core.state import LeaseState
from fencedlease._core.validate import check_ms
from fencedlease._core.view import LeaseView

from .primitives import LostSignal

if TYPE_CHECKING:
    from fencedlease._core.schedule import RenewalEntry

    from .renewer import AsyncRenewer

__all__ = ["AsyncAcquireResult", "AsyncLease", "AsyncLeaseOutcome"]

T = TypeVar("T")


class AsyncLease(LeaseView):
    """A held (or once held) lease on ``key``.

    ``owner_token`` proves ownership to the store; it is a secret and never appears in ``repr``.
    ``fencing_token`` is the grant's number, strictly larger than every earlier grant's of the key;
    hand it to the storage you write to. It is None only for a lease restored without one (the
    first successful [`renew`][fencedlease.aio.AsyncLease.renew] learns it from Redis). The
    read-only attributes and [`check`][fencedlease.aio.AsyncLease.check] are the same code as
    the other face's lease (`LeaseView`).

    Nothing about it lives in a thread or a task: any thread (sync face) or any task of the event
    loop it was acquired on (asyncio face) may renew or release it, and the body may call
    [`check`][fencedlease.aio.AsyncLease.check] while the manager's renewer updates the lease.
    """

    __slots__ = ("_backend", "_entry", "_lost_signal", "_renewer")

    def __init__(self, state: LeaseState, backend: AsyncLeaseBackend, clock: Clock) -> None:
        super().__init__(state, clock)
        self._backend = backend
        self._entry: RenewalEntry | None = None
        self._renewer: AsyncRenewer | None = None
        self._lost_signal: LostSignal | None = None

    async def wait_lost(self, timeout_ms: int | None = None) -> bool:
        """Wait until the lease is lost or ``timeout_ms`` passes; return whether it is lost.

        Useful in a watcher (a thread or a task) that stops work the moment the lease goes. A
        lease not renewed in the background learns of its loss only through
        [`renew`][fencedlease.aio.AsyncLease.renew], [`check`][fencedlease.aio.AsyncLease.check],
        or here at its deadline.

        Raises:
            ValidationError: ``timeout_ms`` is not an int in 0..2,147,483,647.
        """
        limit = None if timeout_ms is None else check_ms("timeout_ms", timeout_ms, 0) / 1000
        clock = self._clock
        started = clock.monotonic()
        lost = self._lost_signal
        if lost is None:
            lost = self._lost_signal = LostSignal(self._state)
        while not self.lost:
            timed_out, wait = lost_wait_s(self._state, limit, started, clock.monotonic())
            if timed_out:
                return False
            await lost.wait(wait)
        return True

    async def renew(self, ttl_ms: int | None = None) -> bool:
        """Reset the TTL to ``ttl_ms`` (default: the current one) if this owner still holds the key.

        Returns False, and marks the lease lost, when the key is gone or another owner's; a lost
        lease is never renewed back to life. Returns False for a released lease. A
        ``renew()`` cancelled (asyncio face) changes nothing here (the command may still have reset
        the TTL in Redis, which is harmless: the local deadline stays the earlier one).

        Raises:
            ValidationError: ``ttl_ms`` out of 1..2,147,483,647.
            BackendError: the store could not be reached (not a loss by itself).
        """
        ttl = self._renew_ttl(ttl_ms)
        if ttl is None:
            return False
        state, clock = self._state, self._clock
        sent_mono, sent_wall = clock.monotonic(), clock.time()
        token = await self._backend.renew(state.key, state.owner_token, ttl)
        return self._renewed(token, sent_mono, sent_wall, ttl)

    async def release(self) -> bool:
        """Delete the key if this owner still holds it; return whether it did.

        A False reply means the lease had already moved on: the lease is then marked lost. A
        release whose connection breaks before its reply comes (a ``CLIENT KILL``, a reset) is
        sent once more on a new connection; if the first had run, the second finds the key gone,
        and False is returned: the library cannot tell that from a lease lost before the release,
        and in doubt says lost. The
        background renewal (if any) goes on while the release waits for a connection of a busy
        pool and runs, and stops with its reply; it never touches the key again. If the
        store cannot be reached ([`BackendError`][fencedlease.BackendError]) or the call is
        cancelled (asyncio face), the lease keeps its owner token, so ``release()`` can be called
        again.

        In a child forked after the lease was made it sends nothing and returns False: the lease
        is the parent's (``lost`` with the reason that says so), and the parent keeps it.

        Raises:
            BackendError: the store could not be reached.
        """
        return await self._release_on(self._backend)

    async def _release_on(self, store: AsyncReleases) -> bool:
        """`release` with the call to the store made by ``store`` (the backend, or the manager's
        bounded release on the caller's thread)."""
        state = self._state
        if state.inherited():
            return False  # a forked child: the lease is the parent's, so no I/O (see _fork)
        state.release_begins()
        sent = release_sent(state, self._clock)
        try:
            released = await store.release(state.key, state.owner_token)
        except BaseException as exc:
            release_ended(state, self._clock, sent, exc)
            state.release_failed()
            self._stop_renewal()  # no answer (or a cancellation): the deadline rule applies again
            raise
        # Renewed until here (rule 4): a release that waited for a connection of a busy pool
        # found the key still held.
        self._stop_renewal()
        release_ended(state, self._clock, sent, released)
        return self._released(released)

    def _stop_renewal(self) -> None:
        entry, renewer = self._entry, self._renewer
        if entry is not None and renewer is not None:
            renewer.remove(entry)
            self._entry = None


@attrs.frozen
class AsyncAcquireResult:
    """What [`AsyncLeaseManager.acquire`][fencedlease.aio.AsyncLeaseManager.acquire] got:
    ``acquired`` and the ``lease`` (None when not acquired). ``bool(result)`` is
    ``result.acquired``. ``holder_ttl_ms`` is the current holder's remaining TTL in milliseconds
    when not acquired (None when acquired)."""

    key: str
    lease: AsyncLease | None
    holder_ttl_ms: int | None = None

    @property
    def acquired(self) -> bool:
        return self.lease is not None

    def __bool__(self) -> bool:
        return self.lease is not None


@attrs.frozen
class AsyncLeaseOutcome(Generic[T]):
    """What [`AsyncLeaseManager.with_lease`][fencedlease.aio.AsyncLeaseManager.with_lease] did: ran
    ``fn`` under the lease (``value`` is what it returned, on the asyncio face what its coroutine
    returned), or skipped it because the lease was not acquired (``value`` is None)."""

    key: str
    acquired: bool
    value: T | None = None
    lease: AsyncLease | None = None

    @property
    def skipped(self) -> bool:
        return not self.acquired
