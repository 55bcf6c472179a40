"""One ``async with manager.hold(...)`` of [`AsyncLeaseManager`][fencedlease.aio.AsyncLeaseManager]:
the acquire, the renewal, and the loss's cancellation of the body turned into
[`LeaseLostError`][fencedlease.LeaseLostError] (see `fencedlease._async.manager`)."""

from __future__ import annotations

import asyncio
import sys
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Literal, Protocol

from fencedlease._core.clock import Clock
from fencedlease._core.context import AsyncWithOnly
from fencedlease._core.decisions import hold_outcome, hold_releases
from fencedlease._core.errors import BackendError, LeaseNotAcquiredError, NestedHoldError
from fencedlease._core.state import LeaseState
from fencedlease._core.validate import HoldArgs

from .lease import AsyncAcquireResult, AsyncLease
from .renewer import AsyncRenewer

__all__ = ["_Hold"]


class _Manager(Protocol):
    """What a hold uses of its [`AsyncLeaseManager`][fencedlease.aio.AsyncLeaseManager] (a protocol:
    the manager's module imports this one)."""

    _clock: Clock
    _renewer: AsyncRenewer
    _closed: bool
    _refuse_nested: bool
    _holds: set[_Hold]
    _close_task: asyncio.Task[Any] | None
    _close_caller: asyncio.Task[Any] | None

    def _check_open(self) -> None: ...

    async def _acquire(
        self,
        key: str,
        ttl_ms: int,
        wait_ms: int,
        retry_delay_ms: int,
        heartbeat_ms: int | Literal[False] | None = None,
    ) -> AsyncAcquireResult: ...

    async def _release_shielded(self, lease: AsyncLease) -> bool: ...


class _Hold(AsyncWithOnly, AbstractAsyncContextManager[AsyncLease]):
    """One ``async with manager.hold(...)``: acquire, register for renewal, watch for loss, and
    turn the loss's cancellation of the body into [`LeaseLostError`][fencedlease.LeaseLostError].
    Entered once."""

    def __init__(self, manager: _Manager, args: HoldArgs, given: AsyncLease | None = None) -> None:
        self._manager = manager
        self._args = args
        self._given = given  # keep_alive's lease: no acquire
        self._with_what = f"AsyncLeaseManager.{'hold' if given is None else 'keep_alive'}()"
        self.lease: AsyncLease | None = None
        self._entered = False
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cancelling = 0
        self._cancel_requested = False
        self._exiting = False

    async def __aenter__(self) -> AsyncLease:
        if self._entered:
            raise RuntimeError("a hold() can be entered only once")
        self._entered = True
        manager, args = self._manager, self._args
        manager._check_open()
        lease = self._given
        if lease is not None:
            if lease._state.check_deadline(manager._clock.monotonic()):
                raise lease._lost_error()
        else:
            if manager._refuse_nested and self._nested(asyncio.current_task()):
                raise NestedHoldError(args.key, where="task")
            result = await manager._acquire(
                args.key, args.ttl_ms, args.wait_ms, args.retry_delay_ms, args.heartbeat
            )
            lease = result.lease
            if lease is None:
                raise LeaseNotAcquiredError(args.key)
        if manager._closed:  # closed while we acquired: give the key back
            await manager._release_shielded(lease)
            manager._check_open()
        task = asyncio.current_task()
        assert task is not None, "hold() runs inside a task"
        self._task, self._loop = task, asyncio.get_running_loop()
        if sys.version_info >= (3, 11):
            self._cancelling = task.cancelling()
        self.lease = lease
        if args.heartbeat is not False:
            lease._renewer = manager._renewer
            lease._entry = manager._renewer.add(lease._state, args.heartbeat, args.on_renew_error)
        manager._holds.add(self)
        lease._state.add_listener(self._on_lost)
        return lease

    def _nested(self, task: asyncio.Task[Any] | None) -> bool:
        """Whether ``task`` is inside another hold (or keep_alive) of this key by the same
        manager whose lease is held."""
        return any(
            hold._task is task
            and hold.lease is not None
            and hold.lease.key == self._args.key
            and not (hold.lease._state.lost or hold.lease._state.released)
            for hold in self._manager._holds
        )

    def _on_lost(self, _state: LeaseState) -> None:
        # Called wherever the loss was marked: the renewal task, the body itself (lease.lost,
        # renew()), even another thread. The cancel is always posted to the loop, never done
        # inline, so a body that notices the loss itself is not cancelled mid-step.
        loop = self._loop
        if self._exiting or loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            loop.call_soon(self._cancel_body)
        else:
            loop.call_soon_threadsafe(self._cancel_body)

    def _cancel_body(self) -> None:
        task = self._task
        if self._exiting or self._cancel_requested or task is None or task.done():
            return
        self._cancel_requested = True
        task.cancel(f"fencedlease: the lease on {self._args.key!r} was lost")

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._exiting = True
        manager, lease, task = self._manager, self.lease, self._task
        assert lease is not None
        assert task is not None
        manager._holds.discard(self)
        ours = False
        if self._cancel_requested:
            # The cancel was delivered in the block (it was posted while the block was
            # suspended), so it is ours to take back, unless someone else cancelled too.
            if sys.version_info >= (3, 11):
                ours = task.uncancel() <= self._cancelling
            else:
                ours = True
        body_failed = exc is not None and not (ours and isinstance(exc, asyncio.CancelledError))
        state = lease._state
        release_error = None
        if hold_releases(state, manager._closed, manager._clock.monotonic()):
            try:
                await manager._release_shielded(lease)
            except BackendError as error:
                release_error = error
        teardown = manager._close_task
        if teardown is not None and manager._close_caller is task and not teardown.done():
            # close() was awaited in this body and cancelled with it: the block ends once the
            # teardown has (a program that returns right after would cancel it half-way).
            await asyncio.wait({teardown})
        outcome = hold_outcome(lease, body_failed, release_error)
        if outcome is None:
            return
        if release_error is not None and outcome is release_error:
            raise release_error
        if release_error is not None or exc is None:
            raise outcome from None
        raise outcome from exc  # the loss's cancellation of the body
