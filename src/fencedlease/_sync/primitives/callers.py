"""What a lease manager's caller is on this face, beside the waiting primitives: the caller's
thread or task, the calls a manager runs off its path (`Spawns`), the bounded release that
ends a hold (`FinalReleases`), how a body is cancelled on loss (`BodyCanceller`), and the
few checks and closings whose form differs by face. Written by hand on both faces (the
asyncio face's module of the same name is its twin).
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from fencedlease._core.clock import Clock
from fencedlease._core.state import LeaseState, release_bound_s, release_wait_more_s
from fencedlease._core.threads import BoundedCalls, DaemonThreadPool, shutdown_pool
from fencedlease._core.validate import ArgumentTypeError, check_backend

if TYPE_CHECKING:
    from fencedlease._core.backend import LeaseBackend

from .waiting import LOG_NAME, Call

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


CALLER = "thread"
"""What runs a hold's body on this face, as `NestedHoldError` names it (the asyncio face's:
``"task"``)."""


class _Caller:
    """A thread as the owner of its holds: one object for the thread's life, never reused."""

    __slots__ = ("pid",)

    def __init__(self) -> None:
        self.pid = os.getpid()


_callers = threading.local()


def current_caller() -> object:
    """The caller's thread or task: here a token of the calling thread's own. Not its
    identifier: a later thread may get a finished one's, and a forked child's thread has its
    parent's; the token is made again in the child (its holds are not the parent's)."""
    caller: _Caller | None = getattr(_callers, "caller", None)
    if caller is None or caller.pid != os.getpid():
        caller = _callers.caller = _Caller()
    return caller


class _Releasable(Protocol):
    """A lease as `FinalReleases` sees it."""

    @property
    def _state(self) -> LeaseState: ...

    def release(self) -> bool: ...

    def _release_on(self, store: Any) -> bool: ...


class FinalReleases:
    """The release that ends a hold, bounded: it waits `release_bound_s`, and on while renewals
    still move the lease's deadline (`release_wait_more_s`); then the lease lapses at its TTL. It
    runs on a worker thread (``fencedlease-release``) the caller waits for, or on the caller's
    own thread on a connection of the manager's where ``caller`` (a
    `fencedlease._redis.caller.CallerReleases`, or None) has one ready. The asyncio face's runs
    in a task, cancelled at the bound."""

    __slots__ = ("_backend", "caller", "workers")

    def __init__(self, backend: object, caller: Any) -> None:
        self._backend = cast("LeaseBackend", backend)
        self.workers = BoundedCalls("fencedlease-release")
        self.caller = caller

    def release(self, lease: _Releasable, clock: Clock) -> bool:
        """``lease.release()``'s reply, within the bound.

        Raises:
            BackendError: the store failed, or did not answer in time (``timed_out``).
        """
        state = lease._state
        what = f"release {state.key!r}"

        def more_s() -> float | None:
            return release_wait_more_s(state, clock.monotonic())

        caller = self.caller
        conn = caller.take() if caller is not None else None
        if caller is None or conn is None:
            return self.workers.run(
                lease.release, release_bound_s(state, clock.monotonic()), what, more_s
            )
        # One give-up instant for the whole release: the caller's read, then the worker's.
        started = clock.monotonic()
        give_up = started + release_bound_s(state, started)
        backend = self._backend

        def on_worker(key: str, owner_token: str) -> bool:
            left = max(0.0, give_up - clock.monotonic())
            return self.workers.run(lambda: backend.release(key, owner_token), left, what, more_s)

        return lease._release_on(caller.release(conn, give_up, clock.monotonic, more_s, on_worker))

    def close(self, until: float) -> int:
        """Stop the worker threads and the caller's connections, joining them until the monotonic
        instant ``until`` at most; how many threads still run."""
        left = self.workers.close(until)
        return left + (self.caller.close(until) if self.caller is not None else 0)

    def _after_fork_in_child(self) -> None:
        """Forget the parent's threads and connections (no I/O)."""
        self.workers._after_fork_in_child()
        if self.caller is not None:
            self.caller._after_fork_in_child()


Slots = threading.Semaphore
"""At most so many callers at once, entered with ``with`` (the asyncio face's: an
`asyncio.Semaphore`)."""


