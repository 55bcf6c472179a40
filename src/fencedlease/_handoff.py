"""Waking waiters when a lease is released: the hand-off queue and one pub/sub listener per manager.

An acquire with ``wait_ms > 0`` that finds the key held calls a *release waiter* between attempts
instead of sleeping blindly. For Redis that is :class:`Handoff`:

1. It makes sure the manager's one listener connection (on a pool of its own, never one of the
   caller's pool's connections) is subscribed to the key's channel
   ``<prefix>:{<key>}:handoff`` (started lazily on the first wait; a channel nobody waits on is
   unsubscribed after ``linger_s`` seconds, so a steady stream of waiters costs no SUBSCRIBE).
2. It queues the waiter in Redis (``enqueue.lua``: one EVALSHA), oldest first. If the key turned out
   to be free meanwhile, or already handed to this waiter, it returns at once: acquire now.
3. It sleeps until woken or until the retry delay the manager chose has passed.

``release.lua`` hands the lease to the oldest live waiter as a new grant (new fencing token) and
publishes the SHA-1 of that waiter's owner token; the listener wakes exactly that waiter, whose next
acquire finds the key already its own ("already ours": one round trip, no new token). Because the
lease goes to the queue's head rather than back to the free pool, the holder that released cannot
take it again before the waiters: every contender is served in arrival order (Go's ``sync.Mutex``
hands off directly to the oldest waiter in its starvation mode for the same reason; Redisson's
``RedissonFairLock`` keeps a queue of waiters in Redis).

Polling stays the fallback, so nothing depends on a notification arriving: a lost message (the
listener's connection was killed, a lease expired instead of being released) costs a waiter at most
the retry delay it was sleeping anyway, after which its acquire finds the key free or handed to it.
A waiter that stops waiting (gave up, cancelled, interrupted, failed, closed) releases with its
owner token on the way out (the manager does it): ``release.lua`` takes it out of the queue and
passes on a lease handed to it meanwhile. A waiter that crashed drops out at its deadline (its wait
plus ``grace_ms``, on Redis's clock; none for its last wait); a hand-off to it in that window leaves
the key unclaimed for at most ``2 * grace_ms`` before it expires.

Other backends get :class:`SleepWaiter`, which just sleeps (the manager's old behaviour).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import redis
import redis.asyncio
from redis.exceptions import NoScriptError, RedisError

from ._acl import acl_denial
from ._protocol import Script, handoff_channel, lease_key, waiters_key, waiters_meta_key
from ._redis_backend import RedisBackend, backend_errors, dedicated_client
from ._renewer import shutdown_pool

__all__ = [
    "DEFAULT_GRACE_MS",
    "DEFAULT_LINGER_S",
    "ENQUEUE",
    "AsyncHandoff",
    "AsyncReleaseWaiter",
    "AsyncSleepWaiter",
    "Handoff",
    "ReleaseWaiter",
    "SleepWaiter",
    "async_dedicated_client",
    "async_waits_for_connection",
    "enqueue_args",
    "handoff_channel",
    "waiter_name",
    "waiters_key",
    "waiters_meta_key",
]

log = logging.getLogger("fencedlease.handoff")

ENQUEUE = Script.load("enqueue")

DEFAULT_GRACE_MS = 200
"""How long after its wait a queued waiter still counts as alive (it polls again in between)."""

DEFAULT_LINGER_S = 5.0
"""How long a channel with no waiter stays subscribed, in seconds (saves SUBSCRIBE churn)."""

_LISTEN_SLICE_S = 1.0  # the listener's longest sleep: housekeeping and a fallback for close()

T = TypeVar("T")


def enqueue_args(
    prefix: str, key: str, owner_token: str, ttl_ms: int, wait_ms: int, final: bool, grace_ms: int
) -> tuple[tuple[str, str, str], tuple[str, int, int, int]]:
    """KEYS and ARGV of ``enqueue.lua`` (both faces). The last wait gets no grace: a hand-off
    after it would find nobody to claim it."""
    keys = (lease_key(prefix, key), waiters_key(prefix, key), waiters_meta_key(prefix, key))
    return keys, (owner_token, wait_ms, ttl_ms, 0 if final else grace_ms)


def waiter_name(owner_token: str) -> str:
    """The name a hand-off message gives a waiter: the SHA-1 (hex) of its owner token, which Lua
    computes too (``redis.sha1hex``). The owner token itself is a secret and is never published."""
    return hashlib.sha1(owner_token.encode()).hexdigest()  # noqa: S324 (a name, not a MAC)


def _text(value: object) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def _listener_error(exc: RedisError, warned: bool) -> bool:
    """Log a hand-off listener's failed round (both faces): an ACL refusal (SUBSCRIBE, or a
    channel outside the user's patterns) once as a warning, since it will not heal by itself and
    waiters only poll meanwhile; anything else at debug level. Whether a warning was logged."""
    denied = acl_denial(exc)
    if denied is not None and not warned:
        log.warning("hand-off listener: %s: %s; waiters poll instead", denied, exc)
        return True
    log.debug("hand-off listener: %s", exc)
    return warned


def async_dedicated_client(client: redis.asyncio.Redis) -> redis.asyncio.Redis:
    """:func:`~fencedlease._redis_backend.dedicated_client` for ``redis.asyncio``."""
    pool = client.connection_pool
    if type(pool) not in (redis.asyncio.ConnectionPool, redis.asyncio.BlockingConnectionPool):
        return client
    own = redis.asyncio.ConnectionPool(
        connection_class=pool.connection_class, **pool.connection_kwargs
    )
    return redis.asyncio.Redis(connection_pool=own)


def async_waits_for_connection(client: redis.asyncio.Redis) -> bool:
    """:func:`~fencedlease._redis_backend.waits_for_connection` for ``redis.asyncio``."""
    return client.connection is None and isinstance(
        client.connection_pool, redis.asyncio.BlockingConnectionPool
    )


class ReleaseWaiter(Protocol):
    """What the sync manager calls between two acquire attempts of a waiting caller.

    ``queues``: whether :meth:`wait` queues the caller for a hand-off (a release may then grant
    the key to its owner token; an acquire that gives up must release with that token).
    """

    queues: bool

    def wait(
        self, key: str, owner_token: str, ttl_ms: int, timeout_s: float, final: bool = False
    ) -> None:
        """Return when ``key`` may be free (or handed to ``owner_token``), or after ``timeout_s``
        seconds at the latest (plus one round trip). ``ttl_ms``: the lease the caller asks for.
        ``final``: the caller makes one last attempt after this wait and then gives up, so it must
        not be handed the lease after ``timeout_s`` (no grace)."""
        ...

    def close(self, until: float | None = None) -> None:
        """Stop whatever the waiter started (threads, connections). Idempotent. Waits until the
        monotonic instant ``until`` at most (None: no bound of its own)."""
        ...


class SleepWaiter:
    """Polling only: sleeps the whole ``timeout_s`` (for backends without notifications)."""

    queues = False

    def wait(
        self, key: str, owner_token: str, ttl_ms: int, timeout_s: float, final: bool = False
    ) -> None:
        time.sleep(timeout_s)

    def close(self, until: float | None = None) -> None:
        pass


class _Channels:
    """Who waits on which channel, and what the listener must (un)subscribe; shared by both faces.

    Every method is called with the owner's lock held (a ``threading.Lock``, or the event loop's
    single thread for the asyncio twin). ``wake(event)`` is how an event is set.
    """

    def __init__(self, linger_s: float) -> None:
        self.linger_s = linger_s
        self.waiters: dict[str, dict[str, Any]] = {}  # channel -> waiter name -> event
        self.requested: set[str] = set()  # asked for, SUBSCRIBE not sent yet
        self.subscribed: set[str] = set()  # SUBSCRIBE sent (and not UNSUBSCRIBE)
        self.confirmed: set[str] = set()  # the server acknowledged the subscription
        self.idle_since: dict[str, float] = {}  # subscribed channels nobody waits on

    def join(self, channel: str, name: str, event: Any) -> bool:
        """Register a waiter; True when the listener must be asked to subscribe."""
        self.waiters.setdefault(channel, {})[name] = event
        self.idle_since.pop(channel, None)
        if channel in self.subscribed or channel in self.requested:
            return False
        self.requested.add(channel)
        return True

    def leave(self, channel: str, name: str, now: float) -> None:
        waiters = self.waiters.get(channel)
        if waiters is None:
            return
        waiters.pop(name, None)
        if not waiters:
            del self.waiters[channel]
            self.idle_since[channel] = now

    def plan(self, now: float) -> tuple[list[str], list[str], float]:
        """What the listener sends now: (subscribe, unsubscribe, seconds until the next plan)."""
        subscribe = sorted(self.requested)
        self.requested.clear()
        self.subscribed.update(subscribe)
        unsubscribe: list[str] = []
        next_s = _LISTEN_SLICE_S
        for channel, since in list(self.idle_since.items()):
            if now - since >= self.linger_s:
                del self.idle_since[channel]
                self.subscribed.discard(channel)
                self.confirmed.discard(channel)
                unsubscribe.append(channel)
            else:
                next_s = min(next_s, since + self.linger_s - now)
        return subscribe, unsubscribe, max(0.0, next_s)

    def lost_connection(self) -> None:
        """The listener's connection failed: nothing is confirmed, everything is asked again."""
        self.confirmed.clear()
        self.requested.update(self.subscribed)
        self.subscribed.clear()

    def on_message(self, message: dict[str, Any]) -> list[Any]:
        """The events to set for one pub/sub message."""
        kind = _text(message.get("type"))
        channel = _text(message.get("channel"))
        waiters = self.waiters.get(channel, {})
        if kind == "message":
            event = waiters.get(_text(message.get("data")))
            return [] if event is None else [event]
        if kind == "subscribe":
            if channel in self.subscribed:
                self.confirmed.add(channel)
            # Everyone on the channel re-checks: the first subscription lets waiters queue, and a
            # re-subscription after a lost connection may follow a hand-off nobody heard.
            return list(waiters.values())
        if kind == "unsubscribe" and channel not in self.subscribed:
            self.confirmed.discard(channel)
        return []


