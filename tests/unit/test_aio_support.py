"""Fakes for the asyncio unit tests (no server): a backend that suspends around every call and
can lose replies or hang, over the real AsyncMemoryBackend; and a runner for tasks."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from fencedlease import BackendError
from fencedlease._core.backend import RenewItem
from fencedlease._core.clock import Clock
from fencedlease._core.protocol import AcquireReply, InspectReply
from fencedlease._redis.errors import backend_error as redis_backend_error
from fencedlease.aio import AsyncLeaseManager
from fencedlease.backends.memory import AsyncMemoryBackend, MemoryBackend
from fencedlease.testing import FakeClock

T = TypeVar("T")


def backend_error(cause: BaseException) -> BackendError:
    """A BackendError as the Redis backend raises it: classified by the adapter, the redis-py
    error in __cause__."""
    error = redis_backend_error("acquire 'k'", cause)
    error.__cause__ = cause
    return error


class StepBackend:
    """An AsyncLeaseBackend over a MemoryBackend whose every call suspends once before the command
    runs and once after it ran (before the reply is handed back): the two places a cancellation
    can land, "not sent" and "ran, reply not heard".

    ``lose_acquire_replies``: that many acquire replies are dropped after the command ran, raised
    as a BackendError caused by a ConnectionError (an ambiguous failure). ``fail_next``: raise
    this BackendError for the next call of that name without running anything. ``hang_renewals``:
    renew_many waits on this event before running. ``calls`` logs the operation names.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Any = clock or FakeClock()  # a FakeClock unless the test needs real waits
        self.sync = MemoryBackend(clock=self.clock)
        self.inner = AsyncMemoryBackend(sync=self.sync)
        self.calls: list[str] = []
        self.lose_acquire_replies = 0
        self.fail_next: dict[str, BackendError] = {}
        self.hang_renewals: asyncio.Event | None = None
        self.closed = False

    async def _call(self, name: str, run: Callable[[], Awaitable[T]]) -> T:
        self.calls.append(name)
        await asyncio.sleep(0)  # suspension 1: the command has not run
        failure = self.fail_next.pop(name, None)
        if failure is not None:
            raise failure
        result = await run()
        await asyncio.sleep(0)  # suspension 2: the command ran; the reply is on its way
        if name == "acquire" and self.lose_acquire_replies > 0:
            self.lose_acquire_replies -= 1
            raise backend_error(RedisConnectionError("reply lost"))
        return result

    async def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        return await self._call("acquire", lambda: self.inner.acquire(key, owner_token, ttl_ms))

    async def renew(self, key: str, owner_token: str, ttl_ms: int) -> int:
        return await self._call("renew", lambda: self.inner.renew(key, owner_token, ttl_ms))

    async def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]:
        if self.hang_renewals is not None:
            await self.hang_renewals.wait()
        return await self._call("renew_many", lambda: self.inner.renew_many(items))

    async def release(self, key: str, owner_token: str) -> bool:
        return await self._call("release", lambda: self.inner.release(key, owner_token))

    async def inspect(self, key: str) -> InspectReply | None:
        return await self.inner.inspect(key)

    async def force_release(self, key: str) -> bool:
        return await self.inner.force_release(key)

    async def close(self) -> None:
        self.closed = True


def refused() -> BackendError:
    """A definitive failure: a lease script's own refusal (it checks its keys before its first
    write), so not ambiguous and nothing was written. redis-py strips Redis's ``ERR``."""
    return backend_error(
        ResponseError("fencedlease acquire: the lease key k holds a malformed value")
    )


def run(coro_fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """asyncio.run, failing the test if a task of ours is still pending when the test's coroutine
    returns (every test checks that the manager left nothing behind)."""

    async def main() -> T:
        result = await coro_fn()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert others == [], f"tasks left behind: {others}"
        return result

    return asyncio.run(main())


async def settle(manager: AsyncLeaseManager) -> None:
    """Let the renewal task look at the clock now and finish what that starts (fake clock)."""
    manager.renewer.wake()
    for _ in range(20):
        await asyncio.sleep(0)


async def outcome(awaitable: Awaitable[T]) -> T | BaseException:
    """Run ``awaitable`` in a task of its own; its result, or the exception (CancelledError
    included) it ended with. A task of its own keeps a cancellation out of the test's task."""

    async def wrap() -> T:
        return await awaitable

    task = asyncio.ensure_future(wrap())
    await asyncio.wait({task})
    if task.cancelled():
        return asyncio.CancelledError()
    exc = task.exception()
    return exc if exc is not None else task.result()
