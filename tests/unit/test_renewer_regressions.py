"""Renewer and manager defects found by an adversarial review, kept as regressions.

In-process MemoryBackend (no server); the behaviour under test is the renewer thread's. Where time
matters, backend and manager share a FakeClock that the test steps, and the test waits for the
renewer's answer to each step (an event, or a count it polls with a deadline far past the
renewer's real-time sleeps), so a loaded machine only slows the test down.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from fencedlease import BackendError, Lease, LeaseLostError, LeaseManager, LeaseNotAcquiredError
from fencedlease._async.releases import release_abandoned
from fencedlease._core.decisions import CLEANUP_WORKERS
from fencedlease._core.protocol import AcquireReply
from fencedlease._core.state import LossReason
from fencedlease._redis.errors import backend_error
from fencedlease.aio import AsyncLeaseManager
from fencedlease.backends.memory import AsyncMemoryBackend, MemoryBackend
from fencedlease.testing import FakeClock

PATIENCE_S = 30.0
"""How long a test waits for the renewer thread to act on a step of the fake clock. The renewer
sleeps at most one heartbeat (real seconds) between looks, so only a starved machine comes near."""


STEP_MS = 60
"""A step of the fake clock a little longer than the 50 ms heartbeats (and retries) below, so the
renewal due within it is due by its end whatever float rounding the schedule's sums carry."""


def eventually(predicate: Callable[[], bool], timeout_s: float = PATIENCE_S) -> None:
    """Poll ``predicate`` (something no event signals: a renewal count) until true, or fail."""
    give_up = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < give_up, "the renewer did not act on the clock's step in time"
        time.sleep(0.002)


def _error(cause: BaseException) -> BackendError:
    """As the Redis adapter raises it: classified, the redis-py error in ``__cause__``."""
    err = backend_error("store", cause)
    err.__cause__ = cause
    return err


class ReplyLosingBackend(MemoryBackend):
    """Renewals reach the store (the TTL is reset) but, while ``drop`` is set, the reply is lost."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.drop = False
        self.dropped = 0

    def renew_many(self, items: Sequence[tuple[str, str, int]]) -> list[int | BaseException]:
        time.sleep(0.003)  # a round trip takes a little time, as with Redis
        results = super().renew_many(items)
        if self.drop:
            self.dropped += 1
            raise _error(RedisConnectionError("reset by peer"))
        return results


@pytest.mark.parametrize("manual_renew", [False, True], ids=["background-only", "manual-renew"])
def test_silence_is_loss_even_after_a_manual_renew(manual_renew: bool) -> None:
    """A manual renew() inside hold moves the deadline; the renewer still watches it, so ttl_ms of
    unanswered renewals is a loss, and answers arriving later never revive the lease."""
    clock = FakeClock()
    backend = ReplyLosingBackend(clock)
    fired = threading.Event()
    with (
        LeaseManager(backend, clock=clock) as leases,
        pytest.raises(LeaseLostError),
        leases.hold("k", ttl_ms=300, heartbeat_ms=75) as lease,
    ):
        lease._state.add_listener(lambda _state: fired.set())
        if manual_renew:
            clock.advance(50)
            assert lease.renew() is True  # confirmed at 50 ms: the deadline moves to 350 ms
        deadline_ms = 350 if manual_renew else 300
        backend.drop = True
        clock.advance(deadline_ms - 1 - clock.elapsed_ms)  # renewals go out; no reply comes
        eventually(lambda: backend.dropped >= 1)
        assert not fired.is_set()
        clock.advance(1)
        assert fired.wait(PATIENCE_S), "the renewer never declared the lease lost at its deadline"
        assert lease.lost_reason == LossReason.DEADLINE
        backend.drop = False
        time.sleep(0.2)  # answers come back: they must not revive it
        assert lease.lost


class GatedBackend(MemoryBackend):
    """The first renew_many waits (a slow round trip) until ``gate`` is set; later ones fail."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.batches = 0

    def renew_many(self, items: Sequence[tuple[str, str, int]]) -> list[int | BaseException]:
        self.batches += 1
        if self.batches == 1:
            self.entered.set()
            assert self.gate.wait(PATIENCE_S)
            return super().renew_many(items)
        raise _error(RedisConnectionError("reset by peer"))


