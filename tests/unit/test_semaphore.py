"""Semaphores without a server: every slot store against the model (memory and SQLite, both
faces), and the lease policy of slots on a FakeClock through both faces: the limit, fail fast,
the bounded wait, loss by deadline and by a refused renewal, background renewal, close."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract.semaphore_model import SlotModel
from fencedlease import (
    BackendError,
    LeaseLostError,
    LeaseManager,
    LeaseNotAcquiredError,
    ManagerClosedError,
    MemoryBackend,
    SemaphoreLease,
    SemaphoreLeaseLostError,
    SqliteBackend,
    ValidationError,
)
from fencedlease._async.semaphore_stores import async_slot_store_for
from fencedlease._core.state import LossReason
from fencedlease._sync.semaphore_stores import SlotStore
from fencedlease.aio import AsyncLeaseManager, AsyncSemaphoreLease
from fencedlease.backends import AsyncMemoryBackend, AsyncSqliteBackend
from fencedlease.backends._slots import MemorySlots, SqliteSlots
from fencedlease.testing import FakeClock

OWNERS = ["owner-a", "owner-b", "owner-c", "owner-d"]
NAMES = ["pool", "po{ol}%"]

# -- every store against the model ------------------------------------------------------------

STEP = st.one_of(
    st.tuples(
        st.just("acquire"),
        st.sampled_from(NAMES),
        st.sampled_from(OWNERS),
        st.sampled_from([1, 50, 100]),
        st.integers(1, 3),
    ),
    st.tuples(
        st.just("renew"), st.sampled_from(NAMES), st.sampled_from(OWNERS), st.sampled_from([1, 80])
    ),
    st.tuples(st.just("release"), st.sampled_from(NAMES), st.sampled_from(OWNERS)),
    st.tuples(st.just("advance"), st.sampled_from([0, 1, 49, 50, 99])),
    st.tuples(st.just("count"), st.sampled_from(NAMES)),
    st.tuples(st.just("clear"), st.sampled_from(NAMES)),
)

MODEL_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _apply(store: SlotStore, step: tuple[Any, ...]) -> object:
    op, *args = step
    if op == "acquire":
        return store.acquire(args[0], args[1], args[2], args[3])
    if op == "renew":
        return store.renew_many([(args[0], args[1], args[2])])[0]
    if op == "release":
        return store.release(args[0], args[1])
    if op == "clear":
        return store.clear(args[0])
    return store.count(args[0])


def _expected(model: SlotModel, now: int, step: tuple[Any, ...]) -> object:
    op, *args = step
    if op == "acquire":
        return model.acquire(now, args[0], args[1], args[2], args[3])
    if op == "renew":
        return model.renew(now, args[0], args[1], args[2])
    if op == "release":
        return model.release(now, args[0], args[1])
    if op == "clear":
        return model.clear(now, args[0])
    return model.count(now, args[0])


def _sync_store(kind: str, clock: FakeClock) -> SlotStore:
    if kind == "memory":
        return MemorySlots(MemoryBackend(clock=clock))
    return SqliteSlots(SqliteBackend(":memory:", clock=clock))


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@MODEL_SETTINGS
@given(steps=st.lists(STEP, max_size=40))
def test_sync_slot_store_follows_the_model(kind: str, steps: list[tuple[Any, ...]]) -> None:
    """Acquire, renew, release, count and time passing: each reply equals the model's exactly
    (tokens, remaining ms, retried acquires, expiry at the deadline's millisecond)."""
    clock, model = FakeClock(), SlotModel()
    store = _sync_store(kind, clock)
    for step in steps:
        if step[0] == "advance":
            clock.advance(step[1])
            continue
        assert _apply(store, step) == _expected(model, clock.elapsed_ms, step), step


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@MODEL_SETTINGS
@given(steps=st.lists(STEP, max_size=40))
def test_async_slot_store_follows_the_model(kind: str, steps: list[tuple[Any, ...]]) -> None:
    """The asyncio face's stores (AsyncMemoryBackend inline, AsyncSqliteBackend on a thread)
    answer as the model does."""
    clock, model = FakeClock(), SlotModel()

    async def run() -> None:
        backend: Any = (
            AsyncMemoryBackend(clock=clock)
            if kind == "memory"
            else AsyncSqliteBackend(":memory:", clock=clock)
        )
        store = async_slot_store_for(backend)
        for step in steps:
            op, *args = step
            if op == "advance":
                clock.advance(args[0])
                continue
            if op == "acquire":
                got: object = await store.acquire(args[0], args[1], args[2], args[3])
            elif op == "renew":
                got = (await store.renew_many([(args[0], args[1], args[2])]))[0]
            elif op == "release":
                got = await store.release(args[0], args[1])
            elif op == "clear":
                got = await store.clear(args[0])
            else:
                got = await store.count(args[0])
            assert got == _expected(model, clock.elapsed_ms, step), step
        await backend.close()

    asyncio.run(run())


def test_memory_slots_are_shared_by_managers_of_one_backend() -> None:
    """Two managers on one MemoryBackend see the same slots and one counter per name; another
    backend object counts apart."""
    clock = FakeClock()
    backend = MemoryBackend(clock=clock)
    first = LeaseManager(backend, clock=clock).semaphore("pool", limit=1)
    second = LeaseManager(backend, clock=clock).semaphore("pool", limit=1)
    elsewhere = LeaseManager(MemoryBackend(clock=clock), clock=clock).semaphore("pool", limit=1)
    held = first.acquire(ttl_ms=100).lease
    assert held is not None
    assert held.fencing_token == 1
    assert second.acquire(ttl_ms=100).holder_ttl_ms == 100
    other = elsewhere.acquire(ttl_ms=100).lease
    assert other is not None
    assert other.fencing_token == 1
    assert first.fencing_scope == second.fencing_scope != elsewhere.fencing_scope


# -- the sync face ----------------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
def sync_setup(request: pytest.FixtureRequest) -> Iterator[tuple[LeaseManager, FakeClock]]:
    clock = FakeClock()
    backend = (
        MemoryBackend(clock=clock)
        if request.param == "memory"
        else SqliteBackend(":memory:", clock=clock)
    )
    manager = LeaseManager(backend, clock=clock)
    yield manager, clock
    manager.close()
    backend.close()


def test_limit_admits_limit_holders_then_fails_fast(
    sync_setup: tuple[LeaseManager, FakeClock],
) -> None:
    """limit=3: three slots with tokens 1, 2, 3; the fourth acquire fails at once (the first slot
    frees in 1000 - 10 ms), hold raises LeaseNotAcquiredError naming the limit, with_lease skips
    without running fn."""
    manager, clock = sync_setup
    pool = manager.semaphore("pool", limit=3)
    slots = []
    for _ in range(3):
        lease = pool.acquire(ttl_ms=1000).lease
        assert isinstance(lease, SemaphoreLease)
        slots.append(lease)
        clock.advance(5)
    assert [s.fencing_token for s in slots] == [1, 2, 3]
    assert pool.holders() == 3
    refused = pool.acquire(ttl_ms=1000)
    assert refused.lease is None
    assert refused.holder_ttl_ms == 1000 - 15
    assert clock.elapsed_ms == 15  # failed fast: no wait
    full = r"semaphore 'pool': all 3 slots are held"
    with pytest.raises(LeaseNotAcquiredError, match=full), pool.hold(ttl_ms=1000):
        pytest.fail("the body ran without a slot")
    ran: list[int] = []
    outcome = pool.with_lease(lambda s: ran.append(1), ttl_ms=1000)
    assert outcome.skipped
    assert ran == []
    assert slots[1].release() is True
    assert pool.holders() == 2
    fourth = pool.acquire(ttl_ms=1000).lease
    assert fourth is not None
    assert fourth.fencing_token == 4


def test_wait_ms_gets_the_slot_when_a_holder_expires(
    sync_setup: tuple[LeaseManager, FakeClock],
) -> None:
    """limit=1, the holder's ttl 100: a waiter with wait_ms=500 polls on the manager's clock and
    gets the slot once it expired (token 2, after 100 ms and within one retry of it); the old
    holder's renewal is then refused."""
    manager, clock = sync_setup
    pool = manager.semaphore("pool", limit=1)
    first = pool.acquire(ttl_ms=100).lease
    assert first is not None
    second = pool.acquire(ttl_ms=100, wait_ms=500, retry_delay_ms=10).lease
    assert second is not None
    assert second.fencing_token == 2
    assert 100 <= clock.elapsed_ms <= 115
    assert first.renew() is False
    assert first.lost_reason == LossReason.DEADLINE


def test_wait_ms_is_bounded(sync_setup: tuple[LeaseManager, FakeClock]) -> None:
    """limit=1 held for 10 s: a wait of 300 ms ends not acquired after 300 ms (plus at most one
    retry delay), never at the holder's expiry."""
    manager, clock = sync_setup
    pool = manager.semaphore("pool", limit=1)
    assert pool.acquire(ttl_ms=10_000).acquired
    result = pool.acquire(ttl_ms=100, wait_ms=300, retry_delay_ms=20)
    assert not result.acquired
    assert 300 <= clock.elapsed_ms <= 330
    assert result.holder_ttl_ms == 10_000 - clock.elapsed_ms


def test_a_slot_whose_renewal_stopped_is_lost_at_its_deadline_and_taken(
    sync_setup: tuple[LeaseManager, FakeClock],
) -> None:
    """A hold with no renewal (heartbeat_ms=False): at ttl_ms another caller takes the slot
    (token 2), the holder sees the loss by its deadline, and the hold ends in
    SemaphoreLeaseLostError (a LeaseLostError) naming the semaphore."""
    manager, clock = sync_setup
    pool = manager.semaphore("pool", limit=1)
    with (
        pytest.raises(SemaphoreLeaseLostError) as caught,
        pool.hold(ttl_ms=100, heartbeat_ms=False) as slot,
    ):
        assert slot.fencing_token == 1
        clock.advance(99)
        assert not pool.acquire(ttl_ms=100).acquired
        clock.advance(1)
        taker = pool.acquire(ttl_ms=100).lease
        assert taker is not None
        assert taker.fencing_token == 2
        assert slot.lost
        assert slot.lost_reason == LossReason.DEADLINE
    assert isinstance(caught.value, LeaseLostError)
    assert caught.value.key == "pool"
    assert "fencing token 1" in str(caught.value)
    assert pool.holders() == 1  # the release of the lost slot did not touch the taker's


def test_a_refused_renewal_is_a_slot_loss(sync_setup: tuple[LeaseManager, FakeClock]) -> None:
    """force_release() (the operator's) before the slot's deadline, and another caller takes
    it: the holder's renew() returns False (a 0 reply), check() raises SemaphoreLeaseLostError,
    and release() frees nothing; a second force_release finds a live slot again."""
    manager, clock = sync_setup
    pool = manager.semaphore("pool", limit=1)
    first = pool.acquire(ttl_ms=100).lease
    assert first is not None
    clock.advance(50)
    assert pool.force_release() is True
    assert pool.force_release() is False
    assert pool.acquire(ttl_ms=100).acquired
    assert first.renew() is False
    assert first.lost_reason == LossReason.RENEW_REFUSED
    with pytest.raises(SemaphoreLeaseLostError, match="a renewal found the key gone"):
        first.check()
    assert first.release() is False
    assert pool.holders() == 1
    assert pool.force_release() is True
    assert pool.holders() == 0


def test_limits_are_each_callers_own(sync_setup: tuple[LeaseManager, FakeClock]) -> None:
    """Handles of one name with limits 1 and 3: the limit-1 handle is refused once any slot is
    held, the limit-3 one fills up to 3, and neither goes past its own."""
    manager, _ = sync_setup
    small, large = manager.semaphore("pool", limit=1), manager.semaphore("pool", limit=3)
    assert small.acquire(ttl_ms=1000).acquired
    assert not small.acquire(ttl_ms=1000).acquired
    assert [large.acquire(ttl_ms=1000).acquired for _ in range(3)] == [True, True, False]
    assert large.holders() == 3


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_background_renewal_keeps_the_slot(kind: str) -> None:
    """hold(ttl 100, heartbeat 25): once the clock moved 25 ms the renewer confirms the slot (a
    "renew" event, waited for), so at 100 ms it is still held and a second caller is refused."""
    clock, renewed = FakeClock(), threading.Event()

    def on_event(event: Any) -> None:
        if event.kind == "renew" and event.status == "confirmed":
            renewed.set()

    backend: Any = _sync_store_backend(kind, clock)
    with LeaseManager(backend, clock=clock, on_event=on_event) as manager:
        pool = manager.semaphore("pool", limit=1)
        with pool.hold(ttl_ms=100, heartbeat_ms=25) as slot:
            clock.advance(25)
            assert renewed.wait(30)
            clock.advance(75)
            assert not slot.lost
            assert not pool.acquire(ttl_ms=100).acquired
        assert pool.holders() == 0


def _sync_store_backend(kind: str, clock: FakeClock) -> MemoryBackend | SqliteBackend:
    if kind == "memory":
        return MemoryBackend(clock=clock)
    return SqliteBackend(":memory:", clock=clock)


def test_close_ends_a_hold_in_a_slot_loss_and_refuses_more(
    sync_setup: tuple[LeaseManager, FakeClock],
) -> None:
    """Closing the manager inside a hold: the hold ends in SemaphoreLeaseLostError (reason: the
    manager was closed), the slot is released, and the handle then raises ManagerClosedError."""
    manager, _ = sync_setup
    pool = manager.semaphore("pool", limit=2)
    with pytest.raises(SemaphoreLeaseLostError, match="closed"), pool.hold(ttl_ms=1000) as slot:
        manager.close()
    assert slot._state.released  # close() released the slot (the backend is closed now)
    with pytest.raises(ManagerClosedError):
        pool.acquire()
    with pytest.raises(ManagerClosedError):
        manager.semaphore("pool", limit=2)


BAD_LIMITS: list[Any] = [0, -1, 10_001, True, 2.0, "3", None]


@pytest.mark.parametrize("limit", BAD_LIMITS)
def test_bad_limit_is_refused(limit: Any) -> None:
    """limit outside 1..10,000 or not an int: ValidationError naming limit and the bound."""
    manager = LeaseManager(MemoryBackend())
    with pytest.raises(ValidationError, match=r"1 <= limit <= 10000") as caught:
        manager.semaphore("pool", limit=limit)
    assert caught.value.argument == "limit"


@pytest.mark.parametrize("name", ["", 7, None])
def test_bad_name_is_refused(name: Any) -> None:
    manager = LeaseManager(MemoryBackend())
    with pytest.raises(ValidationError) as caught:
        manager.semaphore(name, limit=2)
    assert caught.value.argument == "name"


def test_a_backend_without_a_slot_store_is_refused() -> None:
    """A third-party backend (here the memory backend behind a plain wrapper): ValidationError
    naming client, on both faces."""

    class Wrapped:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    with pytest.raises(ValidationError, match="semaphores need") as caught:
        LeaseManager(Wrapped(MemoryBackend())).semaphore("pool", limit=2)
    assert caught.value.argument == "client"
    with pytest.raises(ValidationError, match="semaphores need"):
        AsyncLeaseManager(Wrapped(AsyncMemoryBackend())).semaphore("pool", limit=2)


def test_hold_checks_its_arguments_when_called_on_both_faces() -> None:
    """``hold()`` with a bad ``ttl_ms`` raises ValidationError naming it at the call, before any
    ``with``, on both faces (the sync handle is generated from the asyncio one), and takes no
    slot."""
    manager = LeaseManager(MemoryBackend())
    pool = manager.semaphore("pool", limit=1)
    with pytest.raises(ValidationError) as caught:
        pool.hold(ttl_ms=0)
    assert caught.value.argument == "ttl_ms"
    assert pool.holders() == 0

    async def main() -> None:
        async with AsyncLeaseManager(AsyncMemoryBackend()) as aio_manager:
            aio_pool = aio_manager.semaphore("pool", limit=1)
            with pytest.raises(ValidationError) as aio_caught:
                aio_pool.hold(ttl_ms=0)
            assert aio_caught.value.argument == "ttl_ms"
            assert await aio_pool.holders() == 0

    asyncio.run(main())
    manager.close()


# -- the asyncio face -------------------------------------------------------------------------


def _async_backend(kind: str, clock: FakeClock) -> Any:
    if kind == "memory":
        return AsyncMemoryBackend(clock=clock)
    return AsyncSqliteBackend(":memory:", clock=clock)


def _run_async(kind: str, body: Callable[[AsyncLeaseManager, FakeClock], Any]) -> None:
    clock = FakeClock()

    async def main() -> None:
        backend = _async_backend(kind, clock)
        async with AsyncLeaseManager(backend, clock=clock) as manager:
            await body(manager, clock)
        await backend.close()

    asyncio.run(main())


KINDS = ["memory", "sqlite"]


@pytest.mark.parametrize("kind", KINDS)
def test_async_limit_and_fail_fast(kind: str) -> None:
    """The asyncio face: limit=2 gives tokens 1, 2; the third fails fast; hold raises
    LeaseNotAcquiredError naming the limit; with_lease skips."""

    async def body(manager: AsyncLeaseManager, clock: FakeClock) -> None:
        pool = manager.semaphore("pool", limit=2)
        first, second = await pool.acquire(ttl_ms=500), await pool.acquire(ttl_ms=500)
        assert isinstance(first.lease, AsyncSemaphoreLease)
        assert second.lease is not None
        assert [first.lease.fencing_token, second.lease.fencing_token] == [1, 2]
        refused = await pool.acquire(ttl_ms=500)
        assert refused.holder_ttl_ms == 500
        with pytest.raises(LeaseNotAcquiredError, match="all 2 slots are held"):
            async with pool.hold(ttl_ms=500):
                pytest.fail("the body ran without a slot")

        async def never(_: AsyncSemaphoreLease) -> None:
            pytest.fail("fn ran without a slot")

        assert (await pool.with_lease(never, ttl_ms=500)).skipped
        assert await pool.holders() == 2
        assert clock.elapsed_ms == 0

    _run_async(kind, body)


@pytest.mark.parametrize("kind", KINDS)
def test_async_wait_then_loss_by_deadline(kind: str) -> None:
    """The asyncio face: a waiter gets the slot when the holder's deadline passes (token 2); the
    holder, not renewed, is lost by its deadline and its hold ends in SemaphoreLeaseLostError."""

    async def body(manager: AsyncLeaseManager, clock: FakeClock) -> None:
        pool = manager.semaphore("pool", limit=1)
        with pytest.raises(SemaphoreLeaseLostError) as caught:
            async with pool.hold(ttl_ms=100, heartbeat_ms=False) as slot:
                taker = await pool.acquire(ttl_ms=100, wait_ms=500, retry_delay_ms=10)
                assert taker.lease is not None
                assert taker.lease.fencing_token == 2
                assert 100 <= clock.elapsed_ms <= 115
                assert slot.lost
                assert slot.lost_reason == LossReason.DEADLINE
        assert caught.value.key == "pool"
        assert await pool.holders() == 1

    _run_async(kind, body)


@pytest.mark.parametrize("kind", KINDS)
def test_async_refused_renewal_and_close(kind: str) -> None:
    """The asyncio face: a slot force-released and taken: its renew() is refused (a loss);
    closing the manager inside a hold ends it in SemaphoreLeaseLostError."""

    async def body(manager: AsyncLeaseManager, clock: FakeClock) -> None:
        pool = manager.semaphore("pool", limit=1)
        first = (await pool.acquire(ttl_ms=100)).lease
        assert first is not None
        clock.advance(50)
        assert await pool.force_release() is True
        second = (await pool.acquire(ttl_ms=100)).lease
        assert second is not None
        assert await first.renew() is False
        assert first.lost_reason == LossReason.RENEW_REFUSED
        with pytest.raises(SemaphoreLeaseLostError, match="a renewal found the key gone"):
            first.check()
        assert await second.release() is True
        other = manager.semaphore("other", limit=1)
        with pytest.raises(SemaphoreLeaseLostError, match="closed"):
            async with other.hold(ttl_ms=1000):
                await manager.close()
        await manager.close()  # the body was cancelled by the loss: wait for the teardown
        with pytest.raises(ManagerClosedError):
            await pool.acquire()

    _run_async(kind, body)


def test_every_semaphore_of_a_manager_shares_one_renewer() -> None:
    """Holds on three semaphores (two names, two limits), through handles made anew each time:
    one renewer thread renews all their slots, in one batch when they come due together; the
    manager's close() stops it and closes every handle."""
    clock = FakeClock()
    renewed = threading.Event()
    batches: list[int] = []

    def renewers() -> int:
        return sum(t.name == "fencedlease-renewer" for t in threading.enumerate())

    def on_event(event: Any) -> None:
        if event.kind == "renew" and event.status == "confirmed":
            renewed.set()

    before = renewers()
    manager = LeaseManager(MemoryBackend(clock=clock), clock=clock, on_event=on_event)
    pools = [manager.semaphore("a", limit=2), manager.semaphore("b", limit=1)]
    with (
        pools[0].hold(ttl_ms=100, heartbeat_ms=25) as one,
        manager.semaphore("a", limit=3).hold(ttl_ms=100, heartbeat_ms=25) as two,
        pools[1].hold(ttl_ms=100, heartbeat_ms=25) as three,
    ):
        assert renewers() == before + 1
        trips = pools[0]._slots.renewer.round_trips
        clock.advance(25)
        assert renewed.wait(30)
        while pools[0]._slots.renewer.round_trips == trips:  # the batch's reply is applied
            renewed.wait(0.01)
        batches.append(pools[0]._slots.renewer.round_trips - trips)
        clock.advance(75)
        assert not (one.lost or two.lost or three.lost)
    assert batches == [1]  # the three slots came due together: one round trip
    assert [one.fencing_token, two.fencing_token, three.fencing_token] == [1, 2, 1]
    manager.close()
    assert all(p.closed for p in pools)
    assert renewers() == before
    with pytest.raises(ManagerClosedError):
        pools[0].acquire()


def test_async_every_semaphore_of_a_manager_shares_one_slot_manager() -> None:
    """The asyncio face: semaphores of any name and limit share the manager's slot manager (one
    renewal task); each handle holds to its own limit; the manager's close closes them all."""
    seen: list[AsyncLeaseManager] = []

    async def body(manager: AsyncLeaseManager, clock: FakeClock) -> None:
        seen.append(manager)
        small, large = manager.semaphore("pool", limit=1), manager.semaphore("pool", limit=2)
        assert small._slots is large._slots is manager.semaphore("other", limit=5)._slots
        assert (await small.acquire(ttl_ms=1000)).acquired
        assert not (await small.acquire(ttl_ms=1000)).acquired
        assert (await large.acquire(ttl_ms=1000)).acquired
        assert not (await large.acquire(ttl_ms=1000)).acquired
        assert not small.closed

    _run_async("memory", body)
    with pytest.raises(ManagerClosedError):
        seen[0].semaphore("pool", limit=1)


def test_a_spent_counter_refuses_the_grant_in_memory_and_sqlite() -> None:
    """The semaphore's counter at 2**63-1: acquire raises BackendError and grants nothing (no
    slot, the counter unchanged), on the memory and the SQLite store; at 2**63-2 the grant gets
    2**63-1 exactly."""
    clock = FakeClock()
    memory = MemorySlots(MemoryBackend(clock=clock))
    sqlite_backend = SqliteBackend(":memory:", clock=clock)
    sqlite = SqliteSlots(sqlite_backend)

    def set_counter(value: int) -> None:
        memory._state.counters["p"] = value
        with sqlite_backend._transaction("test") as conn:
            conn.execute(
                "INSERT OR REPLACE INTO fencedlease_semaphore_fences VALUES (?, ?, ?)",
                ("fencedlease", "p", value),
            )

    set_counter(2**63 - 1)
    for store in (memory, sqlite):
        with pytest.raises(BackendError, match="2\\*\\*63-1"):
            store.acquire("p", "o", 100, 2)
        assert store.count("p") == 0
    set_counter(2**63 - 2)
    for store in (memory, sqlite):
        reply = store.acquire("p", "o", 100, 2)
        assert (reply.acquired, reply.fencing_token) == (True, 2**63 - 1)


def test_sqlite_slots_are_shared_by_connections_to_one_file(tmp_path: Any) -> None:
    """Two SqliteBackends (two connections, as two processes would have) on one file: the limit
    holds across them, tokens come from one counter, and a slot released by one frees it for the
    other; the slots' fencing scope names the semaphore's counter."""
    clock = FakeClock()
    path = str(tmp_path / "leases.db")
    first = LeaseManager(SqliteBackend(path, clock=clock), clock=clock).semaphore("p", limit=2)
    second = LeaseManager(SqliteBackend(path, clock=clock), clock=clock).semaphore("p", limit=2)
    a, b = first.acquire(ttl_ms=1000).lease, second.acquire(ttl_ms=1000).lease
    assert a is not None
    assert b is not None
    assert (a.fencing_token, b.fencing_token) == (1, 2)
    assert a.fencing_scope == first.fencing_scope == "fencedlease:{p}:semaphore:fence"
    assert not first.acquire(ttl_ms=1000).acquired
    assert b.release() is True
    c = first.acquire(ttl_ms=1000).lease
    assert c is not None
    assert c.fencing_token == 3
    assert second.holders() == 2


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_the_renewer_reports_a_refused_slot_and_the_hold_ends_lost(kind: str) -> None:
    """Sync face, real clock: force_release() under a renewed hold; the renewer's next renewal
    is answered 0, the slot is lost (reason: the renewal found it gone; waited for with
    wait_lost, no fixed sleep) and the hold ends in SemaphoreLeaseLostError."""
    backend = MemoryBackend() if kind == "memory" else SqliteBackend(":memory:")
    with LeaseManager(backend) as manager:
        pool = manager.semaphore("p", limit=1)
        with (
            pytest.raises(SemaphoreLeaseLostError),
            pool.hold(ttl_ms=5_000, heartbeat_ms=20) as slot,
        ):
            assert pool.force_release() is True
            assert slot.wait_lost(30_000)
        assert slot.lost_reason == LossReason.RENEW_REFUSED


@pytest.mark.parametrize("kind", KINDS)
def test_async_the_renewer_reports_a_refused_slot_and_cancels_the_body(kind: str) -> None:
    """asyncio face, real clock: force_release() under a renewed hold; the renewal task's
    refused renewal marks the slot lost, the body (waiting on wait_lost) is cancelled, and the
    hold ends in SemaphoreLeaseLostError."""

    async def main() -> None:
        backend: Any = AsyncMemoryBackend() if kind == "memory" else AsyncSqliteBackend(":memory:")
        async with AsyncLeaseManager(backend) as manager:
            pool = manager.semaphore("p", limit=1)
            with pytest.raises(SemaphoreLeaseLostError):
                async with pool.hold(ttl_ms=5_000, heartbeat_ms=20) as slot:
                    assert await pool.force_release() is True
                    await slot.wait_lost(30_000)
                    pytest.fail("the body was not cancelled on the loss")
            assert slot.lost_reason == LossReason.RENEW_REFUSED
        await backend.close()

    asyncio.run(main())
