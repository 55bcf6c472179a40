"""A lease's state and the loss rules; how long the release ending a hold may wait. No I/O.

The sync face and the asyncio face (their leases, managers and renewers) all mark loss through
`LeaseState`, so the rules exist once.

Loss rules (loss is detected two ways, by the store's answer and by the local deadline):

1. A renewal that answers "the key is gone or another owner's" is a loss, immediately.
2. A lease whose ``ttl_ms`` has passed since the last confirmed acquire or renewal is lost,
   whether or not anyone answered: silence is loss, because after ``ttl_ms`` the key has lapsed.
   The deadline counts from the moment the confirming command was *sent*, the earliest instant Redis
   could have started the TTL, so the local deadline is never later than Redis's.
3. One failed round trip (a timeout, a reset connection) is not a loss; the next tick retries.
4. A deliberate release is not a loss, and a renewal racing it does not report one. Once the
   body ended in time and the release began, the release's reply decides: rule 2 waits for it,
   since the release ran at the store at some moment before its reply arrived, possibly before
   the deadline. The lease is renewed until that reply (or the release's failure), so a release
   that waits for a connection of a busy pool does not let the key lapse meanwhile.
5. Loss is final: a lost lease is never silently renewed back to life.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from fencedlease._core import fork as _fork
from fencedlease._core.clock import Clock, on_ns_grid
from fencedlease._core.errors import ValidationError
from fencedlease._core.protocol import MAX_FENCING_TOKEN
from fencedlease._core.validate import MAX_MS, check_lease_args

__all__ = [
    "RELEASE_FLOOR_MS",
    "LeaseState",
    "LossReason",
    "release_bound_s",
    "release_wait_more_s",
    "restored_state",
]


class LossReason:
    """Why a lease was declared lost; the text goes into
    [`LeaseLostError`][fencedlease.LeaseLostError]."""

    RENEW_REFUSED = "a renewal found the key gone or owned by another owner"
    RELEASE_REFUSED = "the release found the key gone or owned by another owner"
    DEADLINE = "ttl_ms passed since the last confirmed acquire or renewal"
    RENEWER_FAILED = "the renewer stopped with an unexpected error"
    CLOSED = "the lease manager was closed while the lease was held"
    FORKED = "this process was forked after the lease was acquired: it belongs to the parent"


class LeaseState:
    """The mutable facts of one lease, shared by its face object and the renewer.

    ``deadline`` is on the clock's monotonic scale (seconds); None when unknown (a lease restored
    without ``expires_at``). ``releasing`` is set when a release begins (it may still wait for a
    connection) so a renewal racing it is not taken for a loss and the deadline waits for the
    release's reply (rule 4); ``released`` once Redis confirmed it.
    """

    __slots__ = (
        "_listeners",
        "confirmed_sent",
        "confirmed_ttl_ms",
        "deadline",
        "deadline_moved",
        "expires_wall",
        "fencing_scope",
        "fencing_token",
        "generation",
        "key",
        "lost",
        "lost_reason",
        "on_event",
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
        # The send of the newest command Redis confirmed, and its TTL (see confirm).
        self.confirmed_sent = -math.inf
        self.confirmed_ttl_ms = ttl_ms
        self.lost = False
        self.lost_reason: str | None = None
        self.releasing = False
        self.released = False
        self._listeners: list[Callable[[LeaseState], None]] = []
        self.generation = _fork.generation  # the process it belongs to (see _fork)
        # The counter that issued fencing_token (the backend's fencing_scope of the key), or None
        # for a backend that names none; set by the manager that granted or restored the lease.
        self.fencing_scope: str | None = None
        # Set by a renewer while it watches this lease: a renewal it did not send itself (a
        # manual ``lease.renew()``) moved the deadline, and the renewer must watch the new one.
        self.deadline_moved: Callable[[], None] | None = None
        # The manager's ``on_event`` hook (called with a LeaseEvent), set when it granted or
        # restored the lease; see _events.
        self.on_event: Callable[[Any], object] | None = None

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
        state = cls(
            key,
            owner_token,
            fencing_token,
            ttl_ms,
            on_ns_grid(sent_mono + seconds),
            sent_wall + seconds,
        )
        state.confirmed_sent = sent_mono
        return state

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

    def confirm(
        self,
        sent_mono: float,
        sent_wall: float,
        ttl_ms: int,
        fencing_token: int,
        deadline: float | None = None,
    ) -> bool:
        """Record a renewal Redis confirmed for a command sent at ``sent_mono``. A lost lease stays
        lost (rule 5): returns False and changes nothing then. ``deadline``: the new deadline,
        ``on_ns_grid(sent_mono + ttl_ms / 1000)``, when the caller has it already (a batch
        computes it once for all its leases of one TTL).

        Two commands in flight at once (a manual ``renew(ttl_ms=...)`` beside a background
        batch, on two connections) may run in either order, and the one that runs last sets
        Redis's expiry. So the deadline moves to the send + TTL only for the newest send with
        the TTL last confirmed (the usual case); a reply for a command sent before the newest
        confirmed one can only shorten the deadline (it may have run last), and the first
        newer one with another TTL counts the shorter of the two TTLs (the one confirmed
        before it may have run after it). The deadline is never later than Redis's expiry. A
        lease restored in this process has no command confirmed before: its first renewal
        counts its own TTL."""
        if self.lost:
            return False
        seconds = ttl_ms / 1000
        newest = sent_mono >= self.confirmed_sent
        if newest and (ttl_ms == self.confirmed_ttl_ms or self.confirmed_sent == -math.inf):
            self.deadline = on_ns_grid(sent_mono + seconds) if deadline is None else deadline
            self.expires_wall = sent_wall + seconds
            self.confirmed_sent, self.confirmed_ttl_ms = sent_mono, ttl_ms
            self.ttl_ms = ttl_ms
        elif newest:
            shorter = min(ttl_ms, self.confirmed_ttl_ms) / 1000
            self.deadline = on_ns_grid(sent_mono + shorter)
            self.expires_wall = sent_wall + shorter
            self.confirmed_sent, self.confirmed_ttl_ms = sent_mono, ttl_ms
            self.ttl_ms = ttl_ms
        else:  # sent before the newest confirmed command: it may have run after it
            late = on_ns_grid(sent_mono + seconds)
            self.deadline = late if self.deadline is None else min(self.deadline, late)
            wall = sent_wall + seconds
            self.expires_wall = wall if self.expires_wall is None else min(self.expires_wall, wall)
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

    def inherited(self) -> bool:
        """Whether this process is a fork child of the one the lease belongs to (see
        `fencedlease._core.fork`). Such a lease is marked lost (reason ``FORKED``) here, and must
        get no I/O: renewing or releasing it would act on the parent's lease. The listeners are
        not called: they are the parent's threads and event loops."""
        if self.generation == _fork.generation:
            return False
        if not self.lost and not self.released:
            self.lost, self.lost_reason = True, LossReason.FORKED
        self._listeners = []
        self.deadline_moved = None
        return True

    def release_begins(self) -> None:
        """A release begins (rule 4): from here its reply decides, a renewal racing it reports no
        loss, and no second release or manual renewal starts. The background renewal goes on
        until `release_failed` or the reply."""
        self.releasing = True

    def release_failed(self) -> None:
        """The release got no answer (an error, a cancellation): rule 2 applies again, and a new
        release may begin."""
        self.releasing = False

    def renewal_stopped(self, reason: str) -> None:
        """The background renewal stopped for good (the manager closed, the renewer failed): a
        loss, unless a release is under way, whose reply decides (rule 4)."""
        if not self.releasing:
            self.mark_lost(reason)

    def check_deadline(self, now_mono: float) -> bool:
        """Apply rule 2 at ``now_mono``; returns whether the lease is lost. Not while a release is
        in flight (rule 4): its reply decides, since it ran at the store at some moment before the
        reply arrived, possibly before the deadline. A lease inherited through fork is lost."""
        if self.generation != _fork.generation:
            self.inherited()
        if (
            not self.lost
            and not self.releasing
            and self.deadline is not None
            and now_mono >= self.deadline
        ):
            self.mark_lost(LossReason.DEADLINE)
        return self.lost


