"""Decisions both faces make once (fencedlease._core.decisions), each checked on both faces: the
injected clock drives the waits between acquire attempts, a fake clock stepped by exactly one
heartbeat renews, a closed manager raises ManagerClosedError, and what a raising renew-error hook
does. In-process memory store, a FakeClock; no wall-clock windows (the sync renewer is waited for
with events and a generous poll)."""

from __future__ import annotations

import asyncio
import pickle
import random
import threading
import time
from collections.abc import Callable, Sequence

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from fencedlease import FencedLeaseError, LeaseLostError, LeaseManager, ManagerClosedError, db
from fencedlease._core import errors as _errors
from fencedlease._core.attempt import AcquireAttempt
from fencedlease._core.decisions import AcquireEnd, SendAcquire, WaitForRelease, acquire_steps
from fencedlease._core.protocol import AcquireReply
from fencedlease._core.schedule import RenewalEntry, RenewalSchedule
from fencedlease._core.state import LeaseState, LossReason
from fencedlease._redis.errors import backend_error
from fencedlease.aio import AsyncLeaseManager
from fencedlease.aio import ManagerClosedError as AioManagerClosedError
from fencedlease.backends.memory import AsyncMemoryBackend, MemoryBackend
from fencedlease.testing import FakeClock

PATIENCE_S = 30.0


def eventually(predicate: Callable[[], bool]) -> None:
    """Poll ``predicate`` (a count no event signals) until true, or fail after PATIENCE_S."""
    give_up = time.monotonic() + PATIENCE_S
    while not predicate():
        assert time.monotonic() < give_up, "the renewer did not act on the clock's step"
        time.sleep(0.002)


