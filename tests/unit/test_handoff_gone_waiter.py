"""A waiter that has gone is never left queued, with no I/O: what a queueing command that ends
after its acquire call asks for (`LateQueueing`), the last attempt that leaves the queue when
refused (`acquire_steps`, ``SendAcquire(leave=True)``)."""

from __future__ import annotations

from typing import Any

import pytest

from fencedlease._core.attempt import AcquireAttempt
from fencedlease._core.decisions import AcquireEnd, SendAcquire, WaitForRelease, acquire_steps
from fencedlease._core.errors import BackendError
from fencedlease._core.protocol import AcquireReply
from fencedlease._handoff.late import LateQueueing
from fencedlease.testing import FakeClock

REFUSED = AcquireReply(False, 0, 5_000)


class _Calls:
    """A release callable that counts its calls."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


@pytest.mark.parametrize(
    ("queued", "holds", "releases"),
    [
        (True, False, 1),  # it queued a caller that gave up
        # it queued the caller before the call's grant, which took the entry out (a hand-off
        # grant, under the same token): a release would end the live lease
        (True, True, 0),
        (None, False, 1),  # it failed once sent: it may have queued the caller
        (None, True, 0),  # ... but a release would end the lease the call holds
        (False, False, 0),  # it did not queue (the key was free or the caller's)
    ],
)
def test_a_command_that_ends_after_its_call_asks_for_a_release_when_it_may_have_queued(
    queued: bool | None, holds: bool, releases: int
) -> None:
    """A queueing command out when its call ended asks for the call's release by its outcome:
    queued or failed (unless the call holds a lease: never then), not queued (never)."""
    late, release = LateQueueing(), _Calls()
    handle = object()
    late.gave_up_on(handle, "k", "owner")
    late.ended("k", "owner", holds, release)
    assert late.landed(handle, queued) is (release if releases else None)
    assert len(late) == 0
    assert late.landed(handle, True) is None  # once only


def test_a_command_that_ends_while_its_call_runs_asks_for_nothing() -> None:
    """The call's own end (a grant, or a give-up's release) reaches Redis after such a command,
    so nothing is asked, and the call's end registers nothing either."""
    late, release = LateQueueing(), _Calls()
    handle = object()
    late.gave_up_on(handle, "k", "owner")
    assert late.landed(handle, True) is None
    late.ended("k", "owner", False, release)
    assert late.landed(handle, True) is None
    assert (len(late), late._ended) == (0, {})


def test_every_command_out_of_a_call_is_judged_and_then_forgotten() -> None:
    """Two commands out of one call: each asks for its own release; once both ended nothing of
    the call is kept; a command of another owner or key is not mistaken for them."""
    late, release, other = LateQueueing(), _Calls(), _Calls()
    first, second, third = object(), object(), object()
    late.gave_up_on(first, "k", "owner")
    late.gave_up_on(second, "k", "owner")
    late.gave_up_on(third, "k", "someone")
    late.ended("k", "owner", False, release)
    late.ended("j", "owner", False, other)  # no command of ("j", "owner") is out
    assert late.landed(first, False) is None
    assert late.landed(second, True) is release
    assert late.landed(third, True) is None  # ("k", "someone") has not ended
    assert (len(late), late._ended, late._count) == (0, {}, {})


def _attempt(clock: FakeClock, wait_ms: int = 60) -> AcquireAttempt:
    return AcquireAttempt("k", 10_000, wait_ms, 100, clock, uniform=lambda low, high: 1.0)


def _last_attempt(clock: FakeClock) -> tuple[AcquireAttempt, Any]:
    """A caller queued by its acquire for its one (final) wait, at its last attempt."""
    attempt = _attempt(clock)
    steps = acquire_steps(attempt, True)
    assert next(steps) == SendAcquire(60, True)
    attempt.queued = True  # what the face does when the acquire carries the queueing
    assert steps.send(REFUSED) == WaitForRelease(0.06, True)
    clock.advance(60)
    assert steps.send(False) == SendAcquire(leave=True)
    return attempt, steps


def test_a_refused_last_attempt_that_left_the_queue_needs_no_release() -> None:
    """A last attempt that carried the leaving (the face set ``leaving``) and was refused took
    the caller out of the queue in the same script: the call ends with no release to send."""
    attempt, steps = _last_attempt(FakeClock())
    attempt.leaving = True
    with pytest.raises(StopIteration) as stop:
        steps.send(REFUSED)
    assert stop.value.value == AcquireEnd(None, 5_000, leave_queue=False)
    assert not attempt.uncertain


def test_a_last_attempt_without_the_leaving_still_releases() -> None:
    """A last attempt sent without it (the waiter has no leaving arguments) leaves the caller
    queued: the call ends asking for the release."""
    _, steps = _last_attempt(FakeClock())
    with pytest.raises(StopIteration) as stop:
        steps.send(REFUSED)
    assert stop.value.value == AcquireEnd(None, 5_000, leave_queue=True)


def test_a_last_attempt_resent_after_a_lost_reply_carries_the_leaving_again() -> None:
    """A lost reply is resent with the leaving too; the call still ends with the release, since
    the lost command may land later."""
    attempt, steps = _last_attempt(FakeClock())
    attempt.leaving = True
    lost = BackendError("acquire 'k': Connection reset", sent="maybe", wrote="maybe")
    assert steps.throw(lost) == SendAcquire(leave=True)
    with pytest.raises(StopIteration) as stop:
        steps.send(REFUSED)
    assert stop.value.value == AcquireEnd(None, 5_000, leave_queue=True)


def test_a_caller_that_never_queued_does_not_ask_to_leave() -> None:
    """The last attempt of a caller no wait queued (a waiter that does not queue) carries no
    leaving."""
    clock = FakeClock()
    steps = acquire_steps(_attempt(clock), False)
    assert next(steps) == SendAcquire()
    assert steps.send(REFUSED) == WaitForRelease(0.06, True)
    clock.advance(60)
    assert steps.send(False) == SendAcquire()
