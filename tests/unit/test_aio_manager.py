"""AsyncLeaseManager without a server: the sync face's unit cases, loss and cancellation, on a
backend that suspends around every call (StepBackend) and a FakeClock."""

from __future__ import annotations

import asyncio
import math
import sys
import time
from typing import Any

import pytest
from test_aio_support import StepBackend, outcome, refused, run, settle

from fencedlease import (
    BackendError,
    LeaseLostError,
    LeaseNotAcquiredError,
    ValidationError,
)
from fencedlease._core.clock import SYSTEM_CLOCK
from fencedlease._core.state import LossReason
from fencedlease.aio import AsyncLease, AsyncLeaseManager
from fencedlease.aio.testing import cancel_at_suspension
from fencedlease.testing import FakeClock


def _manager(backend: StepBackend) -> AsyncLeaseManager:
    return AsyncLeaseManager(backend, clock=backend.clock)


# -- validation -------------------------------------------------------------------------------

BAD_TTLS: list[Any] = [0, -5, 0.5, True, math.nan, 2**31, None, "100"]


@pytest.mark.parametrize("ttl", BAD_TTLS)
def test_bad_ttl_is_refused_before_any_io(ttl: Any) -> None:
    """ttl_ms = 0, -5, 0.5, True, NaN, 2**31, None, "100": ValidationError naming ttl_ms, from
    acquire, hold and with_lease, and no command is sent."""

    async def main() -> None:
        backend = StepBackend()
        async with _manager(backend) as leases:
            with pytest.raises(ValidationError) as info:
                await leases.acquire("k", ttl_ms=ttl)
            assert info.value.argument == "ttl_ms"
            with pytest.raises(ValidationError):
                leases.hold("k", ttl_ms=ttl)
            with pytest.raises(ValidationError):
                await leases.with_lease("k", _never, ttl_ms=ttl)
        assert backend.calls == []

    run(main)


async def _never(lease: AsyncLease) -> None:
    pytest.fail("fn ran")


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"wait_ms": -1}, "wait_ms"),
        ({"wait_ms": 1.5}, "wait_ms"),
        ({"retry_delay_ms": 0}, "retry_delay_ms"),
        ({"key": ""}, "key"),
        ({"key": b"k"}, "key"),
    ],
)
def test_bad_arguments_name_themselves(kwargs: dict[str, Any], argument: str) -> None:
    """wait_ms=-1, retry_delay_ms=0, an empty or non-str key: ValidationError naming it."""

    async def main() -> None:
        async with _manager(StepBackend()) as leases:
            values: dict[str, Any] = {"key": "k", **kwargs}
            key = values.pop("key")
            with pytest.raises(ValidationError) as info:
                await leases.acquire(key, **values)
            assert info.value.argument == argument

    run(main)


def test_heartbeat_bounds() -> None:
    """An explicit heartbeat above ttl_ms // 2 is refused with the bound in the message; the
    default is ttl_ms // 4."""

    async def main() -> None:
        async with _manager(StepBackend()) as leases:
            with pytest.raises(ValidationError, match=r"at most half of ttl_ms \(500\)"):
                leases.hold("k", ttl_ms=1_000, heartbeat_ms=501)
            leases.hold("k", ttl_ms=1_000, heartbeat_ms=500)
            async with leases.hold("k", ttl_ms=1_000) as lease:
                assert lease._entry is not None
                assert lease._entry.heartbeat_s == 0.25

    run(main)


def test_a_sync_client_is_refused() -> None:
    """Passing a redis.Redis (sync) is a TypeError pointing at LeaseManager."""
    import redis

    with pytest.raises(TypeError, match="LeaseManager"):
        AsyncLeaseManager(redis.Redis())  # type: ignore[arg-type]


def test_from_url_refuses_other_schemes() -> None:
    """from_url takes redis://, rediss:// and unix:// for now; others are a ValidationError."""
    with pytest.raises(ValidationError) as info:
        AsyncLeaseManager.from_url("http://127.0.0.1:6379")
    assert info.value.argument == "url"