class Spawns:
    """The calls a manager runs off its caller's path and ``close()`` waits for (releases,
    clean-ups): on a pool of at most ``workers`` daemon threads named ``name``, made on the first
    call. The asyncio face's are tasks."""

    __slots__ = ("_calls", "_lock", "_name", "_pool", "_workers")

    def __init__(self, name: str, workers: int) -> None:
        self._name, self._workers = name, workers
        self._lock = threading.Lock()
        self._pool: DaemonThreadPool | None = None
        self._calls: set[Call[Any]] = set()

    def __bool__(self) -> bool:
        """Whether a call is still running."""
        with self._lock:
            return bool(self._calls)

    def spawn(self, name: str, fn: Callable[..., T], *args: Any) -> Call[T]:
        """Queue ``fn(*args)`` (``name`` says what it is, for the asyncio face's task); its
        `Call`.

        Raises:
            RuntimeError: the interpreter exits (no thread can start).
        """
        with self._lock:
            if self._pool is None:
                self._pool = DaemonThreadPool(self._workers, thread_name_prefix=self._name)
            call = Call(self._pool.submit(fn, *args))
            self._calls.add(call)
        call.on_done(lambda done: self._done(name, done))
        return call

    def _done(self, name: str, call: Call[Any]) -> None:
        with self._lock:
            self._calls.discard(call)
        if call.failed() and not call.cancelled():
            # The caller that waited for it (if any) got the error; this is for the rest.
            error = call._future.exception()
            logging.getLogger(LOG_NAME).debug("%s failed: %r", name, error)

    def shielded(self, name: str, what: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, here on the caller's thread: a thread is not cancelled (the asyncio face's
        runs it in a task named ``name`` that cancelling the caller does not stop, ``what`` naming
        it in its error).

        Raises:
            BackendError: as ``fn`` (the asyncio face's also when ``close()`` stopped it).
        """
        return fn(*args)

    def finish(self, until: float, releases: Collection[Call[Any]]) -> tuple[set[Call[Any]], int]:
        """Wait for the calls until the monotonic instant ``until``, then stop the pool (a thread
        cannot be cancelled: a call still running ends at its client's timeouts). The calls late,
        and how many of the pool's threads still run."""
        with self._lock:
            calls, pool = list(self._calls), self._pool
        if calls:
            wait_futures([c._future for c in calls], timeout=max(0.0, until - time.monotonic()))
        late = {call for call in calls if not call.done()}
        return late, shutdown_pool(pool, until)

    def _after_fork_in_child(self) -> None:
        """Forget the parent's threads (they do not exist here)."""
        self._lock = threading.Lock()
        self._pool, self._calls = None, set()


class BodyCanceller:
    """Would cancel the body of a hold when its lease is lost: a thread is not interrupted (its
    body reads ``lease.lost``), so this does nothing. The asyncio face's cancels the task."""

    __slots__ = ()

    def __init__(self, message: str) -> None:
        pass

    def on_lost(self, _state: LeaseState) -> None:
        """A loss listener: nothing to do."""

    def taken_back(self, exc: BaseException | None) -> bool:
        """Whether ``exc`` is this canceller's own cancellation: never."""
        return False

    def delivered(self, exc: BaseException | None) -> bool:
        """Whether ``exc`` is this canceller's cancellation passing through: never."""
        return False


class Detached(Generic[T]):
    """A step run to its end whatever happens to the caller that started it: here at once, on
    the caller's thread (a thread is not cancelled). The asyncio face's runs it in a task of its
    own."""

    __slots__ = ("_future",)

    def __init__(self, name: str, step: Callable[[], T]) -> None:
        self._future: Future[T] = Future()
        try:
            self._future.set_result(step())
        except BaseException as exc:  # handed to `result`, which raises it
            self._future.set_exception(exc)

    def done(self) -> bool:
        return True

    def result(self) -> T:
        """The step's result (or its error)."""
        return self._future.result()

    def wait(self) -> None:
        """Nothing to wait for: the step has ended."""


FORK_INERT = False
"""Whether a manager inherited through ``os.fork`` is inert in the child: here no (fresh threads
renew the child's own leases); the asyncio face's is (its event loop does not survive a fork)."""


def check_lease_backend(client: object, sync_classes: tuple[type, ...]) -> None:
    """``client`` (not this face's redis-py client) must be a lease backend of this face
    (``sync_classes`` are the asyncio face's to refuse).

    Raises:
        ValidationError: naming ``client``: not a backend; an `ArgumentTypeError` (also a
            ``TypeError``) for a client or backend of the asyncio face.
    """
    check_backend(client, asyncio=False)


def drop_unused(backend: Any) -> None:
    """Close a backend made from a URL for a manager that could not be made (the asyncio face's
    has nothing open yet)."""
    backend.close()


def call_body(fn: Callable[[Any], T], lease: object) -> T:
    """``fn(lease)``: ``with_lease``'s body.

    Raises:
        ValidationError: (an `ArgumentTypeError`, also a ``TypeError``) ``fn(lease)`` returned
            an awaitable, which this face cannot wait for (it is closed, not left unawaited).
    """
    value = fn(lease)
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # never awaited: close it rather than leave a warning behind
        raise ArgumentTypeError(
            "fn",
            "fn returned an awaitable that LeaseManager.with_lease cannot await; use"
            " fencedlease.aio.AsyncLeaseManager.with_lease",
        )
    return value


def close_waiter(waiter: _ClosingWaiter, until: float) -> None:
    """Close the manager's release waiter, waiting until the monotonic instant ``until`` at most
    (the asyncio face's ``aclose()`` takes no bound)."""
    waiter.close(until)


class _ClosingWaiter(Protocol):
    def close(self, until: float | None = None) -> None: ...

    def _after_fork_in_child(self) -> None: ...


def waiter_after_fork(waiter: _ClosingWaiter) -> None:
    """In a forked child: the release waiter forgets the parent's threads and locks (no I/O)."""
    waiter._after_fork_in_child()
