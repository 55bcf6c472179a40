"""Where the two faces once drifted apart, each run on both faces with the same outcome: when
``keep_alive`` checks its arguments, when the renewer gives up a batch, what its ``close()``
returns, whether it takes leases after a fork, how often the
Sentinel watcher reads its subscription, how long a second ``close()`` waits, ``check_health``'s
clock, how long a health check of a hung store waits, what the Redis semaphore store sends,
whether a failed acquire waits for its clean-up, whether one that ends after ``close()`` sends
one, what the hand-off's close does when its listener's pub/sub fails to close, when a SQLite
semaphore makes its tables (and fails on a closed backend), and what a hold's release with no
reply in time raises.

Each test is parametrized over the faces and asserts one expected value for both.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_renewal_in_flight import AsyncHeldRoundTrip, HeldRoundTrip

import fencedlease._async.handoff
import fencedlease._async.health
import fencedlease._async.redis_slots
import fencedlease._sync.handoff
import fencedlease._sync.health
import fencedlease._sync.redis_slots
from fencedlease import (
    BackendError,
    LeaseLostError,
    LeaseManager,
    ShutdownReport,
    SqliteBackend,
    ValidationError,
)
from fencedlease._async.sentinel import AsyncSwitchWatcher
from fencedlease._core.protocol import AcquireReply
from fencedlease._core.schedule import MAX_IN_FLIGHT
from fencedlease._handoff.waiters import WaitRequest
from fencedlease._redis.scripts import Script
from fencedlease._redis.sentinel import SWITCH_POLL_S
from fencedlease._sync.renewer import IO_THREADS
from fencedlease._sync.sentinel import SwitchWatcher
from fencedlease.aio import AsyncLeaseManager
from fencedlease.backends import AsyncMemoryBackend, AsyncSqliteBackend, MemoryBackend
from fencedlease.testing import FakeClock

FACES = ["sync", "asyncio"]

PATIENCE_S = 30.0
"""How long a test waits for a thread or task to act on an event it caused (only a failing test
waits this long)."""


async def _settle() -> None:
    """Let the loop's other tasks run the steps they can (a few iterations)."""
    for _ in range(20):
        await asyncio.sleep(0)


# -- keep_alive checks its arguments when called -------------------------------------------------


