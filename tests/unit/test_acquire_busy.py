"""An acquire the store turns away for a while (``BackendError.busy``: a Redis Cluster slot
being migrated answers ``TRYAGAIN``), with no I/O: waited out within ``wait_ms`` as a refusal
is, raised once the budget is spent; and which redis-py errors are busy."""

from __future__ import annotations

import pytest
from redis.exceptions import ClusterDownError, ClusterError, TryAgainError

from fencedlease._core.attempt import AcquireAttempt
from fencedlease._core.decisions import AcquireEnd, SendAcquire, WaitForRelease, acquire_steps
from fencedlease._core.errors import BackendError
from fencedlease._core.protocol import AcquireReply
from fencedlease._redis.errors import backend_error
from fencedlease.testing import FakeClock


def _busy() -> BackendError:
    return BackendError(
        "acquire 'k': ClusterError: TTL exhausted.", sent="maybe", wrote="maybe", busy=True
    )


def _attempt(clock: FakeClock, wait_ms: int) -> AcquireAttempt:
    return AcquireAttempt("k", 3000, wait_ms, 100, clock, uniform=lambda low, high: 1.0)


def test_a_busy_store_is_waited_out_within_the_budget() -> None:
    """Turned away twice, the acquire waits a retry delay each time and is granted on the third
    try, without a resend of the turned-away call."""
    clock = FakeClock()
    steps = acquire_steps(_attempt(clock, 1000), False)
    assert next(steps) == SendAcquire()
    assert steps.throw(_busy()) == WaitForRelease(0.1, False)
    clock.advance(100)
    assert steps.send(False) == SendAcquire()
    assert steps.throw(_busy()) == WaitForRelease(0.1, False)
    clock.advance(100)
    assert steps.send(False) == SendAcquire()
    with pytest.raises(StopIteration) as stop:
        steps.send(AcquireReply(True, 7, 3000))
    end: AcquireEnd = stop.value.value
    assert end.state is not None and end.state.fencing_token == 7


def test_a_busy_store_past_the_budget_raises_its_error() -> None:
    """With no wait left (``wait_ms=0``), the busy error itself is raised, and the attempt is
    left uncertain (a grant an earlier try may have made is released by the face)."""
    clock = FakeClock()
    attempt = _attempt(clock, 0)
    steps = acquire_steps(attempt, False)
    assert next(steps) == SendAcquire()
    error = _busy()
    with pytest.raises(BackendError) as caught:
        steps.throw(error)
    assert caught.value is error
    assert attempt.uncertain is True


def test_which_cluster_errors_are_busy() -> None:
    """TRYAGAIN and redis-py's exhausted redirections are busy; CLUSTERDOWN and other cluster
    errors are not; the default is not."""
    assert backend_error("acquire 'k'", TryAgainError("TRYAGAIN")).busy is True
    assert backend_error("acquire 'k'", ClusterError("TTL exhausted.")).busy is True
    assert backend_error("acquire 'k'", ClusterDownError("CLUSTERDOWN")).busy is False
    assert backend_error("acquire 'k'", ClusterError("something else")).busy is False
    assert BackendError("x").busy is False


def test_a_wait_whose_queueing_is_turned_away_goes_on_to_the_next_attempt() -> None:
    """A refused acquire's wait whose queueing command is turned away (busy) is not the end:
    the next attempt follows, and a later grant ends the call."""
    clock = FakeClock()
    steps = acquire_steps(_attempt(clock, 1000), True)
    assert next(steps) == SendAcquire(100, False)
    assert steps.send(AcquireReply(False, 0, 2000)) == WaitForRelease(0.1, False)
    assert steps.throw(_busy()) == SendAcquire(100, False)
    with pytest.raises(StopIteration) as stop:
        steps.send(AcquireReply(True, 8, 3000))
    end: AcquireEnd = stop.value.value
    assert end.state is not None and end.state.fencing_token == 8
