"""SqliteBackend: processes racing on one file, the busy budget, the persisted counter, the shared
wall clock, and its asyncio twin."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fencedlease import BackendError, LeaseManager, ValidationError
from fencedlease._core.protocol import AcquireReply, owner_fingerprint
from fencedlease.backends import AsyncSqliteBackend, SqliteBackend
from fencedlease.testing import FakeClock

OWNER, OTHER = "owner-token-1", "owner-token-2"

# One racer: waits for the go file, then makes ATTEMPTS acquires of one key, each with a fresh owner
# token; every grant is logged as "<token> <start_ns> <end_ns>" (CLOCK_MONOTONIC is one clock for
# every process on Linux) before it is released. Each attempt follows a random pause of up to 1 ms
# outside the lease, or the process that just released would win nearly every time. The log is a
# plain file per process, not SQLite.
RACER = """
import os, random, sys, time
from fencedlease.backends import SqliteBackend

path, log_path, attempts, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
backend = SqliteBackend(path, prefix="race", busy_timeout_ms=60_000)
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.001)
with open(log_path, "w") as log:
    for attempt in range(attempts):
        owner = f"{os.getpid()}-{attempt}"
        time.sleep(random.random() / 1000)  # other work between attempts, as a worker would do
        reply = backend.acquire("job", owner, 60_000)
        if not reply.acquired:
            continue
        start = time.monotonic_ns()
        time.sleep(0)  # yield inside the critical section: a second holder would show up here
        end = time.monotonic_ns()
        log.write(f"{reply.fencing_token} {start} {end}\\n")
        if not backend.release("job", owner):
            raise SystemExit(f"release of token {reply.fencing_token} refused")
backend.close()
"""


def read_grants(path: Path) -> list[tuple[int, int, int]]:
    grants = []
    for line in path.read_text().splitlines():
        token, start, end = (int(field) for field in line.split())
        grants.append((token, start, end))
    return grants


@pytest.mark.skipif(sys.platform != "linux", reason="needs one CLOCK_MONOTONIC for all processes")
def test_two_processes_racing_1000_times_never_hold_at_once(tmp_path: Path) -> None:
    """Two processes each try 1,000 acquires of one key: no two grants overlap in time, and tokens
    are 1..n in grant order with no gap or repeat."""
    db, go = tmp_path / "leases.db", tmp_path / "go"
    SqliteBackend(db, prefix="race").close()  # schema made once, before the race
    logs = [tmp_path / "racer-0.log", tmp_path / "racer-1.log"]
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(db), str(log), "1000", str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for log in logs
    ]
    try:
        for racer in racers:
            assert racer.stdout is not None
            assert racer.stdout.readline().strip() == "ready"
        go.touch()
        for racer in racers:
            _, err = racer.communicate(timeout=100)
            assert racer.returncode == 0, err
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
    per_process = [read_grants(log) for log in logs]
    for grants in per_process:
        tokens = [token for token, _, _ in grants]
        assert tokens == sorted(set(tokens)), "a process saw its tokens go back or repeat"
    merged = sorted(
        (token, start, end, index)
        for index, grants in enumerate(per_process)
        for token, start, end in grants
    )
    assert [grant[0] for grant in merged] == list(range(1, len(merged) + 1))
    for (token, _, end, _), (next_token, next_start, _, _) in itertools.pairwise(merged):
        assert end < next_start, f"token {next_token} was granted while token {token} was held"
    handovers = sum(1 for a, b in itertools.pairwise(merged) if a[3] != b[3])
    assert handovers >= 1, "the key never passed between the processes: no race took place"
    assert SqliteBackend(db, prefix="race").inspect("job") is None


def hold_write_lock(path: Path) -> sqlite3.Connection:
    """Another connection holding the database's write lock (an open BEGIN IMMEDIATE)."""
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    return blocker