# -- acquiring --------------------------------------------------------------------------------


def test_acquire_fails_fast_with_the_holders_ttl() -> None:
    """wait_ms=0: a held key answers at once, not acquired, with the holder's remaining TTL."""

    async def main() -> None:
        backend = StepBackend()
        async with _manager(backend) as leases:
            first = await leases.acquire("k", ttl_ms=1_000)
            assert first.lease is not None
            assert (first.acquired, bool(first), first.lease.fencing_token) == (True, True, 1)
            backend.clock.advance(400)
            second = await leases.acquire("k", ttl_ms=1_000)
            assert (second.acquired, bool(second), second.lease) == (False, False, None)
            assert second.holder_ttl_ms == 600
            assert backend.calls == ["acquire", "acquire"]

    run(main)


def test_lost_acquire_reply_is_resent_with_the_same_owner() -> None:
    """The acquire ran but its reply was lost (a reset): the same acquire is sent again, the
    caller holds the lease with token 1, and the counter was incremented once."""

    async def main() -> None:
        backend = StepBackend()
        backend.lose_acquire_replies = 1
        async with _manager(backend) as leases:
            result = await leases.acquire("k", ttl_ms=1_000)
            assert result.lease is not None
            assert result.lease.fencing_token == 1
            assert backend.calls == ["acquire", "acquire"]
            info = await leases.inspect("k")
            assert info is not None
            assert (info.fencing_token, info.last_issued_token) == (1, 1)
            assert info.owner_fingerprint == result.lease.owner_fingerprint

    run(main)


def test_a_refused_acquire_propagates_and_is_not_acquired() -> None:
    """An error reply reaches the caller as BackendError; with_lease never calls fn."""

    async def main() -> None:
        backend = StepBackend()
        async with _manager(backend) as leases:
            backend.fail_next["acquire"] = error = refused()
            with pytest.raises(BackendError) as info:
                await leases.acquire("k")
            assert info.value is error
            backend.fail_next["acquire"] = refused()
            with pytest.raises(BackendError):
                await leases.with_lease("k", _never)
            assert await leases.inspect("k") is None

    run(main)


def test_two_tasks_share_a_manager() -> None:
    """Task 1's lease expires and task 2 acquires; task 1's release returns False and task 2's
    lease (key, token, owner, TTL) is untouched."""

    async def main() -> None:
        backend = StepBackend()
        clock = backend.clock
        async with _manager(backend) as leases:
            expired, acquired = asyncio.Event(), asyncio.Event()
            seen: dict[str, Any] = {}

            async def task1() -> None:
                lease = (await leases.acquire("k", ttl_ms=200)).lease
                assert lease is not None
                seen["t1"] = lease.fencing_token
                clock.advance(200)
                expired.set()
                await acquired.wait()
                seen["release1"] = await lease.release()
                seen["lost1"] = lease.lost

            async def task2() -> None:
                await expired.wait()
                lease = (await leases.acquire("k", ttl_ms=10_000)).lease
                assert lease is not None
                seen["t2"], seen["lease2"] = lease.fencing_token, lease
                acquired.set()

            await asyncio.gather(task1(), task2())
            lease2: AsyncLease = seen["lease2"]
            assert (seen["t1"], seen["t2"], seen["release1"], seen["lost1"]) == (1, 2, False, True)
            info = await leases.inspect("k")
            assert info is not None
            assert (info.fencing_token, info.owner_fingerprint, info.ttl_ms) == (
                2,
                lease2.owner_fingerprint,
                10_000,
            )
            assert lease2.lost is False
            assert await lease2.release() is True

    run(main)


# -- hold: loss cancels the body --------------------------------------------------------------


