"""The decisions both faces make, made once: the acquire loop, the end of a hold, a renewal batch's
outcome, the renew-error hooks, and how long a ``wait_lost`` waits. No I/O.

The sync face ([`LeaseManager`][fencedlease.LeaseManager], its renewer thread) and the asyncio face
([`AsyncLeaseManager`][fencedlease.aio.AsyncLeaseManager], its renewal task) call these and only do
the I/O they ask for: a face that blocks and a face that awaits cannot decide differently.

The acquire loop is a generator (`acquire_steps`): it yields what to do next
(`SendAcquire`, `WaitForRelease`), the face does it and sends back the answer (or
throws in the error it raised), and the generator returns an `AcquireEnd`. A face's pump:

```
steps = acquire_steps(attempt, waiter.queues)
step = next(steps)
while True:                               # until StopIteration carries the AcquireEnd
    try:
        if isinstance(step, WaitForRelease):
            request = WaitRequest(key, attempt.owner_token, ttl_ms, step.delay_s, step.final)
            waiter.wait(request)                                                    # (await)
            answer = manager_is_closed
        else:
            answer = backend.acquire(key, attempt.owner_token, ttl_ms)              # (await)
    except BaseException as exc:
        step = steps.throw(exc)
    else:
        step = steps.send(answer)
```

"""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import cast

import attrs

from fencedlease._core.attempt import AcquireAttempt, never_sent
from fencedlease._core.errors import BackendError, ManagerClosedError
from fencedlease._core.events import deferred, log_renew_errors, renewal_event
from fencedlease._core.protocol import AcquireReply
from fencedlease._core.schedule import RenewalEntry, RenewalSchedule
from fencedlease._core.state import LeaseState, LossReason
from fencedlease._core.view import LeaseView

__all__ = [
    "CLEANUP_WORKERS",
    "DEFAULT_CLOSE_TIMEOUT_MS",
    "DEFAULT_RETRY_DELAY_MS",
    "DEFAULT_TTL_MS",
    "AcquireEnd",
    "AcquireStep",
    "BatchOutcome",
    "SendAcquire",
    "WaitForRelease",
    "acquire_steps",
    "apply_batch",
    "call_renew_error_hooks",
    "close_releases",
    "hold_outcome",
    "hold_releases",
    "lost_wait_s",
]

DEFAULT_TTL_MS = 30_000
DEFAULT_RETRY_DELAY_MS = 100
DEFAULT_CLOSE_TIMEOUT_MS = 1_000
"""How long ``close()`` (either face) waits, by default, for the releases of the leases still
held: a release is one round trip, so this is generous for a live store and short enough for a
shutdown path. A lease not released in time lapses at its TTL."""

CLEANUP_WORKERS = 32
"""How many clean-up releases of one manager run at once (its threads or tasks holding a slot of
`fencedlease._async.releases.release_abandoned`, on either face).
Most are a hand-off waiter's give-up: until it lands, a lease handed to its queue entry is held
for a caller that has gone, so one queued behind others' round trips keeps the key from every
other waiter; side by side, each lands one round trip after its give-up. Bounded, so that a burst
of give-ups cannot take every connection of the caller's pool (a release refused one is lost).
Threads start only as releases need them."""

log = logging.getLogger("fencedlease.renewer")


# -- the acquire loop ------------------------------------------------------------------------


@attrs.frozen
class SendAcquire:
    """Send ``backend.acquire(key, attempt.owner_token, ttl_ms)``; answer with its reply.
    ``wait_ms`` > 0: a refusal is followed by a wait of that long at most (``final``: the last),
    so the acquire may queue the caller for a hand-off in the same command (the release waiter's
    ``queue_args``). ``leave``: the last attempt of a caller that queued, so a refusal may take it
    out of the queue in the same command (``leave_args``; the face sets
    ``AcquireAttempt.leaving`` when it does)."""

    wait_ms: int = 0
    final: bool = False
    leave: bool = False


@attrs.frozen
class WaitForRelease:
    """Wait ``delay_s`` seconds (or until a release wakes the caller) with the manager's release
    waiter; ``final``: the last attempt follows. Answer with whether the manager is closed now,
    or, when it is not, with the grant the waiter returned (a hand-off taken from its message)."""

    delay_s: float
    final: bool


AcquireStep = SendAcquire | WaitForRelease


