"""Running a manager in a service, on a real Redis, both faces: ``from_env(connect=True)``,
``check_health``, ``close()``'s report and bound, and ``keep_alive``."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from fencedlease import (
    BackendError,
    LeaseEvent,
    LeaseLostError,
    LeaseManager,
    ShutdownReport,
    ValidationError,
)
from fencedlease._redis.health import NOOP
from fencedlease.aio import AsyncLeaseManager
from fencedlease.backends import AsyncMemoryBackend, MemoryBackend
from fencedlease.testing import FakeClock
from fencedlease_lab.servers.redis import free_port

pytestmark = pytest.mark.live


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    yield listener.getsockname()[1]
    listener.close()


# -- from_env(connect=True) -------------------------------------------------------------------


def test_connect_reaches_redis_on_both_faces(redis_url: str) -> None:
    env = {"FENCEDLEASE_URL": redis_url, "FENCEDLEASE_PREFIX": "envtest"}
    with LeaseManager.from_env(env, connect=True) as manager:
        result = manager.acquire("k", ttl_ms=5_000)
        assert result.lease is not None
        assert manager.inspect("k") is not None
        result.lease.release()

    async def main() -> None:
        async with await AsyncLeaseManager.from_env(env, connect=True) as manager:
            result = await manager.acquire("k2", ttl_ms=5_000)
            assert result.lease is not None
            await result.lease.release()

    asyncio.run(main())


def test_connect_fails_at_start_up_when_redis_cannot_be_reached() -> None:
    """A closed port: BackendError after FENCEDLEASE_CONNECT_MAX_ATTEMPTS checks, redis-py's
    ConnectionError at the bottom of the chain, the waits on the (fake) clock, no secret."""
    env = {
        "FENCEDLEASE_URL": f"redis://user:s3cr3t-pw@127.0.0.1:{free_port()}/0",
        "FENCEDLEASE_CONNECT_MAX_ATTEMPTS": "2",
        "FENCEDLEASE_CONNECT_TIMEOUT_MS": "500",
    }
    clock = FakeClock()
    with pytest.raises(BackendError) as info:
        LeaseManager.from_env(env, connect=True, clock=clock)
    assert "2 attempt(s)" in str(info.value)
    assert isinstance(info.value.__cause__, BackendError)
    assert isinstance(info.value.__cause__.__cause__, redis.ConnectionError)
    assert "s3cr3t" not in str(info.value)
    assert clock.elapsed_ms == 100

    async def main() -> None:
        aclock = FakeClock()
        with pytest.raises(BackendError) as ainfo:
            await AsyncLeaseManager.from_env(env, connect=True, clock=aclock)
        assert "2 attempt(s)" in str(ainfo.value)
        assert isinstance(ainfo.value.__cause__, BackendError)
        assert isinstance(ainfo.value.__cause__.__cause__, redis.ConnectionError)
        assert aclock.elapsed_ms == 100

    asyncio.run(main())


# -- check_health -------------------------------------------------------------------------------


def test_check_health_sync_starts_no_background_work(redis_client: redis.Redis) -> None:
    url = "redis://127.0.0.1:{}/0".format(redis_client.connection_pool.connection_kwargs["port"])
    redis_client.script_flush()
    threads = {t.ident for t in threading.enumerate()}
    with LeaseManager.from_url(url) as manager:
        report = manager.check_health(timeout_ms=5_000)
        assert report.ping_ms >= 0
        assert report.script_ms is not None and report.script_ms >= 0
        assert report.total_ms >= report.ping_ms + report.script_ms
        # the no-op script was loaded on NOSCRIPT, and nothing of the manager's is running
        assert redis_client.script_exists(NOOP.sha) == [True]
        assert {t.ident for t in threading.enumerate()} == threads
        assert not manager.renewer._owner.started
        assert not manager._release_waiter._listening.started  # type: ignore[attr-defined]
        assert redis_client.dbsize() == 0  # no key written


def test_check_health_async_starts_no_task(redis_client: redis.Redis) -> None:
    url = "redis://127.0.0.1:{}/0".format(redis_client.connection_pool.connection_kwargs["port"])
    redis_client.script_flush()

    async def main() -> None:
        async with AsyncLeaseManager.from_url(url) as manager:
            tasks = asyncio.all_tasks()
            report = await manager.check_health(timeout_ms=5_000)
            assert report.script_ms is not None
            assert report.total_ms >= report.ping_ms + report.script_ms
            assert asyncio.all_tasks() == tasks
            assert not manager.renewer._owner.started
            assert not manager._release_waiter._listening.started  # type: ignore[attr-defined]

    asyncio.run(main())
    assert redis_client.script_exists(NOOP.sha) == [True]
    assert redis_client.dbsize() == 0


def test_check_health_times_out_on_a_silent_server(silent_port: int) -> None:
    """A server that accepts and never answers fails the check at its bound, ``timed_out``, the
    same on both faces (the bound decides, not the check connection's longer socket timeout)."""
    url = f"redis://127.0.0.1:{silent_port}/0"
    with LeaseManager.from_url(url) as manager:
        with pytest.raises(BackendError) as info:
            manager.check_health(timeout_ms=200)
        assert info.value.timed_out
        assert "no answer within 200 ms" in str(info.value)
        assert type(info.value.__cause__) is TimeoutError

    async def main() -> None:
        async with AsyncLeaseManager.from_url(url) as manager:
            with pytest.raises(BackendError) as ainfo:
                await manager.check_health(timeout_ms=200)
            assert ainfo.value.timed_out
            assert "no answer within 200 ms" in str(ainfo.value)

    asyncio.run(main())


def test_check_health_fails_on_a_closed_port() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    with LeaseManager.from_url(url) as manager:
        with pytest.raises(BackendError) as info:
            manager.check_health()
        assert isinstance(info.value.__cause__, redis.ConnectionError)

    async def main() -> None:
        async with AsyncLeaseManager.from_url(url) as manager:
            with pytest.raises(BackendError) as ainfo:
                await manager.check_health()
            assert isinstance(ainfo.value.__cause__, redis.ConnectionError)

    asyncio.run(main())


def test_check_health_bounds_and_closed_manager() -> None:
    manager = LeaseManager(MemoryBackend())
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValidationError) as info:
            manager.check_health(timeout_ms=bad)  # type: ignore[arg-type]
        assert info.value.argument == "timeout_ms"
    manager.close()
    with pytest.raises(RuntimeError):
        manager.check_health()


