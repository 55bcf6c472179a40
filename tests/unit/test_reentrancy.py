"""Bounded reentrancy, ``hold(key, reentrant=True)``, on both faces over the memory and SQLite
stores: one lease and one token for every level, one acquire and one release, the depth limit,
the loss seen at every level, the owner a thread (task) and never merely the manager."""

from __future__ import annotations

import asyncio
import os
import pickle
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_aio_support import settle

from fencedlease import (
    FencedLeaseError,
    LeaseBackend,
    LeaseLostError,
    LeaseManager,
    LeaseNotAcquiredError,
    NestedHoldError,
    ReentrancyLimitError,
    SqliteBackend,
    ValidationError,
)
from fencedlease._core.backend import AsyncLeaseBackend
from fencedlease._core.protocol import AcquireReply
from fencedlease._core.state import LossReason
from fencedlease._sync.primitives import current_caller
from fencedlease.aio import AsyncLeaseManager
from fencedlease.backends import AsyncMemoryBackend, AsyncSqliteBackend, MemoryBackend
from fencedlease.testing import FakeClock

LONG = 60_000  # a TTL no step of a test outlives
STORES = ["memory", "sqlite"]


class Counted:
    """Counts the acquire and release round trips of the store it wraps."""

    def __init__(self) -> None:
        self.acquires = 0
        self.releases = 0


def _sync_store(kind: str, tmp_path: Path, clock: FakeClock) -> tuple[LeaseBackend, Counted]:
    counted = Counted()
    base: Any = MemoryBackend(clock=clock) if kind == "memory" else SqliteBackend(tmp_path / "l.db")
    acquire, release = base.acquire, base.release

    def counting_acquire(*args: Any) -> AcquireReply:
        counted.acquires += 1
        reply: AcquireReply = acquire(*args)
        return reply

    def counting_release(*args: Any) -> Any:
        counted.releases += 1
        return release(*args)

    base.acquire, base.release = counting_acquire, counting_release
    return base, counted


def _async_store(kind: str, tmp_path: Path) -> tuple[AsyncLeaseBackend, Counted]:
    counted = Counted()
    base: Any = AsyncMemoryBackend() if kind == "memory" else AsyncSqliteBackend(tmp_path / "l.db")
    acquire, release = base.acquire, base.release

    async def counting_acquire(*args: Any) -> AcquireReply:
        counted.acquires += 1
        reply: AcquireReply = await acquire(*args)
        return reply

    async def counting_release(*args: Any) -> Any:
        counted.releases += 1
        return await release(*args)

    base.acquire, base.release = counting_acquire, counting_release
    return base, counted


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def memory(clock: FakeClock) -> Iterator[tuple[MemoryBackend, LeaseManager]]:
    backend = MemoryBackend(clock=clock)
    leases = LeaseManager(backend, clock=clock)
    yield backend, leases
    leases.close()


# -- nesting -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", STORES)
def test_reentrant_holds_share_one_lease_and_only_the_outermost_releases(
    kind: str, tmp_path: Path, clock: FakeClock
) -> None:
    """Three nested reentrant holds get the same lease object and token from one acquire; the
    key stays held with that token after the inner exits, and one release frees it at the end."""
    backend, counted = _sync_store(kind, tmp_path, clock)
    leases = LeaseManager(backend, clock=clock)
    with leases.hold("k", ttl_ms=LONG, reentrant=True) as outer:
        with leases.hold("k", ttl_ms=LONG, reentrant=True) as middle:
            with leases.hold("k", ttl_ms=5, wait_ms=LONG, reentrant=True) as inner:
                assert inner is middle is outer
                assert inner.fencing_token == 1
            info = leases.inspect("k")
            assert info is not None and info.fencing_token == 1
        assert (counted.acquires, counted.releases) == (1, 0)
        assert not outer.lost and not outer._state.released
    assert (counted.acquires, counted.releases) == (1, 1)
    assert outer._state.released and leases.inspect("k") is None
    with leases.hold("k", ttl_ms=LONG) as again:  # the key's counter went on
        assert again.fencing_token == 2
    leases.close()


