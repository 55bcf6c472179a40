"""Waking waiters when a lease is released: the hand-off queue and one pub/sub listener per manager.

An acquire with ``wait_ms > 0`` that finds the key held calls a *release waiter* between attempts
instead of sleeping blindly. A backend that can wake waiters provides one (``release_waiter()``);
for Redis that is `Handoff` (a thread) and
`AsyncHandoff` (a task), both built on the channel model of `fencedlease._handoff_channels`
(`Channels`) and the scripts and keys of `fencedlease._redis`:

1. It makes sure the manager's one listener connection (on a pool of its own, never one of the
   caller's pool's connections) is subscribed to the key's channel of this listener,
   ``<prefix>:{<key>}:handoff:<listener id>`` (started lazily on the first wait; a channel nobody
   waits on is unsubscribed after ``linger_s`` seconds, so a steady stream of waiters costs no
   SUBSCRIBE).
2. It queues the waiter in Redis (``enqueue.lua``: one EVALSHA), oldest first, with the listener's
   id. If the key turned out to be free meanwhile, or already handed to this waiter, it returns at
   once: acquire now. Where waiters take grants from their messages (below) and the channel is
   subscribed, the refused acquire before the wait has queued the waiter already, in the same
   script (``queue_args``: the waiter is registered before that acquire is sent), and no
   queueing command is sent.
3. It sleeps until woken or until the retry delay the manager chose has passed.

``release.lua`` hands the lease to the oldest live waiter as a new grant (new fencing token) and
publishes the grant, ``"<sha1>:<fencing token>:<px>"`` (the SHA-1 of that waiter's owner token,
the token it was granted and the PX the key was set with; the owner token never travels), on the
channel of that waiter's listener: only the process that waits for this grant hears it (with one
shared channel per key, every process with a waiter would wake for each grant and all but one
would discard it), and its listener wakes exactly that waiter. Because the lease goes to the
queue's head rather than back to the free pool, the holder that released cannot take it again
before the waiters: every contender is served in arrival order (Go's ``sync.Mutex`` hands off
directly to the oldest waiter in its starvation mode for the same reason; Redisson's
``RedissonFairLock`` keeps a queue of waiters in Redis).

The woken waiter takes the lease in one of two ways:

- *From the message* (a waiter queued ``direct``: the plain Redis backend with ``replica_acks=0``
  and no Sentinel check): no round trip. ``release.lua`` set the key with PX ``ttl_ms`` (the
  waiter's whole TTL) and appended the primary's replication id, which the backend's
  `PrimaryWatch` notes as it notes an acquire's. The
  deadline argument: the key expires at ``R + px``, ``R`` being when Redis ran the release (on
  Redis's clock). The release found the waiter's queue entry, so the command that created that
  entry ran before ``R``, and was sent earlier still; the waiter keeps the monotonic time of the
  first send that may have queued it in this acquire call (``AcquireAttempt.queued_mono``; a later
  poll's send may come after ``R`` and is never used), so ``deadline = queued_mono + px`` is never
  later than Redis's expiry (clock rates assumed equal, as for every lease deadline). The grant is
  taken only if that deadline leaves at least two heartbeats; the renewer then renews it at its
  usual cadence.
- *By a claim* (any other waiter, and a direct one whose deadline is too short, say after a long
  wait): its next acquire finds the key already its own ("already ours": one round trip, no new
  token, the TTL reset; with ``replica_acks`` its ``WAIT`` covers the grant). The key's PX is then
  cut to the waiter's deadline plus ``grace_ms``, so a grant to a waiter that died meanwhile
  blocks the key briefly; a direct waiter that died holds it for its ``ttl_ms``, as a holder that
  dies does.

Polling stays the fallback, so nothing depends on a notification arriving: a lost message (the
listener's connection was killed, a lease expired instead of being released) costs a waiter at most
the retry delay it was sleeping anyway, after which its acquire finds the key free or handed to it
(and claims it). A message that reaches a waiter no longer waiting is dropped.
A waiter's last attempt leaves the queue in the same script when refused (``acquire.lua``'s
``'leave'``, where waiters take grants from their messages), so a release after it hands the key
to the next waiter, never to one that has gone. A waiter that stops waiting otherwise (cancelled,
interrupted, failed, closed; a last attempt that carried no ``'leave'``) releases with its owner
token on the way out (the manager does it): ``release.lua`` takes it out of the queue and passes
on a lease handed to it meanwhile. A queueing command the wait stopped waiting for (no reply
within the wait, or the wait was cancelled or interrupted) may land after the call has ended,
after that clean-up too, and queue a waiter that has gone: `LateQueueing` keeps such commands,
and when one ends after its call did, the manager releases with the owner token once more if the
command queued the caller (or may have, and the call holds no lease under that token), so the
entry, and a lease handed to it meanwhile, is passed on one round trip after it landed.
A waiter that crashed drops out at its deadline (its wait plus ``grace_ms``, on Redis's clock;
none for its last wait); a hand-off to it in that window leaves
the key unclaimed for at most ``2 * grace_ms`` before it expires.

Other backends get `SleepWaiter` (`AsyncSleepWaiter`),
which just sleeps: `release_waiter_for`.

This module holds what both faces share, with no I/O: the waiter protocols, the Redis hand-offs'
common state (`HandoffBase`), the waiter's name, and how a listener logs its failures and its
death; the channel model is `fencedlease._handoff_channels` (`Channels` and `LISTEN_SLICE_S` are
importable from here too).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import attrs

from fencedlease._core.clock import SYSTEM_CLOCK, Clock
from fencedlease._core.protocol import AcquireReply

from ._handoff_channels import LISTEN_SLICE_S, Channels
from ._redis.keys import (
    control_channel,
    enqueue_args,
    handoff_channel,
    listener_id,
)
from ._redis.replication import PrimaryWatch

__all__ = [
    "DEFAULT_GRACE_MS",
    "DEFAULT_LINGER_S",
    "LEAVE_ARGS",
    "LISTEN_SLICE_S",
    "AsyncReleaseWaiter",
    "Channels",
    "HandoffBase",
    "LateQueueing",
    "NoQueueing",
    "ReleaseWaiter",
    "SleepWaiter",
    "WaitRequest",
    "listener_died",
    "listener_failed",
    "release_waiter_for",
    "waiter_name",
]

log = logging.getLogger("fencedlease.handoff")

DEFAULT_GRACE_MS = 200
"""How long after its wait a queued waiter still counts as alive (it polls again in between)."""

DEFAULT_LINGER_S = 5.0
"""How long a channel with no waiter stays subscribed, in seconds (saves SUBSCRIBE churn)."""


def waiter_name(owner_token: str) -> str:
    """The name a hand-off message gives a waiter: the SHA-1 (hex) of its owner token, which Lua
    computes too (``redis.sha1hex``). The owner token itself is a secret and is never published."""
    return hashlib.sha1(owner_token.encode()).hexdigest()  # noqa: S324 (a name, not a MAC)


def listener_failed(exc: BaseException, denied: str | None, warned: bool) -> bool:
    """Log a hand-off listener's failed round (both faces): an ACL refusal (``denied``, the words
    of `acl_denial`: SUBSCRIBE, or a channel outside the user's
    patterns) once as a warning, since it will not heal by itself and waiters only poll
    meanwhile; anything else at debug level. Returns whether a warning was logged."""
    if denied is not None and not warned:
        log.warning("hand-off listener: %s: %s; waiters poll instead", denied, exc)
        return True
    log.debug("hand-off listener: %s", exc)
    return warned


def listener_died() -> None:
    """Log, with the traceback being handled, that a hand-off listener (thread or task) stopped
    on an unexpected error (both faces). Waiters poll until the next wait starts a new one."""
    log.exception("fencedlease hand-off listener stopped; waiters fall back to polling")


@attrs.frozen
class WaitRequest:
    """One wait of an acquire between two attempts, as the manager asks its release waiter for it.

    ``key``: the key the caller waits for; ``owner_token``: the caller's (the key may be handed to
    it); ``ttl_ms``: the lease the caller asks for, in milliseconds (a hand-off grants at most
    that); ``timeout_s``: the longest wait, in seconds (plus one round trip). ``final``: the caller
    makes one last attempt after this wait and then gives up, so it must not be handed the lease
    after ``timeout_s`` (no grace). ``queued``: the refused acquire before this wait queued the
    caller already (``queue_args``).
    """

    key: str
    owner_token: str
    ttl_ms: int
    timeout_s: float
    final: bool = False
    queued: bool = False


class ReleaseWaiter(Protocol):
    """What the sync manager calls between two acquire attempts of a waiting caller.

    ``queues``: whether `wait` queues the caller for a hand-off (a release may then grant
    the key to its owner token; an acquire that gives up must release with that token).
    """

    queues: bool

    def wait(self, request: WaitRequest) -> AcquireReply | None:
        """Return when ``request.key`` may be free (or handed to ``request.owner_token``), or
        after ``request.timeout_s`` seconds at the latest (plus one round trip; see
        `WaitRequest`). Returns the grant a hand-off message carried to a waiter that takes it
        without a claim (see the module; its ``ttl_ms`` is the key's PX, counted from the
        release), else None."""
        ...

    def queue_args(
        self, key: str, owner_token: str, wait_ms: int, final: bool
    ) -> tuple[str, str, str, str] | None:
        """The ARGV tail with which the refused acquire before a wait of ``wait_ms`` queues
        ``owner_token`` itself (the waiter registered from then on), or None: the wait queues
        the caller, if anything does. No I/O."""
        ...

    def leave_args(self, key: str, owner_token: str) -> tuple[str, ...] | None:
        """The ARGV tail with which the last attempt of a caller that queued leaves the queue
        when refused (``acquire.lua``'s ``'leave'``: its give-up needs no release then), or
        None: the manager releases in the background instead. No I/O."""
        ...

    def forget(self, key: str, owner_token: str) -> None:
        """Unregister what `queue_args` registered (idempotent). No I/O."""
        ...

    def ended(self, key: str, owner_token: str, holds: bool, release: Callable[[], None]) -> None:
        """The acquire call of ``owner_token`` has ended (``holds``: with a lease under that
        token): a queueing command of its that is still out calls ``release`` (a release with
        ``owner_token``, in the background) once it ends, if it may have queued a waiter that is
        gone (see `LateQueueing`). No I/O."""
        ...

    def close(self, until: float | None = None) -> None:
        """Stop whatever the waiter started (threads, connections). Idempotent. Waits until the
        monotonic instant ``until`` at most (None: no bound of its own)."""
        ...

    def _after_fork_in_child(self) -> None:
        """In a forked child (see `fencedlease._core.fork`): forget the parent's threads and
        locks. No I/O."""
        ...


class NoQueueing:
    """The queueing part of a release waiter that queues nobody (`SleepWaiter`,
    `AsyncSleepWaiter`): no acquire carries queueing arguments."""

    def queue_args(
        self, key: str, owner_token: str, wait_ms: int, final: bool
    ) -> tuple[str, str, str, str] | None:
        return None

    def leave_args(self, key: str, owner_token: str) -> tuple[str, ...] | None:
        return None

    def forget(self, key: str, owner_token: str) -> None:
        pass

    def ended(self, key: str, owner_token: str, holds: bool, release: Callable[[], None]) -> None:
        pass


class SleepWaiter(NoQueueing):
    """Polling only: sleeps the whole ``request.timeout_s`` on ``clock``
    ([`Clock.sleep`][fencedlease.Clock.sleep], so a fake clock drives the waits), for backends
    without release notifications."""

    queues = False

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock

    def wait(self, request: WaitRequest) -> AcquireReply | None:
        self._clock.sleep(request.timeout_s)
        return None

    def close(self, until: float | None = None) -> None:
        pass

    def _after_fork_in_child(self) -> None:
        pass


class AsyncReleaseWaiter(Protocol):
    """What the asyncio manager awaits between two acquire attempts (see `ReleaseWaiter`)."""

    queues: bool

    async def wait(self, request: WaitRequest) -> AcquireReply | None: ...

    def queue_args(
        self, key: str, owner_token: str, wait_ms: int, final: bool
    ) -> tuple[str, str, str, str] | None: ...

    def leave_args(self, key: str, owner_token: str) -> tuple[str, ...] | None: ...

    def forget(self, key: str, owner_token: str) -> None: ...

    def ended(
        self, key: str, owner_token: str, holds: bool, release: Callable[[], None]
    ) -> None: ...

    async def aclose(self) -> None: ...


class LateQueueing:
    """Queueing commands a wait stopped waiting for while they were out (their reply did not come
    within the wait; the wait was cancelled or interrupted), and what each asks for when it ends.

    Such a command may land after its acquire call ended, even after the call's clean-up release
    (the manager sends one when a waiter gives up), and queue an owner token nobody waits with:
    a later release would hand the key to that entry, and a waiter taking grants from their
    messages would be given its whole ``ttl_ms`` while its manager's listener still hears the
    channel. Once both the call and the command have ended, the command's outcome decides:

    - the call ended holding a lease under that token: nothing, whatever the command did. A
      command that queued the caller ran while another owner held the key, so before the call's
      grant, and that grant (handed to the entry, or a later attempt) took the entry out; a
      release now would end the live lease (a hand-off grant is made under the same token);
    - otherwise, it queued the caller (``queued`` True) or failed or was cancelled once sent
      (None: it may have): release with the owner token, which takes the entry out and passes
      on a lease handed to it meanwhile;
    - it did not queue (False): nothing.

    A command that ends while its call still runs needs nothing: whatever the call does next (its
    grant takes it out of the queue, its give-up releases) reaches Redis after it.

    Handles are whatever the face waits on (a ``concurrent.futures.Future``, an
    ``asyncio.Task``). Called under the owner's lock (the sync face) or on its loop. No I/O.
    """

    def __init__(self) -> None:
        self._out: dict[object, tuple[str, str]] = {}  # handle -> (key, owner token)
        self._count: dict[tuple[str, str], int] = {}  # (key, owner token) -> commands out
        self._ended: dict[tuple[str, str], tuple[bool, Callable[[], None]]] = {}

    def __len__(self) -> int:
        """How many commands are out (for tests)."""
        return len(self._out)

    def gave_up_on(self, handle: object, key: str, owner_token: str) -> None:
        """The wait of ``owner_token`` for ``key`` stopped waiting for the command ``handle``."""
        who = (key, owner_token)
        self._out[handle] = who
        self._count[who] = self._count.get(who, 0) + 1

    def ended(self, key: str, owner_token: str, holds: bool, release: Callable[[], None]) -> None:
        """The acquire call of ``owner_token`` ended (``holds``: with a lease under it);
        ``release`` sends a release with that token in the background."""
        who = (key, owner_token)
        if who in self._count:
            self._ended[who] = (holds, release)

    def landed(self, handle: object, queued: bool | None) -> Callable[[], None] | None:
        """The command ``handle`` ended: ``queued`` True (it queued the caller), False (it did
        not, or it never ran), None (it failed or was cancelled once sent: it may have). Returns
        the release to call now (outside the owner's lock), or None."""
        who = self._out.pop(handle, None)
        if who is None:
            return None
        left = self._count[who] - 1
        if left:
            self._count[who] = left
            ended = self._ended.get(who)
        else:
            del self._count[who]
            ended = self._ended.pop(who, None)
        if ended is None:
            return None
        holds, release = ended
        if not holds and queued is not False:
            return release
        return None


LEAVE_ARGS = ("leave",)
"""``acquire.lua``'s ARGV tail for a caller's last attempt: refused, it leaves the queue."""

ClientT = TypeVar("ClientT")


class HandoffBase(Generic[ClientT]):
    """What the two Redis hand-offs (`Handoff`, a thread;
    `AsyncHandoff`, a task) hold alike: the manager's client
    (``redis.Redis`` or ``redis.asyncio.Redis``) and key ``prefix``, ``grace_ms`` (how long past
    its wait a queued waiter still counts as alive), the `Channels` (``linger_s``: how long
    an unused channel stays subscribed) and the listener's own wake-up channel. No I/O.

    ``direct``: called at each wait, whether the waiter queues to take a hand-off from its
    message with no claim (None: never; the backend says, see the module); ``primary``: the
    backend's `PrimaryWatch`, told the primary such a grant names."""

    queues = True

    def __init__(
        self,
        client: ClientT,
        prefix: str,
        *,
        grace_ms: int = DEFAULT_GRACE_MS,
        linger_s: float = DEFAULT_LINGER_S,
        direct: Callable[[], bool] | None = None,
        primary: PrimaryWatch | None = None,
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._grace_ms = grace_ms
        self._direct = direct
        self._primary = primary
        self._channels = Channels(linger_s)
        self._late = LateQueueing()
        self._control = control_channel(prefix)
        self._listener = listener_id()  # names this manager's channels: only it wakes
        self._closed = False
        self.notified = 0  # waiters woken by a hand-off message (for the benchmark and tests)
        self._reset()

    def _reset(self) -> None:
        """Set up the face's own listener state (a thread, a lock and a pool; or a task); also in
        a forked child, where the parent's do not exist."""

    def _enqueue_args(
        self, key: str, owner_token: str, ttl_ms: int, wait_ms: int, final: bool
    ) -> tuple[tuple[str, str, str], tuple[str, int, int, int, str, str]]:
        """KEYS and ARGV of the queueing script for one wait (see
        `enqueue_args`), naming this listener's channel, and ``direct`` when the backend
        lets a waiter take a grant from its message."""
        prefix, grace_ms, listener = self._prefix, self._grace_ms, self._listener
        return enqueue_args(
            prefix, key, owner_token, ttl_ms, wait_ms, final, grace_ms, listener, self.direct()
        )

    def _register(
        self, key: str, owner_token: str, wait_ms: int, final: bool, event: Any
    ) -> tuple[str, str, str, str] | None:
        """`queue_args` with the owner's lock held: the waiter registered with ``event`` (so a
        grant that comes before its wait begins is kept) and the ARGV tail of ``acquire.lua`` that
        queues it (wait_ms, grace_ms, listener id, ``'direct'``), when waiters take grants from
        their messages and the key's channel is subscribed; else None (nothing registered: the
        wait queues as before)."""
        if self._closed or not self.direct():
            return None
        channel = self._channel(key)
        if channel not in self._channels.confirmed:
            return None
        self._channels.join(channel, waiter_name(owner_token), event)
        grace = 0 if final else self._grace_ms
        return str(wait_ms), str(grace), self._listener, "direct"

    def leave_args(self, key: str, owner_token: str) -> tuple[str, ...] | None:
        """``('leave',)`` where the manager's acquire carries queueing arguments (a waiter that
        takes grants from its messages: the plain Redis backend), else None. No I/O."""
        if self._closed or not self.direct():
            return None
        return LEAVE_ARGS

    def direct(self) -> bool:
        """Whether a waiter queues now to take a hand-off from its message (no claim)."""
        return self._direct is not None and self._direct()

    def _channel(self, key: str) -> str:
        """The channel this listener hears ``key``'s grants to its own waiters on."""
        return handoff_channel(self._prefix, key, self._listener)

    def _grant(self, key: str, grant: AcquireReply | None) -> AcquireReply | None:
        """What a wait returns for the ``grant`` its message carried (None: none came): the grant
        when waiters take grants from their messages, its primary noted by the backend's
        `PrimaryWatch`; else None (the waiter claims)."""
        if grant is None or not self.direct():
            return None
        if self._primary is not None:
            self._primary.seen(grant, key)
        return grant


def release_waiter_for(backend: object, clock: Clock = SYSTEM_CLOCK) -> ReleaseWaiter:
    """The release waiter a sync manager uses over ``backend``: the backend's own
    (``backend.release_waiter()``, e.g. the Redis hand-off), else `SleepWaiter` (polling on
    ``clock``)."""
    make = getattr(backend, "release_waiter", None)
    waiter: ReleaseWaiter = SleepWaiter(clock) if make is None else make()
    return waiter
