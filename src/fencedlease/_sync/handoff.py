# GENERATED from src/fencedlease/_async/handoff.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""The release waiters of a manager: `Handoff`, the Redis hand-off (its listener a task or a
thread, see `.primitives`), and `SleepWaiter` (polling), which `release_waiter_for`
picks between.

How the hand-off works (the queue, the channel, who is woken) is in `fencedlease._handoff`; the
channel model the hand-off drives is `fencedlease._handoff.channels`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import redis

from fencedlease._core.clock import SYSTEM_CLOCK, Clock
from fencedlease._core.protocol import AcquireReply
from fencedlease._handoff.base import (
    HandoffBase,
    listener_died,
    listener_failed,
    log,
    waiter_name,
)
from fencedlease._handoff.channels import Channels
from fencedlease._handoff.late import LateQueueing
from fencedlease._handoff.waiters import NoQueueing, ReleaseWaiter, WaitRequest
from fencedlease._redis.errors import RedisCallError, acl_denial, backend_errors, map_exceptions
from fencedlease._redis.keys import control_channel, listener_id
from fencedlease._redis.replies import text
from fencedlease._redis.scripts import ENQUEUE

from .clients import dedicated_client
from .primitives import Call, Chores, Event, Lock, Runner, shield, sleep
from .scripts import run_script

__all__ = ["Handoff", "SleepWaiter", "release_waiter_for"]


class SleepWaiter(NoQueueing):
    """Polling only, for backends without release notifications: sleeps the whole
    ``request.timeout_s`` on ``clock`` (`sleep`: a fake clock drives the waits)."""

    queues = False

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock

    def wait(self, request: WaitRequest) -> AcquireReply | None:
        sleep(self._clock, request.timeout_s)
        return None

    def close(self, until: float | None = None) -> None:
        pass

    def _after_fork_in_child(self) -> None:
        pass


