"""What the two Redis hand-offs hold alike (`HandoffBase`), the name a hand-off message gives a
waiter (`waiter_name`), and how a listener logs its failures and its death. How the hand-off
works is in `fencedlease._handoff`. No I/O.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from fencedlease._core.protocol import AcquireReply
from fencedlease._redis.keys import (
    control_channel,
    enqueue_args,
    handoff_channel,
    listener_id,
)
from fencedlease._redis.replication import PrimaryWatch

from .channels import Channels
from .late import LateQueueing

__all__ = [
    "DEFAULT_GRACE_MS",
    "DEFAULT_LINGER_S",
    "LEAVE_ARGS",
    "HandoffBase",
    "listener_died",
    "listener_failed",
    "log",
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
