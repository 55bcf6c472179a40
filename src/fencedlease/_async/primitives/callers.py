"""What a lease manager's caller is on this face, beside the waiting primitives: the caller's
thread or task, the calls a manager runs off its path (`Spawns`), the bounded release that
ends a hold (`FinalReleases`), how a body is cancelled on loss (`BodyCanceller`), and the
few checks and closings whose form differs by face. Written by hand on both faces (the
sync face's module of the same name is its twin).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Generic, Protocol, TypeVar

from fencedlease._core.clock import Clock
from fencedlease._core.errors import BackendError, no_reply
from fencedlease._core.state import LeaseState, release_bound_s, release_wait_more_s
from fencedlease._core.validate import ArgumentTypeError, check_backend

from .waiting import LOG_NAME, Call, retrieve

T = TypeVar("T")

__all__ = [
    "CALLER",
    "FORK_INERT",
    "BodyCanceller",
    "Detached",
    "FinalReleases",
    "Slots",
    "Spawns",
    "call_body",
    "check_lease_backend",
    "close_waiter",
    "current_caller",
    "drop_unused",
    "waiter_after_fork",
]


CALLER = "task"
"""What runs a hold's body on this face, as `NestedHoldError` names it (the sync face's:
``"thread"``)."""


def current_caller() -> object:
    """The caller's thread or task: here the running task (None outside one)."""
    return asyncio.current_task()


class _Releasable(Protocol):
    """A lease as `FinalReleases` sees it."""

    @property
    def _state(self) -> LeaseState: ...

    async def release(self) -> bool: ...


class FinalReleases:
    """The release that ends a hold, bounded: it waits `release_bound_s`, and on while renewals
    still move the lease's deadline (`release_wait_more_s`); then the release is cancelled and
    the lease lapses at its TTL. The sync face's runs on a worker thread (or on the caller's own,
    on a connection of the manager's, for a plain Redis). ``backend`` and ``caller`` are the
    sync face's."""

    __slots__ = ()

    def __init__(self, backend: object, caller: object) -> None:
        pass

    async def release(self, lease: _Releasable, clock: Clock) -> bool:
        """``lease.release()``'s reply, within the bound.

        Raises:
            BackendError: the store failed, or did not answer in time (``timed_out``).
        """
        state = lease._state
        release = asyncio.ensure_future(lease.release())
        waited, wait = 0.0, release_bound_s(state, clock.monotonic())
        try:
            while True:
                done, _ = await asyncio.wait((release,), timeout=wait)
                if done:
                    return release.result()
                waited += wait
                more = release_wait_more_s(state, clock.monotonic())
                if more is None:
                    break
                wait = more
        finally:
            if not release.done():
                release.cancel()
                with contextlib.suppress(asyncio.CancelledError, BackendError):
                    await release
        raise no_reply(f"release {state.key!r}", waited)

    def close(self, until: float) -> int:
        """Nothing of its own to stop (its releases are tasks of the manager's `Spawns`)."""
        return 0

    def _after_fork_in_child(self) -> None:
        """Nothing to forget."""


Slots = asyncio.Semaphore
"""At most so many callers at once, entered with ``async with`` (the sync face's: a
`threading.Semaphore`)."""


class Spawns:
    """The calls a manager runs off its caller's path and ``close()`` waits for (releases,
    clean-ups): each a task of the running loop, named by the call. The sync face's run on a pool
    of at most ``workers`` daemon threads named ``name``."""

    __slots__ = ("_calls",)

    def __init__(self, name: str, workers: int) -> None:
        self._calls: dict[asyncio.Task[Any], Call[Any]] = {}

    def __bool__(self) -> bool:
        """Whether a call is still running."""
        return bool(self._calls)

    def spawn(self, name: str, fn: Callable[..., Awaitable[T]], *args: Any) -> Call[T]:
        """Start ``fn(*args)`` as a task named ``name``; its `Call`.

        Raises:
            RuntimeError: no running loop (a coroutine closed by the garbage collector).
        """

        async def run() -> T:
            return await fn(*args)

        task = asyncio.get_running_loop().create_task(run(), name=name)
        call = self._calls[task] = Call(task)
        task.add_done_callback(self._done)
        return call

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._calls.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            # The caller that awaited it (if still there) got the error; this is for the rest.
            logging.getLogger(LOG_NAME).debug("%s failed: %r", task.get_name(), task.exception())

    async def shielded(
        self, name: str, what: str, fn: Callable[..., Awaitable[T]], *args: Any
    ) -> T:
        """``fn(*args)`` run as a spawned call (``what`` names it in an error) that cancelling the
        caller does not stop (the sync
        face's runs it on the caller's thread: a thread is not cancelled). A cancellation of the
        caller still propagates.

        Raises:
            BackendError: ``close()`` stopped the call at its bound.
        """
        call = self.spawn(name, fn, *args)
        try:
            return await asyncio.shield(call._task)
        except asyncio.CancelledError:
            if not call.cancelled():
                raise  # the caller was cancelled
            current = asyncio.current_task()
            if current is not None and sys.version_info >= (3, 11) and current.cancelling():
                raise
            raise BackendError(f"{what}: stopped by close(); the lease lapses at its ttl") from None

    async def finish(
        self, until: float, releases: Collection[Call[Any]]
    ) -> tuple[set[Call[Any]], int]:
        """Wait for the calls until the monotonic instant ``until``, then cancel those still
        running (and wait for them to end). The calls late, and how many of them are not among
        ``releases`` (clean-ups cancelled at the bound)."""
        while self._calls and (left := until - time.monotonic()) > 0:
            await asyncio.wait(set(self._calls), timeout=left)
        late = dict(self._calls)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(set(late))
        calls = set(late.values())
        return calls, len(calls - set(releases))

    def _after_fork_in_child(self) -> None:
        """Forget the parent's tasks without touching them."""
        self._calls = {}