def test_a_background_renewal_is_confirmed_with_the_ttl_it_sent() -> None:
    """A batch sent with ttl 300 lands after a manual renew(5000): the local deadline follows the
    300 ms the store now has, so the lease is lost before another owner can take the key."""
    clock = FakeClock()
    backend = GatedBackend(clock)
    with (
        LeaseManager(backend, clock=clock) as leases,
        LeaseManager(backend, clock=clock) as other,
        pytest.raises(LeaseLostError),
        leases.hold("k", ttl_ms=300, heartbeat_ms=100) as lease,
    ):
        clock.advance(100)
        assert backend.entered.wait(PATIENCE_S)  # the batch went out at 100 ms with ttl 300
        assert lease.renew(ttl_ms=5_000) is True
        assert lease.ttl_ms == 5_000
        backend.gate.set()  # the in-flight batch (ttl 300) now lands at the store
        eventually(lambda: lease.ttl_ms == 300)  # ...and its reply reaches the lease
        clock.advance(299)  # 399 ms: the store still holds the key, the lease is not lost
        assert other.acquire("k", ttl_ms=10_000).lease is None
        assert not lease.lost
        clock.advance(1)  # 400 ms: 300 ms after the batch was sent
        taken = other.acquire("k", ttl_ms=10_000)
        assert taken.lease is not None  # the store says the key lapsed...
        assert lease.lost  # ...and the holder already knows
        assert taken.lease.release()


def test_renewals_run_every_heartbeat_with_a_fast_backend() -> None:
    """A round trip that completes before its callback is attached still wakes the renewer: at a
    50 ms heartbeat, each 60 ms step of the clock gets exactly one renewal, 12 in 12 steps (a
    renewer that missed the wake-up would sleep to the deadline, 60 s away, and the next step
    would never be answered)."""
    clock = FakeClock()
    with LeaseManager(MemoryBackend(clock=clock), clock=clock) as leases:
        with leases.hold("k", ttl_ms=60_000, heartbeat_ms=50):
            for beat in range(1, 13):
                clock.advance(STEP_MS)
                eventually(lambda: _store_ttl_ms(leases, "k") == 60_000)  # renewed at this step
                assert leases.renewer.round_trips == beat
        assert leases.renewer.round_trips == 12


def test_a_refused_renewal_is_noticed_within_a_heartbeat() -> None:
    """An operator force-releases the key: the next renewal, one 50 ms heartbeat on, reports the
    loss (the deadline is 60 s away, so the reason tells which noticed it)."""
    clock = FakeClock()
    backend = MemoryBackend(clock=clock)
    with (
        LeaseManager(backend, clock=clock) as leases,
        LeaseManager(backend, clock=clock) as operator,
        pytest.raises(LeaseLostError),
        leases.hold("k", ttl_ms=60_000, heartbeat_ms=50) as lease,
    ):
        assert operator.force_release("k")
        clock.advance(50)
        assert lease.wait_lost(int(PATIENCE_S * 1000)) is True
        assert lease.lost_reason == LossReason.RENEW_REFUSED
        assert leases.renewer.round_trips == 1


def _store_ttl_ms(leases: LeaseManager, key: str) -> int | None:
    """The TTL the store has left on ``key`` (on a fake clock, the full TTL right after a
    renewal at the current instant)."""
    info = leases.inspect(key)
    return None if info is None else info.ttl_ms


class FailOnce(MemoryBackend):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.calls = 0

    def renew_many(self, items: Sequence[tuple[str, str, int]]) -> list[int | BaseException]:
        self.calls += 1
        if self.calls == 1:
            raise _error(RedisConnectionError("reset"))
        return super().renew_many(items)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_renewer_fails_its_leases_and_a_new_hold_gets_a_live_one() -> None:
    """The renewer thread dies of a bug: its leases are failed loudly, and the next hold on the
    same manager is renewed by a new thread, never registered with a dead one."""
    clock = FakeClock()
    backend = MemoryBackend(clock=clock)
    with LeaseManager(backend, clock=clock) as leases, LeaseManager(backend, clock=clock) as other:
        schedule = leases.renewer._schedule
        real = schedule.pop_expired
        calls = 0

        def broken_once(now: float) -> list[object]:
            nonlocal calls
            calls += 1
            if calls == 2:
                raise RuntimeError("renewer bug")
            return real(now)  # type: ignore[return-value]

        schedule.pop_expired = broken_once  # type: ignore[method-assign,assignment]
        with pytest.raises(LeaseLostError, match="renewer"), leases.hold("a", ttl_ms=300) as a:
            # the clock stands still: only the renewer's death, at its next look, loses the lease
            assert a.wait_lost(int(PATIENCE_S * 1000))
        trips = leases.renewer.round_trips
        with leases.hold("b", ttl_ms=300, heartbeat_ms=50) as b:
            for _ in range(10):  # 600 ms > ttl_ms
                clock.advance(STEP_MS)
                eventually(lambda: _store_ttl_ms(leases, "b") == 300)
            assert not other.acquire("b", ttl_ms=1_000).acquired
            assert not b.lost
        assert leases.renewer.round_trips == trips + 10


class LostReplyThenFailure(MemoryBackend):
    """The first acquire runs at the store but its reply is lost; the resend fails too."""

    def __init__(self, second: BaseException) -> None:
        super().__init__()
        self.calls = 0
        self.second = second

    def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        self.calls += 1
        if self.calls == 1:
            super().acquire(key, owner_token, ttl_ms)
            raise _error(RedisConnectionError("Connection reset by peer"))
        if self.calls == 2:
            raise _error(self.second)
        return super().acquire(key, owner_token, ttl_ms)


