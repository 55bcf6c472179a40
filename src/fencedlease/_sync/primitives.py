"""What the sync face waits with, where the asyncio face uses its event loop: the primitives the
code generated for both faces calls by the same names (the asyncio ones are in
`fencedlease._async.primitives`). A generated module imports ``.primitives`` and gets its
face's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, ParamSpec, TypeVar

from fencedlease._core.clock import Clock
from fencedlease._core.state import LeaseState

__all__ = ["LOG_NAME", "Background", "Event", "LostSignal", "bounded", "shielded", "sleep"]

P = ParamSpec("P")
T = TypeVar("T")


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


def shielded(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)``: a call of this face is never cut short by a cancellation, so there
    is nothing to shield (the asyncio twin shields its step)."""
    return fn(*args, **kwargs)


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