def test_busy_database_fails_clearly_only_after_the_budget(tmp_path: Path) -> None:
    """While another connection holds the write lock, acquire waits busy_timeout_ms, then raises
    BackendError naming the budget, with sqlite3's error as the cause, having changed nothing."""
    backend = SqliteBackend(tmp_path / "leases.db", busy_timeout_ms=300)
    blocker = hold_write_lock(tmp_path / "leases.db")
    started = time.monotonic()
    with pytest.raises(BackendError, match=r"stayed busy .*busy_timeout_ms=300") as info:
        backend.acquire("k", OWNER, 1_000)
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 2.3
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    with pytest.raises(BackendError, match="busy_timeout_ms=300"):
        backend.renew_many([("k", OWNER, 1_000)])
    blocker.rollback()
    assert backend.acquire("k", OWNER, 1_000) == AcquireReply(True, 1, 1_000)


def test_lock_released_within_the_budget_is_waited_for(tmp_path: Path) -> None:
    """A write lock released before the budget runs out costs a wait, not an error."""
    backend = SqliteBackend(tmp_path / "leases.db", busy_timeout_ms=10_000)
    blocker = hold_write_lock(tmp_path / "leases.db")
    timer = threading.Timer(0.2, blocker.rollback)
    timer.start()
    started = time.monotonic()
    try:
        assert backend.acquire("k", OWNER, 1_000) == AcquireReply(True, 1, 1_000)
    finally:
        timer.join()
    assert time.monotonic() - started >= 0.15


def test_readers_do_not_wait_for_a_writer(tmp_path: Path) -> None:
    """In WAL mode inspect answers at once while another connection holds the write lock."""
    clock = FakeClock()
    backend = SqliteBackend(tmp_path / "leases.db", clock=clock, busy_timeout_ms=30_000)
    backend.acquire("k", OWNER, 1_000)
    blocker = hold_write_lock(tmp_path / "leases.db")
    started = time.monotonic()
    info = backend.inspect("k")
    assert time.monotonic() - started < 10  # a reader waiting for the lock would take 30 s
    assert info is not None
    assert info.fencing_token == 1
    blocker.rollback()
    assert blocker.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_counter_survives_release_force_release_and_reopening(tmp_path: Path) -> None:
    """The fencing counter is a row of its own: kept through release, force_release and a new
    connection, so tokens never repeat."""
    path = tmp_path / "leases.db"
    backend = SqliteBackend(path)
    backend.acquire("k", OWNER, 1_000)
    backend.release("k", OWNER)
    backend.acquire("k", OWNER, 1_000)
    backend.force_release("k")
    backend.close()
    reopened = SqliteBackend(path)
    assert reopened.acquire("k", OTHER, 1_000).fencing_token == 3
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT prefix, key, last_token FROM fencedlease_fences").fetchall() == [
        ("fencedlease", "k", 3)
    ]


def test_expiry_is_read_on_the_shared_wall_clock(tmp_path: Path) -> None:
    """Two backends on one file judge expiry by their clocks' time(): a lease of 100 ms granted at
    wall time t is free for a backend whose clock reads t + 100 ms."""
    path = tmp_path / "leases.db"
    early, late = FakeClock(start_time=1_000.0), FakeClock(start_time=1_000.0)
    granting = SqliteBackend(path, clock=early)
    observing = SqliteBackend(path, clock=late)
    granting.acquire("k", OWNER, 100)
    late.advance(99)
    info = observing.inspect("k")
    assert info is not None
    assert info.ttl_ms == 1
    late.advance(1)
    assert observing.inspect("k") is None
    assert observing.acquire("k", OTHER, 100) == AcquireReply(True, 2, 100)
    assert granting.renew("k", OWNER, 100) == 0


def test_prefixes_share_a_file_without_meeting(tmp_path: Path) -> None:
    """Backends with different prefixes on one file have their own leases and counters."""
    path = tmp_path / "leases.db"
    one, two = SqliteBackend(path, prefix="one"), SqliteBackend(path, prefix="two")
    one.acquire("k", OWNER, 1_000)
    one.release("k", OWNER)
    one.acquire("k", OWNER, 1_000)
    assert two.acquire("k", OTHER, 1_000).fencing_token == 1
    one_info, two_info = one.inspect("k"), two.inspect("k")
    assert one_info is not None
    assert one_info.owner_fingerprint == owner_fingerprint(OWNER)
    assert two_info is not None
    assert two_info.owner_fingerprint == owner_fingerprint(OTHER)


