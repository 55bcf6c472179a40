"""The asyncio side of the release waiters: `AsyncHandoff` (the Redis hand-off, its
listener a task) and `AsyncSleepWaiter` (polling).

How the hand-off works is in `fencedlease._handoff`; the channel model both faces drive is
`fencedlease._handoff.channels`; the sync twin is `fencedlease._sync.handoff.Handoff`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio

from fencedlease._core.clock import SYSTEM_CLOCK, Clock
from fencedlease._core.protocol import AcquireReply
from fencedlease._handoff.base import HandoffBase, listener_died, listener_failed, log, waiter_name
from fencedlease._handoff.waiters import AsyncReleaseWaiter, NoQueueing, WaitRequest
from fencedlease._redis.aio import dedicated_client, run_script
from fencedlease._redis.errors import RedisCallError, acl_denial, backend_errors, map_exceptions
from fencedlease._redis.replies import text
from fencedlease._redis.scripts import ENQUEUE

from .primitives import retrieve

__all__ = ["AsyncHandoff", "AsyncSleepWaiter", "async_release_waiter_for"]


class AsyncSleepWaiter(NoQueueing):
    """Polling only: sleeps the whole ``request.timeout_s`` on ``clock``'s ``async_sleep`` (so a
    fake clock drives the waits; a clock without one, such as
    [`SystemClock`][fencedlease.SystemClock], is waited on with `asyncio.sleep`), for backends
    without release notifications."""

    queues = False

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._sleep: Callable[[float], Awaitable[None]] = getattr(
            clock, "async_sleep", asyncio.sleep
        )

    async def wait(self, request: WaitRequest) -> AcquireReply | None:
        await self._sleep(request.timeout_s)
        return None

    async def aclose(self) -> None:
        pass


class AsyncHandoff(HandoffBase[redis.asyncio.Redis]):
    """`Handoff` for ``redis.asyncio``: the same queue and
    scripts, the listener a task.

    ``client``: the manager's ``redis.asyncio.Redis``; ``prefix``: its key prefix (the arguments
    of `Handoff`). The listener has a connection of its own
    (`fencedlease._redis.aio.dedicated_client`), never one of ``client``'s pool. The
    listener task is started by the first wait in the running loop and cancelled by
    `aclose`; like the thread, it logs an unexpected death
    (`listener_died`).
    """

    def _reset(self) -> None:
        self._task: asyncio.Task[None] | None = None
        self._chores: set[asyncio.Task[Any]] = set()
        self._control_on = False  # the listener's control channel is subscribed

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(coro)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)
        # A wait that gave up (its timeout) no longer reads its queueing's outcome: a failure that
        # comes after is moot, and must not be logged as "Task exception was never retrieved".
        task.add_done_callback(retrieve)
        return task

    def queue_args(
        self, key: str, owner_token: str, wait_ms: int, final: bool
    ) -> tuple[str, str, str, str] | None:
        """As `queue_args`."""
        return self._register(key, owner_token, wait_ms, final, asyncio.Event())

    def forget(self, key: str, owner_token: str) -> None:
        """As `forget`."""
        self._channels.leave(self._channel(key), waiter_name(owner_token), time.monotonic())

    async def wait(self, request: WaitRequest) -> AcquireReply | None:
        """As `wait`, awaited: the grant a hand-off message carried when the waiter takes it
        from there, else None.

        Raises:
            BackendError: the queueing command failed.
        """
        loop = asyncio.get_running_loop()
        until = loop.time() + request.timeout_s
        key = request.key
        channel = self._channel(key)
        name = waiter_name(request.owner_token)
        channels = self._channels
        known = channels.waiters.get(channel, {}).get(name) if request.queued else None
        event = asyncio.Event() if known is None else known
        if self._closed:  # after aclose(): poll, as without the listener
            await asyncio.sleep(request.timeout_s)
            return None
        ask = channels.join(channel, name, event)
        start = self._task is None or self._task.done()
        if start:
            if self._task is not None:  # it died (logged): a new one subscribes again
                channels.lost_connection()
            self._task = loop.create_task(self._run(), name="fencedlease-handoff")
        try:
            if ask and not start:
                self._spawn(self._poke())
            queued = known is not None and channel in channels.confirmed
            if queued:  # the acquire queued it: only the sleep is left
                await _wait_event(event, max(0.0, until - loop.time()))
            else:
                await self._queue_and_sleep(request, until, channel, event)
        finally:
            grant = channels.leave(channel, name, time.monotonic())
        return self._grant(key, grant)

    async def _queue_and_sleep(
        self, request: WaitRequest, until: float, channel: str, event: asyncio.Event
    ) -> None:
        """`wait`'s rounds once the waiter is registered: wait for the channel's subscription,
        queue, sleep until woken or the loop's instant ``until``."""
        loop, channels = asyncio.get_running_loop(), self._channels
        while channel not in channels.confirmed:
            left = until - loop.time()
            if left <= 0 or not await _wait_event(event, left):
                return
            event.clear()
        left = until - loop.time()
        if left < 0.001:
            return
        # In a task of its own, so a stalled Redis cannot stretch the wait past timeout_s.
        wait_ms = int(left * 1000)
        queued = self._spawn(
            self._enqueue(request.key, request.owner_token, request.ttl_ms, wait_ms, request.final)
        )
        try:
            done, _ = await asyncio.wait({queued}, timeout=left)
        finally:
            if not queued.done():  # it may land after the call has ended (see LateQueueing)
                self._late.gave_up_on(queued, request.key, request.owner_token)
                queued.add_done_callback(self._landed)
        if not done or queued.cancelled() or not queued.result():
            return
        left = until - loop.time()
        if left > 0:
            await _wait_event(event, left)

    def _landed(self, queued: asyncio.Task[bool]) -> None:
        """A queueing command the wait gave up on has ended: the release its outcome asks for
        (a cancelled one may have been sent)."""
        failed = queued.cancelled() or queued.exception() is not None
        release = self._late.landed(queued, None if failed else queued.result())
        if release is not None:
            release()

    def ended(self, key: str, owner_token: str, holds: bool, release: Callable[[], None]) -> None:
        """As `ended`."""
        self._late.ended(key, owner_token, holds, release)

    async def _enqueue(
        self, key: str, owner_token: str, ttl_ms: int, wait_ms: int, final: bool
    ) -> bool:
        keys, args = self._enqueue_args(key, owner_token, ttl_ms, wait_ms, final)
        with backend_errors(f"wait for {key!r}"):
            reply = await run_script(self._client, ENQUEUE, keys, args)
        return int(reply) == 1

    async def _poke(self) -> None:
        try:
            with map_exceptions(RedisCallError):
                await self._client.publish(self._control, b"")
        except RedisCallError as exc:
            log.debug("could not wake the hand-off listener: %s", exc)

    async def aclose(self) -> None:
        """Cancel the listener task and wait for it; wake every waiter. Idempotent. A listener that
        died (logged when it did) does not make this raise, as the thread's does not."""
        if self._closed:
            return
        self._closed = True
        for waiters in self._channels.waiters.values():
            for event in waiters.values():
                event.set()
        chores = list(self._chores)
        for chore in chores:
            chore.cancel()
        await asyncio.gather(*chores, return_exceptions=True)
        task = self._task
        if task is not None and task.done():
            if not task.cancelled():
                task.exception()  # a death already logged (listener_died), as the thread's is
        elif task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                # Our own cancellation must propagate; the listener's is what we asked for.
                if current is not None and getattr(current, "cancelling", lambda: 0)():
                    raise

    async def _listen_round(
        self, pubsub: Any, subscribe: list[str], unsubscribe: list[str], timeout_s: float
    ) -> dict[str, Any] | None:
        """One round of the listener: send the (un)subscriptions the channel model planned, then
        read one message, waiting ``timeout_s`` seconds at most (None: none came). The control
        channel goes first (redis-py re-subscribes it after a reconnect)."""
        if not self._control_on:
            await pubsub.subscribe(self._control)
            self._control_on = True
        if subscribe:
            await pubsub.subscribe(*subscribe)
        if unsubscribe:
            await pubsub.unsubscribe(*unsubscribe)
        message: dict[str, Any] | None = await pubsub.get_message(timeout=timeout_s)
        return message

    async def _run(self) -> None:
        listener = dedicated_client(self._client)
        pubsub = listener.pubsub()
        channels = self._channels
        backoff_s, warned = 0.0, False
        try:
            self._control_on = False
            while not self._closed:
                subscribe, unsubscribe, timeout_s = channels.plan(time.monotonic())
                try:
                    with map_exceptions(RedisCallError):
                        message = await self._listen_round(
                            pubsub, subscribe, unsubscribe, timeout_s
                        )
                    backoff_s = 0.0
                except (RedisCallError, OSError, ValueError) as exc:
                    # redis-py reconnects and re-subscribes on the next call; until then waiters
                    # poll. Back off so a dead server is not hammered. A socket closed under
                    # the pub/sub (a primary switch drops the pool's connections) is OSError or
                    # "I/O operation on closed file", which redis-py does not reconnect from: a
                    # fresh pub/sub then, as on the sync face.
                    if not isinstance(exc, RedisCallError):
                        with (
                            contextlib.suppress(RedisCallError, OSError, ValueError),
                            map_exceptions(RedisCallError),
                        ):
                            await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
                        pubsub = listener.pubsub()
                        self._control_on = False
                    warned = listener_failed(exc, acl_denial(exc), warned)
                    channels.lost_connection()
                    backoff_s = min(1.0, max(0.01, backoff_s * 2))
                    await asyncio.sleep(backoff_s)
                    continue
                if message is not None:
                    events = channels.on_message(message)
                    if events and text(message.get("type")) in ("message", "smessage"):
                        self.notified += 1
                    for event in events:
                        event.set()
        except asyncio.CancelledError:
            raise  # aclose() stops it so
        except BaseException:
            listener_died()
            raise
        finally:
            try:
                with contextlib.suppress(RedisCallError), map_exceptions(RedisCallError):
                    await asyncio.shield(pubsub.aclose())  # type: ignore[no-untyped-call, unused-ignore]
            finally:
                if listener is not self._client:
                    with contextlib.suppress(RedisCallError), map_exceptions(RedisCallError):
                        await asyncio.shield(listener.connection_pool.disconnect())


async def _wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """``event.wait()`` bounded by ``timeout_s`` seconds; whether it was set."""
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except asyncio.TimeoutError:
        return False
    return True


def async_release_waiter_for(backend: object, clock: Clock = SYSTEM_CLOCK) -> AsyncReleaseWaiter:
    """The release waiter an asyncio manager uses over ``backend``: the backend's own
    (``backend.release_waiter()``, e.g. the Redis hand-off), else `AsyncSleepWaiter`
    (polling on ``clock``)."""
    make = getattr(backend, "release_waiter", None)
    waiter: AsyncReleaseWaiter = AsyncSleepWaiter(clock) if make is None else make()
    return waiter
