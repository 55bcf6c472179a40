"""What the asyncio face waits with, where the sync face uses threads: the primitives the code
generated for both faces calls by the same names (the sync ones are in
`fencedlease._sync.primitives`; a generated module imports ``.primitives`` and gets its face's),
and `retrieve`, the done callback the asyncio face's own tasks share.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, TypeVar

from fencedlease._core.clock import Clock
from fencedlease._core.state import LeaseState

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
    "retrieve",
    "shield",
    "sleep",
]

T = TypeVar("T")
R = TypeVar("R")


LOG_NAME = "fencedlease.aio"
"""The logger of this face's messages (the sync face's is ``fencedlease``)."""


class LostSignal:
    """Set once ``state`` is marked lost, from whichever thread marks it (reading ``lost`` in a
    worker thread can be what marks it); awaited on the event loop it was made on. Made inside a
    running loop."""

    __slots__ = ("_future",)

    def __init__(self, state: LeaseState) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._future = future
        state.add_listener(lambda _: _set_threadsafe(loop, future))

    async def wait(self, timeout_s: float | None) -> None:
        """Wait until set or ``timeout_s`` seconds have passed (None: no bound)."""
        await asyncio.wait({self._future}, timeout=timeout_s)


def _set_threadsafe(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
    """Resolve ``future`` from whichever thread marked the lease lost."""

    def resolve() -> None:
        if not future.done():
            future.set_result(None)

    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        resolve()
    elif not loop.is_closed():
        loop.call_soon_threadsafe(resolve)


def retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a finished task's outcome as seen: its failure, if any, was handled or is moot (its
    awaiter may have been cancelled meanwhile). A done callback."""
    if not task.cancelled():
        task.exception()


class Background:
    """One piece of work at a time off the caller's path (a task named ``name``): `start` runs
    ``fn()`` unless a run is still going, `stop` cancels a run and waits for it."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._task: asyncio.Task[Any] | None = None

    def start(self, fn: Callable[[], Awaitable[Any]]) -> None:
        """Run ``fn()`` in a task of the running loop, unless the last one is still running."""
        if self._task is None or self._task.done():

            async def run() -> None:
                await fn()

            self._task = asyncio.get_running_loop().create_task(run(), name=self._name)
            self._task.add_done_callback(retrieve)

    async def stop(self) -> None:
        """Cancel a run still going and wait for it to end."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})