def test_memory_database_is_private_to_the_backend() -> None:
    """path=":memory:" gives each backend its own empty database."""
    one, two = SqliteBackend(":memory:"), SqliteBackend(":memory:")
    one.acquire("k", OWNER, 1_000)
    assert two.inspect("k") is None
    assert two.acquire("k", OTHER, 1_000).fencing_token == 1


def test_backend_is_shared_by_threads(tmp_path: Path) -> None:
    """Eight threads race one backend for one key 50 times each: never two holders at once, and
    the tokens are 1..n."""
    backend = SqliteBackend(tmp_path / "leases.db", busy_timeout_ms=30_000)
    tokens: list[int] = []
    holders: list[str] = []
    overlaps: list[tuple[str, list[str]]] = []
    lock = threading.Lock()

    def race(name: str) -> None:
        for attempt in range(50):
            owner = f"{name}-{attempt}"
            reply = backend.acquire("k", owner, 60_000)
            if not reply.acquired:
                continue
            with lock:
                if holders:
                    overlaps.append((owner, list(holders)))
                holders.append(owner)
                tokens.append(reply.fencing_token)
            time.sleep(0)
            with lock:
                holders.remove(owner)
            backend.release("k", owner)

    threads = [threading.Thread(target=race, args=(f"t{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == []
    assert tokens
    assert sorted(tokens) == list(range(1, len(tokens) + 1))


def test_closed_backend_raises_backend_error(tmp_path: Path) -> None:
    """After close every operation raises BackendError; close is idempotent."""
    backend = SqliteBackend(tmp_path / "leases.db")
    backend.close()
    backend.close()
    with pytest.raises(BackendError, match="closed"):
        backend.acquire("k", OWNER, 1_000)


def test_unopenable_path_raises_backend_error(tmp_path: Path) -> None:
    """A path in a missing directory fails with BackendError, sqlite3's error as the cause."""
    with pytest.raises(BackendError) as info:
        SqliteBackend(tmp_path / "missing" / "leases.db")
    assert isinstance(info.value.__cause__, sqlite3.Error)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"path": ""}, "path"),
        ({"path": 3}, "path"),
        ({"prefix": ""}, "prefix"),
        ({"busy_timeout_ms": -1}, "busy_timeout_ms"),
        ({"busy_timeout_ms": 1.5}, "busy_timeout_ms"),
        ({"busy_timeout_ms": True}, "busy_timeout_ms"),
    ],
)
def test_bad_constructor_arguments_are_named(kwargs: dict[str, object], argument: str) -> None:
    """A bad path, prefix or busy_timeout_ms raises ValidationError naming it."""
    arguments: dict[str, object] = {"path": ":memory:", **kwargs}
    with pytest.raises(ValidationError) as info:
        SqliteBackend(**arguments)  # type: ignore[arg-type]
    assert info.value.argument == argument


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda b: b.acquire("", OWNER, 1), "key"),
        (lambda b: b.acquire("k", "", 1), "owner_token"),
        (lambda b: b.acquire("k", OWNER, 0), "ttl_ms"),
        (lambda b: b.renew("k", OWNER, True), "ttl_ms"),
        (lambda b: b.release(1, OWNER), "key"),
        (lambda b: b.inspect(""), "key"),
        (lambda b: b.force_release(None), "key"),
        (lambda b: b.acquire("\ud800", OWNER, 1), "key"),
    ],
)
def test_bad_operation_arguments_are_named(call: object, argument: str) -> None:
    """Each method refuses a bad key, owner token or ttl_ms with ValidationError naming it."""
    backend = SqliteBackend(":memory:")
    assert callable(call)
    with pytest.raises(ValidationError) as info:
        call(backend)
    assert info.value.argument == argument


def test_renew_many_puts_an_invalid_item_in_its_place() -> None:
    """A bad item in renew_many gets its ValidationError in place; the others are renewed."""
    backend = SqliteBackend(":memory:")
    backend.acquire("k", OWNER, 1_000)
    results = backend.renew_many([("k", OWNER, 0), ("k", OWNER, 1_000), ("", OWNER, 5)])
    assert isinstance(results[0], ValidationError)
    assert results[0].argument == "ttl_ms"
    assert results[1] == 1
    assert isinstance(results[2], ValidationError)
    assert results[2].argument == "key"


