"""The acquire loop of [`AsyncLeaseManager`][fencedlease.aio.AsyncLeaseManager], the same steps
on both faces: each attempt's decision is `fencedlease._core.decisions.acquire_steps`'s, the
waiting for a release is the release waiter's, and what is here is the I/O between them.

Two steps differ by face and are the manager's own: `_AsyncAcquireLoop._abandon` (what an acquire
that failed or was interrupted may hold) and `_AsyncAcquireLoop._release_later` (the release of a
hand-off queue's grant nobody waits for any more).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Literal

from fencedlease._core.attempt import AcquireAttempt
from fencedlease._core.backend import AsyncLeaseBackend, AsyncQueueingBackend, fencing_scope_of
from fencedlease._core.clock import Clock, marking_sends
from fencedlease._core.decisions import AcquireEnd, WaitForRelease, acquire_steps
from fencedlease._core.errors import ManagerClosedError
from fencedlease._core.events import EventHook, acquire_ended, wait_ended
from fencedlease._core.protocol import PLAIN_GRANT, AcquireReply, GrantExtras
from fencedlease._handoff.waiters import AsyncReleaseWaiter, WaitRequest

from .lease import AsyncAcquireResult, AsyncLease

__all__ = ["_AsyncAcquireLoop"]


class _AsyncAcquireLoop(ABC):
    """A base of the manager: its acquire loop, and whether it is open."""

    _backend: AsyncLeaseBackend
    _clock: Clock
    _release_waiter: AsyncReleaseWaiter
    _closed: bool
    _forked: bool
    _on_event: EventHook | None
    # The handle a grant is given as (a semaphore's manager gives its slots their own).
    _lease_class: type[AsyncLease] = AsyncLease

    @abstractmethod
    async def _abandon(self, key: str, owner_token: str, exc: BaseException) -> None:
        """Release what an acquire that raised ``exc`` may hold under ``owner_token``."""

    @abstractmethod
    def _release_later(self, key: str, owner_token: str) -> None:
        """Release ``owner_token``'s hold on ``key`` in the background (the call keeps its time
        bound; ``close()`` waits for it)."""

    def _release_late(self, key: str, owner_token: str) -> None:
        """`_release_later` for a queueing command that landed after its call ended (see
        `fencedlease._handoff.LateQueueing`); nothing once the manager is closed (its client is
        closed, and the listener that gave a waiter its whole ttl_ms is gone)."""
        if not self._closed:
            self._release_later(key, owner_token)

    def _check_open(self) -> None:
        if self._forked:
            raise ManagerClosedError(
                "this lease manager belongs to the parent process (fork): make a new one here"
            )
        if self._closed:
            raise ManagerClosedError()

    async def _acquire(
        self,
        key: str,
        ttl_ms: int,
        wait_ms: int,
        retry_delay_ms: int,
        heartbeat_ms: int | Literal[False] | None = None,
        extras: GrantExtras = PLAIN_GRANT,
    ) -> AsyncAcquireResult:
        """The acquire loop; ``heartbeat_ms``: how often the caller will renew the lease (None or
        False: ``ttl_ms // 4``), which a grant taken from a hand-off message must leave twice;
        ``extras``: what the grant stores beside the lease (given to the backend's acquire as
        ``extras`` when it is not plain, see `fencedlease._core.backend`)."""
        clock, backend, waiter = self._clock, self._backend, self._release_waiter
        # Only a grant that stores something goes to acquire_with_extras (a backend may lack it).
        stored = None if extras.plain else extras
        grants: Any = backend
        attempt = AcquireAttempt(
            key, ttl_ms, wait_ms, retry_delay_ms, clock,
            fencing_scope=fencing_scope_of(backend, key), heartbeat_ms=heartbeat_ms or None,
        )  # fmt: skip
        owner_token = attempt.owner_token
        steps = acquire_steps(attempt, waiter.queues)  # the decisions; here only the I/O
        waited = False  # a grant after a wait in the hand-off queue was handed over
        answer: AcquireReply | bool = False
        queued = registered = False  # the last acquire queued the caller; one ever did
        holds = False  # the call ends with a lease under owner_token
        try:
            step = next(steps)
            while True:
                try:
                    if isinstance(step, WaitForRelease):
                        request = WaitRequest(
                            key, owner_token, ttl_ms, step.delay_s, step.final, queued
                        )
                        began = clock.monotonic()
                        grant = await waiter.wait(request)
                        wait_ended(self._on_event, key, owner_token, began, clock)
                        waited = attempt.queued
                        if self._forked:
                            self._check_open()
                        if grant and stored is not None and not self._closed:
                            # A grant taken from a hand-off message stored no extras: the claim
                            # (the store's "already ours") writes them with the lease.
                            with marking_sends(attempt.sending):
                                grant = await grants.acquire_with_extras(
                                    key, owner_token, ttl_ms, stored
                                )
                        answer = self._closed or grant or False
                    else:
                        queue: tuple[str, ...] | None = None
                        if step.wait_ms:  # the Redis hand-off's arguments, or None
                            queue = waiter.queue_args(key, owner_token, step.wait_ms, step.final)
                        elif step.leave:  # or the arguments that take it out when refused
                            queue = waiter.leave_args(key, owner_token)
                            attempt.leaving = queue is not None
                        queued = queue is not None and not attempt.leaving
                        registered = registered or queued
                        attempt.queued = attempt.queued or queued  # a release may grant it now
                        with marking_sends(attempt.sending):  # the real send, after connecting
                            if queue is None and stored is None:
                                answer = await backend.acquire(key, owner_token, ttl_ms)
                            elif queue is None:
                                answer = await grants.acquire_with_extras(
                                    key, owner_token, ttl_ms, stored
                                )
                            elif isinstance(backend, AsyncQueueingBackend) and stored is None:
                                # queued in the same script when refused
                                answer = await backend.acquire(key, owner_token, ttl_ms, queue)
                            elif isinstance(backend, AsyncQueueingBackend):
                                answer = await grants.acquire_with_extras(
                                    key, owner_token, ttl_ms, stored, queue
                                )
                            else:  # only a queueing backend's own waiter makes a queue
                                raise TypeError(
                                    f"{type(backend).__name__}: a release waiter queued the"
                                    " caller, but the backend's acquire takes no queue"
                                )
                except BaseException as exc:
                    step = steps.throw(exc)
                else:
                    step = steps.send(answer)
        except StopIteration as stop:
            end: AcquireEnd = stop.value
            holds = end.state is not None
        except BaseException as exc:
            acquire_ended(self._on_event, key, None, attempt.sent_mono, clock, exc)
            if attempt.uncertain:
                await self._abandon(key, owner_token, exc)
            raise
        finally:
            if registered:
                waiter.forget(key, owner_token)
            if waiter.queues:  # a queueing command still out may land after this call
                waiter.ended(key, owner_token, holds, lambda: self._release_late(key, owner_token))
        handed = waited and isinstance(answer, AcquireReply) and answer.retried
        acquire_ended(self._on_event, key, end.state, attempt.sent_mono, clock, handed=handed)
        if end.leave_queue:
            self._release_later(key, owner_token)
        if end.state is None:
            return AsyncAcquireResult(key, None, end.holder_ttl_ms)
        return AsyncAcquireResult(key, self._lease_class(end.state, backend, clock))