class _CountingMemory(MemoryBackend):
    """A memory store that counts the calls made to it after ``counting`` is set."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.counting = False
        self.calls = 0

    def renew_many(self, items: Sequence[tuple[str, str, int]]) -> list[int | BaseException]:
        self.calls += self.counting
        return super().renew_many(items)

    def release(self, key: str, owner_token: str) -> bool:
        self.calls += self.counting
        return super().release(key, owner_token)


KEEP_ALIVE_CASES = [
    (
        {"heartbeat_ms": 501},
        "heartbeat_ms",
        "heartbeat_ms must be at most half of ttl_ms (500); got 501",
    ),
    (
        {"on_renew_error": 1},
        "on_renew_error",
        "on_renew_error must be callable or None; got int",
    ),
]


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize(("kwargs", "argument", "message"), KEEP_ALIVE_CASES)
def test_keep_alive_checks_its_arguments_when_called(
    face: str, kwargs: dict[str, Any], argument: str, message: str
) -> None:
    """``keep_alive(lease, ...)`` with a bad argument raises at the call, before any ``with`` and
    any I/O, naming the argument, the same on both faces."""
    clock = FakeClock()
    store = _CountingMemory(clock)
    if face == "sync":
        leases = LeaseManager(store, clock=clock)
        lease = leases.acquire("k", ttl_ms=1_000).lease
        store.counting = True
        with pytest.raises(ValidationError) as error:
            leases.keep_alive(lease, **kwargs)  # type: ignore[arg-type]
        leases.close()
    else:

        async def main() -> pytest.ExceptionInfo[ValidationError]:
            async with AsyncLeaseManager(AsyncMemoryBackend(sync=store), clock=clock) as leases:
                lease = (await leases.acquire("k", ttl_ms=1_000)).lease
                assert lease is not None
                store.counting = True
                with pytest.raises(ValidationError) as error:
                    leases.keep_alive(lease, **kwargs)
                store.counting = False
                return error

        error = asyncio.run(main())
    assert (error.value.argument, str(error.value), store.calls) == (argument, message, 0)


# -- the renewer gives up a batch at its earliest deadline ---------------------------------------

ABANDONED = "renew 2 leases: no reply before the earliest deadline in the batch"


def _abandon_sync() -> tuple[list[list[str]], list[str], bool, bool]:
    clock = FakeClock()
    backend = HeldRoundTrip(clock)
    errors: list[str] = []
    hooked = threading.Event()

    def hook(exc: BaseException) -> None:
        errors.append(str(exc))
        hooked.set()

    with LeaseManager(backend, clock=clock) as leases:
        with leases.hold("b", ttl_ms=4_000, heartbeat_ms=250, on_renew_error=hook) as b:
            with pytest.raises(LeaseLostError), leases.hold("a", ttl_ms=1_000) as a:
                clock.advance(250)  # both due: one batch, held
                leases.renewer.wake()
                assert backend.first_sent.wait(PATIENCE_S)
                clock.advance(750)  # a's deadline: a is lost, the batch given up
                leases.renewer.wake()
                assert hooked.wait(PATIENCE_S)
            clock.advance(100)  # b's retry is due (a quarter heartbeat after the failure)
            leases.renewer.wake()
            second = backend.second_sent.wait(PATIENCE_S)
            backend.gate.set()
            assert second
            io = leases.renewer._io._io
            assert io is not None
            assert (io._max_workers, IO_THREADS) == (4, 2 * MAX_IN_FLIGHT)  # two given up, two live
        return [sorted(keys) for keys in backend.batches], errors, a.lost, b.lost


def _abandon_asyncio() -> tuple[list[list[str]], list[str], bool, bool]:
    clock = FakeClock()
    backend = AsyncHeldRoundTrip(clock)
    errors: list[str] = []

    async def main() -> tuple[list[list[str]], list[str], bool, bool]:
        async with AsyncLeaseManager(backend, clock=clock) as leases:

            def hook(exc: BaseException) -> None:
                errors.append(str(exc))

            async with leases.hold("b", ttl_ms=4_000, heartbeat_ms=250, on_renew_error=hook) as b:
                with pytest.raises(LeaseLostError):
                    async with leases.hold("a", ttl_ms=1_000) as a:
                        clock.advance(250)
                        leases.renewer.wake()
                        await _settle()
                        clock.advance(750)
                        leases.renewer.wake()
                        await _settle()  # a is lost: this task is cancelled here
                        pytest.fail("a was not lost at its deadline")
                clock.advance(100)
                leases.renewer.wake()
                await _settle()
                backend.gate.set()
            return [sorted(keys) for keys in backend.batches], errors, a.lost, b.lost

    return asyncio.run(main())


@pytest.mark.parametrize("face", FACES)
def test_a_batch_is_given_up_at_its_earliest_deadline(face: str) -> None:
    """A renewal batch still unanswered at the earliest deadline among its leases is given up:
    that lease is lost, the others are retried at once in a batch of their own (one failed round
    trip for them, not a loss), the same on both faces."""
    outcome = _abandon_sync() if face == "sync" else _abandon_asyncio()
    assert outcome == ([["a", "b"], ["b"]], [ABANDONED], True, False)


# -- the renewer's close counts what is left; a clean-up release runs on both faces --------------


class _RecordingReleases(MemoryBackend):
    """A memory store that records each release's key and reply; ``released`` is set at the
    first."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.releases: list[tuple[str, bool]] = []
        self.released = threading.Event()

    def release(self, key: str, owner_token: str) -> bool:
        reply = super().release(key, owner_token)
        self.releases.append((key, reply))
        self.released.set()
        return reply


def _renewer_close_sync() -> tuple[int, bool, str | None]:
    clock = FakeClock()
    with LeaseManager(MemoryBackend(clock=clock), clock=clock) as leases:
        lease = leases.acquire("k", ttl_ms=10_000).lease
        assert lease is not None
        leases.renewer.add(lease._state, 1_000, None)
        left = leases.renewer.close()
        return left, lease.lost, lease._state.lost_reason


def _renewer_close_asyncio() -> tuple[int, bool, str | None]:
    clock = FakeClock()

    async def main() -> tuple[int, bool, str | None]:
        async with AsyncLeaseManager(AsyncMemoryBackend(clock=clock), clock=clock) as leases:
            lease = (await leases.acquire("k", ttl_ms=10_000)).lease
            assert lease is not None
            leases.renewer.add(lease._state, 1_000, None)
            left = await leases.renewer.close()
            return left, lease.lost, lease._state.lost_reason

    return asyncio.run(main())


@pytest.mark.parametrize("face", FACES)
def test_the_renewers_close_returns_how_many_threads_are_left(face: str) -> None:
    """The renewer's ``close()`` returns how many of its threads are still running (none here:
    a task ends once cancelled) and marks a lease still registered lost as closed, the same on
    both faces."""
    outcome = _renewer_close_sync() if face == "sync" else _renewer_close_asyncio()
    assert outcome == (0, True, "the lease manager was closed while the lease was held")


def _clean_up_sync() -> list[tuple[str, bool]]:
    clock = FakeClock()
    store = _RecordingReleases(clock)
    with LeaseManager(store, clock=clock) as leases:
        lease = leases.acquire("k", ttl_ms=10_000).lease
        assert lease is not None
        leases._clean_up("k", lease._state.owner_token)
        assert store.released.wait(PATIENCE_S)
    return store.releases