class Handoff:
    """The Redis release waiter of one :class:`~fencedlease.LeaseManager` (see the module).

    ``backend``: the manager's :class:`RedisBackend` (its client carries the queue commands; the
    listener has a connection of its own, see
    :func:`~fencedlease._redis_backend.dedicated_client`). ``grace_ms``: how long past its wait a
    queued waiter still counts as alive. ``linger_s``: how long an unused channel
    stays subscribed. The listener is a daemon thread named ``fencedlease-handoff``, started by
    the first wait and joined by :meth:`close`. The queueing command runs on a small pool
    (``fencedlease-handoff-io``) so that a stalled Redis cannot stretch a wait past its
    ``timeout_s``: the acquire's bound of ``wait_ms`` plus one round trip holds with the hand-off
    too.
    """

    queues = True

    def __init__(
        self,
        backend: RedisBackend,
        *,
        grace_ms: int = DEFAULT_GRACE_MS,
        linger_s: float = DEFAULT_LINGER_S,
    ) -> None:
        self._backend = backend
        self._client: redis.Redis = backend.client
        self._grace_ms = grace_ms
        self._lock = threading.Lock()
        self._channels = _Channels(linger_s)
        self._control = f"{backend.prefix}:handoff-control:{secrets.token_hex(8)}"
        self._thread: threading.Thread | None = None
        self._io: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False
        self.notified = 0  # waiters woken by a hand-off message (for the benchmark and tests)

    @property
    def listening(self) -> bool:
        """Whether the listener thread is running."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def wait(
        self, key: str, owner_token: str, ttl_ms: int, timeout_s: float, final: bool = False
    ) -> None:
        """Queue for ``key`` and sleep until handed the lease, woken, or ``timeout_s`` (seconds)
        passes. ``ttl_ms``: the lease asked for (a hand-off grants at most that).

        Raises:
            BackendError: the queueing command failed (as the acquire itself would).
        """
        until = time.monotonic() + timeout_s
        channel = handoff_channel(self._backend.prefix, key)
        name = waiter_name(owner_token)
        event = threading.Event()
        channels = self._channels
        with self._lock:
            closed = self._closed
            if not closed:
                ask = channels.join(channel, name, event)
                start = self._thread is None or not self._thread.is_alive()
                if start:
                    if self._thread is not None:  # it died (logged): a new one subscribes again
                        channels.lost_connection()
                    self._thread = threading.Thread(
                        target=self._run, name="fencedlease-handoff", daemon=True
                    )
                    self._thread.start()
        if closed:
            # After close(): poll, as without the listener. Sleep outside the lock, or the
            # waiters would take turns and each wait outlast its budget.
            time.sleep(timeout_s)
            return
        try:
            if ask and not start:
                self._submit(self._poke)
            while channel not in channels.confirmed:
                left = until - time.monotonic()
                if left <= 0 or not event.wait(left):
                    return  # not subscribed in time: this round is a plain poll
                event.clear()
            left = until - time.monotonic()
            if left < 0.001:
                return
            queued = self._submit(self._enqueue, key, owner_token, ttl_ms, int(left * 1000), final)
            try:
                if not queued.result(timeout=left):
                    return  # free, or already ours: acquire now
            except concurrent.futures.TimeoutError:
                return  # Redis is slow: this round was a plain poll (the entry may land later)
            left = until - time.monotonic()
            if left > 0:
                event.wait(left)
        finally:
            with self._lock:
                channels.leave(channel, name, time.monotonic())

    def _enqueue(self, key: str, owner_token: str, ttl_ms: int, wait_ms: int, final: bool) -> bool:
        prefix, client = self._backend.prefix, self._client
        keys, args = enqueue_args(prefix, key, owner_token, ttl_ms, wait_ms, final, self._grace_ms)
        with backend_errors(f"wait for {key!r}"):
            try:
                reply = client.evalsha(ENQUEUE.sha, 3, *keys, *args)
            except NoScriptError:
                reply = client.eval(ENQUEUE.source, 3, *keys, *args)
        return int(reply) == 1

    def _submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        with self._lock:
            if self._io is None:
                self._io = concurrent.futures.ThreadPoolExecutor(
                    4, thread_name_prefix="fencedlease-handoff-io"
                )
            return self._io.submit(fn, *args)

    def _poke(self) -> None:
        """Wake the listener (blocked reading its connection) so it sends a (un)subscribe now."""
        try:
            self._client.publish(self._control, b"")
        except RedisError as exc:  # it wakes by itself within a second anyway
            log.debug("could not wake the hand-off listener: %s", exc)

    def close(self, until: float | None = None) -> None:
        """Stop and join the listener and the queueing pool, release the listener's connection,
        wake every waiter. Idempotent. Waits for a command in flight until the monotonic instant
        ``until`` at most (None: bounded by the client's socket timeout; a thread still blocked
        then ends at that timeout); the listener notices within a second even if Redis does not
        answer."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread, io = self._thread, self._io
            for waiters in self._channels.waiters.values():
                for event in waiters.values():
                    event.set()
        if thread is not None and io is not None:
            # While the interpreter exits (close() in atexit) a pool takes no new work: the
            # listener then notices within a second by itself.
            with contextlib.suppress(RuntimeError):
                io.submit(self._poke)
        if thread is not None:
            thread.join(None if until is None else max(0.0, until - time.monotonic()))
        shutdown_pool(io, until)

    def _after_fork_in_child(self) -> None:
        """In a forked child (see :mod:`fencedlease._fork`): forget the parent's listener, pool,
        lock and waiters, none of which exist here; the next wait starts a listener of the
        child's own, on a control channel of its own. No I/O."""
        self._lock = threading.Lock()
        self._channels = _Channels(self._channels.linger_s)
        self._control = f"{self._backend.prefix}:handoff-control:{secrets.token_hex(8)}"
        self._thread, self._io = None, None

    def _run(self) -> None:
        listener = dedicated_client(self._client)
        pubsub = listener.pubsub()  # type: ignore[no-untyped-call]
        channels, lock = self._channels, self._lock
        backoff_s, warned = 0.0, False
        try:
            control = False
            while True:
                with lock:
                    if self._closed:
                        return
                    subscribe, unsubscribe, timeout_s = channels.plan(time.monotonic())
                try:
                    if not control:  # redis-py re-subscribes it after a reconnect
                        pubsub.subscribe(self._control)
                        control = True
                    if subscribe:
                        pubsub.subscribe(*subscribe)
                    if unsubscribe:
                        pubsub.unsubscribe(*unsubscribe)
                    message = pubsub.get_message(timeout=timeout_s)
                    backoff_s = 0.0
                except RedisError as exc:
                    # redis-py reconnects and re-subscribes on the next call; until then waiters
                    # poll. Back off so a dead server is not hammered.
                    warned = _listener_error(exc, warned)
                    with lock:
                        channels.lost_connection()
                    backoff_s = min(1.0, max(0.01, backoff_s * 2))
                    time.sleep(backoff_s)
                    continue
                if message is not None:
                    with lock:
                        events = channels.on_message(message)
                        if events and _text(message.get("type")) == "message":
                            self.notified += 1
                    for event in events:
                        event.set()
        except BaseException:
            log.exception("fencedlease hand-off listener stopped; waiters fall back to polling")
            raise
        finally:
            with contextlib.suppress(RedisError):
                pubsub.close()
            if listener is not self._client:
                with contextlib.suppress(RedisError):
                    listener.connection_pool.disconnect()


