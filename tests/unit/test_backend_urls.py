"""backend_from_url / async_backend_from_url and LeaseManager.from_url: which backend each URL
makes, and which URLs are refused."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from fencedlease import LeaseManager, RedisBackend, ValidationError
from fencedlease._clock import SYSTEM_CLOCK
from fencedlease._urls import backend_from_url
from fencedlease.aio._urls import async_backend_from_url
from fencedlease.backends import (
    AsyncMemoryBackend,
    AsyncSqliteBackend,
    MemoryBackend,
    SqliteBackend,
)
from fencedlease.testing import FakeClock


def test_memory_url_makes_a_new_memory_backend_on_the_clock() -> None:
    """memory:// gives a fresh MemoryBackend reading the given clock."""
    clock = FakeClock()
    backend = backend_from_url("memory://", prefix="p", clock=clock)
    other = backend_from_url("memory://", prefix="p", clock=clock)
    assert isinstance(backend, MemoryBackend)
    assert isinstance(other, MemoryBackend)
    backend.acquire("k", "o", 10)
    assert other.inspect("k") is None
    clock.advance(10)
    assert backend.inspect("k") is None


def test_sqlite_url_with_three_slashes_is_relative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sqlite:///leases.db is leases.db in the working directory."""
    monkeypatch.chdir(tmp_path)
    backend = backend_from_url("sqlite:///sub%20dir.db", prefix="p", clock=SYSTEM_CLOCK)
    assert isinstance(backend, SqliteBackend)
    assert (backend.path, backend.prefix) == ("sub dir.db", "p")
    backend.close()
    assert (tmp_path / "sub dir.db").exists()


def test_sqlite_url_with_four_slashes_is_absolute(tmp_path: Path) -> None:
    """sqlite:////abs/path.db is the absolute path /abs/path.db; busy_timeout_ms from the query."""
    url = f"sqlite:///{tmp_path}/leases.db?busy_timeout_ms=250"
    assert url.startswith("sqlite:////")
    backend = backend_from_url(url, prefix="p", clock=SYSTEM_CLOCK)
    assert isinstance(backend, SqliteBackend)
    assert (backend.path, backend.busy_timeout_ms) == (f"{tmp_path}/leases.db", 250)
    assert os.path.isabs(backend.path)
    backend.close()


def test_sqlite_memory_url_is_private() -> None:
    """sqlite:///:memory: opens a private in-memory database; busy_timeout_ms as a keyword."""
    backend = backend_from_url(
        "sqlite:///:memory:", prefix="p", clock=SYSTEM_CLOCK, busy_timeout_ms=10
    )
    assert isinstance(backend, SqliteBackend)
    assert (backend.path, backend.busy_timeout_ms) == (":memory:", 10)
    assert backend.acquire("k", "o", 1_000).fencing_token == 1


def test_redis_url_makes_an_owning_redis_backend() -> None:
    """redis://, rediss:// and unix:// go to redis-py; no connection is made until a command."""
    for url in ("redis://localhost:1/0", "rediss://localhost:1", "unix:///tmp/none.sock?db=2"):
        backend = backend_from_url(url, prefix="app", clock=SYSTEM_CLOCK, socket_timeout=1)
        assert isinstance(backend, RedisBackend)
        assert backend.prefix == "app"
        backend.close()


@pytest.mark.parametrize(
    ("url", "kwargs", "argument"),
    [
        ("http://x", {}, "url"),
        ("localhost:6379", {}, "url"),
        ("", {}, "url"),
        ("memory://name", {}, "url"),
        ("memory://?x=1", {}, "url"),
        ("memory://", {"busy_timeout_ms": 1}, "busy_timeout_ms"),
        ("sqlite://", {}, "url"),
        ("sqlite:///", {}, "url"),
        ("sqlite://host/x.db", {}, "url"),
        ("sqlite:///x.db?mode=ro", {}, "mode"),
        ("sqlite:///x.db?busy_timeout_ms=soon", {}, "busy_timeout_ms"),
        ("sqlite:///x.db?busy_timeout_ms=5", {"busy_timeout_ms": 5}, "busy_timeout_ms"),
        ("sqlite:///x.db", {"timeout": 5}, "timeout"),
        ("sqlite:///x.db", {"busy_timeout_ms": -5}, "busy_timeout_ms"),
    ],
)
def test_bad_urls_and_options_are_named(
    url: str,
    kwargs: dict[str, object],
    argument: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unknown scheme, a malformed URL or an option the scheme does not take raises
    ValidationError naming it, from both faces."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValidationError) as info:
        backend_from_url(url, prefix="p", clock=SYSTEM_CLOCK, **kwargs)
    assert info.value.argument == argument
    with pytest.raises(ValidationError) as info:
        async_backend_from_url(url, prefix="p", clock=SYSTEM_CLOCK, **kwargs)
    assert info.value.argument == argument


def test_bad_prefix_is_named() -> None:
    """An empty prefix raises ValidationError naming prefix."""
    with pytest.raises(ValidationError) as info:
        backend_from_url("memory://", prefix="", clock=SYSTEM_CLOCK)
    assert info.value.argument == "prefix"


def test_async_urls_make_the_async_twins(tmp_path: Path) -> None:
    """The asyncio face makes AsyncMemoryBackend, AsyncSqliteBackend and an async Redis backend."""
    from fencedlease.aio._redis_backend import AsyncRedisBackend

    clock = FakeClock()
    memory = async_backend_from_url("memory://", prefix="p", clock=clock)
    sqlite = async_backend_from_url(f"sqlite:///{tmp_path}/a.db", prefix="p", clock=clock)
    redis_backend = async_backend_from_url("redis://localhost:1", prefix="p", clock=clock)
    assert isinstance(memory, AsyncMemoryBackend)
    assert isinstance(sqlite, AsyncSqliteBackend)
    assert isinstance(redis_backend, AsyncRedisBackend)

    async def main() -> None:
        assert (await memory.acquire("k", "o", 5)).fencing_token == 1
        assert (await sqlite.acquire("k", "o", 5)).fencing_token == 1
        await sqlite.close()
        await redis_backend.close()

    asyncio.run(main())


def test_manager_from_memory_url() -> None:
    """LeaseManager.from_url("memory://") works end to end on the manager's clock."""
    clock = FakeClock()
    with LeaseManager.from_url("memory://", clock=clock) as leases:
        assert isinstance(leases.backend, MemoryBackend)
        first = leases.acquire("job", ttl_ms=100).lease
        assert first is not None
        assert first.fencing_token == 1
        clock.advance(100)
        second = leases.acquire("job", ttl_ms=100).lease
        assert second is not None
        assert second.fencing_token == 2


def test_manager_from_redis_url_keeps_its_prefix() -> None:
    """LeaseManager.from_url still builds a RedisBackend with the prefix for redis:// URLs."""
    with LeaseManager.from_url("redis://localhost:1/0", prefix="app") as leases:
        assert isinstance(leases.backend, RedisBackend)
        assert leases.backend.prefix == "app"
