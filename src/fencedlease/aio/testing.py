"""Helpers for testing cancellation safety (shipped, after trio's habit of public test helpers).

[`cancel_at_suspension`][fencedlease.aio.testing.cancel_at_suspension] runs a coroutine and cancels
the task running it exactly at the coroutine's ``n``-th suspension, the way a real ``task.cancel()``
from elsewhere would land there. Counting runs from 1 over every point where the coroutine gives
control back to the event loop, including those deep inside redis-py (connecting, writing, reading).
Run it for ``n = 1, 2, ...`` until the coroutine finishes without reaching ``n``: that covers every
await point of the path it took.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

__all__ = ["CancelAtSuspension", "cancel_at_suspension"]

T = TypeVar("T")


class CancelAtSuspension(Generic[T]):
    """An awaitable running ``coro`` that requests cancellation of the current task at the
    ``n``-th time ``coro`` suspends (``n`` >= 1).

    ``suspensions`` counts the suspensions seen; ``fired`` tells whether the cancellation was
    requested (False: ``coro`` finished after fewer than ``n`` suspensions). The cancellation is
    ``Task.cancel()`` itself, so the future ``coro`` waits on is cancelled and ``CancelledError``
    is thrown in at that point, exactly as when another task cancels this one.

    Raises:
        ValueError: ``n`` < 1.
    """

    def __init__(self, coro: Coroutine[Any, Any, T], n: int) -> None:
        if n < 1:
            raise ValueError(f"n must be >= 1; got {n}")
        self._coro = coro
        self._n = n
        self.suspensions = 0
        self.fired = False

    def __await__(self) -> Generator[Any, Any, T]:
        inner = self._coro.__await__()
        send: Any = None
        throw: BaseException | None = None
        while True:
            try:
                yielded = inner.send(send) if throw is None else inner.throw(throw)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            self.suspensions += 1
            if self.suspensions == self._n:
                task = asyncio.current_task()
                if task is None:
                    raise RuntimeError("CancelAtSuspension must be awaited inside a task")
                self.fired = True
                task.cancel()  # lands when this step yields: on the future handed up below
            try:
                send, throw = (yield yielded), None
            except BaseException as exc:
                send, throw = None, exc


def cancel_at_suspension(coro: Coroutine[Any, Any, T], n: int) -> CancelAtSuspension[T]:
    """``await cancel_at_suspension(coro, n)``: see
    [`CancelAtSuspension`][fencedlease.aio.testing.CancelAtSuspension]."""
    return CancelAtSuspension(coro, n)
