"""What the sync face waits with, where the asyncio face uses its event loop: the primitives the
code generated for both faces calls by the same names (the asyncio ones are in
`fencedlease._async.primitives`). A generated module imports ``.primitives`` and gets its
face's.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import inspect
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from fencedlease._core import fork as _fork
from fencedlease._core.clock import Clock
from fencedlease._core.state import LeaseState, release_bound_s, release_wait_more_s
from fencedlease._core.threads import DaemonThreadPool, shutdown_pool
from fencedlease._core.validate import ArgumentTypeError, check_backend

if TYPE_CHECKING:
    from fencedlease._core.backend import LeaseBackend

__all__ = [
    "CALLER",
    "FORK_INERT",
    "LOG_NAME",
    "Background",
    "BodyCanceller",
    "Call",
    "Chores",
    "Detached",
    "Event",
    "FinalReleases",
    "Lock",
    "LostSignal",
    "NodeWorkers",
    "Runner",
    "Slots",
    "Spawns",
    "bounded",
    "call_body",
    "check_lease_backend",
    "close_renewer",
    "close_waiter",
    "current_caller",
    "drop_unused",
    "pause",
    "shield",
    "sleep",
    "waiter_after_fork",
]

T = TypeVar("T")
R = TypeVar("R")


LOG_NAME = "fencedlease"
"""The logger of this face's messages (the asyncio face's is ``fencedlease.aio``)."""


class LostSignal:
    """Set once ``state`` is marked lost, from whichever thread marks it; waited on by any
    thread."""

    __slots__ = ("_event",)

    def __init__(self, state: LeaseState) -> None:
        event = self._event = threading.Event()
        state.add_listener(lambda _: event.set())

    def wait(self, timeout_s: float | None) -> None:
        """Block until set or ``timeout_s`` seconds have passed (None: no bound)."""
        self._event.wait(timeout_s)


STOP_S = 1.0
"""How long `Background.stop` waits for a run still going (it cannot be cancelled: a daemon
thread, it ends at its client's timeouts)."""


class Background:
    """One piece of work at a time off the caller's path (a daemon thread named ``name``):
    `start` runs ``fn()`` unless a run is still going, `stop` waits for a run (`STOP_S` at
    most)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, fn: Callable[[], Any]) -> None:
        """Run ``fn()`` in a thread of its own, unless the last one is still running."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=fn, name=self._name, daemon=True)
                self._thread.start()

    def stop(self) -> None:
        """Wait for a run still going, `STOP_S` at most."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(STOP_S)


class Event(threading.Event):
    """A flag one thread sets and another waits for (`threading.Event`), the wait bounded: the twin
    of the asyncio face's. ``wait(timeout_s)``: whether it is set (None: no bound)."""


def bounded(fn: Callable[[], T], timeout_s: float) -> T:
    """``fn()``'s result, waiting ``timeout_s`` seconds at most: ``fn()`` runs on a daemon
    thread of its own (named ``fencedlease-bounded``; a hung call never keeps the process from
    exiting), which has ended when ``fn()``'s outcome is returned or raised.

    Raises:
        TimeoutError: no result within ``timeout_s`` (the builtin; ``fn()`` cannot be cancelled:
            it goes on to its end, its outcome dropped), or what ``fn()`` raised.
    """
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:  # handed to the waiter, which raises it
            future.set_exception(exc)

    thread = threading.Thread(target=run, name="fencedlease-bounded", daemon=True)
    thread.start()
    try:
        return future.result(timeout_s)
    finally:
        if future.done():
            thread.join()  # ending now (the outcome was its last step): none is left running


def sleep(clock: Clock, seconds: float) -> None:
    """Wait ``seconds`` on ``clock`` (its ``sleep``: a fake clock's moves it)."""
    clock.sleep(seconds)


class NodeWorkers:
    """Runs each node's share of a batch on that node's own worker thread
    (``fencedlease-cluster-<host:port>``), the nodes at once: a node that hangs holds up no other
    node's calls, neither in this batch nor in the next. In a forked child the parent's workers
    are forgotten (`fencedlease._core.fork`) and the child's next batch starts its own. The twin
    of the asyncio face's task per call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workers: dict[str, DaemonThreadPool] = {}
        _fork.register(self)

    def _after_fork_in_child(self) -> None:
        """Forget the parent's workers (their threads do not exist here). No I/O."""
        self._lock = threading.Lock()
        self._workers = {}

    def run(self, calls: Mapping[str, Callable[[], R]], timeout_s: float) -> dict[str, R | None]:
        """Each node's ``call()`` on its worker, at once; its result, or None for a node whose
        call was not done within ``timeout_s`` seconds (a thread cannot be cancelled: it runs on,
        its reply unused).

        Raises:
            Exception: what a call that finished in time raised.
        """
        futures: dict[str, Future[R]] = {
            node: self._worker(node).submit(call) for node, call in calls.items()
        }
        done, _ = wait_futures(futures.values(), timeout=timeout_s)
        return {node: f.result() if f in done else None for node, f in futures.items()}

    def _worker(self, node: str) -> DaemonThreadPool:
        with self._lock:
            pool = self._workers.get(node)
            if pool is None:
                pool = DaemonThreadPool(1, thread_name_prefix=f"fencedlease-cluster-{node}")
                self._workers[node] = pool
            return pool

    def close(self) -> None:
        """Stop the workers (a thread still blocked on a hung node ends at the client's socket
        timeout)."""
        with self._lock:
            workers, self._workers = list(self._workers.values()), {}
        for pool in workers:
            shutdown_pool(pool, time.monotonic())


class Lock:
    """A `threading.Lock`, used with ``with`` around code that does not wait: the twin of the
    asyncio face's, which has nothing to lock."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def pause(seconds: float) -> None:
    """Wait ``seconds`` in real time (`time.sleep`)."""
    time.sleep(seconds)


def shield(step: Callable[[], T]) -> T:
    """``step()``: a thread is not cancelled, so a clean-up needs no shield (the asyncio face's
    runs the step to its end even if the caller is cancelled)."""
    return step()


class Runner:
    """One long-lived run of a function, restarted once it has ended: a daemon thread named
    ``name``. The twin of the asyncio face's task; a thread cannot be cancelled, so `stop` wakes
    it and joins it."""

    __slots__ = ("_name", "_thread")

    def __init__(self, name: str) -> None:
        self._name = name
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        """Whether a run was ever started."""
        return self._thread is not None

    @property
    def running(self) -> bool:
        """Whether the last run is still going."""
        return self._thread is not None and self._thread.is_alive()

    def start(self, fn: Callable[[], None], died: Callable[[], None]) -> None:
        """Start a run of ``fn()`` in a thread of its own; ``died()`` is called (with the
        exception being handled) if it ends on an error, which it re-raises."""

        def run() -> None:
            try:
                fn()
            except BaseException:
                died()
                raise

        self._thread = threading.Thread(target=run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, until: float | None, wake: Callable[[], object]) -> None:
        """Call ``wake()`` (so the run notices it should end; ignored once the interpreter exits
        and no thread can start) and join the run until the monotonic instant ``until`` at most
        (None: no bound)."""
        thread = self._thread
        if thread is None:
            return
        with contextlib.suppress(RuntimeError):
            wake()
        thread.join(None if until is None else max(0.0, until - time.monotonic()))


class Call(Generic[T]):
    """A call `Chores` runs off the caller's path: a future of its pool."""

    __slots__ = ("_future",)

    def __init__(self, future: concurrent.futures.Future[T]) -> None:
        self._future = future

    def done(self) -> bool:
        return self._future.done()

    def cancelled(self) -> bool:
        return self._future.cancelled()

    def unsent(self) -> bool:
        """Whether it ended before it could send anything (withdrawn while still queued)."""
        return self._future.cancelled()

    def failed(self) -> bool:
        """Whether it ended cancelled or on an error."""
        return self._future.cancelled() or self._future.exception() is not None

    def result(self) -> T:
        """Its result, or the error it raised."""
        return self._future.result()

    def withdraw(self) -> bool:
        """Stop it if it has not started (still in the pool's queue: nothing sent): whether it
        was stopped."""
        return self._future.cancel()

    def wait(self, timeout_s: float) -> bool:
        """Block until it ends or ``timeout_s`` seconds have passed; whether it ended."""
        done, _ = concurrent.futures.wait([self._future], timeout=timeout_s)
        return bool(done)

    def on_done(self, fn: Callable[[Call[T]], None]) -> None:
        """Call ``fn(self)`` once it has ended (at once, in this thread, if it has)."""
        self._future.add_done_callback(lambda _: fn(self))


CHORE_THREADS = 4
"""How many threads run a `Chores`' calls at once."""


class Chores:
    """Short calls run off the caller's path, so that a slow one cannot stretch the caller's
    bounded wait: on a pool of `CHORE_THREADS` daemon threads named ``name``, made on the first
    call (the asyncio face's are tasks). `close` shuts the pool down."""

    __slots__ = ("_io", "_lock", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._io: DaemonThreadPool | None = None

    def submit(self, fn: Callable[..., T], *args: Any) -> Call[T]:
        """Queue ``fn(*args)``; its `Call`.

        Raises:
            RuntimeError: the pool is shut down, or the interpreter exits.
        """
        with self._lock:
            if self._io is None:
                self._io = DaemonThreadPool(CHORE_THREADS, thread_name_prefix=self._name)
            return Call(self._io.submit(fn, *args))

    def close(self, until: float | None) -> None:
        """Shut the pool down once the calls queued so far have run, waiting for them until the
        monotonic instant ``until`` at most (None: no bound of its own)."""
        with self._lock:
            io = self._io
        shutdown_pool(io, until)


# --- manager ---

CALLER = "thread"
"""What runs a hold's body on this face, as `NestedHoldError` names it (the asyncio face's:
``"task"``)."""


def current_caller() -> object:
    """The caller's thread or task: here the calling thread's identifier."""
    return threading.get_ident()


def close_renewer(renewer: _ClosingRenewer, until: float) -> int:
    """Close the manager's ``renewer``; how many of its threads still run at the monotonic
    instant ``until``. An adapter: this face's renewer returns that count, the asyncio face's the
    leases it stopped renewing (its task ends once cancelled)."""
    return renewer.close(until)


class _ClosingRenewer(Protocol):
    def close(self, until: float | None = None) -> int: ...


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
        from .renewer import BoundedCalls  # the renewer's module holds it (and imports this one)

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
