"""The engine shared by every face: clocks, a lease's state, the loss rules, the renewal schedule.

Nothing here does I/O or starts a thread. The sync renewer (a thread) and the async one (a task)
both drive :class:`RenewalSchedule` and both mark loss through :class:`LeaseState`, so the rules
exist once.

Loss rules (after the two-pronged detection in the seed documents):

1. A renewal that answers "the key is gone or another owner's" is a loss, immediately.
2. A lease whose ``ttl_ms`` has passed since the last confirmed acquire or renewal is lost,
   whether or not anyone answered: silence is loss, because after ``ttl_ms`` the key has lapsed.
   The deadline counts from the moment the confirming command was *sent*, the earliest instant Redis
   could have started the TTL, so the local deadline is never later than Redis's.
3. One failed round trip (a timeout, a reset connection) is not a loss; the next tick retries.
4. A deliberate release is not a loss, and a renewal racing it does not report one.
5. Loss is final: a lost lease is never silently renewed back to life.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Protocol

__all__ = [
    "SYSTEM_CLOCK",
    "Clock",
    "LeaseState",
    "LossReason",
    "RenewalEntry",
    "RenewalSchedule",
    "SystemClock",
]


class Clock(Protocol):
    """Where the library reads time. ``monotonic`` (seconds) for deadlines, ``time`` (seconds since
    the epoch) only for ``expires_at``, the wall-clock estimate a caller may persist."""

    def monotonic(self) -> float: ...

    def time(self) -> float: ...


class SystemClock:
    """The real clock: :func:`time.monotonic` and :func:`time.time`."""

    monotonic = staticmethod(time.monotonic)
    time = staticmethod(time.time)


SYSTEM_CLOCK = SystemClock()


class LossReason:
    """Why a lease was declared lost; the text goes into :class:`LeaseLostError`."""

    RENEW_REFUSED = "a renewal found the key gone or owned by another owner"
    RELEASE_REFUSED = "the release found the key gone or owned by another owner"
    DEADLINE = "ttl_ms passed since the last confirmed acquire or renewal"
    RENEWER_FAILED = "the renewer stopped with an unexpected error"
    CLOSED = "the lease manager was closed while the lease was held"


class LeaseState:
    """The mutable facts of one lease, shared by its face object and the renewer.

    ``deadline`` is on the clock's monotonic scale (seconds); None when unknown (a lease restored
    without ``expires_at``). ``releasing`` is set before a release is sent so a renewal racing it
    is not taken for a loss; ``released`` once Redis confirmed it.
    """

    __slots__ = (
        "_listeners",
        "deadline",
        "expires_wall",
        "fencing_token",
        "key",
        "lost",
        "lost_reason",
        "owner_token",
        "released",
        "releasing",
        "ttl_ms",
    )

    def __init__(
        self,
        key: str,
        owner_token: str,
        fencing_token: int | None,
        ttl_ms: int,
        deadline: float | None,
        expires_wall: float | None,
    ) -> None:
        self.key = key
        self.owner_token = owner_token
        self.fencing_token = fencing_token
        self.ttl_ms = ttl_ms
        self.deadline = deadline
        self.expires_wall = expires_wall
        self.lost = False
        self.lost_reason: str | None = None
        self.releasing = False
        self.released = False
        self._listeners: list[Callable[[LeaseState], None]] = []

    @classmethod
    def granted(
        cls,
        key: str,
        owner_token: str,
        fencing_token: int | None,
        ttl_ms: int,
        sent_mono: float,
        sent_wall: float,
    ) -> LeaseState:
        """A lease Redis just granted by a command sent at ``sent_mono`` / ``sent_wall``."""
        seconds = ttl_ms / 1000
        return cls(
            key, owner_token, fencing_token, ttl_ms, sent_mono + seconds, sent_wall + seconds
        )

    @property
    def expires_at(self) -> datetime | None:
        """The client-side estimate of the expiry, timezone-aware UTC; None when unknown."""
        if self.expires_wall is None:
            return None
        return datetime.fromtimestamp(self.expires_wall, tz=timezone.utc)

    def add_listener(self, listener: Callable[[LeaseState], None]) -> None:
        """Call ``listener(state)`` once, when the lease is marked lost (now if it already is)."""
        if self.lost:
            listener(self)
        else:
            self._listeners.append(listener)

    def confirm(self, sent_mono: float, sent_wall: float, ttl_ms: int, fencing_token: int) -> bool:
        """Record a renewal Redis confirmed for a command sent at ``sent_mono``. A lost lease stays
        lost (rule 5): returns False and changes nothing then."""
        if self.lost:
            return False
        seconds = ttl_ms / 1000
        self.ttl_ms = ttl_ms
        self.deadline = sent_mono + seconds
        self.expires_wall = sent_wall + seconds
        if self.fencing_token is None:
            # A lease restored without its token learns it from Redis, which knows it.
            self.fencing_token = fencing_token
        return True

    def mark_lost(self, reason: str) -> bool:
        """Declare the lease lost (once); returns True if this call did it. A released lease is
        never lost."""
        if self.lost or self.released:
            return False
        self.lost = True
        self.lost_reason = reason
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener(self)
        return True

    def check_deadline(self, now_mono: float) -> bool:
        """Apply rule 2 at ``now_mono``; returns whether the lease is lost."""
        if not self.lost and self.deadline is not None and now_mono >= self.deadline:
            self.mark_lost(LossReason.DEADLINE)
        return self.lost


class RenewalEntry:
    """One lease under background renewal: its state, interval, and the caller's error hook."""

    __slots__ = ("active", "heartbeat_s", "next_due", "on_renew_error", "retry_s", "state")

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