def _clean_up_asyncio() -> list[tuple[str, bool]]:
    clock = FakeClock()
    store = _RecordingReleases(clock)

    async def main() -> None:
        async with AsyncLeaseManager(AsyncMemoryBackend(sync=store), clock=clock) as leases:
            lease = (await leases.acquire("k", ttl_ms=10_000)).lease
            assert lease is not None
            leases._clean_up("k", lease._state.owner_token)
            await _settle()  # the release's task runs the inline store at its first step

    asyncio.run(main())
    return store.releases


@pytest.mark.parametrize("face", FACES)
def test_the_manager_runs_a_clean_up_release_in_the_background(face: str) -> None:
    """The manager's clean-up of an abandoned grant releases it off the caller's path (a worker
    thread, or a task), the same on both faces."""
    releases = _clean_up_sync() if face == "sync" else _clean_up_asyncio()
    assert releases == [("k", True)]


# -- after a fork the renewer takes new leases ---------------------------------------------------


def _renewer_after_fork_sync() -> tuple[bool, int, int, bool]:
    clock = FakeClock()
    with LeaseManager(MemoryBackend(clock=clock), clock=clock) as leases:
        a, b = (leases.acquire(key, ttl_ms=4_000).lease for key in "ab")
        assert a is not None and b is not None
        renewer = leases.renewer
        renewer.add(a._state, 1_000, None)
        old, old_wakeup = renewer._owner, renewer._wakeup
        renewer._after_fork_in_child()
        renewer.add(b._state, 1_000, None)
        old.stop(None, old_wakeup.set)  # woken, the parent's owner ends by itself: joined
        return old.running, len(renewer), renewer.round_trips, a.lost


def _renewer_after_fork_asyncio() -> tuple[bool, int, int, bool]:
    clock = FakeClock()

    async def main() -> tuple[bool, int, int, bool]:
        async with AsyncLeaseManager(AsyncMemoryBackend(clock=clock), clock=clock) as leases:
            a, b = [(await leases.acquire(key, ttl_ms=4_000)).lease for key in "ab"]
            assert a is not None and b is not None
            renewer = leases.renewer
            renewer.add(a._state, 1_000, None)
            await _settle()
            old, old_wakeup = renewer._owner, renewer._wakeup
            renewer._after_fork_in_child()
            renewer.add(b._state, 1_000, None)
            old_wakeup.set()  # woken, the parent's task ends by itself
            await _settle()
            return old.running, len(renewer), renewer.round_trips, a.lost

    return asyncio.run(main())


@pytest.mark.parametrize("face", FACES)
def test_the_renewer_takes_new_leases_after_a_fork(face: str) -> None:
    """In a forked child the renewer forgets the parent's owner and leases and takes new leases
    under a fresh owner; the parent's owner, woken, ends without sending anything or touching
    the parent's leases, the same on both faces."""
    outcome = _renewer_after_fork_sync() if face == "sync" else _renewer_after_fork_asyncio()
    assert outcome == (False, 1, 0, False)


# -- the Sentinel watcher reads its subscription for SWITCH_POLL_S --------------------------------


class _Pubsub:
    """A subscription that records the timeout of each read; ``on_read`` runs at each."""

    def __init__(self, timeouts: list[float], on_read: Any, awaited: bool) -> None:
        self._timeouts = timeouts
        self._on_read = on_read
        self._awaited = awaited

    def __enter__(self) -> _Pubsub:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    async def __aenter__(self) -> _Pubsub:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    def subscribe(self, *channels: str) -> Any:
        return _done() if self._awaited else None

    def get_message(self, timeout: float) -> Any:
        self._timeouts.append(timeout)
        return self._on_read()


async def _done() -> None:
    return None


def _none() -> None:
    return None


def _sentinel_client(pubsub: _Pubsub) -> Any:
    """A ``master_for`` client of service ``svc`` with one sentinel, whose subscription is
    ``pubsub``."""
    sentinel = SimpleNamespace(pubsub=lambda ignore_subscribe_messages: pubsub)
    manager = SimpleNamespace(sentinels=[sentinel])
    return SimpleNamespace(
        connection_pool=SimpleNamespace(sentinel_manager=manager, service_name="svc")
    )