def restored_state(
    key: str,
    owner_token: str,
    ttl_ms: int,
    expires_at: datetime | None,
    fencing_token: int | None,
    clock: Clock,
) -> LeaseState:
    """The state of a lease rebuilt from persisted values (``restore`` on either face); no I/O.

    Invents nothing: without ``expires_at`` there is no local deadline; without
    ``fencing_token`` the token is None until a renewal learns it.

    Raises:
        ValidationError: ``key``/``owner_token`` not non-empty strings, ``ttl_ms`` out of
            bounds, ``expires_at`` not a timezone-aware ``datetime`` (or its UTC form out of the
            ``datetime`` range), ``expires_at`` more than ``MAX_MS`` milliseconds ahead of
            ``clock.time()`` (no lease outlives its largest ``ttl_ms``), ``fencing_token`` not an
            int in 1..2**63-1 (the counter's range).
    """
    key, owner_token, ttl_ms = check_lease_args(key, owner_token, ttl_ms)
    if fencing_token is not None and (
        not isinstance(fencing_token, int)
        or isinstance(fencing_token, bool)
        or not 1 <= fencing_token <= MAX_FENCING_TOKEN
    ):
        raise ValidationError(
            "fencing_token",
            f"fencing_token must be an int, 1 <= fencing_token <= {MAX_FENCING_TOKEN}, or None;"
            f" got {fencing_token!r}",
        )
    if fencing_token is not None:
        fencing_token = int(fencing_token)
    deadline = expires_wall = None
    if expires_at is not None:
        if not isinstance(expires_at, datetime) or expires_at.utcoffset() is None:
            raise ValidationError(
                "expires_at", "expires_at must be a timezone-aware datetime (UTC) or None"
            )
        try:
            expires_utc = expires_at.astimezone(timezone.utc)
        except (OverflowError, ValueError):  # datetime.min at +01:00 is before year 1 in UTC
            raise ValidationError(
                "expires_at", f"expires_at is out of the datetime range in UTC; got {expires_at!r}"
            ) from None
        expires_wall = expires_utc.timestamp()
        ahead_s = expires_wall - clock.time()
        if round(ahead_s * 1000) > MAX_MS:
            raise ValidationError(
                "expires_at",
                f"expires_at must be at most {MAX_MS} milliseconds from now (the largest ttl_ms);"
                f" got {expires_at.isoformat()}",
            )
        deadline = on_ns_grid(clock.monotonic() + ahead_s)
    return LeaseState(key, owner_token, fencing_token, ttl_ms, deadline, expires_wall)


