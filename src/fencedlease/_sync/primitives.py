"""What the sync face waits with, where the asyncio face uses its event loop: the primitives the
code generated for both faces calls by the same names (the asyncio ones are in
`fencedlease._async.primitives`). A generated module imports ``.primitives`` and gets its
face's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import Any, TypeVar

from fencedlease._core import fork as _fork
from fencedlease._core.state import LeaseState
from fencedlease._threads import DaemonThreadPool, shutdown_pool

__all__ = ["Background", "Event", "LostSignal", "NodeWorkers"]

R = TypeVar("R")


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