def test_loss_cancels_the_body_and_raises_lease_lost() -> None:
    """A renewal finding the key gone cancels the body; hold raises LeaseLostError (not
    CancelledError); the body saw the CancelledError at its await."""

    async def main() -> None:
        backend = StepBackend()
        async with _manager(backend) as leases:
            seen: list[str] = []
            with pytest.raises(LeaseLostError) as info:
                async with leases.hold("k", ttl_ms=400, heartbeat_ms=100):
                    backend.sync.force_release("k")  # an operator deletes the key
                    backend.clock.advance(100)
                    try:
                        await settle(leases)  # the renewal runs and finds the key gone
                        seen.append("not cancelled")
                    except asyncio.CancelledError:
                        seen.append("cancelled")
                        raise
            assert seen == ["cancelled"]
            assert info.value.key == "k"
            assert LossReason.RENEW_REFUSED in str(info.value)
            assert isinstance(info.value.__cause__, asyncio.CancelledError)
            if sys.version_info >= (3, 11):
                task = asyncio.current_task()
                assert task is not None
                assert task.cancelling() == 0  # the loss's cancel was taken back

    run(main)


def test_a_body_that_swallows_the_cancellation_still_ends_lost() -> None:
    """The body catches the CancelledError and returns a value: hold still raises LeaseLostError."""

    async def main() -> None:
        backend = StepBackend()
        async with _manager(backend) as leases:

            async def body(lease: AsyncLease) -> str:
                backend.sync.force_release("k")
                backend.clock.advance(100)
                await settle(leases)
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    return "swallowed"
                return "not cancelled"

            with pytest.raises(LeaseLostError):
                await leases.with_lease("k", body, ttl_ms=400, heartbeat_ms=100)

    run(main)


def test_silence_is_loss_even_with_a_hung_renewal() -> None:
    """The renewal round trip hangs; at ttl_ms after the last confirmation the lease is lost
    anyway, the body is cancelled, and the hung batch is abandoned (nothing left after close)."""

    async def main() -> None:
        backend = StepBackend()
        backend.hang_renewals = asyncio.Event()
        errors: list[BaseException] = []
        async with _manager(backend) as leases:
            with pytest.raises(LeaseLostError) as info:
                async with leases.hold(
                    "k", ttl_ms=400, heartbeat_ms=100, on_renew_error=errors.append
                ) as lease:
                    backend.clock.advance(100)
                    await settle(leases)
                    assert leases.renewer.round_trips == 1  # sent, and hanging
                    backend.clock.advance(299)
                    await settle(leases)
                    assert lease.lost is False
                    backend.clock.advance(1)
                    await settle(leases)
                    await asyncio.Event().wait()
            assert LossReason.DEADLINE in str(info.value)
            assert errors == []  # the only lease of the batch is lost: no retry to report

    run(main)


def test_a_failed_round_trip_is_not_a_loss() -> None:
    """One failed renewal round trip: on_renew_error gets the error, the next try renews, the
    hold completes."""

    async def main() -> None:
        backend = StepBackend()
        errors: list[BaseException] = []
        async with _manager(backend) as leases:
            async with leases.hold(
                "k", ttl_ms=400, heartbeat_ms=100, on_renew_error=errors.append
            ) as lease:
                backend.fail_next["renew_many"] = error = refused()
                backend.clock.advance(100)
                await settle(leases)
                assert errors == [error]
                backend.clock.advance(49)  # the retry comes after min(heartbeat, max(50 ms, hb/4))
                await settle(leases)
                assert backend.calls.count("renew_many") == 1
                backend.clock.advance(2)
                await settle(leases)
                assert backend.calls.count("renew_many") == 2
                assert lease.lost is False
                assert lease._state.deadline == pytest.approx(0.151 + 0.4)
            assert await leases.inspect("k") is None

    run(main)


