"""The pure pieces both faces now share: the acquire attempt, restore, the lease view, batch
filling in the renewal schedule, and the renewal pipeline's reply filing (no I/O, no loop)."""

from __future__ import annotations

import asyncio
import math
from datetime import datetime, timedelta, timezone

import pytest
import redis
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError
from redis.exceptions import TimeoutError as RedisTimeoutError
from test_aio_support import backend_error, refused

from fencedlease import BackendError, LeaseLostError, ValidationError
from fencedlease._core.attempt import AcquireAttempt, is_ambiguous
from fencedlease._core.protocol import AcquireReply
from fencedlease._core.schedule import RenewalEntry, RenewalSchedule
from fencedlease._core.state import LeaseState, LossReason, restored_state
from fencedlease._core.view import LeaseView
from fencedlease._redis.errors import backend_errors
from fencedlease._redis.keys import renew_many_args
from fencedlease._redis.pool import connection_args
from fencedlease._redis.replies import decode_renew_many
from fencedlease.testing import FakeClock


def test_attempt_keeps_one_owner_token_and_counts_from_the_send() -> None:
    """A grant's deadline counts from the last sending(); the owner token never changes."""
    clock = FakeClock()
    attempt = AcquireAttempt("k", 1_000, 0, 100, clock)
    token = attempt.owner_token
    assert len(token) == 32
    attempt.sending()
    clock.advance(30)
    attempt.sending()  # the resend after a lost reply
    clock.advance(5)
    state = attempt.granted(AcquireReply(True, 9, 1_000, retried=True))
    assert (state.owner_token, state.fencing_token, state.deadline) == (token, 9, 1.03)
    assert state.expires_wall == clock.time() - 0.005 + 1.0


def test_attempt_retry_delay_is_jittered_and_never_past_the_budget() -> None:
    """retry_delay_ms=100 sleeps 50..150 ms as uniform(0.5, 1.5) says, capped at what is left of
    wait_ms; None once wait_ms has passed."""
    clock = FakeClock()
    factors = iter([0.5, 1.5, 1.5])
    attempt = AcquireAttempt("k", 1_000, 300, 100, clock, uniform=lambda a, b: next(factors))
    assert attempt.not_acquired() == pytest.approx(0.05)
    assert attempt.not_acquired() == pytest.approx(0.15)
    clock.advance(250)
    assert attempt.not_acquired() == pytest.approx(0.05)  # 150 ms wanted, 50 ms left
    clock.advance(50)
    assert attempt.not_acquired() is None


def test_uniform_jitter_bounds() -> None:
    """The default jitter stays inside 0.5x..1.5x of retry_delay_ms."""
    attempt = AcquireAttempt("k", 1_000, 10_000, 100, FakeClock())
    delays = [attempt.not_acquired() for _ in range(500)]
    assert all(d is not None and 0.05 <= d <= 0.15 for d in delays)


def test_only_connection_and_timeout_errors_are_ambiguous() -> None:
    """A reset or a timeout may hide a command that ran: resend. An error reply: do not."""
    assert is_ambiguous(backend_error(ConnectionError("x"))) is False  # builtin, not redis-py's
    assert is_ambiguous(backend_error(RedisTimeoutError("slow"))) is True
    assert is_ambiguous(backend_error(MaxConnectionsError("pool exhausted"))) is False
    assert is_ambiguous(refused()) is False
    assert is_ambiguous(BackendError("no cause")) is False


class _NoIOConnection(redis.Connection):
    """A connection that never touches a socket: the pool's bookkeeping alone is under test."""

    def connect(self) -> None:
        pass


class _NoIOAsyncConnection(redis.asyncio.Connection):
    async def connect(self) -> None:
        pass

    async def can_read_destructive(self) -> bool:  # redis-py before 8
        return False

    async def can_read(self) -> bool:
        return False


