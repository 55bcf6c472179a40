"""The engine shared by every face: clocks, a lease's state, the loss rules, the renewal schedule.

Nothing here does I/O or starts a thread. The sync renewer (a thread) and the async one (a task)
both drive :class:`RenewalSchedule` and both mark loss through :class:`LeaseState`, so the rules
exist once.

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

import heapq
import itertools
import random
import socket
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Protocol

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError, NoPermissionError, NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import _fork
from ._errors import BackendError, LeaseLostError, ValidationError
from ._protocol import (
    MAX_FENCING_TOKEN,
    SCRIPT_REFUSAL,
    AcquireReply,
    new_owner_token,
    owner_fingerprint,
)
from ._validate import check_key, check_ms

__all__ = [
    "SYSTEM_CLOCK",
    "AcquireAttempt",
    "AsyncClock",
    "Clock",
    "LeaseState",
    "LeaseView",
    "LossReason",
    "RenewalEntry",
    "RenewalSchedule",
    "SystemClock",
    "confirmed_due",
    "is_ambiguous",
    "may_have_written",
    "never_sent",
    "on_ns_grid",
    "release_bound_s",
    "release_wait_more_s",
    "renewal_items",
    "restored_state",
]


class Clock(Protocol):
    """Where the library reads time, and how it waits. ``monotonic`` (seconds) for deadlines,
    ``time`` (seconds since the epoch) only for ``expires_at``, the wall-clock estimate a caller
    may persist; ``sleep(seconds)`` for the sync manager's wait between two acquire attempts
    (``retry_delay_ms``) on a store without release notifications, so a fake clock drives the
    waits too (:class:`~fencedlease.testing.FakeClock`)."""

    def monotonic(self) -> float: ...

    def time(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class AsyncClock(Clock, Protocol):
    """A :class:`Clock` the asyncio face can wait on: ``async_sleep(seconds)`` is its wait between
    two acquire attempts, as ``sleep`` is the sync face's. A clock without ``async_sleep`` (such as
    :class:`SystemClock`) is waited on with :func:`asyncio.sleep`, in real time."""

    async def async_sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock: :func:`time.monotonic`, :func:`time.time` and :func:`time.sleep`. (The
    asyncio face waits on :func:`asyncio.sleep` with it: the sync face imports no asyncio.)"""

    monotonic = staticmethod(time.monotonic)
    sleep = staticmethod(time.sleep)
    time = staticmethod(time.time)  # last: the name shadows the module in this class body


SYSTEM_CLOCK = SystemClock()


def on_ns_grid(seconds: float) -> float:
    """``seconds`` rounded to the nanosecond: how every moment the core computes by adding a
    duration (a deadline, a renewal's due time, an acquire's budget) is kept.

    Float sums drift from the decimal they stand for (``0.1 + 0.05`` is
    ``0.15000000000000002``), so a due time so computed would lie an ulp after the clock reading
    that should reach it: a :class:`~fencedlease.testing.FakeClock` stepped by exactly one
    heartbeat (its readings are whole nanoseconds, ``ns / 1e9``) would miss that step's renewal,
    and a renewer would wait a near-zero slice again and again. Rounded, the two are the same
    float; a real clock loses under half a nanosecond.
    """
    return round(seconds, 9)


class LossReason:
    """Why a lease was declared lost; the text goes into :class:`LeaseLostError`."""

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
        "deadline",
        "deadline_moved",
        "expires_wall",
        "fencing_token",
        "generation",
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
        self.generation = _fork.generation  # the process it belongs to (see _fork)
        # Set by a renewer while it watches this lease: a renewal it did not send itself (a
        # manual ``lease.renew()``) moved the deadline, and the renewer must watch the new one.
        self.deadline_moved: Callable[[], None] | None = None

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
            key, owner_token, fencing_token, ttl_ms, on_ns_grid(sent_mono + seconds),
            sent_wall + seconds,
        )  # fmt: skip

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
        self.deadline = on_ns_grid(sent_mono + seconds)
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

    def inherited(self) -> bool:
        """Whether this process is a fork child of the one the lease belongs to (see
        :mod:`fencedlease._fork`). Such a lease is marked lost (reason ``FORKED``) here, and must
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
        until :meth:`release_failed` or the reply."""
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