@pytest.mark.parametrize(
    "second",
    [ResponseError("LOADING Redis is loading"), RedisConnectionError("Connection refused")],
    ids=["resend-refused", "resend-reset-again"],
)
def test_a_failed_acquire_leaves_no_orphaned_lease(second: BaseException) -> None:
    """When the resend after a lost reply fails, the error reaches the caller and the grant the
    first command made is released (in the background) with that attempt's owner token."""
    backend = LostReplyThenFailure(second)
    with LeaseManager(backend) as leases:
        with pytest.raises(BackendError):
            leases.acquire("job", ttl_ms=600_000)  # it cannot lapse while the test waits
        eventually(lambda: leases.inspect("job") is None)
        assert backend.calls == 2


def test_with_lease_does_not_turn_fns_error_into_skipped() -> None:
    """A LeaseNotAcquiredError raised by fn itself (a nested hold on the same key) propagates;
    only this call's own acquire becomes a skipped outcome."""
    with LeaseManager(MemoryBackend()) as leases:

        def nested(_lease: object) -> None:
            with leases.hold("k", ttl_ms=1_000):
                pytest.fail("the same key cannot be held twice")

        with pytest.raises(LeaseNotAcquiredError):
            leases.with_lease("k", nested, ttl_ms=1_000)


class SlowReleaseReply(MemoryBackend):
    """The release runs at the store at once; its reply arrives 2 s later (the clock moves while
    it is in flight, and a watcher reads ``lease.lost`` meanwhile)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.fake_clock = clock
        self.while_in_flight: list[bool] = []
        self.lease: Lease | None = None

    def release(self, key: str, owner_token: str) -> bool:
        released = super().release(key, owner_token)
        self.fake_clock.advance(2_000)
        assert self.lease is not None
        self.while_in_flight.append(self.lease.lost)
        return released


def test_a_release_in_flight_past_the_deadline_is_not_a_loss() -> None:
    """The release ran at the store before the deadline; its reply lands after it. The lease is
    released, not lost, and hold does not raise (rule 4: the release's reply decides)."""
    clock = FakeClock()
    backend = SlowReleaseReply(clock)
    with LeaseManager(backend, clock=clock) as leases:
        with leases.hold("k", ttl_ms=1_000, heartbeat_ms=False) as lease:
            backend.lease = lease
            clock.advance(900)
        assert backend.while_in_flight == [False]
        assert lease.lost is False
        assert leases.inspect("k") is None


class _BlockedReleases(MemoryBackend):
    """A memory store whose releases block until ``go`` is set; ``started`` lists those running."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()
        self.lock = threading.Lock()
        self.started: list[str] = []
        self.both = threading.Event()

    def release(self, key: str, owner_token: str) -> bool:
        with self.lock:
            self.started.append(owner_token)
            if len(self.started) == 2:
                self.both.set()
        self.go.wait(30)
        return False


def test_clean_up_releases_run_side_by_side() -> None:
    """A second clean-up release starts while the first is still out: a give-up's release is
    not queued behind another's round trip."""
    backend = _BlockedReleases()
    leases = LeaseManager(backend, clock=FakeClock())
    try:
        leases._clean_up("k", "first")
        leases._clean_up("k", "second")
        assert backend.both.wait(10), f"only {backend.started} started"
    finally:
        backend.go.set()
        leases.close()
    assert sorted(backend.started) == ["first", "second"]


class _AsyncBlockedReleases:
    """An asyncio backend whose releases wait for ``go``; the most that ran at once."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.running = self.most = self.done = 0

    async def release(self, key: str, owner_token: str) -> bool:
        self.running += 1
        self.most = max(self.most, self.running)
        await self.go.wait()
        self.running -= 1
        self.done += 1
        return False


def test_asyncio_clean_up_releases_take_at_most_their_slots() -> None:
    """Three clean-up releases with two slots: two run, the third waits for a slot (it is neither
    sent nor refused for want of a connection), then runs; the manager gives its releases
    CLEANUP_WORKERS slots."""

    async def scenario() -> tuple[int, int, int, int]:
        backend, slots = _AsyncBlockedReleases(), asyncio.Semaphore(2)
        tasks = [
            asyncio.create_task(release_abandoned(backend, "k", f"owner-{i}", slots))  # type: ignore[arg-type]
            for i in range(3)
        ]
        for _ in range(20):  # every task has had its turns on the loop
            await asyncio.sleep(0)
        waiting = backend.running
        backend.go.set()
        await asyncio.gather(*tasks)
        async with AsyncLeaseManager(AsyncMemoryBackend()) as leases:
            manager_slots = leases._cleanups._value
        return waiting, backend.most, backend.done, manager_slots

    assert asyncio.run(scenario()) == (2, 2, 3, CLEANUP_WORKERS)