RELEASE_FLOOR_MS = 100
"""The least time, in milliseconds, the release ending a hold may wait for its reply (see
`release_bound_s`): a lease at or past its deadline still gets one short try."""


def release_bound_s(state: LeaseState, now_mono: float) -> float:
    """How long, in seconds, the release that ends a ``hold``/``with_lease`` (either face) may wait
    for its reply: until the lease's local deadline, and at least `RELEASE_FLOOR_MS`.

    Waiting longer gains nothing: once the release is sent nothing renews the lease, so at its
    deadline the key has lapsed (or lapses within the round trip that confirmed it) by itself. A
    release that gets no reply in time leaves the lease to expire at its TTL, which is safe since
    the key is ours, and the hold reports it as a failed release
    ([`BackendError`][fencedlease.BackendError], or [`LeaseLostError`][fencedlease.LeaseLostError]
    when the lease was lost). Without a deadline (a restored lease that never renewed): ``ttl_ms``.
    """
    floor = RELEASE_FLOOR_MS / 1000
    if state.deadline is None:
        return max(floor, state.ttl_ms / 1000)
    return max(floor, state.deadline - now_mono)


def release_wait_more_s(state: LeaseState, now_mono: float) -> float | None:
    """After the release ending a hold waited `release_bound_s` (or a later slice) with no
    reply: how much longer it may wait, in seconds, or None to give up.

    The background renewal goes on while a release waits (rule 4), so a release that waits only
    for a connection (a busy pool) while Redis answers the renewals keeps a deadline that moves:
    it waits on, to that deadline. A hung store confirms no renewal, the deadline stays, and the
    release gives up: the caller is never held past the lease's own deadline.
    """
    if state.deadline is None or state.lost:
        return None
    left = state.deadline - now_mono
    return left if left > 0 else None