# -- close(): the shutdown bound and its report ------------------------------------------------


class _HungRelease(MemoryBackend):
    """Releases wait for ``go`` (a store that stopped answering)."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()

    def release(self, key: str, owner_token: str) -> bool:
        self.go.wait(30)
        return super().release(key, owner_token)


class _AsyncHungRelease(AsyncMemoryBackend):
    def __init__(self) -> None:
        super().__init__()
        self.go = asyncio.Event()

    async def release(self, key: str, owner_token: str) -> bool:
        await self.go.wait()
        return await super().release(key, owner_token)


def test_close_reports_an_incomplete_shutdown_sync(caplog: pytest.LogCaptureFixture) -> None:
    backend = _HungRelease()
    manager = LeaseManager(backend)
    entered = threading.Event()
    outcome: list[BaseException] = []

    def body() -> None:
        try:
            with manager.hold("stuck", ttl_ms=60_000, heartbeat_ms=False) as lease:
                entered.set()
                assert lease.wait_lost(30_000)  # close() marks it lost
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=body)
    worker.start()
    assert entered.wait(30)
    with caplog.at_level(logging.INFO, logger="fencedlease"):
        report = manager.close(timeout_ms=50)
    assert report.unreleased == ("stuck",)
    assert not report.complete
    assert report.timeout_ms == 50
    logged = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert (
        "WARNING",
        "fencedlease: close() could not release 'stuck' (it lapses at its ttl): no reply within"
        " 50 ms",
    ) in logged
    assert [level for level, m in logged if "did not finish within 50 ms" in m] == ["INFO"]
    assert manager.close() is report  # later calls: the first report
    backend.go.set()
    worker.join(30)
    assert [type(exc) for exc in outcome] == [LeaseLostError]


def test_a_second_close_waits_for_the_first_report() -> None:
    backend = _HungRelease()
    manager = LeaseManager(backend)
    entered = threading.Event()
    holder = threading.Thread(target=_hold_until_lost, args=(manager, entered))
    holder.start()
    assert entered.wait(30)
    first: list[ShutdownReport] = []
    closer = threading.Thread(target=lambda: first.append(manager.close(timeout_ms=30_000)))
    closer.start()
    while not manager._closed:
        threading.Event().wait(0.01)  # until the first close() is under way
    assert manager.close(timeout_ms=0) == ShutdownReport(unfinished=1, timeout_ms=0)
    backend.go.set()
    closer.join(30)
    holder.join(30)
    assert first[0].complete
    assert manager.close() is first[0]


def _hold_until_lost(manager: LeaseManager, entered: threading.Event) -> None:
    with (
        pytest.raises(LeaseLostError),
        manager.hold("k", ttl_ms=60_000, heartbeat_ms=False) as lease,
    ):
        entered.set()
        assert lease.wait_lost(30_000)


def test_close_reports_a_complete_shutdown(redis_url: str) -> None:
    with LeaseManager.from_url(redis_url) as manager, manager.hold("done", ttl_ms=5_000):
        pass
    report = manager.close()
    assert report.complete
    assert (report.unreleased, report.unfinished, report.timeout_ms) == ((), 0, 1_000)


def test_close_reports_an_incomplete_shutdown_async() -> None:
    async def main() -> None:
        backend = _AsyncHungRelease()
        manager = AsyncLeaseManager(backend)
        entered = asyncio.Event()

        async def body() -> None:
            async with manager.hold("stuck", ttl_ms=60_000, heartbeat_ms=False):
                entered.set()
                await asyncio.Event().wait()

        task = asyncio.ensure_future(body())
        await entered.wait()
        report = await manager.close(timeout_ms=50)
        assert report.unreleased == ("stuck",)
        assert not report.complete
        assert report.timeout_ms == 50
        assert await manager.close() is report
        with pytest.raises(LeaseLostError):
            await task

    asyncio.run(main())


def test_from_env_shutdown_timeout_is_close_default(redis_url: str) -> None:
    env = {"FENCEDLEASE_URL": redis_url, "FENCEDLEASE_SHUTDOWN_TIMEOUT_MS": "1234"}
    assert LeaseManager.from_env(env).close().timeout_ms == 1234
    assert LeaseManager.from_env(env).close(timeout_ms=7).timeout_ms == 7

    async def main() -> None:
        manager = await AsyncLeaseManager.from_env(env)
        assert (await manager.close()).timeout_ms == 1234

    asyncio.run(main())


# -- keep_alive -------------------------------------------------------------------------------


class _Renewals:
    """An on_event hook that sets ``seen`` once ``count`` renewals of ``key`` were confirmed."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.confirmed = 0
        self.seen = threading.Event()
        self.kinds: list[tuple[str, str]] = []

    def __call__(self, event: LeaseEvent) -> None:
        self.kinds.append((event.kind, event.status))
        if event.kind == "renew" and event.status == "confirmed":
            self.confirmed += 1
            if self.confirmed >= self.count:
                self.seen.set()


