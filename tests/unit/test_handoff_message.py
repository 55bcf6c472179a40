"""The grant a hand-off message carries, with no I/O: how the listener reads it
(`parse_grant`), that it is kept only for a waiter that waits (`Channels`), and when a waiter
takes it without a claim (`AcquireAttempt.handed`, on a fake clock)."""

from __future__ import annotations

import pytest

from fencedlease._core.attempt import AcquireAttempt
from fencedlease._core.decisions import AcquireEnd, SendAcquire, WaitForRelease, acquire_steps
from fencedlease._core.protocol import AcquireReply
from fencedlease._handoff.channels import Channels
from fencedlease._redis.replies import parse_grant
from fencedlease.testing import FakeClock

SHA = "ab" * 20
PRIMARY = "0123456789abcdef" * 2 + "01234567"


def test_a_grant_is_read_with_every_field() -> None:
    assert parse_grant(f"{SHA}:42:5000:{PRIMARY}") == (
        SHA,
        AcquireReply(True, 42, 5000, retried=True, primary_id=PRIMARY),
    )
    name, grant = parse_grant(f"{SHA}:{2**63 - 1}:{2**31 - 1}")
    assert name == SHA and grant is not None
    assert (grant.fencing_token, grant.ttl_ms, grant.primary_id) == (2**63 - 1, 2**31 - 1, None)
    name, grant = parse_grant(f"{SHA}:7:100:")  # INFO refused: no primary id
    assert (name, grant is not None and grant.primary_id) == (SHA, None)


@pytest.mark.parametrize(
    "data",
    [
        SHA,  # a name alone: a wake-up without a grant
        f"{SHA}:1",
        f"{SHA}:0:100",
        f"{SHA}:01:100",
        f"{SHA}:{2**63}:100",
        f"{SHA}:1:0",
        f"{SHA}:1:{2**31}",
        f"{SHA}:1:-5",
        f"{SHA}:1:100:nothex",
        f"{SHA}:1:100:{PRIMARY}:extra",
        f"{SHA}:\u0661:100",  # a digit isdigit() takes but Redis never writes
    ],
)
def test_no_grant_is_read_from_a_malformed_message(data: str) -> None:
    assert parse_grant(data) == (SHA, None)


def test_a_grant_is_kept_only_for_a_waiter_that_waits() -> None:
    channels = Channels(5.0)
    event = object()
    channels.join("ch", SHA, event)
    other = "cd" * 20
    message = {"type": "message", "channel": b"ch", "data": f"{SHA}:3:900".encode()}
    assert channels.on_message(message) == [event]
    stray = {"type": "message", "channel": b"ch", "data": f"{other}:4:900".encode()}
    assert channels.on_message(stray) == []
    assert channels.grants == {SHA: AcquireReply(True, 3, 900, retried=True)}
    assert channels.leave("ch", SHA, 0.0) == AcquireReply(True, 3, 900, retried=True)
    assert channels.grants == {}
    assert channels.on_message(message) == []  # after the wait: dropped
    assert channels.grants == {}
    assert channels.leave("ch", SHA, 0.0) is None


def _attempt(clock: FakeClock, heartbeat_ms: int | None = None) -> AcquireAttempt:
    return AcquireAttempt(
        "k", 10_000, 60_000, 100, clock, uniform=lambda low, high: 1.0, heartbeat_ms=heartbeat_ms
    )


def test_the_grant_counts_from_the_first_queueing_and_needs_two_heartbeats() -> None:
    """Queued at t0 (a later queueing does not move it); a grant of PX 10 s is taken while at
    least 5 s (two heartbeats of 2.5 s) are left, with the deadline t0 + 10 s; after that it is
    claimed instead."""
    clock = FakeClock()
    attempt = _attempt(clock)
    grant = AcquireReply(True, 9, 10_000, retried=True)
    assert attempt.handed(grant) is None  # never queued: nothing to count from
    t0 = clock.monotonic()
    attempt.queueing()
    clock.advance(1_000)
    attempt.queueing()
    assert attempt.queued_mono == t0
    clock.advance(4_000)  # 5 s left: exactly two heartbeats
    state = attempt.handed(grant)
    assert state is not None
    assert (state.fencing_token, state.ttl_ms, state.deadline) == (9, 10_000, t0 + 10.0)
    assert state.owner_token == attempt.owner_token
    clock.advance(1)
    assert attempt.handed(grant) is None


def test_an_explicit_heartbeat_sets_the_bound() -> None:
    clock = FakeClock()
    attempt = _attempt(clock, heartbeat_ms=1_000)
    attempt.queueing()
    clock.advance(8_000)
    assert attempt.handed(AcquireReply(True, 2, 10_000, retried=True)) is not None
    clock.advance(1)
    assert attempt.handed(AcquireReply(True, 2, 10_000, retried=True)) is None


def test_the_acquire_loop_ends_on_a_grant_it_takes_and_claims_one_it_does_not() -> None:
    """acquire_steps: each acquire of a caller that waits asks to queue it for the wait that
    follows a refusal (100 ms, the retry delay drawn before the send) and counts the queueing
    from its send; a wait answered with a grant ends the call with it (no SendAcquire); a grant
    too short to take is followed by the claim (SendAcquire)."""
    clock = FakeClock()
    attempt = _attempt(clock)
    steps = acquire_steps(attempt, True)
    assert next(steps) == SendAcquire(100, False)
    assert attempt.queued_mono == clock.monotonic()
    assert isinstance(steps.send(AcquireReply(False, 0, 5_000)), WaitForRelease)
    with pytest.raises(StopIteration) as stop:
        steps.send(AcquireReply(True, 4, 10_000, retried=True))
    end: AcquireEnd = stop.value.value
    assert end.state is not None and end.state.fencing_token == 4

    attempt = _attempt(clock)
    steps = acquire_steps(attempt, True)
    next(steps)
    steps.send(AcquireReply(False, 0, 5_000))
    clock.advance(5_001)
    assert steps.send(AcquireReply(True, 4, 10_000, retried=True)) == SendAcquire(100, False)


def test_the_wait_that_spends_the_budget_queues_without_grace_and_none_after() -> None:
    """With 60 ms of budget left and a 100 ms delay drawn, the acquire queues for the final wait
    (60 ms); once the budget is spent the last attempt queues nothing and asks to leave the queue
    when refused; a caller that does not wait never queues."""
    clock = FakeClock()
    attempt = AcquireAttempt("k", 10_000, 60, 100, clock, uniform=lambda low, high: 1.0)
    steps = acquire_steps(attempt, True)
    assert next(steps) == SendAcquire(60, True)
    assert steps.send(AcquireReply(False, 0, 5_000)) == WaitForRelease(0.06, True)
    clock.advance(60)
    assert steps.send(False) == SendAcquire(leave=True)
    fail_fast = AcquireAttempt("k", 10_000, 0, 100, clock)
    assert next(acquire_steps(fail_fast, True)) == SendAcquire()
    assert (fail_fast.queued, fail_fast.queued_mono) == (False, None)