def test_manager_from_sqlite_file_shares_leases_between_managers(tmp_path: Path) -> None:
    """Two managers on one SQLite file see each other's leases, as two processes would."""
    url = f"sqlite:///{tmp_path / 'leases.db'}"
    with LeaseManager.from_url(url) as one, LeaseManager.from_url(url) as two:
        lease = one.acquire("job", ttl_ms=10_000).lease
        assert lease is not None
        assert lease.fencing_token == 1
        assert not two.acquire("job", ttl_ms=10_000).acquired
        lease.release()
        second = two.acquire("job", ttl_ms=10_000).lease
        assert second is not None
        assert second.fencing_token == 2


# -- the asyncio twin -----------------------------------------------------------------------------


def test_async_sqlite_backend_runs_the_same_store(tmp_path: Path) -> None:
    """AsyncSqliteBackend answers as the sync one does, on the same file."""

    async def main() -> None:
        clock = FakeClock()
        backend = AsyncSqliteBackend(tmp_path / "leases.db", clock=clock)
        assert backend.sync is None  # nothing opened yet: making it did no I/O
        assert await backend.acquire("k", OWNER, 100) == AcquireReply(True, 1, 100)
        assert await backend.acquire("k", OTHER, 100) == AcquireReply(False, 0, 100)
        assert await backend.renew("k", OWNER, 200) == 1
        assert await backend.renew_many([("k", OWNER, 300), ("k", OTHER, 300)]) == [1, 0]
        info = await backend.inspect("k")
        assert info is not None
        assert info.ttl_ms == 300
        assert await backend.release("k", OTHER) is False
        assert await backend.release("k", OWNER) is True
        await backend.acquire("k", OTHER, 100)
        assert await backend.force_release("k") is True
        assert await backend.inspect("k") is None
        await backend.close()
        with pytest.raises(BackendError, match="closed"):
            await backend.inspect("k")
        await AsyncSqliteBackend(tmp_path / "never-opened.db").close()
        assert not (tmp_path / "never-opened.db").exists()

    asyncio.run(main())


def test_async_busy_database_does_not_block_the_loop(tmp_path: Path) -> None:
    """While an acquire waits out a busy database on a worker thread, other tasks keep running;
    then it raises BackendError."""

    async def main() -> None:
        # 2 s: time for ten 10 ms ticks even on busy cores, if the loop is free to run them
        backend = AsyncSqliteBackend(tmp_path / "leases.db", busy_timeout_ms=2_000)
        assert await backend.inspect("k") is None  # opened (and its tables made) before the lock
        blocker = hold_write_lock(tmp_path / "leases.db")
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        with pytest.raises(BackendError, match="busy_timeout_ms=2000"):
            await backend.acquire("k", OWNER, 1_000)
        task.cancel()
        assert ticks >= 10
        blocker.rollback()
        await backend.close()

    asyncio.run(main())


def test_cancelled_async_acquire_finishes_before_the_cancel_lands(tmp_path: Path) -> None:
    """Cancelling an acquire that is waiting for the lock does not return until the acquire has
    finished, so a release sent next always comes after it."""

    async def main() -> None:
        backend = AsyncSqliteBackend(tmp_path / "leases.db", busy_timeout_ms=30_000)
        assert await backend.inspect("k") is None
        sync = backend.sync
        assert sync is not None
        entered = threading.Event()
        acquire = sync.acquire

        def spy(key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
            entered.set()
            return acquire(key, owner_token, ttl_ms)

        sync.acquire = spy  # type: ignore[method-assign]
        blocker = hold_write_lock(tmp_path / "leases.db")
        task = asyncio.create_task(backend.acquire("k", OWNER, 60_000))
        assert await asyncio.to_thread(entered.wait, 30)  # the thread waits for the lock
        task.cancel()
        await asyncio.sleep(0.05)
        assert not task.done()  # still waiting for the thread, not abandoning it
        blocker.rollback()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The acquire ran to completion; the caller's cleanup release now finds it.
        assert await backend.release("k", OWNER) is True
        await backend.close()

    asyncio.run(main())
