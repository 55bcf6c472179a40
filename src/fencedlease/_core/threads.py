"""A thread pool of daemon threads, for the library's calls to the store.

`concurrent.futures.ThreadPoolExecutor` starts non-daemon workers and joins them at
interpreter exit (``concurrent.futures``' exit hook): one worker blocked on a hung store (a paused
Redis, a black-holed connection, a client with no ``socket_timeout``) would keep the process from
ever exiting. The library bounds every wait on its pools itself and its late replies change
nothing that matters (renewals and releases are owner-checked), so its workers are daemons: a hung
store never blocks interpreter exit. Same interface (``submit``, ``shutdown``), workers started as
needed up to ``max_workers`` and reused while idle, named ``<thread_name_prefix>_<n>``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

__all__ = ["DaemonThreadPool", "shutdown_pool"]

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