@pytest.mark.parametrize("face", FACES)
def test_the_sentinel_watcher_reads_for_the_shared_interval(face: str) -> None:
    """Both faces' ``+switch-master`` watchers wait one shared interval (0.2 s) per read of the
    subscription."""
    timeouts: list[float] = []
    if face == "sync":
        holder: list[SwitchWatcher] = []

        def stop() -> None:
            holder[0]._stop.set()

        watcher = SwitchWatcher(_sentinel_client(_Pubsub(timeouts, stop, awaited=False)), _none)
        holder.append(watcher)
        watcher._run()
    else:

        async def main() -> None:
            read = asyncio.Event()

            async def wait() -> None:
                read.set()
                await asyncio.Event().wait()  # until the watcher is closed

            client = _sentinel_client(_Pubsub(timeouts, wait, awaited=True))
            watcher = AsyncSwitchWatcher(client, lambda: None)
            watcher.start()
            await asyncio.wait_for(read.wait(), PATIENCE_S)
            await watcher.close(sentinels=False)

        asyncio.run(main())
    assert (timeouts, SWITCH_POLL_S) == ([0.2], 0.2)


# -- a second close() is bounded -----------------------------------------------------------------


class _HungRelease(MemoryBackend):
    """A memory store whose releases get no reply until ``gate`` is set."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.gate = threading.Event()
        self.release_started = threading.Event()

    def release(self, key: str, owner_token: str) -> bool:
        self.release_started.set()
        assert self.gate.wait(PATIENCE_S)
        return super().release(key, owner_token)


class _AsyncHungRelease(AsyncMemoryBackend):
    """`_HungRelease`, awaited."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.gate = asyncio.Event()
        self.release_started = asyncio.Event()

    async def release(self, key: str, owner_token: str) -> bool:
        self.release_started.set()
        await self.gate.wait()
        return await super().release(key, owner_token)


def _closes_sync() -> tuple[ShutdownReport, bool, bool]:
    clock = FakeClock()
    backend = _HungRelease(clock)
    leases = LeaseManager(backend, clock=clock)
    reports: list[ShutdownReport] = []
    with pytest.raises(LeaseLostError), leases.hold("k", ttl_ms=10_000):
        closer = threading.Thread(target=lambda: reports.append(leases.close(timeout_ms=60_000)))
        closer.start()
        assert backend.release_started.wait(PATIENCE_S)  # the first close() is under way
        second = leases.close(timeout_ms=50)
        backend.gate.set()
        closer.join(PATIENCE_S)
    [first] = reports
    return second, first.complete, leases.close(timeout_ms=50) is first


def _closes_asyncio() -> tuple[ShutdownReport, bool, bool]:
    clock = FakeClock()
    backend = _AsyncHungRelease(clock)

    async def main() -> tuple[ShutdownReport, bool, bool]:
        leases = AsyncLeaseManager(backend, clock=clock)
        held = asyncio.Event()

        async def holder() -> None:
            async with leases.hold("k", ttl_ms=10_000):
                held.set()
                await asyncio.Event().wait()  # until close() marks the lease lost

        task = asyncio.ensure_future(holder())
        await held.wait()
        closer = asyncio.ensure_future(leases.close(timeout_ms=60_000))
        await asyncio.wait_for(backend.release_started.wait(), PATIENCE_S)
        second = await asyncio.wait_for(leases.close(timeout_ms=50), PATIENCE_S)
        backend.gate.set()
        first = await closer
        with pytest.raises(LeaseLostError):
            await task
        return second, first.complete, await leases.close(timeout_ms=50) is first

    return asyncio.run(main())


@pytest.mark.parametrize("face", FACES)
def test_a_second_close_waits_its_own_bound(face: str) -> None:
    """A ``close()`` while another is under way waits its own ``timeout_ms`` at most and then
    reports one unfinished shutdown; once the first is done, a later one returns the first's
    report, the same on both faces."""
    outcome = _closes_sync() if face == "sync" else _closes_asyncio()
    assert outcome == (ShutdownReport(unfinished=1, timeout_ms=50), True, True)


# -- check_health takes no clock, and bounds the whole check ------------------------------------


@pytest.mark.parametrize("face", FACES)
def test_check_health_takes_the_same_arguments_on_both_faces(face: str) -> None:
    """The store check of either face takes ``backend`` and ``timeout_ms``, and no unused
    ``clock``."""
    check = (
        fencedlease._sync.health.check_health
        if face == "sync"
        else fencedlease._async.health.check_health
    )
    assert list(inspect.signature(check).parameters) == ["backend", "timeout_ms"]


class _HungInspect(MemoryBackend):
    """A memory store whose reads get no reply until ``gate`` is set; ``answered`` once one
    has."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.answered = False

    def inspect(self, key: str) -> Any:
        self.gate.wait(PATIENCE_S)
        self.answered = True
        return super().inspect(key)


class _AsyncHungInspect(AsyncMemoryBackend):
    """`_HungInspect`, awaited."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.answered = False

    async def inspect(self, key: str) -> Any:
        await self.gate.wait()
        self.answered = True
        return await super().inspect(key)