def test_keep_alive_renews_an_acquired_lease_then_releases_it(redis_url: str) -> None:
    hook = _Renewals(3)
    with LeaseManager.from_url(redis_url, prefix="ka", on_event=hook) as manager:
        lease = manager.acquire("job", ttl_ms=300).lease
        assert lease is not None
        with manager.keep_alive(lease) as kept:
            assert kept is lease
            assert hook.seen.wait(30)  # three renewals: past the 300 ms TTL, still held
            info = manager.inspect("job")
            assert info is not None and info.fencing_token == lease.fencing_token
            assert not lease.lost
        assert manager.inspect("job") is None  # released at the end, as a hold is
        assert lease._state.released
        assert len(manager.renewer) == 0


def test_keep_alive_renews_a_restored_lease(redis_url: str) -> None:
    hook = _Renewals(2)
    with LeaseManager.from_url(redis_url, prefix="ka") as first:
        taken = first.acquire("restored", ttl_ms=400).lease
        assert taken is not None
        token, fencing = taken._state.owner_token, taken.fencing_token
        with LeaseManager.from_url(redis_url, prefix="ka", on_event=hook) as second:
            restored = second.restore("restored", token, ttl_ms=400)
            with second.keep_alive(restored):
                assert hook.seen.wait(30)
                assert restored.fencing_token == fencing  # learnt from the renewal
            assert second.inspect("restored") is None