def test_deadline_checked_when_the_body_ends() -> None:
    """Renewal off, the body outlives its TTL without awaiting: LeaseLostError at the end, and
    no cancellation is left pending on the task."""

    async def main() -> None:
        backend = StepBackend()
        async with _manager(backend) as leases:
            with pytest.raises(LeaseLostError) as info:
                async with leases.hold("k", ttl_ms=100, heartbeat_ms=False):
                    backend.clock.advance(100)
            assert LossReason.DEADLINE in str(info.value)
            await asyncio.sleep(0)  # a stray cancel would land here

    run(main)


def test_body_exception_propagates_and_releases() -> None:
    """An exception from the body propagates unchanged; the key is released."""

    async def main() -> None:
        backend = StepBackend()
        async with _manager(backend) as leases:
            with pytest.raises(KeyError, match="boom"):
                async with leases.hold("k", ttl_ms=1_000):
                    raise KeyError("boom")
            assert await leases.inspect("k") is None

    run(main)


def test_an_outside_cancellation_propagates_and_releases() -> None:
    """Cancelling the task running a hold (not a loss): CancelledError comes out, the key is
    released."""

    async def main() -> None:
        backend = StepBackend()
        async with _manager(backend) as leases:
            entered = asyncio.Event()

            async def holder() -> None:
                async with leases.hold("k", ttl_ms=1_000):
                    entered.set()
                    await asyncio.Event().wait()

            task = asyncio.create_task(holder())
            await entered.wait()
            task.cancel()
            result = await outcome(task)
            assert isinstance(result, asyncio.CancelledError)
            assert await leases.inspect("k") is None

    run(main)


def test_hold_on_a_held_key_never_runs_the_body() -> None:
    """LeaseNotAcquiredError with .key and status 409; with_lease returns a skipped outcome."""

    async def main() -> None:
        async with _manager(StepBackend()) as leases:
            assert await leases.acquire("k", ttl_ms=10_000)
            ran = []
            with pytest.raises(LeaseNotAcquiredError) as info:
                async with leases.hold("k"):
                    ran.append(True)
            assert (ran, info.value.key, info.value.status_code) == ([], "k", 409)
            skipped = await leases.with_lease("k", _never)
            assert (skipped.skipped, skipped.acquired, skipped.value, skipped.lease) == (
                True,
                False,
                None,
                None,
            )

    run(main)


def test_with_lease_value_and_a_nested_refusal_propagates() -> None:
    """with_lease returns fn's value; a LeaseNotAcquiredError raised inside fn (a nested hold on
    the same key) propagates instead of turning into a skipped outcome."""

    async def main() -> None:
        async with _manager(StepBackend()) as leases:

            async def token(lease: AsyncLease) -> int | None:
                return lease.fencing_token

            done = await leases.with_lease("k", token, ttl_ms=1_000)
            assert (done.acquired, done.skipped, done.value) == (True, False, 1)
            assert done.lease is not None

            async def nested(lease: AsyncLease) -> None:
                async with leases.hold("k"):
                    pass

            with pytest.raises(LeaseNotAcquiredError):
                await leases.with_lease("k", nested, ttl_ms=1_000)

    run(main)


def test_close_ends_running_holds_as_lost_and_releases() -> None:
    """close() while a hold's body runs: the body is cancelled, hold raises LeaseLostError
    (closed), the key is released, and no task of ours is left."""

    async def main() -> None:
        backend = StepBackend()
        leases = _manager(backend)
        entered = asyncio.Event()

        async def holder() -> None:
            async with leases.hold("k", ttl_ms=1_000):
                entered.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(holder())
        await entered.wait()
        await leases.close()
        result = await outcome(task)
        assert isinstance(result, LeaseLostError)
        assert LossReason.CLOSED in str(result)
        assert backend.sync.inspect("k") is None
        assert backend.closed is True
        with pytest.raises(RuntimeError, match="closed"):
            await leases.acquire("k")

    run(main)