@pytest.mark.parametrize("kind", STORES)
def test_async_reentrant_holds_share_one_lease_and_only_the_outermost_releases(
    kind: str, tmp_path: Path
) -> None:
    """asyncio: nested reentrant holds in one task get the same lease and token from one
    acquire; only the outermost exit releases."""

    async def main() -> tuple[int, int, int | None, bool]:
        backend, counted = _async_store(kind, tmp_path)
        async with AsyncLeaseManager(backend) as leases:
            async with leases.hold("k", ttl_ms=LONG, reentrant=True) as outer:
                async with leases.hold("k", ttl_ms=LONG, reentrant=True) as inner:
                    assert inner is outer and inner.fencing_token == 1
                info = await leases.inspect("k")
                assert info is not None and info.fencing_token == 1
                assert (counted.acquires, counted.releases) == (1, 0)
            gone = await leases.inspect("k")
            return counted.acquires, counted.releases, outer.fencing_token, gone is None

    assert asyncio.run(main()) == (1, 1, 1, True)


def test_a_reentrant_hold_nests_in_a_plain_hold_and_in_keep_alive(
    memory: tuple[MemoryBackend, LeaseManager],
) -> None:
    """The nested hold's own flag decides: it nests in a plain hold and in keep_alive of an
    acquired lease, and leaves the enclosing block's lease held."""
    _, leases = memory
    with leases.hold("a", ttl_ms=LONG) as outer:
        with leases.hold("a", ttl_ms=LONG, reentrant=True) as inner:
            assert inner is outer
        assert not outer._state.released
    acquired = leases.acquire("b", ttl_ms=LONG).lease
    assert acquired is not None
    with leases.keep_alive(acquired) as kept:
        with leases.hold("b", ttl_ms=LONG, reentrant=True) as inner:
            assert inner is kept is acquired
        assert not kept._state.released
    assert acquired._state.released


def test_without_reentrant_the_nested_hold_says_so(
    memory: tuple[MemoryBackend, LeaseManager],
) -> None:
    """A plain hold inside this thread's hold of the key raises NestedHoldError at once, naming
    reentrant=True, and the enclosing lease stays held."""
    _, leases = memory
    with leases.hold("k", ttl_ms=LONG, reentrant=True) as outer:
        with pytest.raises(NestedHoldError) as info, leases.hold("k", ttl_ms=LONG, wait_ms=LONG):
            pytest.fail("entered")
        assert not outer._state.released and not outer.lost
    assert str(info.value) == (
        "this manager already holds 'k' in this thread (an enclosing hold or keep_alive): a"
        " nested hold of the same key would wait for itself (hold it with reentrant=True to"
        " nest)"
    )


# -- the depth limit -----------------------------------------------------------------------------


def test_the_default_depth_limit_is_64_levels(memory: tuple[MemoryBackend, LeaseManager]) -> None:
    """64 levels nest (the outermost counted); the 65th raises ReentrancyLimitError, and every
    level still holds the lease and can nest again."""
    _, leases = memory

    def nest(level: int) -> None:
        with leases.hold("k", ttl_ms=LONG, reentrant=True) as lease:
            assert lease.fencing_token == 1
            if level < 64:
                nest(level + 1)
                return
            with (
                pytest.raises(ReentrancyLimitError) as info,
                leases.hold("k", ttl_ms=LONG, reentrant=True),
            ):
                pytest.fail("entered")
            assert (info.value.key, info.value.max_depth) == ("k", 64)
            assert str(info.value) == (
                "reentrant holds of 'k' would nest deeper than max_depth=64 (the outermost"
                " hold counted)"
            )
            assert not lease.lost and not lease._state.released

    nest(1)
    with leases.hold("k", ttl_ms=LONG) as lease:
        assert lease.fencing_token == 2