RenewReply = int | BaseException
"""Per lease, what a renewal round trip said: the token (renewed), 0 (lost) or an error."""


class RenewalSchedule:
    """Which leases are due for renewal, and whose deadline is next; pure bookkeeping.

    Two heaps with lazy deletion: one ordered by next renewal time, one by loss deadline. The owner
    (a thread or a task) asks :meth:`pop_due` for a batch, sends it as one pipeline, hands the
    replies to :meth:`apply`, marks :meth:`pop_expired` leases lost, and sleeps until
    :meth:`next_wakeup`. All times are seconds on the monotonic clock.
    """

    def __init__(self) -> None:
        self._due: list[tuple[float, int, RenewalEntry]] = []
        self._deadlines: list[tuple[float, int, RenewalEntry]] = []
        self._seq = itertools.count()
        self._members: set[RenewalEntry] = set()

    def __len__(self) -> int:
        return len(self._members)

    def add(self, entry: RenewalEntry, now: float) -> None:
        """Start renewing ``entry``: first renewal one heartbeat from ``now``."""
        entry.active = True
        self._members.add(entry)
        self._push_due(entry, now + entry.heartbeat_s)
        self._push_deadline(entry)

    def remove(self, entry: RenewalEntry) -> None:
        """Stop renewing ``entry`` (its heap items are dropped lazily)."""
        entry.active = False
        self._members.discard(entry)

    def entries(self) -> list[RenewalEntry]:
        """Every active entry, in flight or not (for shutdown)."""
        return list(self._members)

    def _push_due(self, entry: RenewalEntry, due: float) -> None:
        entry.next_due = due
        heapq.heappush(self._due, (due, next(self._seq), entry))

    def _push_deadline(self, entry: RenewalEntry) -> None:
        if entry.state.deadline is not None:
            heapq.heappush(self._deadlines, (entry.state.deadline, next(self._seq), entry))

    def pop_due(self, now: float, limit: int) -> list[RenewalEntry]:
        """Remove and return up to ``limit`` active entries due at ``now``, earliest first."""
        batch: list[RenewalEntry] = []
        due = self._due
        while due and len(batch) < limit:
            when, _, entry = due[0]
            if not entry.active or when != entry.next_due:
                heapq.heappop(due)
                continue
            if when > now:
                break
            heapq.heappop(due)
            entry.next_due = float("inf")  # in flight: not due again until apply() says when
            batch.append(entry)
        return batch

    def pop_expired(self, now: float) -> list[RenewalEntry]:
        """Mark lost (rule 2) and stop renewing every active entry whose deadline is at or before
        ``now``; return them."""
        expired: list[RenewalEntry] = []
        heap = self._deadlines
        while heap:
            when, _, entry = heap[0]
            if not entry.active or when != entry.state.deadline:
                heapq.heappop(heap)
                continue
            if when > now:
                break
            heapq.heappop(heap)
            entry.state.check_deadline(now)
            self.remove(entry)
            expired.append(entry)
        return expired

    def next_wakeup(self, renewal_in_flight: bool) -> float | None:
        """When the owner must next act: the earliest deadline, and the earliest renewal unless one
        batch is still in flight. None when nothing is scheduled."""
        candidates: list[float] = []
        for heap, wanted in ((self._deadlines, True), (self._due, not renewal_in_flight)):
            while heap and not heap[0][2].active:
                heapq.heappop(heap)
            if wanted and heap:
                candidates.append(heap[0][0])
        return min(candidates) if candidates else None

    def apply(
        self,
        batch: list[RenewalEntry],
        sent_mono: float,
        sent_wall: float,
        replies: list[RenewReply] | BaseException,
        now: float,
    ) -> list[tuple[RenewalEntry, BaseException]]:
        """Take the replies of a batch sent at ``sent_mono``: confirm, mark lost (rule 1), or
        reschedule a retry (rule 3). ``replies`` is one item per entry, or one error for the whole
        round trip. Returns the ``(entry, error)`` pairs whose ``on_renew_error`` hook is due."""
        errors: list[tuple[RenewalEntry, BaseException]] = []
        for index, entry in enumerate(batch):
            if not entry.active:
                continue  # released (or expired) while the batch was in flight
            reply = replies if isinstance(replies, BaseException) else replies[index]
            state = entry.state
            if isinstance(reply, BaseException):
                errors.append((entry, reply))
                self._push_due(entry, now + entry.retry_s)
            elif reply > 0:
                if state.confirm(sent_mono, sent_wall, state.ttl_ms, reply):
                    self._push_due(entry, max(now, sent_mono + entry.heartbeat_s))
                    self._push_deadline(entry)
                else:
                    self.remove(entry)
            else:
                if not state.releasing:
                    state.mark_lost(LossReason.RENEW_REFUSED)
                self.remove(entry)
        return errors