class BodyCanceller:
    """Cancels the body of a hold when its lease is lost: the task that made it (inside the
    hold's entry), as `asyncio.timeout` cancels its block, the cancel posted to the loop, never
    made inline, so a body that notices the loss itself is not cancelled mid-step. `taken_back`
    tells that cancellation apart from one from elsewhere (``Task.uncancel`` on Python 3.11+).
    The sync face's thread is not interrupted (its body reads ``lease.lost``): its twin does
    nothing."""

    __slots__ = ("_cancelling", "_exiting", "_loop", "_message", "_requested", "_task")

    def __init__(self, message: str) -> None:
        task = asyncio.current_task()
        assert task is not None, "a hold runs inside a task"
        self._task, self._loop = task, asyncio.get_running_loop()
        self._cancelling = 0
        if sys.version_info >= (3, 11):
            self._cancelling = task.cancelling()
        self._message = message
        self._requested = False
        self._exiting = False

    def on_lost(self, _state: LeaseState) -> None:
        """A loss listener: called wherever the loss was marked (the renewal task, the body
        itself, another thread)."""
        loop = self._loop
        if self._exiting or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            loop.call_soon(self._cancel)
        else:
            loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        task = self._task
        if self._exiting or self._requested or task.done():
            return
        self._requested = True
        task.cancel(self._message)

    def taken_back(self, exc: BaseException | None) -> bool:
        """Stop cancelling (the body has ended); whether ``exc`` is this canceller's own
        cancellation, taken back, rather than the body's outcome."""
        self._exiting = True
        if not self._requested:
            return False
        # The cancel was delivered in the block (posted while it was suspended), so it is ours
        # to take back, unless someone else cancelled too.
        ours = True
        if sys.version_info >= (3, 11):
            ours = self._task.uncancel() <= self._cancelling
        return ours and isinstance(exc, asyncio.CancelledError)

    def delivered(self, exc: BaseException | None) -> bool:
        """Whether ``exc`` is this canceller's cancellation passing through a nested block of
        the hold (left for `taken_back` to take back): not when someone else cancelled too."""
        if not (self._requested and isinstance(exc, asyncio.CancelledError)):
            return False
        if sys.version_info >= (3, 11):
            return self._task.cancelling() <= self._cancelling + 1
        return True


class Detached(Generic[T]):
    """A step run to its end in a task of its own (named ``name``), whatever happens to the
    caller that started it: awaited through `asyncio.shield`. The sync face's runs it at once on
    the caller's thread."""

    __slots__ = ("_task",)

    def __init__(self, name: str, step: Callable[[], Awaitable[T]]) -> None:
        async def run() -> T:
            return await step()

        self._task = asyncio.get_running_loop().create_task(run(), name=name)
        self._task.add_done_callback(retrieve)  # a caller cancelled meanwhile never sees it

    def done(self) -> bool:
        return self._task.done()

    async def result(self) -> T:
        """The step's result (or its error); cancelling the caller does not stop the step."""
        return await asyncio.shield(self._task)

    async def wait(self) -> None:
        """Wait until the step has ended."""
        await asyncio.wait({self._task})


FORK_INERT = True
"""Whether a manager inherited through ``os.fork`` is inert in the child: here yes (its event
loop and connections do not survive a fork); the sync face's goes on with fresh threads."""


def check_lease_backend(client: object, sync_classes: tuple[type, ...]) -> None:
    """``client`` (not this face's redis-py client) must be a lease backend of this face, not one
    of ``sync_classes`` (the library's sync backends).

    Raises:
        ValidationError: naming ``client``: not a backend; an `ArgumentTypeError` (also a
            ``TypeError``) for a client or backend of the sync face.
    """
    if type(client).__module__.startswith("redis."):  # this face's clients were told apart
        raise ArgumentTypeError(
            "client",
            "AsyncLeaseManager needs a redis.asyncio.Redis; a redis.Redis goes to LeaseManager",
        )
    check_backend(client, asyncio=True, sync_classes=sync_classes)


def drop_unused(backend: object) -> None:
    """Give up a backend made from a URL for a manager that could not be made: nothing to close
    here (it opens its connections on its first command); the sync face's closes it."""


async def call_body(fn: Callable[[Any], Awaitable[T]], lease: object) -> T:
    """``fn(lease)`` awaited: ``with_lease``'s body.

    Raises:
        ValidationError: (an `ArgumentTypeError`, also a ``TypeError``) ``fn(lease)`` returned
            no awaitable: a sync function, which goes to the sync face.
    """
    pending = fn(lease)
    if not inspect.isawaitable(pending):
        raise ArgumentTypeError(
            "fn",
            f"fn must be an async function (fn(lease) returned {type(pending).__name__}, not an"
            " awaitable); a sync function goes to LeaseManager.with_lease",
        )
    return await pending


async def close_waiter(waiter: _ClosingWaiter, until: float) -> None:
    """Close the manager's release waiter (an adapter: this face's ``aclose()`` takes no bound,
    a backend's own waiter included; the sync face's ``close(until)`` does)."""
    await waiter.aclose()


class _ClosingWaiter(Protocol):
    async def aclose(self) -> None: ...


def waiter_after_fork(waiter: object) -> None:
    """In a forked child: nothing of the release waiter's is touched here (its tasks and
    connections are the parent's loop's); the sync face's forgets its threads."""