def test_max_depth_sets_the_limit(memory: tuple[MemoryBackend, LeaseManager]) -> None:
    """With max_depth=2 the third level raises; after the second exits, a second one nests."""
    _, leases = memory
    with leases.hold("k", ttl_ms=LONG, reentrant=True, max_depth=2) as outer:
        with (
            leases.hold("k", ttl_ms=LONG, reentrant=True, max_depth=2),
            pytest.raises(ReentrancyLimitError),
            leases.hold("k", ttl_ms=LONG, reentrant=True, max_depth=2),
        ):
            pytest.fail("entered")
        with leases.hold("k", ttl_ms=LONG, reentrant=True, max_depth=2) as again:
            assert again is outer


def test_async_depth_limit() -> None:
    """asyncio: max_depth=1 refuses any nesting with ReentrancyLimitError; the lease is kept."""

    async def main() -> tuple[bool, bool]:
        async with (
            AsyncLeaseManager(AsyncMemoryBackend()) as leases,
            leases.hold("k", ttl_ms=LONG, reentrant=True) as outer,
        ):
            with pytest.raises(ReentrancyLimitError) as info:
                async with leases.hold("k", ttl_ms=LONG, reentrant=True, max_depth=1):
                    pytest.fail("entered")
            assert info.value.max_depth == 1
            return outer.lost, outer._state.released

    assert asyncio.run(main()) == (False, False)


def test_reentrancy_limit_error_is_a_library_error_and_pickles() -> None:
    """ReentrancyLimitError is a FencedLeaseError (not a LeaseNotAcquiredError) and survives
    pickling with its key, limit and message."""
    error = ReentrancyLimitError("k", 3)
    copy: ReentrancyLimitError = pickle.loads(pickle.dumps(error))
    assert type(copy) is ReentrancyLimitError
    assert issubclass(ReentrancyLimitError, FencedLeaseError)
    assert not issubclass(ReentrancyLimitError, LeaseNotAcquiredError)
    assert (copy.key, copy.max_depth, str(copy)) == ("k", 3, str(error))


@pytest.mark.parametrize(
    ("kwargs", "argument", "message"),
    [
        ({"reentrant": 1}, "reentrant", "reentrant must be a bool, not int"),
        ({"reentrant": None}, "reentrant", "reentrant must be a bool, not NoneType"),
        ({"max_depth": 0}, "max_depth", "max_depth must be an int, 1 <= max_depth <= 10000; got 0"),
        (
            {"max_depth": 10_001},
            "max_depth",
            "max_depth must be an int, 1 <= max_depth <= 10000; got 10001",
        ),
        (
            {"max_depth": True},
            "max_depth",
            "max_depth must be an int, 1 <= max_depth <= 10000; got True",
        ),
        (
            {"max_depth": 2.0},
            "max_depth",
            "max_depth must be an int, 1 <= max_depth <= 10000; got 2.0",
        ),
    ],
)
def test_bad_reentrancy_arguments_name_themselves(
    kwargs: dict[str, Any], argument: str, message: str
) -> None:
    """A non-bool reentrant, or a max_depth that is no int in 1..10,000, raises ValidationError
    naming it and the bound when hold() is called, on both faces, before any round trip."""
    backend = MemoryBackend()
    leases = LeaseManager(backend)
    with pytest.raises(ValidationError) as info:
        leases.hold("k", ttl_ms=LONG, **kwargs)
    assert (info.value.argument, str(info.value)) == (argument, message)

    async def main() -> ValidationError:
        async with AsyncLeaseManager(AsyncMemoryBackend()) as aleases:
            with pytest.raises(ValidationError) as ainfo:
                aleases.hold("k", ttl_ms=LONG, **kwargs)
            return ainfo.value

    assert str(asyncio.run(main())) == message
    assert backend.inspect("k") is None
    leases.close()


# -- the loss, at every level --------------------------------------------------------------------