class RenewalEntry:
    """One lease under background renewal: its state, interval, and the caller's error hook."""

    __slots__ = (
        "active",
        "heartbeat_s",
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


def renewal_items(batch: list[RenewalEntry]) -> list[tuple[str, str, int]]:
    """The ``(key, owner_token, ttl_ms)`` items to send for ``batch``; each entry remembers the
    TTL it was sent with, because that, not whatever the lease's TTL is when the reply lands, is
    what Redis set (a manual ``renew(ttl_ms=...)`` may have changed it meanwhile)."""
    items = []
    for entry in batch:
        state = entry.state
        entry.sent_ttl_ms = state.ttl_ms
        items.append((state.key, state.owner_token, state.ttl_ms))
    return items


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
        """Start renewing ``entry``: first renewal one heartbeat after the confirming command was
        sent (the deadline's origin, see :func:`confirmed_due`), not after its reply came: a slow
        round trip must not eat into the margin. At ``now`` at once if that moment has passed."""
        entry.active = True
        self._members.add(entry)
        self._push_due(entry, confirmed_due(entry, now))
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

    def deadline_moved(self, entry: RenewalEntry) -> None:
        """Watch ``entry``'s new deadline after a renewal the schedule did not apply itself."""
        if entry.active:
            self._push_deadline(entry)

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

    def pop_batch(self, now: float, limit: int) -> list[RenewalEntry]:
        """:meth:`pop_due`, then, if anything was due, fill the batch up to ``limit`` with the
        entries due next, as long as each is due within half its own heartbeat.

        Renewing early is always safe (it only moves the deadline later), and it is what keeps the
        round trips down: leases acquired at scattered moments would otherwise each get a round
        trip of their own. Renewed together, they are due together again, so ``n`` leases settle
        into ``ceil(n / limit)`` round trips per heartbeat. No entry is renewed more than half a
        heartbeat early.
        """
        batch = self.pop_due(now, limit)
        if not batch:
            return batch
        due = self._due
        while due and len(batch) < limit:
            when, _, entry = due[0]
            if not entry.active or when != entry.next_due:
                heapq.heappop(due)
                continue
            if when > now + entry.heartbeat_s / 2:
                break
            heapq.heappop(due)
            entry.next_due = float("inf")
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
                self._push_due(entry, on_ns_grid(now + entry.retry_s))
            elif reply > 0:
                if state.confirm(sent_mono, sent_wall, entry.sent_ttl_ms, reply):
                    self._push_due(entry, confirmed_due(entry, now))
                    self._push_deadline(entry)
                else:
                    self.remove(entry)
            else:
                if not state.releasing:
                    state.mark_lost(LossReason.RENEW_REFUSED)
                self.remove(entry)
        return errors


RELEASE_FLOOR_MS = 100
"""The least time, in milliseconds, the release ending a hold may wait for its reply (see
:func:`release_bound_s`): a lease at or past its deadline still gets one short try."""


def release_bound_s(state: LeaseState, now_mono: float) -> float:
    """How long, in seconds, the release that ends a ``hold``/``with_lease`` (either face) may wait
    for its reply: until the lease's local deadline, and at least :data:`RELEASE_FLOOR_MS`.

    Waiting longer gains nothing: once the release is sent nothing renews the lease, so at its
    deadline the key has lapsed (or lapses within the round trip that confirmed it) by itself. A
    release that gets no reply in time leaves the lease to expire at its TTL, which is safe since
    the key is ours, and the hold reports it as a failed release (:class:`BackendError`, or
    :class:`LeaseLostError` when the lease was lost). Without a deadline (a restored lease that
    never renewed): ``ttl_ms``.
    """
    floor = RELEASE_FLOOR_MS / 1000
    if state.deadline is None:
        return max(floor, state.ttl_ms / 1000)
    return max(floor, state.deadline - now_mono)


def release_wait_more_s(state: LeaseState, now_mono: float) -> float | None:
    """After the release ending a hold waited :func:`release_bound_s` (or a later slice) with no
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


_NOT_SENT = frozenset({"No connection available.", "Too many connections"})
"""The messages of redis-py's ``ConnectionError`` when the pool had no connection to give: a
``BlockingConnectionPool`` that timed out waiting (sync and asyncio), or an exhausted
``ConnectionPool`` before ``MaxConnectionsError`` existed."""


# The OS errors that only a connect can raise: the command was never written anywhere.
_CONNECT_ERRORS = (ConnectionRefusedError, FileNotFoundError, socket.gaierror)


def never_sent(exc: BackendError) -> bool:
    """True when the store was never reached, so the command cannot have run: an exhausted
    connection pool (``MaxConnectionsError``, or a ``BlockingConnectionPool`` whose wait timed out:
    a plain ``ConnectionError("No connection available.")``), or a connection that was never
    established (refused, a unix socket path that does not exist, a host name that does not
    resolve, or a connect that timed out). A reset or a timeout on an established connection is
    not this: the command may have landed (see :func:`is_ambiguous`)."""
    cause = exc.__cause__
    if isinstance(cause, MaxConnectionsError):
        return True
    if not isinstance(cause, (RedisConnectionError, RedisTimeoutError)):
        return False
    if (
        isinstance(cause, RedisConnectionError)
        and len(cause.args) == 1
        and cause.args[0] in _NOT_SENT
    ):
        return True
    if isinstance(cause, RedisTimeoutError) and str(cause).startswith("Timeout connecting"):
        return True  # redis-py's connect timeout (both faces); reads say "Timeout reading"
    seen: set[int] = set()
    error: BaseException | None = cause
    while error is not None and id(error) not in seen:  # redis-py raises inside the OS error
        seen.add(id(error))
        if isinstance(error, _CONNECT_ERRORS):
            return True
        error = error.__cause__ or error.__context__
    return False


def is_ambiguous(exc: BackendError) -> bool:
    """True when a command may have run although no reply came (a connection reset or a timeout
    after sending), so only an idempotent retry is safe: for acquire, the same owner token. A
    command that never left (:func:`never_sent`: an exhausted pool, a refused connection) is not
    ambiguous: nothing ran, so nothing needs cleaning up."""
    if never_sent(exc):
        return False
    return isinstance(exc.__cause__, (RedisConnectionError, RedisTimeoutError))


def may_have_written(exc: BackendError) -> bool:
    """True when the command that failed with ``exc`` may have changed the store, so whatever it
    may have granted must be released with the same owner token.

    "May have written": an ambiguous error (:func:`is_ambiguous`: no reply came), and an error
    reply from inside a running script: Redis does not roll a script back, so a command that
    failed after an earlier write of the script (a command an ACL denies, an out-of-memory
    refusal, a key of another type the script did not check) leaves that write in place.

    "Nothing was written": a lease script's own refusal (its message starts with
    :data:`~fencedlease._protocol.SCRIPT_REFUSAL`; every script checks its keys before its first
    write), a refusal before the script ran (``NOSCRIPT``; ``NOPERM`` for ``EVALSHA`` itself,
    whose message names no script), a command that never left (:func:`never_sent`: a pool with no
    free connection, a connection that was never made), and an error that is not Redis's.

    One limit: a client whose own retry policy (redis-py's ``retry=``) resends a command on a new
    connection reports only its last try; if an earlier try landed and the last was refused, the
    grant it made lapses at its TTL instead of being released (an unused grant, never a second
    holder). The managers' own resend after an ambiguous error is tracked and cleaned up.
    """
    if is_ambiguous(exc):
        return True
    cause = exc.__cause__
    if not isinstance(cause, ResponseError) or isinstance(cause, NoScriptError):
        return False
    message = str(cause)
    if isinstance(cause, NoPermissionError) and "script" not in message:
        return False
    return not message.startswith(SCRIPT_REFUSAL)


class AcquireAttempt:
    """The pure half of one acquire call, shared by the sync and async loops.

    It owns the attempt's owner token (one per call, reused by every retry, so a retry after a
    lost reply is recognised by the script), the wait budget (``wait_ms`` on the monotonic clock),
    the retry delay (``retry_delay_ms`` randomised ±50% so waiters do not retry in lock-step), the
    ambiguous-error rule, and what a grant becomes. A face's loop::

        attempt.sending()
        try:
            reply = backend.acquire(key, attempt.owner_token, ttl_ms)      # (await)
        except BackendError as exc:
            if not attempt.may_resend(exc):
                raise
            attempt.sending()
            reply = backend.acquire(key, attempt.owner_token, ttl_ms)      # (await)
        if reply.acquired:
            return attempt.granted(reply)        # a LeaseState
        delay = attempt.not_acquired()           # seconds to sleep, None: the budget is spent

    ``uncertain`` tells whether the key may be held under this owner token without the caller
    knowing: a command was sent and not answered, or an ambiguous error was seen. An attempt
    abandoned in that state (cancelled, or failed) must be cleaned up by a release with
    ``owner_token``.
    """

    __slots__ = (
        "_ambiguous",
        "_clock",
        "_in_flight",
        "_uniform",
        "final_wait",
        "give_up",
        "key",
        "owner_token",
        "queued",
        "retry_delay_ms",
        "sent_mono",
        "sent_wall",
        "ttl_ms",
    )

    def __init__(
        self,
        key: str,
        ttl_ms: int,
        wait_ms: int,
        retry_delay_ms: int,
        clock: Clock,
        uniform: Callable[[float, float], float] | None = None,
    ) -> None:
        self.key = key
        self.ttl_ms = ttl_ms
        self.retry_delay_ms = retry_delay_ms
        self.owner_token = new_owner_token()
        self._clock = clock
        self._uniform = random.uniform if uniform is None else uniform  # looked up per call
        self.give_up = on_ns_grid(clock.monotonic() + wait_ms / 1000)
        self.sent_mono = self.sent_wall = 0.0
        self._in_flight = False
        self._ambiguous = False
        self.final_wait = False
        # Set before a wait that queues the caller for a hand-off: from then on a release may grant
        # the key to owner_token at any moment, until the caller holds it or cleans up.
        self.queued = False

    @property
    def uncertain(self) -> bool:
        """Whether the key may be held under :attr:`owner_token` unbeknown to the caller."""
        return self._in_flight or self._ambiguous or self.queued

    def sending(self) -> None:
        """Record that an acquire is about to be sent: the deadline of a grant counts from now."""
        self.sent_mono, self.sent_wall = self._clock.monotonic(), self._clock.time()
        self._in_flight = True

    def may_resend(self, exc: BackendError) -> bool:
        """Whether to send the same acquire once more after ``exc`` (see :func:`is_ambiguous`).

        An error reply after a possible write (:func:`may_have_written`) is not resent (it would
        fail again) but leaves the attempt :attr:`uncertain`: the caller releases with
        :attr:`owner_token`."""
        if is_ambiguous(exc):
            self._ambiguous = True  # sticky: the lost command may still land after a retry
            # A reset connection fails fast: resend at once. A timeout means Redis may be
            # stalled: resend only while the wait budget lasts, so the call keeps its bound of
            # wait_ms plus one round trip.
            return isinstance(exc.__cause__, RedisConnectionError) or (
                self._clock.monotonic() < self.give_up
            )
        if may_have_written(exc):
            self._ambiguous = True  # the script failed after a possible write: clean up
            return False
        self._in_flight = False  # Redis refused it: nothing was written
        return False

    def granted(self, reply: AcquireReply) -> LeaseState:
        """The state of the lease ``reply`` granted (``reply.acquired`` must be true)."""
        self._in_flight = False
        return LeaseState.granted(
            self.key, self.owner_token, reply.fencing_token, self.ttl_ms, self.sent_mono,
            self.sent_wall,
        )  # fmt: skip

    def not_acquired(self) -> float | None:
        """After a "held by another owner" reply: the seconds to sleep before the next try (never
        past the wait budget), or None when the budget is spent."""
        self._in_flight = False
        remaining = on_ns_grid(self.give_up - self._clock.monotonic())
        if remaining <= 0:
            return None
        delay = self.retry_delay_ms / 1000 * self._uniform(0.5, 1.5)
        # The wait that uses up the budget is followed by one last attempt, then the caller
        # gives up: a release waiter must not hand the lease over after it.
        self.final_wait = remaining <= delay
        return min(delay, remaining)


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
            bounds, ``expires_at`` naive, ``fencing_token`` not an int in 1..2**63-1.
    """
    check_key(key)
    check_key(owner_token, "owner_token")
    ttl_ms = check_ms("ttl_ms", ttl_ms, 1)
    if fencing_token is not None and (
        not isinstance(fencing_token, int)
        or isinstance(fencing_token, bool)
        or not 1 <= fencing_token <= MAX_FENCING_TOKEN
    ):
        raise ValidationError(
            "fencing_token",
            f"fencing_token must be an int in 1..2**63-1 or None; got {fencing_token!r}",
        )
    deadline = expires_wall = None
    if expires_at is not None:
        if not isinstance(expires_at, datetime) or expires_at.utcoffset() is None:
            raise ValidationError(
                "expires_at", "expires_at must be a timezone-aware datetime (UTC) or None"
            )
        expires_wall = expires_at.astimezone(timezone.utc).timestamp()
        deadline = on_ns_grid(clock.monotonic() + (expires_wall - clock.time()))
    return LeaseState(key, owner_token, fencing_token, ttl_ms, deadline, expires_wall)


