# GENERATED from src/fencedlease/_async/hold.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""One ``manager.hold(...)`` block (or ``keep_alive``) of
[`LeaseManager`][fencedlease.LeaseManager]: the acquire, the renewal, the release
at its end and its outcome (`hold_outcome`); on the asyncio face, the loss's cancellation of the
body turned into [`LeaseLostError`][fencedlease.LeaseLostError] (see
`fencedlease._sync.manager`)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Literal, Protocol

from fencedlease._core.clock import Clock
from fencedlease._core.context import WithOnly
from fencedlease._core.decisions import hold_outcome, hold_releases
from fencedlease._core.errors import (
    BackendError,
    LeaseNotAcquiredError,
    ManagerClosedError,
    NestedHoldError,
)
from fencedlease._core.protocol import PLAIN_GRANT, GrantExtras
from fencedlease._core.reentry import NOT_REENTRANT, Reentry, enclosing, nest, unnest
from fencedlease._core.validate import HoldArgs

from .lease import AcquireResult, Lease
from .primitives import CALLER, BodyCanceller, Detached, Lock, current_caller
from .renewer import Renewer

__all__ = ["_Hold"]


class _Manager(Protocol):
    """What a hold uses of its [`LeaseManager`][fencedlease.LeaseManager] (a protocol:
    the manager's module imports this one)."""

    _clock: Clock
    _renewer: Renewer
    _closed: bool
    _refuse_nested: bool
    _lock: Lock
    _holds: set[_Hold]
    _close_task: Detached[Any] | None
    _close_caller: object

    def _check_open(self) -> None: ...

    def _acquire(
        self,
        key: str,
        ttl_ms: int,
        wait_ms: int,
        retry_delay_ms: int,
        heartbeat_ms: int | Literal[False] | None = None,
        extras: GrantExtras = PLAIN_GRANT,
    ) -> AcquireResult: ...

    def _release_bounded(self, lease: Lease) -> bool: ...


class _Hold(WithOnly, AbstractContextManager[Lease]):
    """One ``manager.hold(...)`` block: acquire, register for renewal, watch for loss, release
    at the end. Entered once."""

    def __init__(
        self,
        manager: _Manager,
        args: HoldArgs,
        given: Lease | None = None,
        reentry: Reentry = NOT_REENTRANT,
    ) -> None:
        self._manager = manager
        self._args = args
        self._given = given  # keep_alive's lease: no acquire
        self._reentry = reentry
        self._outer: _Hold | None = None  # the block a reentrant hold nests in
        self.depth = 1  # this block and the reentrant holds nested in it (`_core.reentry`)
        self._with_what = f"LeaseManager.{'hold' if given is None else 'keep_alive'}()"
        self.lease: Lease | None = None
        self.caller: object = None  # the caller's thread or task, once entered
        self._entered = False
        self._canceller: BodyCanceller | None = None

    def __enter__(self) -> Lease:
        if self._entered:
            raise RuntimeError("a hold() can be entered only once")
        self._entered = True
        manager, args = self._manager, self._args
        manager._check_open()
        caller = current_caller()
        lease = self._given
        if lease is not None:
            if lease._state.check_deadline(manager._clock.monotonic()):
                raise lease._lost_error()
        else:
            outer = self._enclosing(caller) if manager._refuse_nested else None
            if outer is not None and self._reentry.reentrant:
                nest(outer, self._reentry, manager._clock.monotonic())
                self.caller, self._outer, self.lease = caller, outer, outer.lease
                assert outer.lease is not None
                return outer.lease  # the outer block renews, watches and releases it
            if outer is not None and not outer.lease_lost():
                raise NestedHoldError(args.key, where=CALLER)
            result = manager._acquire(
                args.key,
                args.ttl_ms,
                args.wait_ms,
                args.retry_delay_ms,
                args.heartbeat,
                args.extras,
            )
            lease = result.lease
            if lease is None:
                raise LeaseNotAcquiredError(args.key)
        self.caller, self.lease = caller, lease
        with manager._lock:
            closed = manager._closed
            if not closed:
                manager._holds.add(self)
        if closed:  # closed while we acquired: never leave the lease held for nobody
            manager._release_bounded(lease)
            raise ManagerClosedError()
        if args.heartbeat is not False:
            try:
                lease._entry = manager._renewer.add(
                    lease._state, args.heartbeat, args.on_renew_error
                )
            except BaseException:
                with manager._lock:
                    manager._holds.discard(self)
                manager._release_bounded(lease)
                raise
            lease._renewer = manager._renewer
        self._canceller = canceller = BodyCanceller(
            f"fencedlease: the lease on {args.key!r} was lost"
        )
        lease._state.add_listener(canceller.on_lost)
        return lease

    def _enclosing(self, caller: object) -> _Hold | None:
        """The hold (or keep_alive) of this key by the same manager that ``caller`` is inside,
        its lease not released (see `enclosing`)."""
        with self._manager._lock:
            return enclosing(self._manager._holds, self._args.key, caller)

    def lease_lost(self) -> bool:
        """Whether this block's lease is lost (a plain hold inside it acquires anew)."""
        return self.lease is not None and self.lease._state.lost

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        manager, lease, canceller = self._manager, self.lease, self._canceller
        if self._outer is not None:  # a reentrant hold: nothing to release
            nested = unnest(self._outer, exc, manager._clock.monotonic())
            if nested is not None:
                raise nested from exc
            return
        assert lease is not None
        assert canceller is not None
        ours = canceller.taken_back(exc)
        body_failed = exc is not None and not ours
        with manager._lock:
            manager._holds.discard(self)
            closed = manager._closed
        release_error = None
        if hold_releases(lease._state, closed, manager._clock.monotonic()):
            try:
                manager._release_bounded(lease)
            except BackendError as error:
                release_error = error
        teardown = manager._close_task
        if teardown is not None and manager._close_caller == self.caller and not teardown.done():
            # close() was called in this body and cancelled with it: the block ends once the
            # teardown has (a program that returns right after would cancel it half-way).
            teardown.wait()
        outcome = hold_outcome(lease, body_failed, release_error)
        if outcome is None:
            return
        if release_error is not None and outcome is release_error:
            raise release_error
        if release_error is not None or exc is None:
            raise outcome from None
        raise outcome from exc  # the loss's cancellation of the body