def test_keep_alive_loss_ends_the_block_in_lease_lost(redis_url: str) -> None:
    with LeaseManager.from_url(redis_url, prefix="ka") as manager:
        lease = manager.acquire("lost", ttl_ms=2_000).lease
        assert lease is not None
        with pytest.raises(LeaseLostError), manager.keep_alive(lease, heartbeat_ms=50):
            manager.force_release("lost")
            assert lease.wait_lost(30_000)
        assert lease.lost


def test_keep_alive_refuses_what_it_cannot_keep() -> None:
    clock = FakeClock()
    manager = LeaseManager(MemoryBackend(clock=clock), clock=clock)
    other = LeaseManager(MemoryBackend(clock=clock), clock=clock)
    lease = manager.acquire("k", ttl_ms=1_000).lease
    assert lease is not None
    for bad, argument in (
        ("not a lease", "lease"),
        (other.acquire("k", ttl_ms=1_000).lease, "lease"),
    ):
        with pytest.raises(ValidationError) as info, manager.keep_alive(bad):  # type: ignore[arg-type]
            pass
        assert info.value.argument == argument
    with pytest.raises(ValidationError) as info, manager.keep_alive(lease, heartbeat_ms=600):
        pass
    assert info.value.argument == "heartbeat_ms"
    with manager.keep_alive(lease, heartbeat_ms=False):
        with pytest.raises(ValidationError) as info, manager.keep_alive(lease):
            pass
        assert "already" in str(info.value)
    # released at the end of the first keep_alive: cannot be kept again
    with pytest.raises(ValidationError) as info, manager.keep_alive(lease):
        pass
    assert "was released" in str(info.value)
    late = manager.acquire("late", ttl_ms=1_000).lease
    assert late is not None
    clock.advance(1_000)  # past its deadline: lost before the block
    ran: list[bool] = []
    with pytest.raises(LeaseLostError), manager.keep_alive(late):
        ran.append(True)
    assert ran == []
    manager.close()
    other.close()


def test_keep_alive_async(redis_url: str) -> None:
    hook = _Renewals(3)

    async def main() -> None:
        async with AsyncLeaseManager.from_url(redis_url, prefix="aka", on_event=hook) as manager:
            lease = (await manager.acquire("job", ttl_ms=300)).lease
            assert lease is not None
            async with manager.keep_alive(lease) as kept:
                assert kept is lease
                while not hook.seen.is_set():
                    await asyncio.sleep(0.05)
                assert not lease.lost
            assert await manager.inspect("job") is None
            assert lease._state.released
            # loss: the block's task is cancelled, the block ends in LeaseLostError
            lost = (await manager.acquire("lost", ttl_ms=2_000)).lease
            assert lost is not None
            with pytest.raises(LeaseLostError):
                async with manager.keep_alive(lost, heartbeat_ms=50):
                    await manager.force_release("lost")
                    await asyncio.sleep(60)
            # refused: released already, another face's lease
            with pytest.raises(ValidationError):
                manager.keep_alive(lease)
            with pytest.raises(ValidationError):
                manager.keep_alive("not a lease")  # type: ignore[arg-type]

    asyncio.run(main())


# -- telemetry: the hand-off -------------------------------------------------------------------


def _handoff_kinds(events: list[LeaseEvent], key: str) -> list[tuple[str, str]]:
    return [(e.kind, e.status) for e in events if e.key == key]


def test_a_handed_over_grant_reports_handoff_sync(redis_url: str) -> None:
    """A waiter queued on Redis is handed the key by the holder's release: its wait, then
    ``handoff`` and ``acquire`` granted with the token the release issued."""
    events: list[LeaseEvent] = []
    with (
        LeaseManager.from_url(redis_url, prefix="ho") as holder,
        LeaseManager.from_url(redis_url, prefix="ho", on_event=events.append) as waiter,
    ):
        held = holder.acquire("h", ttl_ms=30_000).lease
        assert held is not None
        got: list[Any] = []
        thread = threading.Thread(
            target=lambda: got.append(waiter.acquire("h", ttl_ms=5_000, wait_ms=30_000))
        )
        thread.start()
        while not holder.backend.client.zcard("ho:{h}:waiters"):  # type: ignore[attr-defined]
            threading.Event().wait(0.01)  # until the waiter is queued (polling Redis)
        assert held.release()
        thread.join(60)
        lease = got[0].lease
        assert lease is not None and lease.fencing_token == 2
    kinds = _handoff_kinds(events, "h")
    assert kinds[-3:-2] == [("wait", "waited")]
    assert kinds[-2:] == [("handoff", "granted"), ("acquire", "granted")]
    assert {e.fencing_token for e in events[-2:]} == {2}