def _pool_timeout() -> BackendError:
    """The error a face gets when its BlockingConnectionPool of one, in use, times out."""
    pool = redis.BlockingConnectionPool(  # type: ignore[no-untyped-call]
        connection_class=_NoIOConnection, max_connections=1, timeout=0.01
    )
    pool.get_connection(*connection_args(pool))  # type: ignore[no-untyped-call]
    with pytest.raises(BackendError) as info, backend_errors("acquire 'k'"):
        pool.get_connection(*connection_args(pool))  # type: ignore[no-untyped-call]
    return info.value


def test_an_empty_pool_sent_nothing_and_is_not_ambiguous() -> None:
    """redis-py's BlockingConnectionPool raises ConnectionError("No connection available.")
    before any connection is in hand (sync and asyncio): nothing was sent, so it is no reason to
    resend, and an acquire attempt that saw it holds nothing unbeknown to its caller. A reset
    connection, also a ConnectionError, still is ambiguous."""
    clock = FakeClock()
    attempt = AcquireAttempt("k", 1_000, 300, 100, clock)
    attempt.sending()
    exc = _pool_timeout()
    assert isinstance(exc.__cause__, RedisConnectionError)
    assert is_ambiguous(exc) is False
    assert attempt.may_resend(exc) is False
    assert attempt.uncertain is False

    async def async_pool_timeout() -> BackendError:
        pool = redis.asyncio.BlockingConnectionPool(
            connection_class=_NoIOAsyncConnection, max_connections=1, timeout=0.01
        )
        await pool.get_connection()  # type: ignore[no-untyped-call]
        with pytest.raises(BackendError) as info, backend_errors("acquire 'k'"):
            await pool.get_connection()  # type: ignore[no-untyped-call]
        return info.value

    exc = asyncio.run(async_pool_timeout())
    assert isinstance(exc.__cause__, RedisConnectionError)
    assert is_ambiguous(exc) is False
    reset = backend_error(RedisConnectionError("Connection reset by peer"))
    assert is_ambiguous(reset) is True
    assert is_ambiguous(backend_error(RedisConnectionError("Too many connections"))) is False


def test_attempt_uncertainty() -> None:
    """uncertain: from a send until a definitive answer; sticky after an ambiguous error."""
    clock = FakeClock()
    attempt = AcquireAttempt("k", 1_000, 1_000, 100, clock)
    assert attempt.uncertain is False
    attempt.sending()
    assert attempt.uncertain is True
    attempt.not_acquired()
    assert attempt.uncertain is False
    attempt.sending()
    assert attempt.may_resend(refused()) is False
    assert attempt.uncertain is False
    attempt.sending()
    assert attempt.may_resend(backend_error(RedisTimeoutError("t"))) is True
    attempt.sending()
    attempt.not_acquired()
    assert attempt.uncertain is True  # the first command may still land after the answer


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"key": ""}, "key"),
        ({"owner_token": ""}, "owner_token"),
        ({"ttl_ms": 0}, "ttl_ms"),
        ({"ttl_ms": math.nan}, "ttl_ms"),
        ({"expires_at": datetime(2030, 1, 1)}, "expires_at"),
        ({"fencing_token": 0}, "fencing_token"),
        ({"fencing_token": True}, "fencing_token"),
    ],
)
def test_restore_validation(kwargs: dict[str, object], argument: str) -> None:
    """restored_state names the bad argument."""
    values: dict[str, object] = {
        "key": "k",
        "owner_token": "o",
        "ttl_ms": 1_000,
        "expires_at": None,
        "fencing_token": None,
    }
    values.update(kwargs)
    with pytest.raises(ValidationError) as info:
        restored_state(clock=FakeClock(), **values)  # type: ignore[arg-type]
    assert info.value.argument == argument


def test_restore_maps_expires_at_onto_the_monotonic_clock() -> None:
    """expires_at 2.5 s after the wall clock's now becomes a deadline 2.5 s after monotonic now."""
    clock = FakeClock()
    clock.advance(10_000)
    expires = datetime.fromtimestamp(clock.time(), tz=timezone.utc) + timedelta(seconds=2.5)
    state = restored_state("k", "o", 1_000, expires, 4, clock)
    assert state.deadline == pytest.approx(12.5)
    assert (state.fencing_token, state.expires_at) == (4, expires)