@attrs.frozen
class AcquireEnd:
    """How an acquire call ended: ``state`` of the granted lease, or None with the holder's
    remaining ``holder_ttl_ms``. ``leave_queue``: the caller queued for a hand-off, so the face
    releases ``owner_token`` in the background (a release may have handed it the key meanwhile)
    without waiting for it (the call keeps its time bound)."""

    state: LeaseState | None
    holder_ttl_ms: int | None = None
    leave_queue: bool = False


def acquire_steps(
    attempt: AcquireAttempt, queues: bool
) -> Generator[AcquireStep, AcquireReply | bool, AcquireEnd]:
    """The acquire loop of both faces (see the module docstring): send, resend once after an
    ambiguous error (`AcquireAttempt.may_resend`), return a grant, or wait and try again
    until the budget is spent (the wait that spends it is followed by one last attempt). A
    ``busy`` error (the store turned the acquire away for a while: a cluster slot migrating) is
    waited out as a refusal is, and raised once the budget is spent.

    ``queues``: the release waiter queues the caller for a hand-off (Redis).

    An error thrown in propagates, after the attempt noted what it means (`
    uncertain`: the face then releases ``owner_token``). A wait the manager's ``close()`` ended
    raises [`ManagerClosedError`][fencedlease.ManagerClosedError]. A wait answered with a grant
    returns it when `AcquireAttempt.handed` takes it (no claim round trip); else the next
    acquire claims it ("already ours").
    """
    while True:
        attempt.sending()
        plan = attempt.plan_wait() if queues else None
        queued_before = attempt.queued  # the face sets it when the acquire carries the queueing
        # The last attempt of a caller that queued: refused, it may leave the queue at once.
        leave = plan is None and attempt.queued
        attempt.leaving = False  # the face sets it when the acquire carries the leaving
        if plan is not None:  # the acquire may queue the caller, sent from now on
            attempt.queueing()
        busy: BackendError | None = None
        try:
            reply = yield SendAcquire(leave=leave) if plan is None else SendAcquire(*plan)
        except BackendError as exc:
            if never_sent(exc) or exc.busy:  # the acquire never ran: it queued nobody
                attempt.queued = queued_before
            if exc.busy:  # turned away for a while (a slot migrating): wait as if refused
                attempt.may_resend(exc)  # notes a possible earlier write, for the cleanup
                busy, reply = exc, None
            elif not attempt.may_resend(exc):
                raise
            else:
                attempt.sending()
                reply = yield SendAcquire(leave=leave)
        if busy is None:
            reply = cast(AcquireReply, reply)  # the answer to SendAcquire (any reply-shaped)
            if reply.acquired:
                return AcquireEnd(attempt.granted(reply))
            if attempt.leaving:  # refused, and out of the queue: nothing can be handed to it
                attempt.queued = False
        delay = attempt.not_acquired()
        if delay is None:
            if busy is not None:  # still turned away when the wait budget is spent
                raise busy
            reply = cast(AcquireReply, reply)
            if reply.refused is not None:  # a grant taken back (too few replica acks): say why
                raise reply.refused
            return AcquireEnd(None, reply.ttl_ms, leave_queue=attempt.uncertain)
        queued_before = attempt.queued
        attempt.queued = queued_before or queues
        if queues:  # the wait's queueing command is sent after this instant
            attempt.queueing()
        try:
            answer = yield WaitForRelease(delay, attempt.final_wait)
        except BackendError as exc:
            if never_sent(exc) or exc.busy:  # the queueing command never ran: not queued by it
                attempt.queued = queued_before
            if not exc.busy:
                raise
            continue  # turned away too (a slot migrating): the next attempt, within the budget
        if answer is True:
            raise ManagerClosedError(ManagerClosedError.WHILE_WAITING)
        if isinstance(answer, AcquireReply):
            state = attempt.handed(answer)
            if state is not None:
                return AcquireEnd(state)


# -- the end of a hold ------------------------------------------------------------------------


def hold_releases(state: LeaseState, closed: bool, now_mono: float) -> bool:
    """When a ``hold`` block ends: apply the deadline rule at ``now_mono``, and say whether the
    face sends the release. Not after ``close()`` (it released the lease, or left it to its TTL),
    not while a release is under way or done (the body's own ``release()``: its reply decides),
    and never for a lease inherited through fork (no I/O on the parent's lease)."""
    state.check_deadline(now_mono)
    if state.inherited():
        return False
    return not closed and not state.releasing


