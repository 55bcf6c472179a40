"""The release waiters' protocols, one per face (`ReleaseWaiter`, `AsyncReleaseWaiter`), the
request a manager waits with (`WaitRequest`), and the queueing part of a waiter that queues
nobody (`NoQueueing`). The waiters themselves are the faces' ``handoff`` modules; how the
hand-off works is in `fencedlease._handoff`. No I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import attrs

from fencedlease._core.protocol import AcquireReply

__all__ = [
    "AsyncReleaseWaiter",
    "NoQueueing",
    "ReleaseWaiter",
    "WaitRequest",
]


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
    """The queueing part of a release waiter that queues nobody (the faces' polling waiters,
    ``SleepWaiter``): no acquire carries queueing arguments."""

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