def _hung_check(face: str) -> tuple[bool, str, type[BaseException] | None, bool]:
    """A 50 ms check of a store that never answers: ``(timed_out, message up to the time taken,
    the cause's type, whether the store had answered when the check gave up)``."""
    if face == "sync":
        store = _HungInspect()
        with pytest.raises(BackendError) as error:
            fencedlease._sync.health.check_health(store, 50)
        answered = store.answered
        store.gate.set()
    else:
        astore = _AsyncHungInspect()

        async def main() -> tuple[pytest.ExceptionInfo[BackendError], bool]:
            with pytest.raises(BackendError) as error:
                await fencedlease._async.health.check_health(astore, 50)
            return error, astore.answered

        error, answered = asyncio.run(main())
    cause = error.value.__cause__
    message = str(error.value).split(" (took ")[0]
    return error.value.timed_out, message, None if cause is None else type(cause), answered


@pytest.mark.parametrize("face", FACES)
def test_check_health_of_a_hung_store_ends_at_its_bound(face: str) -> None:
    """A check of a store that never answers raises a timed-out BackendError at ``timeout_ms``,
    while the store is still silent, the same on both faces (the sync face once waited for the
    store's own reply, however long)."""
    assert _hung_check(face) == (
        True,
        "health check: no answer within 50 ms",
        TimeoutError,
        False,
    )


# -- the Redis semaphore store sends the same steps ----------------------------------------------


@contextlib.contextmanager
def _recorded_scripts(face: str, replies: list[object]) -> Iterator[list[tuple[object, ...]]]:
    """Replace the face's ``run_script`` in the Redis slot store with one that records
    ``(client, script, keys, args)`` and answers from ``replies``."""
    calls: list[tuple[object, ...]] = []

    def record(
        client: object, script: Script, keys: Sequence[str], args: Sequence[object]
    ) -> object:
        calls.append((client, script.name, list(keys), list(args)))
        return replies.pop(0)

    async def record_async(
        client: object, script: Script, keys: Sequence[str], args: Sequence[object]
    ) -> object:
        return record(client, script, keys, args)

    module: Any = (
        fencedlease._sync.redis_slots if face == "sync" else fencedlease._async.redis_slots
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "run_script", record if face == "sync" else record_async)
        yield calls


@pytest.mark.parametrize("face", FACES)
def test_the_redis_slot_store_sends_the_same_steps(face: str) -> None:
    """Each step of the Redis semaphore store runs the same script with the same keys and
    arguments, on the same client (renewals on the renewal client), and reads its reply the same
    way, on both faces."""
    replies: list[object] = [[1, b"7", 0], [b"7", 0], 1, 2, 1]
    with _recorded_scripts(face, replies) as calls:
        if face == "sync":
            backend: Any = SimpleNamespace(
                client="client", _renewals=lambda: "renewals", prefix="p", answered=lambda: None
            )
            store = fencedlease._sync.redis_slots.RedisSlots(backend)
            results: list[object] = [
                store.fencing_scope("s"),
                store.acquire("s", "o" * 32, 1_000, 3),
                store.renew_many([("s", "o" * 32, 1_000), ("t", "o" * 32, 1_000)]),
                store.release("s", "o" * 32),
                store.count("s"),
                store.clear("s"),
            ]
        else:
            backend = SimpleNamespace(
                client="client", _renewals=lambda: "renewals", prefix="p", answered=lambda: None
            )
            aio = fencedlease._async.redis_slots.AsyncRedisSlots(backend)

            async def main() -> list[object]:
                return [
                    aio.fencing_scope("s"),
                    await aio.acquire("s", "o" * 32, 1_000, 3),
                    await aio.renew_many([("s", "o" * 32, 1_000), ("t", "o" * 32, 1_000)]),
                    await aio.release("s", "o" * 32),
                    await aio.count("s"),
                    await aio.clear("s"),
                ]

            results = asyncio.run(main())
    keys = ["p:{s}:semaphore", "p:{s}:semaphore:tokens", "p:{s}:semaphore:fence"]
    t_keys = ["p:{t}:semaphore", "p:{t}:semaphore:tokens"]
    assert calls == [
        ("client", "semaphore_acquire", keys, ["o" * 32, 1_000, 3]),
        ("renewals", "semaphore_renew_many", keys[:2] + t_keys, ["o" * 32, 1_000] * 2),
        ("client", "semaphore_release", keys[:2], ["o" * 32]),
        ("client", "semaphore_count", keys[:1], []),
        ("client", "semaphore_clear", keys[:2], []),
    ]
    assert results[0] == keys[2]
    assert [type(r).__name__ for r in results[1:]] == [
        "AcquireReply",
        "list",
        "bool",
        "int",
        "bool",
    ]
    assert results[2:] == [[7, 0], True, 2, True]


