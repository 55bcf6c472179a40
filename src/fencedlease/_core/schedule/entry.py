"""One lease under background renewal (`RenewalEntry`), what a renewal sends for it
(`RenewalItem`, `renewal_items`) and when it is next due (`confirmed_due`). No I/O."""

from __future__ import annotations

from collections.abc import Callable

from fencedlease._core.clock import on_ns_grid
from fencedlease._core.state import LeaseState

__all__ = ["RenewReply", "RenewalEntry", "RenewalItem", "confirmed_due", "renewal_items"]


class RenewalItem(tuple[str, str, int]):
    """What a renewal sends for one lease, ``(key, owner_token, ttl_ms)``: a plain tuple to every
    backend, kept by its `RenewalEntry` from one renewal to the next (a new one only when the
    TTL changed), so a backend may keep its wire form of the lease on it (``wire``, None until
    then) instead of building it again on every renewal."""

    wire: object = None


class RenewalEntry:
    """One lease under background renewal: its state, interval, and the caller's error hook."""

    __slots__ = (
        "active",
        "heartbeat_s",
        "item",
        "next_due",
        "on_renew_error",
        "retry_s",
        "sent_ttl_ms",
        "state",
    )

    def __init__(
        self,
        state: LeaseState,
        heartbeat_ms: int,
        on_renew_error: Callable[[BaseException], object] | None,
    ) -> None:
        self.state = state
        self.heartbeat_s = heartbeat_ms / 1000
        # After a failed round trip, retry sooner than a full heartbeat: a blip should cost little
        # of the margin, yet a dead server is not hammered.
        self.retry_s = min(self.heartbeat_s, max(0.05, self.heartbeat_s / 4))
        self.on_renew_error = on_renew_error
        self.next_due = 0.0
        self.active = False
        self.sent_ttl_ms = state.ttl_ms
        self.item: RenewalItem | None = None


def confirmed_due(entry: RenewalEntry, now: float) -> float:
    """When ``entry`` is next due: one heartbeat after the confirming command was sent, that is
    ``deadline - ttl + heartbeat`` (the deadline counts from the send, rule 2), whatever the
    round trip took. A lease with no known deadline counts from ``now``. A time already past
    means due at once."""
    state = entry.state
    deadline = state.deadline
    if deadline is None:
        return on_ns_grid(now + entry.heartbeat_s)
    return on_ns_grid(deadline - state.ttl_ms / 1000 + entry.heartbeat_s)


def renewal_items(batch: list[RenewalEntry]) -> list[RenewalItem]:
    """The ``(key, owner_token, ttl_ms)`` items to send for ``batch``, each entry's own
    `RenewalItem` (made again only when the lease's TTL changed); each entry remembers the
    TTL it was sent with, because that, not whatever the lease's TTL is when the reply lands, is
    what Redis set (a manual ``renew(ttl_ms=...)`` may have changed it meanwhile)."""
    items: list[RenewalItem] = []
    append = items.append
    for entry in batch:
        state = entry.state
        ttl_ms = entry.sent_ttl_ms = state.ttl_ms
        item = entry.item
        if item is None or item[2] != ttl_ms:
            item = entry.item = RenewalItem((state.key, state.owner_token, ttl_ms))
        append(item)
    return items


RenewReply = int | BaseException
"""Per lease, what a renewal round trip said: the token (renewed), 0 (lost) or an error."""
