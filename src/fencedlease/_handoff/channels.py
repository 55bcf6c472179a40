"""The hand-off's channel model: which waiter waits on which channel, what a manager's listener
must (un)subscribe and when, and which waiter a pub/sub message wakes (with the grant it carried).

Both faces' listeners drive one `Channels` (the thread of `fencedlease._sync.handoff.Handoff`
under its lock, the task of `fencedlease._async.handoff.AsyncHandoff` on its loop); how the hand-off
works is in `fencedlease._handoff`. No I/O.
"""

from __future__ import annotations

from typing import Any

from fencedlease._core.protocol import AcquireReply
from fencedlease._redis.replies import parse_grant, text

__all__ = ["LISTEN_SLICE_S", "Channels"]

LISTEN_SLICE_S = 1.0
"""A listener's longest sleep, in seconds: housekeeping, and a fallback for close()."""


_SHARDED = frozenset({"smessage", "ssubscribe", "sunsubscribe"})


class Channels:
    """Who waits on which channel, and what the listener must (un)subscribe; shared by both faces.

    Every method is called with the owner's lock held (a ``threading.Lock``, or the event loop's
    single thread for the asyncio twin). ``wake(event)`` is how an event is set.
    """

    def __init__(self, linger_s: float) -> None:
        self.linger_s = linger_s
        self.waiters: dict[str, dict[str, Any]] = {}  # channel -> waiter name -> event
        self.grants: dict[str, AcquireReply] = {}  # waiter name -> the grant its message carried
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

    def leave(self, channel: str, name: str, now: float) -> AcquireReply | None:
        """Unregister a waiter; the grant a message carried to it while it waited, if one did
        (kept only while it waits: a message for a waiter gone is dropped)."""
        grant = self.grants.pop(name, None)
        waiters = self.waiters.get(channel)
        if waiters is None:
            return grant
        waiters.pop(name, None)
        if not waiters:
            del self.waiters[channel]
            self.idle_since[channel] = now
        return grant

    def plan(self, now: float) -> tuple[list[str], list[str], float]:
        """What the listener sends now: (subscribe, unsubscribe, seconds until the next plan)."""
        subscribe = sorted(self.requested)
        self.requested.clear()
        self.subscribed.update(subscribe)
        unsubscribe: list[str] = []
        next_s = LISTEN_SLICE_S
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
        """The events to set for one pub/sub message (a sharded one's kinds, ``smessage``,
        ``ssubscribe``, ``sunsubscribe``, read as the plain ones). A hand-off message's grant
        (`fencedlease._redis.replies.parse_grant`) is kept for its waiter, if it waits on that
        channel."""
        kind = text(message.get("type"))
        kind = kind[1:] if kind in _SHARDED else kind
        channel = text(message.get("channel"))
        waiters = self.waiters.get(channel, {})
        if kind == "message":
            name, grant = parse_grant(text(message.get("data")))
            event = waiters.get(name)
            if event is None:
                return []
            if grant is not None:
                self.grants[name] = grant
            return [event]
        if kind == "subscribe":
            if channel in self.subscribed:
                self.confirmed.add(channel)
            # Everyone on the channel re-checks: the first subscription lets waiters queue, and a
            # re-subscription after a lost connection may follow a hand-off nobody heard.
            return list(waiters.values())
        if kind == "unsubscribe" and channel not in self.subscribed:
            self.confirmed.discard(channel)
        return []