def test_a_handed_over_grant_reports_handoff_async(redis_url: str) -> None:
    events: list[LeaseEvent] = []

    async def main() -> None:
        async with (
            AsyncLeaseManager.from_url(redis_url, prefix="aho") as holder,
            AsyncLeaseManager.from_url(redis_url, prefix="aho", on_event=events.append) as waiter,
        ):
            held = (await holder.acquire("h", ttl_ms=30_000)).lease
            assert held is not None
            task = asyncio.ensure_future(waiter.acquire("h", ttl_ms=5_000, wait_ms=30_000))
            client = holder.backend.client  # type: ignore[attr-defined]
            while not await client.zcard("aho:{h}:waiters"):
                await asyncio.sleep(0.01)
            assert await held.release()
            result = await task
            assert result.lease is not None and result.lease.fencing_token == 2

    asyncio.run(main())
    kinds = _handoff_kinds(events, "h")
    assert kinds[-3:] == [("wait", "waited"), ("handoff", "granted"), ("acquire", "granted")]


def test_keep_alive_async_restored_lease(redis_url: str) -> None:
    hook = _Renewals(2)

    async def main() -> None:
        async with AsyncLeaseManager.from_url(redis_url, prefix="akr") as first:
            taken = (await first.acquire("r", ttl_ms=400)).lease
            assert taken is not None
            token, fencing = taken._state.owner_token, taken.fencing_token
            async with AsyncLeaseManager.from_url(redis_url, prefix="akr", on_event=hook) as second:
                restored = second.restore("r", token, ttl_ms=400)
                async with second.keep_alive(restored):
                    while not hook.seen.is_set():
                        await asyncio.sleep(0.05)
                    assert restored.fencing_token == fencing
                assert await second.inspect("r") is None

    asyncio.run(main())


def test_check_health_on_memory_and_sqlite_both_faces(tmp_path: Any) -> None:
    from fencedlease.backends import AsyncSqliteBackend, SqliteBackend

    for backend in (MemoryBackend(), SqliteBackend(str(tmp_path / "s.db"))):
        with LeaseManager(backend) as manager:
            report = manager.check_health()
            assert report.script_ms is None
            assert report.total_ms >= report.ping_ms >= 0
            assert manager.inspect("fencedlease-health-probe") is None  # nothing written

    async def main() -> None:
        for backend in (AsyncMemoryBackend(), AsyncSqliteBackend(str(tmp_path / "a.db"))):
            async with AsyncLeaseManager(backend) as manager:
                report = await manager.check_health()
                assert report.script_ms is None
                assert report.total_ms >= report.ping_ms >= 0

    asyncio.run(main())


def test_check_health_of_a_slow_store_is_a_timeout_both_faces() -> None:
    class Slow(MemoryBackend):
        def inspect(self, key: str) -> Any:
            threading.Event().wait(0.05)  # at least 50 ms: always over the 1 ms bound
            return super().inspect(key)

    class Stalled(AsyncMemoryBackend):
        async def inspect(self, key: str) -> Any:
            await asyncio.Event().wait()  # never answers

    with LeaseManager(Slow()) as manager, pytest.raises(BackendError) as info:
        manager.check_health(timeout_ms=1)
    assert info.value.timed_out
    assert "no answer within 1 ms" in str(info.value)

    async def main() -> None:
        async with AsyncLeaseManager(Stalled()) as manager:
            with pytest.raises(BackendError) as ainfo:
                await manager.check_health(timeout_ms=20)
            assert ainfo.value.timed_out
            assert "no answer within 20 ms" in str(ainfo.value)

    asyncio.run(main())