# -- a failed acquire's clean-up runs in the background ------------------------------------------


class _WroteThenFailed(MemoryBackend):
    """A memory store whose acquire grants the key, then fails as a script that failed after its
    write does; its releases get no reply until ``gate`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.release_started = threading.Event()

    def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        super().acquire(key, owner_token, ttl_ms)
        raise BackendError(f"acquire {key!r}: failed after its write", wrote="maybe")

    def release(self, key: str, owner_token: str) -> bool:
        self.release_started.set()
        assert self.gate.wait(PATIENCE_S)
        return super().release(key, owner_token)


class _AsyncWroteThenFailed(AsyncMemoryBackend):
    """`_WroteThenFailed`, awaited."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.release_started = asyncio.Event()

    async def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        await super().acquire(key, owner_token, ttl_ms)
        raise BackendError(f"acquire {key!r}: failed after its write", wrote="maybe")

    async def release(self, key: str, owner_token: str) -> bool:
        self.release_started.set()
        await self.gate.wait()
        return await super().release(key, owner_token)


def _failed_acquire_sync() -> tuple[bool, bool, bool]:
    backend = _WroteThenFailed()
    leases = LeaseManager(backend)
    with pytest.raises(BackendError, match="failed after its write"):
        leases.acquire("k")
    assert backend.release_started.wait(PATIENCE_S)
    held_meanwhile = backend.inspect("k") is not None
    backend.gate.set()
    complete = leases.close(timeout_ms=round(PATIENCE_S * 1000)).complete
    return True, held_meanwhile, complete and backend.inspect("k") is None


def _failed_acquire_asyncio() -> tuple[bool, bool, bool]:
    async def main() -> tuple[bool, bool, bool]:
        backend = _AsyncWroteThenFailed()
        leases = AsyncLeaseManager(backend)
        call = asyncio.ensure_future(leases.acquire("k"))
        await asyncio.wait_for(backend.release_started.wait(), PATIENCE_S)
        await _settle()
        returned = call.done()  # the clean-up release has no reply yet
        held_meanwhile = await backend.inspect("k") is not None
        backend.gate.set()
        with pytest.raises(BackendError, match="failed after its write"):
            await call
        complete = (await leases.close(timeout_ms=round(PATIENCE_S * 1000))).complete
        return returned, held_meanwhile, complete and await backend.inspect("k") is None

    return asyncio.run(main())


@pytest.mark.parametrize("face", FACES)
def test_a_failed_acquire_cleans_up_in_the_background(face: str) -> None:
    """An acquire that fails after its write raises the store's error without waiting for the
    release of what it may hold (a stalled store would stall that too), and that release frees
    the key before close() returns, the same on both faces."""
    outcome = _failed_acquire_sync() if face == "sync" else _failed_acquire_asyncio()
    assert outcome == (True, True, True)


# -- nothing is sent for a closed manager --------------------------------------------------------


class _ClosedMidAcquire(MemoryBackend):
    """A memory store, the key held by another owner, whose first acquire gets no reply (it may
    have run) and whose resend closes the manager before it is refused; each release after that
    close is recorded."""

    def __init__(self) -> None:
        super().__init__()
        assert super().acquire("k", "other", 60_000).acquired
        self.close_manager: Any = None
        self.sends = 0
        self.closed = False
        self.released_after_close: list[str] = []

    def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        self.sends += 1
        if self.sends == 1:
            raise BackendError(f"acquire {key!r}: no reply", sent="maybe", wrote="maybe")
        reply = super().acquire(key, owner_token, ttl_ms)
        self.close_manager()
        self.closed = True
        return reply

    def release(self, key: str, owner_token: str) -> bool:
        if self.closed:
            self.released_after_close.append(key)
        return super().release(key, owner_token)


class _AsyncClosedMidAcquire(AsyncMemoryBackend):
    """`_ClosedMidAcquire`, awaited."""

    def __init__(self) -> None:
        super().__init__(sync=_ClosedMidAcquire())
        self.closing: Any = None

    async def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        store = self.sync
        assert isinstance(store, _ClosedMidAcquire)
        if store.sends == 1:
            store.sends += 1
            reply = MemoryBackend.acquire(store, key, owner_token, ttl_ms)
            await self.closing()
            store.closed = True
            return reply
        return await super().acquire(key, owner_token, ttl_ms)


def _closed_mid_acquire_sync() -> tuple[bool, list[str]]:
    backend = _ClosedMidAcquire()
    leases = LeaseManager(backend)
    backend.close_manager = leases.close
    acquired = leases.acquire("k").acquired
    leases.close()
    return acquired, backend.released_after_close