def hold_outcome(
    lease: LeaseView, body_failed: bool, release_error: BackendError | None
) -> BaseException | None:
    """What a ``hold`` ends in once its body ended and the release (if sent) answered: None when
    the hold ends as the body did; else the error to raise.

    A body that raised (``body_failed``) wins: its exception propagates unchanged, a failed
    release included. Otherwise a lost lease is [`LeaseLostError`][fencedlease.LeaseLostError] (even
    if the release failed too: the loss is what the caller must know), and a failed release is its
    [`BackendError`][fencedlease.BackendError] (the lease lapses at its TTL).
    """
    if body_failed:
        return None
    if lease._state.lost:  # as marked so far: the deadline was applied before the release
        return lease._lost_error()
    return release_error


def close_releases(state: LeaseState) -> bool:
    """``close()`` (either face) on a lease still in a ``hold``: mark it lost (reason: the manager
    was closed; a release under way decides instead, rule 4), and say whether ``close()`` sends
    its release: not when a release is under way or done, nor for a lease inherited through fork
    (no I/O on the parent's lease)."""
    state.mark_lost(LossReason.CLOSED)
    return not (state.releasing or state.released or state.inherited())


# -- the renewer ------------------------------------------------------------------------------

BatchOutcome = tuple[float, float, list[int | BaseException]] | BaseException
"""A renewal round trip's outcome: ``(sent_mono, sent_wall, replies)``, or the error that ended
it (raised, cancelled, abandoned)."""


def apply_batch(
    schedule: RenewalSchedule,
    batch: list[RenewalEntry],
    outcome: BatchOutcome,
    now_mono: float,
) -> list[tuple[RenewalEntry, BaseException]]:
    """Apply a renewal round trip's ``outcome`` to ``batch`` (see
    `RenewalSchedule.apply`); a failed round trip is one failed try for every lease in it
    (rule 3). Returns the hooks due (`call_renew_error_hooks`). Each lease whose reply was
    applied reports a `"renew"` event (`fencedlease._core.events`), before the losses the
    replies caused."""
    # The leases whose reply will be applied and that report events (none: nothing to build).
    watched = [
        (i, entry.state, hook)
        for i, entry in enumerate(batch)
        if entry.active and (hook := entry.state.on_event) is not None
    ]
    with deferred() as losses:
        if isinstance(outcome, BaseException):
            sent: float | None = None
            hooks = schedule.apply(batch, now_mono, 0.0, outcome, now_mono)
        else:
            sent, sent_wall, replies = outcome
            hooks = schedule.apply(batch, sent, sent_wall, replies, now_mono)
        losses[:0] = [
            (hook, renewal_event(
                state, outcome if isinstance(outcome, BaseException) else outcome[2][i],
                batch[i].active, sent, now_mono,
            ))
            for i, state, hook in watched
        ]  # fmt: skip
    return hooks


def call_renew_error_hooks(hooks: list[tuple[RenewalEntry, BaseException]]) -> None:
    """Call each lease's ``on_renew_error(error)`` (telemetry: a failed round trip is not a loss).

    A hook that raises an [`Exception`][] is logged and renewal goes on: a telemetry bug must
    not drop every lease. A hook that raises anything else (``KeyboardInterrupt``,
    ``SystemExit``: a request to stop) is not swallowed: it propagates out of the renewer (the
    thread, or the renewal task), which stops; every lease it renewed is lost (reason "the
    renewer stopped with an unexpected error: ..."), so each ``hold`` ends in
    [`LeaseLostError`][fencedlease.LeaseLostError]. A later ``hold`` gets a new renewer. The same on
    both faces.
    """
    log_renew_errors([(entry.state.key, error) for entry, error in hooks])
    for entry, error in hooks:
        hook = entry.on_renew_error
        if hook is None:
            continue
        try:
            hook(error)
        except Exception:
            log.exception("on_renew_error hook raised; renewal goes on")


# -- waiting for loss ----------------------------------------------------------------------------


def lost_wait_s(
    state: LeaseState, limit_s: float | None, started: float, now_mono: float
) -> tuple[bool, float | None]:
    """``(timed_out, wait)`` for ``wait_lost`` (either face): ``timed_out`` once ``limit_s``
    (None: no limit) has passed since ``started``; else wait ``wait`` seconds at most (None: no
    bound), until the limit or the lease's deadline, whichever is first (at the deadline the
    waiter checks it itself: nobody else may be watching this lease)."""
    slices = [] if limit_s is None else [started + limit_s - now_mono]
    if slices and slices[0] <= 0:
        return True, None
    if state.deadline is not None:
        slices.append(state.deadline - now_mono)
    return False, (max(0.0, min(slices)) if slices else None)