# -- the asyncio twin ------------------------------------------------------------------------------


class AsyncReleaseWaiter(Protocol):
    """What the asyncio manager awaits between two acquire attempts (see :class:`ReleaseWaiter`)."""

    queues: bool

    async def wait(
        self, key: str, owner_token: str, ttl_ms: int, timeout_s: float, final: bool = False
    ) -> None: ...

    async def aclose(self) -> None: ...


class AsyncSleepWaiter:
    """Polling only: sleeps the whole ``timeout_s`` (for backends without notifications)."""

    queues = False

    async def wait(
        self, key: str, owner_token: str, ttl_ms: int, timeout_s: float, final: bool = False
    ) -> None:
        await asyncio.sleep(timeout_s)

    async def aclose(self) -> None:
        pass


class AsyncHandoff:
    """:class:`Handoff` for ``redis.asyncio``: the same queue and scripts, the listener a task.

    ``client``: the manager's ``redis.asyncio.Redis``; ``prefix``: its key prefix. The listener
    has a connection of its own (:func:`async_dedicated_client`),
    never one of ``client``'s pool. The listener task is started by the first wait in the running
    loop and cancelled by :meth:`aclose`.
    """

    queues = True

    def __init__(
        self,
        client: redis.asyncio.Redis,
        prefix: str,
        *,
        grace_ms: int = DEFAULT_GRACE_MS,
        linger_s: float = DEFAULT_LINGER_S,
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._grace_ms = grace_ms
        self._channels = _Channels(linger_s)
        self._control = f"{prefix}:handoff-control:{secrets.token_hex(8)}"
        self._task: asyncio.Task[None] | None = None
        self._chores: set[asyncio.Task[Any]] = set()
        self._closed = False
        self.notified = 0

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(coro)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)
        return task

    async def wait(
        self, key: str, owner_token: str, ttl_ms: int, timeout_s: float, final: bool = False
    ) -> None:
        """As :meth:`Handoff.wait`, awaited.

        Raises:
            BackendError: the queueing command failed.
        """
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout_s
        channel = handoff_channel(self._prefix, key)
        name = waiter_name(owner_token)
        event = asyncio.Event()
        channels = self._channels
        if self._closed:  # after aclose(): poll, as without the listener
            await asyncio.sleep(timeout_s)
            return
        ask = channels.join(channel, name, event)
        start = self._task is None or self._task.done()
        if start:
            if self._task is not None:  # it died (logged): a new one subscribes again
                channels.lost_connection()
            self._task = loop.create_task(self._run(), name="fencedlease-handoff")
        try:
            if ask and not start:
                self._spawn(self._poke())
            while channel not in channels.confirmed:
                left = until - loop.time()
                if left <= 0 or not await _wait_event(event, left):
                    return
                event.clear()
            left = until - loop.time()
            if left < 0.001:
                return
            # In a task of its own, so a stalled Redis cannot stretch the wait past timeout_s.
            queued = self._spawn(self._enqueue(key, owner_token, ttl_ms, int(left * 1000), final))
            done, _ = await asyncio.wait({queued}, timeout=left)
            if not done or queued.cancelled() or not queued.result():
                return
            left = until - loop.time()
            if left > 0:
                await _wait_event(event, left)
        finally:
            channels.leave(channel, name, time.monotonic())

    async def _enqueue(
        self, key: str, owner_token: str, ttl_ms: int, wait_ms: int, final: bool
    ) -> bool:
        prefix, client = self._prefix, self._client
        keys, args = enqueue_args(prefix, key, owner_token, ttl_ms, wait_ms, final, self._grace_ms)
        with backend_errors(f"wait for {key!r}"):
            try:
                reply = await client.evalsha(ENQUEUE.sha, 3, *keys, *args)
            except NoScriptError:
                reply = await client.eval(ENQUEUE.source, 3, *keys, *args)
        return int(reply) == 1

    async def _poke(self) -> None:
        try:
            await self._client.publish(self._control, b"")
        except RedisError as exc:
            log.debug("could not wake the hand-off listener: %s", exc)

    async def aclose(self) -> None:
        """Cancel the listener task and wait for it; wake every waiter. Idempotent."""
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
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                # Our own cancellation must propagate; the listener's is what we asked for.
                if current is not None and getattr(current, "cancelling", lambda: 0)():
                    raise

    async def _run(self) -> None:
        listener = async_dedicated_client(self._client)
        pubsub = listener.pubsub()
        channels = self._channels
        backoff_s, warned = 0.0, False
        try:
            control = False
            while not self._closed:
                subscribe, unsubscribe, timeout_s = channels.plan(time.monotonic())
                try:
                    if not control:
                        await pubsub.subscribe(self._control)
                        control = True
                    if subscribe:
                        await pubsub.subscribe(*subscribe)
                    if unsubscribe:
                        await pubsub.unsubscribe(*unsubscribe)
                    message = await pubsub.get_message(timeout=timeout_s)
                    backoff_s = 0.0
                except RedisError as exc:
                    warned = _listener_error(exc, warned)
                    channels.lost_connection()
                    backoff_s = min(1.0, max(0.01, backoff_s * 2))
                    await asyncio.sleep(backoff_s)
                    continue
                if message is not None:
                    events = channels.on_message(message)
                    if events and _text(message.get("type")) == "message":
                        self.notified += 1
                    for event in events:
                        event.set()
        finally:
            try:
                with contextlib.suppress(RedisError):
                    await asyncio.shield(pubsub.aclose())  # type: ignore[no-untyped-call]
            finally:
                if listener is not self._client:
                    with contextlib.suppress(RedisError):
                        await asyncio.shield(listener.connection_pool.disconnect())


async def _wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """``event.wait()`` bounded by ``timeout_s`` seconds; whether it was set."""
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except asyncio.TimeoutError:
        return False
    return True