def _closed_mid_acquire_asyncio() -> tuple[bool, list[str]]:
    async def main() -> tuple[bool, list[str]]:
        backend = _AsyncClosedMidAcquire()
        leases = AsyncLeaseManager(backend)
        backend.closing = leases.close
        acquired = (await leases.acquire("k")).acquired
        await _settle()  # a task spawned after the close would have run its release by now
        await leases.close()
        store = backend.sync
        assert isinstance(store, _ClosedMidAcquire)
        return acquired, store.released_after_close

    return asyncio.run(main())


@pytest.mark.parametrize("face", FACES)
def test_an_acquire_that_ends_after_close_sends_no_clean_up(face: str) -> None:
    """An acquire whose resend was refused after ``close()`` leaves its possible queue entry to
    lapse instead of sending a release on the closed client (the asyncio face started a task of
    the manager's that no ``close()`` waited for), the same on both faces."""
    outcome = _closed_mid_acquire_sync() if face == "sync" else _closed_mid_acquire_asyncio()
    assert outcome == (False, [])


# -- the hand-off listener releases its own connections when its pub/sub fails to close ----------


class _PubSubFailingClose:
    """A listener's pub/sub that hears nothing (each read waits for ``woken`` within its bound)
    and fails to close."""

    def __init__(self) -> None:
        self.woken = threading.Event()

    def subscribe(self, *channels: str) -> None:
        pass

    def unsubscribe(self, *channels: str) -> None:
        pass

    def get_message(self, timeout: float) -> None:
        self.woken.wait(timeout)
        self.woken.clear()

    def close(self) -> None:
        raise RuntimeError("pub/sub close failed")


class _AsyncPubSubFailingClose:
    """`_PubSubFailingClose`, awaited."""

    async def subscribe(self, *channels: str) -> None:
        pass

    async def unsubscribe(self, *channels: str) -> None:
        pass

    async def get_message(self, timeout: float) -> None:
        await asyncio.sleep(timeout)

    async def aclose(self) -> None:
        raise RuntimeError("pub/sub close failed")


class _CountingPool:
    def __init__(self) -> None:
        self.disconnects = 0

    def disconnect(self) -> None:
        self.disconnects += 1


class _AsyncCountingPool(_CountingPool):
    async def disconnect(self) -> None:  # type: ignore[override]
        self.disconnects += 1


