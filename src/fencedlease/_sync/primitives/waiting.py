"""What the sync face waits with, where the asyncio face uses its event loop: the primitives the
code generated for both faces calls by the same names (the asyncio ones are in
`fencedlease._async.primitives`). A generated module imports ``.primitives`` and gets its
face's.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from fencedlease._core import fork as _fork
from fencedlease._core.clock import Clock
from fencedlease._core.state import LeaseState
from fencedlease._core.threads import DaemonThreadPool, shutdown_pool

if TYPE_CHECKING:
    pass

__all__ = [
    "LOG_NAME",
    "Background",
    "Call",
    "Chores",
    "Event",
    "Lock",
    "LostSignal",
    "NodeWorkers",
    "Runner",
    "abandon",
    "bounded",
    "is_cancellation",
    "shield",
    "sleep",
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
        return self.run_until(calls, timeout_s, None)

    def run_until(
        self,
        calls: Mapping[str, Callable[[], R]],
        timeout_s: float,
        enough: Callable[[dict[str, R]], bool] | None,
    ) -> dict[str, R | None]:
        """`run`, ended early once ``enough(results)`` (the results so far, by node) is true:
        the calls still running then count as not done in time (their threads run on).

        Raises:
            Exception: what a call that finished in time raised.
        """
        futures: dict[str, Future[R]] = {
            node: self._worker(node).submit(call) for node, call in calls.items()
        }
        names = {future: node for node, future in futures.items()}
        give_up = time.monotonic() + timeout_s
        pending: set[Future[R]] = set(futures.values())
        results: dict[str, R] = {}
        while pending:
            left = give_up - time.monotonic()
            if left <= 0:
                break
            done, pending = wait_futures(
                pending, timeout=left, return_when=concurrent.futures.FIRST_COMPLETED
            )
            for future in done:
                results[names[future]] = future.result()
            if enough is not None and enough(results):
                break
        return {node: results.get(node) for node in futures}

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
    bounded wait: on a pool of ``workers`` daemon threads named ``name`` (None: `CHORE_THREADS`),
    made on the first call (the asyncio face's are tasks). `close` shuts the pool down."""

    __slots__ = ("_io", "_lock", "_name", "_workers")

    def __init__(self, name: str, workers: int | None = None) -> None:
        self._name = name
        self._workers = CHORE_THREADS if workers is None else workers
        self._lock = threading.Lock()
        self._io: DaemonThreadPool | None = None

    def submit(self, fn: Callable[..., T], *args: Any) -> Call[T]:
        """Queue ``fn(*args)``; its `Call`.

        Raises:
            RuntimeError: the pool is shut down, or the interpreter exits.
        """
        with self._lock:
            if self._io is None:
                self._io = DaemonThreadPool(self._workers, thread_name_prefix=self._name)
            return Call(self._io.submit(fn, *args))

    def close(self, until: float | None) -> int:
        """Shut the pool down once the calls queued so far have run, waiting for them until the
        monotonic instant ``until`` at most (None: no bound of its own); how many of its threads
        are still running."""
        with self._lock:
            io = self._io
        return shutdown_pool(io, until)


# --- renewer ---


def abandon(call: Call[Any]) -> None:
    """Give up on ``call``: withdrawn if it has not started; a thread cannot be cancelled, so one
    already running goes on until its client's socket gives up, its outcome unused. The asyncio
    face's cancels its task."""
    call.withdraw()


def is_cancellation(exc: BaseException) -> bool:
    """Never: a thread is not cancelled, so whatever ended it is a failure. The asyncio face's
    tells a task's cancellation (a stop asked for) from a failure."""
    return False