def test_a_loss_is_seen_at_every_nested_level(
    memory: tuple[MemoryBackend, LeaseManager], clock: FakeClock
) -> None:
    """A renewal that finds the key gone ends the nested block in LeaseLostError and then the
    enclosing one too, though its body returned; nothing is released by either."""
    backend, leases = memory
    with (
        pytest.raises(LeaseLostError) as outer_info,
        leases.hold("k", ttl_ms=400, heartbeat_ms=100, reentrant=True) as outer,
    ):
        with (
            pytest.raises(LeaseLostError) as inner_info,
            leases.hold("k", ttl_ms=LONG, reentrant=True) as inner,
        ):
            backend.force_release("k")  # an operator deletes the key
            clock.advance(100)
            leases.renewer.wake()
            assert inner.wait_lost(30_000)
        assert outer.lost
    for info in (inner_info, outer_info):
        assert info.value.key == "k"
        assert LossReason.RENEW_REFUSED in str(info.value)


def test_a_reentrant_hold_of_a_lost_lease_raises_lease_lost(
    memory: tuple[MemoryBackend, LeaseManager], clock: FakeClock
) -> None:
    """Entering a reentrant hold once the enclosing lease passed its deadline raises
    LeaseLostError at once (no new acquire of the key in the lost block)."""
    _, leases = memory
    with (
        pytest.raises(LeaseLostError),
        leases.hold("k", ttl_ms=400, heartbeat_ms=False, reentrant=True),
    ):
        clock.advance(400)
        with (
            pytest.raises(LeaseLostError) as info,
            leases.hold("k", ttl_ms=LONG, reentrant=True),
        ):
            pytest.fail("entered")
        assert LossReason.DEADLINE in str(info.value)


def test_async_loss_cancels_the_nested_body_and_ends_every_level_lost() -> None:
    """asyncio: the loss's cancellation comes out of the nested block as LeaseLostError (caused
    by the CancelledError) and out of the enclosing one unchanged; nothing stays cancelled."""
    clock = FakeClock()

    async def main() -> tuple[list[str], LeaseLostError, LeaseLostError]:
        backend = AsyncMemoryBackend(clock=clock)
        seen: list[str] = []
        async with AsyncLeaseManager(backend, clock=clock) as leases:
            with pytest.raises(LeaseLostError) as outer_info:
                async with leases.hold("k", ttl_ms=400, heartbeat_ms=100, reentrant=True):
                    with pytest.raises(LeaseLostError) as inner_info:
                        async with leases.hold("k", ttl_ms=LONG, reentrant=True):
                            await backend.force_release("k")
                            clock.advance(100)
                            try:
                                await settle(leases)
                            except asyncio.CancelledError:
                                seen.append("inner cancelled")
                                raise
                    seen.append("outer goes on")
                    await asyncio.sleep(0)  # no cancellation is left pending
            if sys.version_info >= (3, 11):
                task = asyncio.current_task()
                assert task is not None and task.cancelling() == 0
        return seen, inner_info.value, outer_info.value

    seen, inner, outer = asyncio.run(main())
    assert seen == ["inner cancelled", "outer goes on"]
    assert isinstance(inner.__cause__, asyncio.CancelledError)
    assert LossReason.RENEW_REFUSED in str(inner) and LossReason.RENEW_REFUSED in str(outer)


def test_async_outside_cancellation_passes_through_a_nested_block() -> None:
    """asyncio: a cancellation from elsewhere (no loss) leaves the nested and the enclosing
    block as CancelledError, and the lease is released by the enclosing one."""

    async def main() -> tuple[str, bool]:
        async with AsyncLeaseManager(AsyncMemoryBackend()) as leases:
            entered = asyncio.Event()
            held: list[Any] = []

            async def body() -> None:
                async with leases.hold("k", ttl_ms=LONG, reentrant=True) as outer:
                    held.append(outer)
                    async with leases.hold("k", ttl_ms=LONG, reentrant=True):
                        entered.set()
                        await asyncio.Event().wait()

            task = asyncio.create_task(body())
            await entered.wait()
            task.cancel()
            try:
                await task
            except BaseException as exc:  # what the task ended in is the result
                return type(exc).__name__, held[0]._state.released
            return "returned", held[0]._state.released

    assert asyncio.run(main()) == ("CancelledError", True)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Task.cancelling tells them apart")