class LeaseView:
    """The face-neutral half of a lease handle: its facts and the loss check, no I/O.

    :class:`~fencedlease.Lease` and :class:`~fencedlease.aio.AsyncLease` add ``renew``,
    ``release`` and ``wait_lost`` (blocking or awaited) on top, so every attribute below is
    defined once for both faces.

    ``owner_token`` proves ownership to the store; it is a secret and never appears in ``repr``.
    ``fencing_token`` is the grant's number, strictly larger than every earlier grant's of the key;
    hand it to the storage you write to (see :class:`~fencedlease.FencedResource`). It is None only
    for a lease restored without one (the first successful ``renew()`` learns it from the store).
    """

    __slots__ = ("_clock", "_state")

    def __init__(self, state: LeaseState, clock: Clock) -> None:
        self._state = state
        self._clock = clock

    def __repr__(self) -> str:
        state = self._state
        status = "lost" if state.lost else "released" if state.released else "held"
        return (
            f"<{type(self).__name__} key={state.key!r} fencing_token={state.fencing_token}"
            f" owner={owner_fingerprint(state.owner_token)} ttl_ms={state.ttl_ms} {status}>"
        )

    @property
    def key(self) -> str:
        """The caller's key (without the store's prefix)."""
        return self._state.key

    @property
    def owner_token(self) -> str:
        """The secret that proves ownership; persist it to ``restore()`` the lease later."""
        return self._state.owner_token

    @property
    def fencing_token(self) -> int | None:
        """The grant's fencing token (see the class docstring)."""
        return self._state.fencing_token

    @property
    def owner_fingerprint(self) -> str:
        """A non-secret name for the owner token (16 hex characters)."""
        return owner_fingerprint(self._state.owner_token)

    @property
    def ttl_ms(self) -> int:
        """The TTL in milliseconds set by the last acquire or renewal."""
        return self._state.ttl_ms

    @property
    def expires_at(self) -> datetime | None:
        """Client-side estimate of the expiry (UTC, aware), for persisting; None when unknown.

        It is counted from when the last confirming command was sent, so it is never later than
        the store's own expiry by more than clock drift. Only the store knows whether the lease is
        still held: ``renew()`` asks it.
        """
        return self._state.expires_at

    @property
    def lost(self) -> bool:
        """True once the lease is known to be gone (renewal refused, or ``ttl_ms`` passed since the
        last confirmation). A deliberate ``release()`` is not a loss."""
        return self._state.check_deadline(self._clock.monotonic())

    @property
    def lost_reason(self) -> str | None:
        """Why the lease was lost, or None."""
        return self._state.lost_reason

    def check(self) -> None:
        """Raise :class:`LeaseLostError` if the lease is lost; call it between steps of long work.

        Raises:
            LeaseLostError: the lease is lost.
        """
        if self.lost:
            raise self._lost_error()

    def _lost_message(self) -> str:
        state = self._state
        return f"lease {state.key!r} (fencing token {state.fencing_token}) was lost: " + (
            state.lost_reason or "unknown"
        )

    def _lost_error(self) -> LeaseLostError:
        return LeaseLostError(self._state.key, self._lost_message())

    # The two halves of renew() and release() around the I/O, shared by both faces.

    def _renew_ttl(self, ttl_ms: int | None) -> int | None:
        """The TTL a renewal must send, or None when the lease must not be renewed (lost, or a
        release has begun). Raises ValidationError for a bad ``ttl_ms``."""
        state = self._state
        ttl = state.ttl_ms if ttl_ms is None else check_ms("ttl_ms", ttl_ms, 1)
        if self.lost or state.releasing:
            return None
        return ttl

    def _renewed(self, token: int, sent_mono: float, sent_wall: float, ttl_ms: int) -> bool:
        """Apply a renewal's reply (sent at ``sent_mono``): confirm, or mark lost (rule 1)."""
        state = self._state
        if token > 0:
            confirmed = state.confirm(sent_mono, sent_wall, ttl_ms, token)
            if confirmed and state.deadline_moved is not None:
                state.deadline_moved()
            return confirmed
        if not state.releasing:
            state.mark_lost(LossReason.RENEW_REFUSED)
        return False

    def _released(self, released: bool) -> bool:
        """Apply a release's reply: released, or refused (the lease had moved on: a loss)."""
        state = self._state
        if released:
            state.released = True
        else:
            state.mark_lost(LossReason.RELEASE_REFUSED)
        return released