def _listener_pool_after_close(face: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """How often the listener's own pool was disconnected once the hand-off is closed."""
    if face == "sync":
        pubsub = _PubSubFailingClose()
        listener = SimpleNamespace(pubsub=lambda: pubsub, connection_pool=_CountingPool())
        client = SimpleNamespace(publish=lambda channel, body: pubsub.woken.set())
        monkeypatch.setattr(fencedlease._sync.handoff, "dedicated_client", lambda _: listener)
        handoff = fencedlease._sync.handoff.Handoff(client, "p")  # type: ignore[arg-type]
        handoff.wait(WaitRequest("k", "o" * 32, 1_000, 0.0))  # starts the listener
        handoff.close(until=time.monotonic() + PATIENCE_S)
        assert not handoff.listening
        return int(listener.connection_pool.disconnects)
    apubsub = _AsyncPubSubFailingClose()
    alistener = SimpleNamespace(pubsub=lambda: apubsub, connection_pool=_AsyncCountingPool())
    monkeypatch.setattr(fencedlease._async.handoff, "dedicated_client", lambda _: alistener)

    async def main() -> None:
        ahandoff = fencedlease._async.handoff.AsyncHandoff(SimpleNamespace(), "p")  # type: ignore[arg-type]
        await ahandoff.wait(WaitRequest("k", "o" * 32, 1_000, 0.0))
        await _settle()  # the listener is reading
        await ahandoff.aclose()
        assert not ahandoff.listening

    asyncio.run(main())
    return int(alistener.connection_pool.disconnects)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("face", FACES)
def test_the_handoff_listener_releases_its_pool_when_its_pubsub_fails_to_close(
    face: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing the hand-off disconnects the listener's own pool once even when closing its
    pub/sub fails, and the close itself does not raise that failure, the same on both faces."""
    assert _listener_pool_after_close(face, monkeypatch) == 1


# -- a SQLite semaphore makes its tables at its first step ---------------------------------------


def _semaphore_tables(path: Path) -> list[str]:
    """The semaphore tables in the SQLite file at ``path``, read on a connection of the test's."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE name LIKE 'fencedlease_semaphore_%' ORDER BY name"
        ).fetchall()
    return [name for (name,) in rows]


def _sqlite_semaphore_steps(face: str, path: Path) -> tuple[list[str], list[str], int | None]:
    """The semaphore tables after ``manager.semaphore()`` and after a first acquire through
    ``face``, and that acquire's token."""
    if face == "sync":
        with LeaseManager(SqliteBackend(path)) as leases:
            semaphore = leases.semaphore("pool", limit=1)
            made = _semaphore_tables(path)
            result = semaphore.acquire(ttl_ms=1000)
            return (
                made,
                _semaphore_tables(path),
                None if result.lease is None else result.lease.fencing_token,
            )

    async def main() -> tuple[list[str], list[str], int | None]:
        async with AsyncLeaseManager(AsyncSqliteBackend(path)) as leases:
            semaphore = leases.semaphore("pool", limit=1)
            made = _semaphore_tables(path)
            result = await semaphore.acquire(ttl_ms=1000)
            return (
                made,
                _semaphore_tables(path),
                None if result.lease is None else result.lease.fencing_token,
            )

    return asyncio.run(main())


@pytest.mark.parametrize("face", FACES)
def test_a_sqlite_semaphore_makes_its_tables_at_its_first_step(face: str, tmp_path: Path) -> None:
    """Making a semaphore on a SQLite backend does no I/O; its first acquire makes the tables and
    gets token 1, the same on both faces."""
    assert _sqlite_semaphore_steps(face, tmp_path / "leases.db") == (
        [],
        ["fencedlease_semaphore_fences", "fencedlease_semaphore_slots"],
        1,
    )


def _closed_sqlite_semaphore(face: str) -> BackendError:
    """What the first acquire of a semaphore made on a closed SQLite backend raises."""
    if face == "sync":
        backend = SqliteBackend(":memory:")
        leases = LeaseManager(backend)
        backend.close()
        semaphore = leases.semaphore("pool", limit=1)
        with pytest.raises(BackendError) as caught:
            semaphore.acquire(ttl_ms=1000)
        return caught.value

    async def main() -> BackendError:
        backend = AsyncSqliteBackend(":memory:")
        leases = AsyncLeaseManager(backend)
        await backend.close()
        semaphore = leases.semaphore("pool", limit=1)
        with pytest.raises(BackendError) as caught:
            await semaphore.acquire(ttl_ms=1000)
        return caught.value

    return asyncio.run(main())


@pytest.mark.parametrize("face", FACES)
def test_a_semaphore_on_a_closed_sqlite_backend_fails_at_its_first_step(face: str) -> None:
    """A semaphore made on a closed SQLite backend is made; its first acquire raises BackendError
    naming the step, the same on both faces."""
    error = _closed_sqlite_semaphore(face)
    assert str(error) == "semaphore acquire: the SQLite backend is closed"


# -- a hold's release with no reply in time is a timeout -----------------------------------------

HUNG_TTL_MS = 200
"""The ttl of the lease whose release hangs: its bound (the lease's deadline, no renewal)."""


class _StalledRelease(MemoryBackend):
    """A memory store whose releases wait for ``go`` (set by the test once the hold has ended)."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()

    def release(self, key: str, owner_token: str) -> bool:
        self.go.wait(PATIENCE_S)
        return super().release(key, owner_token)


class _AsyncStalledRelease(AsyncMemoryBackend):
    """`_StalledRelease`, awaited."""

    def __init__(self) -> None:
        super().__init__()
        self.go = asyncio.Event()

    async def release(self, key: str, owner_token: str) -> bool:
        await asyncio.wait_for(self.go.wait(), PATIENCE_S)
        return await super().release(key, owner_token)


def _hung_release_error(face: str) -> BackendError:
    """The error a hold (no renewal) ends in when its release gets no reply before the lease's
    deadline."""
    if face == "sync":
        backend = _StalledRelease()
        leases = LeaseManager(backend)
        try:
            with (
                pytest.raises(BackendError) as raised,
                leases.hold("k", ttl_ms=HUNG_TTL_MS, heartbeat_ms=False),
            ):
                pass
        finally:
            backend.go.set()
            leases.close()
        return raised.value

    async def main() -> BackendError:
        abackend = _AsyncStalledRelease()
        aleases = AsyncLeaseManager(abackend)
        try:
            with pytest.raises(BackendError) as raised:
                async with aleases.hold("k", ttl_ms=HUNG_TTL_MS, heartbeat_ms=False):
                    pass
        finally:
            abackend.go.set()
            await aleases.close()
        return raised.value

    return asyncio.run(main())


@pytest.mark.parametrize("face", FACES)
def test_a_hold_release_with_no_reply_in_time_is_a_timeout(face: str) -> None:
    """A hold whose release gets no reply before the lease's deadline raises a BackendError that
    says the release may have run and timed out (the asyncio face said it was sent and wrote
    nothing), the same on both faces."""
    error = _hung_release_error(face)
    assert (error.sent, error.wrote, error.timed_out) == ("maybe", "maybe", True)
    assert str(error).startswith("release 'k': no reply within ")
    assert isinstance(error.__cause__, TimeoutError)
