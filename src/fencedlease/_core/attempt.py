"""One acquire call's pure half (`AcquireAttempt`), shared by the sync and async loops,
and how it reads a failed command's classification. No I/O.

What a failed command may have done is said by the backend that raised the
[`BackendError`][fencedlease.BackendError] (``sent``, ``wrote``, ``timed_out``; for Redis,
`fencedlease._redis.errors` sets them); this module only reads them.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from fencedlease._core.clock import Clock, on_ns_grid
from fencedlease._core.errors import BackendError
from fencedlease._core.protocol import AcquireReply, new_owner_token
from fencedlease._core.state import LeaseState

__all__ = ["AcquireAttempt", "is_ambiguous", "may_have_written", "never_sent"]


def never_sent(exc: BackendError) -> bool:
    """True when the store was never reached, so the command cannot have run (``sent="no"``: an
    exhausted pool, a refused connection). A reset or a timeout on an established connection is
    not this: the command may have landed (see `is_ambiguous`)."""
    return exc.sent == "no"


def is_ambiguous(exc: BackendError) -> bool:
    """True when a command may have run although no reply came (``sent="maybe"``: a connection
    reset or a timeout after sending), so only an idempotent retry is safe: for acquire, the same
    owner token. A command that never left (`never_sent`) is not ambiguous: nothing ran, so
    nothing needs cleaning up."""
    return exc.sent == "maybe"


def may_have_written(exc: BackendError) -> bool:
    """True when the command that failed with ``exc`` may have changed the store
    (``wrote="maybe"``), so whatever it may have granted must be released with the same owner
    token: an ambiguous error, or an error from inside a script after a possible write (see
    `fencedlease._redis.errors`). The managers' own resend after an ambiguous error is
    tracked and cleaned up."""
    return exc.wrote == "maybe"


class AcquireAttempt:
    """The pure half of one acquire call, shared by the sync and async loops.

    It owns the attempt's owner token (one per call, reused by every retry, so a retry after a
    lost reply is recognised by the script), the wait budget (``wait_ms`` on the monotonic clock),
    the retry delay (``retry_delay_ms`` randomised ±50% so waiters do not retry in lock-step), the
    ambiguous-error rule, and what a grant becomes. A face's loop:

    ```
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
    ```

    ``uncertain`` tells whether the key may be held under this owner token without the caller
    knowing: a command was sent and not answered, or an ambiguous error was seen. An attempt
    abandoned in that state (cancelled, or failed) must be cleaned up by a release with
    ``owner_token``.
    """

    __slots__ = (
        "_ambiguous",
        "_clock",
        "_in_flight",
        "_planned",
        "_uniform",
        "fencing_scope",
        "final_wait",
        "give_up",
        "heartbeat_ms",
        "key",
        "leaving",
        "owner_token",
        "queued",
        "queued_mono",
        "queued_wall",
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
        fencing_scope: str | None = None,
        heartbeat_ms: int | None = None,
    ) -> None:
        self.key = key
        # How often the lease will be renewed (None: the default, ttl_ms // 4): a grant taken
        # from a hand-off message must leave two heartbeats before its deadline (see handed).
        self.heartbeat_ms = max(1, ttl_ms // 4) if heartbeat_ms is None else heartbeat_ms
        self.fencing_scope = fencing_scope  # the backend's name of key's counter, for the lease
        self.ttl_ms = ttl_ms
        self.retry_delay_ms = retry_delay_ms
        self.owner_token = new_owner_token()
        self._clock = clock
        self._uniform = random.uniform if uniform is None else uniform  # looked up per call
        self.give_up = on_ns_grid(clock.monotonic() + wait_ms / 1000)
        self.sent_mono = self.sent_wall = 0.0
        self._in_flight = False
        self._ambiguous = False
        self._planned: float | None = None  # the next wait's delay, drawn by plan_wait
        self.final_wait = False
        # Set before a wait that queues the caller for a hand-off: from then on a release may grant
        # the key to owner_token at any moment, until the caller holds it or cleans up.
        self.queued = False
        # Set by the face when the acquire it sends takes the caller out of the queue if refused
        # (a last attempt): a refusal then leaves nothing a release could hand over.
        self.leaving = False
        # The clock's monotonic and wall times no later than the send of the first command that
        # may have queued the caller (see queueing); None until then.
        self.queued_mono: float | None = None
        self.queued_wall = 0.0

    @property
    def uncertain(self) -> bool:
        """Whether the key may be held under `owner_token` unbeknown to the caller."""
        return self._in_flight or self._ambiguous or self.queued

    def sending(self) -> None:
        """Record that an acquire is about to be sent: the deadline of a grant counts from now."""
        self.sent_mono, self.sent_wall = self._clock.monotonic(), self._clock.time()
        self._in_flight = True

    def may_resend(self, exc: BackendError) -> bool:
        """Whether to send the same acquire once more after ``exc`` (see `is_ambiguous`).

        An error reply after a possible write (`may_have_written`) is not resent (it would
        fail again) but leaves the attempt `uncertain`: the caller releases with
        `owner_token`."""
        if is_ambiguous(exc):
            self._ambiguous = True  # sticky: the lost command may still land after a retry
            # A reset connection fails fast: resend at once. A timeout means Redis may be
            # stalled: resend only while the wait budget lasts, so the call keeps its bound of
            # wait_ms plus one round trip.
            return not exc.timed_out or (self._clock.monotonic() < self.give_up)
        if may_have_written(exc):
            self._ambiguous = True  # the script failed after a possible write: clean up
            return False
        self._in_flight = False  # Redis refused it: nothing was written
        return False

    def queueing(self) -> None:
        """Record that a command that may queue the caller for a hand-off is sent from now on:
        the first such time of the call is kept, never a later one (a later poll may be sent
        after the release that granted the caller its queue entry)."""
        if self.queued_mono is None:
            self.queued_mono, self.queued_wall = self._clock.monotonic(), self._clock.time()

    def handed(self, reply: AcquireReply) -> LeaseState | None:
        """The lease a hand-off message granted (``reply``: `parse_grant`'s, its ``ttl_ms`` the
        key's PX), taken with no claim round trip; or None when the caller must claim it instead.

        The key expires at ``R + px``, ``R`` being when Redis ran the release. The release found
        the caller's queue entry, so the command that created it ran before ``R`` and was sent
        no earlier than `queued_mono`: the deadline ``queued_mono + px`` is never later than
        Redis's expiry. The grant is taken only if that deadline leaves at least two heartbeats
        (``2 * heartbeat_ms``) from now, so the renewer's usual cadence renews it in time, and
        only if its PX is no more than the ``ttl_ms`` asked for (a release never grants more;
        a message that says so is not the release's, and the acquire asks Redis instead)."""
        if self.queued_mono is None or reply.ttl_ms > self.ttl_ms:
            return None  # a release never grants more than was asked: claim, and let Redis say
        deadline = on_ns_grid(self.queued_mono + reply.ttl_ms / 1000)
        if deadline - self._clock.monotonic() < 2 * self.heartbeat_ms / 1000:
            return None
        state = LeaseState.granted(
            self.key, self.owner_token, reply.fencing_token, reply.ttl_ms, self.queued_mono,
            self.queued_wall,
        )  # fmt: skip
        state.ttl_ms = self.ttl_ms  # what renewals ask for
        state.fencing_scope = self.fencing_scope
        return state

    def _draw(self) -> float:
        """A retry delay in seconds: ``retry_delay_ms`` randomised ±50%."""
        return self.retry_delay_ms / 1000 * self._uniform(0.5, 1.5)

    def plan_wait(self) -> tuple[int, bool] | None:
        """Before an acquire that may queue the caller (a release waiter that queues): draw the
        delay of the wait a refusal is followed by (`not_acquired` keeps it) and return
        ``(wait_ms, final)`` for the queue entry the acquire writes when refused (`final`: the
        wait that spends the budget, no grace after it); None when the budget is spent (no wait
        follows: nothing to queue)."""
        remaining = on_ns_grid(self.give_up - self._clock.monotonic())
        if remaining <= 0:
            self._planned = None
            return None
        self._planned = delay = self._draw()
        return max(1, int(min(delay, remaining) * 1000)), remaining <= delay

    def granted(self, reply: AcquireReply) -> LeaseState:
        """The state of the lease ``reply`` granted (``reply.acquired`` must be true)."""
        self._in_flight = False
        state = LeaseState.granted(
            self.key, self.owner_token, reply.fencing_token, self.ttl_ms, self.sent_mono,
            self.sent_wall,
        )  # fmt: skip
        state.fencing_scope = self.fencing_scope
        return state

    def not_acquired(self) -> float | None:
        """After a "held by another owner" reply: the seconds to sleep before the next try (never
        past the wait budget), or None when the budget is spent."""
        self._in_flight = False
        remaining = on_ns_grid(self.give_up - self._clock.monotonic())
        planned, self._planned = self._planned, None
        if remaining <= 0:
            return None
        delay = self._draw() if planned is None else planned
        # The wait that uses up the budget is followed by one last attempt, then the caller
        # gives up: a release waiter must not hand the lease over after it.
        self.final_wait = remaining <= delay
        return min(delay, remaining)