class Handoff(HandoffBase[redis.Redis]):
    """The Redis release waiter of one
    [`LeaseManager`][fencedlease.LeaseManager] (see the module).

    ``Handoff(client, prefix, *, grace_ms, linger_s)`` as `HandoffBase` says: ``client`` is
    the manager's ``redis.Redis`` (it carries the queue commands; the listener has a
    connection of its own, see `dedicated_client`, never one of ``client``'s pool). The listener
    (``fencedlease-handoff``, a `Runner`) is started by the first wait and stopped by `close`;
    it logs an unexpected death (`listener_died`) and the next wait starts a new one. The
    queueing command runs off the waiter's path (`Chores`, ``fencedlease-handoff-io``) so that a
    stalled Redis cannot stretch a wait past its ``timeout_s``: the acquire's bound of
    ``wait_ms`` plus one round trip holds with the hand-off too.
    """

    def _reset(self) -> None:
        self._lock = Lock()
        self._listening = Runner("fencedlease-handoff")
        self._chores = Chores("fencedlease-handoff-io")
        self._control_on = False  # the listener's control channel is subscribed

    @property
    def listening(self) -> bool:
        """Whether the listener is running."""
        return self._listening.running

    def queue_args(
        self, key: str, owner_token: str, wait_ms: int, final: bool
    ) -> tuple[str, str, str, str] | None:
        """The ARGV tail with which ``acquire.lua`` queues ``owner_token`` when refused (wait_ms,
        grace_ms, listener id, ``'direct'``; no grace when ``final``), so the wait that follows
        sends no queueing command; the waiter is registered from now on, so a grant that comes
        before its wait begins is kept. None when waiters do not take grants from their messages
        or ``key``'s channel is not subscribed yet (the wait then queues as before). No I/O."""
        with self._lock:
            return self._register(key, owner_token, wait_ms, final, Event())

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
            event = Event() if known is None else known
            closed = self._closed
            if not closed:
                ask = channels.join(channel, name, event)
                start = not self._listening.running
                if start:
                    if self._listening.started:  # it died (logged): a new one subscribes again
                        channels.lost_connection()
                    self._listening.start(self._run, listener_died)
        if closed:
            # After close(): poll, as without the listener. Sleep outside the lock, or the
            # waiters would take turns and each wait outlast its budget.
            sleep(SYSTEM_CLOCK, request.timeout_s)
            return None
        try:
            if ask and not start:
                self._chores.submit(self._poke)
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
        self, request: WaitRequest, until: float, channel: str, event: Event
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
        queued = self._chores.submit(
            self._enqueue, request.key, request.owner_token, request.ttl_ms, wait_ms, request.final
        )
        try:
            answered = queued.wait(left)
        finally:
            # Not answered in time (or the wait was interrupted): a command not started yet is
            # never sent; one already out may land after the call has ended.
            if not queued.done() and not queued.withdraw():
                self._gave_up_on(queued, request.key, request.owner_token)
        if not answered or queued.cancelled() or not queued.result():
            return  # Redis is slow (a plain poll), or the key is free or already ours
        left = until - time.monotonic()
        if left > 0:
            event.wait(left)

    def _gave_up_on(self, queued: Call[bool], key: str, owner_token: str) -> None:
        """Keep the queueing command ``queued`` the wait no longer waits for (`LateQueueing`);
        its end is `_landed`."""
        with self._lock:
            self._late.gave_up_on(queued, key, owner_token)
        queued.on_done(self._landed)  # at once, here, if it has ended meanwhile

    def _landed(self, queued: Call[bool]) -> None:
        """A queueing command the wait gave up on has ended: the release its outcome asks for
        (False: it never left; None: it failed, or was cancelled once it may have been sent)."""
        outcome: bool | None = False
        if not queued.unsent():
            outcome = None if queued.failed() else queued.result()
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

    def _poke(self) -> None:
        """Wake the listener (blocked reading its connection) so it sends a (un)subscribe now."""
        try:
            with map_exceptions(RedisCallError):
                self._client.publish(self._control, b"")
        except RedisCallError as exc:  # it wakes by itself within a second anyway
            log.debug("could not wake the hand-off listener: %s", exc)

    def close(self, until: float | None = None) -> None:
        """Stop the listener and the queueing commands still out, release the listener's
        connection, wake every waiter. Idempotent. Waits until the monotonic instant ``until`` at
        most (None: a thread still blocked on Redis is bounded by the client's socket timeout); a
        listener that died (logged when it did) does not make this raise."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for waiters in self._channels.waiters.values():
                for event in waiters.values():
                    event.set()
        self._listening.stop(until, lambda: self._chores.submit(self._poke))
        self._chores.close(until)

    def _after_fork_in_child(self) -> None:
        """In a forked child (see `fencedlease._core.fork`): forget the parent's listener, calls,
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
                    # the pub/sub (a primary switch drops the pool's connections) is OSError or
                    # "I/O operation on closed file", which redis-py does not reconnect from: a
                    # fresh pub/sub then.
                    if not isinstance(exc, RedisCallError):
                        with (
                            contextlib.suppress(RedisCallError, OSError, ValueError),
                            map_exceptions(RedisCallError),
                        ):
                            pubsub.close()  # type: ignore[no-untyped-call, unused-ignore]
                        pubsub = listener.pubsub()  # type: ignore[no-untyped-call, unused-ignore]
                        self._control_on = False
                    warned = listener_failed(exc, acl_denial(exc), warned)
                    with lock:
                        channels.lost_connection()
                    backoff_s = min(1.0, max(0.01, backoff_s * 2))
                    sleep(SYSTEM_CLOCK, backoff_s)
                    continue
                if message is not None:
                    with lock:
                        events = channels.on_message(message)
                        if events and text(message.get("type")) in ("message", "smessage"):
                            self.notified += 1
                    for event in events:
                        event.set()
        finally:
            try:
                with contextlib.suppress(RedisCallError), map_exceptions(RedisCallError):
                    shield(pubsub.close)
            finally:
                if listener is not self._client:
                    with contextlib.suppress(RedisCallError), map_exceptions(RedisCallError):
                        shield(listener.connection_pool.disconnect)


def release_waiter_for(backend: object, clock: Clock = SYSTEM_CLOCK) -> ReleaseWaiter:
    """The release waiter a manager uses over ``backend``: the backend's own
    (``backend.release_waiter()``, e.g. the Redis hand-off), else `SleepWaiter`
    (polling on ``clock``)."""
    make = getattr(backend, "release_waiter", None)
    waiter: ReleaseWaiter = SleepWaiter(clock) if make is None else make()
    return waiter
