"""What the asyncio face waits with, where the sync face uses threads: the primitives the code
generated for both faces calls by the same names (the sync ones are in
`fencedlease._sync.primitives`; a generated module imports ``.primitives`` and gets its face's),
and `retrieve`, the done callback the asyncio face's own tasks share.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from fencedlease._core.state import LeaseState

__all__ = ["Background", "Event", "LostSignal", "NodeWorkers", "retrieve"]

R = TypeVar("R")


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
        tasks = {node: asyncio.ensure_future(call()) for node, call in calls.items()}
        done, pending = await asyncio.wait(tasks.values(), timeout=timeout_s)
        for task in pending:
            task.cancel()
        return {node: task.result() if task in done else None for node, task in tasks.items()}

    def close(self) -> None:
        """Nothing to stop: a batch's tasks end with it."""