class Event:
    """A flag one task sets and another waits for (`asyncio.Event`), the wait bounded: the twin
    of the sync face's (`threading.Event`). Used on the event loop it was made on."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self, timeout_s: float | None) -> bool:
        """Wait until set or ``timeout_s`` seconds have passed (None: no bound); whether it is
        set."""
        if timeout_s is None:
            await self._event.wait()
            return True
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout_s)
        return self._event.is_set()


async def bounded(fn: Callable[[], Awaitable[T]], timeout_s: float) -> T:
    """``fn()``'s result, waiting ``timeout_s`` seconds at most.

    Raises:
        TimeoutError: no result within ``timeout_s`` (the builtin; ``fn()`` is cancelled), or
            what ``fn()`` raised.
    """
    return await asyncio.wait_for(fn(), timeout_s)


async def sleep(clock: Clock, seconds: float) -> None:
    """Wait ``seconds`` on ``clock``: its ``async_sleep`` (an `AsyncClock`, such as a fake
    clock), else `asyncio.sleep`, in real time."""
    await getattr(clock, "async_sleep", asyncio.sleep)(seconds)


class NodeWorkers:
    """Runs each node's share of a batch as a task of its own, the nodes at once: the twin of the
    sync face's worker thread per node. A call not done within its bound is cancelled (a task can
    be; the sync face's thread runs on)."""

    async def run(
        self, calls: Mapping[str, Callable[[], Awaitable[R]]], timeout_s: float
    ) -> dict[str, R | None]:
        """Each node's ``call()`` at once; its result, or None for a node whose call was not done
        within ``timeout_s`` seconds (that task is cancelled).

        Raises:
            Exception: what a call that finished in time raised.
        """
        return await self.run_until(calls, timeout_s, None)

    async def run_until(
        self,
        calls: Mapping[str, Callable[[], Awaitable[R]]],
        timeout_s: float,
        enough: Callable[[dict[str, R]], bool] | None,
    ) -> dict[str, R | None]:
        """`run`, ended early once ``enough(results)`` (the results so far, by node) is true:
        the calls still running are then cancelled and count as not done in time.

        Raises:
            Exception: what a call that finished in time raised.
        """
        tasks = {node: asyncio.ensure_future(call()) for node, call in calls.items()}
        names: dict[asyncio.Future[R], str] = {task: node for node, task in tasks.items()}
        loop = asyncio.get_running_loop()
        give_up = loop.time() + timeout_s
        pending: set[asyncio.Future[R]] = set(tasks.values())
        results: dict[str, R] = {}
        try:
            while pending:
                left = give_up - loop.time()
                if left <= 0:
                    break
                done, pending = await asyncio.wait(
                    pending, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                for task in done:
                    results[names[task]] = task.result()
                if enough is not None and enough(results):
                    break
        finally:
            for task in pending:
                task.cancel()
        return {node: results.get(node) for node in tasks}

    def close(self) -> None:
        """Nothing to stop: a batch's tasks end with it."""


class Lock:
    """Nothing to lock on one event loop: the code between two awaits runs alone. The twin of the
    sync face's `threading.Lock`, used with ``with`` around code that does not wait."""

    __slots__ = ()

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        pass


async def shield(step: Callable[[], Awaitable[T]]) -> T:
    """``step()`` run to its end even if the caller is cancelled meanwhile (`asyncio.shield`): a
    clean-up a cancellation must not cut short. The sync face's just calls it."""
    return await asyncio.shield(step())


class Runner:
    """One long-lived run of a function, restarted once it has ended: a task named ``name``. The
    twin of the sync face's thread; `stop` cancels it (a task can be)."""

    __slots__ = ("_name", "_task")

    def __init__(self, name: str) -> None:
        self._name = name
        self._task: asyncio.Task[None] | None = None

    @property
    def started(self) -> bool:
        """Whether a run was ever started."""
        return self._task is not None

    @property
    def running(self) -> bool:
        """Whether the last run is still going."""
        return self._task is not None and not self._task.done()

    def start(self, fn: Callable[[], Awaitable[None]], died: Callable[[], None]) -> None:
        """Start a run of ``fn()`` in the running loop; ``died()`` is called (with the exception
        being handled) if it ends on an error other than its cancellation, which it re-raises
        (its outcome is marked seen: `retrieve`)."""

        async def run() -> None:
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except BaseException:
                died()
                raise

        self._task = asyncio.get_running_loop().create_task(run(), name=self._name)
        self._task.add_done_callback(retrieve)

    async def stop(self, until: float | None, wake: Callable[[], object]) -> None:
        """Cancel a run still going and wait for it to end (``until`` and ``wake`` are the sync
        face's: a task ends once cancelled). The run's own failure is not raised here (``died``
        was told), as a thread's is not; a cancellation of the caller propagates."""
        task = self._task
        if task is None or task.done():
            return
        task.cancel()
        await asyncio.wait({task})


class Call(Generic[T]):
    """A call `Chores` runs off the caller's path: a task of the running loop."""

    __slots__ = ("_task",)

    def __init__(self, task: asyncio.Task[T]) -> None:
        self._task = task

    def done(self) -> bool:
        return self._task.done()

    def cancelled(self) -> bool:
        return self._task.cancelled()

    def unsent(self) -> bool:
        """Whether it ended before it could send anything: never known of a task (a cancelled
        one may have sent its command)."""
        return False

    def failed(self) -> bool:
        """Whether it ended cancelled or on an error."""
        return self._task.cancelled() or self._task.exception() is not None

    def result(self) -> T:
        """Its result, or the error it raised."""
        return self._task.result()

    def withdraw(self) -> bool:
        """Stop it if it has not started: whether it was stopped (never, for a task: it may have
        started already)."""
        return False

    async def wait(self, timeout_s: float) -> bool:
        """Wait until it ends or ``timeout_s`` seconds have passed; whether it ended."""
        done, _ = await asyncio.wait({self._task}, timeout=timeout_s)
        return bool(done)

    def on_done(self, fn: Callable[[Call[T]], None]) -> None:
        """Call ``fn(self)`` once it has ended (at once if it has)."""
        self._task.add_done_callback(lambda _: fn(self))


class Chores:
    """Short calls run off the caller's path, so that a slow one cannot stretch the caller's
    bounded wait: each a task of the running loop (the sync face's run on a small pool of threads
    named ``name``, ``workers`` of them at most). `close` cancels those still running and waits
    for them."""

    __slots__ = ("_tasks",)

    def __init__(self, name: str, workers: int | None = None) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def submit(self, fn: Callable[..., Awaitable[T]], *args: Any) -> Call[T]:
        """Start ``fn(*args)``; its `Call`."""

        async def run() -> T:
            return await fn(*args)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        # A caller that gave up (its timeout) no longer reads the outcome: a failure that comes
        # after is moot, and must not be logged as "Task exception was never retrieved".
        task.add_done_callback(retrieve)
        return Call(task)

    async def close(self, until: float | None) -> int:
        """Cancel the calls still running and wait for them to end (``until`` is the sync
        face's bound: a cancelled task ends at once); how many are still running: none."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return 0


# --- renewer ---


def abandon(call: Call[Any]) -> None:
    """Give up on ``call`` wherever it is: its task is cancelled (redis-py drops the connection
    of a command cut short, so what is retried goes out on a fresh one). The sync face's can
    only withdraw a call not started yet: a thread cannot be cancelled."""
    call._task.cancel()


def is_cancellation(exc: BaseException) -> bool:
    """Whether ``exc`` is the cancellation of the task it ended (`asyncio.CancelledError`): a
    stop asked for, not a failure. Never on the sync face (a thread is not cancelled)."""
    return isinstance(exc, asyncio.CancelledError)