class TimedBackend(MemoryBackend):
    """Records the fake time (ms) of every acquire and every renewal round trip."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.fake = clock
        self.acquires: list[int] = []
        self.renewals: list[int] = []
        self.fail_renewals = 0

    def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        self.acquires.append(round(self.fake.monotonic() * 1000))
        return super().acquire(key, owner_token, ttl_ms)

    def renew_many(self, items: Sequence[tuple[str, str, int]]) -> list[int | BaseException]:
        self.renewals.append(round(self.fake.monotonic() * 1000))
        if self.fail_renewals:
            self.fail_renewals -= 1
            raise backend_error("store", RedisConnectionError("reset"))
        return super().renew_many(items)


# -- the clock sleeps: a waiting acquire runs on fake time ---------------------------------------

# wait_ms=500, retry_delay_ms=100 with the jitter pinned to 1.0: attempts every 100 ms, and the
# wait that spends the budget (400 -> 500) is followed by one last attempt at 500.
EXPECTED_ATTEMPTS_MS = [0, 100, 200, 300, 400, 500]


@pytest.fixture
def no_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(random, "uniform", lambda low, high: 1.0)


@pytest.mark.usefixtures("no_jitter")
def test_a_waiting_acquire_runs_on_the_fake_clock_sync() -> None:
    clock = FakeClock()
    backend = TimedBackend(clock)
    with LeaseManager(backend, clock=clock) as leases:
        holder = leases.acquire("k", ttl_ms=60_000).lease
        assert holder is not None
        started = time.monotonic()
        result = leases.acquire("k", ttl_ms=1_000, wait_ms=500, retry_delay_ms=100)
        real_s = time.monotonic() - started
    assert result.lease is None
    assert backend.acquires == [0, *EXPECTED_ATTEMPTS_MS]
    assert clock.elapsed_ms == 500
    assert real_s < 5.0  # far below: no real sleep at all (a busy machine only slows it down)


@pytest.mark.usefixtures("no_jitter")
def test_a_waiting_acquire_runs_on_the_fake_clock_async() -> None:
    clock = FakeClock()
    backend = TimedBackend(clock)

    async def main() -> AcquireReply | None:
        async with AsyncLeaseManager(AsyncMemoryBackend(sync=backend), clock=clock) as leases:
            holder = (await leases.acquire("k", ttl_ms=60_000)).lease
            assert holder is not None
            result = await leases.acquire("k", ttl_ms=1_000, wait_ms=500, retry_delay_ms=100)
            assert result.lease is None
            return None

    asyncio.run(main())
    assert backend.acquires == [0, *EXPECTED_ATTEMPTS_MS]
    assert clock.elapsed_ms == 500


@pytest.mark.usefixtures("no_jitter")
def test_a_waiting_acquire_gets_the_key_when_it_lapses_on_fake_time_sync() -> None:
    """The holder's 250 ms TTL lapses during the wait: the attempt at 300 ms gets the key, with
    the next fencing token."""
    clock = FakeClock()
    backend = TimedBackend(clock)
    with LeaseManager(backend, clock=clock) as leases:
        assert leases.acquire("k", ttl_ms=250).acquired
        lease = leases.acquire("k", ttl_ms=1_000, wait_ms=500, retry_delay_ms=100).lease
        assert lease is not None
        assert lease.fencing_token == 2
    assert backend.acquires == [0, 0, 100, 200, 300]


@pytest.mark.usefixtures("no_jitter")
def test_a_waiting_acquire_gets_the_key_when_it_lapses_on_fake_time_async() -> None:
    clock = FakeClock()
    backend = TimedBackend(clock)

    async def main() -> None:
        async with AsyncLeaseManager(AsyncMemoryBackend(sync=backend), clock=clock) as leases:
            assert (await leases.acquire("k", ttl_ms=250)).acquired
            got = await leases.acquire("k", ttl_ms=1_000, wait_ms=500, retry_delay_ms=100)
            assert got.lease is not None
            assert got.lease.fencing_token == 2

    asyncio.run(main())
    assert backend.acquires == [0, 0, 100, 200, 300]


def test_fake_clock_sleep_moves_the_clock() -> None:
    clock = FakeClock()
    clock.sleep(0.1)
    clock.sleep(0.05)
    assert (clock.monotonic(), clock.elapsed_ms) == (0.15, 150)
    asyncio.run(clock.async_sleep(0.05))
    assert clock.monotonic() == 0.2
    with pytest.raises(ValueError, match="seconds must be a finite number >= 0"):
        clock.sleep(-1)


# -- a step of exactly one heartbeat renews --------------------------------------------------------


def test_a_step_of_exactly_one_heartbeat_renews_sync() -> None:
    """ttl 200 ms, heartbeat 50 ms, the acquire sent at 100 ms: 0.1 + 0.2 - 0.2 + 0.05 is not
    0.15 in floats; each step of exactly 50 ms must still renew, at 150, 200, 250 ms."""
    clock = FakeClock()
    backend = TimedBackend(clock)
    clock.advance(100)
    with (
        LeaseManager(backend, clock=clock) as leases,
        leases.hold("k", ttl_ms=200, heartbeat_ms=50) as lease,
    ):
        for step in (1, 2, 3):
            clock.advance(50)
            eventually(lambda step=step: len(backend.renewals) == step)  # type: ignore[misc]
        assert leases.renewer.round_trips == 3
        assert not lease.lost
    assert backend.renewals == [150, 200, 250]


def test_a_step_of_exactly_one_heartbeat_renews_async() -> None:
    clock = FakeClock()
    backend = TimedBackend(clock)
    clock.advance(100)

    async def main() -> None:
        async with (
            AsyncLeaseManager(AsyncMemoryBackend(sync=backend), clock=clock) as leases,
            leases.hold("k", ttl_ms=200, heartbeat_ms=50) as lease,
        ):
            for step in (1, 2, 3):
                clock.advance(50)
                leases.renewer.wake()
                for _ in range(20):  # the renewal task runs within a few loop iterations
                    await asyncio.sleep(0)
                assert len(backend.renewals) == step
            assert not lease.lost

    asyncio.run(main())
    assert backend.renewals == [150, 200, 250]


def test_a_step_of_exactly_the_ttl_is_a_loss() -> None:
    """The deadline is on the grid too: 0.1 + 0.2 reaches 0.3 (a lease without renewal)."""
    clock = FakeClock()
    clock.advance(100)
    with LeaseManager(MemoryBackend(clock=clock), clock=clock) as leases:
        lease = leases.acquire("k", ttl_ms=200).lease
        assert lease is not None
        clock.advance(199)
        assert not lease.lost
        clock.advance(1)
        assert lease.lost
        assert lease.lost_reason == LossReason.DEADLINE


# -- a closed manager ----------------------------------------------------------------------------


class ClosingClock(FakeClock):
    """A fake clock whose first sleep closes ``manager`` (a wait interrupted by close())."""

    manager: LeaseManager | AsyncLeaseManager | None = None

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        if isinstance(self.manager, LeaseManager):
            self.manager.close()

    async def async_sleep(self, seconds: float) -> None:
        FakeClock.sleep(self, seconds)
        if isinstance(self.manager, AsyncLeaseManager):
            await self.manager.close()


def test_manager_closed_error_is_in_the_tree() -> None:
    assert AioManagerClosedError is ManagerClosedError
    assert issubclass(ManagerClosedError, FencedLeaseError)
    assert issubclass(ManagerClosedError, RuntimeError)
    again = pickle.loads(pickle.dumps(ManagerClosedError(ManagerClosedError.WHILE_WAITING)))
    assert (type(again), str(again)) == (ManagerClosedError, ManagerClosedError.WHILE_WAITING)


def test_row_not_found_error_lives_in_the_error_tree() -> None:
    """Every public error class is in _errors; fencedlease.db still exports RowNotFoundError."""
    assert db.RowNotFoundError is _errors.RowNotFoundError
    assert issubclass(db.RowNotFoundError, FencedLeaseError)
    assert issubclass(db.RowNotFoundError, LookupError)
    assert "RowNotFoundError" in (_errors.__doc__ or "")
    assert "ManagerClosedError" in (_errors.__doc__ or "")


def test_a_closed_manager_raises_manager_closed_error_sync() -> None:
    clock = ClosingClock()
    backend = MemoryBackend(clock=clock)
    leases = LeaseManager(backend, clock=clock)
    other = LeaseManager(backend, clock=clock)
    assert other.acquire("k", ttl_ms=60_000).acquired
    clock.manager = leases
    with pytest.raises(ManagerClosedError) as waited:
        leases.acquire("k", ttl_ms=1_000, wait_ms=500, retry_delay_ms=100)
    assert str(waited.value) == "the lease manager was closed while this acquire waited"
    with pytest.raises(ManagerClosedError, match=r"^the lease manager is closed$"):
        leases.acquire("free")
    with (
        pytest.raises(ManagerClosedError, match=r"^the lease manager is closed$"),
        leases.hold("free"),
    ):
        pass
    with pytest.raises(ManagerClosedError, match=r"^the lease manager is closed$"):
        leases.with_lease("free", lambda lease: None)
    assert backend.inspect("free") is None
    other.close()


def test_a_closed_manager_raises_manager_closed_error_async() -> None:
    clock = ClosingClock()
    backend = MemoryBackend(clock=clock)

    async def main() -> None:
        leases = AsyncLeaseManager(AsyncMemoryBackend(sync=backend), clock=clock)
        other = LeaseManager(backend, clock=clock)
        assert other.acquire("k", ttl_ms=60_000).acquired
        clock.manager = leases
        with pytest.raises(ManagerClosedError) as waited:
            await leases.acquire("k", ttl_ms=1_000, wait_ms=500, retry_delay_ms=100)
        assert str(waited.value) == "the lease manager was closed while this acquire waited"
        with pytest.raises(ManagerClosedError, match=r"^the lease manager is closed$"):
            await leases.acquire("free")
        with pytest.raises(ManagerClosedError, match=r"^the lease manager is closed$"):
            async with leases.hold("free"):
                pass  # never entered

        async def body(lease: object) -> None:
            return None

        with pytest.raises(ManagerClosedError, match=r"^the lease manager is closed$"):
            await leases.with_lease("free", body)
        assert backend.inspect("free") is None
        other.close()

    asyncio.run(main())


# -- a raising on_renew_error hook ---------------------------------------------------------------


class StopRenewing(BaseException):
    """A BaseException that is not an Exception, as KeyboardInterrupt and SystemExit are."""


def _hook(raise_: BaseException, seen: threading.Event) -> Callable[[BaseException], None]:
    def hook(error: BaseException) -> None:
        seen.set()
        raise raise_

    return hook


def test_a_hook_raising_an_exception_is_logged_and_renewal_goes_on_sync() -> None:
    clock = FakeClock()
    backend = TimedBackend(clock)
    backend.fail_renewals = 1
    seen = threading.Event()
    with (
        LeaseManager(backend, clock=clock) as leases,
        leases.hold(
            "k", ttl_ms=200, heartbeat_ms=50, on_renew_error=_hook(ValueError("bug"), seen)
        ) as lease,
    ):
        clock.advance(50)  # the renewal fails, the hook raises ValueError
        assert seen.wait(PATIENCE_S)
        clock.advance(50)  # the retry (12.5 ms later) and the next heartbeat are due
        eventually(lambda: len(backend.renewals) == 2)
        assert not lease.lost
    assert backend.renewals == [50, 100]


def test_a_hook_raising_an_exception_is_logged_and_renewal_goes_on_async() -> None:
    clock = FakeClock()
    backend = TimedBackend(clock)
    backend.fail_renewals = 1
    seen = threading.Event()

    async def main() -> None:
        async with AsyncLeaseManager(AsyncMemoryBackend(sync=backend), clock=clock) as leases:
            hook = _hook(ValueError("bug"), seen)
            async with leases.hold("k", ttl_ms=200, heartbeat_ms=50, on_renew_error=hook) as lease:
                for _ in range(2):
                    clock.advance(50)
                    leases.renewer.wake()
                    for _ in range(20):
                        await asyncio.sleep(0)
                assert seen.is_set()
                assert not lease.lost

    asyncio.run(main())
    assert backend.renewals == [50, 100]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_hook_raising_a_base_exception_stops_the_renewer_sync() -> None:
    """Not swallowed: the renewer stops, its leases are lost (the hold ends in LeaseLostError
    naming it), and a later hold gets a new renewer."""
    clock = FakeClock()
    backend = TimedBackend(clock)
    backend.fail_renewals = 1
    seen = threading.Event()
    with LeaseManager(backend, clock=clock) as leases:
        with (
            pytest.raises(LeaseLostError) as lost,
            leases.hold(
                "k", ttl_ms=200, heartbeat_ms=50, on_renew_error=_hook(StopRenewing(), seen)
            ) as lease,
        ):
            clock.advance(50)
            assert lease.wait_lost(int(PATIENCE_S * 1000))
        assert lost.value.key == "k"
        assert str(lost.value) == (
            f"lease 'k' (fencing token 1) was lost: {LossReason.RENEWER_FAILED}: StopRenewing()"
        )
        assert seen.is_set()
        with leases.hold("k2", ttl_ms=200, heartbeat_ms=50):
            clock.advance(50)
            eventually(lambda: len(backend.renewals) == 2)


def test_a_hook_raising_a_base_exception_stops_the_renewer_async() -> None:
    clock = FakeClock()
    backend = TimedBackend(clock)
    backend.fail_renewals = 1
    seen = threading.Event()

    async def main() -> None:
        async with AsyncLeaseManager(AsyncMemoryBackend(sync=backend), clock=clock) as leases:
            hook = _hook(StopRenewing(), seen)
            with pytest.raises(LeaseLostError) as lost:
                async with leases.hold("k", ttl_ms=200, heartbeat_ms=50, on_renew_error=hook):
                    clock.advance(50)
                    leases.renewer.wake()
                    await asyncio.Event().wait()  # cancelled by the loss
            assert str(lost.value) == (
                f"lease 'k' (fencing token 1) was lost: {LossReason.RENEWER_FAILED}: StopRenewing()"
            )
            assert seen.is_set()
            async with leases.hold("k2", ttl_ms=200, heartbeat_ms=50):
                clock.advance(50)
                leases.renewer.wake()
                for _ in range(20):
                    await asyncio.sleep(0)
                assert len(backend.renewals) == 2

    asyncio.run(main())


def test_the_schedule_is_on_the_nanosecond_grid() -> None:
    """The pure half of the one-heartbeat step: a lease granted at 0.1 s for 200 ms, heartbeat
    50 ms, is due at exactly 0.15 (not 0.15000000000000002), so a clock reading 0.15 pops it and
    the next wake-up is not an ulp away (what made the sync renewer spin)."""
    schedule = RenewalSchedule()
    state = LeaseState.granted("k", "owner", 1, 200, 0.1, 1_700_000_000.1)
    assert state.deadline == 0.3
    entry = RenewalEntry(state, 50, None)
    schedule.add(entry, 0.1)
    assert schedule.next_wakeup(batches_in_flight=0) == 0.15
    assert schedule.pop_batch(0.15, 10) == [entry]
    assert schedule.apply([entry], 0.15, 1_700_000_000.15, [1], now=0.15) == []
    assert (state.deadline, entry.next_due) == (0.35, 0.2)
    assert schedule.pop_expired(0.35) == [entry]
    assert state.lost_reason == LossReason.DEADLINE


def test_the_acquire_loop_is_one_generator_no_io() -> None:
    """acquire_steps decides, the caller only answers: a lost reply is resent once with the same
    owner token; a held key is waited for on the budget; a wait close() ended raises
    ManagerClosedError; the attempt is then uncertain only while a command may have landed."""
    clock = FakeClock()
    attempt = AcquireAttempt("k", 1_000, 250, 100, clock, uniform=lambda low, high: 1.0)
    steps = acquire_steps(attempt, queues=False)
    assert next(steps) == SendAcquire()
    lost_reply = backend_error("store", RedisConnectionError("reset by peer"))
    assert steps.throw(lost_reply) == SendAcquire()  # resent, same owner token
    assert steps.send(AcquireReply(False, 0, 900)) == WaitForRelease(0.1, False)
    clock.sleep(0.1)
    assert steps.send(False) == SendAcquire()
    assert steps.send(AcquireReply(False, 0, 800)) == WaitForRelease(0.1, False)
    clock.sleep(0.1)
    assert steps.send(False) == SendAcquire()
    assert steps.send(AcquireReply(False, 0, 700)) == WaitForRelease(0.05, True)  # the last
    with pytest.raises(ManagerClosedError, match="closed while this acquire waited"):
        steps.send(True)
    assert attempt.uncertain  # the lost reply's acquire may still land: the face releases


def test_the_acquire_loop_returns_the_grant_and_the_give_up() -> None:
    clock = FakeClock()
    granted = acquire_steps(AcquireAttempt("k", 1_000, 0, 100, clock), queues=False)
    assert next(granted) == SendAcquire()
    with pytest.raises(StopIteration) as stop:
        granted.send(AcquireReply(True, 7, 1_000))
    end = stop.value.value
    assert isinstance(end, AcquireEnd)
    assert end.state is not None
    assert (end.state.fencing_token, end.state.deadline, end.leave_queue) == (7, 1.0, False)
    refused = acquire_steps(AcquireAttempt("k", 1_000, 0, 100, clock), queues=True)
    assert next(refused) == SendAcquire()
    with pytest.raises(StopIteration) as stop:
        refused.send(AcquireReply(False, 0, 640))
    assert stop.value.value == AcquireEnd(None, 640, leave_queue=False)