def test_async_outside_cancellation_with_a_loss_stays_a_cancellation() -> None:
    """asyncio: when the lease is lost and the task is also cancelled from elsewhere, the
    cancellation propagates out of the nested and the enclosing block as CancelledError."""

    async def main() -> str:
        async with AsyncLeaseManager(AsyncMemoryBackend()) as leases:
            entered = asyncio.Event()

            async def body() -> None:
                async with (
                    leases.hold("k", ttl_ms=LONG, reentrant=True),
                    leases.hold("k", ttl_ms=LONG, reentrant=True) as inner,
                ):
                    inner._state.mark_lost(LossReason.RENEW_REFUSED)  # posts the loss's cancel
                    task = asyncio.current_task()
                    assert task is not None
                    task.cancel("from elsewhere")
                    entered.set()
                    await asyncio.Event().wait()

            task = asyncio.create_task(body())
            await entered.wait()
            try:
                await task
            except BaseException as exc:  # what the task ended in is the result
                return type(exc).__name__
            return "returned"

    assert asyncio.run(main()) == "CancelledError"


# -- the owner: the thread or task, never the manager --------------------------------------------


def test_a_reentrant_hold_in_another_thread_waits_for_the_holder(
    memory: tuple[MemoryBackend, LeaseManager],
) -> None:
    """Another thread of the same manager does not nest: its reentrant hold is refused by the
    store until the holder's outermost block releases, then gets token 2."""
    _, leases = memory
    tried = threading.Event()
    got: list[Any] = []

    def other() -> None:
        try:
            with leases.hold("k", ttl_ms=LONG, reentrant=True):
                pytest.fail("nested in another thread's hold")
        except LeaseNotAcquiredError as exc:
            got.append(type(exc))
        tried.set()

    with leases.hold("k", ttl_ms=LONG, reentrant=True):
        thread = threading.Thread(target=other)
        thread.start()
        assert tried.wait(30)
    thread.join(30)
    assert got == [LeaseNotAcquiredError]  # the store's refusal, not a NestedHoldError
    with leases.hold("k", ttl_ms=LONG, reentrant=True) as lease:
        assert lease.fencing_token == 2


def test_an_async_reentrant_hold_in_another_task_does_not_nest() -> None:
    """asyncio: a reentrant hold in another task of the same manager is refused by the store
    while the first task holds the key."""

    async def main() -> type[BaseException] | None:
        async with AsyncLeaseManager(AsyncMemoryBackend()) as leases:

            async def other() -> type[BaseException] | None:
                try:
                    async with leases.hold("k", ttl_ms=LONG, reentrant=True):
                        return None
                except LeaseNotAcquiredError as exc:
                    return type(exc)

            async with leases.hold("k", ttl_ms=LONG, reentrant=True):
                return await asyncio.create_task(other())

    assert asyncio.run(main()) is LeaseNotAcquiredError


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_is_another_owner() -> None:
    """In a forked child the thread that forked is a new owner (its thread identifier is the
    parent's), and a reentrant hold there does not nest in the parent's lease: the store refuses
    it; the parent's block still holds and releases it."""
    leases = LeaseManager(MemoryBackend())
    read, write = os.pipe()
    with leases.hold("k", ttl_ms=LONG, heartbeat_ms=False, reentrant=True) as outer:
        parent = current_caller()
        pid = os.fork()
        if pid == 0:  # the child: report, and leave without running the parent's exits
            code = 0
            try:
                code |= 1 if current_caller() is parent else 0
                code |= 2 if current_caller() is not current_caller() else 0
                try:
                    with leases.hold("k", ttl_ms=LONG, reentrant=True):
                        code |= 4
                except LeaseNotAcquiredError:
                    pass
            except BaseException:  # any surprise is a failure code
                code |= 8
            os.write(write, bytes([code]))
            os._exit(0)
        os.close(write)
        report = os.read(read, 1)
        os.waitpid(pid, 0)
        assert current_caller() is parent
    os.close(read)
    assert report == bytes([0])
    assert outer._state.released
    leases.close()