def test_view_repr_hides_the_owner_token_and_check_raises() -> None:
    """repr shows the fingerprint, never the token; check() raises LeaseLostError when lost."""
    clock = FakeClock()
    view = LeaseView(LeaseState.granted("k", "s3cret-owner", 3, 100, 0.0, clock.time()), clock)
    assert "s3cret-owner" not in repr(view)
    assert repr(view).startswith("<LeaseView key='k' fencing_token=3 owner_fingerprint=")
    view.check()
    clock.advance(100)
    with pytest.raises(LeaseLostError) as info:
        view.check()
    assert info.value.key == "k"
    assert LossReason.DEADLINE in str(info.value)


def _entry(heartbeat_ms: int = 1_000, sent: float = 0.0) -> RenewalEntry:
    """A lease granted by an acquire sent at ``sent``, renewed every ``heartbeat_ms``."""
    return RenewalEntry(
        LeaseState.granted("k", "o", 1, 4 * heartbeat_ms, sent, 0.0), heartbeat_ms, None
    )


def test_pop_batch_fills_with_leases_due_within_half_a_heartbeat() -> None:
    """With one lease due, the batch also takes those due in the next half heartbeat, not later."""
    schedule = RenewalSchedule()
    added = [0.0, 0.2, 0.49, 0.51]
    entries = [_entry(sent=when) for when in added]
    for entry, when in zip(entries, added, strict=True):
        schedule.add(entry, when)
    assert schedule.pop_batch(0.99, 10) == []  # nothing due yet: nothing renewed early
    assert schedule.pop_batch(1.0, 10) == entries[:3]
    assert schedule.pop_batch(1.0, 10) == []
    assert schedule.pop_batch(1.51, 10) == [entries[3]]


def test_pop_batch_respects_the_limit() -> None:
    """Filling stops at the batch size."""
    schedule = RenewalSchedule()
    entries = [_entry() for _ in range(5)]
    for entry in entries:
        schedule.add(entry, 0.0)
    assert schedule.pop_batch(1.0, 3) == entries[:3]


def test_scattered_leases_settle_into_full_batches() -> None:
    """1,000 leases added at scattered moments over a heartbeat, batch size 100: after one round
    every heartbeat costs exactly 10 round trips."""
    schedule = RenewalSchedule()
    entries = [_entry(sent=index * 0.001) for index in range(1_000)]
    for index, entry in enumerate(entries):
        schedule.add(entry, index * 0.001)  # spread over one full heartbeat
    now, trips_per_round = 1.0, []
    for _ in range(4):
        round_end, trips = now + 1.0, 0
        while now < round_end:  # the renewer's loop, with round trips that take no time
            assert schedule.pop_expired(now) == []
            batch = schedule.pop_batch(now, 100)
            if batch:
                trips += 1
                replies: list[int | BaseException] = [1] * len(batch)
                schedule.apply(batch, now, now, replies, now)
                continue
            wake = schedule.next_wakeup(0)
            assert wake is not None
            now = max(now, wake)
        trips_per_round.append(trips)
    assert trips_per_round[1:] == [10, 10, 10]


def test_decode_renew_many() -> None:
    """Tokens decode from int, bytes and str; a refused TTL (-1) or a key of another type (-2)
    becomes a BackendError for that lease alone; a reply of the wrong length is refused."""
    items = [("a", "o", 1), ("b", "o", 1), ("c", "o", 1), ("d", "o", 1), ("e", "o", 1)]
    results = decode_renew_many(items, [5, b"6", "0", -1, -2])
    assert results[:3] == [5, 6, 0]
    assert isinstance(results[3], BackendError) and "'d'" in str(results[3])
    assert isinstance(results[4], BackendError) and "WRONGTYPE" in str(results[4])
    with pytest.raises(BackendError, match="5 leases"):
        decode_renew_many(items, [1, 2])


def test_renew_many_args() -> None:
    """KEYS are the lease keys in order; ARGV alternates owner token and TTL."""
    assert renew_many_args("p", [("a", "o1", 10), ("b", "o2", 20)]) == (
        ["p:{a}", "p:{b}"],
        ["o1", 10, "o2", 20],
    )
