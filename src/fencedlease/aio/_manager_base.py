"""What [`AsyncLeaseManager`][fencedlease.aio.AsyncLeaseManager] does by the same steps as the sync
face: the acquire call and its loop, ``restore``, ``inspect`` and ``force_release``. The sync face's
`fencedlease._manager_base` is generated from this module (``scripts/unasync.py``).

The steps that differ by face are the manager's own: [`_ManagerBase._abandon`][] (what an
acquire that failed or was interrupted may hold) and [`_ManagerBase._release_later`][] (the
release of a hand-off queue's grant nobody waits for any more).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime

from .._attempt import AcquireAttempt
from .._backend import AsyncLeaseBackend, fencing_scope_of
from .._clock import Clock, marking_sends
from .._decisions import (
    DEFAULT_RETRY_DELAY_MS,
    DEFAULT_TTL_MS,
    AcquireEnd,
    WaitForRelease,
    acquire_steps,
)
from .._errors import ManagerClosedError
from .._events import EventHook, acquire_ended, watch
from .._handoff import AsyncReleaseWaiter
from .._protocol import AcquireReply
from .._redis.replication import PrimaryWatch
from .._state import restored_state
from .._validate import check_acquire, check_key
from .._view import LeaseInfo
from ._lease import AsyncAcquireResult, AsyncLease
from ._renewer import AsyncRenewer

__all__ = ["_AsyncManagerBase"]


class _AsyncManagerBase(ABC):
    """The manager's calls that are the same steps on both faces; the subclass sets the
    attributes below in its ``__init__``."""

    _backend: AsyncLeaseBackend
    _clock: Clock
    _renewer: AsyncRenewer
    _release_waiter: AsyncReleaseWaiter
    _closed: bool
    _forked: bool
    _on_event: EventHook | None

    @abstractmethod
    async def _abandon(self, key: str, owner_token: str, exc: BaseException) -> None:
        """Release what an acquire that raised ``exc`` may hold under ``owner_token``."""

    @abstractmethod
    def _release_later(self, key: str, owner_token: str) -> None:
        """Release ``owner_token``'s hold on ``key`` in the background (the call keeps its time
        bound; ``close()`` waits for it)."""

    @property
    def backend(self) -> AsyncLeaseBackend:
        """The store the leases live in."""
        return self._backend

    @property
    def primary_id(self) -> str | None:
        """The replication id (``master_replid``) of the Redis primary that answered this
        manager's last acquire; None before the first, or for a store without one."""
        watch = getattr(self._backend, "primary", None)
        return watch.primary_id if isinstance(watch, PrimaryWatch) else None

    @property
    def primary_changes(self) -> int:
        """How many times this manager's acquires found a new Redis primary (a failover; each is
        also logged as a warning). After one, with ``fencing="counter"`` and ``replica_acks=0``,
        a grant the old primary had not replicated may have its token handed out again: check
        [`inspect`][fencedlease.aio.AsyncLeaseManager.inspect]'s ``promoted_from``, and use
        ``replica_acks`` or ``fencing="clock"`` so it cannot happen. 0 for other stores."""
        watch = getattr(self._backend, "primary", None)
        return watch.changes if isinstance(watch, PrimaryWatch) else 0

    def _check_open(self) -> None:
        if self._forked:
            raise ManagerClosedError(
                "this lease manager belongs to the parent process (fork): make a new one here"
            )
        if self._closed:
            raise ManagerClosedError()

    # -- acquiring --------------------------------------------------------------------------

    async def acquire(
        self,
        key: str,
        *,
        ttl_ms: int = DEFAULT_TTL_MS,
        wait_ms: int = 0,
        retry_delay_ms: int = DEFAULT_RETRY_DELAY_MS,
    ) -> AsyncAcquireResult:
        """Take the lease on ``key`` for ``ttl_ms`` milliseconds, with a new fencing token.

        One atomic round trip when the key is free. With ``wait_ms=0`` (the default) a held key
        fails fast; with ``wait_ms > 0`` the call retries every ``retry_delay_ms`` (randomised
        ±50% so waiters do not retry in lock-step) until acquired or ``wait_ms`` has passed on the
        monotonic clock, then makes one last attempt: it never waits longer than ``wait_ms`` plus
        one round trip. The lease is not renewed in the background: use
        [`hold`][fencedlease.aio.AsyncLeaseManager.hold] for that, or
        await [`AsyncLease.renew`][fencedlease.aio.AsyncLease.renew].

        If a reply is lost (connection reset or timeout after sending), the same acquire is sent
        once more with the same owner token: Redis recognises it and returns the same fencing
        token. If the call is cancelled while an acquire of it may have landed, that owner token
        releases the key before the cancellation propagates (see the module docstring).

        Returns:
            [`AsyncAcquireResult`][fencedlease.aio.AsyncAcquireResult]; ``result.lease`` is None
            when not acquired.

        Raises:
            ValidationError: ``key``, ``ttl_ms``, ``wait_ms`` or ``retry_delay_ms`` out of bounds.
            BackendError: the store failed; never reported as acquired.
            ManagerClosedError: the manager is closed, or was closed while the call waited.
        """
        key, ttl_ms, wait_ms, retry_delay_ms = check_acquire(key, ttl_ms, wait_ms, retry_delay_ms)
        self._check_open()
        return await self._acquire(key, ttl_ms, wait_ms, retry_delay_ms)

    async def _acquire(
        self, key: str, ttl_ms: int, wait_ms: int, retry_delay_ms: int
    ) -> AsyncAcquireResult:
        clock, backend, waiter = self._clock, self._backend, self._release_waiter
        attempt = AcquireAttempt(
            key, ttl_ms, wait_ms, retry_delay_ms, clock,
            fencing_scope=fencing_scope_of(backend, key),
        )  # fmt: skip
        owner_token = attempt.owner_token
        steps = acquire_steps(attempt, waiter.queues)  # the decisions; here only the I/O
        try:
            step = next(steps)
            while True:
                try:
                    if isinstance(step, WaitForRelease):
                        await waiter.wait(key, owner_token, ttl_ms, step.delay_s, step.final)
                        if self._forked:
                            self._check_open()
                        answer: AcquireReply | bool = self._closed
                    else:
                        with marking_sends(attempt.sending):  # the real send, after connecting
                            answer = await backend.acquire(key, owner_token, ttl_ms)
                except BaseException as exc:
                    step = steps.throw(exc)
                else:
                    step = steps.send(answer)
        except StopIteration as stop:
            end: AcquireEnd = stop.value
        except BaseException as exc:
            acquire_ended(self._on_event, key, None, attempt.sent_mono, clock, exc)
            if attempt.uncertain:
                await self._abandon(key, owner_token, exc)
            raise
        acquire_ended(self._on_event, key, end.state, attempt.sent_mono, clock)
        if end.leave_queue:
            self._release_later(key, owner_token)
        if end.state is None:
            return AsyncAcquireResult(key, None, end.holder_ttl_ms)
        return AsyncAcquireResult(key, AsyncLease(end.state, backend, clock))

    # -- the rest ------------------------------------------------------------------------------

    def restore(
        self,
        key: str,
        owner_token: str,
        *,
        ttl_ms: int,
        expires_at: datetime | None = None,
        fencing_token: int | None = None,
    ) -> AsyncLease:
        """Rebuild a lease from values persisted by an earlier process; no I/O.

        Invents nothing: without ``expires_at`` the lease has no local deadline until its first
        [`AsyncLease.renew`][fencedlease.aio.AsyncLease.renew]; without ``fencing_token`` its token
        is None until a renewal learns it from the store. The store still checks ``owner_token`` on
        every renew and release. The restored lease is not renewed in the background.

        Raises:
            ValidationError: ``key``/``owner_token`` not non-empty strings, ``ttl_ms`` out of
                bounds, ``expires_at`` naive, ``fencing_token`` not an int in 1..2**63-1.
        """
        state = restored_state(key, owner_token, ttl_ms, expires_at, fencing_token, self._clock)
        state.fencing_scope = fencing_scope_of(self._backend, key)
        watch(state, self._on_event, self._clock)
        return AsyncLease(state, self._backend, self._clock)

    async def inspect(self, key: str) -> LeaseInfo | None:
        """The lease on ``key`` as the store holds it now, or None when nobody holds it.

        Raises:
            ValidationError: ``key`` is not a non-empty str.
            BackendError: the store failed.
        """
        check_key(key)
        return LeaseInfo.from_reply(key, await self._backend.inspect(key))

    async def force_release(self, key: str) -> bool:
        """Delete the lease on ``key`` whoever holds it; the operator's escape hatch. The fencing
        counter is kept, so the next grant still gets a larger token. Returns whether a lease was
        held.

        Raises:
            ValidationError: ``key`` is not a non-empty str.
            BackendError: the store failed.
        """
        check_key(key)
        return await self._backend.force_release(key)
