"""The Redis hand-off for the sync face: `Handoff`, its listener a thread.

How the hand-off works (the queue, the channel, who is woken) is in `fencedlease._handoff`; the
channel model this class drives is `fencedlease._handoff.channels`; the asyncio twin is
`fencedlease._async.handoff.AsyncHandoff`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from fencedlease._core.protocol import AcquireReply
from fencedlease._handoff.base import HandoffBase, listener_died, listener_failed, log, waiter_name
from fencedlease._handoff.channels import Channels
from fencedlease._handoff.late import LateQueueing
from fencedlease._handoff.waiters import WaitRequest
from fencedlease._redis.clients import dedicated_client
from fencedlease._redis.errors import RedisCallError, acl_denial, backend_errors, map_exceptions
from fencedlease._redis.keys import control_channel, listener_id
from fencedlease._redis.replies import text
from fencedlease._redis.scripts import ENQUEUE, run_script
from fencedlease._threads import DaemonThreadPool, shutdown_pool

__all__ = ["Handoff"]

T = TypeVar("T")


class Handoff(HandoffBase[redis.Redis]):
    """The Redis release waiter of one [`LeaseManager`][fencedlease.LeaseManager] (see the module).

    ``Handoff(client, prefix, *, grace_ms, linger_s)`` as `HandoffBase`
    says: ``client`` is the manager's ``redis.Redis`` (it carries the queue commands; the listener
    has a connection of its own, see `dedicated_client`). The
    listener is a daemon thread named ``fencedlease-handoff``, started by
    the first wait and joined by `close`. The queueing command runs on a small pool
    (``fencedlease-handoff-io``) so that a stalled Redis cannot stretch a wait past its
    ``timeout_s``: the acquire's bound of ``wait_ms`` plus one round trip holds with the hand-off
    too.
    """

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._io: DaemonThreadPool | None = None
        self._control_on = False  # the listener's control channel is subscribed

    @property
    def listening(self) -> bool:
        """Whether the listener thread is running."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def queue_args(
        self, key: str, owner_token: str, wait_ms: int, final: bool
    ) -> tuple[str, str, str, str] | None:
        """The ARGV tail with which ``acquire.lua`` queues ``owner_token`` when refused (wait_ms,
        grace_ms, listener id, ``'direct'``; no grace when ``final``), so the wait that follows
        sends no queueing command; the waiter is registered from now on, so a grant that comes
        before its wait begins is kept. None when waiters do not take grants from their messages
        or ``key``'s channel is not subscribed yet (the wait then queues as before). No I/O."""
        with self._lock:
            return self._register(key, owner_token, wait_ms, final, threading.Event())

    def forget(self, key: str, owner_token: str) -> None:
        """Unregister what `queue_args` registered for ``owner_token`` (an acquire that ended
        without waiting; idempotent). No I/O."""
        with self._lock:
            self._channels.leave(self._channel(key), waiter_name(owner_token), time.monotonic())

    def wait(self, request: WaitRequest) -> AcquireReply | None:
        """Queue for ``request.key`` and sleep until handed the lease, woken, or
        ``request.timeout_s`` (seconds) passes. ``request.ttl_ms``: the lease asked for (a hand-off
        grants at most that). ``request.queued``: the refused acquire before this wait queued the
        caller (`queue_args`), so no queueing command is sent while the channel stays subscribed.
        Returns the grant the hand-off message carried when the waiter takes it from there (see
        `fencedlease._handoff`), else None.

        Raises:
            BackendError: the queueing command failed (as the acquire itself would).
        """
        until = time.monotonic() + request.timeout_s
        key = request.key
        channel = self._channel(key)
        name = waiter_name(request.owner_token)
        channels = self._channels
        with self._lock:
            known = channels.waiters.get(channel, {}).get(name) if request.queued else None
            event = threading.Event() if known is None else known
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
            time.sleep(request.timeout_s)
            return None
        try:
            if ask and not start:
                self._submit(self._poke)
            with self._lock:
                queued = known is not None and channel in channels.confirmed
            if queued:  # the acquire queued it: only the sleep is left
                event.wait(max(0.0, until - time.monotonic()))
            else:
                self._queue_and_sleep(request, until, channel, event)
        finally:
            with self._lock:
                grant = channels.leave(channel, name, time.monotonic())
        return self._grant(key, grant)

    def _queue_and_sleep(
        self, request: WaitRequest, until: float, channel: str, event: threading.Event
    ) -> None:
        """`wait`'s rounds once the waiter is registered: wait for the channel's subscription,
        queue, sleep until woken or the monotonic instant ``until``."""
        channels = self._channels
        while channel not in channels.confirmed:
            left = until - time.monotonic()
            if left <= 0 or not event.wait(left):
                return  # not subscribed in time: this round is a plain poll
            event.clear()
        left = until - time.monotonic()
        if left < 0.001:
            return
        wait_ms = int(left * 1000)
        queued = self._submit(
            self._enqueue, request.key, request.owner_token, request.ttl_ms, wait_ms, request.final
        )
        try:
            if not queued.result(timeout=left):
                return  # free, or already ours: acquire now
        except concurrent.futures.TimeoutError:
            return  # Redis is slow: this round was a plain poll
        finally:
            # Not answered in time (or the wait was interrupted): a command still in the pool's
            # queue is never sent; one already out may land after the call has ended.
            if not queued.done() and not queued.cancel():
                self._gave_up_on(queued, request.key, request.owner_token)
        left = until - time.monotonic()
        if left > 0:
            event.wait(left)

    def _gave_up_on(
        self, queued: concurrent.futures.Future[bool], key: str, owner_token: str
    ) -> None:
        """Keep the queueing command ``queued`` the wait no longer waits for (`LateQueueing`);
        its end is `_landed`."""
        with self._lock:
            self._late.gave_up_on(queued, key, owner_token)
        queued.add_done_callback(self._landed)  # at once, here, if it has ended meanwhile

    def _landed(self, queued: concurrent.futures.Future[bool]) -> None:
        """A queueing command the wait gave up on has ended: the release its outcome asks for."""
        outcome: bool | None = False  # cancelled: it never left
        if not queued.cancelled():
            outcome = None if queued.exception() is not None else queued.result()
        with self._lock:
            release = self._late.landed(queued, outcome)
        if release is not None:
            release()

    def ended(self, key: str, owner_token: str, holds: bool, release: Callable[[], None]) -> None:
        """The acquire call of ``owner_token`` has ended (see `LateQueueing`). No I/O."""
        with self._lock:
            self._late.ended(key, owner_token, holds, release)

    def _enqueue(self, key: str, owner_token: str, ttl_ms: int, wait_ms: int, final: bool) -> bool:
        keys, args = self._enqueue_args(key, owner_token, ttl_ms, wait_ms, final)
        with backend_errors(f"wait for {key!r}"):
            reply = run_script(self._client, ENQUEUE, keys, args)
        return int(reply) == 1

    def _submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        with self._lock:
            if self._io is None:
                self._io = DaemonThreadPool(4, thread_name_prefix="fencedlease-handoff-io")
            return self._io.submit(fn, *args)

    def _poke(self) -> None:
        """Wake the listener (blocked reading its connection) so it sends a (un)subscribe now."""
        try:
            with map_exceptions(RedisCallError):
                self._client.publish(self._control, b"")
        except RedisCallError as exc:  # it wakes by itself within a second anyway
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
        """In a forked child (see `fencedlease._core.fork`): forget the parent's listener, pool,
        lock and waiters, none of which exist here; the next wait starts a listener of the
        child's own, on a control channel of its own. No I/O."""
        self._channels = Channels(self._channels.linger_s)
        self._late = LateQueueing()
        self._control = control_channel(self._prefix)
        self._listener = listener_id()
        self._reset()

    def _listen_round(
        self, pubsub: Any, subscribe: list[str], unsubscribe: list[str], timeout_s: float
    ) -> dict[str, Any] | None:
        """One round of the listener: send the (un)subscriptions the channel model planned, then
        read one message, waiting ``timeout_s`` seconds at most (None: none came). The control
        channel goes first (redis-py re-subscribes it after a reconnect)."""
        if not self._control_on:
            pubsub.subscribe(self._control)
            self._control_on = True
        if subscribe:
            pubsub.subscribe(*subscribe)
        if unsubscribe:
            pubsub.unsubscribe(*unsubscribe)
        message: dict[str, Any] | None = pubsub.get_message(timeout=timeout_s)
        return message

    def _run(self) -> None:
        listener = dedicated_client(self._client)
        pubsub = listener.pubsub()  # type: ignore[no-untyped-call, unused-ignore]
        channels, lock = self._channels, self._lock
        backoff_s, warned = 0.0, False
        try:
            self._control_on = False
            while True:
                with lock:
                    if self._closed:
                        return
                    subscribe, unsubscribe, timeout_s = channels.plan(time.monotonic())
                try:
                    with map_exceptions(RedisCallError):
                        message = self._listen_round(pubsub, subscribe, unsubscribe, timeout_s)
                    backoff_s = 0.0
                except (RedisCallError, OSError, ValueError) as exc:
                    # redis-py reconnects and re-subscribes on the next call; until then waiters
                    # poll. Back off so a dead server is not hammered. A socket closed under
                    # the pub/sub by another thread (a primary switch drops the pool's
                    # connections) is OSError or "I/O operation on closed file", which redis-py
                    # does not reconnect from: a fresh pub/sub then.
                    if not isinstance(exc, RedisCallError):
                        with (
                            contextlib.suppress(RedisCallError, OSError, ValueError),
                            map_exceptions(RedisCallError),
                        ):
                            pubsub.close()
                        pubsub = listener.pubsub()  # type: ignore[no-untyped-call, unused-ignore]
                        self._control_on = False
                    warned = listener_failed(exc, acl_denial(exc), warned)
                    with lock:
                        channels.lost_connection()
                    backoff_s = min(1.0, max(0.01, backoff_s * 2))
                    time.sleep(backoff_s)
                    continue
                if message is not None:
                    with lock:
                        events = channels.on_message(message)
                        if events and text(message.get("type")) in ("message", "smessage"):
                            self.notified += 1
                    for event in events:
                        event.set()
        except BaseException:
            listener_died()
            raise
        finally:
            with contextlib.suppress(RedisCallError), map_exceptions(RedisCallError):
                pubsub.close()
            if listener is not self._client:
                with contextlib.suppress(RedisCallError), map_exceptions(RedisCallError):
                    listener.connection_pool.disconnect()