def test_restore_is_no_io_and_renews() -> None:
    """restore() sends nothing; the restored lease renews (learning its token) and releases."""

    async def main() -> None:
        backend = StepBackend()
        async with _manager(backend) as leases:
            lease = (await leases.acquire("k", ttl_ms=1_000)).lease
            assert lease is not None
            calls = len(backend.calls)
            again = leases.restore("k", lease.owner_token, ttl_ms=1_000)
            assert len(backend.calls) == calls
            assert (again.fencing_token, again.expires_at, again.lost) == (None, None, False)
            assert await again.renew(2_000) is True
            assert (again.fencing_token, again.ttl_ms) == (1, 2_000)
            assert await again.release() is True
            impostor = leases.restore("k", "not-the-owner", ttl_ms=1_000)
            assert await impostor.renew() is False
            assert impostor.lost is True

    run(main)


def test_wait_lost() -> None:
    """wait_lost returns False at its timeout while held, True once the lease is lost."""

    async def main() -> None:
        backend = StepBackend(SYSTEM_CLOCK)  # wait_lost's timeout is on the manager's clock
        async with _manager(backend) as leases:
            lease = (await leases.acquire("k", ttl_ms=60_000)).lease
            assert lease is not None
            started = time.monotonic()
            assert await lease.wait_lost(20) is False
            assert 0.02 <= time.monotonic() - started < 30  # at its timeout, not the deadline
            waiter = asyncio.create_task(lease.wait_lost())
            await asyncio.sleep(0)
            backend.sync.force_release("k")
            assert await lease.renew() is False
            assert await waiter is True

    run(main)


# -- cancellation at every suspension -----------------------------------------------------------


def test_acquire_cancelled_at_every_suspension_leaves_the_key_free() -> None:
    """For n = 1, 2, ...: cancel acquire at its n-th suspension. Before the command ran or after
    (reply not heard), the key ends free and the call raises CancelledError; past the last
    suspension the call returns the lease. Covers the resend after a lost reply too."""

    async def main() -> None:
        for lose in (0, 1):
            n, outcomes = 0, []
            while True:
                n += 1
                backend = StepBackend()
                backend.lose_acquire_replies = lose
                async with _manager(backend) as leases:
                    call = cancel_at_suspension(leases.acquire("k", ttl_ms=1_000), n)
                    result = await outcome(call)
                    if not call.fired:
                        assert not isinstance(result, BaseException)
                        assert result.lease is not None
                        break
                    assert isinstance(result, asyncio.CancelledError), result
                    assert await leases.inspect("k") is None
                    outcomes.append(backend.sync._counters.get("k", 0))
            # every suspension of a send or a reply was hit: 2 per acquire sent
            assert n - 1 == 2 * (1 + lose)
            # the command had run (counter 1) from the second suspension on
            assert outcomes == [0] + [1] * (n - 2)

    run(main)


def test_waiting_acquire_cancelled_at_every_suspension() -> None:
    """An acquire waiting on a held key, cancelled at each suspension (sends, replies, retry
    sleeps): CancelledError, and the holder's lease is never touched."""

    async def main() -> None:
        n = 0
        while True:
            n += 1
            backend = StepBackend(SYSTEM_CLOCK)  # wait_ms is measured on the manager's clock
            async with _manager(backend) as leases:
                holder = (await leases.acquire("k", ttl_ms=60_000)).lease
                assert holder is not None
                call = cancel_at_suspension(
                    leases.acquire("k", ttl_ms=1_000, wait_ms=30, retry_delay_ms=10), n
                )
                result = await outcome(call)
                info = await leases.inspect("k")
                assert info is not None
                assert info.owner_fingerprint == holder.owner_fingerprint
                if not call.fired:
                    assert not isinstance(result, BaseException)
                    assert result.acquired is False
                    break
                assert isinstance(result, asyncio.CancelledError)
        assert n > 6  # at least two sends and a sleep were interrupted

    run(main)


