"""A thread pool of daemon threads, for the library's calls to the store.

`concurrent.futures.ThreadPoolExecutor` starts non-daemon workers and joins them at
interpreter exit (``concurrent.futures``' exit hook): one worker blocked on a hung store (a paused
Redis, a black-holed connection, a client with no ``socket_timeout``) would keep the process from
ever exiting. The library bounds every wait on its pools itself and its late replies change
nothing that matters (renewals and releases are owner-checked), so its workers are daemons: a hung
store never blocks interpreter exit. Same interface (``submit``, ``shutdown``), workers started as
needed up to ``max_workers`` and reused while idle, named ``<thread_name_prefix>_<n>``.
`BoundedCalls` runs store calls on such a pool and waits for each a bounded time.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any, ParamSpec, TypeVar

from fencedlease._core.errors import no_reply

__all__ = ["BoundedCalls", "DaemonThreadPool", "shutdown_pool"]

P = ParamSpec("P")
T = TypeVar("T")

_WorkItem = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonThreadPool(Executor):
    """An `Executor` on at most ``max_workers`` daemon threads.

    ``shutdown(wait=False)`` lets the calls already submitted run, then the workers end;
    ``shutdown(wait=True)`` also joins them. Submitting after ``shutdown`` raises RuntimeError.
    """

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._queue: queue.SimpleQueue[_WorkItem | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._shutdown = False

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Run ``fn(*args, **kwargs)`` on a worker; its future."""
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future: Future[T] = Future()
            self._queue.put((future, fn, args, kwargs))
            if not self._idle.acquire(timeout=0) and len(self._threads) < self._max_workers:
                thread = threading.Thread(
                    target=self._work, name=f"{self._prefix}_{len(self._threads)}", daemon=True
                )
                thread.start()
                self._threads.add(thread)
            return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                self._queue.put(None)  # the next worker ends too
                return
            future, fn, args, kwargs = item
            del item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    future.set_exception(exc)
                    del exc
                else:
                    future.set_result(result)
                    del result
            del future, fn, args, kwargs
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Take no new calls; the workers end once the queued ones ran (``cancel_futures``:
        those not started are cancelled). ``wait``: join the workers."""
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while True:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
            self._queue.put(None)
            threads = list(self._threads)
        if wait:
            for thread in threads:
                thread.join()


def shutdown_pool(pool: DaemonThreadPool | None, until: float | None) -> int:
    """Stop ``pool`` once the calls submitted so far have run, and join its threads until the
    monotonic instant ``until`` at most (None: no bound). A thread blocked on a hung store is left
    to end at the client's socket timeout; its late reply changes nothing that matters (a renewal
    or a release is owner-checked). Returns how many threads are still running."""
    if pool is None:
        return 0
    pool.shutdown(wait=False)
    threads = list(pool._threads)
    for thread in threads:
        thread.join(None if until is None else max(0.0, until - time.monotonic()))
    return sum(thread.is_alive() for thread in threads)


class BoundedCalls:
    """Store calls run on a few worker threads (named ``<name>_<n>``), so that the caller waits
    for each at most a bound: a hung store (a paused Redis, a black-holed connection) cannot hold
    it past that, whatever the client's socket timeout. Started on the first call. The workers
    are daemon threads (`DaemonThreadPool`): one still blocked on a
    hung store with no socket timeout never keeps the process from exiting."""

    def __init__(self, name: str, workers: int = 8) -> None:
        self._name = name
        self._workers = workers
        self._lock = threading.Lock()
        self._pool: DaemonThreadPool | None = None

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Start ``fn()`` on a worker; its future. Works while the interpreter exits too
        (``close()`` in an atexit handler): the pool is the library's own."""
        with self._lock:
            if self._pool is None:
                self._pool = DaemonThreadPool(self._workers, thread_name_prefix=self._name)
            return self._pool.submit(fn)

    def run(
        self,
        fn: Callable[[], T],
        bound_s: float,
        what: str,
        more_s: Callable[[], float | None] = lambda: None,
    ) -> T:
        """``fn()``'s result, waiting ``bound_s`` seconds, then as long as ``more_s()`` allows
        (asked each time a slice ran out; None: no longer).

        Raises:
            BackendError: no result within the bound (``what`` names the call; ``timed_out``, it
                may have run; a builtin ``TimeoutError`` is the cause; the call goes on in the
                background), or the one ``fn`` raised.
        """
        future = self.submit(fn)
        waited, wait = 0.0, bound_s
        while True:
            try:
                return future.result(timeout=wait)
            except FutureTimeoutError:
                waited += wait
            more = more_s()
            if more is None:
                break
            wait = more
        raise no_reply(what, waited)

    def close(self, until: float | None = None) -> int:
        """Stop the workers, joining them until the monotonic instant ``until`` at most; how
        many are still running."""
        with self._lock:
            pool, self._pool = self._pool, None
        return shutdown_pool(pool, until)

    def _after_fork_in_child(self) -> None:
        """Forget the parent's workers (they do not exist here); the next call starts new ones."""
        self._lock = threading.Lock()
        self._pool = None