def test_a_second_cancel_during_cleanup_does_not_stop_it() -> None:
    """Cancelled after the acquire ran, then cancelled again during the clean-up release: the
    release still completes (close() waits for it) and the key ends free."""

    async def main() -> None:
        backend = StepBackend()
        leases = _manager(backend)
        started = asyncio.Event()

        async def acquire() -> None:
            started.set()
            await leases.acquire("k", ttl_ms=60_000)

        task = asyncio.create_task(acquire())
        await started.wait()
        while backend.calls != ["acquire"]:
            await asyncio.sleep(0)
        await asyncio.sleep(0)  # the command runs; the reply is on its way
        task.cancel()
        while backend.calls != ["acquire", "release"]:
            await asyncio.sleep(0)
        task.cancel()  # stop waiting for the clean-up
        assert isinstance(await outcome(task), asyncio.CancelledError)
        await leases.close()
        assert backend.sync.inspect("k") is None

    run(main)


def test_renew_cancelled_at_every_suspension() -> None:
    """A cancelled renew() raises CancelledError and changes nothing locally; the next renew()
    succeeds."""

    async def main() -> None:
        for n in (1, 2):
            backend = StepBackend()
            async with _manager(backend) as leases:
                lease = (await leases.acquire("k", ttl_ms=1_000)).lease
                assert lease is not None
                call = cancel_at_suspension(lease.renew(5_000), n)
                assert isinstance(await outcome(call), asyncio.CancelledError)
                assert (lease.lost, lease.ttl_ms, lease._state.deadline) == (False, 1_000, 1.0)
                assert await lease.renew() is True
                assert lease._state.deadline == 1.0  # sent at 0 with ttl 1000 ms

    run(main)


def test_release_cancelled_at_every_suspension_keeps_the_owner_token() -> None:
    """A cancelled release() keeps the owner token: awaiting release() again answers for the key
    (True if the first had not run, False if it had), and the key ends free either way."""

    async def main() -> None:
        for n, again in ((1, True), (2, False)):
            backend = StepBackend()
            async with _manager(backend) as leases:
                lease = (await leases.acquire("k", ttl_ms=1_000)).lease
                assert lease is not None
                token = lease.owner_token
                call = cancel_at_suspension(lease.release(), n)
                assert isinstance(await outcome(call), asyncio.CancelledError)
                assert lease.owner_token == token
                assert await lease.release() is again
                assert await leases.inspect("k") is None

    run(main)


def test_hold_release_is_shielded_from_a_second_cancel() -> None:
    """Cancelling a task while its hold releases: the release completes anyway."""

    async def main() -> None:
        backend = StepBackend()
        async with _manager(backend) as leases:
            entered = asyncio.Event()

            async def holder() -> None:
                async with leases.hold("k", ttl_ms=1_000):
                    entered.set()

            task = asyncio.create_task(holder())
            await entered.wait()
            while "release" not in backend.calls:
                await asyncio.sleep(0)
            task.cancel()
            assert isinstance(await outcome(task), asyncio.CancelledError)
        assert backend.sync.inspect("k") is None

    run(main)


def test_no_threading_local_or_task_state() -> None:
    """A lease acquired in one task can be renewed and released from another."""

    async def main() -> None:
        async with _manager(StepBackend()) as leases:
            lease = (await asyncio.create_task(leases.acquire("k", ttl_ms=1_000))).lease
            assert lease is not None
            assert await asyncio.create_task(lease.renew()) is True
            assert await asyncio.create_task(lease.release()) is True

    run(main)


def test_clock_is_injected() -> None:
    """A lease's expires_at follows the injected clock."""

    async def main() -> None:
        clock = FakeClock(start_time=1_000.0)
        backend = StepBackend(clock)
        async with AsyncLeaseManager(backend, clock=clock) as leases:
            lease = (await leases.acquire("k", ttl_ms=1_500)).lease
            assert lease is not None
            assert lease.expires_at is not None
            assert lease.expires_at.timestamp() == 1_001.5

    run(main)
